//! The engine's async driver: it owns every task in one `JoinSet`, feeds the
//! [`Core`] its inputs with the current time, and performs the effects. It makes
//! no decisions of its own.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

mod recording;

use super::core::{Copies, Core, CoreSettings, Effect, Input, StampWrite, WriteOutcome};
use super::metrics::EngineMetrics;
use super::{Engine, EngineError};
use crate::copies::Copier;
use crate::events::{EventSink, Notice};
use crate::fingerprint::ObjectKind;
use crate::health::{Readiness, WatchReady};
use crate::model::{SourceName, WorkloadId, WorkloadKind};
use crate::outcome::Conclusion;
use crate::rate::Backoff;
use crate::snapshot::Owner;
use crate::sources::{Interest, Source, SourceContext, SourceError, SourceUpdate};
use crate::targets::{ApplyOutcome, Target, TargetContext, TargetError, WorkloadEvent};

/// Capacity of the channels from targets and sources.
const CHANNEL_CAPACITY: usize = 1024;
/// Event publishers, each publishing the Events of its namespaces in order.
/// One publisher took a POST's round trip per Event: the initial stamps of
/// a large cluster (a `ConfigChanged` per stamp, a `RolloutComplete` per
/// DaemonSet) outran it, and 12,000 of 20,000 Events were dropped at the
/// benchmark's 10x.
const EVENT_LANES: usize = 8;
/// Events waiting for each publisher; beyond this, new ones are dropped
/// (logged and counted).
const EVENT_QUEUE: usize = 1024;
/// First delay before a source whose `run` ended is started again (doubling).
const FIRST_SOURCE_RESTART: Duration = Duration::from_secs(1);
const MAX_SOURCE_RESTART: Duration = Duration::from_secs(60);
/// A source that ran this long before ending restarts with a fresh backoff.
const SOURCE_HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// Inputs handled before a due tick is forced in.
const MAX_INPUTS_BETWEEN_TICKS: usize = 256;
/// How long tasks get to finish after shutdown before they are aborted.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Rollout outcomes recorded at once (a GET and a PATCH each); the rest wait
/// their turn. Each recording may open an API connection, which the client
/// then keeps pooled with its buffers: unbounded, the 500 DaemonSets of the
/// benchmark's large cluster that complete together left ~50 more connections
/// open (~3 MB of heap at idle).
const MAX_RECORDS_IN_FLIGHT: usize = 4;

/// How a task of the driver ended.
enum Done {
    /// A stamp write finished.
    Write(WorkloadId, WriteOutcome),
    /// A source's `run` returned.
    SourceEnded(SourceName, Result<(), SourceError>, Instant),
    /// A source's restart delay passed.
    SourceDue(SourceName),
    /// A target's `run` returned, or the Event publisher stopped.
    Other,
}

/// One registered source, as the driver runs it.
struct SourceSlot {
    source: Arc<dyn Source>,
    ready: WatchReady,
    /// Where interest goes while the source runs.
    interest: Option<mpsc::UnboundedSender<Interest>>,
    backoff: Backoff,
}

pub(super) async fn run(engine: Engine, shutdown: CancellationToken) -> Result<(), EngineError> {
    let (mut driver, mut feeds) = Driver::start(engine, &shutdown)?;
    driver.elected_before_start(&mut feeds.leadership);
    if driver.unlisted == 0 {
        driver.feed(Input::Listed, Instant::now());
    }
    while let Some(input) = driver.next_input(&mut feeds, &shutdown).await {
        driver.handle(input);
    }
    driver.stop().await;
    Ok(())
}

/// What the driver receives besides its own tasks' ends.
struct Feeds {
    workloads: mpsc::Receiver<WorkloadEvent>,
    /// One message per target, the first time it says it has listed.
    listed: mpsc::UnboundedReceiver<()>,
    updates: mpsc::Receiver<SourceUpdate>,
    leadership: Option<watch::Receiver<bool>>,
    namespaces: Option<super::NamespaceFeed>,
}

/// The driver's state between two inputs.
struct Driver {
    core: Core,
    slots: BTreeMap<SourceName, SourceSlot>,
    targets: BTreeMap<WorkloadKind, Arc<dyn Target>>,
    tasks: JoinSet<Done>,
    launcher: Launcher,
    events: EventQueue,
    /// When the core next wants a tick.
    wake: Option<Instant>,
    /// Inputs handled since the last tick: queued inputs go first (so a burst is
    /// decided once), but never so many that due work waits on a busy stream.
    since_tick: usize,
    /// Cancelled at shutdown: stops every task the driver spawned.
    tasks_shutdown: CancellationToken,
    /// Where rollout outcomes are recorded.
    recording: recording::Recording,
    /// Targets that have not delivered their initial listing yet; the core
    /// gets [`Input::Listed`] when none is left.
    unlisted: usize,
    /// Outcomes being recorded, and those waiting their turn.
    recordings: Recordings<tokio::task::Id>,
    /// Makes the snapshot copies a stamp names (design §5e).
    copier: Option<Copier>,
}

