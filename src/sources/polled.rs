//! Polled sources: the source author writes `observe` and an interval; the engine
//! does the rest (interest, timers, concurrency, deduplication, backoff).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::task::JoinSet;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;
use tracing::Instrument;

use super::{Interest, ObserveContext, Source, SourceContext, SourceError};
use crate::fingerprint::{Algorithm, Observation};
use crate::model::{Scope, SourceName, Tracked};
use crate::rate::Backoff;

/// Reads one reference at once at most this many at a time, per source.
const MAX_READS_IN_FLIGHT: usize = 8;
/// First retry delay after a failed read (then doubling, capped at the interval).
const FIRST_RETRY_DELAY: Duration = Duration::from_secs(1);

/// A source read by polling: every tracked reference is observed at once when it
/// is tracked, then every [`interval`](Self::interval). Only changes are reported;
/// a failed read keeps the last observation and is retried sooner, with backoff.
/// Register it with [`poll`].
#[async_trait]
pub trait PollSource: Send + Sync + 'static {
    /// The name annotations use for this source.
    fn name(&self) -> &SourceName;

    /// Whether references are keys of an external store (the default) or object
    /// names in the workload's namespace.
    fn scope(&self) -> Scope {
        Scope::External
    }

    /// Whether this source can produce fingerprints with `algorithm` (by default
    /// only nudge's own format).
    fn supports(&self, algorithm: Algorithm) -> bool {
        algorithm == Algorithm::Native
    }

    /// Whether `reference` (the value of a `<prefix>/<name>-<slot>` annotation)
    /// can name anything in this source; `Err` says why not, and becomes the
    /// reason of the workload's `InvalidAnnotation` Event. Checked when
    /// annotations are parsed (engine, webhook, `nudge explain`), so a bad
    /// reference is reported once instead of failing every read. By default:
    /// [`default_reference_check`](crate::model::default_reference_check) (not
    /// empty, no control characters). References of a namespaced source must
    /// also be object names (DNS-1123), whatever this says.
    fn check_reference(&self, reference: &str) -> Result<(), String> {
        crate::model::default_reference_check(reference)
    }

    /// How often each tracked reference is read.
    fn interval(&self) -> Duration;

    /// Reads one reference now. Errors are not content: report
    /// [`Observation::Absent`] only when the backend says the thing does not exist.
    async fn observe(
        &self,
        tracked: &Tracked,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError>;
}

/// A [`PollSource`] as a [`Source`].
pub struct Polled<S>(Arc<S>);

/// Registers a polled source: `Controller::with_source(poll(my_source))`.
pub fn poll<S: PollSource>(source: S) -> Arc<dyn Source> {
    Arc::new(Polled(Arc::new(source)))
}

/// One tracked reference of a polled source.
#[derive(Default)]
struct Item {
    /// The last observation reported.
    last: Option<Observation>,
    /// The next read, when one is scheduled.
    timer: Option<Key>,
    /// Set while reads fail.
    backoff: Option<Backoff>,
    /// A read is running or waiting for a slot.
    reading: bool,
    /// No read has finished yet.
    first: bool,
}

/// A finished read: what, its result, and how long it took.
type Read = (Tracked, Result<Observation, SourceError>, Duration);

/// The run loop's state.
struct Poller<S> {
    source: Arc<S>,
    cx: ObserveContext,
    items: HashMap<Tracked, Item>,
    timers: DelayQueue<Tracked>,
    reads: JoinSet<Read>,
    waiting: VecDeque<Tracked>,
}

impl<S: PollSource> Poller<S> {
    fn on_interest(&mut self, interest: Interest) {
        match interest {
            Interest::Track(tracked) => {
                if !self.source.supports(tracked.algorithm) {
                    tracing::warn!(%tracked, "fingerprint format not supported by this source");
                    return;
                }
                if self.items.contains_key(&tracked) {
                    return;
                }
                self.items.insert(
                    tracked.clone(),
                    Item {
                        first: true,
                        ..Item::default()
                    },
                );
                self.read(tracked);
            }
            Interest::Untrack(tracked) => {
                if let Some(item) = self.items.remove(&tracked)
                    && let Some(key) = item.timer
                {
                    self.timers.try_remove(&key);
                }
            }
        }
    }

    /// Starts a read of `tracked`, or queues it when every slot is taken.
    fn read(&mut self, tracked: Tracked) {
        let Some(item) = self.items.get_mut(&tracked) else {
            return;
        };
        item.timer = None;
        if item.reading {
            return;
        }
        item.reading = true;
        if self.reads.len() >= MAX_READS_IN_FLIGHT {
            self.waiting.push_back(tracked);
            return;
        }
        self.spawn(tracked);
    }

    fn spawn(&mut self, tracked: Tracked) {
        let source = self.source.clone();
        let cx = self.cx.clone();
        let span = tracing::debug_span!("poll", reference = %tracked.reference);
        self.reads.spawn(
            async move {
                let started = tokio::time::Instant::now();
                let result = source.observe(&tracked, &cx).await;
                (tracked, result, started.elapsed())
            }
            .instrument(span),
        );
    }

