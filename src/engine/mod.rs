//! The engine: what each workload depends on, what its stamp should be, and when
//! it may be written (design §5), with the sources and targets plugged in.
//!
//! Two halves:
//!
//! - [`core`]: a synchronous state machine, `handle(Input, now) -> Vec<Effect>`,
//!   with one record per workload. Every decision is made here, tested with plain
//!   `#[test]`s and explicit instants. Built from [`graph`] (the dependency graph),
//!   [`debounce`] and the pacing queue.
//! - `driver`: the thin async part. It owns every task in one `JoinSet` (target
//!   watches, sources and their restarts, stamp writes, the Event publisher),
//!   feeds the core its inputs and performs its effects. Events go through a
//!   bounded queue to a publisher task, so a slow API never delays a stamp.
//!
//! Layering: the engine imports the bottom contracts and the `Source`, `Target`
//! and `EventSink` traits; nothing below imports the engine. The runtime composes
//! it with the admin server, leader election and the webhook.

pub mod core;
pub mod debounce;
mod driver;
pub mod graph;
mod metrics;
mod queue;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use futures::stream::BoxStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use self::core::{Core, CoreSettings, Effect, Input, StampWrite, WriteOutcome};
pub use debounce::Debouncer;
pub use graph::{DependencyGraph, GraphDelta};
pub use metrics::{EngineMetrics, StampResult};

use crate::annotations::AnnotationScheme;
use crate::config::EngineConfig;
use crate::copies::Copier;
use crate::events::{EventSink, NoEvents};
use crate::fingerprint::{FingerprintKey, Observation};
use crate::health::{Readiness, WatchHealth};
use crate::model::{SourceCatalog, SourceName, Tracked, WorkloadKind};
use crate::rate::PacingError;
use crate::sources::{ObserveContext, Source};
use crate::stamp::{FingerprintStore, InputReader, ReadError};
use crate::targets::Target;

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// Two sources were registered under one name.
    #[error("two sources are named {0}")]
    DuplicateSource(SourceName),
    /// Two targets were registered for one kind.
    #[error("two targets handle {0:?}")]
    DuplicateTarget(WorkloadKind),
    /// The pacing configuration is invalid.
    #[error("invalid pacing configuration: {0}")]
    Pacing(#[from] PacingError),
}

/// The namespaces matching a selector, each time they change.
pub type NamespaceFeed = BoxStream<'static, BTreeSet<String>>;

/// The assembled engine: sources, targets, event sink and settings.
pub struct Engine {
    config: EngineConfig,
    scheme: AnnotationScheme,
    observe: ObserveContext,
    sources: BTreeMap<SourceName, Arc<dyn Source>>,
    targets: BTreeMap<WorkloadKind, Arc<dyn Target>>,
    events: Arc<dyn EventSink>,
    store: Arc<RwLock<FingerprintStore>>,
    metrics: EngineMetrics,
    readiness: Readiness,
    health: WatchHealth,
    leadership: Option<watch::Receiver<bool>>,
    namespaces: Option<NamespaceFeed>,
    /// Makes and prunes snapshot copies (design §5e); `None` with snapshots off.
    copier: Option<Copier>,
}

impl Engine {
    /// An engine with no sources or targets yet, fingerprinting secrets with `key`.
    pub fn new(config: EngineConfig, scheme: AnnotationScheme, key: FingerprintKey) -> Self {
        Self {
            config,
            scheme,
            observe: ObserveContext::new(key),
            sources: BTreeMap::new(),
            targets: BTreeMap::new(),
            events: Arc::new(NoEvents),
            store: Arc::default(),
            metrics: EngineMetrics::default(),
            readiness: Readiness::new(CancellationToken::new()),
            health: WatchHealth::default(),
            leadership: None,
            namespaces: None,
            copier: None,
        }
    }

    /// Publishes Events to `sink` (by default they are dropped).
    pub fn with_events(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.events = sink;
        self
    }

