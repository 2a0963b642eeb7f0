//! Field sets in the `FieldsV1` format of structured-merge-diff: the unit of
//! ownership of server-side apply and `metadata.managedFields`.
//!
//! A set is a tree keyed by path elements in their `FieldsV1` spelling:
//! `f:<field>`, `k:{<key fields as JSON>}`, `v:<value as JSON>`, `i:<index>`.
//! A node is a *member* when the path itself is in the set (`.` in `FieldsV1`
//! when it also has children).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::schema::{Cursor, ListType, MapType};

/// A set of field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

/// A path: a list of `FieldsV1` path elements.
pub(crate) type Path = Vec<String>;

impl FieldSet {
    /// Adds a path.
    pub fn insert(&mut self, path: &[String]) {
        let mut node = self;
        for pe in path {
            node = node.children.entry(pe.clone()).or_default();
        }
        node.member = true;
    }

    /// Whether the path is a member.
    #[cfg(test)]
    pub fn contains(&self, path: &[String]) -> bool {
        let mut node = self;
        for pe in path {
            match node.children.get(pe) {
                Some(n) => node = n,
                None => return false,
            }
        }
        node.member
    }

    /// Whether the path or anything below it is a member.
    pub fn has_at_or_below(&self, path: &[String]) -> bool {
        let mut node = self;
        for pe in path {
            match node.children.get(pe) {
                Some(n) => node = n,
                None => return false,
            }
        }
        !node.is_empty()
    }

    /// Removes a path and everything below it.
    pub fn remove_tree(&mut self, path: &[String]) {
        let Some((last, parents)) = path.split_last() else {
            *self = FieldSet::default();
            return;
        };
        let mut node = self;
        for pe in parents {
            match node.children.get_mut(pe) {
                Some(n) => node = n,
                None => return,
            }
        }
        node.children.remove(last);
    }

    /// Whether the set has no member.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    /// Members of either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.union_in(other);
        out
    }

    fn union_in(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (k, v) in &other.children {
            self.children.entry(k.clone()).or_default().union_in(v);
        }
    }

    /// Members of `self` that are not members of `other` (member-wise, not
    /// recursive: removing a parent leaves its children).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => v.difference(o),
                None => v.clone(),
            };
            if !d.is_empty() {
                out.children.insert(k.clone(), d);
            }
        }
        out
    }

    /// Members of both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            if let Some(o) = other.children.get(k) {
                let i = v.intersection(o);
                if !i.is_empty() {
                    out.children.insert(k.clone(), i);
                }
            }
        }
        out
    }

    /// Every member path, parents before children, in key order.
    pub fn members(&self) -> Vec<Path> {
        let mut out = Vec::new();
        let mut prefix = Vec::new();
        self.collect(&mut prefix, &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (k, v) in &self.children {
            prefix.push(k.clone());
            v.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The `FieldsV1` JSON form.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, v) in &self.children {
            if !v.is_empty() {
                m.insert(k.clone(), v.to_fields_v1());
            }
        }
        Value::Object(m)
    }

    /// Parses the `FieldsV1` JSON form.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| "FieldsV1 must be a JSON object".to_string())?;
        let mut out = FieldSet::default();
        for (k, child) in obj {
            if k == "." {
                out.member = true;
                continue;
            }
            if !(k.starts_with("f:")
                || k.starts_with("k:")
                || k.starts_with("v:")
                || k.starts_with("i:"))
            {
                return Err(format!("unexpected path element {k:?}"));
            }
            let mut c = FieldSet::from_fields_v1(child)?;
            if c.children.is_empty() {
                c.member = true;
            }
            out.children.insert(k.clone(), c);
        }
        Ok(out)
    }
}

/// The three sets of a comparison between an old and a new object.
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    /// Paths present only in the new object.
    pub added: FieldSet,
    /// Leaves whose value changed.
    pub modified: FieldSet,
    /// Paths present only in the old object.
    pub removed: FieldSet,
}

