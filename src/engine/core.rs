//! The engine core: a synchronous state machine, `handle(Input, now) -> Vec<Effect>`.
//!
//! It owns every decision (design §5): what each workload depends on, whether its
//! stamp is in sync, when it may be written, what is tracked, which Events to
//! publish. It performs no I/O and reads no clock: the driver
//! feeds it [`Input`]s with the current time and performs the [`Effect`]s it
//! returns. State-based: every decision compares the desired stamp with what is on
//! the workload, so replayed inputs and restarts are harmless.
//!
//! [`Core`] composes the state of its concerns, each in a file of its own
//! that owns its struct and decides on it alone:
//!
//! - stamps (`record.rs`): one `Record` per workload, what the core knows of
//!   its stamp, its changes, the write in flight and what was reported;
//! - delivery plans (`plan.rs`): `Plans`, the workloads held and the delivery
//!   settings, judged by the rules of `crate::delivery`;
//! - following rollouts (`follow.rs`): `Following`, the rollouts nudge started
//!   until they end, and the deadlines and CronJob runs that end them;
//! - who changed each input (`authors.rs`) and the namespace selection
//!   (`selection.rs`).
//!
//! `messages.rs` holds its protocol, [`Input`] and [`Effect`]. The `impl Core`
//! below is the only one: it routes each input to its concerns, joins what one
//! needs of another (a wave's progress reads the stamps and the rollouts
//! followed) and turns their decisions into [`Effect`]s. Its submodules do not
//! use it: each decides on its own state.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use smol_str::SmolStr;
use tokio::time::Instant;

pub use self::messages::{Copies, Effect, Input, StampWrite, WriteOutcome};

use self::authors::Authors;
use self::follow::{Ended, Following, Related};
use self::plan::Plans;
use self::record::{InFlight, Record, Records, SnapshotState, Timing, WriteState, carried};
use self::selection::Selection;
use super::graph::DependencyGraph;
use super::metrics::{EngineMetrics, StampResult};
use super::queue::Queue;
use crate::annotations::{self, AnnotationError, AnnotationScheme};
use crate::config::EngineConfig;
use crate::copies::CopyError;
use crate::delivery::{self, Hold, Progress, Standing};
use crate::events::{Notice, Reason};
use crate::model::{
    Output, Reference, Rollout, SourceCatalog, SourceName, StampSpec, Tracked, Workload,
    WorkloadId, WorkloadKind,
};
use crate::outcome::Supersession;
use crate::outcome::history::{Revision, RevisionSnapshot};
use crate::rate::{PacingError, TokenBucket};
use crate::snapshot::{CopyPlan, Snapshot, Verdict};
use crate::sources::SourceUpdate;
use crate::stamp::{
    self, BlockReason, CurrentOutputs, Decision, DesiredStamp, FingerprintLookup, FingerprintStore,
    StampPatch,
};
use crate::targets::{TargetError, WatchScope, WorkloadEvent};
use crate::window::WallClock;

