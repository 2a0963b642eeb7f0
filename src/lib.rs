//! nudge rolls Kubernetes workloads when the configuration they depend on changes.
//!
//! It watches config sources (ConfigMaps, Secrets, Consul KV, or a custom
//! [`Source`](source::Source)) and, when the content a workload depends on changes, writes a
//! content fingerprint into the workload's pod-template annotations, so the
//! workload controller performs an ordinary rolling update.
//!
//! "design §N" in the code's comments refers to section N of `docs/design.md`,
//! the design of record in the repository.
//!
//! [`Controller`] runs everything `nudge run` runs; add custom sources and
//! targets to it, and [`cli::run`] gives an embedder's binary nudge's whole
//! command line with them. The guide below is `docs/extending.md` in the
//! repository; its examples are compiled as this crate's doc tests.
//!
#![doc = include_str!("../docs/extending.md")]
//!
//! # Public API
//!
//! The root re-exports what most embedders need; [`source`] and [`target`] hold
//! the two contracts and the types they use; [`config`] the configuration,
//! [`explain`] the `nudge explain` report. `kube` and `k8s_openapi` are
//! re-exported so an embedder's client types match nudge's. Everything else is
//! crate-private (`__private` exists for nudge's own tests and is not API).
//!
//! # Layers
//!
//! Each layer imports only the layers below it (`tests/it/layers.rs` checks this;
//! `docs/design.md` §1a says what each module owns):
//!
//! 1. Contracts, pure and kube-client-free: `model`, `fingerprint`,
//!    `annotations`, `discovery`, `stamp`, `window`, `outcome` (rollout
//!    outcomes and the config history), `delivery` (holds, windows, waves),
//!    `snapshot` (copies of a revision's config), plus the shared utilities
//!    `errors`, `health`, `rate`, `scope`, `config`, `telemetry`.
//! 2. Adapters: `sources`, `targets`, `webhook`, `events`, `copies`; none imports
//!    another adapter, the engine or the runtime.
//! 3. `engine`: the synchronous core and its async driver; [`explain`]: the
//!    same decisions, read once for one workload.
//! 4. `runtime`: the [`Controller`], admin server, leader election.
//! 5. [`cli`]: the command line over the runtime.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Internals: crate-private, so they can change without breaking embedders.
mod annotations;
mod copies;
mod delivery;
mod discovery;
mod engine;
mod errors;
mod events;
mod fingerprint;
mod health;
mod model;
mod outcome;
mod rate;
mod runtime;
mod scope;
mod small;
mod snapshot;
mod sources;
mod stamp;
mod targets;
mod telemetry;
mod webhook;

// The public API.
pub mod cli;
pub mod config;
pub mod explain;
mod window;

pub use config::Config;
pub use runtime::{Controller, RunError, kube_client};

/// The source contract: what a custom source implements and the types it
/// works with. See [`Source`](source::Source) for the guarantees every source
/// gives.
pub mod source {
    pub use crate::fingerprint::{Fingerprint, Observation};
    pub use crate::model::{
        Algorithm, NameError, PodSpecRule, Reference, Scope, SourceName, Tracked,
        default_reference_check,
    };
    pub use crate::sources::{
        Interest, ObservationStream, ObserveContext, PollSource, Provenance, Source, SourceContext,
        SourceError, WatchSource, poll, watch,
    };
}

/// The target contract: what a custom target implements (a workload kind
/// nudge stamps) and the types it works with.
pub mod target {
    pub use crate::model::{
        TemplatePath, TemplatePathError, Workload, WorkloadError, WorkloadId, WorkloadKind,
    };
    pub use crate::stamp::StampPatch;
    pub use crate::targets::{
        ApplyOutcome, KubeTarget, Target, TargetContext, TargetError, TargetSettings, WatchScope,
        WorkloadEvent,
    };
}

/// `#[async_trait]`, which the source and target traits are written with.
pub use async_trait::async_trait;

/// The figment crate nudge's configuration is built with: merge providers of
/// your own into [`Config::providers`].
pub use figment;

/// The kube crate nudge is built with: embedders use this one, so their
/// `kube::Client` is the type nudge takes.
pub use kube;

/// The k8s-openapi crate nudge is built with (feature `v1_33`).
pub use k8s_openapi;

/// Shutting down on SIGTERM or SIGINT.
pub mod shutdown {
    pub use crate::runtime::shutdown::on_signal;
    /// What [`Controller::run`](crate::Controller::run) stops on (tokio-util's).
    pub use tokio_util::sync::CancellationToken;
}

/// Helpers for the tests of code built on nudge (cargo feature `testing`,
/// for `[dev-dependencies]`): drive a custom source without the engine
/// ([`harness`](testing::harness), with an
/// [`observe_context`](testing::observe_context) for its `observe`), and
/// build a [`Controller`] that reads no cluster to check configuration
/// ([`offline_client`](testing::offline_client)).
#[cfg(feature = "testing")]
pub mod testing {
    pub use crate::runtime::offline_client;
    pub use crate::sources::{SourceHarness, SourceUpdate, harness};

