//! Which snapshot a workload's template should be at (design §5e): the one
//! its sources make, the one `<prefix>/rollback-to` holds it at, or, after
//! someone else rolled it back, the one it is at; and which revision
//! `nudge rollback` goes back to. Pure: the history is read elsewhere.

use super::Snapshot;

/// What a workload's history keeps of one revision, for snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRevision {
    /// Its number.
    pub revision: u32,
    /// The snapshot its stamp wrote; `None`: it took none.
    pub snapshot: Option<Snapshot>,
    /// The pending fingerprint of the stamp that started it (design §5d):
    /// what the sources said then.
    pub config: Option<String>,
    /// Whether its rollout completed.
    pub complete: bool,
}

/// The snapshot a workload's template should be at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The one its sources make now.
    Follow,
    /// `<prefix>/rollback-to` holds it at this revision's snapshot; every
    /// other output keeps its value, and changes of the sources are held.
    Pinned {
        /// The revision.
        revision: u32,
        /// Its snapshot.
        snapshot: Snapshot,
    },
    /// `<prefix>/rollback-to` names a revision whose snapshot the history
    /// does not keep: nothing rolling is written until it is fixed.
    PinnedToUnknown {
        /// The revision named.
        revision: u32,
    },
    /// Someone else rolled the template back to this earlier revision's
    /// snapshot, and nothing changed at the sources since nudge last
    /// stamped: leave it there until a source changes.
    RolledBack {
        /// The revision the template is at.
        revision: u32,
    },
}

/// Decides which snapshot a template should be at. `template` is the
/// snapshot it uses, `wanted` the one its sources make now and `config_now`
/// the pending fingerprint of the stamp they make; `history` the revisions
/// recorded (oldest first, the rollout in flight last); `rollback_to` the
/// workload's `<prefix>/rollback-to`.
///
/// A rollback is told from drift thus: the template uses exactly the
/// snapshot of a revision of the history older than the newest, and the
/// sources make the stamp the newest revision was (its `config`). Anything
/// else that differs is drift, and the sources' snapshot is written again.
pub fn judge(
    template: &Snapshot,
    wanted: &Snapshot,
    config_now: &str,
    history: &[RecordedRevision],
    rollback_to: Option<u32>,
) -> Verdict {
    if let Some(revision) = rollback_to {
        return match history
            .iter()
            .rev()
            .find(|r| r.revision == revision)
            .and_then(|r| r.snapshot.clone())
            .filter(|snapshot| !snapshot.is_empty())
        {
            Some(snapshot) => Verdict::Pinned { revision, snapshot },
            None => Verdict::PinnedToUnknown { revision },
        };
    }
    let Some(newest) = history.last() else {
        return Verdict::Follow;
    };
    let unchanged_sources = newest.config.as_deref() == Some(config_now);
    if template.is_empty() || template == wanted || !unchanged_sources {
        return Verdict::Follow;
    }
    history[..history.len() - 1]
        .iter()
        .rev()
        .find(|r| r.snapshot.as_ref() == Some(template))
        .map_or(Verdict::Follow, |r| Verdict::RolledBack {
            revision: r.revision,
        })
}

/// Why `nudge rollback` cannot roll a workload back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RollbackError {
    /// No revision of the history took a snapshot.
    #[error(
        "no revision in its history has a snapshot to restore (snapshots: engine.snapshots and the workload's snapshot annotation)"
    )]
    NoSnapshots,
    /// The revision asked for is not in the history, or took no snapshot.
    #[error("revision {revision} has no snapshot in the history; restorable: {restorable:?}")]
    NotRestorable {
        /// The revision asked for.
        revision: u32,
        /// Those that could be restored.
        restorable: Vec<u32>,
    },
    /// No revision before the one the template runs completed.
    #[error(
        "no revision before the one the template runs completed; name one with --to-revision (restorable: {restorable:?})"
    )]
    NothingEarlier {
        /// Those that could be restored.
        restorable: Vec<u32>,
    },
}

