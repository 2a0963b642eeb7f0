//! The engine at run time: one task owns the dependency graph and the fingerprint
//! store; targets feed it workloads, sources feed it observations, and the
//! scheduler tells it when a workload is due. State-based: every decision compares
//! the desired stamp with what is on the workload, so replayed events and restarts
//! are harmless.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::graph::DependencyGraph;
use super::schedule::Scheduler;
use crate::annotations::{self, AnnotationScheme};
use crate::config::EngineConfig;
use crate::events::{EventSink, Notice, Reason};
use crate::model::{
    Reference, SourceCatalog, SourceName, Tracked, Workload, WorkloadId, WorkloadKind,
};
use crate::runtime::metrics::{Metrics, StampResult};
use crate::scope::SelectedNamespaces;
use crate::sources::{Interest, Source, SourceContext, SourceUpdate};
use crate::stamp::{self, BlockReason, CurrentOutputs, FingerprintStore, StampPatch};
use crate::targets::{ApplyOutcome, Target, TargetError, WatchScope, WorkloadEvent};

/// Capacity of the channels from targets and sources.
const CHANNEL_CAPACITY: usize = 1024;
/// First retry delay after a failed stamp; doubles up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(500);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);
/// Delay before a source whose `run` failed is started again.
const SOURCE_RESTART_DELAY: Duration = Duration::from_secs(5);
/// How often gauges that change outside the engine task (queue depth) are read.
const GAUGE_INTERVAL: Duration = Duration::from_secs(1);
/// Stamps written at once. Each write in flight is an HTTP/1 connection to the API
/// server; the token bucket paces how many start per second, this bounds how many
/// connections (and their buffers) a burst opens: at a few milliseconds per write
/// it still allows thousands of stamps per second.
const MAX_WRITES_IN_FLIGHT: usize = 8;

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Two sources were registered under one name.
    #[error("two sources are named {0}")]
    DuplicateSource(SourceName),
    /// Two targets were registered for one kind.
    #[error("two targets handle {0}")]
    DuplicateTarget(WorkloadKind),
    /// The pacing configuration is invalid.
    #[error("invalid pacing configuration: {0}")]
    Pacing(#[from] super::pacing::PacingError),
}

/// The assembled controller: sources, targets, event sink and settings.
pub struct Engine {
    config: EngineConfig,
    scheme: AnnotationScheme,
    sources: BTreeMap<SourceName, Arc<dyn Source>>,
    targets: HashMap<WorkloadKind, Arc<dyn Target>>,
    events: Arc<dyn EventSink>,
    store: Arc<RwLock<FingerprintStore>>,
    metrics: Metrics,
    leadership: Option<watch::Receiver<bool>>,
    selected_namespaces: Option<SelectedNamespaces>,
}

impl Engine {
    /// An engine with no sources or targets yet.
    pub fn new(config: EngineConfig, scheme: AnnotationScheme, events: Arc<dyn EventSink>) -> Self {
        Self {
            config,
            scheme,
            sources: BTreeMap::new(),
            targets: HashMap::new(),
            events,
            store: Arc::default(),
            metrics: Metrics::new(),
            leadership: None,
            selected_namespaces: None,
        }
    }

    /// Records into `metrics` instead of a private registry.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Stamps (and publishes Events) only while `leader` is true; without this,
    /// the engine always stamps. On becoming leader it re-evaluates every workload.
    pub fn with_leadership(mut self, leader: watch::Receiver<bool>) -> Self {
        self.leadership = Some(leader);
        self
    }

    /// Stamps only workloads in the namespaces `selected` names (from
    /// `kubernetes.namespace_selector`); the others are kept aside, untracked, and
    /// come in when their namespace starts matching.
    pub fn with_selected_namespaces(mut self, selected: SelectedNamespaces) -> Self {
        self.selected_namespaces = Some(selected);
        self
    }

    /// Registers a source under its name.
    pub fn with_source(mut self, source: Arc<dyn Source>) -> Result<Self, EngineError> {
        let name = source.name().clone();
        if self.sources.insert(name.clone(), source).is_some() {
            return Err(EngineError::DuplicateSource(name));
        }
        Ok(self)
    }

