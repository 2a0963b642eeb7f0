//! What the core keeps per workload about its stamps (design §5): the current
//! values of its outputs, what changed since the last stamp, the write in
//! flight, what was reported, and what nudge first saw of an output still to
//! adopt. Plain data and the small decisions that read only it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::RwLock;
use std::time::Duration;

use tokio::time::Instant;

use super::follow::{Related, Revisions};
use crate::annotations::Dependencies;
use crate::fingerprint::Observation;
use crate::model::{
    Output, Reference, Rollout, SourceName, StampSpec, Tracked, Workload, WorkloadId,
};
use crate::outcome::history::Revision;
use crate::rate::Backoff;
use crate::snapshot::{self, RecordedRevision, Snapshot, Verdict};
use crate::stamp::{
    self, CurrentOutputs, Decision, FingerprintLookup, FingerprintStore, StampPatch,
};

/// First retry delay after a failed stamp; doubles (with jitter) up to
/// [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

/// Everything the core knows about one workload.
pub(super) struct Record {
    /// The current values of its outputs (not the whole pod template).
    pub(super) current: CurrentOutputs,
    /// The whole workload, kept only under a namespace selector: a workload whose
    /// namespace leaves the selection is parked, and coming back needs all of it.
    pub(super) full: Option<Box<Workload>>,
    /// The workload's own timing annotations; `None` (most workloads): none.
    pub(super) timing: Option<Box<Timing>>,
    pub(super) rollout: Rollout,
    /// References whose observation changed since the last stamp.
    pub(super) pending: Pending,
    /// When the first change not yet stamped was observed.
    pub(super) observed_at: Option<Instant>,
    pub(super) write: WriteState,
    /// Set while writes fail and are retried.
    pub(super) retry: Option<Box<Backoff>>,
    /// Since when a due stamp has waited for an input no source has reported yet.
    pub(super) unknown_since: Option<Instant>,
    pub(super) last_stamp: Option<Instant>,
    /// What was last reported (boxed: records are many, reports rare; this
    /// keeps a record within 256 bytes, one allocator size class).
    #[expect(
        clippy::box_collection,
        reason = "8 bytes instead of 24 in every record"
    )]
    pub(super) reported_missing: Option<Box<BTreeSet<Reference>>>,
    /// The invalid annotations last reported; `None`: none (boxed alike).
    #[expect(
        clippy::box_collection,
        reason = "8 bytes instead of 16 in every record"
    )]
    pub(super) reported_invalid: Option<Box<Vec<String>>>,
    /// While the workload has an output still to adopt: its inputs as first
    /// seen (see [`FirstSight`]).
    pub(super) first_sight: Option<Box<FirstSight>>,
    /// The revision (etcd's, in `resourceVersion`) of the workload as nudge's
    /// last write left it; 0: unknown.
    pub(super) written: u64,
    /// Its config revisions (see [`Revisions`]).
    pub(super) revisions: Revisions,
}

/// The references whose observation changed since a workload's last stamp:
/// empty in nearly every record, so 8 bytes until a change arrives (which
/// keeps a record within a 192-byte allocation).
#[derive(Debug, Default)]
#[expect(
    clippy::box_collection,
    reason = "8 bytes instead of 24 in every record"
)]
pub(super) struct Pending(Option<Box<BTreeSet<Reference>>>);

impl Pending {
    pub(super) fn insert(&mut self, reference: Reference) {
        self.0.get_or_insert_default().insert(reference);
    }

    pub(super) fn contains(&self, reference: &Reference) -> bool {
        self.0.as_ref().is_some_and(|set| set.contains(reference))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|set| set.is_empty())
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Reference> {
        self.0.iter().flat_map(|set| set.iter())
    }

    /// Everything pending, leaving nothing (and no allocation) behind.
    pub(super) fn take(&mut self) -> BTreeSet<Reference> {
        self.0.take().map(|set| *set).unwrap_or_default()
    }
}

/// What the core keeps of a snapshotting workload, read from its
/// annotations at each event (design §5e); kept beside the records, not in
/// them, so that a workload without snapshots pays nothing for it.
#[derive(Debug, Default)]
pub(super) struct SnapshotState {
    /// Each revision of its history (and the rollout in flight) with the
    /// snapshot it wrote and what the sources said then.
    pub(super) history: Vec<RecordedRevision>,
    /// `<prefix>/rollback-to`.
    pub(super) rollback_to: Option<u32>,
    /// Its uid as watched: the owner of the copies a stamp makes, so the
    /// driver need not read the workload for it.
    pub(super) uid: Option<String>,
}

