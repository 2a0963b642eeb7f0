//! Watched sources: the source author writes a stream of observations per
//! reference; the engine does the rest (interest, restarts with backoff,
//! deduplication).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use tokio_stream::StreamMap;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

use super::{Interest, ObserveContext, Source, SourceContext, SourceError};
use crate::fingerprint::{Algorithm, Observation};
use crate::model::{Scope, SourceName, Tracked};
use crate::rate::Backoff;

/// The observations of one reference: the current one first, then each change.
/// A `futures` `BoxStream`: build one with `futures::StreamExt::boxed` (or
/// `Box::pin` of any `Stream + Send + 'static`).
pub type ObservationStream = BoxStream<'static, Result<Observation, SourceError>>;

/// First delay before a failed or ended watch is started again (doubling).
const FIRST_RESTART_DELAY: Duration = Duration::from_secs(1);
const MAX_RESTART_DELAY: Duration = Duration::from_secs(60);

/// A source that can watch one reference at a time: [`watch`](Self::watch) returns a
/// stream, dropped to stop watching. A stream that yields an error or ends is
/// started again after a backoff; meanwhile the last observation stays in force.
/// Only changes are reported. Register it with [`watch`](fn@watch).
#[async_trait]
pub trait WatchSource: Send + Sync + 'static {
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

    /// Watches one reference: its current observation first, then each change.
    fn watch(&self, tracked: &Tracked, cx: &ObserveContext) -> ObservationStream;

    /// Reads one reference now (admission webhook, `nudge explain`): by default the
    /// first item of [`watch`](Self::watch).
    async fn observe(
        &self,
        tracked: &Tracked,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        match self.watch(tracked, cx).next().await {
            Some(result) => result,
            None => Err(SourceError::backend_message(
                self.name(),
                "the watch ended before its first observation",
            )),
        }
    }
}

/// A [`WatchSource`] as a [`Source`].
pub struct Watched<S>(Arc<S>);

/// Registers a watched source: `Controller::with_source(watch(my_source))`.
pub fn watch<S: WatchSource>(source: S) -> Arc<dyn Source> {
    Arc::new(Watched(Arc::new(source)))
}

/// One tracked reference of a watched source.
#[derive(Default)]
struct Item {
    last: Option<Observation>,
    /// The restart, while the watch is down.
    restart: Option<Key>,
    backoff: Option<Backoff>,
    /// Nothing (observation or error) has come yet.
    first: bool,
    /// When the running watch started, until its first item came.
    started: Option<tokio::time::Instant>,
}

/// A stream item: an observation or error, or `None` when the stream ended.
type Next = Option<Result<Observation, SourceError>>;

struct Watcher<S> {
    source: Arc<S>,
    cx: ObserveContext,
    items: HashMap<Tracked, Item>,
    streams: StreamMap<Tracked, BoxStream<'static, Next>>,
    restarts: DelayQueue<Tracked>,
}

impl<S: WatchSource> Watcher<S> {
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
                self.start(tracked);
            }
            Interest::Untrack(tracked) => {
                self.streams.remove(&tracked);
                if let Some(item) = self.items.remove(&tracked)
                    && let Some(key) = item.restart
                {
                    self.restarts.try_remove(&key);
                }
            }
        }
    }

    fn start(&mut self, tracked: Tracked) {
        let Some(item) = self.items.get_mut(&tracked) else {
            return;
        };
        item.restart = None;
        item.started = Some(tokio::time::Instant::now());
        let watch = self
            .source
            .watch(&tracked, &self.cx)
            .map(Some)
            .chain(stream::once(async { None }))
            .boxed();
        self.streams.insert(tracked, watch);
    }

    /// One stream item; returns the observation to report, if it changed.
    fn on_next(&mut self, tracked: Tracked, next: Next) -> Option<Observation> {
        let item = self.items.get_mut(&tracked)?;
        item.first = false;
        let failure = match next {
            Some(Ok(observation)) => {
                item.backoff = None;
                let changed = item.last.as_ref() != Some(&observation);
                item.last = Some(observation.clone());
                return changed.then_some(observation);
            }
            Some(Err(error)) => crate::errors::error_chain(&error),
            None => "the watch ended".to_owned(),
        };
        self.streams.remove(&tracked);
        let delay = item
            .backoff
            .get_or_insert_with(|| Backoff::new(FIRST_RESTART_DELAY, MAX_RESTART_DELAY))
            .next_delay();
        tracing::warn!(%tracked, error = %failure, restart_in = ?delay, "watch failed; keeping the last observation");
        item.restart = Some(self.restarts.insert(tracked, delay));
        None
    }

    fn settled(&self) -> bool {
        self.items.values().all(|item| !item.first)
    }

    /// How long the running watch of `tracked` took to its first item, when
    /// `next` is that item (an observation or an error, not the end).
    fn first_item_took(&mut self, tracked: &Tracked, next: &Next) -> Option<Duration> {
        let item = self.items.get_mut(tracked)?;
        let started = item.started.take()?;
        next.is_some().then(|| started.elapsed())
    }
}

