//! Server-side apply: merging an applied configuration into the live object
//! by the schema (associative lists by key), and removing the fields a
//! manager stopped applying when nobody else owns them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::fieldset::{self, FieldSet};
use crate::schema::{Cursor, ListType, MapType};

/// Merges `config` into `live` (structured-merge-diff `Merge`), following
/// the schema from `cur` (the objects' root).
pub(crate) fn merge(live: &Value, config: &Value, cur: Cursor<'_>) -> Value {
    merge_node(Some(live), config, cur, true)
}

fn merge_node(lhs: Option<&Value>, rhs: &Value, cur: Cursor<'_>, root: bool) -> Value {
    match rhs {
        Value::Object(r) if root || cur.map_type() != MapType::Atomic => {
            let mut out: Map<String, Value> =
                lhs.and_then(Value::as_object).cloned().unwrap_or_default();
            for (k, rv) in r {
                let merged = merge_node(out.get(k), rv, cur.field(k), false);
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        Value::Array(r) => match cur.list_type() {
            ListType::Atomic => rhs.clone(),
            ListType::Set => {
                let mut out: Vec<Value> =
                    lhs.and_then(Value::as_array).cloned().unwrap_or_default();
                for v in r {
                    if !out.contains(v) {
                        out.push(v.clone());
                    }
                }
                Value::Array(out)
            }
            lt @ ListType::Map(_) => {
                let l = lhs
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                Value::Array(merge_associative(l, r, cur, lt))
            }
        },
        _ => rhs.clone(),
    }
}

fn pes(items: &[Value], cur: Cursor<'_>, lt: ListType<'_>) -> Vec<String> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| fieldset::item_element(v, cur, lt).unwrap_or_else(|| format!("i:{i}")))
        .collect()
}

/// The item order of structured-merge-diff's list merge: shared items in
/// the configuration's order, live-only items where they were, new items at
/// their position relative to shared ones.
fn merge_associative(
    lhs: &[Value],
    rhs: &[Value],
    cur: Cursor<'_>,
    lt: ListType<'_>,
) -> Vec<Value> {
    let lpes = pes(lhs, cur, lt);
    let rpes = pes(rhs, cur, lt);
    let lmap: BTreeMap<&str, &Value> = lpes.iter().map(String::as_str).zip(lhs).collect();
    let rmap: BTreeMap<&str, &Value> = rpes.iter().map(String::as_str).zip(rhs).collect();
    let shared: Vec<&str> = rpes
        .iter()
        .map(String::as_str)
        .filter(|p| lmap.contains_key(p))
        .collect();
    let mut next_shared = shared.into_iter().peekable();
    let mut merged_rhs: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::with_capacity(lhs.len() + rhs.len());
    let (mut li, mut ri) = (0, 0);
    let merge_item = |pe: &str| merge_node(lmap.get(pe).copied(), rmap[pe], cur.item(), false);
    while li < lpes.len() || ri < rpes.len() {
        if li < lpes.len() && ri < rpes.len() {
            let pe = lpes[li].as_str();
            if pe == rpes[ri] {
                merged_rhs.insert(pe);
                out.push(merge_item(pe));
                li += 1;
                ri += 1;
                if next_shared.peek() == Some(&pe) {
                    next_shared.next();
                }
                continue;
            }
            if rmap.contains_key(pe) && next_shared.peek().is_some_and(|n| *n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lpes.len() {
            let pe = lpes[li].as_str();
            if !rmap.contains_key(pe) {
                out.push(lhs[li].clone());
                li += 1;
                continue;
            } else if merged_rhs.contains(pe) {
                li += 1;
                continue;
            }
        }
        if ri < rpes.len() {
            let pe = rpes[ri].as_str();
            merged_rhs.insert(pe);
            out.push(merge_item(pe));
            ri += 1;
            if next_shared.peek() == Some(&pe) {
                next_shared.next();
            }
        }
    }
    out
}

/// Removes from `obj` every field of `last` (the manager's previous apply)
/// that nobody owns any more (`keep`: the union of all current sets).
pub(crate) fn prune(obj: &mut Value, last: &FieldSet, keep: &FieldSet, cur: Cursor<'_>) {
    for path in last.members() {
        if !keep.has_at_or_below(&path) {
            fieldset::remove_path(obj, &path, cur);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_by_key_and_keeps_live_items() {
        let live = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}], "args": ["x"]}});
        let cfg = json!({"spec": {"containers": [{"name": "b", "image": "3"}, {"name": "c", "image": "4"}], "args": ["y"]}});
        assert_eq!(
            merge(&live, &cfg, Cursor::Named("")),
            json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "3"}, {"name": "c", "image": "4"}], "args": ["y"]}})
        );
    }

    #[test]
    fn new_items_go_before_the_next_shared_item() {
        let live = json!({"env": [{"name": "A"}, {"name": "C"}]});
        let cfg = json!({"env": [{"name": "B"}, {"name": "C", "value": "c"}]});
        assert_eq!(
            merge(&live, &cfg, Cursor::Named("")),
            json!({"env": [{"name": "A"}, {"name": "B"}, {"name": "C", "value": "c"}]})
        );
    }

    #[test]
    fn prune_removes_only_unowned() {
        let mut obj = json!({"metadata": {"annotations": {"a": "1", "b": "2"}}});
        let last = FieldSet::from_fields_v1(
            &json!({"f:metadata": {"f:annotations": {"f:a": {}, "f:b": {}}}}),
        )
        .unwrap();
        let keep = FieldSet::from_fields_v1(&json!({"f:metadata": {"f:annotations": {"f:b": {}}}}))
            .unwrap();
        prune(&mut obj, &last, &keep, Cursor::Named(""));
        assert_eq!(obj, json!({"metadata": {"annotations": {"b": "2"}}}));
    }
}