    /// Registers a target for its kind.
    pub fn with_target(mut self, target: Arc<dyn Target>) -> Result<Self, EngineError> {
        let kind = target.kind();
        if self.targets.insert(kind, target).is_some() {
            return Err(EngineError::DuplicateTarget(kind));
        }
        Ok(self)
    }

    /// The configured sources, as annotations see them.
    pub fn catalog(&self) -> SourceCatalog {
        SourceCatalog(
            self.sources
                .iter()
                .map(|(name, source)| (name.clone(), source.scope()))
                .collect(),
        )
    }

    /// The registered sources by name (the webhook reads, with [`Source::observe`],
    /// inputs the engine has not observed yet).
    pub fn sources(&self) -> BTreeMap<SourceName, Arc<dyn Source>> {
        self.sources.clone()
    }

    /// The fingerprints the engine currently knows (shared with the webhook).
    pub fn fingerprints(&self) -> Arc<RwLock<FingerprintStore>> {
        self.store.clone()
    }

    /// Runs until `shutdown` is cancelled, then stops every task it started.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), EngineError> {
        let (scheduler, mut due, scheduler_task) = Scheduler::spawn(&self.config)?;
        let (workload_tx, mut workloads) = mpsc::channel(CHANNEL_CAPACITY);
        let (update_tx, mut updates) = mpsc::channel(CHANNEL_CAPACITY);
        let (done_tx, mut done) = mpsc::unbounded_channel();
        let (exit_tx, mut exits) = mpsc::unbounded_channel();
        let tasks_shutdown = shutdown.child_token();
        let mut tasks = JoinSet::new();
        for target in self.targets.values() {
            let span = tracing::info_span!("target", kind = %target.kind());
            tasks.spawn(
                target
                    .clone()
                    .run(workload_tx.clone(), tasks_shutdown.clone())
                    .instrument(span),
            );
        }
        let mut core = Core {
            catalog: self.catalog(),
            config: self.config,
            scheme: self.scheme,
            graph: DependencyGraph::new(),
            store: self.store,
            workloads: HashMap::new(),
            parked: HashMap::new(),
            selected_namespaces: self.selected_namespaces,
            scheduler,
            interest: HashMap::new(),
            pending: HashMap::new(),
            relisting: HashMap::new(),
            in_flight: HashSet::new(),
            writes: Arc::new(Semaphore::new(MAX_WRITES_IN_FLIGHT)),
            due_again: HashSet::new(),
            attempts: HashMap::new(),
            observed_at: HashMap::new(),
            metrics: self.metrics,
            // Without election this replica always leads; the sender lives as long
            // as the receiver needs a value.
            leadership: self.leadership.unwrap_or_else(|| watch::channel(true).1),
            reported_missing: HashMap::new(),
            reported_invalid: HashMap::new(),
            events: self.events,
            targets: self.targets,
            done: done_tx,
        };
        let launcher = SourceLauncher {
            sources: self.sources,
            updates: update_tx,
            exits: exit_tx,
            shutdown: tasks_shutdown.clone(),
        };
        for name in launcher.sources.keys().cloned().collect::<Vec<_>>() {
            core.interest
                .insert(name.clone(), launcher.launch(&name, Duration::ZERO));
        }
        let mut gauges = tokio::time::interval(GAUGE_INTERVAL);
        gauges.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = gauges.tick() => {}
                Ok(()) = core.leadership.changed() => core.on_leadership().await,
                true = namespaces_changed(&mut core.selected_namespaces) => core.on_namespaces().await,
                Some(event) = workloads.recv() => core.on_workload_event(event).await,
                Some(update) = updates.recv() => core.on_update(update),
                Some(id) = due.recv() => core.on_due(id).await,
                Some(applied) = done.recv() => core.on_applied(applied).await,
                Some(name) = exits.recv() => {
                    let interest = launcher.launch(&name, SOURCE_RESTART_DELAY);
                    core.restart_interest(&name, interest);
                }
            }
            core.record_gauges();
        }
        tasks_shutdown.cancel();
        while tasks.join_next().await.is_some() {}
        drop(core);
        scheduler_task.abort();
        Ok(())
    }
}

