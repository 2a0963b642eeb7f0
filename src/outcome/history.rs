//! What nudge keeps on a workload about the rollouts it starts (design §5c).
//!
//! - `<prefix>/rollout`: the rollout in flight, written in the same request as
//!   the stamp that starts it, so a new leader finds it whatever happened in
//!   between. It goes when the rollout's outcome is recorded.
//! - `<prefix>/history`: the last config revisions (`[engine] history_limit`),
//!   oldest first, each with how its rollout ended; written when a rollout ends.
//!
//! Both are compact JSON on the workload's own metadata (a few hundred bytes per
//! revision): no other object, no finalizer, and the history goes with the
//! workload. Values are fingerprints shortened to a prefix, and a value that
//! could reveal a Secret (an unkeyed digest of its content, as Reloader's and
//! Wave's formats are) is kept as [`SECRET_VALUE`].

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::errors::excerpt;
use crate::fingerprint::ObjectKind;
use crate::model::{Output, Reference, Rollout, StampSpec, Workload, WorkloadKind};
use crate::stamp::StampPatch;

/// What is kept of a value that could reveal a Secret's content.
pub const SECRET_VALUE: &str = "(secret)";
/// Characters kept of a value: `sha256-` and 12 hex digits.
const SHOWN: usize = 19;

/// One config revision of a workload: what a stamp that rolled it changed, and
/// (once known) how the rollout ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// 1 for the first rollout nudge started on the workload, then +1 each.
    pub revision: u32,
    /// The references whose change the stamp carried (empty: the workload
    /// itself was new or edited).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<Change>,
    /// Each value the stamp changed.
    #[serde(default)]
    pub stamp: Vec<ValueChange>,
    /// How the rollout ended; `None` while in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// Why it failed, or what superseded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// How long it ran, in whole seconds (as followed by the replica that
    /// recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
    /// In a marker: the revisions this one superseded, each ended, recorded
    /// together with it. Never in the history itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub superseded: Vec<Revision>,
    /// Of a workload that takes snapshots (design §5e): the snapshot its
    /// stamp wrote, what the sources said then, and what a rollback restores.
    #[serde(flatten)]
    pub snapshot: RevisionSnapshot,
}

/// What a revision records of a snapshotting workload's snapshot (design
/// §5e), so that it can be restored and a rollback to it recognised.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionSnapshot {
    /// The snapshot the stamp wrote: each object copied and the fingerprint
    /// of its copy, whole (the copies' names follow from them; a Secret's is
    /// keyed, and reveals nothing). `None`: the workload took none.
    #[serde(default, rename = "snapshot", skip_serializing_if = "Option::is_none")]
    pub copies: Option<std::collections::BTreeMap<String, String>>,
    /// The pending fingerprint of the stamp (design §5d): what the sources
    /// made when it was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// A rollback's: the revision whose snapshot it restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restores: Option<u32>,
}

impl RevisionSnapshot {
    /// The snapshot recorded, when there is one that reads.
    pub(crate) fn snapshot(&self) -> Option<crate::snapshot::Snapshot> {
        let copies = self.copies.as_ref()?;
        crate::snapshot::Snapshot::parse(&serde_json::to_string(copies).ok()?).ok()
    }

    /// The record of a stamp that wrote snapshot `value` (its annotation's
    /// value), `config` being its pending fingerprint.
    pub(crate) fn written(value: &str, config: String, restores: Option<u32>) -> Self {
        Self {
            copies: serde_json::from_str(value).ok(),
            config: Some(config),
            restores,
        }
    }
}

/// A reference whose change a revision carried, and who made the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The reference (`ConfigMap/ns/app-config`, `consul:app/db/url`).
    #[serde(rename = "ref")]
    pub reference: String,
    /// The object's version when nudge saw the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Who changed it (field manager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// One value a stamp changed, before and after, each shortened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueChange {
    /// The output's key (annotation or env var name).
    pub key: String,
    /// Its value before; `None`: not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Its value after.
    pub after: String,
}

