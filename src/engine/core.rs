//! The engine core: a synchronous state machine, `handle(Input, now) -> Vec<Effect>`.
//!
//! It owns every decision (design §5): what each workload depends on, whether its
//! stamp is in sync, when it may be written, what is tracked, which Events to
//! publish. It performs no I/O and reads no clock: the driver
//! feeds it [`Input`]s with the current time and performs the [`Effect`]s it
//! returns. State-based: every decision compares the desired stamp with what is on
//! the workload, so replayed inputs and restarts are harmless.
//!
//! One `Record` per workload holds everything the core knows about it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use super::graph::DependencyGraph;
use super::metrics::{EngineMetrics, StampResult};
use super::queue::Queue;
use crate::annotations::{self, AnnotationError, AnnotationScheme, Dependencies};
use crate::config::EngineConfig;
use crate::events::{Notice, Reason};
use crate::fingerprint::Observation;
use crate::model::{
    Output, Reference, Rollout, SourceCatalog, SourceName, StampSpec, Tracked, Workload, WorkloadId,
};
use crate::outcome::history::{Change, Revision};
use crate::outcome::{Conclusion, Supersession};
use crate::rate::{Backoff, PacingError, TokenBucket};
use crate::sources::SourceUpdate;
use crate::stamp::{
    self, BlockReason, CurrentOutputs, Decision, FingerprintLookup, FingerprintStore, StampPatch,
};
use crate::targets::{ApplyOutcome, TargetError, WatchScope, WorkloadEvent};
use crate::window::WallClock;

/// Stamps written at once. Each write in flight is a connection to the API server;
/// the token bucket paces how many start per second, this bounds how many
/// connections (and their buffers) a burst opens.
pub const MAX_WRITES_IN_FLIGHT: usize = 8;
/// First retry delay after a failed stamp; doubles (with jitter) up to
/// [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);

/// What happened, as the core sees it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Input {
    /// A target reported a workload event (boxed: workloads are large).
    Workload(Box<WorkloadEvent>),
    /// A source reported an observation.
    Observation(SourceUpdate),
    /// A source was (re)started and must be told everything it tracks.
    SourceStarted(SourceName),
    /// A write requested by [`Effect::Write`] finished.
    WriteFinished {
        /// The workload written.
        id: WorkloadId,
        /// How it went.
        outcome: WriteOutcome,
    },
    /// Every target has delivered its initial listing (sent once, after the
    /// listed workloads): until then the core may not know an earlier wave of
    /// a workload, and holds every workload in a wave after the first
    /// (design §5d).
    Listed,
    /// This replica became leader (`true`) or stopped being leader.
    Leadership(bool),
    /// The namespaces matching `kubernetes.namespace_selector` are now these.
    Namespaces(BTreeSet<String>),
    /// Time passed (a [`Effect::WakeAt`] came due).
    Tick,
}

impl Input {
    /// [`Input::Workload`] of `event`.
    pub fn workload(event: WorkloadEvent) -> Self {
        Self::Workload(Box::new(event))
    }
}

/// How a stamp write ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum WriteOutcome {
    /// Written; the workload as stored afterwards.
    Applied(Box<Workload>),
    /// The workload no longer exists.
    Gone,
    /// A retryable failure (conflict, 5xx, timeout).
    Retry(TargetError),
    /// Refused for good (403, 422, …).
    Failed(TargetError),
}

impl From<Result<ApplyOutcome, TargetError>> for WriteOutcome {
    fn from(result: Result<ApplyOutcome, TargetError>) -> Self {
        match result {
            Ok(ApplyOutcome::Applied(workload)) => Self::Applied(workload),
            Ok(ApplyOutcome::Gone) => Self::Gone,
            Err(error) if error.is_retryable() => Self::Retry(error),
            Err(error) => Self::Failed(error),
        }
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Effect {
    /// Tell the reference's source to start tracking it.
    Track(Tracked),
    /// Tell the reference's source to stop tracking it.
    Untrack(Tracked),
    /// Write a stamp through the workload kind's target, then report
    /// [`Input::WriteFinished`]. Boxed: workloads are large.
    Write(Box<StampWrite>),
    /// Publish a Kubernetes Event (never waited for).
    Publish(Notice),
    /// Send [`Input::Tick`] at this time, or as soon as the inputs already
    /// queued are handled when it is not in the future (replaces any earlier
    /// request).
    WakeAt(Instant),
    /// A rollout nudge started ended: publish its outcome, then record it in
    /// the workload's history (design §5c). Leader only.
    Conclude(Box<Conclusion>),
}

/// One stamp to write.
#[derive(Debug, Clone, PartialEq)]
pub struct StampWrite {
    /// The workload as the core knows it: the current values of its outputs.
    pub workload: Workload,
    /// What to write.
    pub patch: StampPatch,
    /// The rollout in flight this stamp supersedes: its outcome is published
    /// and carried in the stamp's marker, its details read from the workload
    /// as stored before the write.
    pub supersedes: Option<Box<Supersession>>,
}

/// Everything the core knows about one workload.
struct Record {
    /// The current values of its outputs (not the whole pod template).
    current: CurrentOutputs,
    /// The whole workload, kept only under a namespace selector: a workload whose
    /// namespace leaves the selection is parked, and coming back needs all of it.
    full: Option<Box<Workload>>,
    /// The workload's own timing annotations; `None` (most workloads): none.
    timing: Option<Box<Timing>>,
    rollout: Rollout,
    /// References whose observation changed since the last stamp.
    pending: BTreeSet<Reference>,
    /// When the first change not yet stamped was observed.
    observed_at: Option<Instant>,
    write: WriteState,
    /// Set while writes fail and are retried.
    retry: Option<Box<Backoff>>,
    /// Since when a due stamp has waited for an input no source has reported yet.
    unknown_since: Option<Instant>,
    last_stamp: Option<Instant>,
    /// What was last reported (boxed: records are many, reports rare; this
    /// keeps a record within 256 bytes, one allocator size class).
    #[expect(
        clippy::box_collection,
        reason = "8 bytes instead of 24 in every record"
    )]
    reported_missing: Option<Box<BTreeSet<Reference>>>,
    /// The invalid annotations last reported; `None`: none (boxed alike).
    #[expect(
        clippy::box_collection,
        reason = "8 bytes instead of 16 in every record"
    )]
    reported_invalid: Option<Box<Vec<String>>>,
    /// While the workload has an output still to adopt: its inputs as first
    /// seen (see [`FirstSight`]).
    first_sight: Option<Box<FirstSight>>,
    /// The revision (etcd's, in `resourceVersion`) of the workload as nudge's
    /// last write left it; 0: unknown.
    written: u64,
    /// The newest config revision number known for it (history or marker).
    revision: u32,
    /// Whether the newest revision in its `<prefix>/history` failed: with no
    /// rollout followed, a kind judged by nudge's own deadline still reads as
    /// failed for the waves after it (design §5d).
    last_failed: bool,
    /// The rollout nudge started and follows (see [`follow`]).
    follow: Option<Box<follow::Follow>>,
}