/// Starts (and restarts) sources.
struct SourceLauncher {
    sources: BTreeMap<SourceName, Arc<dyn Source>>,
    updates: mpsc::Sender<SourceUpdate>,
    exits: mpsc::UnboundedSender<SourceName>,
    shutdown: CancellationToken,
}

impl SourceLauncher {
    /// Starts source `name` after `delay` and returns the sender of its interest.
    fn launch(&self, name: &SourceName, delay: Duration) -> mpsc::UnboundedSender<Interest> {
        let (interest_tx, interest) = mpsc::unbounded_channel();
        let Some(source) = self.sources.get(name).cloned() else {
            return interest_tx;
        };
        let ctx = SourceContext {
            interest,
            updates: self.updates.clone(),
            shutdown: self.shutdown.clone(),
        };
        let exits = self.exits.clone();
        let shutdown = self.shutdown.clone();
        let name = name.clone();
        let span = tracing::info_span!("source", source = %name);
        tokio::spawn(
            async move {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                match source.run(ctx).await {
                    Ok(()) if shutdown.is_cancelled() => {}
                    Ok(()) => {
                        tracing::warn!("source stopped; restarting");
                        let _ = exits.send(name);
                    }
                    Err(error) => {
                        tracing::error!(%error, category = error.category(), "source failed; restarting");
                        let _ = exits.send(name);
                    }
                }
            }
            .instrument(span),
        );
        interest_tx
    }
}

/// What a finished stamp attempt reports back.
struct Applied {
    patch: StampPatch,
    /// The sources whose change the stamp writes (metric label).
    sources: BTreeSet<SourceName>,
    result: Result<ApplyOutcome, TargetError>,
}

/// A workload as the engine keeps it: the current values of its outputs, which is
/// all a stamp reads, not the whole pod template.
struct Known {
    current: CurrentOutputs,
    /// The whole workload, kept only under a namespace selector: a workload whose
    /// namespace leaves the selection is parked, and coming back needs all of it.
    full: Option<Box<Workload>>,
    debounce: Option<Duration>,
    min_interval: Option<Duration>,
}

/// The engine's state, owned by its one task.
struct Core {
    catalog: SourceCatalog,
    config: EngineConfig,
    scheme: AnnotationScheme,
    graph: DependencyGraph,
    store: Arc<RwLock<FingerprintStore>>,
    workloads: HashMap<WorkloadId, Known>,
    /// Workloads in namespaces outside `kubernetes.namespace_selector`: kept, not
    /// tracked.
    parked: HashMap<WorkloadId, Workload>,
    selected_namespaces: Option<SelectedNamespaces>,
    scheduler: Scheduler,
    interest: HashMap<SourceName, mpsc::UnboundedSender<Interest>>,
    /// References whose observation changed since each workload's last stamp.
    pending: HashMap<WorkloadId, BTreeSet<Reference>>,
    /// Per watch stream being relisted, the workloads listed so far.
    relisting: HashMap<WatchScope, HashSet<WorkloadId>>,
    in_flight: HashSet<WorkloadId>,
    /// Permits for [`MAX_WRITES_IN_FLIGHT`].
    writes: Arc<Semaphore>,
    /// Workloads that became due while a stamp of theirs was in flight.
    due_again: HashSet<WorkloadId>,
    attempts: HashMap<WorkloadId, u32>,
    /// When the first observation change not yet stamped arrived, per workload.
    observed_at: HashMap<WorkloadId, Instant>,
    metrics: Metrics,
    /// Whether this replica may write (stamps and Events).
    leadership: watch::Receiver<bool>,
    reported_missing: HashMap<WorkloadId, BTreeSet<Reference>>,
    reported_invalid: HashMap<WorkloadId, Vec<String>>,
    events: Arc<dyn EventSink>,
    targets: HashMap<WorkloadKind, Arc<dyn Target>>,
    done: mpsc::UnboundedSender<Applied>,
}

