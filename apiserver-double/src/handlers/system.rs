//! Writes made by control-plane components rather than clients (the
//! garbage collector, the CRD controllers, kube-controller-manager): no
//! admission, but managed fields and resourceVersions as for any write.

use std::sync::Arc;

use serde_json::Value;

use super::write::{MAX_RETRIES, commit};
use crate::ids;
use crate::managed::{self, Subresource};
use crate::meta;
use crate::resources::ResourceType;
use crate::schema::Cursor;
use crate::server::State;
use crate::status::{ApiError, ApiResult};
use crate::store::WriteError;
use crate::{strategy, validation};

/// Which object a system write changes, and as whom.
pub(crate) struct SystemWrite<'a> {
    /// The resource of the object.
    pub rt: &'a ResourceType,
    /// Its store key.
    pub key: &'a str,
    /// The field manager recorded in `managedFields`.
    pub manager: &'a str,
    /// The subresource written (decides the `managedFields` entry).
    pub sub: Subresource,
}

/// Applies `change` to the live object (retrying on conflicts) and stores the
/// result when `change` reports a change. Returns the stored object, `None`
/// when the object is gone.
pub(crate) fn system_update(
    state: &State,
    w: &SystemWrite<'_>,
    mut change: impl FnMut(&mut Value) -> bool,
) -> Option<Arc<Value>> {
    for _ in 0..MAX_RETRIES {
        let live = state.store.get(w.rt.storage, w.key)?;
        let mut new = (*live).clone();
        if !change(&mut new) {
            return Some(live);
        }
        let mut managers = managed::decode(&live).ok().flatten().unwrap_or_default();
        managed::update(
            &mut managers,
            &managed::strip_ignored(&live, w.rt, w.sub),
            &managed::strip_ignored(&new, w.rt, w.sub),
            Cursor::root(w.rt),
            w.manager,
            w.sub,
            &w.rt.api_version(),
            &ids::now_rfc3339(),
        );
        managed::encode(&mut new, &managers);
        match commit(state, w.rt, w.key, &live, new, false) {
            Ok(stored) => return Some(stored),
            Err(WriteError::Conflict) => continue,
            Err(_) => return None,
        }
    }
    None
}

/// Replaces an object the way a controller's PUT (or PUT of `/status`) does:
/// only while it is still at the resourceVersion `new` carries, through the
/// kind's defaults, update preparation (generation, the fields the endpoint
/// may not change) and validation. A PUT that changes nothing stores
/// nothing.
pub(crate) fn system_replace(
    state: &State,
    w: &SystemWrite<'_>,
    mut new: Value,
) -> ApiResult<Arc<Value>> {
    let name = meta::name(&new).to_string();
    let live = state
        .store
        .get(w.rt.storage, w.key)
        .ok_or_else(|| ApiError::not_found(w.rt, &name))?;
    if meta::resource_version(&new) != meta::resource_version(&live) {
        return Err(ApiError::conflict_modified(w.rt, &name));
    }
    meta::metadata_mut(&mut new).remove("managedFields");
    strategy::decode(w.rt, &mut new)?;
    strategy::normalize_for(w.rt, &mut new);
    strategy::apply_defaults(w.rt, &mut new);
    strategy::prepare_update(w.rt, &live, &mut new, w.sub);
    let mut managers = managed::decode(&live).ok().flatten().unwrap_or_default();
    managed::update(
        &mut managers,
        &managed::strip_ignored(&live, w.rt, w.sub),
        &managed::strip_ignored(&new, w.rt, w.sub),
        Cursor::root(w.rt),
        w.manager,
        w.sub,
        &w.rt.api_version(),
        &ids::now_rfc3339(),
    );
    managed::encode(&mut new, &managers);
    validation::validate_update(w.rt, &live, &new)?;
    commit(state, w.rt, w.key, &live, new, false).map_err(|e| match e {
        WriteError::Conflict => ApiError::conflict_modified(w.rt, &name),
        _ => ApiError::not_found(w.rt, &name),
    })
}

/// Deletes an object the way the garbage collector does: at once, unless it
/// has finalizers (then it is only marked with a `deletionTimestamp`).
/// Returns whether it is gone.
pub(crate) fn delete_now(state: &State, rt: &ResourceType, key: &str) -> bool {
    for _ in 0..MAX_RETRIES {
        let Some(live) = state.store.get(rt.storage, key) else {
            return true;
        };
        if has_finalizers(&live) {
            let w = SystemWrite {
                rt,
                key,
                manager: "kube-controller-manager",
                sub: Subresource::Main,
            };
            system_update(state, &w, |o| mark_deleted(o, &ids::now_rfc3339()));
            return false;
        }
        match state
            .store
            .delete(rt.storage, key, Some(meta::resource_version(&live)))
        {
            Ok(_) | Err(WriteError::NotFound) => return true,
            Err(_) => continue,
        }
    }
    false
}

/// Whether `metadata.finalizers` is non-empty.
pub(crate) fn has_finalizers(obj: &Value) -> bool {
    meta::metadata(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// Sets `deletionTimestamp` (and a zero grace period) unless already set.
/// Returns whether the object changed.
pub(crate) fn mark_deleted(obj: &mut Value, now: &str) -> bool {
    let m = meta::metadata_mut(obj);
    if m.contains_key("deletionTimestamp") {
        return false;
    }
    m.insert("deletionTimestamp".into(), Value::from(now));
    m.insert("deletionGracePeriodSeconds".into(), Value::from(0));
    true
}