/// How a rollout nudge started ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The workload's controller finished it.
    Complete,
    /// The controller gave up, or it ran past its progress deadline.
    Failed,
    /// A newer stamp, or someone else's change to the pod template, replaced it.
    Superseded,
}

impl Outcome {
    /// `complete`, `failed`, `superseded` (metric label, history, explain).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Failed => "failed",
            Self::Superseded => "superseded",
        }
    }
}

impl Revision {
    /// The in-flight annotation's value.
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads an in-flight annotation; `None` when it is not one.
    pub(crate) fn parse(json: &str) -> Option<Self> {
        serde_json::from_str(json).ok()
    }

    /// This revision as ended (number, outcome, reason, end, duration) with
    /// the changes, values and superseded revisions it carried read from
    /// `marker`, the workload's `<prefix>/rollout`, and `true`; unchanged and
    /// `false` when the marker is gone or names another revision (removed by
    /// someone else, or replaced by a newer stamp before this one's outcome
    /// was recorded).
    pub(crate) fn filled_from(mut self, marker: Option<&str>) -> (Self, bool) {
        match marker.and_then(Self::parse) {
            Some(marked) if marked.revision == self.revision => {
                self.changed = marked.changed;
                self.stamp = marked.stamp;
                self.superseded = marked.superseded;
                self.snapshot = marked.snapshot;
                (self, true)
            }
            _ => (self, false),
        }
    }

    /// The revision a rolling stamp starts: number `number`, the changes in
    /// `changed` with who made them (`change`), and each value `patch`
    /// changes (before, from `current`; after), kept as [`kept_value`] keeps
    /// them.
    pub(crate) fn started(
        number: u32,
        changed: &BTreeSet<Reference>,
        change: impl Fn(&Reference) -> Change,
        current: &Workload,
        specs: &[StampSpec],
        patch: &StampPatch,
    ) -> Self {
        let stamp = patch
            .changed
            .iter()
            // A snapshot is recorded whole, in `snapshot`.
            .filter(|output| !matches!(output, Output::Snapshots(_)))
            .filter_map(|output| {
                let after = value_after(patch, output)?;
                let secret = reads_a_secret(specs, output);
                let before = crate::stamp::current(current, output);
                Some(ValueChange {
                    key: output.key().to_owned(),
                    before: before.map(|v| kept_value(&v, secret)),
                    after: kept_value(after, secret),
                })
            })
            .collect();
        Self {
            revision: number,
            changed: changed.iter().map(change).collect(),
            stamp,
            outcome: None,
            reason: None,
            ended: None,
            seconds: None,
            superseded: Vec::new(),
            snapshot: RevisionSnapshot::default(),
        }
    }

    /// `nudge.dev/config-hash sha256-ab12… → sha256-cd34…`, per value.
    pub(crate) fn values_text(&self) -> String {
        let shown: Vec<String> = self
            .stamp
            .iter()
            .map(|value| {
                let before = value.before.as_deref().unwrap_or("(none)");
                format!("{} {before} → {}", value.key, value.after)
            })
            .collect();
        shown.join(", ")
    }

    /// `ConfigMap/ns/app (by kubectl-edit at …, version 12)`, per change.
    pub(crate) fn changes_text(&self) -> String {
        let shown: Vec<String> = self.changed.iter().map(Change::to_string).collect();
        shown.join(", ")
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reference)?;
        let mut parts = Vec::new();
        if let Some(by) = &self.by {
            parts.push(format!("by {by}"));
        }
        if let Some(at) = &self.at {
            parts.push(format!("at {at}"));
        }
        if let Some(version) = &self.version {
            parts.push(format!("version {version}"));
        }
        if !parts.is_empty() {
            write!(f, " ({})", parts.join(", "))?;
        }
        Ok(())
    }
}

/// The value `patch` writes for `output`: kept under where it is written,
/// which for an output that adopts or keeps its state on the workload
/// ([`Output::Adopted`], [`Output::ReloaderSource`]) is not the output itself.
fn value_after<'a>(patch: &'a StampPatch, output: &Output) -> Option<&'a String> {
    patch.values.get(output).or_else(|| {
        let key = output.key().to_owned();
        [
            Output::PodTemplateAndWorkloadAnnotation(key.clone()),
            Output::WorkloadAnnotation(key),
        ]
        .iter()
        .find_map(|resolved| patch.values.get(resolved))
    })
}