/// Stamps written at once. Each write in flight is a connection to the API server;
/// the token bucket paces how many start per second, this bounds how many
/// connections (and their buffers) a burst opens.
pub const MAX_WRITES_IN_FLIGHT: usize = 8;

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
    /// The kinds whose target takes snapshots ([`Target::takes_snapshots`]):
    /// only their workloads do (design §5e).
    ///
    /// [`Target::takes_snapshots`]: crate::targets::Target::takes_snapshots
    pub snapshot_kinds: BTreeSet<WorkloadKind>,
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
    records: Records,
    /// `kubernetes.namespace_selector`, and the workloads parked outside it.
    selection: Selection,
    /// Per watch stream being relisted, the workloads listed so far.
    relisting: HashMap<WatchScope, HashSet<WorkloadId>>,
    queue: Queue,
    leader: bool,
    in_flight: usize,
    metrics: EngineMetrics,
    /// Who changed each reference last, for references that changed while
    /// tracked (a rollout names them).
    provenance: Authors,
    /// Holds, windows and waves (design §5d).
    plans: Plans,
    /// The rollouts nudge started, until they end (design §5c).
    following: Following,
    /// The kinds whose workloads may take snapshots (design §5e).
    snapshot_kinds: BTreeSet<WorkloadKind>,
    /// Per workload with a snapshot output, what its history says of its
    /// snapshots (design §5e).
    snapshots: HashMap<WorkloadId, SnapshotState>,
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
            snapshot_kinds,
        } = settings;
        let plans = Plans::new(engine.window.clone(), clock);
        let following = Following::new(&scheme, clock);
        let bucket = TokenBucket::new(engine.stamps_per_second, engine.burst)?;
        Ok(Self {
            engine,
            scheme,
            catalog,
            graph: DependencyGraph::new(),
            store,
            records: HashMap::new(),
            selection: Selection::new(namespace_selector),
            relisting: HashMap::new(),
            queue: Queue::new(bucket),
            leader,
            in_flight: 0,
            metrics,
            provenance: Authors::default(),
            plans,
            following,
            snapshot_kinds,
            snapshots: HashMap::new(),
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
            Input::Tick => self.on_tick(now, &mut out),
        }
        self.set_gauges();
        if let Some(at) = self.next_wake() {
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

    /// Due workloads go out only on a tick: the driver handles every input
    /// already queued first, so a burst (a workload's four Consul keys
    /// observed together) is written once, not once per input.
    fn on_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        if self.expire_deadlines(now, out) {
            // A rollout past nudge's deadline failed: the waves after it decide again.
            self.reevaluate_waves(now);
        }
        self.release(now, out);
    }

    fn set_gauges(&self) {
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
    }

    /// When the next tick is due: the queue's next release or nudge's next
    /// rollout deadline.
    fn next_wake(&self) -> Option<Instant> {
        let wake = [
            self.queue.next_wake(self.room() > 0),
            self.following.next_deadline(),
        ];
        wake.into_iter().flatten().min()
    }

    fn publish(&self, out: &mut Vec<Effect>, notice: Notice) {
        // Only the leader writes; a new leader re-reports what is still true.
        if self.leader {
            out.push(Effect::Publish(notice));
        }
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
            WorkloadEvent::InitDone(scope) => self.relisted(&scope, out),
            WorkloadEvent::Apply(workload) => self.on_workload(workload, now, out),
            WorkloadEvent::Delete(id) => {
                self.on_delete(&id, out);
                // It may have been an earlier wave of a held workload.
                self.reevaluate_waves(now);
            }
        }
    }

    /// A watch stream's relist ended: the workloads of its scope it did not
    /// list are gone.
    fn relisted(&mut self, scope: &WatchScope, out: &mut Vec<Effect>) {
        let seen = self.relisting.remove(scope).unwrap_or_default();
        let gone: Vec<WorkloadId> = self
            .records
            .keys()
            .chain(self.selection.parked())
            .filter(|id| scope.contains(id) && !seen.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            self.on_delete(&id, out);
        }
    }

    fn on_workload(&mut self, mut workload: Workload, now: Instant, out: &mut Vec<Effect>) {
        if let Some(known) = self.known_id(&workload.id) {
            workload.id = known;
        }
        if self.older_than_written(&workload) {
            return;
        }
        self.follow_run(&workload, now, out);
        let id = workload.id.clone();
        if !self.selection.contains(&id) {
            self.park(id, workload, out);
            return;
        }
        self.selection.unpark(&id);
        let mut deps = annotations::dependencies(&workload, &self.scheme, &self.catalog);
        self.snapshots_supported(&id, &mut deps);
        let current = CurrentOutputs::new(&workload, deps.stamps.iter().map(|s| &s.output));
        let timing = Timing::of(&deps);
        let snapshot = deps
            .stamps
            .iter()
            .any(|spec| matches!(spec.output, Output::Snapshots(_)))
            .then_some(deps.snapshot.rollback_to);
        self.plans.set(&id, deps.delivery.clone());
        self.track(&id, deps.stamps, out);
        if self.graph.specs(&id).is_none() && deps.errors.is_empty() {
            // Nothing to track or report: forget it (memory grows with what is
            // tracked, not with the cluster).
            self.forget(&id);
            return;
        }
        let before = self.keep(&workload, current, timing);
        self.keep_snapshot(&workload, snapshot);
        self.report_invalid(&id, &deps.errors, out);
        if workload.rollout == Rollout::Complete && before != Rollout::Complete {
            // The previous rollout finished: a held re-stamp need not wait for
            // min-interval any more.
            self.queue.rehold(&id, |since| since);
        }
        self.evaluate(&id, now);
        self.follow_workload(&workload, now, out);
        if workload.rollout != before {
            // An earlier wave completed or failed: the waves after it decide again.
            self.reevaluate_waves(now);
        }
    }

    /// Whether `workload` is older than nudge's own last write to it: queued
    /// before that write returned, whose newer state nudge already has. Taken
    /// as current, it would undo the write in nudge's view (and re-adopt, or
    /// put older content back).
    fn older_than_written(&self, workload: &Workload) -> bool {
        let (Some(record), Some(revision)) = (self.records.get(&workload.id), workload.revision())
        else {
            return false;
        };
        let older = revision < record.written;
        if older {
            tracing::debug!(workload = %workload.id, revision, written = record.written, "older than nudge's last write; skipped");
        }
        older
    }

    /// `id`'s namespace is outside the selection: kept aside, untracked.
    fn park(&mut self, id: WorkloadId, workload: Workload, out: &mut Vec<Effect>) {
        if self.records.contains_key(&id) {
            self.on_delete(&id, out);
        }
        self.selection.park(id, workload);
    }

    /// Keeps what the core knows of `workload` (its outputs now `current`, its
    /// timing annotations) in its record, made at first sight; the rollout
    /// state it had before.
    fn keep(
        &mut self,
        workload: &Workload,
        current: CurrentOutputs,
        timing: Option<Box<Timing>>,
    ) -> Rollout {
        let id = &workload.id;
        let full = self
            .selection
            .by_selector()
            .then(|| Box::new(workload.clone()));
        let record = self
            .records
            .entry(id.clone())
            .or_insert_with(|| Box::new(Record::new(current.clone())));
        let specs = self.graph.specs(id).unwrap_or_default();
        record.see_first(workload, specs, &self.store);
        record.current = current;
        record.full = full;
        record.timing = timing;
        std::mem::replace(&mut record.rollout, workload.rollout)
    }

    /// The copy of `id` the core already keeps: every event and write result
    /// carries a new one, and one per workload is kept.
    fn known_id(&self, id: &WorkloadId) -> Option<WorkloadId> {
        self.records
            .get_key_value(id)
            .map(|(known, _)| known.clone())
    }

    /// Tracks what `specs` need (emitting `Track` and `Untrack`).
    fn track(&mut self, id: &WorkloadId, specs: Vec<StampSpec>, out: &mut Vec<Effect>) {
        let delta = self.graph.apply(id.clone(), specs);
        out.extend(delta.newly_tracked.into_iter().map(Effect::Track));
        self.drop_tracked(delta.droppable, out);
    }

    /// Forgets a workload that has nothing to track or report (its graph
    /// entry is gone already).
    fn forget(&mut self, id: &WorkloadId) {
        self.following.forget(id);
        self.plans.forget(id);
        self.snapshots.remove(id);
        self.records.remove(id);
        self.queue.forget(id);
    }

    fn on_delete(&mut self, id: &WorkloadId, out: &mut Vec<Effect>) {
        self.selection.unpark(id);
        let delta = self.graph.delete(id);
        self.drop_tracked(delta.droppable, out);
        self.forget(id);
    }

    fn drop_tracked(&mut self, droppable: Vec<Tracked>, out: &mut Vec<Effect>) {
        if droppable.is_empty() {
            return;
        }
        let mut store = self.store.write().unwrap_or_else(|e| e.into_inner());
        for tracked in droppable {
            store.remove(&tracked);
            self.provenance.forget(&tracked);
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
    fn on_namespaces(&mut self, selected: BTreeSet<String>, now: Instant, out: &mut Vec<Effect>) {
        for workload in self.selection.select(selected) {
            self.on_workload(workload, now, out);
        }
        let leaving: Vec<WorkloadId> = self
            .records
            .keys()
            .filter(|id| !self.selection.contains(id))
            .cloned()
            .collect();
        for id in leaving {
            let full = self.records.get_mut(&id).and_then(|r| r.full.take());
            self.on_delete(&id, out);
            if let Some(workload) = full {
                self.selection.park(id, *workload);
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
        // What it saw end while another led, and is still marked in flight on
        // the workload, is concluded aloud again.
        let again = self.following.ended_unrecorded().map(Box::new);
        out.extend(again.map(Effect::Conclude));
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
                seen.first_report(&tracked, store.observation(&tracked), &observation);
            }
        }
        let changed = store.set(tracked.clone(), observation);
        drop(store);
        if !changed {
            return;
        }
        if let Some(provenance) = provenance {
            self.provenance.changed(&tracked, &provenance);
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

    /// The stamp decision on `id` now, with the workload as the core knows it:
    /// its sources', or the one that moves it to the snapshot `rollback-to`
    /// holds it at (design §5e).
    fn decide(&self, id: &WorkloadId) -> Option<(Workload, Decision)> {
        let (record, specs) = (self.records.get(id)?, self.graph.specs(id)?);
        let (workload, decision) = record.decide(specs, &self.store, self.engine.stamp_on_delete);
        let snapshot = Output::Snapshots(self.scheme.snapshots());
        let restoring = self
            .snapshots
            .get(id)
            .and_then(|state| state.restoring(&workload, specs, &decision.desired, &snapshot));
        Some((workload, restoring.unwrap_or(decision)))
    }

    /// Queues `id` when its stamp differs from the desired one or a reference is
    /// missing; an in-sync workload is left alone.
    fn evaluate(&mut self, id: &WorkloadId, now: Instant) {
        let Some((_, decision)) = self.decide(id) else {
            return;
        };
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
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
        } else if !record.writing() {
            // In sync again (e.g. reverted within the debounce window). While a stamp
            // is in flight, the watch may echo it before the write returns: the
            // pending references still belong to that stamp's Event.
            self.in_sync(id);
        }
    }

    /// `id` is in sync: nothing is pending or held, and who changed what was
    /// pending is released.
    fn in_sync(&mut self, id: &WorkloadId) {
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        let written = record.clear_pending();
        self.plans.release(id);
        self.release_provenance(id, &written);
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
            .and_then(|record| record.hold_until(self.engine.min_interval));
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
            let hold = records.get(id).and_then(|r| r.hold_until(interval));
            hold.map_or(since, |until| until.max(since))
        });
        for id in due {
            self.dispatch(id, now, out);
        }
    }

    /// Decides on a due workload: write its stamp, or report why not.
    fn dispatch(&mut self, id: WorkloadId, now: Instant, out: &mut Vec<Effect>) {
        if self.due_while_writing(&id) {
            return;
        }
        let Some((workload, decision)) = self.decide(&id) else {
            return;
        };
        let Decision {
            desired,
            patch,
            rolls,
        } = decision;
        warn_blocked(&id, &desired);
        if self.waits_for_unknown(&id, &desired, now) {
            return;
        }
        self.report_missing(&id, missing(&desired), out);
        let Some(patch) = patch else {
            self.in_sync(&id);
            return;
        };
        let sources = self.change_sources(&id, &patch);
        if !self.leader {
            // The leader writes; this replica keeps the workload pending and
            // re-evaluates everything if it becomes leader.
            tracing::debug!(workload = %id, "not the leader; not stamping");
            count(&self.metrics, &id, &sources, StampResult::SkippedFollower);
            return;
        }
        let restores = match self.snapshot_holds(&id, (&workload, &desired, &patch), rolls, out) {
            SnapshotDispatch::Held => return,
            SnapshotDispatch::Restores(revision) => Some(revision),
            SnapshotDispatch::Follows => None,
        };
        if restores.is_none() && rolls && self.held(&id, &desired, now, out) {
            return;
        }
        let config = stamp::snapshot_of(&patch).map(|_| desired.pending_fingerprint());
        let stamping = Stamping {
            sources,
            rolls,
            config,
            restores,
        };
        self.write(id, workload, patch, stamping, now, out);
    }

    /// Whether `id` is being written: it is then decided again once the
    /// write returns (or it has no record).
    fn due_while_writing(&mut self, id: &WorkloadId) -> bool {
        match self.records.get_mut(id).map(|r| &mut r.write) {
            Some(WriteState::InFlight(write)) => {
                write.again = true;
                true
            }
            Some(WriteState::Idle) => false,
            None => true,
        }
    }

    /// Whether a due `id` waits for an input no source has reported yet
    /// (start-up, a new reference) rather than write a partial stamp now and
    /// the rest a moment later. Its observation queues the workload again;
    /// after `max_delay` from when it first waited (a source that stays
    /// unreachable) what is known is written.
    fn waits_for_unknown(&mut self, id: &WorkloadId, desired: &DesiredStamp, now: Instant) -> bool {
        let unknown = desired
            .blocked
            .iter()
            .any(|b| matches!(b.reason, BlockReason::Unknown { .. }));
        let Some(record) = self.records.get_mut(id) else {
            return false;
        };
        let since = *record.unknown_since.get_or_insert(now);
        let waited = now.saturating_duration_since(since);
        if !unknown || waited >= self.engine.max_delay {
            record.unknown_since = None;
            return false;
        }
        self.touch(id.clone(), now, Some(self.engine.max_delay - waited));
        true
    }

    /// The sources a stamp of `id` writing `patch` is attributed to.
    fn change_sources(&self, id: &WorkloadId, patch: &StampPatch) -> BTreeSet<SourceName> {
        match (self.records.get(id), self.graph.specs(id)) {
            (Some(record), Some(specs)) => record.change_sources(specs, patch),
            _ => BTreeSet::new(),
        }
    }

    /// Starts the write of `patch` to `id` (`workload` as the core knows it,
    /// `sources` its changes', `rolls` whether it changes the pod template):
    /// the changes it carries, the revision a rolling one starts (its marker
    /// written in the same request) and the rollout it supersedes.
    fn write(
        &mut self,
        id: WorkloadId,
        mut workload: Workload,
        mut patch: StampPatch,
        stamping: Stamping,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let Stamping {
            sources,
            rolls,
            config,
            restores,
        } = stamping;
        let copies = snapshot_copies(&id, &workload, &patch, restores.is_some());
        if copies.is_some() {
            workload.uid = self.snapshots.get(&id).and_then(|s| s.uid.clone());
        }
        let Some(record) = self.records.get_mut(&id) else {
            return;
        };
        let (changed, observed_at, adopted) = record.take_changes(rolls);
        let number = record.revisions.next();
        let mut write = InFlight {
            again: false,
            sources,
            carries: carried(&patch),
            changed,
            observed_at,
            rolls,
            revision: None,
        };
        let mut supersedes = None;
        if rolls {
            let mut started = self.revision_started(&id, number, &write.changed, &workload, &patch);
            if let (Some(value), Some(config)) = (stamp::snapshot_of(&patch), config) {
                started.0.snapshot = RevisionSnapshot::written(value, config, restores);
            }
            supersedes = self.supersede(&id, number, now);
            // The revision goes with the stamp, in one request: whatever happens
            // next, the workload says which rollout is in flight.
            let marker = Output::WorkloadAnnotation(self.scheme.rollout());
            patch.values.insert(marker.clone(), started.0.to_json());
            patch.changed.push(marker);
            write.revision = Some(started);
        }
        if let Some(record) = self.records.get_mut(&id) {
            record.write = WriteState::InFlight(Box::new(write));
        }
        self.in_flight += 1;
        self.release_provenance(&id, &adopted);
        out.push(Effect::Write(Box::new(StampWrite {
            workload,
            patch,
            supersedes,
            copies,
        })));
    }

    /// The revision a rolling stamp of `id` starts: number `number`, the
    /// changes it carries with who made them, each value before and after;
    /// and the first reference it carries (its rollout's related object).
    fn revision_started(
        &self,
        id: &WorkloadId,
        number: u32,
        changed: &BTreeSet<Reference>,
        workload: &Workload,
        patch: &StampPatch,
    ) -> (Revision, Option<Related>) {
        let specs = self.graph.specs(id).unwrap_or_default();
        let change = |reference: &Reference| self.provenance.change_of(reference, specs);
        let revision = Revision::started(number, changed, change, workload, specs, patch);
        let related = changed
            .first()
            .map(|reference| Related::of(reference, specs));
        (revision, related)
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
}

// === write results ===

impl Core {
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
        let write = record.take_write();
        if !matches!(outcome, WriteOutcome::Applied(_) | WriteOutcome::Gone) {
            // Not written: its changes are still to be written.
            record.restore(&write);
        }
        let again = write.again;
        match outcome {
            WriteOutcome::Applied(workload) => self.on_applied(&id, workload, write, now, out),
            WriteOutcome::Gone => {
                count(&self.metrics, &id, &write.sources, StampResult::Gone);
                tracing::debug!(workload = %id, "workload deleted before the stamp");
                self.on_delete(&id, out);
                return;
            }
            WriteOutcome::Retry(error) => self.on_retry(&id, &write.sources, &error, now),
            WriteOutcome::Failed(error) => self.on_refused(&id, &write.sources, &error, out),
            WriteOutcome::Copies(error) => {
                self.on_copies_failed(&id, &write.sources, &error, now, out)
            }
        }
        if again {
            self.evaluate(&id, now);
        }
    }

    /// nudge's write to `id` went through; `workload` as stored after it.
    fn on_applied(
        &mut self,
        id: &WorkloadId,
        mut workload: Box<Workload>,
        write: InFlight,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        count(&self.metrics, id, &write.sources, StampResult::Applied);
        if let Some(observed) = write.observed_at {
            self.metrics
                .stamp_latency(now.saturating_duration_since(observed));
        }
        workload.id = id.clone();
        let specs = self.graph.specs(id).unwrap_or_default();
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        record.after_write(&workload, specs, write.rolls, now);
        if let Some(state) = self.snapshots.get_mut(id) {
            state.refresh(&workload, (&self.scheme.history(), &self.scheme.rollout()));
        }
        let note = write.note();
        tracing::info!(workload = %id, %note, "stamped");
        let InFlight {
            changed, revision, ..
        } = write;
        self.release_provenance(id, &changed);
        let notice = Notice::new(id.clone(), Reason::ConfigChanged, note)
            .with_changed(changed.into_iter().collect());
        self.publish(out, notice);
        if let Some(started) = revision {
            self.start_following(&workload, started, now, out);
        }
        if let Some(record) = self.records.get_mut(id)
            && record.full.is_some()
        {
            record.full = Some(workload);
        }
    }

    /// A write to `id` failed and is retried after a backoff.
    fn on_retry(
        &mut self,
        id: &WorkloadId,
        sources: &BTreeSet<SourceName>,
        error: &TargetError,
        now: Instant,
    ) {
        count(&self.metrics, id, sources, StampResult::Retried);
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        let delay = record.retry_delay();
        tracing::warn!(workload = %id, %error, category = error.category(), retry_in = ?delay, "stamp failed; retrying");
        self.touch(id.clone(), now, Some(delay));
    }

    /// A write to `id` was refused for good: reported, not retried.
    fn on_refused(
        &mut self,
        id: &WorkloadId,
        sources: &BTreeSet<SourceName>,
        error: &TargetError,
        out: &mut Vec<Effect>,
    ) {
        count(&self.metrics, id, sources, StampResult::Failed);
        if let Some(record) = self.records.get_mut(id) {
            record.retry = None;
        }
        tracing::error!(workload = %id, %error, "stamp rejected");
        let notice = Notice::new(id.clone(), Reason::StampFailed, error.to_string());
        self.publish(out, notice);
    }

    /// Forgets who changed the items `references` of workload `id` name once
    /// no workload depending on them still has their change to write (pending,
    /// or in a write in flight, which a failure puts back): who changed an item
    /// is read only when a stamp carrying its change is planned.
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
        let (graph, records) = (&self.graph, &self.records);
        let needed = |tracked: &Tracked| {
            graph.dependents(tracked).any(|dependent| {
                records
                    .get(dependent)
                    .is_some_and(|record| record.carries(&tracked.reference))
            })
        };
        self.provenance.release(named, needed);
    }
}

