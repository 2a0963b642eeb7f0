//! The admission renderer of an [`AdmissionDecision`]: the RFC 6902 JSON patch
//! that sets nudge's values on the object under review. Total on any JSON input.
//!
//! Rules (design §6):
//!
//! - Each value of the decision is written where the controller writes it (see
//!   [`apply_body`](super::apply_body)): pod-template annotation, pod-template *and*
//!   workload annotation (k8s-consul-mutator), or the Reloader env var in place in
//!   every container and initContainer carrying it with a plain `value`; a restart
//!   ([`Output::RestartAt`]) sets `spec.restartAt` to `now`.
//! - The `last-updated` annotations are set to `now` when the stamp changes,
//!   unless the request sets them itself (the controller's own apply); otherwise a
//!   value the request dropped is restored from the stored object.
//! - The patch never adds into a map that does not exist: a missing (or `null`)
//!   map is added whole, at the first missing level. The kube-apiserver fails the
//!   whole request with 500 when a webhook's patch cannot be applied, whatever the
//!   failure policy.
//! - Only differences are written: an object that already carries every value gets
//!   an empty patch.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

use super::{AdmissionDecision, Release};
use crate::annotations::AnnotationScheme;
use crate::model::{Output, WorkloadKind};

/// The workload's own annotations.
const WORKLOAD_ANNOTATIONS: [&str; 2] = ["metadata", "annotations"];
/// The container lists of a pod spec that can carry a Reloader env var.
const CONTAINER_LISTS: [&str; 2] = ["containers", "initContainers"];

/// The JSON patch that brings `object` (the object under review, of `kind`) to
/// `decision`. `stored` is the object before an UPDATE. Empty when nothing changes.
pub fn admission_patch(
    object: &Value,
    stored: Option<&Value>,
    kind: &WorkloadKind,
    decision: &AdmissionDecision,
    scheme: &AnnotationScheme,
    now: &str,
) -> Patch {
    if !object.is_object() {
        return Patch(Vec::new());
    }
    let template_path: Vec<&str> = kind.template_path().segments().collect();
    let template_annotations: Vec<&str> = template_path
        .iter()
        .copied()
        .chain(["metadata", "annotations"])
        .collect();
    let mut template = BTreeMap::new();
    let mut workload = BTreeMap::new();
    let mut env = BTreeMap::new();
    let mut restart = false;
    let mut snapshots = Vec::new();
    for (output, value) in &decision.values {
        match output {
            Output::PodTemplateAnnotation(key) => {
                template.insert(key.clone(), super::with_observed_at(value, now));
            }
            Output::Snapshots(key) => snapshots.push((key.as_str(), value.as_str())),
            // An adopted output reaches the renderer resolved; both, to be safe.
            Output::PodTemplateAndWorkloadAnnotation(key) | Output::Adopted(key) => {
                template.insert(key.clone(), value.clone());
                workload.insert(key.clone(), value.clone());
            }
            // Resolved into the annotations above by the decision; the state on
            // metadata, to be safe.
            Output::WorkloadAnnotation(key) | Output::ReloaderSource(key) => {
                workload.insert(key.clone(), value.clone());
            }
            // Holds are lifted by `StampPatch::releases`, never written as values.
            Output::SchedulingGate(_) | Output::WaveSchedulingDisabled | Output::ReloaderPause => {}
            Output::ContainerEnv(name) => {
                env.insert(name.clone(), value.clone());
            }
            // Its state reaches the renderer as a workload annotation.
            Output::RestartAt(_) => restart = true,
        }
    }
    let incoming_workload = string_map(object, &WORKLOAD_ANNOTATIONS);
    let stored_workload = stored.map(|o| string_map(o, &WORKLOAD_ANNOTATIONS));
    let request = (&incoming_workload, stored_workload.as_ref());
    workload.extend(last_updated(scheme, decision, request, now));
    let incoming_template = string_map(object, &template_annotations);
    let annotations = (template_annotations.as_slice(), &incoming_template);
    let mut ops = snapshots_written(object, kind, &snapshots, annotations, &mut template);
    ops.extend(map_ops(
        object,
        &template_annotations,
        &incoming_template,
        template,
    ));
    ops.extend(map_ops(
        object,
        &WORKLOAD_ANNOTATIONS,
        &incoming_workload,
        workload,
    ));
    ops.extend(env_ops(object, &template_path, &env));
    ops.extend(gate_ops(object, &template_path, &decision.gates));
    if restart {
        ops.extend(restart_op(object, now));
    }
    Patch(ops)
}

