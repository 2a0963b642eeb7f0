//! The snapshot annotations (design §5e): `<prefix>/snapshot` (whether the
//! workload takes snapshots, with `engine.snapshots`) and `<prefix>/rollback-to`
//! (the config revision whose snapshot its pod template is held at).

use std::collections::BTreeSet;

use super::AnnotationError;
use super::grammar::{excerpt, parse_bool};
use super::parser::Parser;
use super::scheme::ROLLBACK_TO;
use crate::discovery;
use crate::fingerprint::{Algorithm, ObjectKind};
use crate::model::{Combine, Input, Name, Origin, Output, Reference, StampSpec, Tracked};
use crate::snapshot::SnapshotMode;

/// What a workload's annotations say about snapshots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotChoice {
    /// Whether the workload takes snapshots: `engine.snapshots`, its
    /// `<prefix>/snapshot`, and its kind (never a Job).
    pub wanted: bool,
    /// `<prefix>/rollback-to`, when set and valid: the revision of its config
    /// history whose snapshot the pod template is held at.
    pub rollback_to: Option<u32>,
}

impl Parser<'_> {
    /// `<prefix>/snapshot` or `<prefix>/rollback-to`.
    pub(super) fn snapshot_annotation(
        &mut self,
        key: &str,
        name: &str,
        value: &str,
    ) -> Result<(), AnnotationError> {
        if name == ROLLBACK_TO {
            let revision = parse_revision(key, value)?;
            self.snapshot.rollback_to = Some((key.to_owned(), revision));
        } else {
            self.snapshot.asked = Some((key.to_owned(), parse_bool(key, value)?));
        }
        Ok(())
    }

    /// Decides whether the workload takes snapshots; a request nudge cannot
    /// honour is reported (and so is a rollback without snapshots to take it
    /// back to), never silently ignored.
    pub(super) fn snapshot_choice(&mut self) {
        let asked = self.snapshot.asked.take();
        let is_job = self.workload.id.kind.has_immutable_template();
        let wanted = match (self.scheme.snapshots, &asked) {
            (SnapshotMode::Off, _) | (_, Some((_, false))) => false,
            (SnapshotMode::OptIn, None) => false,
            (SnapshotMode::All, None) => !is_job,
            (_, Some((_, true))) => !is_job,
        };
        if let Some((key, true)) = &asked
            && !wanted
        {
            let instead = if is_job {
                "a Job's pod template cannot change: nudge recreates the Job, and its snapshots would go with the old one"
            } else {
                "snapshots are off in this installation (engine.snapshots)"
            };
            self.unsupported(key, "true", instead);
        }
        let rollback_to = self.snapshot.rollback_to.take();
        if let Some((key, revision)) = &rollback_to
            && !wanted
        {
            let value = revision.to_string();
            let instead = "a rollback restores a snapshot, and this workload takes none (see engine.snapshots and the snapshot annotation)";
            self.unsupported(key, &value, instead);
        }
        self.deps.snapshot = SnapshotChoice {
            wanted,
            rollback_to: rollback_to.filter(|_| wanted).map(|(_, revision)| revision),
        };
        let names_copies = self
            .copies
            .as_ref()
            .is_some_and(|c| !c.claimed().is_empty());
        if wanted || names_copies {
            let spec = self.snapshot_spec(wanted);
            self.deps.stamps.push(spec);
        }
    }

    /// The snapshot output (design §5e): the objects the pod template
    /// references (copies counted as what they copy) that the workload's
    /// other outputs track, each with the keys the template uses. A workload
    /// that takes no snapshots but whose template names copies gets one
    /// with no input: its value copies nothing, and the next write points
    /// the template back at the live objects.
    fn snapshot_spec(&self, wanted: bool) -> StampSpec {
        let namespace = self.namespace();
        let tracked: BTreeSet<(ObjectKind, &Name)> = self
            .deps
            .stamps
            .iter()
            .flat_map(|spec| &spec.inputs)
            .map(|input| &input.tracked.reference)
            .filter(|reference| reference.namespace.as_deref() == Some(namespace))
            .filter_map(|reference| {
                ObjectKind::of_source(&reference.source).map(|kind| (kind, &reference.name))
            })
            .collect();
        let mut inputs = Vec::new();
        let mut origins = Vec::new();
        let found = if wanted {
            self.discover(discovery::native)
        } else {
            Vec::new()
        };
        for object in found {
            if !tracked.contains(&(object.kind, &Name::from(object.name.as_str()))) {
                continue;
            }
            let reference =
                Reference::object(object.kind.source(), namespace, object.name.as_str())
                    .with_keys(object.keys);
            for origin in object.origins {
                origins.push((reference.clone(), Origin::Discovered(origin)));
            }
            inputs.push(Input {
                tracked: Tracked::new(reference, Algorithm::Native),
                optional: object.optional,
            });
        }
        inputs.sort();
        StampSpec {
            output: Output::Snapshots(self.scheme.snapshots()),
            combine: Combine::Snapshot,
            inputs,
            origins,
        }
    }

    fn unsupported(&mut self, key: &str, value: &str, instead: &'static str) {
        self.deps.errors.push(AnnotationError::Unsupported {
            key: key.to_owned(),
            value: excerpt(value),
            instead,
        });
    }
}

/// A revision number: 1, 2, … (what the history counts).
fn parse_revision(key: &str, value: &str) -> Result<u32, AnnotationError> {
    match value.parse::<u32>() {
        Ok(revision) if revision > 0 && !value.starts_with('+') => Ok(revision),
        _ => Err(AnnotationError::InvalidValue {
            key: key.to_owned(),
            value: excerpt(value),
            expected: "a revision number of the workload's config history (1, 2, …)",
        }),
    }
}