// === delivery plans ===

impl Core {
    /// Whether `id`'s rolling stamp (to `desired`) waits; when it does, the
    /// hold is recorded, reported once per note, and a window's opening is
    /// timed.
    fn held(
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
        self.report_hold(id, hold, &pending, out);
        true
    }

    /// Records and reports (once per note) that `id`'s rolling stamp of
    /// config `pending` waits, for `hold`.
    fn report_hold(&mut self, id: &WorkloadId, hold: Hold, pending: &str, out: &mut Vec<Effect>) {
        let changed: Vec<Reference> = self
            .records
            .get(id)
            .map(|record| record.pending.iter().cloned().collect())
            .unwrap_or_default();
        if let Hold::Halted { failed, .. } = &hold {
            self.report_halt(failed, &changed, out);
        }
        let approve = self.scheme.approve();
        if let Some(notice) = self.plans.report(id, hold, (pending, &approve), changed) {
            self.publish(out, notice);
        }
    }

    /// Every target has delivered its initial listing: the workloads held
    /// for it are judged against the earlier waves now.
    fn on_listed(&mut self, now: Instant) {
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

    /// How `id` stands for the waves after it ([`delivery::progress`]): not
    /// stamped while being written, held, or with a change to roll.
    fn progress(&self, id: &WorkloadId) -> Progress {
        let Some(record) = self.records.get(id) else {
            return Progress::Done;
        };
        let standing = Standing {
            kind: &id.kind,
            not_stamped: record.writing() || self.plans.is_held(id) || self.rolls_pending(id),
            rollout: record.rollout,
            followed: self.following.followed(id),
            last_failed: record.revisions.last_failed(),
        };
        delivery::progress(&standing)
    }

    /// Whether `id` has a change still to roll (its desired stamp changes its
    /// pod template).
    fn rolls_pending(&self, id: &WorkloadId) -> bool {
        self.decide(id).is_some_and(|(_, decision)| decision.rolls)
    }

    /// One `WavesHalted` per failed workload and stamped config: it names
    /// every later-wave workload it holds and the change they wait to carry.
    fn report_halt(&mut self, failed: &WorkloadId, changed: &[Reference], out: &mut Vec<Effect>) {
        let Some(specs) = self.graph.specs(failed) else {
            return;
        };
        let store = self.store.read().unwrap_or_else(|e| e.into_inner());
        let fingerprint = crate::stamp::desired(specs, &*store, self.engine.stamp_on_delete)
            .pending_fingerprint();
        drop(store);
        if !self.plans.report_halt(failed, &fingerprint) {
            return;
        }
        let wave = self.plans.wave(failed);
        let held: Vec<(WorkloadId, u32)> = self
            .neighbours(failed)
            .into_iter()
            .map(|other| {
                let wave = self.plans.wave(&other);
                (other, wave)
            })
            .filter(|(other, later)| *later > wave && self.rolls_pending(other))
            .collect();
        let note = delivery::halt_note(&fingerprint, wave, changed, &held);
        tracing::warn!(workload = %failed, %note, "waves halted");
        let notice =
            Notice::new(failed.clone(), Reason::WavesHalted, note).with_changed(changed.to_vec());
        self.publish(out, notice);
    }

    /// An earlier wave completed or failed: the workloads it held decide again.
    fn reevaluate_waves(&mut self, now: Instant) {
        if !self.plans.has_waves() {
            return;
        }
        for id in self.plans.held_by_waves() {
            self.evaluate(&id, now);
        }
    }
}

// === snapshots (design §5e) ===

/// How a snapshot verdict bears on a dispatch.
enum SnapshotDispatch {
    /// Its sources decide, as for any workload.
    Follows,
    /// The stamp moves the template to this revision's snapshot
    /// (`rollback-to`): written past every hold.
    Restores(u32),
    /// Its rolling stamp waits (held, and reported).
    Held,
}

/// What a write records and carries beside its patch.
struct Stamping {
    /// The sources whose changes it carries.
    sources: BTreeSet<SourceName>,
    /// Whether it changes the pod template.
    rolls: bool,
    /// With a snapshot: the pending fingerprint of the stamp, recorded with
    /// its revision.
    config: Option<String>,
    /// A rollback's: the revision whose snapshot it restores.
    restores: Option<u32>,
}

impl Core {
    /// A workload whose target does not take snapshots takes none: its
    /// snapshot output goes, and asking for one is reported.
    fn snapshots_supported(&self, id: &WorkloadId, deps: &mut annotations::Dependencies) {
        if self.snapshot_kinds.contains(&id.kind) {
            return;
        }
        deps.stamps
            .retain(|spec| !matches!(spec.output, Output::Snapshots(_)));
        if deps.snapshot.wanted {
            deps.errors.push(AnnotationError::Unsupported {
                key: self.scheme.snapshot(),
                value: "true".into(),
                instead: "the target of this kind does not point pod templates at copies (a target registered in code)",
            });
            deps.snapshot = annotations::SnapshotChoice::default();
        }
    }