impl Driver {
    /// Builds the core and starts every target, every source and the Event
    /// publisher, then seals readiness.
    fn start(engine: Engine, shutdown: &CancellationToken) -> Result<(Self, Feeds), EngineError> {
        let catalog = engine.catalog();
        let snapshot_kinds = engine.snapshot_kinds();
        let Engine {
            config,
            scheme,
            observe,
            sources,
            targets,
            events,
            store,
            metrics,
            readiness,
            health,
            leadership,
            namespaces,
            copier,
        } = engine;
        let recording = recording::Recording::new(&scheme, config.history_limit, copier.clone());

        let settings = CoreSettings {
            engine: config,
            scheme,
            catalog,
            namespace_selector: namespaces.is_some(),
            leader: leadership.is_none(),
            clock: crate::window::WallClock::system(),
            snapshot_kinds,
        };
        let core = Core::new(settings, store, metrics.clone())?;
        let tasks_shutdown = shutdown.child_token();
        let mut tasks: JoinSet<Done> = JoinSet::new();
        let (workload_tx, workloads) = mpsc::channel(CHANNEL_CAPACITY);
        let (update_tx, updates) = mpsc::channel(CHANNEL_CAPACITY);
        let (listed_tx, listed) = mpsc::unbounded_channel();
        let target_ctx = |ready| {
            TargetContext::new(
                workload_tx.clone(),
                ready,
                listed_tx.clone(),
                health.clone(),
                tasks_shutdown.clone(),
            )
        };
        spawn_targets(&targets, &readiness, target_ctx, &mut tasks);
        let launcher = Launcher {
            updates: update_tx,
            observe,
            health,
            shutdown: tasks_shutdown.clone(),
        };
        let slots = launcher.start_all(sources, &readiness, &mut tasks);
        let events = start_events(events, metrics, &mut tasks);
        readiness.seal();
        let driver = Self {
            // Before `targets` moves in.
            unlisted: targets.len(),
            core,
            slots,
            targets,
            tasks,
            launcher,
            events,
            wake: None,
            since_tick: 0,
            tasks_shutdown,
            recording,
            recordings: Recordings::default(),
            copier,
        };
        let feeds = Feeds {
            workloads,
            listed,
            updates,
            leadership,
            namespaces,
        };
        Ok((driver, feeds))
    }

    /// Hands the core a leadership won before the engine started.
    fn elected_before_start(&mut self, leadership: &mut Option<watch::Receiver<bool>>) {
        if let Some(rx) = leadership
            && *rx.borrow_and_update()
        {
            self.feed(Input::Leadership(true), Instant::now());
        }
    }

    /// The next input for the core, or `None` once `shutdown` is cancelled.
    async fn next_input(
        &mut self,
        feeds: &mut Feeds,
        shutdown: &CancellationToken,
    ) -> Option<Input> {
        loop {
            let input = tokio::select! {
                biased;
                () = shutdown.cancelled() => return None,
                Some(done) = self.tasks.join_next_with_id() => self.finished(done),
                Some(event) = feeds.workloads.recv() => Some(Input::workload(event)),
                Some(()) = feeds.listed.recv(), if self.unlisted > 0 => {
                    self.target_listed(&mut feeds.workloads)
                }
                Some(update) = feeds.updates.recv() => {
                    self.count_observation(&update);
                    Some(Input::Observation(update))
                }
                Some(leader) = changed(&mut feeds.leadership) => Some(Input::Leadership(leader)),
                Some(selected) = next_namespaces(&mut feeds.namespaces) => {
                    Some(Input::Namespaces(selected))
                }
                () = sleep_until(self.wake), if self.wake.is_some() => {
                    self.wake = None;
                    Some(Input::Tick)
                }
            };
            if input.is_some() {
                return input;
            }
        }
    }

    /// A target has delivered its initial listing; once every target has,
    /// [`Input::Listed`], after every workload event already queued: a target
    /// says it has listed after reporting what it listed, so the core has
    /// then seen every listed workload.
    fn target_listed(&mut self, workloads: &mut mpsc::Receiver<WorkloadEvent>) -> Option<Input> {
        self.unlisted = self.unlisted.saturating_sub(1);
        if self.unlisted > 0 {
            return None;
        }
        while let Ok(event) = workloads.try_recv() {
            self.handle(Input::workload(event));
        }
        Some(Input::Listed)
    }

