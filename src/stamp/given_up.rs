//! Outputs nudge gave up, removed where nudge writes by JSON patch (design §5a).
//!
//! Server-side apply removes a field its manager applied before and leaves out
//! now, unless another manager owns it too: that is how a dropped reference's
//! output leaves a Deployment. Kinds outside `apps`/`batch` are written by JSON
//! patch, which removes nothing by itself; [`given_up_ops`] applies the same
//! rule there. What nudge wrote is what the API server recorded: the fields of
//! nudge's field manager in `metadata.managedFields` (its `Apply` and `Update`
//! entries) that no other manager owns. A value someone else wrote, or wrote
//! over nudge's, is theirs in that record and is never removed.
//!
//! Env vars are told apart only where the kind's schema keys containers and env
//! by name (the built-in pod spec; Argo Rollouts' CRD). In a schemaless pod
//! template the container lists are atomic, the record says only who last
//! changed a whole list, and nudge's env values there are left as they are.

use std::collections::BTreeSet;

use json_patch::jsonptr::PointerBuf;
use json_patch::{PatchOperation, RemoveOperation};
use serde_json::{Map, Value};

use super::StampPatch;
use super::current_outputs::OutputKeys;
use crate::annotations::AnnotationScheme;
use crate::model::WorkloadKind;

/// The container lists of a pod spec that can carry a Reloader env var.
const CONTAINER_LISTS: [&str; 2] = ["containers", "initContainers"];

/// Operations removing from `object` (as read, with its `managedFields`, of
/// `kind`) every annotation and env value that field manager `manager` owns
/// alone and that `patch` no longer writes. nudge's own bookkeeping (the
/// rollout in flight, the history) is never removed here.
pub(crate) fn given_up_ops(
    object: &Value,
    kind: &WorkloadKind,
    patch: &StampPatch,
    manager: &str,
    scheme: &AnnotationScheme,
) -> Vec<PatchOperation> {
    let template: Vec<&str> = kind.template_path().segments().collect();
    let owned = owned_alone(object, manager, &template);
    let wanted = OutputKeys::of(patch.values.keys());
    let mut kept: BTreeSet<String> = wanted.own.iter().map(|k| (*k).to_owned()).collect();
    kept.extend(scheme.last_updated_keys(patch.values.keys()));
    kept.extend([scheme.rollout(), scheme.history()]);

    let mut ops = annotation_ops(object, &[], &owned.workload, |key| kept.contains(key));
    ops.extend(annotation_ops(object, &template, &owned.template, |key| {
        wanted.template.contains(key)
    }));
    ops.extend(env_ops(object, &template, &owned.env, |var| {
        wanted.env.contains(var)
    }));
    ops
}

/// One env var's `value` in a container, as `managedFields` name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct EnvValue {
    /// `containers` or `initContainers`.
    list: &'static str,
    container: String,
    var: String,
}

/// Among the fields nudge may write, those a set of managers owns.
#[derive(Debug, Default, PartialEq)]
struct Fields {
    /// Keys of the workload's own annotations.
    workload: BTreeSet<String>,
    /// Keys of the pod template's annotations.
    template: BTreeSet<String>,
    /// Env var values in containers keyed by name.
    env: BTreeSet<EnvValue>,
}

impl Fields {
    /// Reads one `managedFields[].fieldsV1` for a pod template at `template`.
    fn read(fields: &Value, template: &[&str]) -> Self {
        let template_fields = descend(fields, template);
        let spec = template_fields.and_then(|t| t.get("f:spec"));
        let mut env = BTreeSet::new();
        for list in CONTAINER_LISTS {
            let containers = spec.and_then(|s| s.get(format!("f:{list}")));
            env.extend(keyed_items(containers).flat_map(|(container, fields)| {
                keyed_items(fields.get("f:env"))
                    .filter(|(_, var)| var.get("f:value").is_some())
                    .map(move |(var, _)| EnvValue {
                        list,
                        container: container.clone(),
                        var,
                    })
            }));
        }
        Self {
            workload: annotation_keys(descend(fields, &["metadata"])),
            template: annotation_keys(template_fields.and_then(|t| t.get("f:metadata"))),
            env,
        }
    }

    fn extend(&mut self, other: Self) {
        self.workload.extend(other.workload);
        self.template.extend(other.template);
        self.env.extend(other.env);
    }

