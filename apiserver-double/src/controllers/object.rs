//! Reading the fields controllers act on from objects held as JSON, with the
//! Go zero value for what is missing, and the owner references they write.

use serde_json::{Map, Value, json};

use crate::meta;
use crate::validation::label_selector_matches;

/// An `int32` field at `path` (`None` when missing or not an integer).
/// Values beyond `int32`, which the real apiserver refuses to decode, are
/// clamped, so that the controllers' arithmetic cannot overflow.
pub(crate) fn int_at(obj: &Value, path: &[&str]) -> Option<i64> {
    int64_at(obj, path).map(|v| v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)))
}

/// An `int32` field at `path`, 0 when missing (Go's zero value).
pub(crate) fn int_or_zero(obj: &Value, path: &[&str]) -> i64 {
    int_at(obj, path).unwrap_or(0)
}

/// An `int64` field at `path` (generations, revision numbers).
pub(crate) fn int64_at(obj: &Value, path: &[&str]) -> Option<i64> {
    meta::get_path(obj, path).and_then(Value::as_i64)
}

/// A string at `path`, empty when missing.
pub(crate) fn str_at<'a>(obj: &'a Value, path: &[&str]) -> &'a str {
    meta::get_path(obj, path)
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `metadata.generation`.
pub(crate) fn generation(obj: &Value) -> i64 {
    int64_at(obj, &["metadata", "generation"]).unwrap_or(0)
}

/// `status.observedGeneration`.
pub(crate) fn observed_generation(obj: &Value) -> i64 {
    int64_at(obj, &["status", "observedGeneration"]).unwrap_or(0)
}

/// Whether `metadata.deletionTimestamp` is set.
pub(crate) fn is_deleting(obj: &Value) -> bool {
    meta::metadata(obj).is_some_and(|m| m.contains_key("deletionTimestamp"))
}

/// `metadata.annotations[key]`.
pub(crate) fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    meta::string_map(obj, "annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// `metadata.annotations` as a mutable map, created when missing.
pub(crate) fn annotations_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    meta::ensure_map(obj, &["metadata", "annotations"])
}

/// `intstr.GetValueFromIntOrPercent` with `ValueOrDefault(v, 0)`: an
/// integer as is, `"N%"` as N percent of `total` rounded up or down; any
/// other string is an error.
pub(crate) fn int_or_percent(v: Option<&Value>, total: i64, round_up: bool) -> Result<i64, String> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| format!("invalid value for IntOrString: {n}")),
        Some(Value::String(s)) => {
            let Some(digits) = s.strip_suffix('%') else {
                return Err(format!(
                    "invalid value for IntOrString: invalid type: string is not a percentage: {s}"
                ));
            };
            let percent: i64 = digits
                .parse()
                .map_err(|_| format!("invalid value for IntOrString: {s}"))?;
            let scaled = percent as f64 * total as f64 / 100.0;
            Ok(if round_up {
                scaled.ceil() as i64
            } else {
                scaled.floor() as i64
            })
        }
        Some(other) => Err(format!("invalid value for IntOrString: {other}")),
    }
}

/// The owner reference with `controller: true`, if any.
pub(crate) fn controller_of(obj: &Value) -> Option<&Value> {
    meta::metadata(obj)?
        .get("ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller") == Some(&Value::Bool(true)))
}

/// Whether the controller reference of `obj` names `uid`
/// (`metav1.IsControlledBy`).
pub(crate) fn is_controlled_by(obj: &Value, uid: &str) -> bool {
    controller_of(obj).is_some_and(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
}

/// The name of the controller of `obj` when it is of `kind` in `apps/v1`.
pub(crate) fn controller_name<'a>(obj: &'a Value, kind: &str) -> Option<&'a str> {
    let r = controller_of(obj)?;
    let is = |k: &str, v: &str| r.get(k).and_then(Value::as_str) == Some(v);
    (is("kind", kind) && is("apiVersion", "apps/v1"))
        .then(|| r.get("name").and_then(Value::as_str))
        .flatten()
}

/// `metav1.NewControllerRef`: the owner reference a controller puts on what
/// it creates.
pub(crate) fn controller_ref(owner: &Value, kind: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": meta::name(owner),
        "uid": meta::uid(owner),
        "controller": true,
        "blockOwnerDeletion": true
    })
}

/// Whether `obj`'s labels match the label selector at `spec.selector` of
/// `owner` (a malformed selector matches nothing, as
/// `LabelSelectorAsSelector` fails).
pub(crate) fn selected_by(owner: &Value, obj: &Value) -> bool {
    meta::get_path(owner, &["spec", "selector"])
        .and_then(|s| label_selector_matches(s, meta::string_map(obj, "labels")))
        .unwrap_or(false)
}

/// Whether a selector selects everything (no `matchLabels`, no
/// `matchExpressions`): controllers refuse to act on such objects.
pub(crate) fn selects_everything(owner: &Value) -> bool {
    let Some(sel) = meta::get_path(owner, &["spec", "selector"]) else {
        return true;
    };
    let empty = |k: &str| {
        sel.get(k).is_none_or(|v| {
            v.is_null()
                || v.as_object().is_some_and(Map::is_empty)
                || v.as_array().is_some_and(Vec::is_empty)
        })
    };
    empty("matchLabels") && empty("matchExpressions")
}

/// `labels` with `key=value` added (`labelsutil.CloneAndAddLabel`).
pub(crate) fn with_label(labels: Option<&Value>, key: &str, value: &str) -> Value {
    let mut map = labels
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    map.insert(key.into(), Value::from(value));
    Value::Object(map)
}

