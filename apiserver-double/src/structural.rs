//! Structural schemas of CustomResourceDefinitions (placeholder).

/// A structural schema node.
#[derive(Debug, Default)]
pub(crate) struct Structural {}
