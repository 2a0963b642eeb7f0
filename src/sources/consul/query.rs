//! One blocking-query loop per [`WatchTarget`], following Consul's rules for blocking
//! queries (<https://developer.hashicorp.com/consul/api-docs/features/blocking>):
//! the index is reset when it goes backwards and never below 1 after a read, the
//! loop is rate-limited with jitter, and failures back off exponentially with jitter
//! until a blocking query answers again; in between, a prefix query rechecks its
//! names and index before it reads values again.
//! An answer whose index went backwards is acted on only once a `consistent` read
//! confirms it: a restarted server answers from its older state until it has
//! applied its log, a restored or rebuilt cluster for good. A prefix query blocks
//! on the names under its prefix and reads only what changed (`super::narrow`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::WatchSettings;
use super::client::{BlockOn, ClientError, ConsulClient, KeyRead, KeysRead, PrefixRead};
use super::narrow;
use super::plan::WatchTarget;
use crate::errors::error_chain;
use crate::rate::{Backoff, TokenBucket};

/// Margin after a blocking query's server-side deadline (`wait` + `wait/16`) before
/// its connection slot on the agent is considered free again.
const LINGER_GRACE: Duration = Duration::from_secs(2);

/// How many requests may be in flight, shared by every query of one source.
#[derive(Debug)]
pub(crate) struct QueryLimits {
    /// Blocking queries in flight (`max_concurrent_queries`).
    pub blocking: Arc<Semaphore>,
    /// Non-blocking reads in flight (first reads, `observe`, new items on known keys).
    pub one_off: Arc<Semaphore>,
    /// Abandoned blocking queries still held open on the agent's side.
    pub lingering: Arc<Semaphore>,
}

impl QueryLimits {
    /// Limits for `max_concurrent_queries` blocking queries and `one_off` reads.
    pub fn new(max_concurrent_queries: usize, one_off: usize) -> Self {
        Self {
            blocking: Arc::new(Semaphore::new(max_concurrent_queries)),
            one_off: Arc::new(Semaphore::new(one_off)),
            lingering: Arc::new(Semaphore::new(max_concurrent_queries)),
        }
    }
}

/// What a read returned.
#[derive(Debug)]
pub(crate) enum Read {
    /// A single-key read.
    Key(KeyRead),
    /// A recursive read.
    Prefix(PrefixRead),
    /// The names under a prefix (sorted), from the blocking query that woke on
    /// them: keys of the query missing from it are gone.
    Keys(KeysRead),
}

impl Read {
    fn index(&self) -> u64 {
        match self {
            Self::Key(read) => read.index,
            Self::Prefix(read) => read.index,
            Self::Keys(read) => read.index,
        }
    }
}

/// Where an answer comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The query loop with this id.
    Query(u64),
    /// A one-off read.
    OneOff,
}

/// A successful read, sent to the watch loop.
#[derive(Debug)]
pub(crate) struct Answer {
    /// Who read it.
    pub origin: Origin,
    /// What was read.
    pub target: WatchTarget,
    /// The result.
    pub read: Read,
    /// `Some(part)`: a recursive read of only this part of the query's prefix
    /// (`super::narrow`); keys of the query outside it were not read.
    pub within: Option<String>,
    /// The index went backwards, and a consistent read confirmed it: older
    /// indexes are the new truth.
    pub authoritative: bool,
}

/// Reads `target` once in Consul's `consistent` mode (see
/// [`ConsulClient::get_key_consistent`]).
async fn read_consistent(client: &ConsulClient, target: &WatchTarget) -> Result<Read, ClientError> {
    match target {
        WatchTarget::Key(key) => client.get_key_consistent(key).await.map(Read::Key),
        WatchTarget::Prefix(prefix) => client.get_prefix_consistent(prefix).await.map(Read::Prefix),
    }
}

/// Reads `target` once, blocking on `block_on` if given.
pub(crate) async fn read(
    client: &ConsulClient,
    target: &WatchTarget,
    block_on: Option<BlockOn>,
) -> Result<Read, ClientError> {
    match target {
        WatchTarget::Key(key) => client.get_key(key, block_on).await.map(Read::Key),
        WatchTarget::Prefix(prefix) => client.get_prefix(prefix, block_on).await.map(Read::Prefix),
    }
}