/// Compares two objects the way structured-merge-diff does, following
/// the schema from `cur` (the object's root).
pub(crate) fn compare(old: &Value, new: &Value, cur: Cursor<'_>) -> Comparison {
    let mut out = Comparison::default();
    let mut path = Vec::new();
    compare_node(Some(old), Some(new), cur, &mut path, &mut out);
    out
}

fn is_emptyish(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

fn compare_leaf(lhs: Option<&Value>, rhs: Option<&Value>, path: &Path, out: &mut Comparison) {
    match (lhs, rhs) {
        (None, Some(_)) => out.added.insert(path),
        (Some(_), None) => out.removed.insert(path),
        (Some(a), Some(b)) if a != b => out.modified.insert(path),
        _ => {}
    }
}

fn compare_node<'a>(
    lhs: Option<&'a Value>,
    rhs: Option<&'a Value>,
    cur: Cursor<'a>,
    path: &mut Path,
    out: &mut Comparison,
) {
    let is_obj = |v: Option<&Value>| matches!(v, Some(Value::Object(_)));
    let is_arr = |v: Option<&Value>| matches!(v, Some(Value::Array(_)));
    let is_scalar =
        |v: Option<&Value>| matches!(v, Some(v) if !v.is_null() && !v.is_object() && !v.is_array());
    let map_node = (is_obj(lhs) || is_obj(rhs))
        && !is_arr(lhs)
        && !is_arr(rhs)
        && !is_scalar(lhs)
        && !is_scalar(rhs)
        && (path.is_empty() || cur.map_type() != MapType::Atomic);
    let list_node = (is_arr(lhs) || is_arr(rhs))
        && !is_obj(lhs)
        && !is_obj(rhs)
        && !is_scalar(lhs)
        && !is_scalar(rhs)
        && cur.list_type() != ListType::Atomic;
    if !(map_node || list_node) || (!path.is_empty() && is_emptyish(lhs) && is_emptyish(rhs)) {
        compare_leaf(lhs, rhs, path, out);
        return;
    }
    if !path.is_empty() {
        match (lhs, rhs) {
            (None, Some(_)) => out.added.insert(path),
            (Some(_), None) => out.removed.insert(path),
            _ => {}
        }
    }
    if map_node {
        let lm = lhs.and_then(Value::as_object);
        let rm = rhs.and_then(Value::as_object);
        let keys: BTreeSet<&String> = lm
            .into_iter()
            .flat_map(|m| m.keys())
            .chain(rm.into_iter().flat_map(|m| m.keys()))
            .collect();
        for k in keys {
            path.push(format!("f:{k}"));
            compare_node(
                lm.and_then(|m| m.get(k)),
                rm.and_then(|m| m.get(k)),
                cur.field(k),
                path,
                out,
            );
            path.pop();
        }
    } else {
        let lt = cur.list_type();
        let li = index_items(lhs, cur, lt);
        let ri = index_items(rhs, cur, lt);
        let keys: BTreeSet<&String> = li.keys().chain(ri.keys()).collect();
        for k in keys {
            path.push(k.clone());
            let (l, r) = (li.get(k).copied(), ri.get(k).copied());
            if lt == ListType::Set {
                compare_leaf(l, r, path, out);
            } else {
                compare_node(l, r, cur.item(), path, out);
            }
            path.pop();
        }
    }
}

/// Items of an associative list or set by path element (later duplicates win).
fn index_items<'a>(
    list: Option<&'a Value>,
    cur: Cursor<'_>,
    lt: ListType<'_>,
) -> BTreeMap<String, &'a Value> {
    let mut out = BTreeMap::new();
    if let Some(Value::Array(items)) = list {
        for (i, item) in items.iter().enumerate() {
            let pe = item_element(item, cur, lt).unwrap_or_else(|| format!("i:{i}"));
            out.insert(pe, item);
        }
    }
    out
}