    /// Keeps what `workload`'s history says of its snapshots and where
    /// `rollback-to` holds it (`snapshot`: `Some` while it has a snapshot
    /// output, with its `rollback-to`).
    fn keep_snapshot(&mut self, workload: &Workload, snapshot: Option<Option<u32>>) {
        let id = &workload.id;
        let Some(rollback_to) = snapshot.filter(|_| self.records.contains_key(id)) else {
            self.snapshots.remove(id);
            return;
        };
        let keys = (self.scheme.history(), self.scheme.rollout());
        let mut state = SnapshotState {
            rollback_to,
            uid: workload.uid.clone(),
            ..SnapshotState::default()
        };
        state.refresh(workload, (&keys.0, &keys.1));
        self.snapshots.insert(id.clone(), state);
    }

    /// How `id`'s snapshot bears on dispatching `patch` (decided with
    /// `desired` on `workload`; `rolls`: it changes the pod template): a
    /// rollback's stamp is written past every hold; while `rollback-to`
    /// holds the template, or after someone else rolled it back, a rolling
    /// stamp of the sources waits, reported (design §5e).
    fn snapshot_holds(
        &mut self,
        id: &WorkloadId,
        (workload, desired, patch): (&Workload, &DesiredStamp, &StampPatch),
        rolls: bool,
        out: &mut Vec<Effect>,
    ) -> SnapshotDispatch {
        let Some(state) = self.snapshots.get(id) else {
            return SnapshotDispatch::Follows;
        };
        let output = Output::Snapshots(self.scheme.snapshots());
        let hold = match state.verdict(workload, desired, &output) {
            Verdict::Follow => return SnapshotDispatch::Follows,
            Verdict::Pinned { revision, snapshot } => {
                if stamp::snapshot_of(patch) == Some(snapshot.to_annotation().as_str()) {
                    return SnapshotDispatch::Restores(revision);
                }
                Hold::Rollback {
                    revision,
                    kept: true,
                }
            }
            Verdict::PinnedToUnknown { revision } => Hold::Rollback {
                revision,
                kept: false,
            },
            Verdict::RolledBack { revision } => Hold::RolledBack { revision },
        };
        if !rolls {
            return SnapshotDispatch::Follows;
        }
        self.report_hold(id, hold, &desired.pending_fingerprint(), out);
        SnapshotDispatch::Held
    }