    /// The input a finished task makes, if any; a source that ended is scheduled
    /// to restart, one whose restart delay passed is started.
    fn finished(
        &mut self,
        done: Result<(tokio::task::Id, Done), tokio::task::JoinError>,
    ) -> Option<Input> {
        let id = match &done {
            Ok((id, _)) => *id,
            Err(error) => error.id(),
        };
        if let Some(next) = self.recordings.ended(&id) {
            self.spawn_record(next);
        }
        match done.map(|(_, done)| done) {
            Ok(Done::Write(id, outcome)) => Some(Input::WriteFinished { id, outcome }),
            Ok(Done::SourceEnded(name, result, started)) => {
                if let Some(slot) = self.slots.get_mut(&name) {
                    if let Err(error) = &result {
                        self.launcher
                            .health
                            .sources()
                            .failed(name.as_str(), error.category());
                    }
                    let (tasks, shutdown) = (&mut self.tasks, &self.tasks_shutdown);
                    source_ended(&name, slot, result, started, tasks, shutdown);
                }
                None
            }
            Ok(Done::SourceDue(name)) => {
                let slot = self.slots.get_mut(&name)?;
                self.launcher.launch(&name, slot, &mut self.tasks);
                Some(Input::SourceStarted(name))
            }
            Ok(Done::Other) => None,
            Err(error) => {
                tracing::error!(%error, "an engine task failed");
                None
            }
        }
    }

    /// Feeds `input` to the core, then a due tick when too many inputs came
    /// between two ticks.
    fn handle(&mut self, input: Input) {
        self.since_tick = if matches!(input, Input::Tick) {
            0
        } else {
            self.since_tick + 1
        };
        let now = Instant::now();
        self.feed(input, now);
        if self.since_tick >= MAX_INPUTS_BETWEEN_TICKS && self.wake.is_some_and(|at| at <= now) {
            self.since_tick = 0;
            self.wake = None;
            self.feed(Input::Tick, now);
        }
    }

    /// Hands `input` to the core and performs its effects.
    fn feed(&mut self, input: Input, now: Instant) {
        let restarted = match &input {
            Input::SourceStarted(name) => Some(name.clone()),
            _ => None,
        };
        let effects = self.core.handle(input, now);
        self.count_interest(restarted.as_ref(), &effects);
        self.perform(effects);
    }

    /// `nudge_source_observations_total`: every observation of a registered
    /// source, whatever form the source has.
    fn count_observation(&self, update: &SourceUpdate) {
        let source = &update.tracked.reference.source;
        if self.slots.contains_key(source) {
            self.launcher.health.sources().observed(source.as_str());
        }
    }

    /// `nudge_source_tracked_references`: each `Track` and `Untrack` the core
    /// sends a registered source. A restarted source is sent its whole
    /// interest again, which is then its count.
    fn count_interest(&self, restarted: Option<&SourceName>, effects: &[Effect]) {
        let metrics = self.launcher.health.sources();
        if let Some(name) = restarted {
            let count = effects
                .iter()
                .filter(|e| matches!(e, Effect::Track(t) if t.reference.source == *name))
                .count();
            metrics.set_tracked(name.as_str(), count);
            return;
        }
        for effect in effects {
            let (tracked, delta) = match effect {
                Effect::Track(tracked) => (tracked, 1),
                Effect::Untrack(tracked) => (tracked, -1),
                _ => continue,
            };
            let source = &tracked.reference.source;
            if self.slots.contains_key(source) {
                metrics.tracked_changed(source.as_str(), delta);
            }
        }
    }

    /// Performs the core's effects.
    fn perform(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Track(tracked) => send_interest(&self.slots, Interest::Track(tracked)),
                Effect::Untrack(tracked) => send_interest(&self.slots, Interest::Untrack(tracked)),
                Effect::Write(write) => spawn_write(
                    &self.targets,
                    *write,
                    self.copier.as_ref(),
                    &self.events,
                    &mut self.tasks,
                ),
                Effect::Publish(notice) => self.events.queue(notice),
                Effect::WakeAt(at) => self.wake = Some(at),
                Effect::Conclude(conclusion) => self.spawn_record(*conclusion),
            }
        }
    }

    /// Publishes and records a rollout's outcome in a task of its own, or
    /// queues it while [`MAX_RECORDS_IN_FLIGHT`] are being recorded.
    fn spawn_record(&mut self, conclusion: Conclusion) {
        if !self.recordings.has_room() {
            self.recordings.wait(conclusion);
            return;
        }
        let id = conclusion.workload.clone();
        let Some(target) = self.targets.get(&id.kind).cloned() else {
            return;
        };
        let events = self.events.clone();
        let recording = self.recording.clone();
        let span = tracing::info_span!("outcome", workload = %id);
        let task = self.tasks.spawn(
            async move {
                recording::record(target, conclusion, recording, |n| events.queue(n)).await;
                Done::Other
            }
            .instrument(span),
        );
        self.recordings.started(task.id());
    }

    /// Stops every task, waiting [`SHUTDOWN_GRACE`] before aborting them.
    async fn stop(self) {
        let Self {
            mut tasks,
            events,
            tasks_shutdown,
            ..
        } = self;
        tasks_shutdown.cancel();
        drop(events);
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                tasks = tasks.len(),
                "engine tasks did not stop in time; aborting them"
            );
            tasks.shutdown().await;
        }
    }
}

