//! Stamp assembly: every scheme adds [`Contribution`]s; [`Stamps`] groups them
//! per output, merges objects per reference, and builds one [`StampSpec`] per
//! output, reporting contested outputs instead.

use std::collections::{BTreeMap, BTreeSet};

use super::AnnotationError;
use crate::fingerprint::Algorithm;
use crate::model::{
    Combine, Gate, Input, KeySelection, Name, Origin, Output, Reference, SourceName, StampSpec,
    Tracked, TrackedItem,
};

/// One reference's part in one output.
pub(super) struct Contribution {
    pub(super) output: Output,
    pub(super) combine: Combine,
    /// The annotation that asked for it, for errors.
    pub(super) annotation: String,
    pub(super) tracked: Tracked,
    pub(super) optional: bool,
    pub(super) origins: Vec<Origin>,
}

/// Contributions grouped per output, objects merged per reference identity.
#[derive(Default)]
pub(super) struct Stamps(BTreeMap<Output, Group>);

pub(super) struct Group {
    combine: Combine,
    /// Set when contributions disagree on how to combine (a prefix clash).
    mixed: bool,
    /// Every contribution asked for [`Output::Adopted`].
    adopted: bool,
    annotations: BTreeSet<String>,
    objects: BTreeMap<ObjectId, Merged>,
}

/// A reference without its key selection, plus the algorithm.
type ObjectId = (SourceName, Option<Name>, Name, Algorithm, Gate);

struct Merged {
    keys: KeySelection,
    optional: bool,
    origins: BTreeSet<Origin>,
}

impl Stamps {
    /// Whether no scheme has asked for any output yet.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Makes sure `output` is written even with no inputs (e.g. `auto` with nothing
    /// to discover: the stamp is the hash of nothing).
    pub(super) fn declare(
        &mut self,
        output: &Output,
        combine: Combine,
        annotation: &str,
    ) -> &mut Group {
        // An adopted annotation and the same annotation on the pod template are
        // one output (Reloader's fallback and `auto` share `config-hash`); it is
        // adopted only when every contribution asks for adoption.
        let (key, adopted) = match output {
            Output::Adopted(k) => (Output::PodTemplateAnnotation(k.clone()), true),
            other => (other.clone(), false),
        };
        let group = self.0.entry(key).or_insert_with(|| Group {
            combine,
            mixed: false,
            adopted,
            annotations: BTreeSet::new(),
            objects: BTreeMap::new(),
        });
        group.adopted &= adopted;
        group.mixed |= group.combine != combine;
        group.annotations.insert(annotation.to_owned());
        group
    }

    pub(super) fn add(&mut self, c: Contribution) {
        let group = self.declare(&c.output, c.combine, &c.annotation);
        let TrackedItem {
            reference:
                Reference {
                    source,
                    namespace,
                    name,
                    keys,
                },
            algorithm,
            gate,
        } = c.tracked.into_inner();
        let keys = keys.into_selection();
        let merged = group
            .objects
            .entry((source, namespace, name, algorithm, gate))
            .or_insert_with(|| Merged {
                keys: keys.clone(),
                optional: c.optional,
                origins: BTreeSet::new(),
            });
        merged.keys = merged.keys.union(&keys);
        merged.optional &= c.optional;
        merged.origins.extend(c.origins);
    }

    /// One spec per output; contested outputs become errors instead.
    pub(super) fn build(self, errors: &mut Vec<AnnotationError>) -> Vec<StampSpec> {
        // Outputs of different shapes can name one pod-template annotation (a
        // native prefix of `k8s-consul-mutator.io` makes `<prefix>/checksum-a` and
        // k8s-consul-mutator's `checksum-a` one key): a clash like any other.
        let mut writers: BTreeMap<String, usize> = BTreeMap::new();
        for output in self.0.keys() {
            if let Some(key) = template_annotation(output) {
                *writers.entry(key.to_owned()).or_default() += 1;
            }
        }
        let mut specs = Vec::new();
        for (output, group) in self.0 {
            let shared = template_annotation(&output).is_some_and(|key| writers[key] > 1);
            let contested = shared
                || group.mixed
                || (group.combine == Combine::Single && group.objects.len() != 1);
            if contested {
                errors.extend(group.annotations.into_iter().map(|key| {
                    AnnotationError::DuplicateOutput {
                        key,
                        output: output.key().to_owned(),
                    }
                }));
                continue;
            }
            specs.push(group.into_spec(output));
        }
        specs
    }
}

/// The pod-template annotation a grouped output writes, if any ([`Stamps`] keys
/// an adopted output as its pod-template annotation). A restart's state counts
/// too: it shares `config-hash` with `auto`, on metadata where an adopted
/// `config-hash` lives, so the two on one workload are a clash.
fn template_annotation(output: &Output) -> Option<&str> {
    match output {
        Output::PodTemplateAnnotation(key)
        | Output::PodTemplateAndWorkloadAnnotation(key)
        | Output::Adopted(key)
        | Output::RestartAt(key) => Some(key),
        _ => None,
    }
}

impl Group {
    fn into_spec(self, output: Output) -> StampSpec {
        let output = match output {
            Output::PodTemplateAnnotation(key) if self.adopted => Output::Adopted(key),
            other => other,
        };
        let mut inputs = Vec::new();
        let mut origins = Vec::new();
        for ((source, namespace, name, algorithm, gate), merged) in self.objects {
            let reference = Reference {
                source,
                namespace,
                name,
                keys: merged.keys.into(),
            };
            origins.extend(merged.origins.into_iter().map(|o| (reference.clone(), o)));
            inputs.push(Input {
                tracked: Tracked::new(reference, algorithm).gated(gate),
                optional: merged.optional,
            });
        }
        inputs.sort();
        origins.sort();
        StampSpec {
            output,
            combine: self.combine,
            inputs,
            origins,
        }
    }
}
