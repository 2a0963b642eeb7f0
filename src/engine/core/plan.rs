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
use super::{Core, Effect, WriteState, first_sight_values};
use crate::annotations::{Approval, Delivery, Mode};
use crate::events::{Notice, Reason};
use crate::model::{Reference, Rollout, WorkloadId};
use crate::stamp::{self, DesiredStamp, history};
use crate::window::{WallClock, Window};

/// The earlier-wave workloads a wave hold waits behind, each as it stood
/// ([`Progress::Waiting`] or [`Progress::Failed`]): what
/// `nudge_wave_rollouts` counts.
pub(super) type Behind = Vec<(WorkloadId, Progress)>;

/// Why a workload's rolling stamp waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Hold {
    /// A delivery annotation does not parse (fail closed).
    Invalid,
    /// `mode: notify`: never stamped.
    Notify,
    /// `mode: manual` without an approval of the pending config; `stale`:
    /// the fingerprint an approval names instead.
    Manual { stale: Option<String> },
    /// Not every target has delivered its initial listing since this process
    /// started (leading or not): an earlier wave sharing an input may not be
    /// known yet, so no wave after the first is judged.
    Listing,
    /// An earlier wave sharing an input has not completed.
    Wave {
        waiting: WorkloadId,
        wave: u32,
        behind: Behind,
    },
    /// An earlier wave sharing an input failed its rollout.
    Halted {
        failed: WorkloadId,
        wave: u32,
        behind: Behind,
    },
    /// Outside the maintenance window; `opens` at the next opening.
    Window {
        window: Box<Window>,
        opens: Option<Timestamp>,
    },
}

impl Hold {
    /// The `reason` label of `nudge_held_workloads`.
    pub(super) fn reason(&self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Notify => "notify",
            Self::Manual { .. } => "manual",
            Self::Listing | Self::Wave { .. } => "wave",
            Self::Halted { .. } => "halted",
            Self::Window { .. } => "window",
        }
    }

    /// The Event it is reported with: `ConfigPending` when someone must act,
    /// `ConfigWaiting` when time or an earlier wave releases it.
    pub(super) fn event(&self) -> Reason {
        match self {
            Self::Invalid | Self::Notify | Self::Manual { .. } => Reason::ConfigPending,
            Self::Listing | Self::Wave { .. } | Self::Halted { .. } | Self::Window { .. } => {
                Reason::ConfigWaiting
            }
        }
    }

    /// Whether it is worth an Event: not a wait for the initial listing,
    /// which normally ends within a second of a start and would otherwise
    /// put one Event on every later-wave workload at every restart. It is
    /// logged and counted (`nudge_held_workloads{reason="wave"}`), and `/ready`
    /// names the watch that has not listed.
    pub(super) fn announced(&self) -> bool {
        !matches!(self, Self::Listing)
    }

    /// Whether an earlier wave holds it (re-evaluated when one moves).
    fn by_wave(&self) -> bool {
        matches!(self, Self::Wave { .. } | Self::Halted { .. })
    }

    /// The `ConfigPending` or `ConfigWaiting` note: which config waits, and
    /// for what.
    /// `approve_key` is `<prefix>/approve`.
    pub(super) fn note(&self, pending: &str, approve_key: &str) -> String {
        match self {
            Self::Invalid => format!(
                "config {pending} is held: a delivery annotation is invalid (see the InvalidAnnotation Event)"
            ),
            Self::Notify => {
                format!(
                    "config {pending} is pending: mode notify, nudge does not roll this workload"
                )
            }
            Self::Manual { stale: None } => format!(
                "config {pending} is pending approval: set {approve_key}: {pending} (or latest)"
            ),
            Self::Manual {
                stale: Some(approved),
            } => format!(
                "config {pending} is pending approval: {approve_key} approves {approved}, which is not the pending config"
            ),
            Self::Listing => format!(
                "config {pending} waits for the earlier waves: not every workload kind has been listed yet"
            ),
            Self::Wave { waiting, wave, .. } => format!(
                "config {pending} waits for wave {wave}: {waiting} has not completed its rollout"
            ),
            Self::Halted { failed, wave, .. } => format!(
                "config {pending} is held: wave {wave} halted, the rollout of {failed} failed; a newer change releases it"
            ),
            Self::Window { window, opens } => {
                let opens = opens.map_or_else(
                    || "no opening within a week".to_owned(),
                    |at| format!("opens {}", window.in_zone(at)),
                );
                format!("config {pending} waits for the maintenance window \"{window}\": {opens}")
            }
        }
    }
}