#[async_trait]
impl<S: WatchSource> Source for Watched<S> {
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
        let mut watcher = Watcher {
            source: self.0.clone(),
            cx: ctx.observe_context().clone(),
            items: HashMap::new(),
            streams: StreamMap::new(),
            restarts: DelayQueue::new(),
        };
        loop {
            if watcher.settled() {
                ctx.ready();
            }
            tokio::select! {
                interest = ctx.next_interest() => match interest {
                    Some(interest) => {
                        watcher.on_interest(interest);
                        while let Some(more) = ctx.try_next_interest() {
                            watcher.on_interest(more);
                        }
                    }
                    None => break,
                },
                Some(expired) = watcher.restarts.next() => {
                    let tracked = expired.into_inner();
                    ctx.watch_restarted();
                    watcher.start(tracked);
                }
                Some((tracked, next)) = watcher.streams.next() => {
                    if let Some(took) = watcher.first_item_took(&tracked, &next) {
                        ctx.observe_took(took);
                    }
                    if let Some(Err(error)) = &next {
                        ctx.observe_failed(error);
                    }
                    if let Some(observation) = watcher.on_next(tracked.clone(), next)
                        && !ctx.report(tracked, observation).await
                    {
                        break;
                    }
                }
            }
        }
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

    /// Each watch of a key plays the next scripted sequence of items.
    struct Scripted {
        name: SourceName,
        scripts: Mutex<Vec<Vec<Result<&'static str, ()>>>>,
        watches: Mutex<Vec<tokio::time::Instant>>,
    }

    impl WatchSource for Scripted {
        fn name(&self) -> &SourceName {
            &self.name
        }

        fn watch(&self, _tracked: &Tracked, cx: &ObserveContext) -> ObservationStream {
            self.watches
                .lock()
                .unwrap()
                .push(tokio::time::Instant::now());
            let mut scripts = self.scripts.lock().unwrap();
            let script = if scripts.is_empty() {
                Vec::new()
            } else {
                scripts.remove(0)
            };
            let name = self.name.clone();
            let cx = cx.clone();
            let items: Vec<Result<Observation, SourceError>> = script
                .into_iter()
                .map(|item| match item {
                    Ok(body) => Ok(Observation::Present(cx.fingerprint(body.as_bytes()))),
                    Err(()) => Err(SourceError::backend_message(&name, "down")),
                })
                .collect();
            // Ends after its items, or stays open when the script says so.
            stream::iter(items).chain(stream::pending()).boxed()
        }
    }

    fn mk_tracked(name: &str) -> Tracked {
        Tracked::new(
            Reference::key(SourceName::new("scripted").unwrap(), name),
            Algorithm::Native,
        )
    }

    fn body(text: &str) -> Observation {
        Observation::Present(crate::fingerprint::native_value(text.as_bytes()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_watch_restarts_with_backoff_and_only_changes_are_reported() {
        let source = Arc::new(Scripted {
            name: SourceName::new("scripted").unwrap(),
            scripts: Mutex::new(vec![
                vec![Ok("a"), Ok("a"), Err(())],
                vec![Ok("a"), Ok("b")],
            ]),
            watches: Mutex::default(),
        });
        let (updates_tx, mut updates) = mpsc::channel::<SourceUpdate>(16);
        let shutdown = CancellationToken::new();
        let readiness = Readiness::new(CancellationToken::new());
        let ready = readiness.register("source scripted");
        readiness.seal();
        let health = WatchHealth::default();
        let (ctx, interest) = SourceContext::new(
            source.name.clone(),
            updates_tx,
            ObserveContext::new(crate::fingerprint::FingerprintKey::generate()),
            ready,
            health.clone(),
            shutdown.clone(),
        );
        let task = tokio::spawn(Arc::new(Watched(source.clone())).run(ctx));
        interest.send(Interest::Track(mk_tracked("k"))).unwrap();
        assert_eq!(updates.recv().await.unwrap().observation, body("a"));
        assert_eq!(updates.recv().await.unwrap().observation, body("b"));
        let watches = source.watches.lock().unwrap().clone();
        assert_eq!(watches.len(), 2);
        assert!(watches[1] - watches[0] >= FIRST_RESTART_DELAY);
        assert_eq!(health.restarts("scripted"), 1);
        // Recorded by the wrapper: the failure by category and how long each
        // watch took to its first item (both at once here: zero).
        assert_eq!(health.sources().errors("scripted", "backend"), 1);
        assert!(readiness.is_ready());
        shutdown.cancel();
        task.await.unwrap().unwrap();
    }
}
