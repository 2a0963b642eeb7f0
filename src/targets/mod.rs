//! Targets: the workload kinds nudge stamps.
//!
//! A [`Target`] reports the workloads of its kind ([`WorkloadEvent`]) and applies
//! stamps to them. Any kind with a pod template is served by one implementation,
//! [`KubeTarget`], over kube's dynamic API: the built-in kinds
//! ([`builtin_kinds`]) and kinds named in `[[targets]]` configuration alike.
//! Kinds that need more than a server-side apply implement [`Target`] themselves
//! and are registered with `Controller::with_target`.
//!
//! This layer imports only the bottom contracts (`model`, `stamp`, `health`,
//! `scope`, `annotations`), never the engine, sources, the webhook or the runtime.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::health::{WatchHealth, WatchReady};
use crate::model::{Workload, WorkloadId, WorkloadKind};
use crate::stamp::StampPatch;

mod batch;
mod dynamic;
mod object;

pub use self::batch::{CronJobTarget, JobTarget, cron_job_kind, job_kind};
pub use self::dynamic::{KubeTarget, TargetSettings, TargetSetupError, builtin_kinds};

/// One watch stream of a target: a kind, in one namespace or all of them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WatchScope {
    /// The kind watched.
    pub kind: WorkloadKind,
    /// The namespace watched; `None` for all namespaces.
    pub namespace: Option<String>,
}

impl WatchScope {
    /// Whether `id` falls within this scope.
    pub(crate) fn contains(&self, id: &WorkloadId) -> bool {
        id.kind == self.kind && self.namespace.as_ref().is_none_or(|ns| *ns == id.namespace)
    }
}

/// What a target reports about its workloads. Mirrors a watch: after a (re)list,
/// `Init`, then `InitApply` for every workload, then `InitDone`; then `Apply` and
/// `Delete` as workloads change. Workloads known before `Init` and not re-listed
/// before `InitDone` are gone.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WorkloadEvent {
    /// A (re)list of one watch stream starts.
    Init(WatchScope),
    /// A workload seen during the (re)list.
    InitApply(Workload),
    /// The (re)list of that stream finished.
    InitDone(WatchScope),
    /// A workload was created or changed.
    Apply(Workload),
    /// A workload was deleted.
    Delete(WorkloadId),
}

/// The result of applying a stamp.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ApplyOutcome {
    /// The stamp was written; this is the workload as stored afterwards.
    Applied(Box<Workload>),
    /// The workload no longer exists; nothing to do.
    Gone,
}

/// Why a stamp could not be applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The API server answered 409 Conflict; retry.
    #[error("conflict writing {id}: {message}")]
    Conflict {
        /// The workload.
        id: WorkloadId,
        /// The server's message.
        message: String,
    },
    /// A transient failure (5xx, 429, timeout, connection error); retry with backoff.
    #[error("transient error writing {id}: {message}")]
    Transient {
        /// The workload.
        id: WorkloadId,
        /// What happened.
        message: String,
    },
    /// The API server refused the request for good (403, 422, …); retrying the same
    /// request will not help.
    #[error("{id} rejected the stamp: {message}")]
    Rejected {
        /// The workload.
        id: WorkloadId,
        /// The server's message.
        message: String,
    },
}

impl TargetError {
    /// A low-cardinality label for metrics and Events.
    pub(crate) fn category(&self) -> &'static str {
        match self {
            Self::Conflict { .. } => "conflict",
            Self::Transient { .. } => "transient",
            Self::Rejected { .. } => "rejected",
        }
    }

    /// Whether retrying the same request may succeed.
    pub(crate) fn is_retryable(&self) -> bool {
        !matches!(self, Self::Rejected { .. })
    }
}

/// What a running target works with: where its events go, its part of
/// readiness, its watch-restart counter, and shutdown.
#[derive(Debug)]
pub struct TargetContext {
    events: mpsc::Sender<WorkloadEvent>,
    ready: WatchReady,
    /// Tells the engine, once, that this target has listed (see [`Self::ready`]).
    listed: mpsc::UnboundedSender<()>,
    said_listed: AtomicBool,
    health: WatchHealth,
    shutdown: CancellationToken,
}

