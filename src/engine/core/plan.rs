//! The core's delivery plans (design §5d): whether a rolling stamp may go out
//! now, and what was reported about the workloads held.
//!
//! [`Plans`] keeps the delivery settings of the workloads that have any and
//! the workloads held now, with what was reported for each; nothing that must
//! survive a restart. [`Plans::gate`] decides by the rules of
//! [`crate::delivery`], from a workload's settings, its pending fingerprint,
//! the wall-clock time and how the earlier-wave workloads it shares inputs
//! with stand (the core judges that: it knows their stamps and rollouts).

use std::collections::HashMap;

use jiff::Timestamp;
use tokio::time::Instant;

use crate::annotations::Delivery;
use crate::delivery::{self, Hold, Neighbours, Progress};
use crate::events::{Notice, Reason};
use crate::model::{Reference, WorkloadId};
use crate::window::{WallClock, Window};

/// One held workload: why, and the note last reported for it.
#[derive(Debug)]
struct Held {
    hold: Hold,
    note: String,
}

/// The core's delivery state. See the module docs.
pub(super) struct Plans {
    /// Settings of the workloads whose delivery is not the default.
    settings: HashMap<WorkloadId, Box<Delivery>>,
    held: HashMap<WorkloadId, Held>,
    /// Per failed workload, the pending fingerprint whose halt was reported.
    halts: HashMap<WorkloadId, String>,
    /// Whether every target has delivered its initial listing
    /// ([`Input::Listed`](super::Input::Listed)).
    listed: bool,
    /// `engine.window`.
    window: Option<Window>,
    clock: WallClock,
}

impl Plans {
    pub(super) fn new(window: Option<Window>, clock: WallClock) -> Self {
        Self {
            settings: HashMap::new(),
            held: HashMap::new(),
            halts: HashMap::new(),
            listed: false,
            window,
            clock,
        }
    }

    /// Keeps `id`'s settings (only when they are not the default).
    pub(super) fn set(&mut self, id: &WorkloadId, delivery: Delivery) {
        if delivery.is_default() {
            self.settings.remove(id);
        } else {
            self.settings.insert(id.clone(), Box::new(delivery));
        }
    }

    pub(super) fn forget(&mut self, id: &WorkloadId) {
        self.settings.remove(id);
        self.held.remove(id);
        self.halts.remove(id);
    }

    /// Every target has delivered its initial listing: the core knows every
    /// workload an earlier wave could be.
    pub(super) fn set_listed(&mut self) {
        self.listed = true;
    }

    pub(super) fn wave(&self, id: &WorkloadId) -> u32 {
        self.settings.get(id).map_or(0, |d| d.wave)
    }

    pub(super) fn is_held(&self, id: &WorkloadId) -> bool {
        self.held.contains_key(id)
    }

    /// Whether `id` may be stamped now ([`delivery::gate`]); `neighbours`:
    /// the workloads sharing an input with it, `progress` how each stands.
    pub(super) fn gate(
        &self,
        id: &WorkloadId,
        pending: &str,
        now: Instant,
        neighbours: &[WorkloadId],
        progress: impl Fn(&WorkloadId) -> Progress,
    ) -> Option<Hold> {
        let default = Delivery::default();
        let delivery = self.settings.get(id).map_or(&default, Box::as_ref);
        let neighbours = Neighbours {
            ids: neighbours,
            wave: |other: &WorkloadId| self.wave(other),
            progress,
        };
        let at = self.clock.at(now);
        delivery::gate(
            delivery,
            self.window.as_ref(),
            pending,
            self.listed,
            at,
            neighbours,
        )
    }

    /// Records `id` as held; returns the note when it is new (to report).
    fn hold(&mut self, id: &WorkloadId, hold: Hold, note: String) -> Option<String> {
        let unchanged = self.held.get(id).is_some_and(|held| held.note == note);
        let reported = (!unchanged).then(|| note.clone());
        self.held.insert(id.clone(), Held { hold, note });
        reported
    }

    /// Records `id` as held by `hold` of its `pending` config (`approve`:
    /// `<prefix>/approve`, which the note names); the first time with this
    /// note, logs it and (unless it is a wait for the listing) returns its
    /// Event: `ConfigPending` when someone must act, `ConfigWaiting` when time
    /// or an earlier wave releases it. `changed`: what the held config carries.
    pub(super) fn report(
        &mut self,
        id: &WorkloadId,
        hold: Hold,
        (pending, approve): (&str, &str),
        changed: Vec<Reference>,
    ) -> Option<Notice> {
        let event = if hold.needs_someone() {
            Reason::ConfigPending
        } else {
            Reason::ConfigWaiting
        };
        let (reason, announced) = (hold.reason(), hold.announced());
        let note = hold.note(pending, approve);
        let note = self.hold(id, hold, note)?;
        tracing::info!(workload = %id, reason, %note, "config pending");
        announced.then(|| Notice::new(id.clone(), event, note).with_changed(changed))
    }

    /// `id` is no longer held (stamped, in sync, or forgotten).
    pub(super) fn release(&mut self, id: &WorkloadId) {
        self.held.remove(id);
    }

    /// Whether a halt of `failed` at `fingerprint` is still to be reported;
    /// marks it reported.
    pub(super) fn report_halt(&mut self, failed: &WorkloadId, fingerprint: &str) -> bool {
        if self.halts.get(failed).is_some_and(|f| f == fingerprint) {
            return false;
        }
        self.halts.insert(failed.clone(), fingerprint.to_owned());
        true
    }