impl SnapshotState {
    /// The history of `workload` as stored now, from its `(history,
    /// rollout marker)` annotations.
    pub(super) fn refresh(&mut self, workload: &Workload, (history, rollout): (&str, &str)) {
        let read = |key: &str| workload.annotations.get(key).map(String::as_str);
        self.history = crate::outcome::history::recorded_snapshots(read(history), read(rollout));
    }

    /// Which snapshot the template of `current` (whose snapshot is `output`)
    /// should be at, the sources making `desired` ([`snapshot::judge`]).
    pub(super) fn verdict(
        &self,
        current: &Workload,
        desired: &stamp::DesiredStamp,
        output: &Output,
    ) -> Verdict {
        let parse = |value: Option<&str>| {
            value
                .and_then(|v| Snapshot::parse(v).ok())
                .unwrap_or_default()
        };
        let Some(wanted) = desired.values.get(output) else {
            // Not decided (an input unknown, a required one missing): the
            // sources' stamp waits anyway.
            return Verdict::Follow;
        };
        let template = parse(stamp::current(current, output).as_deref());
        snapshot::judge(
            &template,
            &parse(Some(wanted)),
            &desired.pending_fingerprint(),
            &self.history,
            self.rollback_to,
        )
    }

    /// The decision that moves the template of `current` to the snapshot
    /// `rollback-to` holds it at, when it is not there yet.
    pub(super) fn restoring(
        &self,
        current: &Workload,
        specs: &[StampSpec],
        desired: &stamp::DesiredStamp,
        output: &Output,
    ) -> Option<Decision> {
        self.rollback_to?;
        let Verdict::Pinned { snapshot, .. } = self.verdict(current, desired, output) else {
            return None;
        };
        let pinned = stamp::pinned(current, specs, &snapshot.to_annotation());
        pinned.patch.is_some().then_some(pinned)
    }
}

impl Record {
    /// A record of a workload first seen with outputs `current`.
    pub(super) fn new(current: CurrentOutputs) -> Self {
        Self {
            current,
            full: None,
            timing: None,
            rollout: Rollout::Unknown,
            pending: Pending::default(),
            observed_at: None,
            write: WriteState::Idle,
            retry: None,
            unknown_since: None,
            last_stamp: None,
            reported_missing: None,
            reported_invalid: None,
            first_sight: None,
            written: 0,
            revisions: Revisions::default(),
        }
    }

    pub(super) fn timing(&self) -> Timing {
        self.timing.as_deref().copied().unwrap_or_default()
    }

    /// nudge's own progress deadline for its rollouts: its annotation's, else
    /// `default` (`engine.progress_deadline`).
    pub(super) fn progress_deadline(&self, default: Duration) -> Duration {
        self.timing().progress_deadline.unwrap_or(default)
    }

    pub(super) fn writing(&self) -> bool {
        matches!(self.write, WriteState::InFlight(_))
    }

    /// Whether it still has `reference`'s change to write: pending, or in a
    /// write in flight (which a failure puts back).
    pub(super) fn carries(&self, reference: &Reference) -> bool {
        self.pending.contains(reference)
            || matches!(&self.write, WriteState::InFlight(write) if write.changed.contains(reference))
    }

    /// The stamp decision on it ([`stamp::decide`]) from the fingerprints in
    /// `store` and what it first saw, with the workload as the core knows it.
    pub(super) fn decide(
        &self,
        specs: &[StampSpec],
        store: &RwLock<FingerprintStore>,
        stamp_on_delete: bool,
    ) -> (Workload, Decision) {
        let current = self.current.to_workload();
        let first_sight = self.first_sight_values(specs, stamp_on_delete);
        let store = store.read().unwrap_or_else(|e| e.into_inner());
        let decision = stamp::decide(&current, specs, &*store, &first_sight, stamp_on_delete);
        (current, decision)
    }

    /// The values its outputs had when nudge first saw it, while it has an
    /// output still to adopt; empty otherwise.
    fn first_sight_values(
        &self,
        specs: &[StampSpec],
        stamp_on_delete: bool,
    ) -> BTreeMap<Output, String> {
        self.first_sight
            .as_deref()
            .map(|seen| seen.values(specs, stamp_on_delete))
            .unwrap_or_default()
    }