    /// The copies a stamp of `id` names could not be made or found (design
    /// §5e): nothing was written. A Warning names the copy and why (not for
    /// a source that changed meanwhile: the next stamp carries it), and the
    /// stamp is tried again after a backoff, unless waiting cannot help (a
    /// rollback's copy that is gone).
    fn on_copies_failed(
        &mut self,
        id: &WorkloadId,
        sources: &BTreeSet<SourceName>,
        error: &CopyError,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        if error.is_news() {
            tracing::warn!(workload = %id, %error, category = error.category(), "snapshot not made; the stamp waits");
            let notice = Notice::new(id.clone(), Reason::SnapshotFailed, error.to_string());
            self.publish(out, notice);
        } else {
            tracing::debug!(workload = %id, %error, "snapshot source moved on; the stamp waits for it");
        }
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        if error.is_retryable() {
            count(&self.metrics, id, sources, StampResult::Retried);
            let delay = record.retry_delay();
            self.touch(id.clone(), now, Some(delay));
        } else {
            count(&self.metrics, id, sources, StampResult::Failed);
            record.retry = None;
        }
    }
}

/// The copies `patch` names that `workload`'s template does not use yet,
/// to make (or, `restoring`, to find) before it is written (design §5e).
fn snapshot_copies(
    id: &WorkloadId,
    workload: &Workload,
    patch: &StampPatch,
    restoring: bool,
) -> Option<Box<Copies>> {
    if !stamp::changes_snapshot(patch) {
        return None;
    }
    let to = Snapshot::parse(stamp::snapshot_of(patch)?).unwrap_or_default();
    let (output, _) = patch
        .values
        .iter()
        .find(|(output, _)| matches!(output, Output::Snapshots(_)))?;
    let current = stamp::current(workload, output)
        .and_then(|value| Snapshot::parse(&value).ok())
        .unwrap_or_default();
    let plans: Vec<CopyPlan> = to
        .entries()
        .filter(|(key, fingerprint)| current.get(key) != Some(*fingerprint))
        .map(|(key, fingerprint)| CopyPlan::new(id, key.clone(), fingerprint))
        .collect();
    (!plans.is_empty()).then(|| Box::new(Copies { plans, restoring }))
}

// === following rollouts ===

impl Core {
    /// nudge's stamp of `workload` (as stored after it) starting `started`
    /// was written: its rollout is followed from now.
    fn start_following(
        &mut self,
        workload: &Workload,
        started: (Revision, Option<Related>),
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let id = &workload.id;
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        let window = record.progress_deadline(self.engine.progress_deadline);
        if self.leader {
            let sources = follow::source_names(&started.0);
            let names: Vec<&str> = sources.iter().map(String::as_str).collect();
            self.metrics.rollout(&id.kind, &names, "started");
        }
        let ended = self
            .following
            .start(workload, &mut record.revisions, started, window, now);
        self.conclude(ended, out);
    }