/// Blocks on `target` until something under it changes (or the wait ends): a
/// key's value, or, for a prefix, the names under it (cheaper than its values;
/// `super::narrow` then reads what changed).
async fn block(
    client: &ConsulClient,
    target: &WatchTarget,
    block_on: BlockOn,
) -> Result<Read, ClientError> {
    match target {
        WatchTarget::Key(key) => client.get_key(key, Some(block_on)).await.map(Read::Key),
        WatchTarget::Prefix(prefix) => {
            let mut read = client.list_keys(prefix, Some(block_on)).await?;
            read.keys.sort_unstable();
            Ok(Read::Keys(read))
        }
    }
}

/// Consul's index rules for one query loop.
#[derive(Debug, Default)]
pub(crate) struct IndexCursor {
    last: Option<u64>,
    next: u64,
    /// The last read failed; nothing was taken since.
    failed: bool,
}

impl IndexCursor {
    /// The index to send next; 0 means a non-blocking read.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Whether an answer's `X-Consul-Index` is lower than the last one taken.
    pub fn went_backwards(&self, index: u64) -> bool {
        self.last.is_some_and(|last| index < last)
    }

    /// Takes an answer's `X-Consul-Index`. Returns whether it went backwards; then
    /// the answer is authoritative and, if it came from a blocking query, the loop
    /// restarts with a non-blocking read. Otherwise the next query blocks on the
    /// index, clamped to at least 1 (an index of 0 would never block).
    pub fn advance(&mut self, index: u64, was_blocking: bool) -> bool {
        let backwards = self.went_backwards(index);
        self.last = Some(index);
        self.failed = false;
        self.next = if backwards && was_blocking {
            0
        } else {
            index.max(1)
        };
        backwards
    }

    /// After a failure (or when no blocking slot is free), the next read is a
    /// fresh non-blocking one, so that a restarted Consul is compared at once;
    /// the last index is kept, so a lower one after the restart is still
    /// noticed.
    pub fn restart(&mut self) {
        self.next = 0;
        self.failed = true;
    }

    /// After a failure, the index last taken: a read that finds it unchanged
    /// need not read values again (see [`QueryLoop::recheck`]). `None` before the
    /// first answer and after any answer taken since.
    pub fn failed_after(&self) -> Option<u64> {
        self.last.filter(|_| self.failed)
    }

    /// The answer taken last was not handed on (reading what changed failed):
    /// the last index handed on is `blocked_on`, the one its query blocked on,
    /// so that a recheck after the failure reads what changed since.
    pub fn undelivered(&mut self, blocked_on: u64) {
        self.last = Some(blocked_on);
    }

    /// A recheck found the index unchanged: block on it again.
    pub fn resume(&mut self) {
        if let Some(last) = self.last {
            self.advance(last, false);
        }
    }
}

/// The first delay after a failure; each next one doubles, up to
/// `max_retry_interval`.
pub(super) const FIRST_RETRY: Duration = Duration::from_millis(500);

/// A new query sends its first blocking request this long after it started:
/// a query replaced sooner (start-up regroups the queries as the workloads
/// are listed) leaves no blocking request behind for Consul to serve until
/// its `wait` ends, holding a slot meanwhile. A change made before the first
/// blocking request is still read at once: it moved the index that request
/// sends.
const FIRST_BLOCK_AFTER: Duration = Duration::from_secs(2);

/// How often a target is rechecked while its refused blocking query waits out
/// its backoff: a change is read within about this.
const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// A query loop's failures in a row: the backoff before the next attempt, and
/// what was logged, so that a run of one failure is logged once (warn) and its
/// end once (info) instead of at every attempt; each failure is still counted
/// in the source's metrics.
#[derive(Debug)]
struct Failures {
    backoff: Backoff,
    max: Duration,
    in_a_row: u32,
    /// The category of the failure last logged at warn: a run of failures is
    /// logged again when its kind changes (a refused connection, then a 403).
    logged: Option<&'static str>,
    /// When the last failure was a blocking query's (typically its connection
    /// refused while pooled ones still work): no blocking query before this
    /// instant. `None` after any other failure, whose backoff is slept before
    /// the next read anyway.
    blocking_held: Option<Instant>,
}

impl Failures {
    fn new(max: Duration) -> Self {
        Self {
            backoff: Backoff::new(FIRST_RETRY, max),
            max,
            in_a_row: 0,
            logged: None,
            blocking_held: None,
        }
    }

