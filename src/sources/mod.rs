//! Config sources: where configuration lives and how nudge learns that it changed.
//!
//! The engine owns interest tracking, deduplication, restarts and backoff; a source
//! author writes the least code that fits, in one of three forms:
//!
//! - [`PollSource`]: `observe` one reference, plus an interval. Wrap it with
//!   [`poll`]. The engine polls each tracked reference (the first time at once),
//!   concurrently, reports only changes and backs off on errors.
//! - [`WatchSource`]: a stream of observations per reference, cancelled by dropping
//!   it. Wrap it with [`watch`]. The engine restarts a stream that ends or fails,
//!   with backoff, and reports only changes.
//! - [`Source`]: the low-level batched form the built-in sources use (Consul
//!   prefix queries, Kubernetes metadata watches): it is told what to track
//!   ([`Interest`]) through its [`SourceContext`] and reports observations itself.
//!
//! Every form gets an [`ObserveContext`] carrying the installation's
//! [`FingerprintKey`], so a source that holds secrets fingerprints them keyed
//! ([`ObserveContext::secret_fingerprint`]) exactly like Secrets are, and a
//! readiness signal that counts toward `/ready`.
//!
//! This layer imports only the bottom contracts (`model`, `fingerprint`,
//! `annotations`, `health`, `rate`, `scope`, `config`), never the engine, targets,
//! the webhook or the runtime.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use crate::config::SourcesConfig;
use crate::fingerprint::{Algorithm, Fingerprint, FingerprintKey, Observation};
pub use crate::health::SourceMetrics;
#[cfg(any(test, feature = "testing"))]
use crate::health::{Readiness, ReadyStatus};
use crate::health::{WatchHealth, WatchReady};
use crate::model::{PodSpecRule, Scope, SourceCatalog, SourceName, Tracked};

mod configmap;
pub mod consul;
pub mod kind;
pub mod objects;
mod polled;
pub mod secret;
mod watched;

use self::consul::ConsulMetrics;
pub use self::kind::{KindConfigError, KindError, KindSource};
pub use self::objects::{ContentObject, ObjectSource, ObjectSourceSettings};
pub use self::polled::{PollSource, Polled, poll};
pub use self::watched::{ObservationStream, WatchSource, Watched, watch};

/// The engine's request to start or stop tracking a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Interest {
    /// Some workload now depends on this; report its observation and every change.
    Track(Tracked),
    /// No workload depends on this any more; stop watching it and forget it.
    Untrack(Tracked),
}

/// A source's report of what a tracked reference currently holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SourceUpdate {
    /// What was observed.
    pub tracked: Tracked,
    /// Its current state.
    pub observation: Observation,
    /// Who changed it last and when, when the backend tells (boxed: most
    /// reports carry none).
    pub provenance: Option<Box<Provenance>>,
}

impl SourceUpdate {
    /// A report of `observation` for `tracked`, with no provenance.
    pub fn new(tracked: Tracked, observation: Observation) -> Self {
        Self {
            tracked,
            observation,
            provenance: None,
        }
    }

    /// The same report, saying who changed the content last.
    pub(crate) fn with_provenance(mut self, provenance: Provenance) -> Self {
        self.provenance = Some(Box::new(provenance));
        self
    }
}

/// Who changed a config object last, and when, as its backend records it:
/// named in the rollout outcome nudge reports (design §5c). Never content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Provenance {
    /// The backend's version of the object: a Kubernetes `resourceVersion`, a
    /// Consul `ModifyIndex`.
    pub version: Option<String>,
    /// Who changed it: the field manager of the latest `managedFields` entry
    /// (`kubectl-edit`, `helm`, `argocd-controller`, …).
    pub changed_by: Option<String>,
    /// When (RFC 3339), as the backend recorded it.
    pub changed_at: Option<String>,
}

impl Provenance {
    /// Provenance with only a version (what a key-value store knows).
    pub fn version(version: impl Into<String>) -> Self {
        Self {
            version: Some(version.into()),
            ..Self::default()
        }
    }