/// How an earlier-wave workload stands for the waves after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Progress {
    /// In sync and its rollout complete (or a kind without rollout status).
    Done,
    /// Out of sync, being written, held, or rolling out.
    Waiting,
    /// In sync, and its rollout failed.
    Failed,
}

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

    /// Whether `id` may be stamped now; `neighbours`: the workloads sharing an
    /// input with it, `progress` how each stands.
    pub(super) fn gate(
        &self,
        id: &WorkloadId,
        pending: &str,
        now: Instant,
        neighbours: &[WorkloadId],
        progress: impl Fn(&WorkloadId) -> Progress,
    ) -> Option<Hold> {
        let delivery = self.settings.get(id).map(Box::as_ref);
        if let Some(delivery) = delivery {
            if let Some(hold) = mode_hold(delivery, pending) {
                return Some(hold);
            }
            if delivery.wave > 0 && !self.listed {
                return Some(Hold::Listing);
            }
            if delivery.wave > 0
                && let Some(hold) = self.wave_hold(delivery.wave, neighbours, progress)
            {
                return Some(hold);
            }
        }
        let window = match delivery {
            Some(delivery) => delivery.window.resolve(self.window.as_ref()),
            None => self.window.as_ref(),
        }?;
        let at = self.clock.at(now);
        let opens = window.next_opening(at);
        (opens != Some(at)).then(|| Hold::Window {
            window: Box::new(window.clone()),
            opens,
        })
    }

    /// A failed earlier wave halts; else one still in flight holds.
    fn wave_hold(
        &self,
        wave: u32,
        neighbours: &[WorkloadId],
        progress: impl Fn(&WorkloadId) -> Progress,
    ) -> Option<Hold> {
        let behind: Behind = neighbours
            .iter()
            .filter(|other| self.wave(other) < wave)
            .map(|other| (other.clone(), progress(other)))
            .filter(|(_, p)| *p != Progress::Done)
            .collect();
        let failed = behind.iter().find(|(_, p)| *p == Progress::Failed);
        if let Some((failed, _)) = failed {
            return Some(Hold::Halted {
                failed: failed.clone(),
                wave: self.wave(failed),
                behind,
            });
        }
        let (waiting, _) = behind.first()?;
        Some(Hold::Wave {
            waiting: waiting.clone(),
            wave: self.wave(waiting),
            behind,
        })
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
            ("rolling", count(Progress::Waiting)),
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

/// The hold `mode` (and an invalid annotation) puts on `pending`, if any.
fn mode_hold(delivery: &Delivery, pending: &str) -> Option<Hold> {
    if delivery.invalid {
        return Some(Hold::Invalid);
    }
    match (delivery.mode, &delivery.approve) {
        (Mode::Auto, _) => None,
        (Mode::Notify, _) => Some(Hold::Notify),
        (Mode::Manual, Some(approval)) if approval.approves(pending) => None,
        (Mode::Manual, Some(Approval::Fingerprint(approved))) => Some(Hold::Manual {
            stale: Some(approved.clone()),
        }),
        (Mode::Manual, _) => Some(Hold::Manual { stale: None }),
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
        let (reason, event) = (hold.reason(), hold.event());
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

    /// How `id` stands for the waves after it.
    fn progress(&self, id: &WorkloadId) -> Progress {
        let Some(record) = self.records.get(id) else {
            return Progress::Done;
        };
        let writing = matches!(record.write, WriteState::InFlight(_));
        if writing || self.plans.is_held(id) || self.rolls_pending(id) {
            return Progress::Waiting;
        }
        let follow = record.follow.as_deref();
        let recorded_failure = || {
            history::recorded_failure(
                &id.kind,
                record.rollout,
                record.last_failed,
                follow.is_some(),
            )
        };
        match record.rollout {
            Rollout::Failed { .. } => Progress::Failed,
            _ if follow.is_some_and(Follow::failed) => Progress::Failed,
            // Ended failed and recorded (nudge's own deadline): still failed.
            _ if recorded_failure() => Progress::Failed,
            Rollout::InProgress => Progress::Waiting,
            _ if follow.is_some_and(Follow::in_progress) => Progress::Waiting,
            Rollout::Complete | Rollout::Unknown => Progress::Done,
        }
    }

    /// Whether `id` has a change still to roll (its desired stamp changes its
    /// pod template).
    fn rolls_pending(&self, id: &WorkloadId) -> bool {
        let (Some(record), Some(specs)) = (self.records.get(id), self.graph.specs(id)) else {
            return false;
        };
        let store = self.store.read().unwrap_or_else(|e| e.into_inner());
        let desired = stamp::desired(specs, &*store, self.engine.stamp_on_delete);
        drop(store);
        let current = record.current.to_workload();
        let first_sight = first_sight_values(record, specs, self.engine.stamp_on_delete);
        stamp::diff_since(&current, specs, &desired, &first_sight)
            .is_some_and(|patch| stamp::changes_pod_template(&current, &patch))
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

    fn clock() -> WallClock {
        WallClock::anchored(Instant::now(), "2026-11-27T12:00:00Z".parse().unwrap())
    }

    fn id(name: &str) -> WorkloadId {
        WorkloadId::new(crate::model::WorkloadKind::deployment(), "ns", name)
    }

    fn delivery(f: impl FnOnce(&mut Delivery)) -> Delivery {
        let mut delivery = Delivery::default();
        f(&mut delivery);
        delivery
    }

    #[test]
    fn default_delivery_is_always_open() {
        let plans = Plans::new(None, clock());
        assert_eq!(
            plans.gate(&id("a"), "sha256-x", Instant::now(), &[], |_| {
                Progress::Failed
            }),
            None
        );
    }

    #[test]
    fn manual_opens_for_the_approved_fingerprint_only() {
        let mut plans = Plans::new(None, clock());
        let a = id("a");
        let approve = |approval: Option<Approval>| {
            delivery(|d| {
                d.mode = Mode::Manual;
                d.approve = approval;
            })
        };
        plans.set(&a, approve(None));
        let gate = |plans: &Plans| {
            plans.gate(&a, "sha256-aaaaaaaaaaaa", Instant::now(), &[], |_| {
                Progress::Done
            })
        };
        assert_eq!(gate(&plans), Some(Hold::Manual { stale: None }));
        plans.set(
            &a,
            approve(Some(Approval::Fingerprint("sha256-bbbbbbbbbbbb".into()))),
        );
        assert_eq!(
            gate(&plans),
            Some(Hold::Manual {
                stale: Some("sha256-bbbbbbbbbbbb".into())
            })
        );
        plans.set(
            &a,
            approve(Some(Approval::Fingerprint("sha256-aaaaaaaaaaaa".into()))),
        );
        assert_eq!(gate(&plans), None);
        plans.set(&a, approve(Some(Approval::Latest)));
        assert_eq!(gate(&plans), None);
    }

    #[test]
    fn a_failed_earlier_wave_halts_before_a_waiting_one_holds() {
        let mut plans = Plans::new(None, clock());
        plans.set_listed();
        let (first, second, third) = (id("first"), id("second"), id("third"));
        plans.set(&second, delivery(|d| d.wave = 1));
        plans.set(&third, delivery(|d| d.wave = 2));
        let all = [first.clone(), second.clone(), third.clone()];
        let progress = |waiting: &WorkloadId, failed: Option<&WorkloadId>| {
            let waiting = waiting.clone();
            let failed = failed.cloned();
            move |other: &WorkloadId| {
                if Some(other) == failed.as_ref() {
                    Progress::Failed
                } else if *other == waiting {
                    Progress::Waiting
                } else {
                    Progress::Done
                }
            }
        };
        let now = Instant::now();
        assert_eq!(
            plans.gate(&third, "f", now, &all, progress(&second, None)),
            Some(Hold::Wave {
                waiting: second.clone(),
                wave: 1,
                behind: vec![(second.clone(), Progress::Waiting)],
            })
        );
        assert_eq!(
            plans.gate(&third, "f", now, &all, progress(&second, Some(&first))),
            Some(Hold::Halted {
                failed: first.clone(),
                wave: 0,
                behind: vec![
                    (first.clone(), Progress::Failed),
                    (second.clone(), Progress::Waiting)
                ],
            })
        );
        // A later wave never holds an earlier one.
        assert_eq!(
            plans.gate(&second, "f", now, &all, progress(&third, None)),
            None
        );
        assert_eq!(
            plans.gate(&first, "f", now, &all, progress(&second, None)),
            None
        );
    }

    #[test]
    fn until_every_kind_is_listed_only_later_waves_wait_and_quietly() {
        let mut plans = Plans::new(None, clock());
        let (first, second) = (id("first"), id("second"));
        plans.set(&second, delivery(|d| d.wave = 1));
        let all = [first.clone(), second.clone()];
        let now = Instant::now();
        let held = plans.gate(&second, "f", now, &all, |_| Progress::Done);
        assert_eq!(held, Some(Hold::Listing));
        assert_eq!(held.as_ref().map(Hold::reason), Some("wave"));
        assert!(!held.is_some_and(|h| h.announced()), "no Event");
        assert_eq!(plans.gate(&first, "f", now, &all, |_| Progress::Done), None);
        plans.set_listed();
        assert_eq!(
            plans.gate(&second, "f", now, &all, |_| Progress::Done),
            None
        );
    }

    #[test]
    fn the_engine_window_applies_unless_the_workload_opts_out() {
        let window: Window = "Mon-Fri 22:00-06:00 UTC".parse().unwrap();
        let mut plans = Plans::new(Some(window), clock());
        let a = id("a");
        let held = plans.gate(&a, "f", Instant::now(), &[], |_| Progress::Done);
        let Some(Hold::Window { opens, .. }) = held else {
            panic!("{held:?}");
        };
        assert_eq!(opens, Some("2026-11-27T22:00:00Z".parse().unwrap()));
        plans.set(
            &a,
            delivery(|d| d.window = crate::annotations::WindowChoice::Always),
        );
        assert_eq!(
            plans.gate(&a, "f", Instant::now(), &[], |_| Progress::Done),
            None
        );
    }

    #[test]
    fn each_rollout_later_waves_wait_behind_is_counted_once() {
        let mut plans = Plans::new(None, clock());
        let (canary, slow, eu, us) = (id("canary"), id("slow"), id("eu"), id("us"));
        let rolling = vec![(slow.clone(), Progress::Waiting)];
        let halted = vec![
            (canary.clone(), Progress::Failed),
            (slow.clone(), Progress::Waiting),
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