/// The revision `nudge rollback` restores: `to` when the history keeps its
/// snapshot; without `to`, the newest revision older than the one the
/// template runs (`template`) whose rollout completed and whose snapshot
/// differs, as `kubectl rollout undo` goes to the previous revision.
pub fn choose(
    history: &[RecordedRevision],
    template: &Snapshot,
    to: Option<u32>,
) -> Result<u32, RollbackError> {
    let restorable: Vec<u32> = history
        .iter()
        .filter(|r| r.snapshot.as_ref().is_some_and(|s| !s.is_empty()))
        .map(|r| r.revision)
        .collect();
    if restorable.is_empty() {
        return Err(RollbackError::NoSnapshots);
    }
    if let Some(revision) = to {
        return if restorable.contains(&revision) {
            Ok(revision)
        } else {
            Err(RollbackError::NotRestorable {
                revision,
                restorable,
            })
        };
    }
    let running = history
        .iter()
        .rposition(|r| r.snapshot.as_ref() == Some(template))
        .unwrap_or(history.len());
    history[..running]
        .iter()
        .rev()
        .find(|r| {
            r.complete
                && r.snapshot
                    .as_ref()
                    .is_some_and(|s| !s.is_empty() && s != template)
        })
        .map(|r| r.revision)
        .ok_or(RollbackError::NothingEarlier { restorable })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::ObjectKind;
    use crate::model::KeySelection;
    use crate::snapshot::SnapshotKey;

    fn snap(fingerprint: &str) -> Snapshot {
        let mut snapshot = Snapshot::new();
        let key = SnapshotKey::new(ObjectKind::ConfigMap, "app-config", KeySelection::All);
        snapshot.insert(key, fingerprint);
        snapshot
    }

    fn rev(
        revision: u32,
        fingerprint: Option<&str>,
        config: &str,
        complete: bool,
    ) -> RecordedRevision {
        RecordedRevision {
            revision,
            snapshot: fingerprint.map(snap),
            config: Some(config.to_owned()),
            complete,
        }
    }

    fn history() -> Vec<RecordedRevision> {
        vec![
            rev(1, None, "c1", true),
            rev(2, Some("sha256-a"), "c2", true),
            rev(3, Some("sha256-b"), "c3", false),
            rev(4, Some("sha256-c"), "c4", true),
        ]
    }

    #[test]
    fn an_undo_to_an_earlier_revisions_snapshot_is_left_alone_until_a_source_changes() {
        let history = history();
        // The template went back to revision 2's copies; the sources still
        // make revision 4's stamp.
        let verdict = judge(&snap("sha256-a"), &snap("sha256-c"), "c4", &history, None);
        assert_eq!(verdict, Verdict::RolledBack { revision: 2 });
        // A source changed since: the newest content is stamped.
        assert_eq!(
            judge(&snap("sha256-a"), &snap("sha256-d"), "c5", &history, None),
            Verdict::Follow
        );
    }

    #[test]
    fn anything_else_that_differs_is_drift() {
        let history = history();
        for template in [
            Snapshot::new(),    // pointed back at the live objects
            snap("sha256-zzz"), // copies of no revision
            snap("sha256-c"),   // the newest: in sync
        ] {
            assert_eq!(
                judge(&template, &snap("sha256-c"), "c4", &history, None),
                Verdict::Follow,
                "{template:?}"
            );
        }
        assert_eq!(
            judge(&snap("sha256-a"), &snap("sha256-c"), "c4", &[], None),
            Verdict::Follow
        );
        // The newest revision's config unknown (recorded before snapshots):
        // not provably unchanged.
        let mut unrecorded = history.clone();
        unrecorded.last_mut().unwrap().config = None;
        assert_eq!(
            judge(
                &snap("sha256-a"),
                &snap("sha256-c"),
                "c4",
                &unrecorded,
                None
            ),
            Verdict::Follow
        );
    }

    #[test]
    fn rollback_to_holds_the_template_at_a_kept_revisions_snapshot() {
        let history = history();
        assert_eq!(
            judge(
                &snap("sha256-c"),
                &snap("sha256-d"),
                "c5",
                &history,
                Some(2)
            ),
            Verdict::Pinned {
                revision: 2,
                snapshot: snap("sha256-a")
            }
        );
        for unknown in [1, 9] {
            assert_eq!(
                judge(
                    &snap("sha256-c"),
                    &snap("sha256-c"),
                    "c4",
                    &history,
                    Some(unknown)
                ),
                Verdict::PinnedToUnknown { revision: unknown }
            );
        }
    }

    #[test]
    fn nudge_rollback_goes_to_the_last_completed_revision_before_the_running_one() {
        let history = history();
        // Running 4: 3 failed, so 2.
        assert_eq!(choose(&history, &snap("sha256-c"), None), Ok(2));
        // Running 2 (after an undo): nothing completed before it with a snapshot.
        assert_eq!(
            choose(&history, &snap("sha256-a"), None),
            Err(RollbackError::NothingEarlier {
                restorable: vec![2, 3, 4]
            })
        );
        assert_eq!(choose(&history, &snap("sha256-c"), Some(3)), Ok(3));
        assert_eq!(
            choose(&history, &snap("sha256-c"), Some(1)),
            Err(RollbackError::NotRestorable {
                revision: 1,
                restorable: vec![2, 3, 4]
            })
        );
        assert_eq!(
            choose(&history[..1], &Snapshot::new(), None),
            Err(RollbackError::NoSnapshots)
        );
    }
}
