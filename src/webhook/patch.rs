//! The pure core of the admission webhook: from the object under review, the old
//! object (on UPDATE) and the desired stamp, the RFC 6902 JSON patch that sets
//! nudge's outputs on it. No I/O; every function here is total on any JSON input.
//!
//! Rules (design §6):
//!
//! - An output with a desired value gets that value, in the same places the
//!   controller writes it (see [`crate::targets::render_apply_body`]): pod-template
//!   annotation, pod-template *and* workload annotation (k8s-consul-mutator), or the
//!   Reloader env var in place in every container and initContainer carrying it.
//! - A blocked output (input unknown, missing, timed out) keeps what the incoming
//!   object has. On UPDATE, when the incoming object lacks it but the old object has
//!   it, it is restored from the old object: a GitOps re-apply of the original
//!   manifest must not drop the stamp and roll the pods twice.
//! - `<prefix>/last-updated` (and k8s-consul-mutator's `last-updated` when its
//!   checksums are written) is set to `now` on the workload's metadata when the patch
//!   changes a stamped value relative to the old object (UPDATE) or the incoming one
//!   (CREATE), unless the request sets it itself (the controller's own apply);
//!   otherwise a value the incoming object dropped is restored from the old object.
//! - The patch never adds into a map that does not exist: a missing (or `null`)
//!   `annotations` map is added whole, with every key in it. The kube-apiserver fails
//!   the whole request with 500 when a webhook's patch cannot be applied, whatever the
//!   failure policy. Keys are escaped per RFC 6901 (`~` → `~0`, `/` → `~1`).
//! - Only differences are written: an object that already carries the desired stamp
//!   gets an empty patch.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::annotations::AnnotationScheme;
use crate::model::{Output, StampSpec};
use crate::stamp::DesiredStamp;

/// k8s-consul-mutator's annotation prefix; its `last-updated` goes with its checksums.
const CONSUL_MUTATOR_PREFIX: &str = "k8s-consul-mutator.io/";

/// Path of the pod template's annotations.
const TEMPLATE_ANNOTATIONS: [&str; 4] = ["spec", "template", "metadata", "annotations"];
/// Path of the workload's own annotations.
const WORKLOAD_ANNOTATIONS: [&str; 2] = ["metadata", "annotations"];
/// The container lists of a pod spec that can carry a Reloader env var.
const CONTAINER_LISTS: [&str; 2] = ["containers", "initContainers"];

/// The kind of one JSON patch operation. Only the two nudge needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PatchOpKind {
    /// Adds a member (or replaces an existing one; RFC 6902 §4.1).
    Add,
    /// Replaces an existing member.
    Replace,
}

/// One RFC 6902 operation, serialized as `{"op", "path", "value"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatchOp {
    /// `add` or `replace`.
    pub op: PatchOpKind,
    /// RFC 6901 JSON pointer.
    pub path: String,
    /// The value written.
    pub value: Value,
}

impl PatchOp {
    fn new(op: PatchOpKind, path: String, value: impl Into<Value>) -> Self {
        Self {
            op,
            path,
            value: value.into(),
        }
    }
}

/// Everything [`admission_patch`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct PatchInput<'a> {
    /// `request.object`: the workload as it will be stored (defaults applied).
    pub object: &'a Value,
    /// `request.oldObject` on UPDATE; `None` on CREATE.
    pub old_object: Option<&'a Value>,
    /// The workload's stamp specs (from [`crate::annotations::dependencies`] on `object`).
    pub specs: &'a [StampSpec],
    /// The desired stamp (from [`crate::stamp::desired`]).
    pub desired: &'a DesiredStamp,
    /// nudge's annotation names.
    pub scheme: &'a AnnotationScheme,
    /// RFC 3339 time written into `last-updated` when the stamp changes.
    pub now: &'a str,
}

/// Escapes one JSON pointer reference token (RFC 6901 §3): `~` → `~0`, `/` → `~1`.
pub fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// A JSON pointer from unescaped tokens.
fn pointer<'a>(tokens: impl IntoIterator<Item = &'a str>) -> String {
    tokens
        .into_iter()
        .map(|t| format!("/{}", escape_pointer_token(t)))
        .collect()
}