/// What a workload's inputs were when nudge first saw it with an output still
/// to adopt (an input no source had reported yet: its first report). Adoption
/// takes over exactly that without a rollout; content that changed after it
/// is a change, and rolls the workload once (design §5, adoption).
#[derive(Debug, Default)]
struct FirstSight(HashMap<Tracked, Observation>);

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
struct Timing {
    debounce: Option<Duration>,
    min_interval: Option<Duration>,
    max_delay: Option<Duration>,
    progress_deadline: Option<Duration>,
}

impl Timing {
    /// The overrides, or `None` when there are none.
    fn of(deps: &Dependencies) -> Option<Box<Self>> {
        let timing = Self {
            debounce: deps.debounce,
            min_interval: deps.min_interval,
            max_delay: deps.max_delay,
            progress_deadline: deps.progress_deadline,
        };
        (timing != Self::default()).then(|| Box::new(timing))
    }
}

impl Record {
    fn timing(&self) -> Timing {
        self.timing.as_deref().copied().unwrap_or_default()
    }
}

/// Records are many and writes in flight few: the write's details are boxed.
#[derive(Debug)]
enum WriteState {
    Idle,
    InFlight(Box<InFlight>),
}

/// A write in flight; `again` when the workload became due meanwhile. It
/// carries the changes observed up to its dispatch; those observed while it is
/// in flight stay pending for the next write.
#[derive(Debug, Default)]
struct InFlight {
    again: bool,
    sources: BTreeSet<SourceName>,
    /// The references whose change this write carries.
    changed: BTreeSet<Reference>,
    /// When the first of them was observed.
    observed_at: Option<Instant>,
    /// What the write sets, for the log and the Event.
    carries: String,
    /// Whether it changes the pod template (starts a rollout), not only metadata.
    rolls: bool,
    /// The config revision a rolling write starts, and the first reference it
    /// carries (see [`follow`]).
    revision: Option<(Revision, Option<follow::Related>)>,
}

/// Which namespaces workloads may be stamped in.
enum Selection {
    /// No `namespace_selector`: all (within the watched scope).
    All,
    /// A selector whose first list has not arrived: none yet.
    Pending,
    /// The namespaces the selector matches.
    Selected(BTreeSet<String>),
}

/// The settings the core decides with.
#[derive(Debug, Clone)]
pub struct CoreSettings {
    /// Timing and pacing (`[engine]`).
    pub engine: EngineConfig,
    /// nudge's annotation names.
    pub scheme: AnnotationScheme,
    /// The configured sources.
    pub catalog: SourceCatalog,
    /// Whether workloads are limited to namespaces matching a selector (then none
    /// is stamped before the first [`Input::Namespaces`]).
    pub namespace_selector: bool,
    /// Whether this replica starts as leader (false under leader election).
    pub leader: bool,
    /// Wall-clock time of the instants the core is handed (maintenance
    /// windows, design §5d).
    pub clock: WallClock,
}

/// The engine core. See the module docs.
pub struct Core {
    engine: EngineConfig,
    scheme: AnnotationScheme,
    catalog: SourceCatalog,
    graph: DependencyGraph,
    store: Arc<RwLock<FingerprintStore>>,
    /// Boxed: a table of whole records keeps its spare slots at full record
    /// size (at 15,000 workloads, 17,000 empty slots of 536 bytes).
    records: HashMap<WorkloadId, Box<Record>>,
    /// Workloads in namespaces outside the selection: kept, not tracked.
    parked: HashMap<WorkloadId, Workload>,
    selection: Selection,
    /// Per watch stream being relisted, the workloads listed so far.
    relisting: HashMap<WatchScope, HashSet<WorkloadId>>,
    queue: Queue,
    leader: bool,
    in_flight: usize,
    metrics: EngineMetrics,
    /// nudge's own progress deadlines of the rollouts it follows.
    deadlines: BTreeSet<(Instant, WorkloadId)>,
    /// The latest runs (Jobs) of CronJobs, per CronJob (see [`follow`]).
    runs: HashMap<WorkloadId, Vec<follow::Run>>,
    /// Who changed each reference last, for references that changed while
    /// tracked (a rollout names them).
    provenance: HashMap<Tracked, authors::PackedProvenance>,
    /// Holds, windows and waves (design §5d).
    plans: plan::Plans,
}

