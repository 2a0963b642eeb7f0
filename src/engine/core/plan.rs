//! Progressive delivery (design §5d): whether a rolling stamp may go out now.
//!
//! [`Plans`] keeps the delivery settings of the workloads that have any and
//! the workloads held now, with what was reported for each; nothing that must
//! survive a restart. [`Plans::gate`] is the decision, pure: from a
//! workload's settings, its pending fingerprint, the wall-clock time and how
//! the earlier-wave workloads it shares inputs with stand.

use std::collections::{BTreeSet, HashMap};

use jiff::Timestamp;
use tokio::time::Instant;

use super::follow::Follow;
use super::{Core, Effect, WriteState, decide};
use crate::annotations::Delivery;
use crate::delivery::{self, Hold, Neighbours, Progress, Standing};
use crate::events::{Notice, Reason};
use crate::model::{Reference, WorkloadId};
use crate::stamp::{self, DesiredStamp};
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
    pub(super) fn hold(&mut self, id: &WorkloadId, hold: Hold, note: String) -> Option<String> {
        let unchanged = self.held.get(id).is_some_and(|held| held.note == note);
        let reported = (!unchanged).then(|| note.clone());
        self.held.insert(id.clone(), Held { hold, note });
        reported
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
    fn held_for_listing(&self) -> Vec<WorkloadId> {
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

    /// The wall-clock time of `now`.
    pub(super) fn wall_time(&self, now: Instant) -> Timestamp {
        self.clock.at(now)
    }
}

// === impl Core ===

impl Core {
    /// Whether `id`'s rolling stamp (to `desired`) waits; when it does, the
    /// hold is recorded, reported once per note, and a window's opening is
    /// timed.
    pub(super) fn held(
        &mut self,
        id: &WorkloadId,
        desired: &DesiredStamp,
        now: Instant,
        out: &mut Vec<Effect>,
    ) -> bool {
        let pending = desired.pending_fingerprint();
        let neighbours = if self.plans.wave(id) > 0 {
            self.neighbours(id)
        } else {
            Vec::new()
        };
        let hold = self
            .plans
            .gate(id, &pending, now, &neighbours, |other| self.progress(other));
        let Some(hold) = hold else {
            self.plans.release(id);
            return false;
        };
        if let Hold::Window {
            opens: Some(at), ..
        } = &hold
        {
            let delay = self.plans.instant(*at, now).saturating_duration_since(now);
            self.touch(id.clone(), now, Some(delay));
        }
        let changed: Vec<Reference> = self
            .records
            .get(id)
            .map(|record| record.pending.iter().cloned().collect())
            .unwrap_or_default();
        if let Hold::Halted { failed, .. } = &hold {
            self.report_halt(failed, &changed, out);
        }
        let note = hold.note(&pending, &self.scheme.approve());
        let event = if hold.needs_someone() {
            Reason::ConfigPending
        } else {
            Reason::ConfigWaiting
        };
        let reason = hold.reason();
        let announced = hold.announced();
        if let Some(note) = self.plans.hold(id, hold, note) {
            tracing::info!(workload = %id, reason, %note, "config pending");
            if announced {
                let notice = Notice::new(id.clone(), event, note).with_changed(changed);
                self.publish(out, notice);
            }
        }
        true
    }

    /// Every target has delivered its initial listing: the workloads held
    /// for it are judged against the earlier waves now.
    pub(super) fn on_listed(&mut self, now: Instant) {
        self.plans.set_listed();
        let waiting = self.plans.held_for_listing();
        if waiting.is_empty() {
            tracing::debug!("every workload kind listed");
        } else {
            tracing::info!(
                waiting = waiting.len(),
                "every workload kind listed: the later waves waiting for it are judged"
            );
        }
        for id in waiting {
            self.evaluate(&id, now);
        }
    }

    /// The other workloads sharing an input with `id`.
    fn neighbours(&self, id: &WorkloadId) -> Vec<WorkloadId> {
        let Some(specs) = self.graph.specs(id) else {
            return Vec::new();
        };
        let shared: BTreeSet<&WorkloadId> = specs
            .iter()
            .flat_map(|spec| &spec.inputs)
            .flat_map(|input| self.graph.dependents(&input.tracked))
            .filter(|other| *other != id)
            .collect();
        shared.into_iter().cloned().collect()
    }

    /// How `id` stands for the waves after it ([`delivery::progress`]).
    fn progress(&self, id: &WorkloadId) -> Progress {
        let Some(record) = self.records.get(id) else {
            return Progress::Done;
        };
        let writing = matches!(record.write, WriteState::InFlight(_));
        let standing = Standing {
            kind: &id.kind,
            not_stamped: writing || self.plans.is_held(id) || self.rolls_pending(id),
            rollout: record.rollout,
            followed: Follow::followed(record.follow.as_deref()),
            last_failed: record.last_failed,
        };
        delivery::progress(&standing)
    }

    /// Whether `id` has a change still to roll (its desired stamp changes its
    /// pod template).
    fn rolls_pending(&self, id: &WorkloadId) -> bool {
        let (Some(record), Some(specs)) = (self.records.get(id), self.graph.specs(id)) else {
            return false;
        };
        decide(record, specs, &self.store, self.engine.stamp_on_delete)
            .1
            .rolls
    }

    /// One `WavesHalted` per failed workload and stamped config: it names
    /// every later-wave workload it holds and the change they wait to carry.
    fn report_halt(&mut self, failed: &WorkloadId, changed: &[Reference], out: &mut Vec<Effect>) {
        let Some(specs) = self.graph.specs(failed) else {
            return;
        };
        let store = self.store.read().unwrap_or_else(|e| e.into_inner());
        let fingerprint =
            stamp::desired(specs, &*store, self.engine.stamp_on_delete).pending_fingerprint();
        drop(store);
        if !self.plans.report_halt(failed, &fingerprint) {
            return;
        }
        let wave = self.plans.wave(failed);
        let held: Vec<String> = self
            .neighbours(failed)
            .into_iter()
            .filter(|other| self.plans.wave(other) > wave && self.rolls_pending(other))
            .map(|other| format!("{other} (wave {})", self.plans.wave(&other)))
            .collect();
        let refs: Vec<String> = changed.iter().map(ToString::to_string).collect();
        let note = format!(
            "the rollout of config {fingerprint} (wave {wave}) failed; {} changed; held: {}",
            if refs.is_empty() {
                "config".to_owned()
            } else {
                refs.join(", ")
            },
            held.join(", ")
        );
        tracing::warn!(workload = %failed, %note, "waves halted");
        let notice =
            Notice::new(failed.clone(), Reason::WavesHalted, note).with_changed(changed.to_vec());
        self.publish(out, notice);
    }

    /// An earlier wave completed or failed: the workloads it held decide again.
    pub(super) fn reevaluate_waves(&mut self, now: Instant) {
        if !self.plans.has_waves() {
            return;
        }
        for id in self.plans.held_by_waves() {
            self.evaluate(&id, now);
        }
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
