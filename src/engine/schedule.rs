//! The scheduler: decides when each workload is evaluated (design §5).
//!
//! Sources and the workload watch [`touch`](Scheduler::touch) a workload when
//! something it depends on changed. The [`SchedulerTask`] emits the workload's id on
//! a channel once
//!
//! 1. its debounce window has passed (or `max_delay` since its first change),
//! 2. its minimum interval since the last *written* stamp has passed, and
//! 3. the global token bucket has a token.
//!
//! A workload held back by pacing is emitted as soon as it is allowed; touches
//! during the wait merge into the same pending entry, and each entry is emitted
//! once. The consumer evaluates the workload and, only when it actually wrote a
//! stamp, reports [`stamped`](Scheduler::stamped): a no-op evaluation writes nothing
//! and must not delay the next one.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tracing::Instrument;

use super::debounce::Debouncer;
use super::pacing::{MinInterval, PacingError, TokenBucket};
use crate::config::EngineConfig;
use crate::model::WorkloadId;

/// Handle to a running [`SchedulerTask`]; cheap to clone. Commands sent after the
/// task stopped are dropped.
#[derive(Debug, Clone)]
pub struct Scheduler {
    commands: mpsc::UnboundedSender<Command>,
    depth: Arc<AtomicUsize>,
}

/// What a handle asks of the task.
#[derive(Debug)]
enum Command {
    Touch {
        id: WorkloadId,
        debounce: Option<Duration>,
        min_interval: Option<Duration>,
    },
    Stamped(WorkloadId),
    Forget(WorkloadId),
}

/// The parts of a new scheduler: the handle, the task to run, and the receiver of
/// due workloads.
pub type SchedulerParts = (Scheduler, SchedulerTask, mpsc::Receiver<WorkloadId>);

impl Scheduler {
    /// Builds a scheduler from the engine configuration. Run the returned task (or
    /// use [`spawn`](Self::spawn)); due workloads arrive on the receiver, which
    /// holds at most `burst` of them: a slow consumer slows emission down instead of
    /// letting ids pile up.
    pub fn new(config: &EngineConfig) -> Result<SchedulerParts, PacingError> {
        let bucket = TokenBucket::new(config.stamps_per_second, config.burst)?;
        let (commands_tx, commands_rx) = mpsc::unbounded_channel();
        let capacity = usize::try_from(config.burst)
            .unwrap_or(usize::MAX)
            .clamp(1, 1 << 16);
        let (due_tx, due_rx) = mpsc::channel(capacity);
        let depth = Arc::new(AtomicUsize::new(0));
        let handle = Self {
            commands: commands_tx,
            depth: Arc::clone(&depth),
        };
        let task = SchedulerTask {
            commands: commands_rx,
            due: due_tx,
            plan: Plan::new(config, bucket),
            depth,
        };
        Ok((handle, task, due_rx))
    }

    /// Builds a scheduler and spawns its task (instrumented with a `scheduler` span)
    /// on the current tokio runtime. The task ends when every handle is dropped or
    /// the receiver is closed.
    pub fn spawn(
        config: &EngineConfig,
    ) -> Result<(Self, mpsc::Receiver<WorkloadId>, JoinHandle<()>), PacingError> {
        let (handle, task, due) = Self::new(config)?;
        let join = tokio::spawn(task.run().instrument(tracing::info_span!("scheduler")));
        Ok((handle, due, join))
    }

    /// Something `id` depends on changed (or the workload itself did). `debounce` and
    /// `min_interval` are the workload's overrides from its annotations; `None` uses
    /// the configured default.
    pub fn touch(
        &self,
        id: WorkloadId,
        debounce: Option<Duration>,
        min_interval: Option<Duration>,
    ) {
        self.send(Command::Touch {
            id,
            debounce,
            min_interval,
        });
    }

    /// A stamp of `id` was written now: its minimum interval starts counting.
    pub fn stamped(&self, id: WorkloadId) {
        self.send(Command::Stamped(id));
    }

    /// The workload was deleted: drop its pending entry and pacing state.
    pub fn forget(&self, id: WorkloadId) {
        self.send(Command::Forget(id));
    }

    /// Workloads waiting for their debounce window or for pacing (metric).
    pub fn queue_depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    fn send(&self, command: Command) {
        if self.commands.send(command).is_err() {
            tracing::debug!("scheduler stopped; command dropped");
        }
    }
}

/// The task behind a [`Scheduler`]: sleeps until the next workload may be emitted.
#[derive(Debug)]
pub struct SchedulerTask {
    commands: mpsc::UnboundedReceiver<Command>,
    due: mpsc::Sender<WorkloadId>,
    plan: Plan,
    depth: Arc<AtomicUsize>,
}

impl SchedulerTask {
    /// Runs until every [`Scheduler`] handle is dropped or the receiver of due
    /// workloads is closed.
    pub async fn run(mut self) {
        loop {
            let now = Instant::now();
            if !self.emit(now) {
                return;
            }
            self.depth.store(self.plan.len(), Ordering::Relaxed);
            let room = self.due.capacity() > 0;
            // With no room, waking up for due work is pointless until the consumer
            // takes something: wait for capacity instead.
            let wake = if room { self.plan.next_wake() } else { None };
            tokio::select! {
                biased;
                command = self.commands.recv() => match command {
                    Some(command) => self.plan.apply(command, Instant::now()),
                    None => return,
                },
                () = sleep_until(wake.unwrap_or(now)), if wake.is_some() => {}
                permit = self.due.reserve(), if !room => {
                    if permit.is_err() {
                        return;
                    }
                }
                () = self.due.closed() => return,
            }
        }
    }

