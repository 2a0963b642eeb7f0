//! The core's protocol: the [`Input`]s the driver hands it and the
//! [`Effect`]s it hands back (design §5, the core).

use std::collections::BTreeSet;

use crate::copies::CopyError;
use crate::events::Notice;
use crate::model::{SourceName, Tracked, Workload, WorkloadId};
use crate::outcome::{Conclusion, Supersession};
use crate::snapshot::CopyPlan;
use crate::sources::SourceUpdate;
use crate::stamp::StampPatch;
use crate::targets::{ApplyOutcome, TargetError, WorkloadEvent};

use tokio::time::Instant;

/// What happened, as the core sees it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Input {
    /// A target reported a workload event (boxed: workloads are large).
    Workload(Box<WorkloadEvent>),
    /// A source reported an observation.
    Observation(SourceUpdate),
    /// A source was (re)started and must be told everything it tracks.
    SourceStarted(SourceName),
    /// A write requested by [`Effect::Write`] finished.
    WriteFinished {
        /// The workload written.
        id: WorkloadId,
        /// How it went.
        outcome: WriteOutcome,
    },
    /// Every target has delivered its initial listing (sent once, after the
    /// listed workloads): until then the core may not know an earlier wave of
    /// a workload, and holds every workload in a wave after the first
    /// (design §5d).
    Listed,
    /// This replica became leader (`true`) or stopped being leader.
    Leadership(bool),
    /// The namespaces matching `kubernetes.namespace_selector` are now these.
    Namespaces(BTreeSet<String>),
    /// Time passed (a [`Effect::WakeAt`] came due).
    Tick,
}

impl Input {
    /// [`Input::Workload`] of `event`.
    pub fn workload(event: WorkloadEvent) -> Self {
        Self::Workload(Box::new(event))
    }
}

/// How a stamp write ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum WriteOutcome {
    /// Written; the workload as stored afterwards.
    Applied(Box<Workload>),
    /// The workload no longer exists.
    Gone,
    /// A retryable failure (conflict, 5xx, timeout).
    Retry(TargetError),
    /// Refused for good (403, 422, …).
    Failed(TargetError),
    /// The snapshot copies the stamp names could not be made or found
    /// (design §5e): nothing was written.
    Copies(CopyError),
}

impl From<Result<ApplyOutcome, TargetError>> for WriteOutcome {
    fn from(result: Result<ApplyOutcome, TargetError>) -> Self {
        match result {
            Ok(ApplyOutcome::Applied(workload)) => Self::Applied(workload),
            Ok(ApplyOutcome::Gone) => Self::Gone,
            Err(error) if error.is_retryable() => Self::Retry(error),
            Err(error) => Self::Failed(error),
        }
    }
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Effect {
    /// Tell the reference's source to start tracking it.
    Track(Tracked),
    /// Tell the reference's source to stop tracking it.
    Untrack(Tracked),
    /// Write a stamp through the workload kind's target, then report
    /// [`Input::WriteFinished`]. Boxed: workloads are large.
    Write(Box<StampWrite>),
    /// Publish a Kubernetes Event (never waited for).
    Publish(Notice),
    /// Send [`Input::Tick`] at this time, or as soon as the inputs already
    /// queued are handled when it is not in the future (replaces any earlier
    /// request).
    WakeAt(Instant),
    /// A rollout nudge started ended: publish its outcome, then record it in
    /// the workload's history (design §5c). Leader only.
    Conclude(Box<Conclusion>),
}

/// One stamp to write.
#[derive(Debug, Clone, PartialEq)]
pub struct StampWrite {
    /// The workload as the core knows it: the current values of its outputs.
    pub workload: Workload,
    /// What to write.
    pub patch: StampPatch,
    /// The rollout in flight this stamp supersedes: its outcome is published
    /// and carried in the stamp's marker, its details from the workload's
    /// marker as the core last saw it (no read before the write).
    pub supersedes: Option<Box<Supersession>>,
    /// The snapshot copies the stamp names that the template does not use
    /// yet: made (found, for a rollback) before it is written.
    pub copies: Option<Box<Copies>>,
}

/// The snapshot copies a stamp needs before it is written (design §5e).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copies {
    /// Each copy.
    pub plans: Vec<CopyPlan>,
    /// A rollback's: its copies exist already or not at all (their content
    /// is gone), so they are checked, never made.
    pub restoring: bool,
}