// === impl Core ===

impl Core {
    /// A core with nothing known yet. `store` is shared with readers (the webhook);
    /// only the core writes it.
    pub fn new(
        settings: CoreSettings,
        store: Arc<RwLock<FingerprintStore>>,
        metrics: EngineMetrics,
    ) -> Result<Self, PacingError> {
        let CoreSettings {
            engine,
            scheme,
            catalog,
            namespace_selector,
            leader,
            clock,
        } = settings;
        let plans = plan::Plans::new(engine.window.clone(), clock);
        let bucket = TokenBucket::new(engine.stamps_per_second, engine.burst)?;
        Ok(Self {
            engine,
            scheme,
            catalog,
            graph: DependencyGraph::new(),
            store,
            records: HashMap::new(),
            parked: HashMap::new(),
            selection: if namespace_selector {
                Selection::Pending
            } else {
                Selection::All
            },
            relisting: HashMap::new(),
            queue: Queue::new(bucket),
            leader,
            in_flight: 0,
            metrics,
            deadlines: BTreeSet::new(),
            runs: HashMap::new(),
            provenance: HashMap::new(),
            plans,
        })
    }

    /// Handles one input at `now` and returns what to do, ending with the next
    /// [`Effect::WakeAt`] when something is waiting.
    pub fn handle(&mut self, input: Input, now: Instant) -> Vec<Effect> {
        let mut out = Vec::new();
        match input {
            Input::Workload(event) => self.on_workload_event(*event, now, &mut out),
            Input::Observation(update) => self.on_observation(update, now),
            Input::SourceStarted(name) => out.extend(
                self.graph
                    .tracked()
                    .filter(|t| t.reference.source == name)
                    .cloned()
                    .map(Effect::Track),
            ),
            Input::WriteFinished { id, outcome } => self.on_written(id, outcome, now, &mut out),
            Input::Listed => self.on_listed(now),
            Input::Leadership(leader) => self.on_leadership(leader, now, &mut out),
            Input::Namespaces(selected) => self.on_namespaces(selected, now, &mut out),
            // Due workloads go out only on a tick: the driver handles every input
            // already queued first, so a burst (a workload's four Consul keys
            // observed together) is written once, not once per input.
            Input::Tick => {
                let following = self.deadlines.len();
                self.expire_deadlines(now, &mut out);
                if self.deadlines.len() < following {
                    // A rollout past nudge's deadline failed: the waves after it decide again.
                    self.reevaluate_waves(now);
                }
                self.release(now, &mut out);
            }
        }
        self.metrics.set_gauges(
            self.graph.workload_count(),
            self.graph.tracked_count(),
            self.queue.len(),
            self.in_flight,
        );
        for (reason, count) in self.plans.counts() {
            self.metrics.set_held(reason, count);
        }
        for (state, count) in self.plans.wave_rollouts() {
            self.metrics.set_wave_rollouts(state, count);
        }
        let wake = [self.queue.next_wake(self.room() > 0), self.next_deadline()];
        if let Some(at) = wake.into_iter().flatten().min() {
            out.push(Effect::WakeAt(at));
        }
        out
    }

    /// Workloads with a record (tracked or with annotation errors).
    pub fn workload_count(&self) -> usize {
        self.records.len()
    }

    /// Writes in flight.
    pub fn writes_in_flight(&self) -> usize {
        self.in_flight
    }

    fn room(&self) -> usize {
        MAX_WRITES_IN_FLIGHT.saturating_sub(self.in_flight)
    }
}

// === workloads ===

impl Core {
    fn on_workload_event(&mut self, event: WorkloadEvent, now: Instant, out: &mut Vec<Effect>) {
        match event {
            WorkloadEvent::Init(scope) => {
                self.relisting.insert(scope, HashSet::new());
            }
            WorkloadEvent::InitApply(workload) => {
                if let Some(seen) = self
                    .relisting
                    .iter_mut()
                    .find_map(|(scope, seen)| scope.contains(&workload.id).then_some(seen))
                {
                    seen.insert(workload.id.clone());
                }
                self.on_workload(workload, now, out);
            }
            WorkloadEvent::InitDone(scope) => {
                let seen = self.relisting.remove(&scope).unwrap_or_default();
                let gone: Vec<WorkloadId> = self
                    .records
                    .keys()
                    .chain(self.parked.keys())
                    .filter(|id| scope.contains(id) && !seen.contains(*id))
                    .cloned()
                    .collect();
                for id in gone {
                    self.on_delete(&id, out);
                }
            }
            WorkloadEvent::Apply(workload) => self.on_workload(workload, now, out),
            WorkloadEvent::Delete(id) => {
                self.on_delete(&id, out);
                // It may have been an earlier wave of a held workload.
                self.reevaluate_waves(now);
            }
        }
    }