    /// Until when pacing holds a re-stamp: its min-interval since the last
    /// stamp, unless that stamp's rollout has completed (design §5).
    pub(super) fn hold_until(&self, default_interval: Duration) -> Option<Instant> {
        if self.rollout == Rollout::Complete {
            return None;
        }
        let interval = self.timing().min_interval.unwrap_or(default_interval);
        self.last_stamp
            .map(|last| crate::rate::saturating_add(last, interval))
    }

    /// The sources a stamp is attributed to: those whose observations changed
    /// since the last stamp, else (a new or edited workload) those feeding the
    /// outputs that change.
    pub(super) fn change_sources(
        &self,
        specs: &[StampSpec],
        patch: &StampPatch,
    ) -> BTreeSet<SourceName> {
        if !self.pending.is_empty() {
            return self.pending.iter().map(|r| r.source.clone()).collect();
        }
        specs
            .iter()
            .filter(|spec| patch.changed.contains(&spec.output))
            .flat_map(|spec| &spec.inputs)
            .map(|input| input.tracked.reference.source.clone())
            .collect()
    }

    /// Everything pending, now in sync: what the pending changes named.
    pub(super) fn clear_pending(&mut self) -> BTreeSet<Reference> {
        self.observed_at = None;
        self.pending.take()
    }

    /// The changes a write dispatched now carries, and when the first was
    /// observed; those it does not carry (an adoption carries none, whatever
    /// was reported meanwhile: it takes over what nudge first saw) as the
    /// third.
    pub(super) fn take_changes(
        &mut self,
        rolls: bool,
    ) -> (BTreeSet<Reference>, Option<Instant>, BTreeSet<Reference>) {
        let changed = self.pending.take();
        let observed_at = self.observed_at.take();
        if rolls {
            (changed, observed_at, BTreeSet::new())
        } else {
            (BTreeSet::new(), None, changed)
        }
    }

    /// The write in flight ended; its details (default when none was).
    pub(super) fn take_write(&mut self) -> InFlight {
        match std::mem::replace(&mut self.write, WriteState::Idle) {
            WriteState::InFlight(write) => *write,
            WriteState::Idle => InFlight::default(),
        }
    }

    /// A write that did not go through: its changes are still to be written.
    pub(super) fn restore(&mut self, write: &InFlight) {
        for reference in &write.changed {
            self.pending.insert(reference.clone());
        }
        if let Some(at) = write.observed_at {
            self.observed_at = Some(self.observed_at.map_or(at, |o| o.min(at)));
        }
    }

    /// The delay before retrying a failed write (500 ms doubling with jitter
    /// to 60 s).
    pub(super) fn retry_delay(&mut self) -> Duration {
        self.retry
            .get_or_insert_with(|| Box::new(Backoff::new(FIRST_RETRY_DELAY, MAX_RETRY_DELAY)))
            .next_delay()
    }

    /// The stored workload after nudge's write (`rolls`: it changed the pod
    /// template), with `specs`: what the record keeps of it.
    pub(super) fn after_write(
        &mut self,
        workload: &Workload,
        specs: &[StampSpec],
        rolls: bool,
        now: Instant,
    ) {
        self.retry = None;
        if rolls {
            // A metadata-only write (an adoption) starts no rollout,
            // though it bumps a Deployment's generation.
            self.last_stamp = Some(now);
            self.rollout = workload.rollout;
        }
        self.written = workload.revision().unwrap_or(0);
        if !stamp::adopting(workload, specs) {
            self.first_sight = None;
        }
        self.current = CurrentOutputs::new(workload, specs.iter().map(|s| &s.output));
    }

    /// What nudge first saw of its inputs: forgotten once it adopts nothing
    /// more, else completed with the inputs added since, as `store` knows
    /// them.
    pub(super) fn see_first(
        &mut self,
        workload: &Workload,
        specs: &[StampSpec],
        store: &RwLock<FingerprintStore>,
    ) {
        if !stamp::adopting(workload, specs) {
            self.first_sight = None;
            return;
        }
        let store = store.read().unwrap_or_else(|e| e.into_inner());
        let seen = self.first_sight.get_or_insert_default();
        // A reference added since first sight: seen now.
        seen.see(specs, &store);
    }
}

/// What a workload's inputs were when nudge first saw it with an output still
/// to adopt (an input no source had reported yet: its first report). Adoption
/// takes over exactly that without a rollout; content that changed after it
/// is a change, and rolls the workload once (design §5, adoption).
#[derive(Debug, Default)]
pub(super) struct FirstSight(HashMap<Tracked, Observation>);

