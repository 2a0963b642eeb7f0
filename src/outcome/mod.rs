//! How the rollouts nudge starts end, and what is kept and said about them
//! (design §5c): the one home of outcomes, pure.
//!
//! - [`history`]: what a revision records (its changes, who made them, the
//!   values before and after, how it ended), the `<prefix>/rollout` marker
//!   and the `<prefix>/history` annotation that keep it on the workload.
//! - [`Conclusion`]: a rollout's end as the engine core concludes it, and
//!   [`Supersession`], the end of one that a newer stamp replaces.
//! - [`ReadBack`]: a conclusion with what its marker still tells of it, and
//!   its note, the text of the outcome's Event and notification.
//!
//! No I/O here: the engine's driver reads the workload, publishes and
//! records (`engine/driver/recording.rs`); `nudge explain` reads the same
//! annotations with [`history`]. Layer 1: it imports the contracts (`model`,
//! `stamp`, `fingerprint`, `errors`), never the engine or `explain`.

pub mod history;
mod note;

use crate::model::{Output, Reference, WorkloadId};
use crate::stamp::StampPatch;
use history::Revision;

/// A rollout's end, for the driver to publish and record.
#[derive(Debug, Clone, PartialEq)]
pub struct Conclusion {
    /// The workload.
    pub workload: WorkloadId,
    /// The revision's number, outcome, reason, end and duration; its changes
    /// and values are read from the workload's marker when it is recorded
    /// ([`Conclusion::read_back`]).
    pub revision: Revision,
    /// The first reference whose change it carried, when known.
    pub related: Option<Reference>,
}

impl Conclusion {
    /// This conclusion with its revision's changes and values read from
    /// `marker`, the workload's `<prefix>/rollout` ([`Revision::filled_from`]).
    pub fn read_back(self, marker: Option<&str>) -> ReadBack {
        let (revision, known) = self.revision.filled_from(marker);
        ReadBack {
            conclusion: Self { revision, ..self },
            known,
        }
    }
}

/// A [`Conclusion`] whose revision was read back from the workload's marker.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadBack {
    /// The conclusion, its revision filled when `known`.
    pub conclusion: Conclusion,
    /// Whether the marker still named the revision: when not (someone removed
    /// it, or a newer stamp replaced it before the outcome was recorded), its
    /// changes are not known and its note says so.
    pub known: bool,
}

impl ReadBack {
    /// The note of its Event and notification: `config revision 4 complete in
    /// 42s: ConfigMap/ns/app (by kubectl-edit, …) changed; …`, and for a
    /// failure, the reason and `last_good`, the newest revision that completed.
    pub fn note(&self, last_good: Option<&Revision>) -> String {
        let revision = &self.conclusion.revision;
        if self.known {
            note::with_changes(revision, last_good)
        } else {
            note::without_changes(revision, last_good)
        }
    }
}

/// The rollout a stamp supersedes: the driver reads its revision from the
/// workload's marker before the stamp replaces it, publishes its outcome and
/// carries it in the stamp's own marker ([`Supersession::carry`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Supersession {
    /// The superseded rollout's end, as [`Conclusion`]s are.
    pub conclusion: Conclusion,
    /// The stamp's marker (`<prefix>/rollout`), where it is carried.
    pub marker: Output,
    /// How many revisions a marker carries at most (the history's length).
    pub limit: usize,
}

impl Supersession {
    /// Carries the superseded revision, its details read from `marker` (the
    /// workload's `<prefix>/rollout` as stored before the stamp), into the
    /// stamp's marker in `patch`, with those it carried in turn; the
    /// superseded conclusion as read back, to publish.
    pub fn carry(self, marker: Option<&str>, patch: &mut StampPatch) -> ReadBack {
        let Supersession {
            conclusion,
            marker: key,
            limit,
        } = self;
        let read = conclusion.read_back(marker);
        let mut ended = read.conclusion.revision.clone();
        let mut carried = std::mem::take(&mut ended.superseded);
        carried.push(ended);
        let excess = carried.len().saturating_sub(limit);
        carried.drain(..excess);
        if let Some(next) = patch.values.get_mut(&key) {
            match Revision::parse(next) {
                Some(mut revision) => {
                    revision.superseded = carried;
                    *next = revision.to_json();
                }
                None => tracing::warn!("a stamp's own rollout marker did not read back"),
            }
        }
        read
    }
}
