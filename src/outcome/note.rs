//! The note of a rollout's outcome: the text of its Event and notification
//! (design §5c), never content (values are shortened fingerprints).

use super::history::{Outcome, Revision};

/// `config revision 4 complete in 42s: ConfigMap/ns/app (by kubectl-edit, at …,
/// version 12) changed; nudge.dev/config-hash sha256-… → sha256-…`, and for a
/// failure, the reason and the last good revision.
pub(super) fn with_changes(revision: &Revision, last_good: Option<&Revision>) -> String {
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
pub(super) fn without_changes(revision: &Revision, last_good: Option<&Revision>) -> String {
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
    use crate::outcome::history::{Change, ValueChange};

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
            snapshot: Default::default(),
        }
    }

    #[test]
    fn a_completed_rollout_names_the_change_its_author_and_the_values() {
        assert_eq!(
            with_changes(&revision(Outcome::Complete, None), None),
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
            with_changes(
                &revision(Outcome::Failed, Some("ProgressDeadlineExceeded")),
                Some(&good)
            ),
            "config revision 4 failed after 42s (ProgressDeadlineExceeded): \
             configmap/shop/app-config (by kubectl-edit, at 2026-11-25T13:02:11Z, version \
             81234) changed; nudge.dev/config-hash sha256-1b2c3d4e5f60… → sha256-9a8b7c6d5e4f…; \
             last good: config revision 3 (nudge.dev/config-hash=sha256-1b2c3d4e5f60…)"
        );
        assert!(
            with_changes(&revision(Outcome::Failed, None), None)
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
            without_changes(&ended, Some(&good)),
            "config revision 4 failed after 42s (ProgressDeadlineExceeded): its changes are \
             not known (its rollout annotation was removed or replaced before the outcome was \
             recorded); last good: config revision 3 (nudge.dev/config-hash=sha256-9a8b7c6d5e4f…)"
        );
    }
}
