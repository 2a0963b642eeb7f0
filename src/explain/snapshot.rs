//! What `nudge explain` says of a workload's snapshots (design §5e): the
//! copies its template names, the snapshot of each revision of its history
//! and whether it can be restored, and the hold `rollback-to` or someone
//! else's rollback puts on its sources' changes, in the controller's words.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use serde::Serialize;

use crate::annotations::{AnnotationScheme, Dependencies};
use crate::delivery::Hold;
use crate::fingerprint::ObjectKind;
use crate::model::{Output, Workload};
use crate::outcome::history::{self, Revision};
use crate::snapshot::{self, Snapshot, Verdict};
use crate::stamp::Decision;

/// Characters kept of a fingerprint: `sha256-` and 12 hex digits.
const SHOWN: usize = 19;

/// A workload's snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotReport {
    /// The copies its pod template names now (empty: the live objects).
    pub copies: Vec<CopyReport>,
    /// `<prefix>/rollback-to`: the revision it is held at.
    pub rollback_to: Option<u32>,
    /// Each revision of its history (and the rollout in flight) that took a
    /// snapshot, oldest first.
    pub revisions: Vec<RevisionCopies>,
}

/// One copy: what it copies and holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CopyReport {
    /// The object and keys copied (`configmap/app-config`, `secret/db[password]`).
    pub object: String,
    /// The copy's name.
    pub copy: String,
    /// The fingerprint of what it holds, shortened.
    pub fingerprint: String,
    /// Whether the copy exists.
    pub exists: bool,
}

/// The snapshot one revision took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RevisionCopies {
    /// The revision.
    pub revision: u32,
    /// A rollback's: the revision it restored.
    pub restores: Option<u32>,
    /// Its copies.
    pub copies: Vec<CopyReport>,
    /// Whether `nudge rollback --to-revision` can restore it: every copy exists.
    pub restorable: bool,
}

impl SnapshotReport {
    /// Lines for the table: the copies the template names, and where
    /// `rollback-to` holds it.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![if self.copies.is_empty() {
            "snapshot: none yet (the template names the live objects)".to_owned()
        } else {
            format!("snapshot: {}", copies_text(&self.copies))
        }];
        if let Some(revision) = self.rollback_to {
            lines.push(format!(
                "rollback-to: held at revision {revision}'s snapshot"
            ));
        }
        lines
    }

    /// The line of revision `revision` for the history table.
    pub fn revision_line(&self, revision: u32) -> Option<String> {
        let taken = self.revisions.iter().find(|r| r.revision == revision)?;
        let mut line = format!("snapshot: {}", copies_text(&taken.copies));
        if let Some(restored) = taken.restores {
            let _ = write!(line, "; restores revision {restored}");
        }
        line.push_str(if taken.restorable {
            " (restorable)"
        } else {
            " (not restorable: a copy is gone)"
        });
        Some(line)
    }
}

fn copies_text(copies: &[CopyReport]) -> String {
    let shown: Vec<String> = copies
        .iter()
        .map(|c| {
            let gone = if c.exists { "" } else { ", missing" };
            format!("{} → {} ({}{gone})", c.object, c.copy, c.fingerprint)
        })
        .collect();
    shown.join(", ")
}

/// The report of `workload`'s snapshots (its template settled, see
/// `stamp::settle_snapshots`), when it has a snapshot output; `existing`: the
/// copies that exist in its namespace.
pub(super) fn snapshot_report(
    workload: &Workload,
    deps: &Dependencies,
    scheme: &AnnotationScheme,
    existing: &BTreeSet<(ObjectKind, String)>,
) -> Option<SnapshotReport> {
    let output = snapshot_output(deps)?;
    let current = current(workload, output);
    let copies = copy_reports(workload, &current, existing);
    let revisions = recorded(workload, scheme)
        .into_iter()
        .filter_map(|revision| {
            let taken = revision.snapshot.snapshot()?;
            let copies = copy_reports(workload, &taken, existing);
            Some(RevisionCopies {
                revision: revision.revision,
                restores: revision.snapshot.restores,
                restorable: !copies.is_empty() && copies.iter().all(|c| c.exists),
                copies,
            })
        })
        .collect();
    Some(SnapshotReport {
        copies,
        rollback_to: deps.snapshot.rollback_to,
        revisions,
    })
}

/// The hold a workload's snapshot puts on its sources' rolling change, as the
/// controller judges it (`snapshot::judge`): `rollback-to` holding it at a
/// revision it is already at (or one the history does not keep), or someone
/// else's rollback. A template `rollback-to` has not reached yet is not
/// held: the controller moves it there.
pub(super) fn snapshot_hold(
    workload: &Workload,
    deps: &Dependencies,
    decision: &Decision,
    scheme: &AnnotationScheme,
) -> Option<Hold> {
    let output = snapshot_output(deps)?;
    let wanted = Snapshot::parse(decision.desired.values.get(output)?).unwrap_or_default();
    let template = current(workload, output);
    let read = |key: String| workload.annotations.get(&key).cloned();
    let history = history::recorded_snapshots(
        read(scheme.history()).as_deref(),
        read(scheme.rollout()).as_deref(),
    );
    let verdict = snapshot::judge(
        &template,
        &wanted,
        &decision.desired.pending_fingerprint(),
        &history,
        deps.snapshot.rollback_to,
    );
    match verdict {
        Verdict::Follow => None,
        Verdict::Pinned { revision, snapshot } => {
            (snapshot == template).then_some(Hold::Rollback {
                revision,
                kept: true,
            })
        }
        Verdict::PinnedToUnknown { revision } => Some(Hold::Rollback {
            revision,
            kept: false,
        }),
        Verdict::RolledBack { revision } => Some(Hold::RolledBack { revision }),
    }
}

fn snapshot_output(deps: &Dependencies) -> Option<&Output> {
    deps.stamps
        .iter()
        .map(|spec| &spec.output)
        .find(|output| matches!(output, Output::Snapshots(_)))
}

/// The snapshot `workload`'s (settled) template uses.
fn current(workload: &Workload, output: &Output) -> Snapshot {
    crate::stamp::current(workload, output)
        .and_then(|value| Snapshot::parse(&value).ok())
        .unwrap_or_default()
}

/// The revisions of `workload`'s history, and the rollout in flight.
fn recorded(workload: &Workload, scheme: &AnnotationScheme) -> Vec<Revision> {
    let read = |key: String| workload.annotations.get(&key).cloned();
    let mut revisions = history::parse_history(read(scheme.history()).as_deref());
    if let Some(in_flight) = read(scheme.rollout()).and_then(|m| Revision::parse(&m))
        && revisions
            .last()
            .is_none_or(|r| r.revision < in_flight.revision)
    {
        revisions.push(in_flight);
    }
    revisions
}

fn copy_reports(
    workload: &Workload,
    taken: &Snapshot,
    existing: &BTreeSet<(ObjectKind, String)>,
) -> Vec<CopyReport> {
    taken
        .copies(&workload.id)
        .map(|(key, copy)| CopyReport {
            object: key.to_string(),
            exists: existing.contains(&(key.kind, copy.clone())),
            fingerprint: crate::errors::excerpt(taken.get(key).unwrap_or_default(), SHOWN),
            copy,
        })
        .collect()
}