    /// A read finished; returns the observation to report, if it changed.
    fn on_read(
        &mut self,
        tracked: Tracked,
        result: Result<Observation, SourceError>,
    ) -> Option<Observation> {
        if let Some(next) = self.waiting.pop_front() {
            self.spawn(next);
        }
        let item = self.items.get_mut(&tracked)?;
        item.reading = false;
        item.first = false;
        let interval = self.source.interval();
        let (delay, report) = match result {
            Ok(observation) => {
                item.backoff = None;
                let changed = item.last.as_ref() != Some(&observation);
                item.last = Some(observation.clone());
                (interval, changed.then_some(observation))
            }
            Err(error) => {
                let delay = item
                    .backoff
                    .get_or_insert_with(|| Backoff::new(FIRST_RETRY_DELAY.min(interval), interval))
                    .next_delay();
                let category = error.category();
                let error = crate::errors::error_chain(&error);
                tracing::warn!(%tracked, %error, category, retry_in = ?delay, "read failed; keeping the last observation");
                (delay, None)
            }
        };
        item.timer = Some(self.timers.insert(tracked, delay));
        report
    }

    /// Whether every tracked reference has been read once.
    fn settled(&self) -> bool {
        self.items.values().all(|item| !item.first)
    }
}

#[async_trait]
impl<S: PollSource> Source for Polled<S> {
    fn name(&self) -> &SourceName {
        self.0.name()
    }

    fn scope(&self) -> Scope {
        self.0.scope()
    }

    fn check_reference(&self, reference: &str) -> Result<(), String> {
        self.0.check_reference(reference)
    }

    fn supports(&self, algorithm: Algorithm) -> bool {
        self.0.supports(algorithm)
    }

    async fn observe(
        &self,
        tracked: &Tracked,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        self.0.observe(tracked, cx).await
    }

    async fn run(self: Arc<Self>, mut ctx: SourceContext) -> Result<(), SourceError> {
        let mut poller = Poller {
            source: self.0.clone(),
            cx: ctx.observe_context().clone(),
            items: HashMap::new(),
            timers: DelayQueue::new(),
            reads: JoinSet::new(),
            waiting: VecDeque::new(),
        };
        loop {
            if poller.settled() {
                ctx.ready();
            }
            tokio::select! {
                interest = ctx.next_interest() => match interest {
                    Some(interest) => {
                        poller.on_interest(interest);
                        while let Some(more) = ctx.try_next_interest() {
                            poller.on_interest(more);
                        }
                    }
                    None => break,
                },
                Some(expired) = poller.timers.next() => poller.read(expired.into_inner()),
                Some(done) = poller.reads.join_next() => {
                    let Ok((tracked, result, took)) = done else { continue };
                    ctx.observe_took(took);
                    if let Err(error) = &result {
                        ctx.observe_failed(error);
                    }
                    if let Some(observation) = poller.on_read(tracked.clone(), result)
                        && !ctx.report(tracked, observation).await
                    {
                        break;
                    }
                }
            }
        }
        poller.reads.shutdown().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::health::{Readiness, WatchHealth};
    use crate::model::Reference;
    use crate::sources::SourceUpdate;

    /// Answers each read of a reference with the next scripted result.
    struct Scripted {
        name: SourceName,
        answers: Mutex<HashMap<String, VecDeque<Result<&'static str, ()>>>>,
        reads: Mutex<Vec<(String, tokio::time::Instant)>>,
    }

    #[async_trait]
    impl PollSource for Scripted {
        fn name(&self) -> &SourceName {
            &self.name
        }

        fn interval(&self) -> Duration {
            Duration::from_secs(30)
        }

        async fn observe(
            &self,
            tracked: &Tracked,
            cx: &ObserveContext,
        ) -> Result<Observation, SourceError> {
            let key = tracked.reference.name.to_string();
            self.reads
                .lock()
                .unwrap()
                .push((key.clone(), tokio::time::Instant::now()));
            let next = self
                .answers
                .lock()
                .unwrap()
                .get_mut(&key)
                .and_then(VecDeque::pop_front)
                .unwrap_or(Ok("same"));
            match next {
                Ok(body) => Ok(Observation::Present(cx.fingerprint(body.as_bytes()))),
                Err(()) => Err(SourceError::backend(
                    &self.name,
                    "down",
                    std::io::Error::other("connection refused"),
                )),
            }
        }
    }

    struct Harness {
        source: Arc<Scripted>,
        interest: mpsc::UnboundedSender<Interest>,
        updates: mpsc::Receiver<SourceUpdate>,
        readiness: Readiness,
        health: WatchHealth,
        registry: prometheus_client::registry::Registry,
        shutdown: CancellationToken,
        task: tokio::task::JoinHandle<Result<(), SourceError>>,
    }

    fn mk_tracked(name: &str) -> Tracked {
        Tracked::new(
            Reference::key(SourceName::new("scripted").unwrap(), name),
            Algorithm::Native,
        )
    }

    fn start(answers: &[(&str, Vec<Result<&'static str, ()>>)]) -> Harness {
        let source = Arc::new(Scripted {
            name: SourceName::new("scripted").unwrap(),
            answers: Mutex::new(
                answers
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), v.iter().copied().collect()))
                    .collect(),
            ),
            reads: Mutex::default(),
        });
        let (updates_tx, updates) = mpsc::channel(16);
        let shutdown = CancellationToken::new();
        let readiness = Readiness::new(CancellationToken::new());
        let ready = readiness.register("source scripted");
        readiness.seal();
        let key = crate::fingerprint::FingerprintKey::generate();
        let mut registry = prometheus_client::registry::Registry::default();
        let health = WatchHealth::register(&mut registry);
        let (ctx, interest) = SourceContext::new(
            source.name.clone(),
            updates_tx,
            ObserveContext::new(key),
            ready,
            health.clone(),
            shutdown.clone(),
        );
        let polled = Arc::new(Polled(source.clone()));
        let task = tokio::spawn(polled.run(ctx));
        Harness {
            source,
            interest,
            updates,
            readiness,
            health,
            registry,
            shutdown,
            task,
        }
    }