/// Semantic equality of JSON values as `apiequality.Semantic.DeepEqual`
/// sees the Go structs: a missing field, `null`, an empty map and an empty
/// list are all the zero value.
pub(crate) fn semantic_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    let zero = |v: Option<&Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    };
    match (a, b) {
        _ if zero(a) && zero(b) => true,
        (Some(Value::Object(x)), Some(Value::Object(y))) => x
            .keys()
            .chain(y.keys())
            .all(|k| semantic_eq(x.get(k), y.get(k))),
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| semantic_eq(Some(p), Some(q)))
        }
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// [`semantic_eq`] with the field at `ignored` (a path of object keys) taken
/// as absent from both sides, without copying either.
pub(crate) fn semantic_eq_ignoring<'a>(
    a: Option<&'a Value>,
    b: Option<&'a Value>,
    ignored: &[&str],
) -> bool {
    let [key, rest @ ..] = ignored else {
        return semantic_eq(a, b);
    };
    // An object's keys that count: all, but the ignored one at the last step.
    let kept = |m: &'a Map<String, Value>| {
        m.keys()
            .filter(move |k| !(rest.is_empty() && k.as_str() == *key))
    };
    let zero = |v: Option<&'a Value>| match v {
        Some(Value::Object(m)) => kept(m).next().is_none(),
        other => semantic_eq(other, None),
    };
    match (a, b) {
        _ if zero(a) && zero(b) => true,
        (Some(Value::Object(x)), Some(Value::Object(y))) => kept(x).chain(kept(y)).all(|k| {
            if k.as_str() == *key {
                semantic_eq_ignoring(x.get(k), y.get(k), rest)
            } else {
                semantic_eq(x.get(k), y.get(k))
            }
        }),
        _ => semantic_eq(a, b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_or_percent_rounds_like_intstr() {
        assert_eq!(int_or_percent(Some(&json!("25%")), 1, true), Ok(1));
        assert_eq!(int_or_percent(Some(&json!("25%")), 1, false), Ok(0));
        assert_eq!(int_or_percent(Some(&json!("25%")), 10, false), Ok(2));
        assert_eq!(int_or_percent(Some(&json!(3)), 10, false), Ok(3));
        assert_eq!(int_or_percent(None, 10, true), Ok(0));
        assert!(int_or_percent(Some(&json!("3")), 10, true).is_err());
        assert!(int_or_percent(Some(&json!("x%")), 10, true).is_err());
    }

    #[test]
    fn an_ignored_field_compares_as_if_removed_from_copies() {
        let path = ["metadata", "labels", "hash"];
        // What it replaces: remove the field from copies, then compare.
        let removed = |v: &Value| {
            let mut v = v.clone();
            if let Some(labels) = v
                .pointer_mut("/metadata/labels")
                .and_then(Value::as_object_mut)
            {
                labels.remove("hash");
            }
            v
        };
        let values = [
            json!({"metadata": {"labels": {"app": "x", "hash": "1"}}, "spec": {"c": 1}}),
            json!({"metadata": {"labels": {"app": "x", "hash": "2"}}, "spec": {"c": 1}}),
            json!({"metadata": {"labels": {"app": "x"}}, "spec": {"c": 1}}),
            json!({"metadata": {"labels": {"app": "y", "hash": "1"}}, "spec": {"c": 1}}),
            json!({"metadata": {"labels": {"app": "x", "hash": "1"}}, "spec": {"c": 2}}),
            json!({"metadata": {"labels": {"hash": "1"}}}),
            json!({"metadata": {"labels": {}}}),
            json!({"metadata": {"labels": null}}),
            json!({"metadata": {}}),
            json!({"spec": {"hash": "1"}}),
            json!({"spec": {"hash": "2"}}),
            json!({}),
            json!(null),
            json!("hash"),
        ];
        for a in &values {
            for b in &values {
                assert_eq!(
                    semantic_eq_ignoring(Some(a), Some(b), &path),
                    semantic_eq(Some(&removed(a)), Some(&removed(b))),
                    "{a} vs {b}"
                );
            }
        }
        assert!(semantic_eq_ignoring(
            Some(&values[0]),
            Some(&values[1]),
            &path
        ));
        assert!(!semantic_eq_ignoring(
            Some(&values[0]),
            Some(&values[3]),
            &path
        ));
        assert!(!semantic_eq_ignoring(
            Some(&values[9]),
            Some(&values[10]),
            &path
        ));
    }

    #[test]
    fn semantic_equality_treats_empty_and_missing_alike() {
        let a = json!({"metadata": {"labels": {}}, "spec": {"x": []}});
        let b = json!({"metadata": {}, "spec": {}});
        assert!(semantic_eq(Some(&a), Some(&b)));
        let c = json!({"metadata": {"labels": {"a": "1"}}});
        assert!(!semantic_eq(Some(&a), Some(&c)));
    }

    #[test]
    fn controller_references_are_found_by_kind() {
        let owner = json!({"metadata": {"name": "d", "uid": "u1"}});
        let rs = json!({"metadata": {"ownerReferences": [controller_ref(&owner, "Deployment")]}});
        assert!(is_controlled_by(&rs, "u1"));
        assert_eq!(controller_name(&rs, "Deployment"), Some("d"));
        assert_eq!(controller_name(&rs, "StatefulSet"), None);
    }
}
