//! Reading a pod template's snapshot: what its `<prefix>/snapshots`
//! annotation claims, what the template really uses, and its references with
//! copies mapped back to the objects they copy.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::{Snapshot, SnapshotError, SnapshotKey, copy_name};
use crate::discovery::{self, Discovered};
use crate::fingerprint::ObjectKind;
use crate::model::WorkloadId;

/// A pod template as snapshots see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TemplateSnapshot {
    /// Every entry of the annotation, as written.
    claimed: Snapshot,
    /// The entries the template really uses (see [`Self::current`]).
    current: Snapshot,
    /// Each referenced copy of a claimed entry, by kind and copy name.
    copies: BTreeMap<(ObjectKind, String), SnapshotKey>,
    /// The template's references by nudge's discovery rules, copies mapped
    /// back to the objects they copy.
    sources: Vec<Discovered>,
    /// Why the annotation could not be read, when it could not.
    error: Option<SnapshotError>,
}

impl TemplateSnapshot {
    /// Reads `template` of the workload `owner`; `annotation` is the
    /// `<prefix>/snapshots` key.
    pub fn read(owner: &WorkloadId, template: &PodTemplateSpec, annotation: &str) -> Self {
        let value = template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(annotation));
        let (claimed, error) = match value.map(|v| Snapshot::parse(v)) {
            None => (Snapshot::new(), None),
            Some(Ok(snapshot)) => (snapshot, None),
            Some(Err(error)) => (Snapshot::new(), Some(error)),
        };
        let found = template
            .spec
            .as_ref()
            .map(discovery::native)
            .unwrap_or_default();
        let names: BTreeMap<(ObjectKind, String), SnapshotKey> = claimed
            .entries()
            .map(|(key, fingerprint)| {
                let name = copy_name(owner, key, fingerprint);
                ((key.kind, name), key.clone())
            })
            .collect();
        let copies: BTreeMap<(ObjectKind, String), SnapshotKey> = names
            .into_iter()
            .filter(|((kind, name), _)| found.iter().any(|d| d.kind == *kind && d.name == *name))
            .collect();
        let current = in_use(&claimed, &copies, &found);
        let sources = map_back(found, &copies);
        Self {
            claimed,
            current,
            copies,
            sources,
            error,
        }
    }

    /// The snapshot the template uses: each claimed entry whose copy it
    /// references with exactly the entry's keys, and whose object it does
    /// not also reference directly. A template a person or tool edited
    /// (a reference pointed back at the live object, a key added) uses less
    /// than it claims, and differs from the snapshot nudge wants.
    pub fn current(&self) -> &Snapshot {
        &self.current
    }

    /// Every entry the annotation names, whether or not the template uses it.
    pub fn claimed(&self) -> &Snapshot {
        &self.claimed
    }

    /// The references of the template (nudge's discovery rules: volumes,
    /// projected volumes, `envFrom`, `env[].valueFrom`, of containers and
    /// initContainers), each copy counted as the object it copies.
    pub fn sources(&self) -> &[Discovered] {
        &self.sources
    }

    /// `found` (by any rule set, e.g. Wave's) with copies mapped back to the
    /// objects they copy and merged with them.
    pub fn map_back(&self, found: Vec<Discovered>) -> Vec<Discovered> {
        map_back(found, &self.copies)
    }

    /// The object a referenced copy copies, when `name` is one.
    pub fn source_of(&self, kind: ObjectKind, name: &str) -> Option<&SnapshotKey> {
        self.copies.get(&(kind, name.to_owned()))
    }

    /// Why the annotation could not be read (a person edited it): the
    /// template then counts as using no snapshot.
    pub fn error(&self) -> Option<&SnapshotError> {
        self.error.as_ref()
    }

    /// Whether every object `wanted` copies is referenced by the template
    /// with exactly the keys its copy holds: only then may the template be
    /// pointed at those copies (a key used since, missing from its copy,
    /// would keep the pods from starting).
    pub fn fits(&self, wanted: &Snapshot) -> bool {
        wanted.entries().all(|(key, _)| {
            self.sources
                .iter()
                .any(|d| d.kind == key.kind && d.name == key.name && d.keys == key.keys)
        })
    }
}

/// The snapshot an admitted pod template uses (design §5e, admission): the
/// copies the incoming template uses itself, and, for a workload that takes
/// snapshots, each copy the stored template used of an object the incoming
/// one references directly with the same keys: a re-apply of the original
/// manifest is pointed back at the copies it had, and rolls nothing. A
/// workload that takes none keeps what the request says (the controller
/// pointing it back at the live objects).
pub fn admitted(
    incoming: &TemplateSnapshot,
    stored: Option<&TemplateSnapshot>,
    wanted: bool,
) -> Snapshot {
    let mut snapshot = incoming.current.clone();
    let Some(stored) = stored.filter(|_| wanted) else {
        return snapshot;
    };
    for source in &incoming.sources {
        let key = SnapshotKey::new(source.kind, source.name.as_str(), source.keys.clone());
        if snapshot.get(&key).is_some() {
            continue;
        }
        if let Some(fingerprint) = stored.current.get(&key) {
            snapshot.insert(key, fingerprint);
        }
    }
    snapshot
}

/// The claimed entries whose copies the template uses, with their keys, and
/// whose objects it does not reference directly.
fn in_use(
    claimed: &Snapshot,
    copies: &BTreeMap<(ObjectKind, String), SnapshotKey>,
    found: &[Discovered],
) -> Snapshot {
    let mut current = Snapshot::new();
    for ((kind, name), key) in copies {
        let uses_copy = found
            .iter()
            .any(|d| d.kind == *kind && d.name == *name && d.keys == key.keys);
        let uses_live = found
            .iter()
            .any(|d| d.kind == key.kind && d.name == key.name.as_str());
        if let (true, false, Some(fingerprint)) = (uses_copy, uses_live, claimed.get(key)) {
            current.insert(key.clone(), fingerprint);
        }
    }
    current
}

/// `found` with each copy renamed to the object it copies, occurrences of one
/// object merged as discovery merges them (keys union, optional only if every
/// occurrence is), sorted by kind then name.
fn map_back(
    found: Vec<Discovered>,
    copies: &BTreeMap<(ObjectKind, String), SnapshotKey>,
) -> Vec<Discovered> {
    let mut merged: BTreeMap<(u8, String), Discovered> = BTreeMap::new();
    for mut d in found {
        if let Some(key) = copies.get(&(d.kind, d.name.clone())) {
            d.name = key.name.to_string();
        }
        let order = match d.kind {
            ObjectKind::ConfigMap => 0,
            ObjectKind::Secret => 1,
        };
        match merged.entry((order, d.name.clone())) {
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(d);
            }
            std::collections::btree_map::Entry::Occupied(mut slot) => {
                let entry = slot.get_mut();
                entry.keys = entry.keys.union(&d.keys);
                entry.optional &= d.optional;
                for origin in d.origins {
                    if !entry.origins.contains(&origin) {
                        entry.origins.push(origin);
                    }
                }
            }
        }
    }
    merged.into_values().collect()
}
