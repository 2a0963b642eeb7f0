//! The double's integration tests: one binary (a module per file), so the
//! dependencies' generic code is compiled and linked once, not once per file.

mod support;

mod admission;
mod batch;
mod binary;
mod controllers;
mod crd;
mod deletion;
mod kube_client;
mod replay;
mod semantics;
