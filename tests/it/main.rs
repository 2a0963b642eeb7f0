//! nudge's integration tests, one binary (`it`) with a module per file: the
//! dependencies' generic code is compiled and linked once, not once per file.
//! Each module says what it tests; `support` is what they share. Add a test
//! file here and name it below. `cargo nextest run --test it <module>::` runs
//! one file's tests.

// examples/loadtest/ (the benchmark, run here as `loadtest_ci`) brings its own
// copy of support/consul.rs: it is an example of its own, without this crate.
#![allow(clippy::duplicate_mod)]

mod support;

mod admin;
mod adoption;
mod batch;
mod binary;
mod check_config;
mod compat;
mod configmap_secret;
mod configured;
mod consul_source;
mod consul_stamps;
mod csi;
mod custom_source;
mod delivery;
mod docs;
mod explain;
mod faults;
mod golden;
mod kubernetes_source;
mod layers;
mod leader_election;
mod loadtest_ci;
mod manifests;
mod notify;
mod pacing;
mod reloader;
mod rollouts;
mod scheduling_gates;
mod scoping;
mod snapshots;
mod targets;
mod webhook;
