//! Small accessors for `metadata` of objects held as `serde_json::Value`.

use serde_json::{Map, Value};

/// `metadata` of an object, if it is a map.
pub(crate) fn metadata(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// `metadata`, created as an empty map when missing or not a map.
pub(crate) fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let Value::Object(root) = obj else {
        unreachable!("just made an object")
    };
    let entry = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// A string field of `metadata` (empty when missing).
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    metadata(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `metadata.name`.
pub(crate) fn name(obj: &Value) -> &str {
    meta_str(obj, "name")
}

/// `metadata.namespace`.
pub(crate) fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace")
}

/// `metadata.resourceVersion`.
pub(crate) fn resource_version(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion")
}

/// `metadata.uid`.
pub(crate) fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid")
}

/// Sets a string field of `metadata`.
pub(crate) fn set_meta(obj: &mut Value, field: &str, value: impl Into<Value>) {
    metadata_mut(obj).insert(field.to_string(), value.into());
}

/// A string map of `metadata` (`labels`, `annotations`) as pairs.
pub(crate) fn string_map<'a>(obj: &'a Value, field: &str) -> Option<&'a Map<String, Value>> {
    metadata(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
}

/// The label value for `key`, if the object has it.
pub(crate) fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    string_map(obj, "labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
}

/// Reads a nested value by a list of map keys.
pub(crate) fn get_path<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = obj;
    for p in path {
        cur = cur.as_object()?.get(*p)?;
    }
    Some(cur)
}

/// Reads a nested value by a list of map keys, mutably.
pub(crate) fn get_path_mut<'a>(obj: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    let mut cur = obj;
    for p in path {
        cur = cur.as_object_mut()?.get_mut(*p)?;
    }
    Some(cur)
}

/// Mutable nested map at `path`, creating empty maps on the way.
/// Returns `None` when a non-map value is in the way.
pub(crate) fn ensure_map<'a>(
    obj: &'a mut Value,
    path: &[&str],
) -> Option<&'a mut Map<String, Value>> {
    let mut cur = obj;
    for p in path {
        let m = cur.as_object_mut()?;
        cur = m
            .entry(p.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if cur.is_null() {
            *cur = Value::Object(Map::new());
        }
    }
    cur.as_object_mut()
}

/// The key of an object in the store: `namespace/name`, or `name` for
/// cluster-scoped resources. Byte order of these keys is etcd's list order.
pub(crate) fn store_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}