    /// The same, changed by `manager` at `at` (RFC 3339).
    pub fn changed_by(mut self, manager: impl Into<String>, at: Option<String>) -> Self {
        self.changed_by = Some(manager.into());
        self.changed_at = at;
        self
    }
}

impl std::fmt::Display for Provenance {
    /// `by kubectl-edit at 2026-11-25T12:59:58Z, version 12345`; the parts known.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(by) = &self.changed_by {
            parts.push(format!("by {by}"));
        }
        if let Some(at) = &self.changed_at {
            parts.push(format!("at {at}"));
        }
        let mut text = parts.join(" ");
        if let Some(version) = &self.version {
            if !text.is_empty() {
                text.push_str(", ");
            }
            text.push_str("version ");
            text.push_str(version);
        }
        f.write_str(&text)
    }
}

/// What every observation needs besides the reference: the installation key.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct ObserveContext {
    key: FingerprintKey,
}

impl ObserveContext {
    /// A context fingerprinting secrets with `key`.
    pub(crate) fn new(key: FingerprintKey) -> Self {
        Self { key }
    }

    /// The installation key.
    pub(crate) fn key(&self) -> &FingerprintKey {
        &self.key
    }

    /// The fingerprint of secret content: `hmac-sha256-<hex>` keyed with the
    /// installation key, never a plain hash (design §3).
    pub fn secret_fingerprint(&self, content: &[u8]) -> Fingerprint {
        crate::fingerprint::native_value_keyed(content, &self.key)
    }

    /// The fingerprint of non-secret content: `sha256-<hex>`.
    pub fn fingerprint(&self, content: &[u8]) -> Fingerprint {
        crate::fingerprint::native_value(content)
    }
}

/// What a running low-level [`Source`] works with: the engine's interest, where
/// observations go, the observe context, its readiness and restart signals, and
/// shutdown.
#[derive(Debug)]
pub struct SourceContext {
    name: SourceName,
    interest: mpsc::UnboundedReceiver<Interest>,
    updates: mpsc::Sender<SourceUpdate>,
    observe: ObserveContext,
    ready: WatchReady,
    health: WatchHealth,
    shutdown: CancellationToken,
}

/// The parts of a [`SourceContext`], for built-in sources that select over them.
pub(crate) struct ContextParts {
    pub(crate) interest: mpsc::UnboundedReceiver<Interest>,
    pub(crate) updates: mpsc::Sender<SourceUpdate>,
    pub(crate) observe: ObserveContext,
    pub(crate) ready: WatchReady,
    pub(crate) shutdown: CancellationToken,
}

impl SourceContext {
    /// A context for source `name`: the engine sends interest on the returned
    /// sender and reads observations from `updates`.
    pub(crate) fn new(
        name: SourceName,
        updates: mpsc::Sender<SourceUpdate>,
        observe: ObserveContext,
        ready: WatchReady,
        health: WatchHealth,
        shutdown: CancellationToken,
    ) -> (Self, mpsc::UnboundedSender<Interest>) {
        let (interest_tx, interest) = mpsc::unbounded_channel();
        let ctx = Self {
            name,
            interest,
            updates,
            observe,
            ready,
            health,
            shutdown,
        };
        (ctx, interest_tx)
    }

    /// The next request to track or untrack, in the order the engine made them;
    /// `None` once nudge shuts down (the source should return).
    pub async fn next_interest(&mut self) -> Option<Interest> {
        tokio::select! {
            () = self.shutdown.cancelled() => None,
            interest = self.interest.recv() => interest,
        }
    }

    /// The next request if one is waiting (to take a burst of requests at once).
    pub(crate) fn try_next_interest(&mut self) -> Option<Interest> {
        self.interest.try_recv().ok()
    }

    /// Reports the current observation of `tracked`. Waits when the engine is
    /// behind (the backpressure a source should feel); `false` once the engine is
    /// gone or nudge shuts down (the source should return).
    pub async fn report(&self, tracked: Tracked, observation: Observation) -> bool {
        self.send(SourceUpdate::new(tracked, observation)).await
    }