    fn on_workload(&mut self, mut workload: Workload, now: Instant, out: &mut Vec<Effect>) {
        if let Some(known) = self.known_id(&workload.id) {
            workload.id = known;
        }
        if let (Some(record), Some(revision)) =
            (self.records.get(&workload.id), workload.revision())
            && revision < record.written
        {
            // Queued before nudge's own write returned: an older state of the
            // workload, whose newer state nudge already has. Taken as current,
            // it would undo the write in nudge's view (and re-adopt, or put older
            // content back).
            tracing::debug!(workload = %workload.id, revision, written = record.written, "older than nudge's last write; skipped");
            return;
        }
        self.follow_run(&workload, now, out);
        let id = workload.id.clone();
        if !self.in_selection(&id) {
            if self.records.contains_key(&id) {
                self.on_delete(&id, out);
            }
            self.parked.insert(id, workload);
            return;
        }
        self.parked.remove(&id);
        let deps = annotations::dependencies(&workload, &self.scheme, &self.catalog);
        let current = CurrentOutputs::new(&workload, deps.stamps.iter().map(|s| &s.output));
        let timing = Timing::of(&deps);
        self.plans.set(&id, deps.delivery.clone());
        let delta = self.graph.apply(id.clone(), deps.stamps);
        out.extend(delta.newly_tracked.into_iter().map(Effect::Track));
        self.drop_tracked(delta.droppable, out);
        if self.graph.specs(&id).is_none() && deps.errors.is_empty() {
            // Nothing to track or report: forget it (memory grows with what is
            // tracked, not with the cluster).
            self.drop_follow(&id);
            self.plans.forget(&id);
            self.forget_runs(&id);
            self.records.remove(&id);
            self.queue.forget(&id);
            return;
        }
        let full = matches!(self.selection, Selection::Selected(_) | Selection::Pending)
            .then(|| Box::new(workload.clone()));
        let record = self.records.entry(id.clone()).or_insert_with(|| {
            Box::new(Record {
                current: current.clone(),
                full: None,
                timing: None,
                rollout: Rollout::Unknown,
                pending: BTreeSet::new(),
                observed_at: None,
                write: WriteState::Idle,
                retry: None,
                unknown_since: None,
                last_stamp: None,
                reported_missing: None,
                reported_invalid: None,
                first_sight: None,
                written: 0,
                revision: 0,
                last_failed: false,
                follow: None,
            })
        });
        let specs = self.graph.specs(&id).unwrap_or_default();
        if !stamp::adopting(&workload, specs) {
            record.first_sight = None;
        } else {
            let store = self.store.read().unwrap_or_else(|e| e.into_inner());
            let seen = record.first_sight.get_or_insert_default();
            // A reference added since first sight: seen now.
            seen.see(specs, &store);
        }
        record.current = current;
        record.full = full;
        record.timing = timing;
        let completed =
            workload.rollout == Rollout::Complete && record.rollout != Rollout::Complete;
        let moved = workload.rollout != record.rollout;
        record.rollout = workload.rollout;
        self.report_invalid(&id, &deps.errors, out);
        if completed {
            // The previous rollout finished: a held re-stamp need not wait for
            // min-interval any more.
            self.queue.rehold(&id, |since| since);
        }
        self.evaluate(&id, now);
        self.follow_workload(&workload, now, out);
        if moved {
            // An earlier wave completed or failed: the waves after it decide again.
            self.reevaluate_waves(now);
        }
    }

    /// The copy of `id` the core already keeps: every event and write result
    /// carries a new one, and one per workload is kept.
    fn known_id(&self, id: &WorkloadId) -> Option<WorkloadId> {
        self.records
            .get_key_value(id)
            .map(|(known, _)| known.clone())
    }

    fn on_delete(&mut self, id: &WorkloadId, out: &mut Vec<Effect>) {
        self.drop_follow(id);
        self.plans.forget(id);
        self.forget_runs(id);
        self.parked.remove(id);
        let delta = self.graph.delete(id);
        self.drop_tracked(delta.droppable, out);
        self.records.remove(id);
        self.queue.forget(id);
    }

    fn drop_tracked(&mut self, droppable: Vec<Tracked>, out: &mut Vec<Effect>) {
        if droppable.is_empty() {
            return;
        }
        let mut store = self.store.write().unwrap_or_else(|e| e.into_inner());
        for tracked in droppable {
            store.remove(&tracked);
            self.provenance.remove(&tracked);
            out.push(Effect::Untrack(tracked));
        }
    }

    fn report_invalid(
        &mut self,
        id: &WorkloadId,
        errors: &[AnnotationError],
        out: &mut Vec<Effect>,
    ) {
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let reported = record
            .reported_invalid
            .as_deref()
            .map_or(&[][..], Vec::as_slice);
        if *reported == *messages {
            return;
        }
        for (error, message) in errors.iter().zip(&messages) {
            tracing::warn!(workload = %id, annotation = error.key(), category = error.category(), %error, "invalid annotation");
            // Counted when first reported: an error the previous set held was
            // counted then.
            if !reported.contains(message) {
                self.metrics.annotation_error(&id.kind, error.category());
            }
        }
        record.reported_invalid = (!messages.is_empty()).then(|| Box::new(messages.clone()));
        if !messages.is_empty() {
            let note = messages.join("; ");
            self.publish(
                out,
                Notice::new(id.clone(), Reason::InvalidAnnotation, note),
            );
        }
    }
}