impl TargetContext {
    /// A context sending events to `events`, and a message to `listed` the
    /// first time the target says it is [ready](Self::ready).
    pub(crate) fn new(
        events: mpsc::Sender<WorkloadEvent>,
        ready: WatchReady,
        listed: mpsc::UnboundedSender<()>,
        health: WatchHealth,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            events,
            ready,
            listed,
            said_listed: AtomicBool::new(false),
            health,
            shutdown,
        }
    }

    /// Reports one event; waits when the engine is behind (backpressure).
    /// `false` once the engine is gone: the target should return.
    pub async fn report(&self, event: WorkloadEvent) -> bool {
        self.events.send(event).await.is_ok()
    }

    /// Every watch of the target has listed once (repeat calls are harmless):
    /// call it after reporting the `InitDone` of every watch. A target whose
    /// kind is not served calls it too: it has nothing to list, and must not
    /// keep nudge unready. Until every target has, nudge stamps no workload
    /// in a wave after the first (`nudge.dev/wave`): an earlier wave it waits
    /// for may not be listed yet.
    pub fn ready(&self) {
        self.ready.listed();
        if !self.said_listed.swap(true, Ordering::Relaxed) {
            // The engine is gone when this fails: nothing waits for it.
            let _ = self.listed.send(());
        }
    }

    /// Shows `text` in `/ready` as a `note:` line (replacing this target's
    /// previous note) until [`clear_note`](Self::clear_note): e.g. that the
    /// target's kind is not served yet. Notes never make nudge unready.
    pub(crate) fn note(&self, text: impl Into<String>) {
        self.ready.note(text);
    }

    /// Removes this target's `/ready` note.
    pub(crate) fn clear_note(&self) {
        self.ready.clear_note();
    }

    /// A watch stream failed and is being restarted (`nudge_watch_restarts_total`
    /// with the kind's label).
    pub(crate) fn watch_restarted(&self, watch: &str) {
        self.health.restarted(watch);
    }

    /// Resolves when nudge shuts down.
    pub async fn cancelled(&self) {
        self.shutdown.cancelled().await;
    }
}

/// A kind of workload nudge can stamp.
///
/// # What an implementation must guarantee
///
/// - **Complete view.** `run` reports every workload of its kind in scope, with the
///   relist protocol of [`WorkloadEvent`], calls [`TargetContext::ready`] once every
///   watch has listed, and keeps reporting changes until shutdown, recovering from
///   watch errors by itself (backoff, relist).
/// - **Only nudge's fields.** `apply` writes exactly the values in the patch (and
///   the `last-updated` annotations), as field manager `nudge`, so that GitOps tools
///   and nudge never fight over other fields. Every value nudge owns is in the
///   patch: a value left out is a value nudge gives up.
/// - **Deleted means done.** Applying to a workload that no longer exists returns
///   [`ApplyOutcome::Gone`], never an error.
#[async_trait]
pub trait Target: Send + Sync + 'static {
    /// The kind this target handles.
    fn kind(&self) -> &WorkloadKind;

    /// Watches the workloads of this kind until shutdown.
    async fn run(self: Arc<Self>, ctx: TargetContext);

    /// Writes `patch` onto the workload `current` (the last version nudge saw, or
    /// the part of it the patch needs).
    async fn apply(
        &self,
        current: &Workload,
        patch: &StampPatch,
    ) -> Result<ApplyOutcome, TargetError>;

    /// Reads one workload now (for `nudge explain`, and before recording a
    /// rollout's outcome).
    async fn get(&self, id: &WorkloadId) -> Result<Option<Workload>, TargetError>;

    /// Whether `apply` takes snapshots (design §5e): points the pod template's
    /// ConfigMap and Secret references at the copies the stamp's snapshot
    /// output (`<prefix>/snapshots`) names, and back. nudge takes snapshots only of workloads whose target does, as
    /// [`KubeTarget`] does (not of Jobs, whose template a stamp replaces with
    /// the Job); the default: it does not.
    fn takes_snapshots(&self) -> bool {
        false
    }

    /// Sets (`Some`) or removes (`None`) annotations on the workload's own
    /// metadata, only if it is still at `current`'s `resourceVersion` (else
    /// [`TargetError::Conflict`]): how nudge records a rollout's outcome in its
    /// config history (design §5c). A target that keeps no history returns
    /// `Ok(false)`, the default; nudge then reports outcomes without keeping them.
    async fn annotate(
        &self,
        current: &Workload,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<bool, TargetError> {
        let _ = (current, annotations);
        Ok(false)
    }
}