    /// [`report`](Self::report) with who changed the content and when, which
    /// nudge names in the outcome of the rollout the change causes.
    pub async fn report_with(
        &self,
        tracked: Tracked,
        observation: Observation,
        provenance: Provenance,
    ) -> bool {
        self.send(SourceUpdate::new(tracked, observation).with_provenance(provenance))
            .await
    }

    async fn send(&self, update: SourceUpdate) -> bool {
        tokio::select! {
            () = self.shutdown.cancelled() => false,
            sent = self.updates.send(update) => sent.is_ok(),
        }
    }

    /// The observe context (installation key).
    pub fn observe_context(&self) -> &ObserveContext {
        &self.observe
    }

    /// The source has its initial state (repeat calls are harmless): it counts
    /// as ready in `/ready` from now on.
    pub fn ready(&self) {
        self.ready.listed();
    }

    /// A watch of the source failed and is being restarted
    /// (`nudge_watch_restarts_total{watch="<source name>"}`).
    pub(crate) fn watch_restarted(&self) {
        self.health.restarted(self.name.as_str());
    }

    /// Reading one reference took `took`
    /// (`nudge_source_observe_duration_seconds{source}`). The [`poll`] and
    /// [`watch`] wrappers record this themselves; a low-level source may.
    pub(crate) fn observe_took(&self, took: Duration) {
        self.health.sources().observe_took(self.name.as_str(), took);
    }

    /// Reading a reference failed with `error`
    /// (`nudge_source_errors_total{source,category}`). The [`poll`] and
    /// [`watch`] wrappers record this themselves; a low-level source may.
    pub(crate) fn observe_failed(&self, error: &SourceError) {
        self.health
            .sources()
            .failed(self.name.as_str(), error.category());
    }

    /// Resolves when nudge shuts down.
    pub async fn cancelled(&self) {
        self.shutdown.cancelled().await;
    }

    pub(crate) fn into_parts(self) -> (ContextParts, WatchHealth) {
        (
            ContextParts {
                interest: self.interest,
                updates: self.updates,
                observe: self.observe,
                ready: self.ready,
                shutdown: self.shutdown,
            },
            self.health,
        )
    }
}

#[cfg(any(test, feature = "testing"))]
/// A context for source `name` outside the engine, and the engine's side of
/// it: how a source is driven in its own tests. Up to `capacity` reports
/// wait unread before [`report`](SourceContext::report) waits.
pub fn harness(
    name: SourceName,
    observe: ObserveContext,
    capacity: usize,
) -> (SourceContext, SourceHarness) {
    let (updates_tx, updates) = mpsc::channel(capacity.max(1));
    let shutdown = CancellationToken::new();
    let readiness = Readiness::new(CancellationToken::new());
    let ready = readiness.register(format!("source {name}"));
    readiness.seal();
    let (ctx, interest) = SourceContext::new(
        name,
        updates_tx,
        observe,
        ready,
        WatchHealth::default(),
        shutdown.clone(),
    );
    let harness = SourceHarness {
        interest,
        updates,
        readiness,
        shutdown,
    };
    (ctx, harness)
}

#[cfg(any(test, feature = "testing"))]
/// The engine's side of a [`SourceContext`] made by [`harness`]:
/// tell the source what to track, read what it reports, see whether it is
/// ready, shut it down.
#[derive(Debug)]
pub struct SourceHarness {
    interest: mpsc::UnboundedSender<Interest>,
    updates: mpsc::Receiver<SourceUpdate>,
    readiness: Readiness,
    shutdown: CancellationToken,
}

#[cfg(any(test, feature = "testing"))]
impl SourceHarness {
    /// Asks the source to track `tracked` (as when a workload references it).
    pub fn track(&self, tracked: Tracked) {
        let _ = self.interest.send(Interest::Track(tracked));
    }

    /// Asks the source to stop tracking `tracked`.
    pub fn untrack(&self, tracked: Tracked) {
        let _ = self.interest.send(Interest::Untrack(tracked));
    }

    /// The next observation the source reports; `None` once it has stopped.
    pub async fn next_update(&mut self) -> Option<SourceUpdate> {
        self.updates.recv().await
    }