    /// When the next blocking query may go, if that is after `now`.
    fn blocking_held_until(&self, now: Instant) -> Option<Instant> {
        self.blocking_held.filter(|until| *until > now)
    }

    /// Logs a failure; returns the delay before the next attempt, which after a
    /// failed `blocking` query also holds back the next blocking query.
    fn failed(&mut self, error: &ClientError, blocking: bool) -> Duration {
        let delay = self.backoff.next_delay();
        self.in_a_row += 1;
        self.blocking_held = blocking.then(|| Instant::now() + delay);
        let category = error.category();
        let text = error_chain(error);
        let in_a_row = self.in_a_row;
        if self.logged == Some(category) {
            tracing::debug!(error = %text, category, retry_in = ?delay, in_a_row, "Consul query failed again");
        } else {
            tracing::warn!(error = %text, category, retry_in = ?delay, in_a_row, "Consul query failed");
            self.logged = Some(category);
        }
        delay
    }

    /// A read answered (a `blocking` query, or another read): the run of
    /// failures, if any, is over, unless it was of blocking queries and this was
    /// another read: a read on a pooled connection says nothing of whether the
    /// agent takes new ones, and must not bring the refused queries back to
    /// their first delay.
    fn answered(&mut self, blocking: bool) {
        if self.in_a_row > 0 && (blocking || self.blocking_held.is_none()) {
            tracing::info!(failures = self.in_a_row, "Consul query answered again");
            *self = Self::new(self.max);
        }
    }
}

/// A random duration in `[0, max]`.
pub(crate) fn jitter(max: Duration) -> Duration {
    max.mul_f64(fastrand::f64())
}

/// When a query loop may run its next query.
///
/// A key that keeps changing is read at most once per `min_query_interval` once
/// the loop's burst is spent (the `churn` bucket). A prefix query covers many
/// keys, and changes of different keys under it in a row (a deploy writing its
/// keys one by one) are not churn: after an answer whose changed keys were all
/// quiet for an interval, the next query draws from the `fresh` bucket instead,
/// `query_burst` tokens refilled `query_burst` times per interval, which still
/// bounds the loop when many keys change at once.
#[derive(Debug)]
pub(crate) struct Pace {
    churn: TokenBucket,
    /// `None`: the interval is too short to divide; fresh answers are not limited.
    fresh: Option<TokenBucket>,
    interval: Duration,
    /// Keys of a prefix seen changing within the last interval.
    recently_changed: HashMap<String, Instant>,
    after_fresh_answer: bool,
}

impl Pace {
    /// `None` when `min_query_interval` is zero: no limit.
    pub fn new(settings: &WatchSettings) -> Option<Self> {
        let burst = settings.query_burst.max(1);
        let churn = TokenBucket::with_period(settings.min_query_interval, burst).ok()?;
        let fresh = TokenBucket::with_period(settings.min_query_interval / burst, burst).ok();
        Some(Self {
            churn,
            fresh,
            interval: settings.min_query_interval,
            recently_changed: HashMap::new(),
            after_fresh_answer: false,
        })
    }

    /// Takes a token for the next query, or returns when one will be available.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Instant> {
        match (&mut self.fresh, self.after_fresh_answer) {
            (Some(fresh), true) => fresh.try_take(now),
            (None, true) => Ok(()),
            (_, false) => self.churn.try_take(now),
        }
    }

    /// Classifies an answer by the keys of a prefix it saw changing: fresh when
    /// there are some and none changed within the last interval.
    pub fn observe_changed(&mut self, changed: &[&str], now: Instant) {
        let interval = self.interval;
        self.recently_changed
            .retain(|_, at| now.saturating_duration_since(*at) < interval);
        // No visible change (a deletion, an index bump) counts as churn.
        self.after_fresh_answer = !changed.is_empty()
            && changed
                .iter()
                .all(|key| !self.recently_changed.contains_key(*key));
        for key in changed {
            self.recently_changed.insert((*key).to_owned(), now);
        }
    }
}

/// The keys of `reads` modified after `blocked_on` (none when 0: a non-blocking
/// read).
fn changed_since<'a>(reads: impl Iterator<Item = &'a PrefixRead>, blocked_on: u64) -> Vec<&'a str> {
    reads
        .flat_map(|read| &read.entries)
        .filter(|e| blocked_on != 0 && e.modify_index > blocked_on)
        .map(|e| e.key.as_str())
        .collect()
}

