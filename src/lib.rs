//! nudge rolls Kubernetes workloads when the configuration they depend on changes.
//!
//! It watches config sources (ConfigMaps, Secrets, Consul KV, or a custom
//! [`sources::Source`]) and, when the content a workload depends on changes, writes
//! a content fingerprint into the workload's pod-template annotations, so the
//! workload controller performs an ordinary rolling update.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod annotations;
pub mod cli;
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
pub mod telemetry;
pub mod webhook;

/// The oldest Kubernetes API version nudge is built against (k8s-openapi `v1_33`).
pub const KUBERNETES_MIN_VERSION: &str = "1.33";

/// An error and its causes on one line (`outer: cause: root cause`), for logs and
/// Event notes.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let next = inner.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = inner.source();
    }
    text
}
