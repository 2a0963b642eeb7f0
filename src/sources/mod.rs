//! Config sources: where configuration lives and how nudge learns that it changed.
//!
//! A [`Source`] is told which references to track ([`Interest`]) and reports the
//! current [`Observation`] of each ([`SourceUpdate`]). The built-in sources are
//! ConfigMaps, Secrets and Consul KV; library users can register their own.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::fingerprint::{Algorithm, Observation};
use crate::model::{Scope, SourceName, Tracked};

mod configmap;
pub mod consul;
pub mod kube;
pub mod secret;

pub use self::kube::{ContentObject, ObjectSource, ObjectSourceSettings};

/// The engine's request to start or stop tracking a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interest {
    /// Some workload now depends on this; report its observation and every change.
    Track(Tracked),
    /// No workload depends on this any more; stop watching it and forget it.
    Untrack(Tracked),
}

/// A source's report of what a tracked reference currently holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceUpdate {
    /// What was observed.
    pub tracked: Tracked,
    /// Its current state.
    pub observation: Observation,
}

/// The channels a running source works with.
#[derive(Debug)]
pub struct SourceContext {
    /// Track/untrack requests, in the order the engine made them.
    pub interest: mpsc::UnboundedReceiver<Interest>,
    /// Where observations go. Sending waits when the engine is behind, which is
    /// the backpressure a source should feel.
    pub updates: mpsc::Sender<SourceUpdate>,
    /// Cancelled when nudge shuts down; `run` should return soon after.
    pub shutdown: CancellationToken,
}

/// Why a source could not observe something. Never content: an error must not be
/// reported as [`Observation::Absent`].
#[derive(Debug, thiserror::Error)]
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
    pub fn category(&self) -> &'static str {
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
}

/// A place configuration lives, able to tell when it changes.
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
///   soon as it is known, then every change until [`Interest::Untrack`].
/// - **Bounded memory.** Keep fingerprints of tracked references, not content
///   (Wave's format is the exception: its fragment is the fingerprint).
/// - **No secrets in logs.** Never log or put content into errors.
/// - **Stops on shutdown.** `run` returns soon after `ctx.shutdown` is cancelled.
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

    /// Reads the current observation of one reference now. Used by the admission
    /// webhook for references nudge has not observed yet; callers put a deadline
    /// around it.
    async fn observe(&self, tracked: &Tracked) -> Result<Observation, SourceError>;

    /// Watches tracked references until shutdown, following `ctx.interest` and
    /// sending every observation to `ctx.updates`. Returns `Ok` on shutdown; an
    /// error return is logged and the source is restarted with backoff.
    async fn run(self: Arc<Self>, ctx: SourceContext) -> Result<(), SourceError>;
}