// === namespace selection and leadership ===

impl Core {
    fn in_selection(&self, id: &WorkloadId) -> bool {
        match &self.selection {
            Selection::All => true,
            Selection::Pending => false,
            Selection::Selected(set) => set.contains(id.namespace.as_str()),
        }
    }

    fn on_namespaces(&mut self, selected: BTreeSet<String>, now: Instant, out: &mut Vec<Effect>) {
        self.selection = Selection::Selected(selected);
        let entering: Vec<WorkloadId> = self
            .parked
            .keys()
            .filter(|id| self.in_selection(id))
            .cloned()
            .collect();
        for id in entering {
            if let Some(workload) = self.parked.remove(&id) {
                self.on_workload(workload, now, out);
            }
        }
        let leaving: Vec<WorkloadId> = self
            .records
            .keys()
            .filter(|id| !self.in_selection(id))
            .cloned()
            .collect();
        for id in leaving {
            let full = self.records.get_mut(&id).and_then(|r| r.full.take());
            self.on_delete(&id, out);
            if let Some(workload) = full {
                self.parked.insert(id, *workload);
            }
        }
    }

    /// A new leader re-evaluates every workload, state-based, and re-reports
    /// configuration problems a follower kept to itself.
    fn on_leadership(&mut self, leader: bool, now: Instant, out: &mut Vec<Effect>) {
        let became = leader && !self.leader;
        self.leader = leader;
        if !leader {
            // Only the leader holds and reports holds; when it leads again it
            // reports again what is still true.
            self.plans.reset_reports();
            tracing::info!("following: stamps are left to the leader");
            return;
        }
        if !became {
            return;
        }
        tracing::info!(
            workloads = self.records.len(),
            "leading: re-evaluating every workload"
        );
        let ids: Vec<WorkloadId> = self.records.keys().cloned().collect();
        for id in &ids {
            let Some(record) = self.records.get_mut(id) else {
                continue;
            };
            record.reported_missing = None;
            if let Some(reported) = &record.reported_invalid {
                let note = reported.join("; ");
                self.publish(
                    out,
                    Notice::new(id.clone(), Reason::InvalidAnnotation, note),
                );
            }
        }
        for id in &ids {
            self.evaluate(id, now);
        }
        self.conclude_again(out);
    }
}

// === observations and stamping ===

impl Core {
    fn on_observation(&mut self, update: SourceUpdate, now: Instant) {
        let SourceUpdate {
            tracked,
            observation,
            provenance,
            ..
        } = update;
        // The store keeps the graph's copy (a custom source may report its own).
        let Some(tracked) = self.graph.shared(&tracked).cloned() else {
            // Untracked meanwhile; do not resurrect it in the store.
            return;
        };
        let dependents: Vec<WorkloadId> = self.graph.dependents(&tracked).cloned().collect();
        let mut store = self.store.write().unwrap_or_else(|e| e.into_inner());
        // A workload seen before this input's first report takes that report as
        // what it saw first (or the one before it, when it was seen since).
        for id in &dependents {
            if let Some(seen) = self
                .records
                .get_mut(id)
                .and_then(|r| r.first_sight.as_deref_mut())
            {
                seen.0
                    .entry(tracked.clone())
                    .or_insert_with(|| store.observation(&tracked).unwrap_or(&observation).clone());
            }
        }
        let changed = store.set(tracked.clone(), observation);
        drop(store);
        if !changed {
            return;
        }
        if let Some(provenance) = provenance {
            let packed = authors::PackedProvenance::pack(&provenance);
            self.provenance.insert(tracked.clone(), packed);
        }
        tracing::debug!(%tracked, dependents = dependents.len(), "observation changed");
        for id in dependents {
            if let Some(record) = self.records.get_mut(&id) {
                record.pending.insert(tracked.reference.clone());
                record.observed_at.get_or_insert(now);
            }
            self.evaluate(&id, now);
        }
    }

    /// Queues `id` when its stamp differs from the desired one or a reference is
    /// missing; an in-sync workload is left alone.
    fn evaluate(&mut self, id: &WorkloadId, now: Instant) {
        let (Some(record), Some(specs)) = (self.records.get_mut(id), self.graph.specs(id)) else {
            return;
        };
        let (_, decision) = decide(record, specs, &self.store, self.engine.stamp_on_delete);
        let missing = decision
            .desired
            .blocked
            .iter()
            .any(|b| matches!(b.reason, BlockReason::Missing { .. }));
        if !missing {
            // Back (perhaps unchanged, so no stamp follows): a later absence is a
            // new problem to report.
            record.reported_missing = None;
        }
        if missing || decision.patch.is_some() {
            // An adoption rolls nothing and there is nothing to debounce: it is
            // written at once, so that what nudge first saw is kept in the
            // cluster and survives a restart.
            let adoption =
                record.first_sight.is_some() && decision.patch.is_some() && !decision.rolls;
            self.touch(id.clone(), now, adoption.then_some(Duration::ZERO));
        } else if matches!(record.write, WriteState::Idle) {
            // In sync again (e.g. reverted within the debounce window). While a stamp
            // is in flight, the watch may echo it before the write returns: the
            // pending references still belong to that stamp's Event.
            let written = std::mem::take(&mut record.pending);
            record.observed_at = None;
            self.plans.release(id);
            self.release_provenance(id, &written);
        }
    }

