//! What the apiserver's decoder does to a custom resource before admission:
//! coercion of `metadata` to `ObjectMeta`, pruning of fields the structural
//! schema does not declare (unless `x-kubernetes-preserve-unknown-fields`),
//! dropping nulls of non-nullable fields, and schema defaults.

use serde_json::{Map, Value};

use crate::structural::Structural;

/// The `ObjectMeta` fields a custom resource's metadata keeps.
const OBJECT_META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Removes undeclared fields; returns their paths (`spec.foo`), as reported
/// by strict field validation.
pub(crate) fn prune(schema: &Structural, obj: &mut Value) -> Vec<String> {
    let mut out = Vec::new();
    prune_node(schema, obj, "", &mut out);
    out
}

fn prune_node(s: &Structural, v: &mut Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => prune_object(s, m, path, out),
        Value::Array(items) => {
            if let Some(item_schema) = s.items.as_deref() {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_node(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn prune_object(s: &Structural, m: &mut Map<String, Value>, path: &str, out: &mut Vec<String>) {
    let mut drop = Vec::new();
    for (k, child) in m.iter_mut() {
        if s.resource && (k == "apiVersion" || k == "kind") {
            continue;
        }
        if s.resource && k == "metadata" {
            coerce_metadata(child, &child_path(path, k), out);
            continue;
        }
        match s.child(k) {
            Some(cs) => {
                if child.is_null() && !cs.nullable {
                    if cs.default.is_none() {
                        drop.push(k.clone());
                    }
                    continue;
                }
                prune_node(cs, child, &child_path(path, k), out);
            }
            None if s.preserve_unknown => {}
            None => {
                out.push(child_path(path, k));
                drop.push(k.clone());
            }
        }
    }
    for k in drop {
        m.remove(&k);
    }
}

/// `objectmeta.Coerce`: metadata keeps the `ObjectMeta` fields only, and
/// loses what a typed round trip drops (nulls, empty maps and lists).
fn coerce_metadata(meta: &mut Value, path: &str, out: &mut Vec<String>) {
    let Some(m) = meta.as_object_mut() else {
        return;
    };
    let unknown: Vec<String> = m
        .keys()
        .filter(|k| !OBJECT_META.contains(&k.as_str()))
        .cloned()
        .collect();
    for k in unknown {
        out.push(child_path(path, &k));
        m.remove(&k);
    }
    crate::strategy::normalize(meta);
}

/// Applies `default`s of declared fields missing (or null) in objects that
/// exist, recursively, including inside defaulted values.
pub(crate) fn apply_defaults(s: &Structural, v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, cs) in &s.properties {
                if s.resource && k == "metadata" {
                    continue;
                }
                if let Some(d) = &cs.default
                    && m.get(k).is_none_or(Value::is_null)
                {
                    m.insert(k.clone(), d.clone());
                }
            }
            for (k, child) in m.iter_mut() {
                if s.resource && matches!(k.as_str(), "metadata" | "apiVersion" | "kind") {
                    continue;
                }
                if let Some(cs) = s.child(k) {
                    apply_defaults(cs, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.items.as_deref() {
                for item in items.iter_mut() {
                    apply_defaults(is, item);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Structural {
        Structural::root(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "default": 1},
                "strategy": {"type": "object", "default": {}, "properties": {
                    "type": {"type": "string", "default": "Canary"}}},
                "containers": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "pull": {"type": "string", "default": "Always"}}}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "note": {"type": "string", "nullable": true}
            }}
        }}))
    }

    #[test]
    fn prunes_unknown_fields_and_non_nullable_nulls() {
        let mut o = json!({"apiVersion": "x/v1", "kind": "K",
            "metadata": {"name": "a", "labels": {}, "bogus": 1},
            "spec": {"replicas": null, "junk": true, "note": null,
                "containers": [{"name": "c", "what": 1}], "extra": {"any": {"thing": 1}}},
            "status": {"x": 1}});
        let pruned = prune(&schema(), &mut o);
        assert_eq!(
            pruned,
            [
                "metadata.bogus",
                "spec.containers[0].what",
                "spec.junk",
                "status"
            ]
        );
        assert_eq!(
            o,
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
                "spec": {"replicas": null, "note": null, "containers": [{"name": "c"}],
                    "extra": {"any": {"thing": 1}}}})
        );
    }

    #[test]
    fn defaults_fill_missing_fields_recursively() {
        let mut o = json!({"spec": {"replicas": null, "containers": [{"name": "c"}]}});
        apply_defaults(&schema(), &mut o);
        assert_eq!(
            o["spec"],
            json!({"replicas": 1, "strategy": {"type": "Canary"},
                   "containers": [{"name": "c", "pull": "Always"}]})
        );
    }
}