/// One query loop's context.
pub(crate) struct QueryLoop {
    /// Identifies this loop's answers.
    pub id: u64,
    /// What it reads.
    pub target: WatchTarget,
    /// The client.
    pub client: Arc<ConsulClient>,
    /// Shared request limits.
    pub limits: Arc<QueryLimits>,
    /// Timing.
    pub settings: WatchSettings,
    /// Where answers go.
    pub answers: mpsc::Sender<Answer>,
    /// Cancelled when this loop is no longer wanted (a child of `shutdown`).
    pub stop: CancellationToken,
    /// Cancelled when nudge shuts down.
    pub shutdown: CancellationToken,
    /// Where the loop and its requests are spawned (owned by the source's run).
    pub tasks: TaskTracker,
}

impl QueryLoop {
    /// Spawns the loop with a span naming its key or prefix.
    pub fn spawn(self, source: &str) {
        let span = match &self.target {
            WatchTarget::Key(key) => {
                tracing::info_span!("consul_watch", source, key = %key, query = self.id)
            }
            WatchTarget::Prefix(prefix) => {
                tracing::info_span!("consul_watch", source, prefix = %prefix, query = self.id)
            }
        };
        let tasks = self.tasks.clone();
        tasks.spawn(self.run().instrument(span));
    }

    async fn run(self) {
        tracing::debug!("query started");
        let first_block = Instant::now() + FIRST_BLOCK_AFTER;
        let mut cursor = IndexCursor::default();
        let mut failures = Failures::new(self.settings.max_retry_interval);
        let mut pace = Pace::new(&self.settings);
        loop {
            if cursor.next() != 0
                && let Some(until) = failures.blocking_held_until(Instant::now())
            {
                // A refused blocking query waits out its backoff; meanwhile the
                // target is rechecked every `RECHECK_EVERY`, so a change is still
                // read within about that.
                if !self
                    .sleep_until(until.min(Instant::now() + RECHECK_EVERY))
                    .await
                {
                    break;
                }
                cursor.restart();
            }
            if let Some(pace) = pace.as_mut()
                && let Err(available) = pace.try_take(Instant::now())
            {
                let until = available + jitter(self.settings.min_query_interval / 4);
                if !self.sleep_until(until).await {
                    break;
                }
                // The token became available at `available`; take it.
                let _ = pace.try_take(Instant::now());
            }
            let index = cursor.next();
            let result = match (index, cursor.failed_after()) {
                (0, Some(last)) => self.recheck(last).await,
                (0, None) => self.read_once().await.map(|r| r.map(Some)),
                _ => {
                    if !self.sleep_until(first_block).await {
                        break;
                    }
                    match self.read_blocking(index).await {
                        Some(Blocking::Answered(result)) => Some(result.map(Some)),
                        Some(Blocking::NoSlot) => {
                            // Every blocking slot is taken (by queries abandoned
                            // when the plan changed, left to finish): recheck as
                            // after a failure, so that a change is still read
                            // within about `RECHECK_EVERY`, then wait for a slot
                            // again.
                            cursor.restart();
                            continue;
                        }
                        None => None,
                    }
                }
            };
            let Some(result) = result else { break };
            if result.is_ok() {
                failures.answered(index != 0);
            }
            let read = match result {
                Ok(Some(read)) => read,
                Ok(None) => {
                    cursor.resume();
                    continue;
                }
                Err(error) => {
                    let blocking = index != 0;
                    if !self
                        .retry_later(&mut cursor, &mut failures, &error, blocking)
                        .await
                    {
                        break;
                    }
                    continue;
                }
            };
            let (read, authoritative) = if cursor.went_backwards(read.index()) {
                // A server that restarted and has not yet applied its log, or a
                // cluster restored from an older snapshot (or rebuilt): only a
                // consistent read tells them apart. The first is refused until
                // the server has caught up; the second is the new truth.
                tracing::debug!(
                    index = read.index(),
                    "Consul index went backwards; confirming with a consistent read"
                );
                match self.read_consistent().await {
                    None => break,
                    Some(Ok(confirmed)) => {
                        let authoritative = cursor.advance(confirmed.index(), false);
                        (confirmed, authoritative)
                    }
                    Some(Err(error)) => {
                        if !self
                            .retry_later(&mut cursor, &mut failures, &error, false)
                            .await
                        {
                            break;
                        }
                        continue;
                    }
                }
            } else {
                cursor.advance(read.index(), index != 0);
                (read, false)
            };
            let answers = match read {
                Read::Keys(woke) => match self.narrow(woke, index).await {
                    None => break,
                    Some(Ok(answers)) => answers,
                    Some(Err(error)) => {
                        // What woke the query was not read: the recheck must
                        // not take its index as handed on.
                        cursor.undelivered(index);
                        if !self
                            .retry_later(&mut cursor, &mut failures, &error, false)
                            .await
                        {
                            break;
                        }
                        continue;
                    }
                },
                read => vec![(read, None)],
            };
            if let Some(pace) = pace.as_mut() {
                let reads = answers.iter().filter_map(|(read, _)| match read {
                    Read::Prefix(read) => Some(read),
                    Read::Key(_) | Read::Keys(_) => None,
                });
                pace.observe_changed(&changed_since(reads, index), Instant::now());
            }
            if !self.send(answers, authoritative).await {
                break;
            }
        }
        tracing::debug!("query stopped");
    }

