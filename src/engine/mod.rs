//! The engine core: what each workload depends on, what its stamp should be, and
//! when it may be written (design §5).
//!
//! The engine is state-based, not event-based: for each workload it computes the
//! desired stamp from the current source state ([`desired`]) and patches only when
//! that differs from what is on the workload ([`diff`]). A restart therefore restarts
//! nothing, and duplicated or replayed events are harmless.
//!
//! Everything here is plain data and functions, with no Kubernetes client or network
//! types in its signatures:
//!
//! - [`graph`]: the [`DependencyGraph`] from workloads to the [`Tracked`] items they
//!   depend on and back; it says when a source must start or may stop watching.
//! - [`debounce`]: the [`Debouncer`], one stamp per burst of changes with a ceiling.
//! - [`pacing`]: the global [`TokenBucket`] and the per-workload [`MinInterval`].
//! - [`schedule`]: the [`Scheduler`] task that joins debounce and pacing and emits
//!   the workloads due for evaluation.
//! - [`runtime`]: the [`Engine`] task that wires sources, targets and the above.
//!
//! [`Tracked`]: crate::model::Tracked

pub mod debounce;
pub mod graph;
pub mod pacing;
pub mod runtime;
pub mod schedule;

pub use debounce::Debouncer;
pub use graph::{DependencyGraph, GraphDelta};
pub use pacing::{MinInterval, PacingError, TokenBucket};
pub use runtime::{Engine, EngineError};
pub use schedule::{Scheduler, SchedulerParts, SchedulerTask};