impl FirstSight {
    /// Adds the inputs of `specs` not seen yet, as `store` knows them now.
    fn see(&mut self, specs: &[StampSpec], store: &FingerprintStore) {
        for tracked in specs.iter().flat_map(|s| &s.inputs).map(|i| &i.tracked) {
            if !self.0.contains_key(tracked)
                && let Some(observation) = store.observation(tracked)
            {
                self.0.insert(tracked.clone(), observation.clone());
            }
        }
    }

    /// `tracked` as first reported, when it was not seen yet: `earlier` (the
    /// store's observation before this report) or `reported`.
    pub(super) fn first_report(
        &mut self,
        tracked: &Tracked,
        earlier: Option<&Observation>,
        reported: &Observation,
    ) {
        self.0
            .entry(tracked.clone())
            .or_insert_with(|| earlier.unwrap_or(reported).clone());
    }

    /// The values `specs`' outputs had at first sight (those whose inputs were
    /// all known).
    fn values(&self, specs: &[StampSpec], stamp_on_delete: bool) -> BTreeMap<Output, String> {
        stamp::desired(specs, self, stamp_on_delete).values
    }
}

impl FingerprintLookup for FirstSight {
    fn observation(&self, tracked: &Tracked) -> Option<&Observation> {
        self.0.get(tracked)
    }
}

/// A workload's timing annotations (each `None`: the `[engine]` setting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Timing {
    pub(super) debounce: Option<Duration>,
    pub(super) min_interval: Option<Duration>,
    pub(super) max_delay: Option<Duration>,
    pub(super) progress_deadline: Option<Duration>,
}

impl Timing {
    /// The overrides, or `None` when there are none.
    pub(super) fn of(deps: &Dependencies) -> Option<Box<Self>> {
        let timing = Self {
            debounce: deps.debounce,
            min_interval: deps.min_interval,
            max_delay: deps.max_delay,
            progress_deadline: deps.progress_deadline,
        };
        (timing != Self::default()).then(|| Box::new(timing))
    }
}

/// Records are many and writes in flight few: the write's details are boxed.
#[derive(Debug)]
pub(super) enum WriteState {
    Idle,
    InFlight(Box<InFlight>),
}

/// A write in flight; `again` when the workload became due meanwhile. It
/// carries the changes observed up to its dispatch; those observed while it is
/// in flight stay pending for the next write.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    pub(super) again: bool,
    pub(super) sources: BTreeSet<SourceName>,
    /// The references whose change this write carries.
    pub(super) changed: BTreeSet<Reference>,
    /// When the first of them was observed.
    pub(super) observed_at: Option<Instant>,
    /// What the write sets, for the log and the Event.
    pub(super) carries: String,
    /// Whether it changes the pod template (starts a rollout), not only metadata.
    pub(super) rolls: bool,
    /// The config revision a rolling write starts, and the first reference it
    /// carries (see [`super::follow`]).
    pub(super) revision: Option<(Revision, Option<Related>)>,
}

impl InFlight {
    /// The `ConfigChanged` note: which references changed (never their
    /// content) and what the write carried, so that a write made while a
    /// change was on its way never names a change it does not carry.
    pub(super) fn note(&self) -> String {
        let carries = &self.carries;
        let what = if self.rolls {
            format!("wrote {carries}")
        } else {
            format!("adopted {carries} on the workload's metadata (no rollout)")
        };
        if self.changed.is_empty() {
            return what;
        }
        let refs: Vec<String> = self.changed.iter().map(ToString::to_string).collect();
        format!("{} changed; {what}", refs.join(", "))
    }
}

/// The values a patch changes, each shortened: fingerprints, never content.
pub(super) fn carried(patch: &StampPatch) -> String {
    const SHOWN: usize = 19; // `sha256-` and 12 hex digits
    let shown: Vec<String> = patch
        .changed
        .iter()
        .map(|output| {
            let key = output.key();
            let value = patch
                .values
                .iter()
                .find(|(written, _)| written.key() == key)
                .map(|(_, value)| value.as_str())
                .unwrap_or("lifted");
            if let Output::Snapshots(_) = output {
                let snapshot = Snapshot::parse(value).unwrap_or_default();
                return format!("{key}: {}", snapshot.summary());
            }
            format!("{key}={}", crate::errors::excerpt(value, SHOWN))
        })
        .collect();
    shown.join(", ")
}

/// The workload ids a record is kept under.
pub(super) type Records = HashMap<WorkloadId, Box<Record>>;