    /// The context a source observes with, keyed with a fresh installation
    /// key, as nudge hands it to [`Source::observe`](crate::source::Source::observe).
    pub fn observe_context() -> crate::source::ObserveContext {
        crate::sources::ObserveContext::new(crate::fingerprint::FingerprintKey::generate())
    }

    /// What a source tracks for the reference `name` (an object in
    /// `namespace` for a namespaced source, else a key) of `source`, read
    /// with `algorithm`, as the engine asks a source to track it.
    pub fn tracked(
        source: crate::source::SourceName,
        namespace: Option<&str>,
        name: &str,
        algorithm: crate::source::Algorithm,
    ) -> crate::source::Tracked {
        let reference = match namespace {
            Some(namespace) => crate::model::Reference::object(source, namespace, name),
            None => crate::model::Reference::key(source, name),
        };
        crate::model::Tracked::new(reference, algorithm)
    }
}

/// The oldest Kubernetes API version nudge is built against (k8s-openapi `v1_33`).
pub(crate) const KUBERNETES_MIN_VERSION: &str = "1.33";

/// Internals for nudge's own tests, benchmark and fuzz targets. **Not public API**:
/// anything here may change in any release.
#[doc(hidden)]
pub mod __private {
    #![allow(missing_docs)]
    pub mod annotations {
        pub use crate::annotations::*;
    }
    pub mod copies {
        pub use crate::copies::*;
    }
    pub mod discovery {
        pub use crate::discovery::*;
    }
    pub mod engine {
        pub use crate::engine::*;
    }
    pub mod events {
        pub use crate::events::*;
    }
    pub mod fingerprint {
        pub use crate::fingerprint::*;
    }
    pub mod health {
        pub use crate::health::*;
    }
    pub mod model {
        pub use crate::model::*;
    }
    pub mod rate {
        pub use crate::rate::*;
    }
    pub mod runtime {
        pub use crate::runtime::*;
    }
    pub mod scope {
        pub use crate::scope::*;
    }
    pub mod snapshot {
        pub use crate::snapshot::*;
    }
    pub mod sources {
        pub use crate::sources::*;
    }
    pub mod stamp {
        pub use crate::stamp::*;
    }
    pub mod targets {
        pub use crate::targets::*;
    }
    pub mod webhook {
        pub use crate::webhook::*;
    }
    pub use crate::errors::error_chain;

    /// Crate-private functions and methods nudge's tests call.
    pub mod crate_fns {
        use crate::fingerprint::{FingerprintError, FingerprintKey};
        use crate::model::{
            Algorithm, KeySelection, Reference, Rollout, SourceName, Tracked, Workload, WorkloadId,
            WorkloadKind,
        };

        /// `FingerprintKey::new`.
        pub fn fingerprint_key(bytes: Vec<u8>) -> Result<FingerprintKey, FingerprintError> {
            FingerprintKey::new(bytes)
        }

        /// `WorkloadKind::deployment`.
        pub fn deployment() -> WorkloadKind {
            WorkloadKind::deployment()
        }

        /// `Reference::with_keys`.
        pub fn with_keys(reference: Reference, keys: KeySelection) -> Reference {
            reference.with_keys(keys)
        }

        /// `Reference::object`.
        pub fn object(source: SourceName, namespace: &str, name: &str) -> Reference {
            Reference::object(source, namespace, name)
        }

        /// `Reference::key`.
        pub fn key(source: SourceName, name: &str) -> Reference {
            Reference::key(source, name)
        }

        /// `Tracked::new`.
        pub fn tracked(reference: Reference, algorithm: Algorithm) -> Tracked {
            Tracked::new(reference, algorithm)
        }

        /// A workload with what the fuzz targets vary (`Workload` is
        /// `#[non_exhaustive]`, its rollout fields crate-private).
        pub fn workload(
            id: WorkloadId,
            annotations: std::collections::BTreeMap<String, String>,
            template: k8s_openapi::api::core::v1::PodTemplateSpec,
            rollout: Rollout,
            ordered_pods: bool,
        ) -> Workload {
            Workload {
                id,
                annotations,
                template,
                rollout,
                ordered_pods,
                resource_version: None,
                uid: None,
                controller: None,
            }
        }

        /// The field names of `kind`'s template path (`spec`, `template`).
        pub fn template_segments(kind: &WorkloadKind) -> Vec<&str> {
            kind.template_path().segments().collect()
        }

        /// `Reference::canonical_id`.
        pub fn canonical_id(reference: &Reference) -> String {
            reference.canonical_id()
        }
    }
}
