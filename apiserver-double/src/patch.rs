//! The non-apply patch types: JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902) and strategic merge patch.

use serde_json::{Map, Value};

use crate::schema;
use crate::status::{ApiError, ApiResult};

/// A PATCH content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type` header; `None` → 415.
    pub fn from_content_type(ct: Option<&str>) -> Option<Self> {
        let mime = ct?.split(';').next()?.trim().to_ascii_lowercase();
        match mime.as_str() {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Parses a JSON request body, answering 400 like the apiserver on failure.
pub(crate) fn parse_json(body: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(json_error_message(body, &e)))
}

/// Go-flavoured message for a JSON syntax error.
fn json_error_message(body: &[u8], e: &serde_json::Error) -> String {
    let first = body.iter().copied().find(|b| !b.is_ascii_whitespace());
    match first {
        None => "Object 'Kind' is missing in ''".to_string(),
        Some(b) if !b"{[\"-0123456789tfn".contains(&b) => format!(
            "couldn't get version/kind; json parse error: invalid character {} looking for beginning of value",
            go_quote_char(b)
        ),
        _ => format!("couldn't get version/kind; json parse error: {e}"),
    }
}

/// Go's `quoteChar` for a byte, as used in `encoding/json` errors.
pub(crate) fn go_quote_char(b: u8) -> String {
    match b {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        0x20..=0x7e => format!("'{}'", b as char),
        _ => {
            let c = char::from_u32(u32::from(b)).unwrap_or('\u{fffd}');
            if c.is_control() {
                format!("'\\u{:04x}'", u32::from(b))
            } else {
                format!("'{c}'")
            }
        }
    }
}

/// Applies a patch of a non-apply type to a copy of `live`.
pub(crate) fn apply_patch(live: &Value, kind: PatchType, body: &[u8]) -> ApiResult<Value> {
    match kind {
        PatchType::Merge => {
            let patch = parse_json(body)?;
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal non-object into a JSON merge patch",
                ));
            }
            let mut out = live.clone();
            json_patch::merge(&mut out, &patch);
            Ok(out)
        }
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("json: {e}")))?;
            let mut out = live.clone();
            json_patch::patch(&mut out, &ops).map_err(|_| ApiError::unprocessable_generic())?;
            Ok(out)
        }
        PatchType::Strategic => {
            let patch = parse_json(body)?;
            let Value::Object(p) = patch else {
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal non-object into a strategic merge patch",
                ));
            };
            let orig = live.as_object().cloned().unwrap_or_default();
            merge_map(&orig, &p)
                .map(Value::Object)
                .map_err(|e| match e {
                    SmpError::NoMergeKey => ApiError::unprocessable_generic(),
                    SmpError::BadPatch(m) => ApiError::bad_request(m),
                })
        }
        PatchType::Apply => Err(ApiError::internal("apply is not a plain patch")),
    }
}

#[derive(Debug)]
enum SmpError {
    NoMergeKey,
    BadPatch(String),
}

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";