// === impl Core: workloads ===

impl Core {
    async fn on_workload_event(&mut self, event: WorkloadEvent) {
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
                self.on_workload(workload).await;
            }
            WorkloadEvent::InitDone(scope) => {
                let seen = self.relisting.remove(&scope).unwrap_or_default();
                let gone: Vec<WorkloadId> = self
                    .workloads
                    .keys()
                    .chain(self.parked.keys())
                    .filter(|id| scope.contains(id) && !seen.contains(*id))
                    .cloned()
                    .collect();
                for id in gone {
                    self.on_delete(&id);
                }
            }
            WorkloadEvent::Apply(workload) => self.on_workload(workload).await,
            WorkloadEvent::Delete(id) => self.on_delete(&id),
        }
    }

    async fn on_workload(&mut self, workload: Workload) {
        let id = workload.id.clone();
        if !self.in_selected_namespace(&id) {
            if self.workloads.contains_key(&id) {
                self.on_delete(&id);
            }
            self.parked.insert(id, workload);
            return;
        }
        self.parked.remove(&id);
        let deps = annotations::dependencies(&workload, &self.scheme, &self.catalog);
        self.report_invalid(&id, &deps.errors).await;
        let current = CurrentOutputs::new(&workload, deps.stamps.iter().map(|s| &s.output));
        let full = self
            .selected_namespaces
            .is_some()
            .then(|| Box::new(workload));
        let delta = self.graph.apply(id.clone(), deps.stamps);
        for tracked in delta.newly_tracked {
            self.send_interest(Interest::Track(tracked));
        }
        self.drop_tracked(delta.droppable);
        self.workloads.insert(
            id.clone(),
            Known {
                current,
                full,
                debounce: deps.debounce,
                min_interval: deps.min_interval,
            },
        );
        self.evaluate(&id);
    }

    fn on_delete(&mut self, id: &WorkloadId) {
        self.parked.remove(id);
        let delta = self.graph.delete(id);
        self.drop_tracked(delta.droppable);
        self.workloads.remove(id);
        self.pending.remove(id);
        self.observed_at.remove(id);
        self.attempts.remove(id);
        self.reported_missing.remove(id);
        self.reported_invalid.remove(id);
        self.scheduler.forget(id.clone());
    }

    fn drop_tracked(&mut self, droppable: Vec<Tracked>) {
        let mut store = self.store.write().unwrap_or_else(|e| e.into_inner());
        for tracked in droppable {
            store.remove(&tracked);
            self.send_interest(Interest::Untrack(tracked));
        }
    }

    fn send_interest(&self, interest: Interest) {
        let tracked = match &interest {
            Interest::Track(t) | Interest::Untrack(t) => t,
        };
        match self.interest.get(&tracked.reference.source) {
            Some(tx) => {
                // A closed channel means the source is restarting; it is re-sent
                // everything it tracks then.
                let _ = tx.send(interest);
            }
            None => tracing::warn!(%tracked, "no source of that name is running"),
        }
    }

    /// A restarted source gets a fresh channel and everything it must track.
    fn restart_interest(&mut self, name: &SourceName, interest: mpsc::UnboundedSender<Interest>) {
        for tracked in self.graph.tracked().filter(|t| &t.reference.source == name) {
            let _ = interest.send(Interest::Track(tracked.clone()));
        }
        self.interest.insert(name.clone(), interest);
    }

    async fn report_invalid(&mut self, id: &WorkloadId, errors: &[annotations::AnnotationError]) {
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        if messages.is_empty() {
            self.reported_invalid.remove(id);
            return;
        }
        if self.reported_invalid.get(id) == Some(&messages) {
            return;
        }
        for error in errors {
            tracing::warn!(workload = %id, annotation = error.key(), category = error.category(), %error, "invalid annotation");
        }
        self.reported_invalid.insert(id.clone(), messages.clone());
        self.publish(id, Reason::InvalidAnnotation, messages.join("; "))
            .await;
    }
}

// === impl Core: namespace selection ===