    fn body(text: &str) -> Observation {
        Observation::Present(crate::fingerprint::native_value(text.as_bytes()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_tracked_reference_is_read_at_once_then_every_interval_and_only_changes_are_reported()
    {
        let mut h = start(&[("motd", vec![Ok("a"), Ok("a"), Ok("b")])]);
        let t0 = tokio::time::Instant::now();
        h.interest
            .send(Interest::Track(mk_tracked("motd")))
            .unwrap();
        let first = h.updates.recv().await.unwrap();
        assert_eq!(first.observation, body("a"));
        assert_eq!(h.source.reads.lock().unwrap()[0].1 - t0, Duration::ZERO);
        // The second read (same content) reports nothing; the third reports "b".
        let second = h.updates.recv().await.unwrap();
        assert_eq!(second.observation, body("b"));
        let reads = h.source.reads.lock().unwrap().clone();
        assert_eq!(reads.len(), 3);
        assert_eq!(reads[2].1 - reads[1].1, Duration::from_secs(30));
        h.shutdown.cancel();
        h.task.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn failed_reads_keep_the_last_observation_and_retry_with_backoff() {
        let mut h = start(&[("motd", vec![Ok("a"), Err(()), Err(()), Ok("b")])]);
        h.interest
            .send(Interest::Track(mk_tracked("motd")))
            .unwrap();
        assert_eq!(h.updates.recv().await.unwrap().observation, body("a"));
        assert_eq!(h.updates.recv().await.unwrap().observation, body("b"));
        let reads = h.source.reads.lock().unwrap().clone();
        let retry = reads[2].1 - reads[1].1;
        assert!(
            retry >= Duration::from_secs(1) && retry < Duration::from_secs(30),
            "{retry:?}"
        );
        // The wrapper records what the source author did not: each failure by
        // category, each read's duration.
        let metrics = h.health.sources();
        assert_eq!(metrics.errors("scripted", "backend"), 2);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &h.registry).unwrap();
        assert!(
            text.contains(r#"source_observe_duration_seconds_count{source="scripted"} 4"#),
            "{text}"
        );
        h.shutdown.cancel();
        h.task.await.unwrap().unwrap();
    }

    /// What a test subscriber wrote.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The log line of a failed read carries the whole error chain: the cause
    /// the source gave `SourceError::backend` (an I/O error) as well.
    #[tokio::test(start_paused = true)]
    async fn a_failed_read_is_logged_with_the_cause_the_source_gave() {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _logging = tracing::subscriber::set_default(subscriber);
        let mut h = start(&[("motd", vec![Err(()), Ok("b")])]);
        h.interest
            .send(Interest::Track(mk_tracked("motd")))
            .unwrap();
        assert_eq!(h.updates.recv().await.unwrap().observation, body("b"));
        let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("scripted backend error: down: connection refused"),
            "{text}"
        );
        h.shutdown.cancel();
        h.task.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn untracked_references_are_no_longer_read_and_readiness_waits_for_first_reads() {
        let mut h = start(&[]);
        tokio::task::yield_now().await;
        assert!(h.readiness.is_ready(), "nothing tracked yet: ready");
        h.interest.send(Interest::Track(mk_tracked("a"))).unwrap();
        h.updates.recv().await.unwrap();
        h.interest.send(Interest::Untrack(mk_tracked("a"))).unwrap();
        tokio::time::sleep(Duration::from_secs(120)).await;
        assert_eq!(h.source.reads.lock().unwrap().len(), 1);
        h.shutdown.cancel();
        h.task.await.unwrap().unwrap();
    }
}