    /// The workloads an earlier wave holds.
    pub(super) fn held_by_waves(&self) -> Vec<WorkloadId> {
        self.held
            .iter()
            .filter(|(_, held)| held.hold.by_wave())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The workloads held until the initial listing completes.
    pub(super) fn held_for_listing(&self) -> Vec<WorkloadId> {
        self.held
            .iter()
            .filter(|(_, held)| held.hold == Hold::Listing)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Whether any workload is in a wave after the first.
    pub(super) fn has_waves(&self) -> bool {
        self.settings.values().any(|d| d.wave > 0)
    }

    /// Forgets what was held and reported: a new leader reports again what is
    /// still true; a follower holds nothing.
    pub(super) fn reset_reports(&mut self) {
        self.held.clear();
        self.halts.clear();
    }

    /// Held workloads per `nudge_held_workloads` reason.
    pub(super) fn counts(&self) -> impl Iterator<Item = (&'static str, usize)> + '_ {
        crate::engine::metrics::HELD_REASONS
            .into_iter()
            .map(|reason| {
                let count = self
                    .held
                    .values()
                    .filter(|held| held.hold.reason() == reason)
                    .count();
                (reason, count)
            })
    }

    /// The earlier-wave workloads the held workloads wait behind, as the
    /// gate last judged them, per `nudge_wave_rollouts` state: `rolling` (not
    /// done yet: being stamped or rolling out), `halted` (its rollout failed).
    /// Each is counted once, however many wait behind it; one held itself
    /// (its mode, its window, a wave before it) is not in flight and counts
    /// in `nudge_held_workloads` instead.
    pub(super) fn wave_rollouts(&self) -> [(&'static str, usize); 2] {
        let mut behind: HashMap<&WorkloadId, Progress> = HashMap::new();
        let holds = self.held.values().filter_map(|held| match &held.hold {
            Hold::Wave { behind, .. } | Hold::Halted { behind, .. } => Some(behind),
            _ => None,
        });
        let in_flight = holds
            .flatten()
            .filter(|(id, progress)| *progress == Progress::Failed || !self.is_held(id));
        for (id, progress) in in_flight {
            let seen = behind.entry(id).or_insert(*progress);
            if *progress == Progress::Failed {
                *seen = Progress::Failed;
            }
        }
        let count = |state| behind.values().filter(|p| **p == state).count();
        [
            (
                "rolling",
                count(Progress::NotStamped) + count(Progress::RollingOut),
            ),
            ("halted", count(Progress::Failed)),
        ]
    }

    /// The instant of wall-clock time `at`.
    pub(super) fn instant(&self, at: Timestamp, now: Instant) -> Instant {
        self.clock.instant(at, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::Behind;

    fn clock() -> WallClock {
        WallClock::anchored(Instant::now(), "2026-11-27T12:00:00Z".parse().unwrap())
    }

    fn id(name: &str) -> WorkloadId {
        WorkloadId::new(crate::model::WorkloadKind::deployment(), "ns", name)
    }

    #[test]
    fn each_rollout_later_waves_wait_behind_is_counted_once() {
        let mut plans = Plans::new(None, clock());
        let (canary, slow, eu, us) = (id("canary"), id("slow"), id("eu"), id("us"));
        let rolling = vec![(slow.clone(), Progress::RollingOut)];
        let halted = vec![
            (canary.clone(), Progress::Failed),
            (slow.clone(), Progress::RollingOut),
        ];
        let wave = |behind: &Behind| Hold::Wave {
            waiting: slow.clone(),
            wave: 0,
            behind: behind.clone(),
        };
        plans.hold(&eu, wave(&rolling), "eu".into());
        plans.hold(&us, wave(&rolling), "us".into());
        plans.hold(&id("notified"), Hold::Notify, "n".into());
        assert_eq!(plans.wave_rollouts(), [("rolling", 1), ("halted", 0)]);
        // A workload waited for that is held itself is not in flight.
        plans.hold(&slow, Hold::Notify, "slow".into());
        assert_eq!(plans.wave_rollouts(), [("rolling", 0), ("halted", 0)]);
        plans.release(&slow);
        let halt = Hold::Halted {
            failed: canary.clone(),
            wave: 0,
            behind: halted,
        };
        plans.hold(&us, halt, "us halted".into());
        assert_eq!(plans.wave_rollouts(), [("rolling", 1), ("halted", 1)]);
        plans.release(&eu);
        plans.release(&us);
        assert_eq!(plans.wave_rollouts(), [("rolling", 0), ("halted", 0)]);
    }

    #[test]
    fn notes_are_reported_once_until_they_change() {
        let mut plans = Plans::new(None, clock());
        let a = id("a");
        assert!(plans.hold(&a, Hold::Notify, "one".into()).is_some());
        assert!(plans.hold(&a, Hold::Notify, "one".into()).is_none());
        assert!(plans.hold(&a, Hold::Notify, "two".into()).is_some());
        assert_eq!(
            plans.counts().find(|(r, _)| *r == "notify"),
            Some(("notify", 1))
        );
        plans.release(&a);
        assert_eq!(
            plans.counts().find(|(r, _)| *r == "notify"),
            Some(("notify", 0))
        );
    }
}