impl Core {
    /// Whether `id`'s namespace is selected (always, without a selector; never
    /// before the selector's first list).
    fn in_selected_namespace(&self, id: &WorkloadId) -> bool {
        match &self.selected_namespaces {
            None => true,
            Some(selected) => selected
                .borrow()
                .as_ref()
                .is_some_and(|set| set.contains(&id.namespace)),
        }
    }

    /// The selected namespaces changed: bring parked workloads in, put workloads
    /// of namespaces no longer selected aside.
    async fn on_namespaces(&mut self) {
        let entering: Vec<WorkloadId> = self
            .parked
            .keys()
            .filter(|id| self.in_selected_namespace(id))
            .cloned()
            .collect();
        for id in entering {
            if let Some(workload) = self.parked.remove(&id) {
                self.on_workload(workload).await;
            }
        }
        let leaving: Vec<WorkloadId> = self
            .workloads
            .keys()
            .filter(|id| !self.in_selected_namespace(id))
            .cloned()
            .collect();
        for id in leaving {
            let full = self.workloads.get_mut(&id).and_then(|k| k.full.take());
            self.on_delete(&id);
            if let Some(workload) = full {
                self.parked.insert(id, *workload);
            }
        }
    }
}

/// Waits for the selected namespaces to change; `false` (and then never again)
/// when there is no selector or its watch ended.
async fn namespaces_changed(selected: &mut Option<SelectedNamespaces>) -> bool {
    match selected {
        Some(rx) => {
            if rx.changed().await.is_ok() {
                true
            } else {
                std::future::pending::<()>().await;
                false
            }
        }
        None => std::future::pending().await,
    }
}

// === impl Core: observations and stamping ===

impl Core {
    fn on_update(&mut self, update: SourceUpdate) {
        let SourceUpdate {
            tracked,
            observation,
        } = update;
        let dependents: Vec<WorkloadId> = self.graph.dependents(&tracked).cloned().collect();
        if dependents.is_empty() {
            // Untracked meanwhile; do not resurrect it in the store.
            return;
        }
        let changed = self
            .store
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .set(tracked.clone(), observation);
        if !changed {
            return;
        }
        tracing::debug!(%tracked, dependents = dependents.len(), "observation changed");
        let now = Instant::now();
        for id in dependents {
            self.pending
                .entry(id.clone())
                .or_default()
                .insert(tracked.reference.clone());
            self.observed_at.entry(id.clone()).or_insert(now);
            self.evaluate(&id);
        }
    }

    /// Schedules `id` when its stamp differs from the desired one or a reference
    /// is missing; an in-sync workload is left alone.
    fn evaluate(&mut self, id: &WorkloadId) {
        let Some(known) = self.workloads.get(id) else {
            return;
        };
        let Some(specs) = self.graph.specs(id) else {
            return;
        };
        let store = self.store.read().unwrap_or_else(|e| e.into_inner());
        let desired = stamp::desired(specs, &*store, self.config.stamp_on_delete);
        let missing = desired
            .blocked
            .iter()
            .any(|b| matches!(b.reason, BlockReason::Missing { .. }));
        if !missing {
            // Back (perhaps unchanged, so no stamp follows): a later absence is a
            // new problem to report.
            self.reported_missing.remove(id);
        }
        if missing || stamp::diff(&known.current.to_workload(), specs, &desired).is_some() {
            self.scheduler
                .touch(id.clone(), known.debounce, known.min_interval);
        } else if !self.in_flight.contains(id) {
            // In sync again (e.g. reverted within the debounce window). While a stamp
            // is in flight, the watch may echo it before the apply returns: the
            // pending references still belong to that stamp's Event.
            self.pending.remove(id);
            self.observed_at.remove(id);
        }
    }

