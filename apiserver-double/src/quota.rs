//! ResourceQuota object counts, as kube-apiserver's `ResourceQuota`
//! admission plugin and kube-controller-manager's quota controller keep
//! them, for what nudge's tests need: a create that would exceed a quota's
//! `hard` count of its resource (`configmaps`, `secrets`, or the generic
//! `count/<resource>[.<group>]`) is refused with 403 Forbidden, worded as
//! the plugin words it; the quota's `status` (`hard`, `used`) is written
//! when the quota is created or changed and after each admitted create.
//!
//! Where the double differs: usage is counted from the objects that exist
//! at the create, while the apiserver reads the quota's `status.used`, which
//! the quota controller lowers only some time after a delete. Both refuse
//! exactly the creates that exceed `hard` once the controller has caught
//! up. Other resources (cpu, memory, pods' requests) are not counted.

use serde_json::{Map, Value, json};

use crate::handlers::{self, SystemWrite};
use crate::managed::Subresource;
use crate::meta;
use crate::resources::{Family, ResourceType};
use crate::server::State;
use crate::status::ApiError;

/// Field manager of the quota controller's status writes.
const MANAGER: &str = "kube-controller-manager";

/// The names under which a quota counts objects of `rt`: the generic
/// `count/<resource>[.<group>]` and, for the core kinds that have one, the
/// legacy name.
fn counted_as(rt: &ResourceType) -> Vec<String> {
    let mut names = vec![format!("count/{}", rt.group_resource())];
    if rt.group.is_empty() && matches!(rt.family, Family::ConfigMap | Family::Secret) {
        names.push(rt.plural.clone());
    }
    names
}

/// The quotas of `namespace`, when the double serves them.
fn quotas(state: &State, namespace: &str) -> Option<(std::sync::Arc<ResourceType>, Vec<Value>)> {
    let rt = state.registry.by_kind("v1", "ResourceQuota")?;
    let prefix = meta::store_key(Some(namespace), "");
    let items: Vec<Value> = state
        .store
        .list(rt.storage, &prefix)
        .into_iter()
        .map(|q| (*q).clone())
        .collect();
    Some((rt, items))
}

/// How many objects of `rt` exist in `namespace`.
fn count(state: &State, rt: &ResourceType, namespace: &str) -> u64 {
    let prefix = meta::store_key(Some(namespace), "");
    state.store.list(rt.storage, &prefix).len() as u64
}

fn hard_of(quota: &Value) -> Map<String, Value> {
    meta::get_path(quota, &["spec", "hard"])
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// A quantity of objects (`"2"`); `None` when it is not a plain count.
fn quantity(value: &Value) -> Option<u64> {
    value.as_str()?.parse().ok().or_else(|| value.as_u64())
}

/// The admission check of creating `obj` of `rt`: 403 when one more object
/// would exceed a quota of its namespace.
pub(crate) fn admit_create(state: &State, rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    if !rt.namespaced || rt.family == Family::ResourceQuota {
        return Ok(());
    }
    let namespace = meta::namespace(obj);
    let Some((_, quotas)) = quotas(state, namespace) else {
        return Ok(());
    };
    let names = counted_as(rt);
    for quota in &quotas {
        let hard = hard_of(quota);
        let mut requested = Vec::new();
        let mut used = Vec::new();
        let mut limited = Vec::new();
        let existing = count(state, rt, namespace);
        for name in names.iter().filter(|n| hard.contains_key(n.as_str())) {
            let Some(limit) = hard.get(name).and_then(quantity) else {
                continue;
            };
            if existing + 1 > limit {
                requested.push(format!("{name}=1"));
                used.push(format!("{name}={existing}"));
                limited.push(format!("{name}={limit}"));
            }
        }
        if !requested.is_empty() {
            return Err(ApiError::forbidden(
                rt,
                meta::name(obj),
                &format!(
                    "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                    meta::name(quota),
                    requested.join(","),
                    used.join(","),
                    limited.join(",")
                ),
            ));
        }
    }
    Ok(())
}

/// Writes the `status` of every quota in `namespace`: `hard` as the spec
/// says, `used` counted for what the double counts.
pub(crate) fn refresh(state: &State, namespace: &str) {
    let Some((quota_rt, quotas)) = quotas(state, namespace) else {
        return;
    };
    for quota in quotas {
        let hard = hard_of(&quota);
        let mut used = Map::new();
        for (_, rt) in state.registry.all() {
            if !rt.namespaced {
                continue;
            }
            for name in counted_as(&rt) {
                if hard.contains_key(&name) {
                    used.insert(name, Value::from(count(state, &rt, namespace).to_string()));
                }
            }
        }
        let status = json!({"hard": hard, "used": used});
        let key = meta::store_key(Some(namespace), meta::name(&quota));
        let write = SystemWrite {
            rt: &quota_rt,
            key: &key,
            manager: MANAGER,
            sub: Subresource::Status,
        };
        let _ = handlers::system_update(state, &write, |object| {
            if object.get("status") == Some(&status) {
                return false;
            }
            object["status"] = status.clone();
            true
        });
    }
}