    /// A workload event, for the rollout followed on it.
    fn follow_workload(&mut self, workload: &Workload, now: Instant, out: &mut Vec<Effect>) {
        let Some(record) = self.records.get_mut(&workload.id) else {
            return;
        };
        let window = record.progress_deadline(self.engine.progress_deadline);
        let ended = self.following.on_workload(
            workload,
            &mut record.revisions,
            record.written,
            window,
            now,
        );
        self.conclude(ended, out);
    }

    /// A Job event, for the rollout of the CronJob that controls it.
    fn follow_run(&mut self, job: &Workload, now: Instant, out: &mut Vec<Effect>) {
        let (records, default) = (&self.records, self.engine.progress_deadline);
        let tracked = |id: &WorkloadId| records.contains_key(id);
        let window = |id: &WorkloadId| progress_deadline(records, default, id);
        let ended = self.following.on_job(job, tracked, window, now);
        self.conclude(ended, out);
    }

    /// Rollouts past nudge's own deadline fail; whether any did.
    fn expire_deadlines(&mut self, now: Instant, out: &mut Vec<Effect>) -> bool {
        let (records, default) = (&self.records, self.engine.progress_deadline);
        let ended = self
            .following
            .expire(now, |id| progress_deadline(records, default, id));
        let expired = !ended.is_empty();
        self.conclude(ended, out);
        expired
    }