/// The path element of an item of the list at `cur`: `k:{...}` for
/// associative lists, `v:...` for sets. `None` when an associative item
/// lacks a key field.
pub(crate) fn item_element(item: &Value, cur: Cursor<'_>, lt: ListType<'_>) -> Option<String> {
    match lt {
        ListType::Set => Some(format!("v:{}", item)),
        ListType::Map(keys) => {
            let obj = item.as_object()?;
            let mut parts = Vec::new();
            for k in keys.names() {
                let v = match obj.get(k) {
                    Some(v) if !v.is_null() => v.clone(),
                    _ => cur.key_default(k)?,
                };
                parts.push(format!("{}:{}", Value::from(k), v));
            }
            Some(format!("k:{{{}}}", parts.join(",")))
        }
        ListType::Atomic => None,
    }
}

/// The set of fields an applied configuration specifies.
pub(crate) fn from_applied(config: &Value, cur: Cursor<'_>) -> Result<FieldSet, String> {
    let mut out = FieldSet::default();
    let mut path = Vec::new();
    applied_node(config, cur, &mut path, &mut out)?;
    Ok(out)
}

fn applied_node<'a>(
    v: &'a Value,
    cur: Cursor<'a>,
    path: &mut Path,
    out: &mut FieldSet,
) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            if !path.is_empty() && cur.map_type() == MapType::Atomic {
                out.insert(path);
                return Ok(());
            }
            if !path.is_empty() && m.is_empty() {
                out.insert(path);
            }
            for (k, child) in m {
                path.push(format!("f:{k}"));
                if child.is_null() || !cur.declares(k) {
                    out.insert(path);
                }
                if !child.is_null() {
                    applied_node(child, cur.field(k), path, out)?;
                }
                path.pop();
            }
        }
        Value::Array(items) => match cur.list_type() {
            ListType::Atomic => out.insert(path),
            lt @ (ListType::Set | ListType::Map(_)) => {
                let mut seen = BTreeSet::new();
                for item in items {
                    let pe = item_element(item, cur, lt).ok_or_else(|| {
                        format!(
                            "{}: associative list with keys has an element that omits key field",
                            path_string(path)
                        )
                    })?;
                    if !seen.insert(pe.clone()) {
                        return Err(format!(
                            "{}: duplicate entries for key {}",
                            path_string(path),
                            element_string(&pe)
                        ));
                    }
                    path.push(pe);
                    out.insert(path);
                    if matches!(lt, ListType::Map(_)) {
                        applied_node(item, cur.item(), path, out)?;
                    }
                    path.pop();
                }
            }
        },
        _ => out.insert(path),
    }
    Ok(())
}

/// A path as structured-merge-diff prints it, e.g.
/// `.spec.template.spec.containers[name="c"].image`.
pub(crate) fn path_string(path: &[String]) -> String {
    path.iter().map(|pe| element_string(pe)).collect()
}

fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => Value::from(s.as_str()).to_string(),
        other => other.to_string(),
    }
}

fn element_string(pe: &str) -> String {
    if let Some(f) = pe.strip_prefix("f:") {
        format!(".{f}")
    } else if let Some(k) = pe.strip_prefix("k:") {
        let parts = serde_json::from_str::<Map<String, Value>>(k)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", go_value(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_else(|_| k.to_string());
        format!("[{parts}]")
    } else if let Some(v) = pe.strip_prefix("v:") {
        let shown = serde_json::from_str::<Value>(v)
            .map(|v| go_value(&v))
            .unwrap_or_else(|_| v.to_string());
        format!("[={shown}]")
    } else if let Some(i) = pe.strip_prefix("i:") {
        format!("[{i}]")
    } else {
        pe.to_string()
    }
}

/// Removes the value at `path` from an object whose schema root is `cur`.
/// Returns whether something was removed.
pub(crate) fn remove_path(obj: &mut Value, path: &[String], cur: Cursor<'_>) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut node = obj;
    let mut cur = cur;
    for pe in parents {
        let Some(f) = pe.strip_prefix("f:") else {
            let Some(items) = node.as_array_mut() else {
                return false;
            };
            let Some(i) = find_item(items, pe, cur) else {
                return false;
            };
            node = &mut items[i];
            cur = cur.item();
            continue;
        };
        let Some(next) = node.as_object_mut().and_then(|m| m.get_mut(f)) else {
            return false;
        };
        node = next;
        cur = cur.field(f);
    }
    if let Some(f) = last.strip_prefix("f:") {
        return node.as_object_mut().and_then(|m| m.remove(f)).is_some();
    }
    let Some(items) = node.as_array_mut() else {
        return false;
    };
    if let Some(i) = find_item(items, last, cur) {
        items.remove(i);
        true
    } else {
        false
    }
}