    /// Queues `id` after its debounce window, or after `delay` (a retry).
    fn touch(&mut self, id: WorkloadId, now: Instant, delay: Option<Duration>) {
        let Some(record) = self.records.get(&id) else {
            return;
        };
        let (window, ceiling) = match delay {
            Some(delay) => (delay, delay),
            None => {
                let timing = record.timing();
                (
                    timing.debounce.unwrap_or(self.engine.debounce),
                    timing.max_delay.unwrap_or(self.engine.max_delay),
                )
            }
        };
        let eligible = self.eligibility(&id);
        if !self.queue.touch(id.clone(), now, window, ceiling) {
            self.queue.rehold(&id, eligible);
        }
    }

    /// When a workload that left the debouncer at `since` may be stamped.
    fn eligibility(&self, id: &WorkloadId) -> impl FnOnce(Instant) -> Instant + use<> {
        let hold = self
            .records
            .get(id)
            .and_then(|record| hold_until(record, self.engine.min_interval));
        move |since| hold.map_or(since, |until| until.max(since))
    }

    fn release(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let room = self.room();
        if room == 0 {
            return;
        }
        let records = &self.records;
        let interval = self.engine.min_interval;
        let due = self.queue.release(now, room, |id, since| {
            let hold = records.get(id).and_then(|r| hold_until(r, interval));
            hold.map_or(since, |until| until.max(since))
        });
        for id in due {
            self.dispatch(id, now, out);
        }
    }

    /// Decides on a due workload: write its stamp, or report why not.
    fn dispatch(&mut self, id: WorkloadId, now: Instant, out: &mut Vec<Effect>) {
        let Some(record) = self.records.get_mut(&id) else {
            return;
        };
        if let WriteState::InFlight(write) = &mut record.write {
            write.again = true;
            return;
        }
        let Some(specs) = self.graph.specs(&id) else {
            return;
        };
        let (workload, decision) = decide(record, specs, &self.store, self.engine.stamp_on_delete);
        let Decision {
            desired,
            patch,
            rolls,
        } = decision;
        let missing: BTreeSet<Reference> = desired
            .blocked
            .iter()
            .filter_map(|b| match &b.reason {
                BlockReason::Missing { reference } => Some(reference.clone()),
                _ => None,
            })
            .collect();
        for blocked in &desired.blocked {
            if !matches!(
                blocked.reason,
                BlockReason::Missing { .. } | BlockReason::Unknown { .. }
            ) {
                tracing::warn!(workload = %id, output = %blocked.output, reason = %blocked.reason, "cannot compute stamp");
            }
        }
        let unknown = desired
            .blocked
            .iter()
            .any(|b| matches!(b.reason, BlockReason::Unknown { .. }));
        let waiting_since = *record.unknown_since.get_or_insert(now);
        if unknown && now.saturating_duration_since(waiting_since) < self.engine.max_delay {
            // A source has not reported some input yet (start-up, a new
            // reference): wait for it rather than write a partial stamp now and
            // the rest a moment later. Its observation queues the workload again;
            // after max_delay (a source that stays unreachable) what is known is
            // written.
            let retry = self.engine.max_delay - now.saturating_duration_since(waiting_since);
            self.touch(id, now, Some(retry));
            return;
        }
        record.unknown_since = None;
        let sources = patch
            .as_ref()
            .map(|patch| change_sources(record, specs, patch))
            .unwrap_or_default();
        self.report_missing(&id, missing, out);
        let Some(record) = self.records.get_mut(&id) else {
            return;
        };
        let Some(patch) = patch else {
            let written = std::mem::take(&mut record.pending);
            record.observed_at = None;
            self.plans.release(&id);
            self.release_provenance(&id, &written);
            return;
        };
        if !self.leader {
            // The leader writes; this replica keeps the workload pending and
            // re-evaluates everything if it becomes leader.
            tracing::debug!(workload = %id, "not the leader; not stamping");
            count(&self.metrics, &id, &sources, StampResult::SkippedFollower);
            return;
        }
        if rolls && self.held(&id, &desired, now, out) {
            return;
        }
        let Some(record) = self.records.get_mut(&id) else {
            return;
        };
        let mut changed = std::mem::take(&mut record.pending);
        let mut observed_at = record.observed_at.take();
        let mut adopted = BTreeSet::new();
        if !rolls {
            // An adoption takes over what was there when nudge first saw the
            // workload: it carries no change, whatever was reported meanwhile.
            adopted = std::mem::take(&mut changed);
            observed_at = None;
        }
        let carries = carried(&patch);
        let revision = rolls.then(|| {
            let specs = self.graph.specs(&id).unwrap_or_default();
            let provenance = &self.provenance;
            let change = |reference: &Reference| change_of(reference, specs, provenance);
            let number = record.revision + 1;
            Revision::started(number, &changed, change, &workload, specs, &patch)
        });
        let related = changed.first().map(|reference| {
            follow::Related::of(reference, self.graph.specs(&id).unwrap_or_default())
        });
        let mut write = InFlight {
            again: false,
            sources,
            changed,
            observed_at,
            carries,
            rolls,
            revision: None,
        };
        let mut patch = patch;
        let mut supersedes = None;
        if let Some(revision) = revision {
            let following = record
                .follow
                .as_deref()
                .is_some_and(follow::Follow::in_progress);
            if following {
                supersedes = self.supersede(&id, revision.revision, now).map(Box::new);
            }
            // The revision goes with the stamp, in one request: whatever happens
            // next, the workload says which rollout is in flight.
            let marker = Output::WorkloadAnnotation(self.scheme.rollout());
            patch.values.insert(marker.clone(), revision.to_json());
            patch.changed.push(marker);
            write.revision = Some((revision, related));
        }
        let Some(record) = self.records.get_mut(&id) else {
            return;
        };
        record.write = WriteState::InFlight(Box::new(write));
        self.in_flight += 1;
        self.release_provenance(&id, &adopted);
        out.push(Effect::Write(Box::new(StampWrite {
            workload,
            patch,
            supersedes,
        })));
    }