    /// The next observation if one is waiting.
    pub fn try_next_update(&mut self) -> Option<SourceUpdate> {
        self.updates.try_recv().ok()
    }

    /// Whether the source said it has its initial state
    /// ([`SourceContext::ready`]).
    pub fn is_ready(&self) -> bool {
        self.readiness.status() == ReadyStatus::Ready
    }

    /// Shuts the source down, as nudge does on SIGTERM.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }
}

/// Why a source could not observe something. Never content: an error must not be
/// reported as [`Observation::Absent`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// The backend (API server, Consul agent, HTTP endpoint) failed or could not be
    /// reached; nudge keeps the last known fingerprints and retries.
    #[error("{source_name} backend error: {message}")]
    Backend {
        /// The source reporting it.
        source_name: SourceName,
        /// What went wrong, without content.
        message: String,
        /// The underlying error.
        #[source]
        cause: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The reference cannot name anything in this source (e.g. an invalid key path).
    #[error("{source_name} cannot track {reference}: {reason}")]
    InvalidReference {
        /// The source reporting it.
        source_name: SourceName,
        /// The reference, as written.
        reference: String,
        /// Why.
        reason: String,
    },
    /// The source cannot fingerprint with this algorithm (e.g. Wave's format for a
    /// Consul key).
    #[error("{source_name} does not support the {algorithm} fingerprint format")]
    UnsupportedAlgorithm {
        /// The source reporting it.
        source_name: SourceName,
        /// The algorithm asked for.
        algorithm: Algorithm,
    },
    /// The answer did not come within the caller's deadline.
    #[error("{source_name} did not answer in time")]
    Timeout {
        /// The source reporting it.
        source_name: SourceName,
    },
}

impl SourceError {
    /// A low-cardinality label for metrics and Events.
    pub(crate) fn category(&self) -> &'static str {
        match self {
            Self::Backend { .. } => "backend",
            Self::InvalidReference { .. } => "invalid_reference",
            Self::UnsupportedAlgorithm { .. } => "unsupported_algorithm",
            Self::Timeout { .. } => "timeout",
        }
    }

    /// A backend error with a cause.
    pub fn backend(
        source_name: &SourceName,
        message: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Backend {
            source_name: source_name.clone(),
            message: message.into(),
            cause: Some(Box::new(cause)),
        }
    }

    /// A reference this source cannot track, and why.
    pub fn invalid_reference(
        source_name: &SourceName,
        reference: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self::InvalidReference {
            source_name: source_name.clone(),
            reference: reference.into(),
            reason: reason.into(),
        }
    }

    /// A backend error without an underlying error value (e.g. an unexpected
    /// HTTP status).
    pub fn backend_message(source_name: &SourceName, message: impl Into<String>) -> Self {
        Self::Backend {
            source_name: source_name.clone(),
            message: message.into(),
            cause: None,
        }
    }
}