fn merge_map(
    orig: &Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<Map<String, Value>, SmpError> {
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        return merge_map(&Map::new(), &without(patch, "$patch"));
    }
    let mut out = orig.clone();
    if let Some(retain) = patch.get("$retainKeys") {
        let keys = retain.as_array().ok_or_else(|| {
            SmpError::BadPatch("invalid patch: $retainKeys must be a list".into())
        })?;
        out.retain(|k, _| keys.iter().any(|r| r.as_str() == Some(k.as_str())));
    }
    for (k, pv) in patch {
        if k == "$patch" || k == "$retainKeys" || k.starts_with(SET_ORDER) {
            continue;
        }
        if let Some(field) = k.strip_prefix(DELETE_PRIMITIVE) {
            let remove = pv.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(items)) = out.get_mut(field) {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if pv.is_null() {
            out.remove(k);
            continue;
        }
        let order = patch
            .get(&format!("{SET_ORDER}{k}"))
            .and_then(Value::as_array);
        let merged = match (out.get(k), pv) {
            (_, Value::Object(p)) if p.get("$patch").and_then(Value::as_str) == Some("delete") => {
                out.remove(k);
                continue;
            }
            (Some(Value::Object(o)), Value::Object(p)) => Value::Object(merge_map(o, p)?),
            (_, Value::Object(p)) => Value::Object(merge_map(&Map::new(), p)?),
            (Some(Value::Array(o)), Value::Array(p)) => Value::Array(merge_list(k, o, p, order)?),
            (_, Value::Array(p)) => Value::Array(merge_list(k, &[], p, order)?),
            (_, scalar) => scalar.clone(),
        };
        out.insert(k.clone(), merged);
    }
    Ok(out)
}

fn without(m: &Map<String, Value>, key: &str) -> Map<String, Value> {
    let mut m = m.clone();
    m.remove(key);
    m
}

fn merge_list(
    field: &str,
    orig: &[Value],
    patch: &[Value],
    order: Option<&Vec<Value>>,
) -> Result<Vec<Value>, SmpError> {
    let Some(key) = schema::patch_merge_key(field) else {
        // Atomic: replaced, with directives removed from new maps.
        return patch
            .iter()
            .map(|v| match v {
                Value::Object(m) => merge_map(&Map::new(), m).map(Value::Object),
                other => Ok(other.clone()),
            })
            .collect();
    };
    if key.is_empty() {
        let patch_items: Vec<Value> = dedup(patch);
        let server_only: Vec<Value> = orig
            .iter()
            .filter(|v| !patch_items.contains(v))
            .cloned()
            .collect();
        let patch_items = sort_by_order(patch_items, order, |v| v.clone());
        return Ok(merge_sorted(server_only, patch_items, orig, |v| v.clone()));
    }
    let key_of = |v: &Value| v.get(key).cloned().unwrap_or(Value::Null);
    if patch
        .iter()
        .any(|p| p.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return patch
            .iter()
            .filter(|p| p.get("$patch").is_none())
            .map(|p| match p {
                Value::Object(m) => merge_map(&Map::new(), m).map(Value::Object),
                other => Ok(other.clone()),
            })
            .collect();
    }
    let mut remaining: Vec<Value> = orig.to_vec();
    let mut patch_items: Vec<Value> = Vec::new();
    for p in patch {
        let Value::Object(pm) = p else {
            return Err(SmpError::BadPatch(format!(
                "unable to find api field in struct for the list {field}: item is not a map"
            )));
        };
        let Some(kv) = pm.get(key).filter(|v| !v.is_null()) else {
            return Err(SmpError::NoMergeKey);
        };
        if pm.get("$patch").and_then(Value::as_str) == Some("delete") {
            remaining.retain(|o| o.get(key) != Some(kv));
            continue;
        }
        let merged = match orig.iter().find(|o| o.get(key) == Some(kv)) {
            Some(Value::Object(om)) => merge_map(om, pm)?,
            _ => merge_map(&Map::new(), pm)?,
        };
        patch_items.retain(|x: &Value| x.get(key) != Some(kv));
        patch_items.push(Value::Object(merged));
    }
    let patched_keys: Vec<Value> = patch_items.iter().map(key_of).collect();
    let server_only: Vec<Value> = remaining
        .into_iter()
        .filter(|o| !patched_keys.contains(&key_of(o)))
        .collect();
    let order_keys: Option<Vec<Value>> = order.map(|o| o.iter().map(key_of).collect());
    let patch_items = sort_by_order(patch_items, order_keys.as_ref(), key_of);
    Ok(merge_sorted(server_only, patch_items, orig, key_of))
}

fn dedup(items: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for i in items {
        if !out.contains(i) {
            out.push(i.clone());
        }
    }
    out
}

fn sort_by_order(
    mut items: Vec<Value>,
    order: Option<&Vec<Value>>,
    key: impl Fn(&Value) -> Value,
) -> Vec<Value> {
    if let Some(order) = order {
        items.sort_by_key(|i| {
            let k = key(i);
            order.iter().position(|o| *o == k).unwrap_or(usize::MAX)
        });
    }
    items
}

/// `mergeSortedSlice` of the apiserver: server-only items and patch items
/// interleaved by their order in the original list; new patch items first.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server: &[Value],
    key: impl Fn(&Value) -> Value,
) -> Vec<Value> {
    let idx = |v: &Value| {
        let k = key(v);
        server.iter().position(|s| key(s) == k)
    };
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut i, mut j) = (0, 0);
    while i < left.len() || j < right.len() {
        if i >= left.len() {
            out.push(right[j].clone());
            j += 1;
        } else if j >= right.len() {
            out.push(left[i].clone());
            i += 1;
        } else {
            match (idx(&left[i]), idx(&right[j])) {
                (Some(l), Some(r)) if l < r => {
                    out.push(left[i].clone());
                    i += 1;
                }
                _ => {
                    out.push(right[j].clone());
                    j += 1;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(orig: Value, patch: Value) -> Value {
        apply_patch(&orig, PatchType::Strategic, patch.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn strategic_merges_env_by_name_new_items_first() {
        let orig = json!({"spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]}});
        let out = smp(
            orig,
            json!({"spec": {"containers": [{"name": "c", "env": [{"name": "B", "value": "2"}]}]}}),
        );
        assert_eq!(
            out,
            json!({"spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]}]}})
        );
    }

    #[test]
    fn strategic_delete_and_replace_directives() {
        let orig = json!({"c": [{"name": "a"}, {"name": "b"}], "volumes": [{"name": "x"}, {"name": "y"}], "m": {"k": 1, "j": 2}});
        let out = smp(
            orig,
            json!({"volumes": [{"name": "x", "$patch": "delete"}], "m": {"$patch": "replace", "z": 3}, "c": [{"name": "z"}]}),
        );
        assert_eq!(
            out,
            json!({"c": [{"name": "z"}], "volumes": [{"name": "y"}], "m": {"z": 3}})
        );
    }

    #[test]
    fn strategic_orders_like_merge_sorted_slice() {
        let orig = json!({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C"}]});
        let out = smp(
            orig,
            json!({"env": [{"name": "C", "value": "3"}, {"name": "A", "value": "9"}]}),
        );
        assert_eq!(
            out,
            json!({"env": [{"name": "B", "value": "2"}, {"name": "C", "value": "3"}, {"name": "A", "value": "9"}]})
        );
    }

    #[test]
    fn strategic_missing_merge_key_is_422() {
        let e = apply_patch(
            &json!({}),
            PatchType::Strategic,
            br#"{"containers":[{"image":"x"}]}"#,
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
    }

    #[test]
    fn json_patch_test_failure_applies_nothing() {
        let live = json!({"spec": {"replicas": 1}});
        let e = apply_patch(
            &live,
            PatchType::Json,
            br#"[{"op":"test","path":"/spec/replicas","value":7},{"op":"replace","path":"/spec/replicas","value":2}]"#,
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
        let e = apply_patch(
            &live,
            PatchType::Json,
            br#"[{"op":"add","path":"/metadata/annotations/x","value":"1"}]"#,
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
    }

    #[test]
    fn merge_patch_null_deletes() {
        let out = apply_patch(
            &json!({"a": {"x": 1, "y": 2}}),
            PatchType::Merge,
            br#"{"a":{"x":null}}"#,
        )
        .unwrap();
        assert_eq!(out, json!({"a": {"y": 2}}));
    }

    #[test]
    fn bad_json_is_400_with_go_message() {
        let e = parse_json(b"garbage").unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "couldn't get version/kind; json parse error: invalid character 'g' looking for beginning of value"
        );
        assert_eq!(go_quote_char(0x81), "'\\u0081'");
    }
}
