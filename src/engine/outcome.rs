//! Publishing and recording how a rollout nudge started ended (design §5c).
//!
//! For each [`Conclusion`] of the core, one task: read the workload, and unless
//! its history already records the outcome (another replica did), publish the
//! `RolloutComplete` / `RolloutFailed` Event (and so the notification), then
//! record the revision in `<prefix>/history` and remove `<prefix>/rollout` in
//! one merge patch guarded by the resourceVersion read. Publishing comes first:
//! a crash in between publishes once more after a failover, never zero times.
//!
//! The core keeps only a rollout's number and how it ended; what the revision
//! carried (the changes, who made them, the values) is read from the marker
//! read here. When the marker no longer names the revision (someone removed
//! it, or a newer stamp replaced it before the outcome was recorded), the
//! outcome is still published and recorded, saying that its changes are not
//! known, and the history records it without them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use super::core::Conclusion;
use crate::events::{Notice, Reason};
use crate::model::Workload;
use crate::stamp::history::{self, Outcome, Revision};
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
    /// Revisions kept.
    pub(super) limit: usize,
}

/// Publishes `conclusion` (through `publish`) and records it on the workload.
pub(super) async fn record(
    target: Arc<dyn Target>,
    conclusion: Conclusion,
    recording: Recording,
    publish: impl Fn(Notice),
) {
    let id = conclusion.workload.clone();
    let mut published = false;
    for _ in 0..ATTEMPTS {
        let workload = match target.get(&id).await {
            Ok(Some(workload)) => workload,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(workload = %id, %error, "cannot read the workload to record a rollout's outcome");
                continue;
            }
        };
        let history = workload.annotations.get(&recording.history_key);
        if history::has_outcome(history.map(String::as_str), conclusion.revision.revision) {
            return;
        }
        let marker = workload.annotations.get(&recording.rollout_key);
        let (revision, known) = conclusion
            .revision
            .clone()
            .filled_from(marker.map(String::as_str));
        if !known {
            tracing::warn!(workload = %id, revision = revision.revision, "the rollout marker no longer names the revision; its outcome is recorded without its changes");
        }
        if !published {
            let past = history::parse_history(history.map(String::as_str));
            let filled = Conclusion {
                revision: revision.clone(),
                ..conclusion.clone()
            };
            publish(notice(&filled, known, history::last_good(&past)));
            published = true;
        }
        match write(&*target, &workload, &revision, &recording).await {
            Ok(_) => return,
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

/// The Event of an outcome; `known`: whether its revision's changes and
/// values were read from the marker.
pub(super) fn notice(conclusion: &Conclusion, known: bool, last_good: Option<&Revision>) -> Notice {
    let revision = &conclusion.revision;
    let outcome = revision.outcome.unwrap_or(Outcome::Complete);
    let reason = match outcome {
        Outcome::Complete => Reason::RolloutComplete,
        Outcome::Failed => Reason::RolloutFailed,
        Outcome::Superseded => Reason::RolloutSuperseded,
    };
    let text = if known {
        note(revision, last_good)
    } else {
        note_without_changes(revision, last_good)
    };
    let notice = Notice::new(conclusion.workload.clone(), reason, text);
    match &conclusion.related {
        Some(related) => notice.with_changed(vec![related.clone()]),
        None => notice,
    }
}

/// `config revision 4 complete in 42s: ConfigMap/ns/app (by kubectl-edit, at …,
/// version 12) changed; nudge.dev/config-hash sha256-… → sha256-…`, and for a
/// failure, the reason and the last good revision.
pub(super) fn note(revision: &Revision, last_good: Option<&Revision>) -> String {
    let mut text = heading(revision);
    if revision.changed.is_empty() {
        text.push_str("the workload itself changed");
    } else {
        text.push_str(&format!("{} changed", revision.changes_text()));
    }
    let values = revision.values_text();
    if !values.is_empty() {
        text.push_str(&format!("; {values}"));
    }
    text.push_str(&last_good_text(revision, last_good));
    text
}

/// `config revision 4 complete in 42s: its changes are not known (…)`: the
/// note of an outcome whose marker no longer named its revision when it was
/// recorded.
pub(super) fn note_without_changes(revision: &Revision, last_good: Option<&Revision>) -> String {
    let mut text = heading(revision);
    text.push_str(
        "its changes are not known (its rollout annotation was removed or replaced \
         before the outcome was recorded)",
    );
    text.push_str(&last_good_text(revision, last_good));
    text
}

/// `config revision 4 failed after 42s (reason): `.
fn heading(revision: &Revision) -> String {
    let took = humantime::format_duration(std::time::Duration::from_secs(
        revision.seconds.unwrap_or(0),
    ));
    let number = revision.revision;
    let mut text = match revision.outcome {
        Some(Outcome::Failed) => format!("config revision {number} failed after {took}"),
        Some(Outcome::Superseded) => format!("config revision {number} superseded after {took}"),
        _ => format!("config revision {number} complete in {took}"),
    };
    if let Some(reason) = &revision.reason {
        text.push_str(&format!(" ({reason})"));
    }
    text.push_str(": ");
    text
}

/// For a failure, `; last good: config revision 3 (key=value)` (or that none
/// is known); nothing otherwise.
fn last_good_text(revision: &Revision, last_good: Option<&Revision>) -> String {
    let mut text = String::new();
    if revision.outcome == Some(Outcome::Failed) {
        match last_good {
            Some(good) => text.push_str(&format!(
                "; last good: config revision {} ({})",
                good.revision,
                good.stamp
                    .iter()
                    .map(|v| format!("{}={}", v.key, v.after))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            None => text.push_str("; no earlier revision is known to have completed"),
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stamp::history::{Change, ValueChange};

    fn revision(outcome: Outcome, reason: Option<&str>) -> Revision {
        Revision {
            revision: 4,
            changed: vec![Change {
                reference: "configmap/shop/app-config".into(),
                version: Some("81234".into()),
                by: Some("kubectl-edit".into()),
                at: Some("2026-11-25T13:02:11Z".into()),
            }],
            stamp: vec![ValueChange {
                key: "nudge.dev/config-hash".into(),
                before: Some("sha256-1b2c3d4e5f60…".into()),
                after: "sha256-9a8b7c6d5e4f…".into(),
            }],
            outcome: Some(outcome),
            reason: reason.map(Into::into),
            ended: None,
            seconds: Some(42),
            superseded: Vec::new(),
        }
    }

    #[test]
    fn a_completed_rollout_names_the_change_its_author_and_the_values() {
        assert_eq!(
            note(&revision(Outcome::Complete, None), None),
            "config revision 4 complete in 42s: configmap/shop/app-config (by kubectl-edit, \
             at 2026-11-25T13:02:11Z, version 81234) changed; nudge.dev/config-hash \
             sha256-1b2c3d4e5f60… → sha256-9a8b7c6d5e4f…"
        );
    }

    #[test]
    fn a_failed_rollout_says_why_and_which_revision_was_last_good() {
        let mut good = revision(Outcome::Complete, None);
        good.revision = 3;
        good.stamp[0].after = "sha256-1b2c3d4e5f60…".into();
        assert_eq!(
            note(
                &revision(Outcome::Failed, Some("ProgressDeadlineExceeded")),
                Some(&good)
            ),
            "config revision 4 failed after 42s (ProgressDeadlineExceeded): \
             configmap/shop/app-config (by kubectl-edit, at 2026-11-25T13:02:11Z, version \
             81234) changed; nudge.dev/config-hash sha256-1b2c3d4e5f60… → sha256-9a8b7c6d5e4f…; \
             last good: config revision 3 (nudge.dev/config-hash=sha256-1b2c3d4e5f60…)"
        );
        assert!(
            note(&revision(Outcome::Failed, None), None)
                .ends_with("; no earlier revision is known to have completed")
        );
    }

    #[test]
    fn an_outcome_whose_marker_is_gone_says_its_changes_are_not_known() {
        let mut ended = revision(Outcome::Failed, Some("ProgressDeadlineExceeded"));
        ended.changed.clear();
        ended.stamp.clear();
        let mut good = revision(Outcome::Complete, None);
        good.revision = 3;
        assert_eq!(
            note_without_changes(&ended, Some(&good)),
            "config revision 4 failed after 42s (ProgressDeadlineExceeded): its changes are \
             not known (its rollout annotation was removed or replaced before the outcome was \
             recorded); last good: config revision 3 (nudge.dev/config-hash=sha256-9a8b7c6d5e4f…)"
        );
    }
}