/// Starts every target, each with its own readiness.
fn spawn_targets(
    targets: &BTreeMap<WorkloadKind, Arc<dyn Target>>,
    readiness: &Readiness,
    ctx: impl Fn(WatchReady) -> TargetContext,
    tasks: &mut JoinSet<Done>,
) {
    for (kind, target) in targets {
        let ctx = ctx(readiness.register(format!("target {kind}")));
        let span = tracing::info_span!("target", kind = %kind);
        let target = target.clone();
        tasks.spawn(
            async move {
                target.run(ctx).await;
                Done::Other
            }
            .instrument(span),
        );
    }
}

/// A slot per source, each with its own readiness; none started yet.
fn source_slots(
    sources: BTreeMap<SourceName, Arc<dyn Source>>,
    readiness: &Readiness,
) -> BTreeMap<SourceName, SourceSlot> {
    sources
        .into_iter()
        .map(|(name, source)| {
            let slot = SourceSlot {
                ready: readiness.register(format!("source {name}")),
                source,
                interest: None,
                backoff: Backoff::new(FIRST_SOURCE_RESTART, MAX_SOURCE_RESTART),
            };
            (name, slot)
        })
        .collect()
}

/// What every source launch needs.
struct Launcher {
    updates: mpsc::Sender<crate::sources::SourceUpdate>,
    observe: crate::sources::ObserveContext,
    health: crate::health::WatchHealth,
    shutdown: CancellationToken,
}

impl Launcher {
    /// Registers every source (its readiness, its metrics) and starts it.
    fn start_all(
        &self,
        sources: BTreeMap<SourceName, Arc<dyn Source>>,
        readiness: &Readiness,
        tasks: &mut JoinSet<Done>,
    ) -> BTreeMap<SourceName, SourceSlot> {
        let mut slots = source_slots(sources, readiness);
        for (name, slot) in &mut slots {
            self.health.sources().register_source(name.as_str());
            self.launch(name, slot, tasks);
        }
        slots
    }

    /// Starts `slot`'s source with a fresh interest channel.
    fn launch(&self, name: &SourceName, slot: &mut SourceSlot, tasks: &mut JoinSet<Done>) {
        let (ctx, interest) = SourceContext::new(
            name.clone(),
            self.updates.clone(),
            self.observe.clone(),
            slot.ready.clone(),
            self.health.clone(),
            self.shutdown.clone(),
        );
        slot.interest = Some(interest);
        let source = slot.source.clone();
        let name = name.clone();
        let span = tracing::info_span!("source", source = %name);
        tasks.spawn(
            async move {
                let started = Instant::now();
                let result = source.run(ctx).await;
                Done::SourceEnded(name, result, started)
            }
            .instrument(span),
        );
    }
}

/// A source's `run` returned: unless nudge is shutting down, it is started again
/// after a backoff (fresh when it had run for a while).
fn source_ended(
    name: &SourceName,
    slot: &mut SourceSlot,
    result: Result<(), SourceError>,
    started: Instant,
    tasks: &mut JoinSet<Done>,
    shutdown: &CancellationToken,
) {
    slot.interest = None;
    if shutdown.is_cancelled() {
        return;
    }
    if started.elapsed() >= SOURCE_HEALTHY_AFTER {
        slot.backoff = Backoff::new(FIRST_SOURCE_RESTART, MAX_SOURCE_RESTART);
    }
    let delay = slot.backoff.next_delay();
    match result {
        Ok(()) => tracing::warn!(source = %name, restart_in = ?delay, "source stopped; restarting"),
        Err(error) => {
            let category = error.category();
            let error = crate::errors::error_chain(&error);
            tracing::error!(source = %name, %error, category, restart_in = ?delay, "source failed; restarting");
        }
    }
    let name = name.clone();
    let shutdown = shutdown.clone();
    tasks.spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(delay) => Done::SourceDue(name),
            () = shutdown.cancelled() => Done::Other,
        }
    });
}

