//! nudge rolls Kubernetes workloads when the configuration they depend on changes.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod fingerprint;
pub mod model;