    async fn on_due(&mut self, id: WorkloadId) {
        if self.in_flight.contains(&id) {
            self.due_again.insert(id);
            return;
        }
        let Some(known) = self.workloads.get(&id) else {
            return;
        };
        let Some(specs) = self.graph.specs(&id) else {
            return;
        };
        let (patch, missing) = {
            let store = self.store.read().unwrap_or_else(|e| e.into_inner());
            let desired = stamp::desired(specs, &*store, self.config.stamp_on_delete);
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
            let workload = known.current.to_workload();
            let patch = stamp::diff(&workload, specs, &desired);
            (patch.map(|p| (p, workload)), missing)
        };
        self.report_missing(&id, missing).await;
        let Some((patch, workload)) = patch else {
            self.pending.remove(&id);
            self.observed_at.remove(&id);
            return;
        };
        let sources = self.change_sources(&patch);
        if !self.is_leader() {
            // The leader writes; this replica keeps the workload pending and
            // re-evaluates everything if it becomes leader.
            tracing::debug!(workload = %id, "not the leader; not stamping");
            self.count(id.kind, &sources, StampResult::SkippedFollower);
            return;
        }
        let Some(target) = self.targets.get(&id.kind).cloned() else {
            return;
        };
        self.in_flight.insert(id.clone());
        let done = self.done.clone();
        let writes = self.writes.clone();
        let span = tracing::info_span!("stamp", workload = %id);
        tokio::spawn(
            async move {
                // Never closed, so the permit always comes.
                let _permit = writes.acquire_owned().await;
                let result = target.apply(&workload, &patch).await;
                let _ = done.send(Applied {
                    patch,
                    sources,
                    result,
                });
            }
            .instrument(span),
        );
    }

    /// The sources a stamp is attributed to: those whose observations changed
    /// since the last stamp, else (a new or edited workload) those feeding the
    /// outputs that change.
    fn change_sources(&self, patch: &StampPatch) -> BTreeSet<SourceName> {
        if let Some(pending) = self.pending.get(&patch.id).filter(|p| !p.is_empty()) {
            return pending.iter().map(|r| r.source.clone()).collect();
        }
        self.graph
            .specs(&patch.id)
            .unwrap_or_default()
            .iter()
            .filter(|spec| patch.changed.contains(&spec.output))
            .flat_map(|spec| &spec.inputs)
            .map(|input| input.tracked.reference.source.clone())
            .collect()
    }

    fn count(&self, kind: WorkloadKind, sources: &BTreeSet<SourceName>, result: StampResult) {
        for source in sources {
            self.metrics.stamp(kind, source, result);
        }
    }

    fn is_leader(&self) -> bool {
        *self.leadership.borrow()
    }

    /// Leadership changed. A new leader re-evaluates every workload, state-based,
    /// and re-reports configuration problems a follower kept to itself.
    async fn on_leadership(&mut self) {
        let leader = *self.leadership.borrow_and_update();
        if !leader {
            tracing::info!("following: stamps are left to the leader");
            return;
        }
        tracing::info!(
            workloads = self.workloads.len(),
            "leading: re-evaluating every workload"
        );
        self.reported_missing.clear();
        let invalid: Vec<(WorkloadId, String)> = self
            .reported_invalid
            .iter()
            .map(|(id, messages)| (id.clone(), messages.join("; ")))
            .collect();
        for (id, note) in invalid {
            self.publish(&id, Reason::InvalidAnnotation, note).await;
        }
        let ids: Vec<WorkloadId> = self.workloads.keys().cloned().collect();
        for id in ids {
            self.evaluate(&id);
        }
    }

    fn record_gauges(&self) {
        self.metrics
            .set_tracked(self.graph.workload_count(), self.graph.tracked_count());
        self.metrics.set_queue_depth(self.scheduler.queue_depth());
    }

    async fn report_missing(&mut self, id: &WorkloadId, missing: BTreeSet<Reference>) {
        if missing.is_empty() {
            self.reported_missing.remove(id);
            return;
        }
        if self.reported_missing.get(id) == Some(&missing) {
            return;
        }
        let names: Vec<String> = missing.iter().map(ToString::to_string).collect();
        tracing::warn!(workload = %id, missing = ?names, "required config missing; keeping the current stamp");
        self.reported_missing.insert(id.clone(), missing);
        let note = format!("{} not found; keeping the current stamp", names.join(", "));
        self.publish(id, Reason::MissingConfig, note).await;
    }