    /// These fields, less those `other` owns too.
    fn without(mut self, other: &Self) -> Self {
        self.workload.retain(|key| !other.workload.contains(key));
        self.template.retain(|key| !other.template.contains(key));
        self.env.retain(|value| !other.env.contains(value));
        self
    }
}

/// The fields `manager` owns on the main resource of `object` and no other
/// manager owns.
fn owned_alone(object: &Value, manager: &str, template: &[&str]) -> Fields {
    let entries = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut mine = Fields::default();
    let mut theirs = Fields::default();
    for entry in entries {
        let Some(fields) = entry.get("fieldsV1") else {
            continue;
        };
        let subresource = entry.get("subresource").and_then(Value::as_str);
        let is_mine = entry.get("manager").and_then(Value::as_str) == Some(manager)
            && subresource.is_none_or(str::is_empty);
        let read = Fields::read(fields, template);
        if is_mine {
            mine.extend(read);
        } else {
            theirs.extend(read);
        }
    }
    mine.without(&theirs)
}

/// The fieldsV1 node of the field at `path` (field names from the root).
fn descend<'a>(fields: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(fields, |node, segment| node.get(format!("f:{segment}")))
}

/// The annotation keys under a `f:metadata` node.
fn annotation_keys(metadata: Option<&Value>) -> BTreeSet<String> {
    metadata
        .and_then(|m| m.get("f:annotations"))
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(Map::keys)
        .filter_map(|key| key.strip_prefix("f:"))
        .map(str::to_owned)
        .collect()
}

/// The items of a list keyed by `name` (`k:{"name":"app"}`), with their
/// fields. An atomic list (a leaf) has none.
fn keyed_items(list: Option<&Value>) -> impl Iterator<Item = (String, &Value)> {
    list.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(key, fields)| {
            let item: Value = serde_json::from_str(key.strip_prefix("k:")?).ok()?;
            let name = item.get("name")?.as_str()?.to_owned();
            Some((name, fields))
        })
}

/// Removals of the annotations in `owned` that `kept` does not keep, from the
/// map at `parent`/`metadata`/`annotations` of `object`.
fn annotation_ops(
    object: &Value,
    parent: &[&str],
    owned: &BTreeSet<String>,
    kept: impl Fn(&str) -> bool,
) -> Vec<PatchOperation> {
    let path: Vec<&str> = parent
        .iter()
        .copied()
        .chain(["metadata", "annotations"])
        .collect();
    let Some(annotations) = path
        .iter()
        .try_fold(object, |node, segment| node.get(segment))
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    owned
        .iter()
        .filter(|key| !kept(key) && annotations.contains_key(*key))
        .map(|key| remove(path.iter().copied().chain([key.as_str()])))
        .collect()
}

/// Removals of the env values in `owned` whose var `kept` does not keep: the
/// `value` alone, as server-side apply leaves the entry others own.
fn env_ops(
    object: &Value,
    template: &[&str],
    owned: &BTreeSet<EnvValue>,
    kept: impl Fn(&str) -> bool,
) -> Vec<PatchOperation> {
    let mut ops = Vec::new();
    for owned in owned.iter().filter(|owned| !kept(&owned.var)) {
        let list: Vec<&str> = template
            .iter()
            .copied()
            .chain(["spec", owned.list])
            .collect();
        let containers = list
            .iter()
            .try_fold(object, |node, segment| node.get(segment))
            .and_then(Value::as_array);
        let Some((i, container)) = position_by_name(containers, &owned.container) else {
            continue;
        };
        let vars = container.get("env").and_then(Value::as_array);
        let Some((j, var)) = position_by_name(vars, &owned.var) else {
            continue;
        };
        if var.get("value").is_some() {
            let (i, j) = (i.to_string(), j.to_string());
            let at = list
                .iter()
                .copied()
                .chain([i.as_str(), "env", j.as_str(), "value"]);
            ops.push(remove(at));
        }
    }
    ops
}

/// The first item of `list` whose `name` is `name`, with its index.
fn position_by_name<'a>(list: Option<&'a Vec<Value>>, name: &str) -> Option<(usize, &'a Value)> {
    list?
        .iter()
        .enumerate()
        .find(|(_, item)| item.get("name").and_then(Value::as_str) == Some(name))
}

fn remove<'a>(path: impl IntoIterator<Item = &'a str>) -> PatchOperation {
    PatchOperation::Remove(RemoveOperation {
        path: PointerBuf::from_tokens(path),
    })
}

#[cfg(test)]
mod tests;