fn send_interest(slots: &BTreeMap<SourceName, SourceSlot>, interest: Interest) {
    let tracked = match &interest {
        Interest::Track(t) | Interest::Untrack(t) => t,
    };
    match slots.get(&tracked.reference.source) {
        // No channel, or a closed one: the source is restarting and is sent
        // everything it tracks when it starts again.
        Some(slot) => {
            if let Some(tx) = &slot.interest {
                let _ = tx.send(interest);
            }
        }
        None => tracing::warn!(%tracked, "no source of that name is registered"),
    }
}

fn spawn_write(
    targets: &BTreeMap<crate::model::WorkloadKind, Arc<dyn Target>>,
    write: StampWrite,
    copier: Option<&Copier>,
    events: &EventQueue,
    tasks: &mut JoinSet<Done>,
) {
    let id = write.workload.id.clone();
    let target = targets.get(&id.kind).cloned();
    let span = tracing::info_span!("stamp", workload = %id);
    let events = events.clone();
    let copier = copier.cloned();
    tasks.spawn(
        async move {
            let outcome = match target {
                Some(target) => write_stamp(&*target, write, copier.as_ref(), &events).await,
                None => WriteOutcome::Failed(TargetError::Rejected {
                    id: id.clone(),
                    message: "no target is registered for this kind".into(),
                }),
            };
            Done::Write(id, outcome)
        }
        .instrument(span),
    );
}

/// Writes one stamp through `target`: first the snapshot copies it names
/// (design §5e), then the rollout it supersedes published (its marker as the
/// core last saw it carried into the stamp's), then the stamp. A stamp that
/// finds its workload gone deletes the copies it made.
async fn write_stamp(
    target: &dyn Target,
    write: StampWrite,
    copier: Option<&Copier>,
    events: &EventQueue,
) -> WriteOutcome {
    let StampWrite {
        mut workload,
        mut patch,
        supersedes,
        copies,
    } = write;
    let id = workload.id.clone();
    let mut made = Vec::new();
    if let Some(copies) = copies {
        match make_copies(target, &mut workload, &copies, copier).await {
            Ok(created) => made = created,
            Err(outcome) => return outcome,
        }
    }
    if let Some(supersedes) = supersedes {
        let superseded = supersedes.carry(&mut patch);
        events.queue(recording::notice(&superseded, None));
    }
    let outcome: WriteOutcome = target.apply(&workload, &patch).await.into();
    if let (WriteOutcome::Gone, Some(copier)) = (&outcome, copier)
        && !made.is_empty()
        && let Err(error) = copier.delete(&id.namespace, &made).await
    {
        tracing::warn!(workload = %id, %error, "cannot delete the copies of a workload deleted meanwhile; its garbage collection takes them");
    }
    outcome
}

/// Makes (or, for a rollback, finds) the copies `copies` names, owned by the
/// workload (its uid as watched, else as read now): that uid guards the
/// stamp too (`workload.uid`).
/// Returns those made; on failure, the write's outcome.
async fn make_copies(
    target: &dyn Target,
    workload: &mut crate::model::Workload,
    copies: &Copies,
    copier: Option<&Copier>,
) -> Result<Vec<(ObjectKind, String)>, WriteOutcome> {
    let id = workload.id.clone();
    let refused = |message: &str| {
        WriteOutcome::Failed(TargetError::Rejected {
            id: id.clone(),
            message: message.to_owned(),
        })
    };
    let Some(copier) = copier else {
        return Err(refused(
            "snapshots are off in this installation (engine.snapshots)",
        ));
    };
    // The uid as watched: the write's uid guard refuses a workload created
    // again since, whose copies the garbage collector then takes.
    let uid = match workload.uid.clone() {
        Some(uid) => Some(uid),
        None => match target.get(&id).await {
            Ok(Some(fresh)) => fresh.uid,
            Ok(None) => return Err(WriteOutcome::Gone),
            Err(error) => return Err(Err::<ApplyOutcome, _>(error).into()),
        },
    };
    let Some(uid) = uid else {
        return Err(refused(
            "the workload has no uid to own its snapshot copies",
        ));
    };
    let owner = Owner {
        api_version: id.kind.api_version(),
        kind: id.kind.as_str().to_owned(),
        name: id.name.to_string(),
        uid: uid.clone(),
    };
    workload.uid = Some(uid);
    let made = if copies.restoring {
        copier
            .check(&id.namespace, &owner, &copies.plans)
            .await
            .map(|()| Vec::new())
    } else {
        copier
            .ensure(&id.namespace, &owner, &copies.plans)
            .await
            .map(|ensured| ensured.created)
    };
    made.map_err(WriteOutcome::Copies)
}