    fn report_missing(
        &mut self,
        id: &WorkloadId,
        missing: BTreeSet<Reference>,
        out: &mut Vec<Effect>,
    ) {
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        if missing.is_empty() {
            record.reported_missing = None;
            return;
        }
        if record.reported_missing.as_deref() == Some(&missing) {
            return;
        }
        let names: Vec<String> = missing.iter().map(ToString::to_string).collect();
        tracing::warn!(workload = %id, missing = ?names, "required config missing; keeping the current stamp");
        record.reported_missing = Some(Box::new(missing));
        let note = format!("{} not found; keeping the current stamp", names.join(", "));
        self.publish(out, Notice::new(id.clone(), Reason::MissingConfig, note));
    }

    fn on_written(
        &mut self,
        id: WorkloadId,
        outcome: WriteOutcome,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let Some(id) = self.known_id(&id) else {
            return;
        };
        let Some(record) = self.records.get_mut(&id) else {
            return;
        };
        let write = match std::mem::replace(&mut record.write, WriteState::Idle) {
            WriteState::InFlight(write) => *write,
            WriteState::Idle => InFlight::default(),
        };
        let InFlight {
            again,
            sources,
            changed,
            observed_at,
            carries,
            rolls,
            revision,
        } = write;
        let mut started = None;
        if !matches!(outcome, WriteOutcome::Applied(_) | WriteOutcome::Gone) {
            // Not written: its changes are still to be written.
            record.pending.extend(changed.iter().cloned());
            if let Some(at) = observed_at {
                record.observed_at = Some(record.observed_at.map_or(at, |o| o.min(at)));
            }
        }
        match outcome {
            WriteOutcome::Applied(workload) => {
                count(&self.metrics, &id, &sources, StampResult::Applied);
                if let Some(observed) = observed_at {
                    self.metrics
                        .stamp_latency(now.saturating_duration_since(observed));
                }
                record.retry = None;
                if rolls {
                    // A metadata-only write (an adoption) starts no rollout,
                    // though it bumps a Deployment's generation.
                    record.last_stamp = Some(now);
                    record.rollout = workload.rollout;
                }
                let specs = self.graph.specs(&id).unwrap_or_default();
                let mut workload = workload;
                workload.id = id.clone();
                record.written = workload.revision().unwrap_or(0);
                if !stamp::adopting(&workload, specs) {
                    record.first_sight = None;
                }
                record.current = CurrentOutputs::new(&workload, specs.iter().map(|s| &s.output));
                if let Some((revision, related)) = revision {
                    started = Some((revision, related, workload.clone()));
                }
                if record.full.is_some() {
                    record.full = Some(workload);
                }
                let note = change_note(&changed, &carries, rolls);
                tracing::info!(workload = %id, %note, "stamped");
                self.release_provenance(&id, &changed);
                let notice = Notice::new(id.clone(), Reason::ConfigChanged, note)
                    .with_changed(changed.into_iter().collect());
                self.publish(out, notice);
            }
            WriteOutcome::Gone => {
                count(&self.metrics, &id, &sources, StampResult::Gone);
                tracing::debug!(workload = %id, "workload deleted before the stamp");
                self.on_delete(&id, out);
                return;
            }
            WriteOutcome::Retry(error) => {
                count(&self.metrics, &id, &sources, StampResult::Retried);
                let delay = record
                    .retry
                    .get_or_insert_with(|| {
                        Box::new(Backoff::new(FIRST_RETRY_DELAY, MAX_RETRY_DELAY))
                    })
                    .next_delay();
                tracing::warn!(workload = %id, %error, category = error.category(), retry_in = ?delay, "stamp failed; retrying");
                self.touch(id.clone(), now, Some(delay));
            }
            WriteOutcome::Failed(error) => {
                count(&self.metrics, &id, &sources, StampResult::Failed);
                record.retry = None;
                tracing::error!(workload = %id, %error, "stamp rejected");
                let notice = Notice::new(id.clone(), Reason::StampFailed, error.to_string());
                self.publish(out, notice);
            }
        }
        if let Some((revision, related, workload)) = started {
            self.start_following(&id, revision, related, &workload, now, out);
        }
        if again {
            self.evaluate(&id, now);
        }
    }

