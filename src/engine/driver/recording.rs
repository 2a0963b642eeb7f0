//! Publishing and recording how a rollout nudge started ended (design §5c):
//! the driver's I/O around the pure [`crate::outcome`].
//!
//! For each [`Conclusion`] of the core, one task: take the workload as the
//! watch delivered it when the rollout ended (read it only when the core had
//! no such copy: an end by nudge's own deadline, a new leader's conclusions),
//! and unless its history already records the outcome (another replica did),
//! publish the `RolloutComplete` / `RolloutFailed` Event (and so the
//! notification), then record the revision in `<prefix>/history` and remove
//! `<prefix>/rollout` in one merge patch guarded by that copy's
//! resourceVersion; when the workload moved on since (409), read it and try
//! again. Publishing comes first: a crash in between publishes once more
//! after a failover, never zero times.
//!
//! The conclusion carries only a rollout's number and how it ended; what the
//! revision carried (the changes, who made them, the values) is read from the
//! copy's marker. When the marker no longer names the revision (someone
//! removed it, or a newer stamp replaced it before the outcome was recorded),
//! the outcome is still published and recorded, saying that its changes are
//! not known, and the history records it without them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use crate::annotations::AnnotationScheme;
use crate::copies::Copier;
use crate::events::{Notice, Reason};
use crate::fingerprint::ObjectKind;
use crate::model::Workload;
use crate::outcome::history::{self, Outcome, Revision};
use crate::outcome::{Conclusion, ReadBack};
use crate::snapshot::Snapshot;
use crate::targets::{Target, TargetError};

/// Attempts at recording one outcome when the workload keeps moving.
const ATTEMPTS: usize = 5;

/// Where outcomes are kept on workloads.
#[derive(Debug, Clone)]
pub(super) struct Recording {
    /// `<prefix>/rollout`.
    pub(super) rollout_key: String,
    /// `<prefix>/history`.
    pub(super) history_key: String,
    /// `<prefix>/snapshots`, on the pod template.
    pub(super) snapshots_key: String,
    /// Revisions kept.
    pub(super) limit: usize,
    /// Deletes the snapshot copies of revisions the history no longer keeps
    /// (design §5e); `None` with snapshots off.
    pub(super) copier: Option<Copier>,
}

impl Recording {
    /// Under `scheme`'s names, keeping `limit` revisions (and their copies,
    /// pruned with `copier`).
    pub(super) fn new(scheme: &AnnotationScheme, limit: usize, copier: Option<Copier>) -> Self {
        Self {
            rollout_key: scheme.rollout(),
            history_key: scheme.history(),
            snapshots_key: scheme.snapshots(),
            limit,
            copier,
        }
    }
}

/// Publishes `conclusion` (through `publish`) and records it on the workload.
pub(super) async fn record(
    target: Arc<dyn Target>,
    mut conclusion: Conclusion,
    recording: Recording,
    publish: impl Fn(Notice),
) {
    let id = conclusion.workload.clone();
    let mut published = false;
    let mut stored = conclusion.stored.take();
    for _ in 0..ATTEMPTS {
        let workload = match stored.take() {
            Some(workload) => *workload,
            None => match target.get(&id).await {
                Ok(Some(workload)) => workload,
                Ok(None) => return,
                Err(error) => {
                    tracing::warn!(workload = %id, %error, "cannot read the workload to record a rollout's outcome");
                    continue;
                }
            },
        };
        let history = workload.annotations.get(&recording.history_key);
        if history::has_outcome(history.map(String::as_str), conclusion.revision.revision) {
            return;
        }
        let marker = workload.annotations.get(&recording.rollout_key);
        let read = conclusion.clone().read_back(marker.map(String::as_str));
        if !read.known {
            tracing::warn!(workload = %id, revision = read.conclusion.revision.revision, "the rollout marker no longer names the revision; its outcome is recorded without its changes");
        }
        if !published {
            let past = history::parse_history(history.map(String::as_str));
            publish(notice(&read, history::last_good(&past)));
            published = true;
        }
        let revision = &read.conclusion.revision;
        match write(&*target, &workload, revision, &recording).await {
            Ok(_) => {
                prune(&workload, revision, &recording).await;
                return;
            }
            Err(TargetError::Conflict { .. }) => continue,
            Err(error) => {
                tracing::warn!(workload = %id, %error, "cannot record a rollout's outcome in the workload's history");
                return;
            }
        }
    }
    tracing::warn!(workload = %id, "the workload kept changing; its rollout's outcome is not recorded");
}

