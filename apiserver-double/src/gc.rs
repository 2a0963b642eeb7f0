//! The garbage collector's work, done synchronously when an owner is
//! deleted (the real one runs in kube-controller-manager, asynchronously):
//! dependents are the objects whose `metadata.ownerReferences` name the
//! owner's UID.
//!
//! - Background and Foreground deletion delete every dependent that has no
//!   other owner left; a dependent with another existing owner only loses
//!   the reference to the deleted one (as `attemptToDeleteItem` does).
//! - Orphan deletion removes the references to the owner from its dependents.
//!
//! An owner of a kind the double does not serve counts as existing, so its
//! dependents are never collected by mistake.

use serde_json::Value;

use crate::handlers::{self, SystemWrite};
use crate::managed::Subresource;
use crate::meta;
use crate::server::State;

/// Field manager of the collector's writes.
const MANAGER: &str = "kube-controller-manager";

/// Deletes (or detaches) the dependents of a deleted owner, recursively.
pub(crate) fn delete_dependents(state: &State, owner_uid: &str) {
    for (storage, key) in state.store.dependents(owner_uid) {
        let Some(rt) = state.registry.by_storage(storage) else {
            continue;
        };
        let Some(obj) = state.store.get(storage, &key) else {
            continue;
        };
        if has_other_owner(state, &obj, owner_uid) {
            detach(state, storage, &key, owner_uid);
            continue;
        }
        let uid = meta::uid(&obj).to_string();
        if handlers::delete_now(state, &rt, &key) {
            delete_dependents(state, &uid);
        }
    }
}

/// Removes the references to a deleted owner from its dependents.
pub(crate) fn orphan_dependents(state: &State, owner_uid: &str) {
    for (storage, key) in state.store.dependents(owner_uid) {
        detach(state, storage, &key, owner_uid);
    }
}

/// Drops the owner references naming `owner_uid` from one object.
fn detach(state: &State, storage: usize, key: &str, owner_uid: &str) {
    let Some(rt) = state.registry.by_storage(storage) else {
        return;
    };
    let write = SystemWrite {
        rt: &rt,
        key,
        manager: MANAGER,
        sub: Subresource::Main,
    };
    let _ = handlers::system_update(state, &write, |obj| {
        let m = meta::metadata_mut(obj);
        let Some(Value::Array(refs)) = m.get_mut("ownerReferences") else {
            return false;
        };
        let before = refs.len();
        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
        let changed = refs.len() != before;
        if refs.is_empty() {
            m.remove("ownerReferences");
        }
        changed
    });
}

/// Whether an object has an owner besides `owner_uid` that still exists.
fn has_other_owner(state: &State, obj: &Value, owner_uid: &str) -> bool {
    meta::metadata(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid))
        .any(|r| owner_exists(state, r, meta::namespace(obj)))
}

/// Whether the object an owner reference points at exists (same UID).
fn owner_exists(state: &State, reference: &Value, namespace: &str) -> bool {
    let s = |k: &str| reference.get(k).and_then(Value::as_str).unwrap_or("");
    let Some(rt) = state.registry.by_kind(s("apiVersion"), s("kind")) else {
        // Not served here: assume it exists rather than collect wrongly.
        return true;
    };
    let key = meta::store_key(rt.namespaced.then_some(namespace), s("name"));
    state
        .store
        .get(rt.storage, &key)
        .is_some_and(|o| meta::uid(&o) == s("uid"))
}