/// The JSON patch that brings nudge's outputs on `input.object` to their desired
/// (or restored) values; empty when nothing changes. See the module docs for the rules.
pub fn admission_patch(input: &PatchInput<'_>) -> Vec<PatchOp> {
    let PatchInput {
        object,
        old_object,
        specs,
        desired,
        scheme,
        now,
    } = *input;
    if !object.is_object() {
        return Vec::new();
    }
    let incoming_template = string_map(object, &TEMPLATE_ANNOTATIONS);
    let incoming_workload = string_map(object, &WORKLOAD_ANNOTATIONS);
    let old_template = old_object.map(|o| string_map(o, &TEMPLATE_ANNOTATIONS));
    let old_workload = old_object.map(|o| string_map(o, &WORKLOAD_ANNOTATIONS));
    // What "a stamp change" is measured against: the stored object on UPDATE, the
    // request on CREATE.
    let baseline_template = old_template.as_ref().unwrap_or(&incoming_template);

    let mut template = BTreeMap::new();
    let mut workload = BTreeMap::new();
    let mut env = BTreeMap::new();
    let mut stamp_changed = false;
    let mut seen = Vec::new();
    for output in specs.iter().map(|s| &s.output) {
        if seen.contains(&output) {
            continue;
        }
        seen.push(output);
        match (output, desired.values.get(output)) {
            (Output::PodTemplateAnnotation(key), Some(value)) => {
                stamp_changed |= baseline_template.get(key) != Some(value);
                template.insert(key.clone(), value.clone());
            }
            (Output::PodTemplateAndWorkloadAnnotation(key), Some(value)) => {
                stamp_changed |= baseline_template.get(key) != Some(value);
                template.insert(key.clone(), value.clone());
                workload.insert(key.clone(), value.clone());
            }
            (Output::ContainerEnv(name), Some(value)) => {
                let baseline = old_object.unwrap_or(object);
                stamp_changed |= env_values(baseline, name).iter().any(|v| *v != Some(value));
                env.insert(name.clone(), value.clone());
            }
            (Output::PodTemplateAnnotation(key), None) => {
                restore(
                    &mut template,
                    key,
                    &incoming_template,
                    old_template.as_ref(),
                );
            }
            (Output::PodTemplateAndWorkloadAnnotation(key), None) => {
                restore(
                    &mut template,
                    key,
                    &incoming_template,
                    old_template.as_ref(),
                );
                restore(
                    &mut workload,
                    key,
                    &incoming_workload,
                    old_workload.as_ref(),
                );
            }
            // The output exists only because the incoming object carries the variable,
            // so there is nothing to restore; it keeps its value.
            (Output::ContainerEnv(_), None) => {}
        }
    }

    let mut last_updated = vec![scheme.last_updated()];
    if seen
        .iter()
        .any(|o| o.key().starts_with(CONSUL_MUTATOR_PREFIX))
    {
        last_updated.push(format!("{CONSUL_MUTATOR_PREFIX}last-updated"));
    }
    for key in last_updated {
        // A request that sets `last-updated` itself (the controller's own apply)
        // keeps its value.
        let set_by_request = incoming_workload.get(&key).is_some_and(|v| {
            old_workload
                .as_ref()
                .is_none_or(|old| old.get(&key) != Some(v))
        });
        if stamp_changed && !set_by_request {
            workload.insert(key, now.to_owned());
        } else {
            restore(
                &mut workload,
                &key,
                &incoming_workload,
                old_workload.as_ref(),
            );
        }
    }

    let mut ops = Vec::new();
    ops.extend(map_ops(
        object,
        &TEMPLATE_ANNOTATIONS,
        &incoming_template,
        template,
    ));
    ops.extend(map_ops(
        object,
        &WORKLOAD_ANNOTATIONS,
        &incoming_workload,
        workload,
    ));
    ops.extend(env_ops(object, &env));
    ops
}

/// Puts `old[key]` into `target` when the incoming object lacks `key`.
fn restore(
    target: &mut BTreeMap<String, String>,
    key: &str,
    incoming: &BTreeMap<String, String>,
    old: Option<&BTreeMap<String, String>>,
) {
    if incoming.contains_key(key) {
        return;
    }
    if let Some(value) = old.and_then(|old| old.get(key)) {
        target.insert(key.to_owned(), value.clone());
    }
}