/// The `last-updated` annotations `decision` sets on a request whose
/// workload annotations are `incoming` (`stored`: before an UPDATE): `now`
/// when the stamp changes, unless the request sets them itself (the
/// controller's own apply); otherwise what the request dropped, restored.
fn last_updated(
    scheme: &AnnotationScheme,
    decision: &AdmissionDecision,
    (incoming, stored): (&BTreeMap<String, String>, Option<&BTreeMap<String, String>>),
    now: &str,
) -> BTreeMap<String, String> {
    let mut set = BTreeMap::new();
    for key in scheme.last_updated_keys(&decision.outputs) {
        let set_by_request = incoming
            .get(&key)
            .is_some_and(|v| stored.is_none_or(|old| old.get(&key) != Some(v)));
        if decision.stamp_changed && !set_by_request {
            set.insert(key, now.to_owned());
        } else if !incoming.contains_key(&key)
            && let Some(value) = stored.and_then(|old| old.get(&key))
        {
            set.insert(key, value.clone());
        }
    }
    set
}

/// The operations writing each snapshot of `snapshots` (annotation key and
/// value) on `object`: its references moved ([`snapshot_ops`]), its
/// annotation added to `template` (the pod template's annotations to set),
/// or removed when it copies nothing (`annotations`: where they are, and
/// what the request holds).
fn snapshots_written(
    object: &Value,
    kind: &WorkloadKind,
    snapshots: &[(&str, &str)],
    (annotations, incoming): (&[&str], &BTreeMap<String, String>),
    template: &mut BTreeMap<String, String>,
) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    for (key, value) in snapshots {
        let to = crate::snapshot::Snapshot::parse(value).unwrap_or_default();
        ops.extend(snapshot_ops(object, kind, key, &to));
        if !to.is_empty() {
            template.insert((*key).to_owned(), (*value).to_owned());
        } else if incoming.contains_key(*key) {
            let at = annotations.iter().copied().chain([*key]);
            ops.push(PatchOperation::Remove(RemoveOperation {
                path: PointerBuf::from_tokens(at),
            }));
        }
    }
    ops
}