    /// Sends every workload that may go now; `false` when the receiver is gone.
    fn emit(&mut self, now: Instant) -> bool {
        let released = self.plan.release(now, self.due.capacity());
        released.into_iter().all(|id| self.due.try_send(id).is_ok())
    }
}

// === Plan ===

/// The synchronous state of the scheduler.
#[derive(Debug)]
struct Plan {
    default_debounce: Duration,
    max_delay: Duration,
    default_min_interval: Duration,
    debouncer: Debouncer<WorkloadId>,
    held: Held,
    bucket: TokenBucket,
    last_stamp: MinInterval,
    min_interval: HashMap<WorkloadId, Duration>,
}

impl Plan {
    fn new(config: &EngineConfig, bucket: TokenBucket) -> Self {
        Self {
            default_debounce: config.debounce,
            max_delay: config.max_delay,
            default_min_interval: config.min_interval,
            debouncer: Debouncer::new(),
            held: Held::default(),
            bucket,
            last_stamp: MinInterval::new(),
            min_interval: HashMap::new(),
        }
    }

    fn apply(&mut self, command: Command, now: Instant) {
        match command {
            Command::Touch {
                id,
                debounce,
                min_interval,
            } => self.touch(id, now, debounce, min_interval),
            Command::Stamped(id) => {
                self.last_stamp.record(id.clone(), now);
                self.rehold(&id);
            }
            Command::Forget(id) => self.forget(&id),
        }
    }

    fn touch(
        &mut self,
        id: WorkloadId,
        now: Instant,
        debounce: Option<Duration>,
        min_interval: Option<Duration>,
    ) {
        match min_interval {
            Some(interval) => self.min_interval.insert(id.clone(), interval),
            None => self.min_interval.remove(&id),
        };
        if self.held.contains(&id) {
            // Already debounced and waiting for pacing: merge into that entry.
            self.rehold(&id);
            return;
        }
        let window = debounce.unwrap_or(self.default_debounce);
        self.debouncer.touch(id, now, window, self.max_delay);
    }

    fn forget(&mut self, id: &WorkloadId) {
        self.debouncer.remove(id);
        self.held.remove(id);
        self.last_stamp.forget(id);
        self.min_interval.remove(id);
    }

    /// Recomputes when a held workload may go, after its pacing inputs changed.
    fn rehold(&mut self, id: &WorkloadId) {
        if let Some(since) = self.held.since(id) {
            let eligible = self.eligible_at(id, since);
            self.held.insert(id.clone(), since, eligible);
        }
    }

    /// When a workload debounced at `since` may be emitted as far as its minimum
    /// interval is concerned.
    fn eligible_at(&self, id: &WorkloadId, since: Instant) -> Instant {
        let interval = self
            .min_interval
            .get(id)
            .copied()
            .unwrap_or(self.default_min_interval);
        self.last_stamp
            .ready_at(id, interval)
            .map_or(since, |ready| ready.max(since))
    }

    /// Moves debounced workloads to the held queue, then takes up to `room` that
    /// pacing allows now.
    fn release(&mut self, now: Instant, room: usize) -> Vec<WorkloadId> {
        for id in self.debouncer.pop_due(now) {
            let eligible = self.eligible_at(&id, now);
            self.held.insert(id, now, eligible);
        }
        let mut released = Vec::new();
        while released.len() < room {
            match self.held.first_eligible() {
                Some(eligible) if eligible <= now => {}
                _ => break,
            }
            if self.bucket.try_take(now).is_err() {
                break;
            }
            released.extend(self.held.pop_first());
        }
        released
    }

    /// The next time something may become releasable.
    fn next_wake(&self) -> Option<Instant> {
        let held = self
            .held
            .first_eligible()
            .map(|eligible| self.bucket.available_at(eligible));
        [self.debouncer.next_due(), held]
            .into_iter()
            .flatten()
            .min()
    }

    fn len(&self) -> usize {
        self.debouncer.len() + self.held.len()
    }
}

// === Held ===

/// Debounced workloads waiting for pacing, ordered by when their minimum interval
/// lets them go, then first come first served.
#[derive(Debug, Default)]
struct Held {
    queue: BTreeSet<(Instant, u64, WorkloadId)>,
    entries: HashMap<WorkloadId, HeldEntry>,
    next_seq: u64,
}

#[derive(Debug, Clone, Copy)]
struct HeldEntry {
    /// When the workload left the debouncer.
    since: Instant,
    eligible: Instant,
    seq: u64,
}

impl Held {
    /// Holds `id`, or updates its eligibility keeping its place among equals.
    fn insert(&mut self, id: WorkloadId, since: Instant, eligible: Instant) {
        let seq = match self.entries.get(&id) {
            Some(old) => {
                self.queue.remove(&(old.eligible, old.seq, id.clone()));
                old.seq
            }
            None => {
                self.next_seq += 1;
                self.next_seq
            }
        };
        self.queue.insert((eligible, seq, id.clone()));
        self.entries.insert(
            id,
            HeldEntry {
                since,
                eligible,
                seq,
            },
        );
    }

    fn remove(&mut self, id: &WorkloadId) {
        if let Some(entry) = self.entries.remove(id) {
            self.queue.remove(&(entry.eligible, entry.seq, id.clone()));
        }
    }

    fn contains(&self, id: &WorkloadId) -> bool {
        self.entries.contains_key(id)
    }

    fn since(&self, id: &WorkloadId) -> Option<Instant> {
        self.entries.get(id).map(|entry| entry.since)
    }

    fn first_eligible(&self) -> Option<Instant> {
        self.queue.first().map(|(eligible, _, _)| *eligible)
    }

    fn pop_first(&mut self) -> Option<WorkloadId> {
        let (_, _, id) = self.queue.pop_first()?;
        self.entries.remove(&id);
        Some(id)
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests;
