//! A Kubernetes API server double for integration tests and benchmarks.
//!
//! [`ApiServerDouble`] is a real HTTP/1.1 server on `127.0.0.1` that speaks
//! the Kubernetes REST API for namespaces, ConfigMaps, Secrets, Events (core
//! and `events.k8s.io`), Deployments, StatefulSets, DaemonSets, ReplicaSets,
//! ControllerRevisions, Jobs, CronJobs, Leases, MutatingWebhookConfigurations
//! and CustomResourceDefinitions, plus the custom resources the CRDs in it
//! declare, and writes a kubeconfig so that any client
//! (kube-rs, kubectl) can talk to it. Beside the API, what
//! kube-controller-manager does for `apps/v1` workloads in a cluster without
//! nodes runs asynchronously: ReplicaSets, ControllerRevisions and workload
//! status appear as on a real cluster. Its behaviour follows recordings of a
//! real kube-apiserver 1.34 (`tests/transcripts/`): status codes,
//! `Status` bodies, list/watch shapes, resourceVersion semantics, managed
//! fields and server-side apply conflicts.
//!
//! Tests can inspect every request ([`ApiServerDouble::requests`]) and inject
//! faults: dropped watches, failing requests, latency.
//!
//! ```no_run
//! use apiserver_double::{ApiServerDouble, RequestFilter};
//! # async fn demo() -> Result<(), apiserver_double::Error> {
//! let api = ApiServerDouble::start().await?;
//! println!("KUBECONFIG={}", api.kubeconfig_path().display());
//! api.fail_next(2, 500, RequestFilter::any().method("PATCH"));
//! api.drop_watches();
//! api.shutdown().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod admission;
mod batch;
mod body;
mod controllers;
mod crd;
mod custom;
mod faults;
mod fieldset;
mod gc;
mod handlers;
mod ids;
mod kubeconfig;
mod managed;
mod meta;
mod output;
mod patch;
mod pattern;
mod quota;
mod recorder;
mod registry;
mod request;
mod request_log;
mod resources;
mod routes;
mod schema;
mod seed;
mod selectors;
mod server;
mod ssa;
mod status;
mod store;
mod strategy;
mod structural;
mod validation;

pub use faults::RequestFilter;
pub use recorder::RecordedRequest;
pub use server::{ApiServerDouble, Config};

/// Why the double could not start or a direct call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening socket could not be bound.
    #[error("cannot listen: {0}")]
    Bind(#[source] std::io::Error),
    /// The kubeconfig file could not be written.
    #[error("cannot write kubeconfig: {0}")]
    Kubeconfig(#[source] std::io::Error),
    /// The API answered a failure to a direct call such as [`ApiServerDouble::create`].
    #[error("{code} {reason}: {message}")]
    Api {
        /// HTTP status code.
        code: u16,
        /// `Status.reason`.
        reason: String,
        /// `Status.message`.
        message: String,
    },
}