/// One merge patch: the revision into the history, the marker out (when it
/// still names this revision: a newer stamp may have replaced it).
async fn write(
    target: &dyn Target,
    workload: &Workload,
    revision: &Revision,
    recording: &Recording,
) -> Result<bool, TargetError> {
    let mut ended = revision.clone();
    // The core dates what it concludes; this is for a revision it did not.
    ended
        .ended
        .get_or_insert_with(|| Timestamp::now().to_string());
    let history = workload
        .annotations
        .get(&recording.history_key)
        .map(String::as_str);
    let mut annotations = BTreeMap::new();
    annotations.insert(
        recording.history_key.clone(),
        Some(history::recorded(history, ended, recording.limit)),
    );
    let marker = workload
        .annotations
        .get(&recording.rollout_key)
        .and_then(|m| Revision::parse(m));
    if marker.is_some_and(|m| m.revision == revision.revision) {
        annotations.insert(recording.rollout_key.clone(), None);
    }
    target.annotate(workload, &annotations).await
}

/// Deletes the snapshot copies of the revisions that recording `revision`
/// on `workload` (as read before) dropped from its history, unless a
/// revision still kept, the rollout in flight or the template itself names
/// them (design §5e).
async fn prune(workload: &Workload, revision: &Revision, recording: &Recording) {
    let Some(copier) = &recording.copier else {
        return;
    };
    let history = workload
        .annotations
        .get(&recording.history_key)
        .map(String::as_str);
    let now = history::recorded(history, revision.clone(), recording.limit);
    let dropped = history::dropped(history, &now);
    if dropped.iter().all(|r| r.snapshot.copies.is_none()) {
        return;
    }
    let id = &workload.id;
    let mut kept: Vec<Snapshot> = history::parse_history(Some(&now))
        .iter()
        .filter_map(|r| r.snapshot.snapshot())
        .collect();
    let marker = workload.annotations.get(&recording.rollout_key);
    kept.extend(marker.and_then(|m| Revision::parse(m)?.snapshot.snapshot()));
    let template = crate::stamp::settled_snapshot(workload, &recording.snapshots_key);
    kept.extend(template.and_then(|t| Snapshot::parse(&t).ok()));
    let kept: BTreeSet<(ObjectKind, String)> = kept
        .iter()
        .flat_map(|s| s.copies(id).map(|(key, name)| (key.kind, name)))
        .collect();
    let gone: BTreeSet<(ObjectKind, String)> = dropped
        .iter()
        .filter_map(|r| r.snapshot.snapshot())
        .flat_map(|s| {
            s.copies(id)
                .map(|(key, name)| (key.kind, name))
                .collect::<Vec<_>>()
        })
        .filter(|copy| !kept.contains(copy))
        .collect();
    let gone: Vec<(ObjectKind, String)> = gone.into_iter().collect();
    match copier.delete(&id.namespace, &gone).await {
        Ok(()) => {
            tracing::info!(workload = %id, copies = gone.len(), "pruned the snapshots of revisions the history no longer keeps")
        }
        Err(error) => {
            tracing::warn!(workload = %id, %error, "cannot prune a snapshot; deleting the workload deletes it")
        }
    }
}

/// The Event of an outcome, as read back from the workload's marker.
pub(super) fn notice(read: &ReadBack, last_good: Option<&Revision>) -> Notice {
    let conclusion = &read.conclusion;
    let reason = match conclusion.revision.outcome.unwrap_or(Outcome::Complete) {
        Outcome::Complete => Reason::RolloutComplete,
        Outcome::Failed => Reason::RolloutFailed,
        Outcome::Superseded => Reason::RolloutSuperseded,
    };
    let notice = Notice::new(conclusion.workload.clone(), reason, read.note(last_good));
    match &conclusion.related {
        Some(related) => notice.with_changed(vec![related.clone()]),
        None => notice,
    }
}