    /// Hands answers to the watch loop; `false` when it is gone.
    async fn send(&self, answers: Vec<(Read, Option<String>)>, authoritative: bool) -> bool {
        for (read, within) in answers {
            let answer = Answer {
                origin: Origin::Query(self.id),
                target: self.target.clone(),
                read,
                within,
                authoritative,
            };
            if self.answers.send(answer).await.is_err() {
                return false;
            }
        }
        true
    }

    /// The answers for a prefix whose names woke its query (`woke`, from a query
    /// blocked on `since`): the names (for the keys that are gone) and, when the
    /// index moved, the reads of what changed. `None` when stopped.
    async fn narrow(
        &self,
        woke: KeysRead,
        since: u64,
    ) -> Option<Result<Vec<(Read, Option<String>)>, ClientError>> {
        let WatchTarget::Prefix(prefix) = &self.target else {
            return Some(Ok(vec![(Read::Keys(woke), None)]));
        };
        let narrowed = if woke.index <= since {
            Ok(Vec::new())
        } else {
            tokio::select! {
                result = narrow::changed(&self.client, &self.limits.one_off, prefix, &woke, since) => result,
                () = self.stop.cancelled() => return None,
            }
        };
        Some(narrowed.map(|reads| {
            std::iter::once((Read::Keys(woke), None))
                .chain(reads.into_iter().map(|n| (Read::Prefix(n.read), n.within)))
                .collect()
        }))
    }

    /// After a failed read: the next read is a non-blocking recheck. After a
    /// failed blocking query the recheck comes at once and the next blocking
    /// query after the backoff (see `run`); after any other failure (Consul
    /// unreachable) the recheck waits out the backoff. `false` when stopped
    /// meanwhile.
    async fn retry_later(
        &self,
        cursor: &mut IndexCursor,
        failures: &mut Failures,
        error: &ClientError,
        blocking: bool,
    ) -> bool {
        cursor.restart();
        let delay = failures.failed(error, blocking);
        if blocking {
            return true;
        }
        self.sleep_until(Instant::now() + delay).await
    }

    /// The first read after a failure. For a prefix, its names first (no values):
    /// when their index is still `last`, nothing under it changed (a write or a
    /// deletion moves it) and the answer is `Ok(None)`: the loop blocks on `last`
    /// again. Otherwise, and for a key, a full read as at the start, which also
    /// compares a restarted Consul at once. While the agent refuses new
    /// connections (its `http_max_conns_per_client` taken, for example by the
    /// abandoned queries of a nudge that just stopped, which Consul keeps until
    /// their `wait` ends), a prefix is rechecked every `RECHECK_EVERY` on a
    /// pooled connection, each time an answer of names, not its group's values.
    /// `None` when stopped.
    async fn recheck(&self, last: u64) -> Option<Result<Option<Read>, ClientError>> {
        if let WatchTarget::Prefix(prefix) = &self.target {
            match self.one_off(self.client.list_keys(prefix, None)).await? {
                Ok(names) if names.index == last => return Some(Ok(None)),
                Ok(_) => {}
                Err(error) => return Some(Err(error)),
            }
        }
        self.read_once().await.map(|result| result.map(Some))
    }