/// Whether Secret content goes into `output`.
fn reads_a_secret(specs: &[StampSpec], output: &Output) -> bool {
    specs
        .iter()
        .filter(|spec| spec.output == *output)
        .flat_map(|spec| &spec.inputs)
        .any(|input| {
            ObjectKind::of_source(&input.tracked.reference.source) == Some(ObjectKind::Secret)
        })
}

/// A value as history keeps it: shortened, or [`SECRET_VALUE`] when it is not
/// one of nudge's own fingerprints (keyed for Secrets) and `secret` content
/// went into it.
pub fn kept_value(value: &str, secret: bool) -> String {
    let own = value.starts_with("sha256-") || value.starts_with("hmac-sha256-");
    if secret && !own {
        return SECRET_VALUE.to_owned();
    }
    excerpt(value, SHOWN)
}

/// The revisions of a history annotation, oldest first; empty when absent or
/// unreadable.
pub fn parse_history(json: Option<&str>) -> Vec<Revision> {
    json.and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default()
}

/// The number of the newest revision in a history annotation, without reading
/// the rest (it is read on every workload event); 0 when none.
pub fn last_revision(json: Option<&str>) -> u32 {
    const FIELD: &str = "{\"revision\":";
    let Some(json) = json else { return 0 };
    let Some(at) = json.rfind(FIELD) else {
        return 0;
    };
    let digits: String = json[at + FIELD.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap_or(0)
}

/// Whether the newest revision in a history annotation ended failed, without
/// reading the older ones (it is read on every workload event). A history
/// holds revisions only (a marker's `superseded` is never recorded), so the
/// newest is the text from the last `{"revision":` on.
pub fn last_failed(json: Option<&str>) -> bool {
    const FIELD: &str = "{\"revision\":";
    let Some(json) = json else { return false };
    let Some(at) = json.rfind(FIELD) else {
        return false;
    };
    let newest = json[at..].trim_end();
    let newest = newest.strip_suffix(']').unwrap_or(newest);
    serde_json::from_str::<Revision>(newest).is_ok_and(|r| r.outcome == Some(Outcome::Failed))
}

/// Whether a workload's rollout reads as failed from what nudge recorded
/// (design §5d): its newest recorded revision failed (`last_failed`), no
/// rollout of it is in flight (`following`: nudge follows one, or its marker
/// is on the workload), its kind has no progress deadline of its own (a
/// Deployment's status says so itself, and says so again when it recovers),
/// and its status does not say it completed since.
pub fn recorded_failure(
    kind: &WorkloadKind,
    rollout: Rollout,
    last_failed: bool,
    following: bool,
) -> bool {
    last_failed && !following && !kind.has_own_progress_deadline() && rollout != Rollout::Complete
}

/// The newest revision whose rollout completed.
pub fn last_good(history: &[Revision]) -> Option<&Revision> {
    history
        .iter()
        .rev()
        .find(|r| r.outcome == Some(Outcome::Complete))
}

/// `history` with `revision` recorded, and the revisions it superseded before
/// it (each replacing an earlier record of the same number), the oldest dropped
/// beyond `limit`; the annotation's new value.
pub fn recorded(history: Option<&str>, mut revision: Revision, limit: usize) -> String {
    let mut revisions = parse_history(history);
    let mut new = std::mem::take(&mut revision.superseded);
    new.push(revision);
    revisions.retain(|r| !new.iter().any(|n| n.revision == r.revision));
    revisions.extend(new);
    revisions.sort_by_key(|r| r.revision);
    let excess = revisions.len().saturating_sub(limit.max(1));
    revisions.drain(..excess);
    serde_json::to_string(&revisions).unwrap_or_default()
}

/// What the history (and the rollout in flight, `marker`, newest) records
/// of each revision's snapshot, oldest first: what decides whether a
/// template was rolled back, and what `nudge rollback` restores (design §5e).
pub fn recorded_snapshots(
    history: Option<&str>,
    marker: Option<&str>,
) -> Vec<crate::snapshot::RecordedRevision> {
    let mut revisions = parse_history(history);
    if let Some(in_flight) = marker.and_then(Revision::parse)
        && revisions
            .last()
            .is_none_or(|r| r.revision < in_flight.revision)
    {
        revisions.push(in_flight);
    }
    revisions
        .into_iter()
        .map(|r| crate::snapshot::RecordedRevision {
            revision: r.revision,
            snapshot: r.snapshot.snapshot(),
            config: r.snapshot.config,
            complete: r.outcome == Some(Outcome::Complete),
        })
        .collect()
}

/// The revisions `limit` drops from `history` when `revision` is recorded
/// ([`recorded`]): their snapshots' copies are pruned.
pub fn dropped(history: Option<&str>, recorded_now: &str) -> Vec<Revision> {
    let kept: Vec<u32> = parse_history(Some(recorded_now))
        .iter()
        .map(|r| r.revision)
        .collect();
    parse_history(history)
        .into_iter()
        .filter(|r| !kept.contains(&r.revision))
        .collect()
}

/// Whether `history` already records `revision` with an outcome.
pub fn has_outcome(history: Option<&str>, revision: u32) -> bool {
    parse_history(history)
        .iter()
        .any(|r| r.revision == revision && r.outcome.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revision(n: u32, outcome: Option<Outcome>) -> Revision {
        Revision {
            revision: n,
            changed: vec![Change {
                reference: "ConfigMap/ns/app".into(),
                version: Some("12".into()),
                by: Some("kubectl-edit".into()),
                at: Some("2026-11-25T12:00:00Z".into()),
            }],
            stamp: vec![ValueChange {
                key: "nudge.dev/config-hash".into(),
                before: Some("sha256-aaaaaaaaaaaa…".into()),
                after: "sha256-bbbbbbbbbbbb…".into(),
            }],
            outcome,
            reason: None,
            ended: None,
            seconds: None,
            superseded: Vec::new(),
            snapshot: RevisionSnapshot::default(),
        }
    }

    #[test]
    fn history_keeps_the_newest_revisions_up_to_the_limit() {
        let mut json = None;
        for n in 1..=12 {
            json = Some(recorded(
                json.as_deref(),
                revision(n, Some(Outcome::Complete)),
                10,
            ));
        }
        let history = parse_history(json.as_deref());
        let numbers: Vec<u32> = history.iter().map(|r| r.revision).collect();
        assert_eq!(numbers, (3..=12).collect::<Vec<_>>());
        assert_eq!(last_revision(json.as_deref()), 12);
    }

    #[test]
    fn recording_a_revision_again_replaces_it() {
        let json = recorded(None, revision(1, Some(Outcome::Complete)), 10);
        let json = recorded(Some(&json), revision(2, Some(Outcome::Failed)), 10);
        let json = recorded(Some(&json), revision(2, Some(Outcome::Failed)), 10);
        assert_eq!(parse_history(Some(&json)).len(), 2);
        assert!(has_outcome(Some(&json), 2));
        assert!(!has_outcome(Some(&json), 3));
        let history = parse_history(Some(&json));
        assert_eq!(last_good(&history).map(|r| r.revision), Some(1));
    }

    #[test]
    fn superseded_revisions_are_recorded_with_the_one_that_superseded_them() {
        let mut third = revision(3, Some(Outcome::Complete));
        third.superseded = vec![
            revision(1, Some(Outcome::Superseded)),
            revision(2, Some(Outcome::Superseded)),
        ];
        let json = recorded(None, third, 10);
        let history = parse_history(Some(&json));
        let outcomes: Vec<(u32, Option<Outcome>)> =
            history.iter().map(|r| (r.revision, r.outcome)).collect();
        assert_eq!(
            outcomes,
            [
                (1, Some(Outcome::Superseded)),
                (2, Some(Outcome::Superseded)),
                (3, Some(Outcome::Complete))
            ]
        );
        assert!(history.iter().all(|r| r.superseded.is_empty()));
    }

    #[test]
    fn the_newest_recorded_revision_says_whether_it_failed() {
        let failed = revision(2, Some(Outcome::Failed));
        let history = recorded(None, revision(1, Some(Outcome::Complete)), 10);
        assert!(!last_failed(Some(&history)));
        let history = recorded(Some(&history), failed.clone(), 10);
        assert!(last_failed(Some(&history)), "{history}");
        let history = recorded(Some(&history), revision(3, Some(Outcome::Complete)), 10);
        assert!(!last_failed(Some(&history)), "{history}");
        assert!(!last_failed(None));
        assert!(!last_failed(Some("not json")));
        // A reason that quotes the field names is only text.
        let mut tricky = failed;
        tricky.outcome = Some(Outcome::Complete);
        tricky.reason = Some(r#"{"revision":9,"outcome":"failed"}"#.into());
        assert!(!last_failed(Some(&recorded(None, tricky, 10))));
    }

    #[test]
    fn unreadable_history_reads_as_none() {
        assert!(parse_history(Some("not json")).is_empty());
        assert_eq!(last_revision(Some("[{\"revision\":x}]")), 0);
        assert_eq!(last_revision(None), 0);
        // A history nudge cannot read is replaced, not appended to garbage.
        let json = recorded(Some("{oops"), revision(1, None), 10);
        assert_eq!(parse_history(Some(&json)).len(), 1);
    }

    #[test]
    fn values_that_could_reveal_a_secret_are_not_kept() {
        // Reloader's SHA-1 of a Secret's content: brute-forceable, never kept.
        assert_eq!(
            kept_value("2fd4e1c67a2d28fced849ee1bb76e7391b93eb12", true),
            SECRET_VALUE
        );
        // nudge's own formats are keyed for Secrets: kept, shortened.
        assert_eq!(
            kept_value("hmac-sha256-0123456789abcdef0123", true),
            "hmac-sha256-0123456…"
        );
        assert_eq!(
            kept_value("2fd4e1c67a2d28fced849ee1bb76e7391b93eb12", false),
            "2fd4e1c67a2d28fced8…"
        );
    }

    #[test]
    fn the_texts_name_references_with_their_authors_and_values_before_and_after() {
        let r = revision(3, None);
        assert_eq!(
            r.changes_text(),
            "ConfigMap/ns/app (by kubectl-edit, at 2026-11-25T12:00:00Z, version 12)"
        );
        assert_eq!(
            r.values_text(),
            "nudge.dev/config-hash sha256-aaaaaaaaaaaa… → sha256-bbbbbbbbbbbb…"
        );
        assert_eq!(Revision::parse(&r.to_json()), Some(r));
    }

    #[test]
    fn an_ended_revision_takes_its_changes_from_the_marker_that_names_it() {
        let mut marked = revision(3, None);
        marked.superseded = vec![revision(2, Some(Outcome::Superseded))];
        let marker = marked.to_json();
        let ended = Revision {
            revision: 3,
            changed: Vec::new(),
            stamp: Vec::new(),
            outcome: Some(Outcome::Complete),
            reason: None,
            ended: Some("2026-11-25T12:05:00Z".into()),
            seconds: Some(42),
            superseded: Vec::new(),
            snapshot: Default::default(),
        };
        let (filled, known) = ended.clone().filled_from(Some(&marker));
        assert!(known);
        assert_eq!(filled.changed, marked.changed);
        assert_eq!(filled.stamp, marked.stamp);
        assert_eq!(filled.superseded, marked.superseded);
        assert_eq!(
            (filled.outcome, filled.seconds, filled.ended.as_deref()),
            (
                Some(Outcome::Complete),
                Some(42),
                Some("2026-11-25T12:05:00Z")
            )
        );

        // Gone, replaced by a newer revision's, or unreadable: not known.
        let newer = revision(4, None).to_json();
        for marker in [None, Some(newer.as_str()), Some("{")] {
            let (same, known) = ended.clone().filled_from(marker);
            assert!(!known, "{marker:?}");
            assert_eq!(same, ended);
        }
    }
}