    /// Records into `metrics` (register them into a registry first).
    pub fn with_metrics(mut self, metrics: EngineMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Registers every source and target with `readiness` (one entry each, sealed
    /// when the engine starts) and counts watch restarts in `health`.
    pub fn with_health(mut self, readiness: Readiness, health: WatchHealth) -> Self {
        self.readiness = readiness;
        self.health = health;
        self
    }

    /// Stamps (and publishes Events) only while `leader` is true; without this,
    /// the engine always stamps. On becoming leader it re-evaluates every workload.
    pub fn with_leadership(mut self, leader: watch::Receiver<bool>) -> Self {
        self.leadership = Some(leader);
        self
    }

    /// Stamps only workloads in the namespaces `feed` names (from
    /// `kubernetes.namespace_selector`); the others are kept aside, untracked, and
    /// come in when their namespace starts matching. Nothing is stamped before the
    /// feed's first item.
    pub fn with_namespace_feed(mut self, feed: NamespaceFeed) -> Self {
        self.namespaces = Some(feed);
        self
    }

    /// Makes snapshot copies before the stamps that name them, and prunes
    /// them (design §5e): with snapshots on.
    pub fn with_copier(mut self, copier: Copier) -> Self {
        self.copier = Some(copier);
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
        let kind = target.kind().clone();
        if self.targets.insert(kind.clone(), target).is_some() {
            return Err(EngineError::DuplicateTarget(kind));
        }
        Ok(self)
    }

    /// The configured sources, as annotations see them.
    pub fn catalog(&self) -> SourceCatalog {
        crate::sources::catalog(self.sources.values())
    }

    /// The kinds with a registered target.
    pub fn kinds(&self) -> Vec<WorkloadKind> {
        self.targets.keys().cloned().collect()
    }

    /// The kinds whose target takes snapshots (design §5e): only their
    /// workloads do.
    pub fn snapshot_kinds(&self) -> BTreeSet<WorkloadKind> {
        self.targets
            .iter()
            .filter(|(_, target)| target.takes_snapshots())
            .map(|(kind, _)| kind.clone())
            .collect()
    }

    /// Reads inputs through the registered sources (for the webhook).
    pub fn reader(&self) -> Arc<dyn InputReader> {
        Arc::new(SourceReader::new(
            self.sources.values().cloned(),
            self.observe.clone(),
        ))
    }

    /// The fingerprints the engine currently knows (shared with the webhook).
    pub fn fingerprints(&self) -> Arc<RwLock<FingerprintStore>> {
        self.store.clone()
    }

    /// Runs until `shutdown` is cancelled, then stops and joins every task it
    /// started.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), EngineError> {
        driver::run(self, shutdown).await
    }
}

/// An [`InputReader`] over sources: `Source::observe` of the reference's source.
pub struct SourceReader {
    sources: BTreeMap<SourceName, Arc<dyn Source>>,
    observe: ObserveContext,
}

impl SourceReader {
    /// A reader over `sources`, fingerprinting secrets with `observe`'s key.
    pub fn new(
        sources: impl IntoIterator<Item = Arc<dyn Source>>,
        observe: ObserveContext,
    ) -> Self {
        Self {
            sources: sources
                .into_iter()
                .map(|source| (source.name().clone(), source))
                .collect(),
            observe,
        }
    }
}

#[async_trait]
impl InputReader for SourceReader {
    async fn read(&self, tracked: &Tracked) -> Result<Observation, ReadError> {
        let name = &tracked.reference.source;
        let source = self.sources.get(name).ok_or_else(|| ReadError {
            category: "unknown_source",
            message: format!("no source named {name}"),
        })?;
        source
            .observe(tracked, &self.observe)
            .await
            .map_err(|error| ReadError {
                category: error.category(),
                message: crate::errors::error_chain(&error),
            })
    }
}
