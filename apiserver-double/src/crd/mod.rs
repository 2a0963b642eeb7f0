//! CustomResourceDefinitions: their strategy ([`validation`], [`schema_checks`])
//! and what the apiextensions controllers do, done at once: serving the
//! resources of every served version, the `NamesAccepted` and `Established`
//! conditions, and on deletion the removal of every custom resource.

pub(crate) mod schema_checks;
pub(crate) mod validation;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::gc;
use crate::handlers::{SystemWrite, system_update};
use crate::ids;
use crate::managed::Subresource;
use crate::meta;
use crate::resources::{CRDS, CustomVersion, Family, ResourceType};
use crate::server::State;
use crate::structural::Structural;

/// The finalizer the apiserver puts on a CRD being deleted.
pub(crate) const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";
/// Field manager of the apiextensions controllers' writes.
const MANAGER: &str = "kube-apiserver";

/// The resource types a CRD serves (one per served version), stored in `storage`.
pub(crate) fn resource_types(crd: &Value, storage: usize) -> Vec<ResourceType> {
    let s = |path: &[&str]| {
        let mut p = vec!["spec"];
        p.extend_from_slice(path);
        meta::get_path(crd, &p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let strings = |path: &[&str]| -> Vec<String> {
        let mut p = vec!["spec", "names"];
        p.extend_from_slice(path);
        meta::get_path(crd, &p)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let group = s(&["group"]);
    let storage_version = validation::storage_version(crd).unwrap_or_default();
    validation::versions(crd)
        .iter()
        .filter(|v| v.get("served") == Some(&json!(true)))
        .map(|v| {
            let schema = meta::get_path(v, &["schema", "openAPIV3Schema"])
                .map(Structural::root)
                .unwrap_or_else(Structural::anything);
            let selectable_fields = v
                .get("selectableFields")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                .map(|p| p.trim_start_matches('.').to_string())
                .collect();
            ResourceType {
                group: group.clone(),
                version: v.get("name").and_then(Value::as_str).unwrap_or("").into(),
                plural: s(&["names", "plural"]),
                singular: s(&["names", "singular"]),
                kind: s(&["names", "kind"]),
                list_kind: s(&["names", "listKind"]),
                namespaced: s(&["scope"]) == "Namespaced",
                short_names: strings(&["shortNames"]),
                categories: strings(&["categories"]),
                family: Family::Custom,
                storage,
                custom: Some(CustomVersion {
                    crd: meta::name(crd).to_string(),
                    schema: Arc::new(schema),
                    status: meta::get_path(v, &["subresources", "status"])
                        .is_some_and(|s| !s.is_null()),
                    storage_api_version: format!("{group}/{storage_version}"),
                    selectable_fields,
                    webhook_conversion: s(&["conversion", "strategy"]) == "Webhook",
                }),
            }
        })
        .collect()
}

/// After a CRD was stored: serve its versions and, like the naming and
/// establishing controllers, accept its names and mark it Established.
pub(crate) fn sync(state: &State, crd: &Value) {
    if meta::metadata(crd).is_some_and(|m| m.contains_key("deletionTimestamp")) {
        return;
    }
    let name = meta::name(crd).to_string();
    let storage = state.registry.storage_for_crd(&name);
    state
        .registry
        .replace_storage(storage, resource_types(crd, storage));
    establish(state, &name);
}

/// The `acceptedNames` a CRD's spec asks for.
fn accepted_names(crd: &Value) -> Value {
    let mut names = meta::get_path(crd, &["spec", "names"])
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(m) = names.as_object_mut() {
        m.retain(|_, v| !v.is_null() && v != &json!([]));
    }
    names
}

fn condition(kind: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"lastTransitionTime": now, "message": message, "reason": reason,
           "status": "True", "type": kind})
}

/// Sets `status.acceptedNames` and the NamesAccepted/Established conditions.
fn establish(state: &State, name: &str) {
    let Some(rt) = state.registry.get(CRDS) else {
        return;
    };
    let write = SystemWrite {
        rt: &rt,
        key: name,
        manager: MANAGER,
        sub: Subresource::Status,
    };
    let now = ids::now_rfc3339();
    system_update(state, &write, |crd| {
        let names = accepted_names(crd);
        let Some(status) = meta::ensure_map(crd, &["status"]) else {
            return false;
        };
        let mut changed = status.get("acceptedNames") != Some(&names);
        status.insert("acceptedNames".into(), names);
        let conditions = status.entry("conditions").or_insert_with(|| json!([]));
        let Some(list) = conditions.as_array_mut() else {
            return changed;
        };
        for (kind, reason, message) in [
            ("NamesAccepted", "NoConflicts", "no conflicts found"),
            (
                "Established",
                "InitialNamesAccepted",
                "the initial names have been accepted",
            ),
        ] {
            if !list.iter().any(|c| c.get("type") == Some(&json!(kind))) {
                list.push(condition(kind, reason, message, &now));
                changed = true;
            }
        }
        changed
    });
}

/// Marks a CRD for deletion the way its REST storage does (the cleanup
/// finalizer and a `Terminating` condition); returns the marked object.
pub(crate) fn mark_terminating(crd: &mut Value, now: &str) {
    let m = meta::metadata_mut(crd);
    m.entry("deletionTimestamp")
        .or_insert_with(|| Value::from(now));
    m.entry("deletionGracePeriodSeconds")
        .or_insert_with(|| json!(0));
    let finalizers = m.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(list) = finalizers.as_array_mut()
        && !list.contains(&json!(CLEANUP_FINALIZER))
    {
        list.push(json!(CLEANUP_FINALIZER));
    }
    if let Some(status) = meta::ensure_map(crd, &["status"]) {
        let conditions = status.entry("conditions").or_insert_with(|| json!([]));
        if let Some(list) = conditions.as_array_mut() {
            list.retain(|c| c.get("type") != Some(&json!("Terminating")));
            list.push(json!({
                "lastTransitionTime": now,
                "message": "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
                "reason": "InstanceDeletionPending",
                "status": "True",
                "type": "Terminating"
            }));
        }
    }
}

/// The finalizer controller's work: every custom resource of the CRD is
/// deleted (their dependents collected), then its resources stop being
/// served and open watches on them end.
pub(crate) fn remove_resources(state: &State, crd_name: &str) {
    let Some(storage) = state.registry.crd_storage(crd_name) else {
        return;
    };
    for gone in state.store.delete_all(storage) {
        gc::delete_dependents(state, meta::uid(&gone));
    }
    state.registry.retire_storage(storage);
}