/// Events on their way to the publishers, which never make stamping wait:
/// the Events about one namespace's workloads go through one publisher, in
/// the order they were decided.
#[derive(Clone)]
struct EventQueue {
    lanes: Arc<[mpsc::Sender<Notice>]>,
    metrics: EngineMetrics,
}

impl EventQueue {
    /// Queues `notice`, or drops it (logged and counted) when its publisher is
    /// this far behind: an Event, and the notification made from it, is lost
    /// rather than a stamp delayed.
    fn queue(&self, notice: Notice) {
        let lane = &self.lanes[lane_of(&notice.workload.namespace, self.lanes.len())];
        if let Err(mpsc::error::TrySendError::Full(notice)) = lane.try_send(notice) {
            self.metrics.event_dropped();
            tracing::warn!(workload = %notice.workload, reason = notice.reason.as_str(), "Event queue full; dropping the Event");
        }
    }
}

/// The publisher of `namespace`'s Events, of `lanes`.
fn lane_of(namespace: &str, lanes: usize) -> usize {
    use std::hash::Hasher as _;
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(namespace.as_bytes());
    usize::try_from(hasher.finish() % lanes.max(1) as u64).unwrap_or_default()
}

/// Outcome recordings: the tasks recording one (at most
/// [`MAX_RECORDS_IN_FLIGHT`]), and the conclusions waiting, oldest first. A
/// conclusion still waiting at shutdown is not lost: its marker stays on the
/// workload, and the next leader concludes it again (design §5c).
struct Recordings<I> {
    running: HashSet<I>,
    waiting: VecDeque<Conclusion>,
}

impl<I> Default for Recordings<I> {
    fn default() -> Self {
        Self {
            running: HashSet::new(),
            waiting: VecDeque::new(),
        }
    }
}

impl<I: Eq + Hash> Recordings<I> {
    /// Whether another recording may start now.
    fn has_room(&self) -> bool {
        self.running.len() < MAX_RECORDS_IN_FLIGHT
    }

    /// Task `id` records an outcome.
    fn started(&mut self, id: I) {
        self.running.insert(id);
    }

    /// `conclusion` waits for a recording to end.
    fn wait(&mut self, conclusion: Conclusion) {
        self.waiting.push_back(conclusion);
    }

    /// Task `id` ended (however): when it was a recording, the conclusion to
    /// record next, if one waits.
    fn ended(&mut self, id: &I) -> Option<Conclusion> {
        if self.running.remove(id) {
            self.waiting.pop_front()
        } else {
            None
        }
    }
}

/// Starts the Event publishers; returns their queue.
fn start_events(
    sink: Arc<dyn EventSink>,
    metrics: EngineMetrics,
    tasks: &mut JoinSet<Done>,
) -> EventQueue {
    let lanes = (0..EVENT_LANES)
        .map(|lane| {
            let (tx, rx) = mpsc::channel(EVENT_QUEUE);
            let span = tracing::info_span!("events", lane);
            tasks.spawn(publish_events(sink.clone(), rx).instrument(span));
            tx
        })
        .collect();
    EventQueue { lanes, metrics }
}

/// Publishes queued Events one at a time until the queue closes.
async fn publish_events(sink: Arc<dyn EventSink>, mut queue: mpsc::Receiver<Notice>) -> Done {
    while let Some(notice) = queue.recv().await {
        sink.publish(notice).await;
    }
    Done::Other
}

/// The next leadership value; never resolves without election or after the
/// elector is gone.
async fn changed(leadership: &mut Option<watch::Receiver<bool>>) -> Option<bool> {
    let Some(rx) = leadership else {
        return std::future::pending().await;
    };
    if rx.changed().await.is_err() {
        *leadership = None;
        return std::future::pending().await;
    }
    Some(*rx.borrow_and_update())
}

