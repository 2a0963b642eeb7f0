//! `[engine]`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Problem, SnapshotMode, duration};

/// `[engine]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct EngineConfig {
    /// Changes to a workload's references within this window produce one stamp.
    #[serde(with = "duration")]
    pub debounce: Duration,
    /// A workload whose references keep changing is still stamped this long after
    /// the first unstamped change.
    #[serde(with = "duration")]
    pub max_delay: Duration,
    /// Global rate of stamps (token bucket refill per second).
    pub stamps_per_second: f64,
    /// Global burst of stamps (token bucket size).
    pub burst: u32,
    /// Minimum time between two stamps of the same workload.
    #[serde(with = "duration")]
    pub min_interval: Duration,
    /// Stamp a deleted required reference as `absent` instead of keeping the
    /// current stamp.
    pub stamp_on_delete: bool,
    /// How long a rollout nudge started may run before nudge reports it failed,
    /// for kinds without a progress deadline of their own (every kind but
    /// Deployment, whose `progressDeadlineSeconds` kube-controller-manager
    /// enforces); a CronJob's counts from the start of its run. Override per
    /// workload: `<prefix>/progress-deadline`.
    #[serde(with = "duration")]
    pub progress_deadline: Duration,
    /// Config revisions kept in each workload's `<prefix>/history` annotation.
    pub history_limit: usize,
    /// The default maintenance window of rolling stamps (design §5d), e.g.
    /// `"Mon-Fri 22:00-06:00 Europe/Berlin"`; `None` (an empty string in TOML):
    /// always open. Override per workload: `<prefix>/window`.
    #[serde(with = "crate::window::optional")]
    pub window: Option<crate::window::Window>,
    /// Which workloads take snapshots (design §5e): immutable copies of the
    /// ConfigMaps and Secrets their pod template references, one per config
    /// revision, so pods that start later still get their revision's config
    /// and a rollback takes the config back with the pods.
    pub snapshots: SnapshotMode,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            debounce: Duration::from_secs(5),
            max_delay: Duration::from_secs(60),
            stamps_per_second: 5.0,
            burst: 50,
            min_interval: Duration::from_secs(30),
            stamp_on_delete: false,
            progress_deadline: Duration::from_secs(600),
            history_limit: 10,
            window: None,
            snapshots: SnapshotMode::Off,
        }
    }
}

/// The most config revisions a workload's history may keep: annotations share
/// 256 KiB per object with everyone else's.
const MAX_HISTORY: usize = 50;

impl EngineConfig {
    pub(super) fn problem(&self) -> Problem {
        if !(self.stamps_per_second.is_finite() && self.stamps_per_second > 0.0) {
            return Some((
                "engine.stamps_per_second",
                format!("must be above 0, got {}", self.stamps_per_second),
            ));
        }
        if self.burst == 0 {
            return Some(("engine.burst", "must be at least 1".to_owned()));
        }
        if self.progress_deadline.is_zero() {
            return Some((
                "engine.progress_deadline",
                "must be above 0 (a rollout cannot complete in no time)".to_owned(),
            ));
        }
        if !(1..=MAX_HISTORY).contains(&self.history_limit) {
            return Some((
                "engine.history_limit",
                format!(
                    "must be between 1 and {MAX_HISTORY} (each revision is a few hundred bytes of a workload annotation), got {}",
                    self.history_limit
                ),
            ));
        }
        if self.max_delay < self.debounce {
            return Some((
                "engine.max_delay",
                format!(
                    "({}) must not be shorter than engine.debounce ({})",
                    duration::human(self.max_delay),
                    duration::human(self.debounce)
                ),
            ));
        }
        None
    }
}