/// The index of the item a path element names in the list at `cur`.
fn find_item(items: &[Value], pe: &str, cur: Cursor<'_>) -> Option<usize> {
    if let Some(i) = pe.strip_prefix("i:") {
        return i.parse::<usize>().ok().filter(|i| *i < items.len());
    }
    let lt = cur.list_type();
    items
        .iter()
        .position(|item| item_element(item, cur, lt).as_deref() == Some(pe))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_roundtrip() {
        let v = json!({
            "f:data": {".": {}, "f:k": {}},
            "f:metadata": {"f:labels": {".": {}, "f:tier": {}}}
        });
        let s = FieldSet::from_fields_v1(&v).unwrap();
        assert!(s.contains(&["f:data".into()]));
        assert!(s.contains(&["f:data".into(), "f:k".into()]));
        assert!(!s.contains(&["f:metadata".into()]));
        assert_eq!(s.to_fields_v1(), v);
    }

    #[test]
    fn create_of_configmap_matches_transcript() {
        let skeleton = json!({"metadata": {}});
        let obj = json!({"metadata": {"labels": {"tier": "x"}}, "data": {"k": "v1"}});
        let c = compare(&skeleton, &obj, Cursor::Named(""));
        assert_eq!(
            c.added.to_fields_v1(),
            json!({"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:tier": {}}}})
        );
    }

    #[test]
    fn associative_lists_use_keys() {
        let old = json!({"spec": {"containers": null}});
        let new = json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}], "ports": [{"containerPort": 80}]}]}});
        let c = compare(&old, &new, Cursor::Named(""));
        assert_eq!(
            c.added.to_fields_v1(),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {
                ".": {},
                "f:env": {".": {}, "k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}},
                "f:name": {},
                "f:ports": {".": {}, "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}
            }}}})
        );
    }

    #[test]
    fn applied_sets_have_no_dot_for_struct_fields() {
        let cfg = json!({"apiVersion": "apps/v1", "spec": {"template": {"metadata": {"annotations": {"a": "1"}}}}});
        let s = from_applied(&cfg, Cursor::Named("")).unwrap();
        assert_eq!(
            s.to_fields_v1(),
            json!({"f:apiVersion": {}, "f:spec": {"f:template": {"f:metadata": {"f:annotations": {"f:a": {}}}}}})
        );
    }

    #[test]
    fn paths_print_like_structured_merge_diff() {
        let p: Path = vec![
            "f:spec".into(),
            "k:{\"containerPort\":80,\"protocol\":\"TCP\"}".into(),
            "f:a.b/c".into(),
            "v:\"x\"".into(),
        ];
        assert_eq!(
            path_string(&p),
            ".spec[containerPort=80,protocol=\"TCP\"].a.b/c[=\"x\"]"
        );
    }

    #[test]
    fn remove_list_item_by_key() {
        let mut o = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert!(remove_path(
            &mut o,
            &[
                "f:spec".into(),
                "f:containers".into(),
                "k:{\"name\":\"a\"}".into()
            ],
            Cursor::Named("")
        ));
        assert_eq!(o, json!({"spec": {"containers": [{"name": "b"}]}}));
        assert!(!remove_path(
            &mut o,
            &["f:spec".into(), "f:nope".into()],
            Cursor::Named("")
        ));
    }

    #[test]
    fn difference_is_memberwise() {
        let mut a = FieldSet::default();
        a.insert(&["f:x".into()]);
        a.insert(&["f:x".into(), "f:y".into()]);
        let mut b = FieldSet::default();
        b.insert(&["f:x".into()]);
        let d = a.difference(&b);
        assert!(!d.contains(&["f:x".into()]));
        assert!(d.contains(&["f:x".into(), "f:y".into()]));
    }
}