async fn next_namespaces(
    feed: &mut Option<super::NamespaceFeed>,
) -> Option<std::collections::BTreeSet<String>> {
    let Some(stream) = feed else {
        return std::future::pending().await;
    };
    match stream.next().await {
        Some(selected) => Some(selected),
        None => {
            *feed = None;
            std::future::pending().await
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Reason;
    use crate::model::WorkloadKind;
    use prometheus_client::registry::Registry;

    #[test]
    fn an_event_beyond_the_queue_is_dropped_and_counted() {
        let mut registry = Registry::with_prefix("nudge");
        let (tx, _rx) = mpsc::channel(1);
        let queue = EventQueue {
            lanes: Arc::new([tx]),
            metrics: EngineMetrics::register(&mut registry),
        };
        let id = WorkloadId::new(WorkloadKind::deployment(), "shop", "web");
        for _ in 0..3 {
            queue.queue(Notice::new(id.clone(), Reason::ConfigChanged, "x".into()));
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("nudge_events_dropped_total 2"), "{text}");
    }

    #[tokio::test]
    async fn the_events_of_one_namespace_go_through_one_publisher_in_order() {
        let (lanes, mut receivers): (Vec<_>, Vec<_>) =
            (0..EVENT_LANES).map(|_| mpsc::channel(16)).unzip();
        let queue = EventQueue {
            lanes: lanes.into(),
            metrics: EngineMetrics::default(),
        };
        let namespaces = ["shop", "billing", "search", "auth"];
        for n in 0..4 {
            for namespace in namespaces {
                let id = WorkloadId::new(WorkloadKind::deployment(), namespace, "web");
                queue.queue(Notice::new(id, Reason::ConfigChanged, n.to_string()));
            }
        }
        drop(queue);
        let mut used = 0;
        for receiver in &mut receivers {
            let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
            while let Some(notice) = receiver.recv().await {
                let namespace = notice.workload.namespace.to_string();
                seen.entry(namespace).or_default().push(notice.note);
            }
            used += usize::from(!seen.is_empty());
            for notes in seen.values() {
                assert_eq!(notes, &["0", "1", "2", "3"], "in order, all in one lane");
            }
        }
        assert!(used > 1, "namespaces spread over the publishers");
    }

    fn conclusion(name: &str) -> Conclusion {
        Conclusion {
            workload: WorkloadId::new(WorkloadKind::deployment(), "shop", name),
            revision: crate::outcome::history::Revision::parse(r#"{"revision":1}"#)
                .expect("a revision"),
            related: None,
            stored: None,
        }
    }

    #[test]
    fn outcomes_beyond_the_bound_wait_and_start_in_order_as_recordings_end() {
        let mut recordings = Recordings::<u32>::default();
        for task in 0..MAX_RECORDS_IN_FLIGHT as u32 {
            assert!(recordings.has_room());
            recordings.started(task);
        }
        assert!(!recordings.has_room());
        recordings.wait(conclusion("first"));
        recordings.wait(conclusion("second"));
        // A task that is not a recording (a stamp write) frees no room.
        assert_eq!(recordings.ended(&99), None);
        let next = recordings.ended(&0).expect("the first waiting outcome");
        assert_eq!(next.workload.name.as_str(), "first");
        recordings.started(100);
        assert!(!recordings.has_room());
        let next = recordings.ended(&100).expect("the second waiting outcome");
        assert_eq!(next.workload.name.as_str(), "second");
        recordings.started(101);
        assert_eq!(recordings.ended(&1), None);
        assert!(recordings.has_room());
    }

    mod sources {
        //! The same readiness rule and metrics for every source, whatever its
        //! form, as the driver runs it.

        use std::time::Duration;

        use async_trait::async_trait;
        use prometheus_client::registry::Registry;
        use serde_json::json;
        use tokio::sync::{Notify, Semaphore};

        use super::*;
        use crate::annotations::AnnotationScheme;
        use crate::config::EngineConfig;
        use crate::fingerprint::{FingerprintKey, Observation};
        use crate::health::{ReadyStatus, WatchHealth};
        use crate::model::{Scope, Tracked, Workload};
        use crate::sources::{ObserveContext, PollSource, poll};
        use crate::stamp::StampPatch;
        use crate::targets::{ApplyOutcome, WatchScope};

        /// A polled source whose reads each wait for a permit.
        struct Gated {
            name: SourceName,
            permits: Arc<Semaphore>,
        }

        #[async_trait]
        impl PollSource for Gated {
            fn name(&self) -> &SourceName {
                &self.name
            }

            fn interval(&self) -> Duration {
                Duration::from_secs(3600)
            }

            async fn observe(
                &self,
                _tracked: &Tracked,
                cx: &ObserveContext,
            ) -> Result<Observation, SourceError> {
                self.permits.acquire().await.unwrap().forget();
                Ok(Observation::Present(cx.fingerprint(b"motd")))
            }
        }

        /// A low-level source: its first run fails at once; the next one says
        /// it is ready when told to.
        struct Manual {
            name: SourceName,
            runs: std::sync::atomic::AtomicUsize,
            go: Arc<Notify>,
        }

        #[async_trait]
        impl Source for Manual {
            fn name(&self) -> &SourceName {
                &self.name
            }

            fn scope(&self) -> Scope {
                Scope::External
            }

            async fn observe(
                &self,
                _tracked: &Tracked,
                _cx: &ObserveContext,
            ) -> Result<Observation, SourceError> {
                Ok(Observation::Absent)
            }

            async fn run(self: Arc<Self>, ctx: SourceContext) -> Result<(), SourceError> {
                if self.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    return Err(SourceError::Timeout {
                        source_name: self.name.clone(),
                    });
                }
                tokio::select! {
                    () = self.go.notified() => ctx.ready(),
                    () = ctx.cancelled() => return Ok(()),
                }
                ctx.cancelled().await;
                Ok(())
            }
        }

        /// One Deployment referencing `gated-motd`, listed once.
        struct OneWorkload {
            kind: WorkloadKind,
        }

        #[async_trait]
        impl Target for OneWorkload {
            fn kind(&self) -> &WorkloadKind {
                &self.kind
            }

            async fn run(self: Arc<Self>, ctx: TargetContext) {
                let scope = WatchScope {
                    kind: self.kind.clone(),
                    namespace: None,
                };
                let object = json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "web", "namespace": "shop",
                                 "annotations": {"nudge.dev/gated-motd": "motd"}},
                    "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
                });
                let workload = Workload::from_object(&self.kind, object).unwrap();
                for event in [
                    WorkloadEvent::Init(scope.clone()),
                    WorkloadEvent::InitApply(workload),
                    WorkloadEvent::InitDone(scope),
                ] {
                    ctx.report(event).await;
                }
                ctx.ready();
                ctx.cancelled().await;
            }

            async fn apply(
                &self,
                _current: &crate::model::Workload,
                _patch: &StampPatch,
            ) -> Result<ApplyOutcome, TargetError> {
                Ok(ApplyOutcome::Gone)
            }

            async fn get(
                &self,
                _id: &WorkloadId,
            ) -> Result<Option<crate::model::Workload>, TargetError> {
                Ok(None)
            }
        }

        async fn until(what: &str, check: impl Fn() -> bool) {
            for _ in 0..500 {
                if check() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("timed out waiting for {what}");
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn custom_sources_of_every_form_are_named_in_ready_until_synced_and_get_metrics() {
            let mut registry = Registry::with_prefix("nudge");
            let health = WatchHealth::register(&mut registry);
            let readiness = Readiness::new(CancellationToken::new());
            let permits = Arc::new(Semaphore::new(0));
            let go = Arc::new(Notify::new());
            let gated = SourceName::new("gated").unwrap();
            let manual = SourceName::new("manual").unwrap();
            let engine = Engine::new(
                EngineConfig::default(),
                AnnotationScheme::default(),
                FingerprintKey::generate(),
            )
            .with_health(readiness.clone(), health.clone())
            .with_source(poll(Gated {
                name: gated.clone(),
                permits: permits.clone(),
            }))
            .unwrap()
            .with_source(Arc::new(Manual {
                name: manual.clone(),
                runs: Default::default(),
                go: go.clone(),
            }))
            .unwrap()
            .with_target(Arc::new(OneWorkload {
                kind: WorkloadKind::deployment(),
            }))
            .unwrap();
            let shutdown = CancellationToken::new();
            let task = tokio::spawn(engine.run(shutdown.clone()));

            // The target has listed; the low-level source has not said it has
            // its initial state, so `/ready` names it. (The polled source had
            // nothing to read when it started: ready at once.)
            let manual_only = ReadyStatus::Waiting(vec!["source manual".into()]);
            until("the target to list", || readiness.status() == manual_only).await;
            let metrics = health.sources();
            until("gated-motd to be tracked", || metrics.tracked("gated") == 1).await;
            assert_eq!(metrics.observations("gated"), 0);
            permits.add_permits(1);
            until("the observation", || metrics.observations("gated") == 1).await;
            assert_eq!(readiness.status(), manual_only);

            // The low-level source failed once (counted by category), was
            // restarted, and is ready when it says so.
            until("the restart", || metrics.errors("manual", "timeout") == 1).await;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            go.notify_one();
            until("every source to be ready", || readiness.is_ready()).await;
            assert_eq!(metrics.tracked("gated"), 1);
            assert_eq!(metrics.tracked("manual"), 0);

            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            for line in [
                r#"nudge_source_observations_total{source="gated"} 1"#,
                r#"nudge_source_observations_total{source="manual"} 0"#,
                r#"nudge_source_observe_duration_seconds_count{source="gated"} 1"#,
                r#"nudge_source_errors_total{source="manual",category="timeout"} 1"#,
                r#"nudge_source_tracked_references{source="gated"} 1"#,
            ] {
                assert!(text.contains(line), "{line} missing in\n{text}");
            }
            shutdown.cancel();
            task.await.unwrap().unwrap();
        }
    }
}