    /// Sleeps; `false` when stopped meanwhile.
    async fn sleep_until(&self, until: Instant) -> bool {
        tokio::select! {
            () = tokio::time::sleep_until(until) => true,
            () = self.stop.cancelled() => false,
        }
    }

    /// A non-blocking read in Consul's `consistent` mode; `None` when stopped.
    async fn read_consistent(&self) -> Option<Result<Read, ClientError>> {
        self.one_off(read_consistent(&self.client, &self.target))
            .await
    }

    /// A non-blocking read; `None` when stopped.
    async fn read_once(&self) -> Option<Result<Read, ClientError>> {
        self.one_off(read(&self.client, &self.target, None)).await
    }

    /// Runs the non-blocking `request` holding one of the source's one-off
    /// permits; `None` when stopped.
    async fn one_off<T>(&self, request: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            result = async {
                let _permit = self.limits.one_off.acquire().await.ok()?;
                Some(request.await)
            } => result,
            () = self.stop.cancelled() => None,
        }
    }

    /// A blocking read; `None` when stopped, [`Blocking::NoSlot`] when no
    /// slot of `max_concurrent_queries` came free within `RECHECK_EVERY`.
    ///
    /// The request runs in its own task holding a permit of
    /// `max_concurrent_queries`. When the loop is stopped mid-query, the request is
    /// dropped (closing its connection) only if a lingering slot is free: Consul
    /// (1.8 at least) keeps serving an abandoned blocking query until its `wait`
    /// ends, and keeps counting its connection against
    /// `limits.http_max_conns_per_client` meanwhile, so each dropped query holds a
    /// lingering slot until then. Without a free slot the request is left to finish
    /// and its connection goes back to the pool. Either way nudge never holds more
    /// than `2 × max_concurrent_queries` (+ one-off reads) of the agent's slots.
    async fn read_blocking(&self, index: u64) -> Option<Blocking> {
        let permit = tokio::select! {
            permit = self.limits.blocking.clone().acquire_owned() => permit.ok()?,
            () = tokio::time::sleep(RECHECK_EVERY) => {
                tracing::debug!("no blocking query slot free; rechecking instead");
                self.client.no_blocking_slot();
                return Some(Blocking::NoSlot);
            }
            () = self.stop.cancelled() => return None,
        };
        let block_on = BlockOn {
            index,
            wait: self.settings.wait,
        };
        let request = BlockingRequest {
            client: self.client.clone(),
            target: self.target.clone(),
            block_on,
            permit,
            lingering: self.limits.lingering.clone(),
            stop: self.stop.clone(),
            shutdown: self.shutdown.clone(),
            tasks: self.tasks.clone(),
        };
        let mut handle = self.tasks.spawn(request.run().in_current_span());
        tokio::select! {
            joined = &mut handle => joined.ok().flatten().map(Blocking::Answered),
            () = self.stop.cancelled() => None,
        }
    }
}

/// What became of a blocking read.
enum Blocking {
    /// It was sent, and answered or failed.
    Answered(Result<Read, ClientError>),
    /// It was not sent: no blocking slot came free in time.
    NoSlot,
}

