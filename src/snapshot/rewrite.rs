//! Pointing a pod template (as JSON, so fields nudge does not know survive)
//! at a snapshot's copies, or back at the live objects.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Snapshot, copy_name};
use crate::fingerprint::ObjectKind;
use crate::model::WorkloadId;

/// One reference name to replace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    /// Where, as JSON pointer tokens from the pod template
    /// (`["spec", "volumes", "0", "configMap", "name"]`).
    pub pointer: Vec<String>,
    /// The name to write.
    pub name: String,
}

/// The replacements that move `template` (a pod template as JSON: `metadata`
/// and `spec`) of the workload `owner` from the copies of `from` (what its
/// annotation claims) to those of `to`: each reference to an object `to`
/// copies, or to a copy of it, names `to`'s copy; each other reference to a
/// copy of `from` names the live object again. Every place nudge's discovery
/// reads is covered: volumes and projected volumes, `envFrom` and
/// `env[].valueFrom` of containers and initContainers (ephemeral containers
/// cannot be in a pod template: kube-apiserver refuses them there). An empty
/// `to` points everything back at the live objects.
pub fn rewrite(
    template: &Value,
    owner: &WorkloadId,
    from: &Snapshot,
    to: &Snapshot,
) -> Vec<Replacement> {
    let mut back: BTreeMap<(ObjectKind, String), String> = BTreeMap::new();
    for snapshot in [from, to] {
        for (key, fingerprint) in snapshot.entries() {
            let copy = copy_name(owner, key, fingerprint);
            back.insert((key.kind, copy), key.name.to_string());
        }
    }
    let forward: BTreeMap<(ObjectKind, String), String> = to
        .entries()
        .map(|(key, fingerprint)| {
            let copy = copy_name(owner, key, fingerprint);
            ((key.kind, key.name.to_string()), copy)
        })
        .collect();
    let mut replacements = Vec::new();
    for site in sites(template) {
        let source = back
            .get(&(site.kind, site.name.to_owned()))
            .map_or(site.name, String::as_str);
        let wanted = forward
            .get(&(site.kind, source.to_owned()))
            .map_or(source, String::as_str);
        if wanted != site.name {
            replacements.push(Replacement {
                pointer: site.pointer,
                name: wanted.to_owned(),
            });
        }
    }
    replacements
}

/// One place a pod template names a ConfigMap or Secret.
struct Site<'a> {
    kind: ObjectKind,
    name: &'a str,
    pointer: Vec<String>,
}

/// Every place `template` names a ConfigMap or Secret, in document order.
fn sites(template: &Value) -> Vec<Site<'_>> {
    let mut found = Vec::new();
    let Some(spec) = template.get("spec") else {
        return found;
    };
    let at = |parts: &[&str]| -> Vec<String> {
        ["spec"]
            .iter()
            .chain(parts)
            .map(|p| (*p).to_owned())
            .collect()
    };
    for (i, volume) in items(spec, "volumes") {
        let i = i.to_string();
        let plain = [
            ("configMap", "name", ObjectKind::ConfigMap),
            ("secret", "secretName", ObjectKind::Secret),
        ];
        for (field, name, kind) in plain {
            if let Some(value) = name_in(volume, field, name) {
                found.push(Site {
                    kind,
                    name: value,
                    pointer: at(&["volumes", &i, field, name]),
                });
            }
        }
        let sources = volume.get("projected").map_or(&Value::Null, |p| p);
        for (j, projection) in items(sources, "sources") {
            let j = j.to_string();
            for (field, kind) in [
                ("configMap", ObjectKind::ConfigMap),
                ("secret", ObjectKind::Secret),
            ] {
                if let Some(value) = name_in(projection, field, "name") {
                    let pointer = at(&["volumes", &i, "projected", "sources", &j, field, "name"]);
                    found.push(Site {
                        kind,
                        name: value,
                        pointer,
                    });
                }
            }
        }
    }
    for list in ["containers", "initContainers"] {
        for (i, container) in items(spec, list) {
            let i = i.to_string();
            for (j, env_from) in items(container, "envFrom") {
                let j = j.to_string();
                for (field, kind) in [
                    ("configMapRef", ObjectKind::ConfigMap),
                    ("secretRef", ObjectKind::Secret),
                ] {
                    if let Some(value) = name_in(env_from, field, "name") {
                        let pointer = at(&[list, &i, "envFrom", &j, field, "name"]);
                        found.push(Site {
                            kind,
                            name: value,
                            pointer,
                        });
                    }
                }
            }
            for (j, env) in items(container, "env") {
                let j = j.to_string();
                let Some(from) = env.get("valueFrom") else {
                    continue;
                };
                for (field, kind) in [
                    ("configMapKeyRef", ObjectKind::ConfigMap),
                    ("secretKeyRef", ObjectKind::Secret),
                ] {
                    if let Some(value) = name_in(from, field, "name") {
                        let pointer = at(&[list, &i, "env", &j, "valueFrom", field, "name"]);
                        found.push(Site {
                            kind,
                            name: value,
                            pointer,
                        });
                    }
                }
            }
        }
    }
    found.retain(|site| !site.name.is_empty());
    found
}

/// The name `object[field][key]` holds, when it is a string.
fn name_in<'a>(object: &'a Value, field: &str, key: &str) -> Option<&'a str> {
    object.get(field)?.get(key)?.as_str()
}

/// The elements of the array `field` of `value`, with their indexes.
fn items<'a>(value: &'a Value, field: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    value
        .get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}