/// The string entries of the map at `path` (non-string values are left out).
fn string_map(object: &Value, path: &[&str]) -> BTreeMap<String, String> {
    get_path(object, path)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

fn get_path<'a>(object: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(object, |v, seg| v.get(seg))
}

/// Operations setting `wanted` into the map at `path`, skipping entries that already
/// hold their value. A missing or `null` map, or missing parents, are added whole at
/// the first missing level, never into something absent. A non-object in the way
/// (malformed object) yields no operation.
fn map_ops(
    object: &Value,
    path: &[&str],
    incoming: &BTreeMap<String, String>,
    wanted: BTreeMap<String, String>,
) -> Vec<PatchOp> {
    let changes: Map<String, Value> = wanted
        .into_iter()
        .filter(|(k, v)| incoming.get(k) != Some(v))
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    if changes.is_empty() {
        return Vec::new();
    }
    let mut current = object;
    for (depth, segment) in path.iter().enumerate() {
        match current.get(segment) {
            Some(next @ Value::Object(_)) => current = next,
            None | Some(Value::Null) => {
                let value = path[depth + 1..]
                    .iter()
                    .rev()
                    .fold(Value::Object(changes), |inner, seg| {
                        Value::Object(Map::from_iter([((*seg).to_owned(), inner)]))
                    });
                return vec![PatchOp::new(
                    PatchOpKind::Add,
                    pointer(path[..=depth].iter().copied()),
                    value,
                )];
            }
            Some(_) => return Vec::new(),
        }
    }
    let existing = current.as_object();
    changes
        .into_iter()
        .map(|(key, value)| {
            let kind = if existing.is_some_and(|m| m.contains_key(&key)) {
                PatchOpKind::Replace
            } else {
                PatchOpKind::Add
            };
            let path = pointer(path.iter().copied().chain([key.as_str()]));
            PatchOp::new(kind, path, value)
        })
        .collect()
}

/// Every `value` of env var `name` in the pod template's containers and
/// initContainers (`None` for an entry without a plain value).
fn env_values<'a>(object: &'a Value, name: &str) -> Vec<Option<&'a str>> {
    let mut values = Vec::new();
    for list in CONTAINER_LISTS {
        let containers = get_path(object, &["spec", "template", "spec", list])
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for container in containers {
            let vars = container
                .get("env")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            values.extend(
                vars.iter()
                    .filter(|v| v.get("name").and_then(Value::as_str) == Some(name))
                    .map(|v| v.get("value").and_then(Value::as_str)),
            );
        }
    }
    values
}

/// Operations setting each env var of `wanted` in place, wherever a container or
/// initContainer already carries it with a plain value (an entry with `valueFrom`
/// is left alone: setting `value` beside it would make the object invalid).
fn env_ops(object: &Value, wanted: &BTreeMap<String, String>) -> Vec<PatchOp> {
    let mut ops = Vec::new();
    if wanted.is_empty() {
        return ops;
    }
    for list in CONTAINER_LISTS {
        let Some(containers) =
            get_path(object, &["spec", "template", "spec", list]).and_then(Value::as_array)
        else {
            continue;
        };
        for (i, container) in containers.iter().enumerate() {
            let Some(vars) = container.get("env").and_then(Value::as_array) else {
                continue;
            };
            for (j, var) in vars.iter().enumerate() {
                let Some(want) = var
                    .get("name")
                    .and_then(Value::as_str)
                    .and_then(|n| wanted.get(n))
                else {
                    continue;
                };
                if var.get("valueFrom").is_some_and(|v| !v.is_null()) {
                    continue;
                }
                let kind = match var.get("value") {
                    Some(Value::String(have)) if have == want => continue,
                    Some(_) => PatchOpKind::Replace,
                    None => PatchOpKind::Add,
                };
                let (i, j) = (i.to_string(), j.to_string());
                let path = pointer(["spec", "template", "spec", list, &i, "env", &j, "value"]);
                ops.push(PatchOp::new(kind, path, want.clone()));
            }
        }
    }
    ops
}

#[cfg(test)]
mod tests;