    /// A newer stamp of `id`, starting revision `next`, is on its way: the
    /// rollout in progress is superseded. The driver publishes its Event and
    /// carries it in `next`'s marker (with any it superseded in turn), as the
    /// workload last showed it, so a change while a rollout is in flight
    /// costs no extra request; `None` when none is in progress.
    fn supersede(&mut self, id: &WorkloadId, next: u32, now: Instant) -> Option<Box<Supersession>> {
        let (ended, seen) = self.following.supersede(id, next, now)?;
        if self.leader {
            self.count_ended(&ended);
        }
        Some(Box::new(Supersession {
            conclusion: ended.conclusion,
            marker: Output::WorkloadAnnotation(self.scheme.rollout()),
            limit: self.engine.history_limit,
            seen,
        }))
    }

    /// Rollouts that ended: the leader counts them and has the driver publish
    /// and record each.
    fn conclude(&mut self, ended: impl IntoIterator<Item = Ended>, out: &mut Vec<Effect>) {
        for ended in ended {
            if self.leader {
                self.count_ended(&ended);
                out.push(Effect::Conclude(Box::new(ended.conclusion)));
            }
        }
    }

    fn count_ended(&self, ended: &Ended) {
        let kind = &ended.conclusion.workload.kind;
        let outcome = ended.outcome.as_str();
        let names: Vec<&str> = ended.sources.iter().map(SmolStr::as_str).collect();
        self.metrics.rollout(kind, &names, outcome);
        self.metrics.rollout_ended(kind, outcome, ended.took);
    }
}

/// nudge's own progress deadline for workload `id`: its annotation's, else
/// `default` (`engine.progress_deadline`).
fn progress_deadline(records: &Records, default: Duration, id: &WorkloadId) -> Duration {
    records
        .get(id)
        .map_or(default, |record| record.progress_deadline(default))
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

/// The required references `desired` found missing.
fn missing(desired: &DesiredStamp) -> BTreeSet<Reference> {
    desired
        .blocked
        .iter()
        .filter_map(|b| match &b.reason {
            BlockReason::Missing { reference } => Some(reference.clone()),
            _ => None,
        })
        .collect()
}

/// Logs the outputs of `id` that cannot be computed for a reason other than a
/// missing or unknown input (reported and waited for elsewhere).
fn warn_blocked(id: &WorkloadId, desired: &DesiredStamp) {
    for blocked in &desired.blocked {
        if !matches!(
            blocked.reason,
            BlockReason::Missing { .. } | BlockReason::Unknown { .. }
        ) {
            tracing::warn!(workload = %id, output = %blocked.output, reason = %blocked.reason, "cannot compute stamp");
        }
    }
}

mod authors;
mod follow;
mod messages;
mod plan;
mod record;
mod selection;

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