/// A place configuration lives, able to tell when it changes: the low-level form
/// (most custom sources want [`PollSource`] or [`WatchSource`] instead).
///
/// # What an implementation must guarantee
///
/// - **Content, not events.** Report an observation when the *content* of a tracked
///   reference may have changed; the fingerprint must depend on content only (not on
///   versions, timestamps or metadata), so that re-writing the same content yields
///   the same [`Observation`]. Reporting an unchanged observation again is harmless:
///   the engine ignores it.
/// - **Errors are not content.** When the backend cannot be read, report nothing
///   (log it, back off, retry). Report [`Observation::Absent`] only when the backend
///   positively says the object or key does not exist.
/// - **Initial state.** After [`Interest::Track`], report the current observation as
///   soon as it is known, then every change until [`Interest::Untrack`]. Call
///   [`SourceContext::ready`] once the source's initial state is known.
/// - **Bounded memory.** Keep fingerprints of tracked references, not content
///   (Wave's format is the exception: its fragment is the fingerprint).
/// - **No secrets in logs.** Never log or put content into errors; fingerprint
///   secret content with [`ObserveContext::secret_fingerprint`].
/// - **Stops on shutdown.** `run` returns soon after shutdown, and every task it
///   started has stopped by then.
#[async_trait]
pub trait Source: Send + Sync + 'static {
    /// The name annotations use for this source (`configmap`, `consul.eu`, …).
    fn name(&self) -> &SourceName;

    /// Whether references name objects in the workload's namespace or keys in an
    /// external store.
    fn scope(&self) -> Scope;

    /// Whether this source can produce fingerprints with `algorithm`.
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

    /// Where this source's references appear in a pod spec, if anywhere:
    /// `<prefix>/auto` then tracks each one it finds (design §5b). None by
    /// default; the Secrets Store CSI preset's is its `csi` volumes.
    fn pod_spec_rule(&self) -> Option<PodSpecRule> {
        None
    }

    /// Reads the current observation of one reference now. Used by the admission
    /// webhook and `nudge explain` for references the engine has not observed;
    /// callers put a deadline around it.
    async fn observe(
        &self,
        tracked: &Tracked,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError>;

    /// Watches tracked references until shutdown, following the context's interest
    /// and reporting every observation. Returns `Ok` on shutdown; an error return
    /// is logged and the engine restarts the source with backoff.
    async fn run(self: Arc<Self>, ctx: SourceContext) -> Result<(), SourceError>;
}

/// The catalog annotations are parsed with: each source's name, scope and its
/// own [`Source::check_reference`]. The engine (and through it the webhook) and
/// `nudge explain` build theirs here, so they apply the same rules.
pub fn catalog<'a>(sources: impl IntoIterator<Item = &'a Arc<dyn Source>>) -> SourceCatalog {
    let mut catalog = SourceCatalog::new();
    for source in sources {
        let checker = Arc::clone(source);
        catalog.insert(
            source.name().clone(),
            source.scope(),
            Arc::new(move |reference: &str| checker.check_reference(reference)),
        );
        if let Some(rule) = source.pod_spec_rule() {
            catalog.set_rule(source.name(), rule);
        }
    }
    catalog
}

/// The built-in sources `config` asks for: ConfigMaps and Secrets unless turned
/// off (`[sources.configmap]`, `[sources.secret]`), every enabled Consul instance and every `[sources.kubernetes.<name>]` kind. `nudge run`
/// and `nudge explain` both build their sources here, so they observe
/// references the same way. An invalid kind entry (configuration validation
/// reports it first) is logged and left out.
pub fn builtin(
    client: &::kube::Client,
    settings: ObjectSourceSettings,
    config: &SourcesConfig,
    consul_metrics: &ConsulMetrics,
) -> Result<Vec<Arc<dyn Source>>, Box<dyn std::error::Error + Send + Sync>> {
    let mut sources: Vec<Arc<dyn Source>> = Vec::new();
    if config.configmap.enabled {
        sources.push(Arc::new(ObjectSource::<ConfigMap>::new(
            SourceName::configmap(),
            client.clone(),
            settings.clone(),
        )));
    }
    if config.secret.enabled {
        sources.push(Arc::new(ObjectSource::<Secret>::new(
            SourceName::secret(),
            client.clone(),
            settings.clone(),
        )));
    }
    #[cfg(feature = "consul")]
    for source in consul::settings::sources_from_config(&config.consul)? {
        sources.push(Arc::new(source.with_metrics(consul_metrics.clone())));
    }
    // Configuration validation refuses an enabled Consul source without it.
    #[cfg(not(feature = "consul"))]
    let _ = consul_metrics;
    // `kubernetes.source_label_selector` is for ConfigMaps and Secrets.
    let kind_settings = ObjectSourceSettings {
        label_selector: String::new(),
        ..settings
    };
    for (name, kind) in &config.kubernetes {
        match KindSource::from_config(name, kind, client.clone(), kind_settings.clone()) {
            Ok(source) => sources.push(Arc::new(source)),
            Err(error) => {
                let error = crate::errors::error_chain(&error);
                tracing::error!(%error, "invalid [sources.kubernetes] entry; not watching it");
            }
        }
    }
    Ok(sources)
}