/// The operations pointing the pod template of `object` (of `kind`) at the
/// copies of snapshot `to` (design §5e): each reference to an object `to`
/// copies, or to a copy the template's annotation `key` names, replaced in
/// place ([`crate::snapshot::rewrite`]); the annotation itself is the
/// caller's.
fn snapshot_ops(
    object: &Value,
    kind: &WorkloadKind,
    key: &str,
    to: &crate::snapshot::Snapshot,
) -> Vec<PatchOperation> {
    let template_path: Vec<&str> = kind.template_path().segments().collect();
    let Some(template) = get_path(object, &template_path) else {
        return Vec::new();
    };
    let annotations: Vec<&str> = ["metadata", "annotations", key].into();
    let from = get_path(template, &annotations)
        .and_then(Value::as_str)
        .and_then(|claimed| crate::snapshot::Snapshot::parse(claimed).ok())
        .unwrap_or_default();
    let text = |field: &str| {
        get_path(object, &["metadata", field])
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let owner = crate::model::WorkloadId::new(kind.clone(), text("namespace"), text("name"));
    crate::snapshot::rewrite(template, &owner, &from, to)
        .into_iter()
        .map(|replacement| {
            let at = template_path
                .iter()
                .copied()
                .chain(replacement.pointer.iter().map(String::as_str));
            PatchOperation::Replace(ReplaceOperation {
                path: PointerBuf::from_tokens(at),
                value: Value::from(replacement.name),
            })
        })
        .collect()
}

/// The operation setting `spec.restartAt` to `now` (replacing any earlier
/// time); none when the object has no `spec` map to hold it.
fn restart_op(object: &Value, now: &str) -> Option<PatchOperation> {
    let [spec, field] = super::RESTART_AT;
    object.get(spec).filter(|v| v.is_object())?;
    Some(add(
        PointerBuf::from_tokens([spec, field]),
        Value::from(super::restart_time(now)),
    ))
}

/// Operations lifting `releases` on `object` (of `kind`): scheduling gates
/// removed (highest index first, so the others keep theirs), Wave's scheduler
/// restored and its annotation removed. What is already gone yields nothing.
pub fn release_ops(
    object: &Value,
    kind: &WorkloadKind,
    releases: &[Release],
) -> Vec<PatchOperation> {
    let template: Vec<&str> = kind.template_path().segments().collect();
    let spec_path: Vec<&str> = template.iter().copied().chain(["spec"]).collect();
    let gates_path: Vec<&str> = spec_path
        .iter()
        .copied()
        .chain(["schedulingGates"])
        .collect();
    let gates = get_path(object, &gates_path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut gate_indexes: Vec<usize> = Vec::new();
    let mut ops = Vec::new();
    for release in releases {
        match release {
            Release::SchedulingGate(name) => gate_indexes.extend(
                gates
                    .iter()
                    .position(|g| g.get("name").and_then(Value::as_str) == Some(name)),
            ),
            Release::WaveScheduler { scheduler_name } => {
                let annotation = crate::model::WAVE_SCHEDULING_DISABLED;
                if string_map(object, &WORKLOAD_ANNOTATIONS).contains_key(annotation) {
                    let at = WORKLOAD_ANNOTATIONS.iter().copied().chain([annotation]);
                    ops.push(PatchOperation::Remove(RemoveOperation {
                        path: PointerBuf::from_tokens(at),
                    }));
                }
                if get_path(object, &spec_path).is_some_and(Value::is_object) {
                    let at = spec_path.iter().copied().chain(["schedulerName"]);
                    ops.push(add(
                        PointerBuf::from_tokens(at),
                        Value::from(scheduler_name.as_str()),
                    ));
                }
            }
            Release::ReloaderPause => ops.extend(resume_ops(object)),
        }
    }
    gate_indexes.sort_unstable();
    gate_indexes.dedup();
    for index in gate_indexes.into_iter().rev() {
        let index = index.to_string();
        let at = gates_path.iter().copied().chain([index.as_str()]);
        ops.push(PatchOperation::Remove(RemoveOperation {
            path: PointerBuf::from_tokens(at),
        }));
    }
    ops
}

/// Operations resuming a Deployment Reloader paused, as Reloader's resume
/// patch does: `spec.paused` to false when it is true, and its `paused-at`
/// annotation removed. The write is guarded by the resourceVersion read, so a
/// Reloader still running that resumed (or paused again) meanwhile makes it a
/// conflict, decided again on the new object.
fn resume_ops(object: &Value) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    if get_path(object, &["spec", "paused"]) == Some(&Value::Bool(true)) {
        ops.push(add(
            PointerBuf::from_tokens(["spec", "paused"]),
            Value::Bool(false),
        ));
    }
    let annotation = crate::model::RELOADER_PAUSED_AT;
    if string_map(object, &WORKLOAD_ANNOTATIONS).contains_key(annotation) {
        let at = WORKLOAD_ANNOTATIONS.iter().copied().chain([annotation]);
        ops.push(PatchOperation::Remove(RemoveOperation {
            path: PointerBuf::from_tokens(at),
        }));
    }
    ops
}

/// Operations adding the scheduling gates `names` to the pod template's
/// `schedulingGates`, creating the list when the template has none.
fn gate_ops(object: &Value, template: &[&str], names: &[String]) -> Vec<PatchOperation> {
    if names.is_empty() {
        return Vec::new();
    }
    let spec_path: Vec<&str> = template.iter().copied().chain(["spec"]).collect();
    if !get_path(object, &spec_path).is_some_and(Value::is_object) {
        return Vec::new();
    }
    let gates: Vec<Value> = names
        .iter()
        .map(|name| serde_json::json!({ "name": name }))
        .collect();
    let list_path: Vec<&str> = spec_path
        .iter()
        .copied()
        .chain(["schedulingGates"])
        .collect();
    match get_path(object, &list_path) {
        Some(Value::Array(_)) => gates
            .into_iter()
            .map(|gate| {
                add(
                    PointerBuf::from_tokens(list_path.iter().copied().chain(["-"])),
                    gate,
                )
            })
            .collect(),
        _ => vec![add(
            PointerBuf::from_tokens(list_path.iter().copied()),
            Value::Array(gates),
        )],
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

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

fn replace(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Replace(ReplaceOperation { path, value })
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
) -> Vec<PatchOperation> {
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
                return vec![add(
                    PointerBuf::from_tokens(path[..=depth].iter().copied()),
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
            let at = PointerBuf::from_tokens(path.iter().copied().chain([key.as_str()]));
            if existing.is_some_and(|m| m.contains_key(&key)) {
                replace(at, value)
            } else {
                add(at, value)
            }
        })
        .collect()
}

/// Operations setting each env var of `wanted` in place, wherever a container or
/// initContainer of the pod template at `template` already carries it with a plain
/// value (an entry with `valueFrom` is left alone: setting `value` beside it would
/// make the object invalid).
fn env_ops(
    object: &Value,
    template: &[&str],
    wanted: &BTreeMap<String, String>,
) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    if wanted.is_empty() {
        return ops;
    }
    for list in CONTAINER_LISTS {
        let path: Vec<&str> = template.iter().copied().chain(["spec", list]).collect();
        let Some(containers) = get_path(object, &path).and_then(Value::as_array) else {
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
                let (i, j) = (i.to_string(), j.to_string());
                let at = PointerBuf::from_tokens(path.iter().copied().chain([
                    i.as_str(),
                    "env",
                    j.as_str(),
                    "value",
                ]));
                match var.get("value") {
                    Some(Value::String(have)) if have == want => {}
                    Some(_) => ops.push(replace(at, Value::String(want.clone()))),
                    None => ops.push(add(at, Value::String(want.clone()))),
                }
            }
        }
    }
    ops
}

#[cfg(test)]
mod tests;