    /// Forgets who changed the items `references` of workload `id` name once
    /// no workload depending on them still has their change to write (pending,
    /// or in a write in flight, which a failure puts back): who changed an item
    /// is read only when a stamp carrying its change is planned. At xl, 44,000
    /// items' authors (~3 MB) were kept after every stamp naming them was
    /// written. A later change reported without an author names none, not the
    /// previous change's author.
    fn release_provenance(&mut self, id: &WorkloadId, references: &BTreeSet<Reference>) {
        if references.is_empty() || self.provenance.is_empty() {
            return;
        }
        let Some(specs) = self.graph.specs(id) else {
            return;
        };
        let named: Vec<Tracked> = specs
            .iter()
            .flat_map(|spec| &spec.inputs)
            .filter(|input| references.contains(&input.tracked.reference))
            .map(|input| input.tracked.clone())
            .collect();
        for tracked in named {
            let reference = &tracked.reference;
            let needed = self.graph.dependents(&tracked).any(|dependent| {
                self.records.get(dependent).is_some_and(|record| {
                    record.pending.contains(reference)
                        || matches!(&record.write, WriteState::InFlight(write) if write.changed.contains(reference))
                })
            });
            if !needed {
                self.provenance.remove(&tracked);
            }
        }
        // Most are released after the initial stamps: give the room back.
        let capacity = self.provenance.capacity();
        if capacity > 64 && self.provenance.len() * 4 < capacity {
            self.provenance.shrink_to(self.provenance.len() * 2);
        }
    }

    fn publish(&self, out: &mut Vec<Effect>, notice: Notice) {
        // Only the leader writes; a new leader re-reports what is still true.
        if self.leader {
            out.push(Effect::Publish(notice));
        }
    }
}

fn count(
    metrics: &EngineMetrics,
    id: &WorkloadId,
    sources: &BTreeSet<SourceName>,
    result: StampResult,
) {
    for source in sources {
        metrics.stamp(&id.kind, source, result);
    }
}

/// The values `record`'s outputs had when nudge first saw it, while it has an
/// output still to adopt; empty otherwise.
fn first_sight_values(
    record: &Record,
    specs: &[StampSpec],
    stamp_on_delete: bool,
) -> BTreeMap<Output, String> {
    record
        .first_sight
        .as_deref()
        .map(|seen| seen.values(specs, stamp_on_delete))
        .unwrap_or_default()
}

/// The stamp decision on `record` ([`stamp::decide`]) from the fingerprints in
/// `store` and what it first saw, with the workload as the core knows it.
fn decide(
    record: &Record,
    specs: &[StampSpec],
    store: &RwLock<FingerprintStore>,
    stamp_on_delete: bool,
) -> (Workload, Decision) {
    let current = record.current.to_workload();
    let first_sight = first_sight_values(record, specs, stamp_on_delete);
    let store = store.read().unwrap_or_else(|e| e.into_inner());
    let decision = stamp::decide(&current, specs, &*store, &first_sight, stamp_on_delete);
    (current, decision)
}

/// Until when pacing holds a re-stamp of `record`: its min-interval since the last
/// stamp, unless that stamp's rollout has completed (design §5).
fn hold_until(record: &Record, default_interval: Duration) -> Option<Instant> {
    if record.rollout == Rollout::Complete {
        return None;
    }
    let interval = record.timing().min_interval.unwrap_or(default_interval);
    record
        .last_stamp
        .map(|last| crate::rate::saturating_add(last, interval))
}

/// The sources a stamp is attributed to: those whose observations changed since
/// the last stamp, else (a new or edited workload) those feeding the outputs that
/// change.
fn change_sources(
    record: &Record,
    specs: &[StampSpec],
    patch: &StampPatch,
) -> BTreeSet<SourceName> {
    if !record.pending.is_empty() {
        return record.pending.iter().map(|r| r.source.clone()).collect();
    }
    specs
        .iter()
        .filter(|spec| patch.changed.contains(&spec.output))
        .flat_map(|spec| &spec.inputs)
        .map(|input| input.tracked.reference.source.clone())
        .collect()
}

/// The `ConfigChanged` note: which references changed (never their content)
/// and what the write carried, so that a write made while a change was on its
/// way never names a change it does not carry.
fn change_note(changed: &BTreeSet<Reference>, carries: &str, rolls: bool) -> String {
    let what = if rolls {
        format!("wrote {carries}")
    } else {
        format!("adopted {carries} on the workload's metadata (no rollout)")
    };
    if changed.is_empty() {
        return what;
    }
    let refs: Vec<String> = changed.iter().map(ToString::to_string).collect();
    format!("{} changed; {what}", refs.join(", "))
}

/// `reference` as a rollout names it: with who changed it last, when a source
/// said so.
fn change_of(
    reference: &Reference,
    specs: &[StampSpec],
    provenance: &HashMap<Tracked, authors::PackedProvenance>,
) -> Change {
    let known = specs
        .iter()
        .flat_map(|spec| &spec.inputs)
        .filter(|input| input.tracked.reference == *reference)
        .find_map(|input| provenance.get(&input.tracked))
        .map(authors::PackedProvenance::unpack)
        .unwrap_or_default();
    Change {
        reference: reference.to_string(),
        version: known.version,
        by: known.changed_by,
        at: known.changed_at,
    }
}

/// The values a patch changes, each shortened: fingerprints, never content.
fn carried(patch: &StampPatch) -> String {
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
            format!("{key}={}", crate::errors::excerpt(value, SHOWN))
        })
        .collect();
    shown.join(", ")
}

mod authors;
mod follow;
mod plan;

#[cfg(test)]
mod adoption_tests;
#[cfg(test)]
mod follow_tests;
#[cfg(test)]
mod harness;
#[cfg(test)]
mod plan_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
