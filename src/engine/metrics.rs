//! The engine's metrics, registered by the engine itself into the registry it is
//! handed: stamp decisions, stamp latency, the size of what it tracks, and the
//! work it has still to do.

use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::model::{SourceName, WorkloadKind};

/// Upper bounds (seconds) of the stamp latency buckets: the debounce window
/// (default 5 s) and the ceiling (default 60 s) sit inside the range.
const LATENCY_BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// How one stamp decision ended (`result` label of `nudge_stamps_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StampResult {
    /// The stamp was written.
    Applied,
    /// Writing failed with a retryable error (conflict, 5xx, timeout); it is retried.
    Retried,
    /// The API server refused the stamp for good (403, 422, …).
    Failed,
    /// The workload was deleted before the stamp could be written.
    Gone,
    /// This replica is not the leader, so it did not write; the leader does.
    SkippedFollower,
}

impl StampResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Retried => "retried",
            Self::Failed => "failed",
            Self::Gone => "gone",
            Self::SkippedFollower => "skipped_follower",
        }
    }
}

impl EncodeLabelValue for StampResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StampLabels {
    /// The workload kind in lower case (configured kinds: low cardinality).
    kind: String,
    /// A configured source name.
    source: String,
    result: StampResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RolloutLabels {
    /// The workload kind in lower case.
    kind: String,
    /// A configured source name (the source of a change the rollout carries;
    /// `workload` when the workload itself was new or edited).
    source: String,
    /// `started`, `complete`, `failed`, `superseded`.
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RolloutDurationLabels {
    kind: String,
    /// `complete`, `failed`, `superseded`.
    outcome: &'static str,
}

/// Rollout durations: seconds to an hour.
const ROLLOUT_BUCKETS: [f64; 10] = [
    5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AnnotationErrorLabels {
    /// The workload kind in lower case.
    kind: String,
    /// `AnnotationError::category()` (a fixed set).
    category: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct HeldLabels {
    /// Why rolling config waits: `notify`, `manual`, `window`, `wave`,
    /// `halted`, `invalid` (design §5d).
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WaveLabels {
    /// How an earlier-wave rollout that later waves wait for stands:
    /// `rolling`, `halted` (design §5d).
    state: &'static str,
}

/// The states of `nudge_wave_rollouts`, every one exported (0 included).
pub(crate) const WAVE_STATES: [&str; 2] = ["rolling", "halted"];

/// The reasons of `nudge_held_workloads`, every one exported (0 included).
pub(crate) const HELD_REASONS: [&str; 7] = [
    "notify", "manual", "window", "wave", "halted", "invalid", "rollback",
];

/// The engine's metrics. Clones share the series.
#[derive(Debug, Clone)]
pub struct EngineMetrics {
    stamps: Family<StampLabels, Counter>,
    stamp_latency: Histogram,
    tracked_workloads: Gauge,
    tracked_references: Gauge,
    queue_depth: Gauge,
    /// Queued plus in flight, set as one value: a scrape reads gauges one after
    /// another, so two gauges could show 0 and 0 while a finished write requeues
    /// its workload between the two reads.
    outstanding: Gauge,
    events_dropped: Counter,
    annotation_errors: Family<AnnotationErrorLabels, Counter>,
    rollouts: Family<RolloutLabels, Counter>,
    rollout_duration: Family<RolloutDurationLabels, Histogram>,
    held: Family<HeldLabels, Gauge>,
    wave_rollouts: Family<WaveLabels, Gauge>,
    /// The series of `held` and `wave_rollouts`, one per label value (in the
    /// order of [`HELD_REASONS`] and [`WAVE_STATES`]): the core sets them after
    /// every input, and a family's lookup hashes its labels under a lock.
    held_series: [Gauge; HELD_REASONS.len()],
    wave_series: [Gauge; WAVE_STATES.len()],
}

impl Default for EngineMetrics {
    /// Metrics that are kept but not exported (tests, embedders without a registry).
    fn default() -> Self {
        let held = Family::<HeldLabels, Gauge>::default();
        let wave_rollouts = Family::<WaveLabels, Gauge>::default();
        let held_series =
            HELD_REASONS.map(|reason| held.get_or_create(&HeldLabels { reason }).clone());
        let wave_series =
            WAVE_STATES.map(|state| wave_rollouts.get_or_create(&WaveLabels { state }).clone());
        Self {
            stamps: Family::default(),
            stamp_latency: Histogram::new(LATENCY_BUCKETS),
            tracked_workloads: Gauge::default(),
            tracked_references: Gauge::default(),
            queue_depth: Gauge::default(),
            outstanding: Gauge::default(),
            events_dropped: Counter::default(),
            annotation_errors: Family::default(),
            rollouts: Family::default(),
            rollout_duration: Family::new_with_constructor(|| Histogram::new(ROLLOUT_BUCKETS)),
            held,
            wave_rollouts,
            held_series,
            wave_series,
        }
    }
}

impl EngineMetrics {
    /// Metrics registered into `registry` (nudge's root registry:
    /// `nudge_stamps_total`, `nudge_stamp_latency_seconds`, `nudge_tracked_workloads`,
    /// `nudge_tracked_references`, `nudge_debounce_queue_depth`,
    /// `nudge_stamps_outstanding`, `nudge_events_dropped_total`,
    /// `nudge_annotation_errors_total`, `nudge_rollouts_total`,
    /// `nudge_rollout_duration_seconds`, `nudge_held_workloads`,
    /// `nudge_wave_rollouts`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "rollouts",
            "Rollouts nudge started, and how they ended, by workload kind, source of the change and outcome",
            metrics.rollouts.clone(),
        );
        registry.register_with_unit(
            "rollout_duration",
            "Time from nudge's stamp to the end of the rollout it started, by workload kind and outcome",
            Unit::Seconds,
            metrics.rollout_duration.clone(),
        );
        registry.register(
            "stamps",
            "Stamp decisions by workload kind, source of the change and result",
            metrics.stamps.clone(),
        );
        registry.register_with_unit(
            "stamp_latency",
            "Time from a source change being observed to the stamp being written",
            Unit::Seconds,
            metrics.stamp_latency.clone(),
        );
        registry.register(
            "tracked_workloads",
            "Workloads with at least one tracked reference",
            metrics.tracked_workloads.clone(),
        );
        registry.register(
            "tracked_references",
            "Distinct references being watched",
            metrics.tracked_references.clone(),
        );
        registry.register(
            "debounce_queue_depth",
            "Workloads waiting for their debounce window or for pacing",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "stamps_outstanding",
            "Workloads queued (debounce, pacing, retry, an input not yet known) or being written; 0 when every change seen is written or decided against",
            metrics.outstanding.clone(),
        );
        registry.register(
            "events_dropped",
            "Events (and the notifications made from them) dropped because the publisher fell behind",
            metrics.events_dropped.clone(),
        );
        registry.register(
            "held_workloads",
            "Workloads whose changed config waits (design §5d), by reason: notify, manual, window, wave (an earlier wave in flight), halted (an earlier wave failed), invalid",
            metrics.held.clone(),
        );
        registry.register(
            "wave_rollouts",
            "Rollouts of an earlier wave that later-wave workloads wait for now (design §5d), each counted once, by state: rolling (not done yet), halted (failed: the later waves are halted until a newer change)",
            metrics.wave_rollouts.clone(),
        );
        registry.register(
            "annotation_errors",
            "Invalid workload annotations by workload kind and error category, each counted when first reported",
            metrics.annotation_errors.clone(),
        );
        metrics
    }

    /// An invalid annotation of category `category` on a workload of `kind` was
    /// reported (once per distinct error, when it first appears).
    pub fn annotation_error(&self, kind: &WorkloadKind, category: &'static str) {
        self.annotation_errors
            .get_or_create(&AnnotationErrorLabels {
                kind: kind.label().to_owned(),
                category,
            })
            .inc();
    }

    /// Invalid annotations reported so far with these labels.
    pub fn annotation_errors(&self, kind: &WorkloadKind, category: &'static str) -> u64 {
        self.annotation_errors
            .get_or_create(&AnnotationErrorLabels {
                kind: kind.label().to_owned(),
                category,
            })
            .get()
    }

    /// A rollout of a workload of `kind` carrying changes of `sources` started
    /// or ended (`outcome`).
    pub fn rollout(&self, kind: &WorkloadKind, sources: &[&str], outcome: &'static str) {
        let sources = if sources.is_empty() {
            &["workload"][..]
        } else {
            sources
        };
        for source in sources {
            self.rollouts
                .get_or_create(&RolloutLabels {
                    kind: kind.label().to_owned(),
                    source: (*source).to_owned(),
                    outcome,
                })
                .inc();
        }
    }

    /// Rollouts counted so far with these labels.
    pub fn rollouts(&self, kind: &WorkloadKind, source: &str, outcome: &'static str) -> u64 {
        self.rollouts
            .get_or_create(&RolloutLabels {
                kind: kind.label().to_owned(),
                source: source.to_owned(),
                outcome,
            })
            .get()
    }

    /// A rollout of a workload of `kind` ended (`outcome`) after `took`.
    pub fn rollout_ended(&self, kind: &WorkloadKind, outcome: &'static str, took: Duration) {
        self.rollout_duration
            .get_or_create(&RolloutDurationLabels {
                kind: kind.label().to_owned(),
                outcome,
            })
            .observe(took.as_secs_f64());
    }

    /// Sets how many workloads are held for `reason`.
    pub(crate) fn set_held(&self, reason: &'static str, count: usize) {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        if let Some(at) = HELD_REASONS.iter().position(|r| *r == reason) {
            self.held_series[at].set(count);
        }
    }

    /// Workloads held for `reason` now.
    pub fn held(&self, reason: &'static str) -> i64 {
        self.held.get_or_create(&HeldLabels { reason }).get()
    }

    /// Sets how many earlier-wave rollouts later waves wait for, in `state`.
    pub(crate) fn set_wave_rollouts(&self, state: &'static str, count: usize) {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        if let Some(at) = WAVE_STATES.iter().position(|s| *s == state) {
            self.wave_series[at].set(count);
        }
    }

    /// Earlier-wave rollouts later waves wait for now, in `state`.
    pub fn wave_rollouts(&self, state: &'static str) -> i64 {
        self.wave_rollouts
            .get_or_create(&WaveLabels { state })
            .get()
    }

    /// An Event was dropped: its queue was full.
    pub fn event_dropped(&self) {
        self.events_dropped.inc();
    }

    /// A stamp decision for a workload of `kind` whose change came from `source`.
    pub fn stamp(&self, kind: &WorkloadKind, source: &SourceName, result: StampResult) {
        self.stamps
            .get_or_create(&StampLabels {
                kind: kind.label().to_owned(),
                source: source.as_str().to_owned(),
                result,
            })
            .inc();
    }

    /// Stamp decisions so far with these labels.
    pub fn stamps(&self, kind: &WorkloadKind, source: &SourceName, result: StampResult) -> u64 {
        self.stamps
            .get_or_create(&StampLabels {
                kind: kind.label().to_owned(),
                source: source.as_str().to_owned(),
                result,
            })
            .get()
    }

    /// A stamp was written `latency` after the change that caused it was observed.
    pub fn stamp_latency(&self, latency: Duration) {
        self.stamp_latency.observe(latency.as_secs_f64());
    }

    /// The dependency graph's size, the queue's depth and the writes in flight,
    /// after each input the core handled.
    pub fn set_gauges(&self, workloads: usize, references: usize, queue: usize, writes: usize) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.tracked_workloads.set(gauge(workloads));
        self.tracked_references.set(gauge(references));
        self.queue_depth.set(gauge(queue));
        self.outstanding.set(gauge(queue.saturating_add(writes)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn stamps_are_labelled_with_kind_source_and_result() {
        let mut registry = Registry::with_prefix("nudge");
        let metrics = EngineMetrics::register(&mut registry);
        let kind = WorkloadKind::stateful_set();
        for _ in 0..2 {
            metrics.stamp(
                &kind,
                &SourceName::configmap(),
                StampResult::SkippedFollower,
            );
        }
        let text = encode(&registry);
        assert!(
            text.contains(r#"nudge_stamps_total{kind="statefulset",source="configmap",result="skipped_follower"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn latency_lands_in_the_right_bucket_and_gauges_keep_the_last_value() {
        let mut registry = Registry::with_prefix("nudge");
        let metrics = EngineMetrics::register(&mut registry);
        metrics.stamp_latency(Duration::from_millis(5300));
        metrics.set_gauges(3, 7, 2, 1);
        let text = encode(&registry);
        assert!(text.contains(r#"nudge_stamp_latency_seconds_bucket{le="5.0"} 0"#));
        assert!(text.contains(r#"nudge_stamp_latency_seconds_bucket{le="10.0"} 1"#));
        assert!(text.contains("# UNIT nudge_stamp_latency_seconds seconds"));
        assert!(text.contains("nudge_tracked_workloads 3"));
        assert!(text.contains("nudge_tracked_references 7"));
        assert!(text.contains("nudge_debounce_queue_depth 2"));
        assert!(text.contains("nudge_stamps_outstanding 3"));
        assert!(text.contains("nudge_events_dropped_total 0"));
    }

    #[test]
    fn annotation_errors_are_labelled_with_kind_and_category() {
        let mut registry = Registry::with_prefix("nudge");
        let metrics = EngineMetrics::register(&mut registry);
        metrics.annotation_error(&WorkloadKind::deployment(), "bad_reference");
        let text = encode(&registry);
        assert!(
            text.contains(
                r#"nudge_annotation_errors_total{kind="deployment",category="bad_reference"} 1"#
            ),
            "{text}"
        );
        assert_eq!(
            metrics.annotation_errors(&WorkloadKind::deployment(), "bad_reference"),
            1
        );
    }
}