/// One blocking request, detached from its loop so that stopping the loop does not
/// necessarily drop the connection (see [`QueryLoop::read_blocking`]).
struct BlockingRequest {
    client: Arc<ConsulClient>,
    target: WatchTarget,
    block_on: BlockOn,
    permit: OwnedSemaphorePermit,
    lingering: Arc<Semaphore>,
    stop: CancellationToken,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl BlockingRequest {
    async fn run(self) -> Option<Result<Read, ClientError>> {
        let _permit = self.permit;
        let server_deadline =
            Instant::now() + self.block_on.wait + self.block_on.wait / 16 + LINGER_GRACE;
        let request = block(&self.client, &self.target, self.block_on);
        tokio::pin!(request);
        tokio::select! {
            result = &mut request => return Some(result),
            () = self.stop.cancelled() => {}
        }
        if self.shutdown.is_cancelled() {
            return None;
        }
        match self.lingering.try_acquire_owned() {
            Ok(slot) => {
                let shutdown = self.shutdown.clone();
                self.tasks.spawn(async move {
                    tokio::select! {
                        () = tokio::time::sleep_until(server_deadline) => {}
                        () = shutdown.cancelled() => {}
                    }
                    drop(slot);
                });
            }
            Err(_) => {
                tracing::debug!("no lingering slot free; letting the abandoned query finish");
                tokio::select! {
                    _ = &mut request => {}
                    () = self.shutdown.cancelled() => {}
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_read_is_non_blocking_and_then_blocks_on_the_index() {
        let mut c = IndexCursor::default();
        assert_eq!(c.next(), 0);
        assert!(!c.advance(12, false));
        assert_eq!(c.next(), 12);
        assert!(!c.advance(15, true));
        assert_eq!(c.next(), 15);
    }

    #[test]
    fn an_index_of_zero_is_clamped_to_one() {
        let mut c = IndexCursor::default();
        c.advance(0, false);
        assert_eq!(c.next(), 1);
    }

    #[test]
    fn an_index_going_backwards_resets_to_a_non_blocking_read() {
        let mut c = IndexCursor::default();
        c.advance(20, false);
        assert!(c.advance(7, true));
        assert_eq!(c.next(), 0);
        assert!(!c.advance(7, false));
        assert_eq!(c.next(), 7);
    }

    #[test]
    fn went_backwards_looks_without_taking() {
        let mut c = IndexCursor::default();
        assert!(!c.went_backwards(5), "nothing taken yet");
        c.advance(20, false);
        assert!(c.went_backwards(7));
        assert!(c.went_backwards(7), "still: 7 was not taken");
        assert!(!c.went_backwards(20));
        assert_eq!(c.next(), 20);
    }

    #[test]
    fn a_fresh_read_that_went_backwards_is_authoritative_and_blocks_on() {
        let mut c = IndexCursor::default();
        c.advance(20, false);
        c.restart();
        assert_eq!(c.next(), 0);
        assert!(c.advance(3, false));
        assert_eq!(c.next(), 3);
    }

    #[test]
    fn failures_back_off_until_a_read_answers() {
        let mut f = Failures::new(Duration::from_secs(30));
        // 0.5–1 s, 1–2 s, 2–4 s, …, then the cap.
        for first_ms in [500, 1000, 2000, 4000, 8000, 16000, 30000] {
            let d = f.failed(&ClientError::Timeout, false);
            let low = Duration::from_millis(first_ms);
            assert!(
                d >= low && d <= (low * 2).min(Duration::from_secs(30)),
                "{d:?} for {low:?}"
            );
        }
        f.answered(false);
        assert!(f.failed(&ClientError::Timeout, false) <= Duration::from_secs(1));
    }

    #[test]
    fn refused_blocking_queries_back_off_until_a_blocking_query_answers() {
        let mut f = Failures::new(Duration::from_secs(30));
        let before = Instant::now();
        assert_eq!(f.blocking_held_until(before), None);
        let d = f.failed(&ClientError::Timeout, true);
        let held = f.blocking_held_until(before).expect("held back");
        assert!(held >= before + d && held <= Instant::now() + d);
        assert_eq!(f.blocking_held_until(held), None, "until then only");
        f.answered(false);
        assert_eq!(f.in_a_row, 1, "a recheck does not end the run");
        assert!(f.failed(&ClientError::Timeout, true) >= Duration::from_secs(1));
        f.answered(true);
        assert_eq!(f.in_a_row, 0);
        assert_eq!(f.blocking_held_until(before), None);
    }

    #[test]
    fn a_cap_below_the_first_delay_is_kept() {
        let mut f = Failures::new(Duration::from_millis(200));
        assert!(f.failed(&ClientError::Timeout, false) <= Duration::from_millis(200));
    }

    #[test]
    fn a_run_of_one_kind_of_failure_is_logged_once_and_another_kind_again() {
        let mut f = Failures::new(Duration::from_secs(30));
        f.failed(&ClientError::Timeout, false);
        let logged = f.logged;
        f.failed(&ClientError::Timeout, false);
        assert_eq!(f.logged, logged, "the same failure again");
        f.failed(&ClientError::MissingIndex, false);
        assert_ne!(f.logged, logged, "another kind is logged");
        assert_eq!(f.in_a_row, 3);
        f.answered(false);
        assert_eq!((f.in_a_row, f.logged), (0, None));
    }

    #[test]
    fn after_a_failure_the_last_index_is_rechecked_then_blocked_on_again() {
        let mut c = IndexCursor::default();
        c.restart();
        assert_eq!(c.failed_after(), None, "nothing taken yet: a full read");
        c.advance(20, false);
        assert_eq!(c.failed_after(), None);
        c.restart();
        assert_eq!((c.next(), c.failed_after()), (0, Some(20)));
        c.resume();
        assert_eq!((c.next(), c.failed_after()), (20, None));
        c.restart();
        assert!(!c.advance(25, false), "a recheck that found a change");
        assert_eq!((c.next(), c.failed_after()), (25, None));
    }

    #[test]
    fn a_wake_whose_changes_were_not_read_is_rechecked_from_the_index_blocked_on() {
        let mut c = IndexCursor::default();
        c.advance(20, false);
        assert!(!c.advance(31, true), "woke on 31");
        c.undelivered(20);
        c.restart();
        assert_eq!(
            c.failed_after(),
            Some(20),
            "a recheck finding 31 reads everything again"
        );
    }

    fn prefix_answer(changes: &[(&str, u64)], index: u64) -> Read {
        let entries = changes
            .iter()
            .map(|(key, modify_index)| super::super::client::KvEntry {
                key: (*key).to_owned(),
                value: Vec::new(),
                modify_index: *modify_index,
            })
            .collect();
        Read::Prefix(PrefixRead { entries, index })
    }

    /// Classifies an answer to a query that blocked on `blocked_on` (0: a
    /// non-blocking read, which is never fresh), as the loop does.
    fn observe(pace: &mut Pace, read: &Read, blocked_on: u64, now: Instant) {
        let changed = match read {
            Read::Prefix(answer) => changed_since(std::iter::once(answer), blocked_on),
            Read::Key(_) | Read::Keys(_) => Vec::new(),
        };
        pace.observe_changed(&changed, now);
    }

    fn paced(interval_ms: u64, burst: u32) -> Pace {
        Pace::new(&WatchSettings {
            min_query_interval: Duration::from_millis(interval_ms),
            query_burst: burst,
            ..WatchSettings::default()
        })
        .expect("a non-zero interval paces")
    }

    #[test]
    fn changes_of_different_keys_under_a_prefix_are_not_held_to_the_interval() {
        let mut pace = paced(1000, 5);
        let start = Instant::now();
        pace.try_take(start).expect("first read");
        observe(
            &mut pace,
            &prefix_answer(&[("p/a", 5), ("p/b", 6)], 6),
            0,
            start,
        );
        // Twelve changes of twelve keys, 300 ms apart: each read at once, although
        // the churn bucket (5, then 1/s) would hold the eighth.
        for i in 0..12u64 {
            let at = start + Duration::from_millis(300 * i);
            pace.try_take(at).expect("a fresh change is read at once");
            let key = format!("p/k{i}");
            observe(
                &mut pace,
                &prefix_answer(&[(key.as_str(), 10 + i)], 10 + i),
                9 + i,
                at,
            );
        }
    }

    #[test]
    fn a_key_changing_again_within_the_interval_is_churn() {
        let mut pace = paced(1000, 2);
        let start = Instant::now();
        pace.try_take(start).unwrap();
        observe(&mut pace, &prefix_answer(&[("p/hot", 5)], 5), 0, start);
        pace.try_take(start).unwrap();
        observe(&mut pace, &prefix_answer(&[("p/hot", 6)], 6), 5, start);
        // Fresh (p/hot had not changed since the first read)…
        pace.try_take(start).unwrap();
        observe(&mut pace, &prefix_answer(&[("p/hot", 7)], 7), 6, start);
        // …but now it changed twice within the interval: the churn bucket, already
        // spent by the first two reads, holds the next query.
        let available = pace.try_take(start).expect_err("churn waits");
        assert!(available > start);
    }

    #[test]
    fn answers_without_a_visible_change_and_key_answers_are_churn() {
        let mut pace = paced(1000, 1);
        let start = Instant::now();
        pace.try_take(start).unwrap();
        observe(&mut pace, &prefix_answer(&[("p/a", 5)], 9), 5, start);
        assert!(pace.try_take(start).is_err(), "an index bump is paced");

        let mut pace = paced(1000, 1);
        pace.try_take(start).unwrap();
        let key = Read::Key(KeyRead {
            value: Some(b"v".to_vec()),
            modify_index: Some(9),
            index: 9,
        });
        observe(&mut pace, &key, 5, start);
        assert!(pace.try_take(start).is_err(), "a key loop keeps one bucket");
    }
}
