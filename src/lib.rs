//! nudge rolls Kubernetes workloads when the configuration they depend on changes.
//!
//! It watches config sources (ConfigMaps, Secrets, Consul KV, or a custom
//! [`Source`]) and, when the content a workload depends on changes, writes a
//! content fingerprint into the workload's pod-template annotations, so the
//! workload controller performs an ordinary rolling update.
//!
//! "design §N" in the code's comments refers to section N of `docs/design.md`,
//! the design of record in the repository.
//!
//! # Embedding
//!
//! [`Controller`] runs everything `nudge run` runs; add custom sources and targets
//! to it:
//!
//! ```no_run
//! use std::time::Duration;
//! use nudge::fingerprint::Observation;
//! use nudge::model::{SourceName, Tracked};
//! use nudge::{Controller, ObserveContext, PollSource, SourceError, poll};
//!
//! struct Motd(SourceName);
//!
//! #[async_trait::async_trait]
//! impl PollSource for Motd {
//!     fn name(&self) -> &SourceName { &self.0 }
//!     fn interval(&self) -> Duration { Duration::from_secs(30) }
//!     async fn observe(&self, tracked: &Tracked, cx: &ObserveContext)
//!         -> Result<Observation, SourceError> {
//!         let body = tracked.reference.name.as_bytes(); // read it from somewhere
//!         Ok(Observation::Present(cx.fingerprint(body)))
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! Controller::new(client)
//!     .with_source(poll(Motd(SourceName::new("motd")?)))
//!     .run(nudge::runtime::shutdown::on_signal())
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! # Layers
//!
//! Each layer imports only the layers below it (`tests/layers.rs` checks this):
//!
//! 1. Contracts, pure and kube-client-free: [`model`], [`fingerprint`],
//!    [`annotations`], [`discovery`], [`stamp`], plus the shared utilities
//!    [`health`], [`rate`], [`scope`], [`config`].
//! 2. Adapters: [`sources`], [`targets`], [`webhook`], [`events`]; none imports
//!    another adapter, the engine or the runtime.
//! 3. [`engine`]: the synchronous core and its async driver.
//! 4. [`runtime`] (the [`Controller`], admin server, leader election) and
//!    [`explain`]: composition.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod annotations;
pub mod config;
pub mod discovery;
pub mod engine;
pub mod events;
pub mod explain;
pub mod fingerprint;
pub mod health;
pub mod model;
pub mod rate;
pub mod runtime;
pub mod scope;
mod small;
pub mod sources;
pub mod stamp;
pub mod targets;
pub mod webhook;

pub use config::Config;
pub use runtime::{Controller, RunError};
pub use sources::{
    ObserveContext, PollSource, Source, SourceContext, SourceError, WatchSource, poll, watch,
};
pub use targets::{KubeTarget, Target, TargetContext, TargetError};

/// The oldest Kubernetes API version nudge is built against (k8s-openapi `v1_33`).
pub const KUBERNETES_MIN_VERSION: &str = "1.33";

/// An error and its causes on one line (`outer: cause: root cause`), for logs and
/// Event notes.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        cause = inner.source();
        // kube's `Error::Api` displays its Status twice, once as a `Debug` dump
        // (`ApiError: … (Status { … })`); its source, the Status, says it once.
        if cause.is_some() && matches!(inner.downcast_ref(), Some(kube::Error::Api(_))) {
            continue;
        }
        let next = inner.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
    }
    text
}