    async fn on_applied(&mut self, applied: Applied) {
        let Applied {
            patch,
            sources,
            result,
        } = applied;
        let id = patch.id.clone();
        self.in_flight.remove(&id);
        match result {
            Ok(ApplyOutcome::Applied(workload)) => {
                self.count(id.kind, &sources, StampResult::Applied);
                if let Some(observed) = self.observed_at.remove(&id) {
                    self.metrics.stamp_latency(observed.elapsed());
                }
                self.attempts.remove(&id);
                self.scheduler.stamped(id.clone());
                let changed = self.pending.remove(&id).unwrap_or_default();
                let note = change_note(&patch, &changed);
                tracing::info!(workload = %id, %note, "stamped");
                if let Some(known) = self.workloads.get_mut(&id) {
                    let outputs = self.graph.specs(&id).unwrap_or_default();
                    known.current =
                        CurrentOutputs::new(&workload, outputs.iter().map(|s| &s.output));
                    if known.full.is_some() {
                        known.full = Some(workload);
                    }
                }
                let related = changed.into_iter().next();
                self.publish_about(&id, Reason::ConfigChanged, note, related)
                    .await;
            }
            Ok(ApplyOutcome::Gone) => {
                self.count(id.kind, &sources, StampResult::Gone);
                tracing::debug!(workload = %id, "workload deleted before the stamp");
                self.on_delete(&id);
                return;
            }
            Err(error) if error.is_retryable() => {
                self.count(id.kind, &sources, StampResult::Retried);
                let attempt = self.attempts.entry(id.clone()).or_insert(0);
                *attempt += 1;
                let delay = retry_delay(*attempt);
                tracing::warn!(workload = %id, %error, category = error.category(), retry_in = ?delay, "stamp failed; retrying");
                self.retry_after(id.clone(), delay);
            }
            Err(error) => {
                self.count(id.kind, &sources, StampResult::Failed);
                self.attempts.remove(&id);
                tracing::error!(workload = %id, %error, "stamp rejected");
                self.publish(&id, Reason::StampFailed, error.to_string())
                    .await;
            }
        }
        if self.due_again.remove(&id) {
            self.evaluate(&id);
        }
    }

    fn retry_after(&self, id: WorkloadId, delay: Duration) {
        let scheduler = self.scheduler.clone();
        let debounce = Some(Duration::ZERO);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            scheduler.touch(id, debounce, None);
        });
    }

    async fn publish(&self, id: &WorkloadId, reason: Reason, note: String) {
        self.publish_about(id, reason, note, None).await;
    }

    async fn publish_about(
        &self,
        id: &WorkloadId,
        reason: Reason,
        note: String,
        related: Option<Reference>,
    ) {
        // Only the leader writes; a new leader re-reports what is still true.
        if !self.is_leader() {
            return;
        }
        self.events
            .publish(Notice {
                workload: id.clone(),
                reason,
                note,
                related,
            })
            .await;
    }
}

/// Exponential backoff for stamp retries.
fn retry_delay(attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(16));
    FIRST_RETRY_DELAY
        .saturating_mul(factor)
        .min(MAX_RETRY_DELAY)
}

/// The `ConfigChanged` note: which references changed, never their content.
fn change_note(patch: &StampPatch, changed: &BTreeSet<Reference>) -> String {
    if changed.is_empty() {
        let outputs: Vec<String> = patch.changed.iter().map(|o| o.key().to_owned()).collect();
        return format!("stamped {}", outputs.join(", "));
    }
    let refs: Vec<String> = changed.iter().map(ToString::to_string).collect();
    format!("{} changed", refs.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_and_is_capped() {
        assert_eq!(retry_delay(1), FIRST_RETRY_DELAY);
        assert_eq!(retry_delay(2), FIRST_RETRY_DELAY * 2);
        assert_eq!(retry_delay(3), FIRST_RETRY_DELAY * 4);
        assert_eq!(retry_delay(30), MAX_RETRY_DELAY);
    }
}
