//! The names kube-controller-manager gives what it creates: template hashes
//! and ControllerRevision hashes, and the JSON they are computed over.
//!
//! - `HashControllerRevision` (`pkg/controller/history/controller_history.go`):
//!   FNV-32 over the revision's `data` bytes, then the collision count in
//!   decimal. StatefulSet revisions are named with it; this module computes it
//!   exactly (checked against `pkg/controller/statefulset/testdata/
//!   compatibility_revision_1.34.0.json`).
//! - `ComputeHash` (`pkg/controller/controller_utils.go`): FNV-32a over the
//!   pod template printed by go-spew (`hashutil.DeepHashObject`), then the
//!   collision count as 8 little-endian bytes. The pod-template-hash of a
//!   Deployment's ReplicaSets and the hash of a DaemonSet's revisions. The
//!   spew form prints every Go field of `PodTemplateSpec` with its type, which
//!   cannot be reproduced without the Go types, so the template's canonical
//!   JSON stands in for it: same steps otherwise, stable per template,
//!   different between templates, but not the real cluster's value.
//! - Both end in `rand.SafeEncodeString` (`staging/src/k8s.io/apimachinery/
//!   pkg/util/rand/rand.go`) of the decimal hash.

use serde_json::Value;

const FNV_OFFSET: u32 = 2_166_136_261;
const FNV_PRIME: u32 = 16_777_619;

/// FNV-1, 32 bits (`hash/fnv.New32`).
pub(crate) fn fnv32(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(FNV_OFFSET, |h, b| h.wrapping_mul(FNV_PRIME) ^ u32::from(*b))
}

/// FNV-1a, 32 bits (`hash/fnv.New32a`).
pub(crate) fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(FNV_OFFSET, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(FNV_PRIME)
    })
}

/// `rand.SafeEncodeString`: each character mapped into an alphabet without
/// vowels, so that no generated name spells a word.
pub(crate) fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.chars()
        .map(|c| ALPHANUMS[(c as usize) % ALPHANUMS.len()] as char)
        .collect()
}

/// `controller.ComputeHash` with the template's canonical JSON standing in
/// for go-spew's print (see the module docs).
pub(crate) fn compute_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut bytes = go_json(template).into_bytes();
    if let Some(count) = collision_count {
        // binary.LittleEndian.PutUint32 into an 8-byte buffer.
        bytes.extend_from_slice(&(count as u32).to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// `history.HashControllerRevision`: FNV-32 over the raw `data`, then the
/// probe (the collision count) in decimal.
pub(crate) fn hash_controller_revision(raw: &str, probe: Option<i64>) -> String {
    let mut bytes = raw.as_bytes().to_vec();
    if let Some(p) = probe {
        bytes.extend_from_slice(p.to_string().as_bytes());
    }
    safe_encode(&fnv32(&bytes).to_string())
}

/// A value as Go's `encoding/json` marshals it after a round trip through
/// `map[string]interface{}`: compact, map keys sorted, HTML characters
/// escaped, numbers as float64.
pub(crate) fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number(n)),
        Value::String(s) => write_go_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(k, out);
                out.push(':');
                write_go_json(&map[k], out);
            }
            out.push('}');
        }
    }
}

/// A JSON number as a float64 that Go prints: `'f'` format between 1e-6
/// and 1e21, exponent format (`1e+21`, `1.5e-7`) outside.
fn go_number(n: &serde_json::Number) -> String {
    let f = n.as_f64().unwrap_or(0.0);
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        return format!("{f}");
    }
    let sci = format!("{f:e}");
    match sci.split_once('e') {
        Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
        _ => sci,
    }
}

/// `encodeState.string` with HTML escaping on.
fn write_go_string(s: &str, out: &mut String) {
    const HEX: &[u8] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{0}'..='\u{1f}' => {
                let b = c as u8;
                out.push_str("\\u00");
                out.push(HEX[usize::from(b >> 4)] as char);
                out.push(HEX[usize::from(b & 0xF)] as char);
            }
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            other => out.push(other),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `data` of `pkg/controller/statefulset/testdata/
    /// compatibility_revision_1.34.0.json`, named `test-776999688b` by a
    /// 1.34 kube-controller-manager with collision count 0.
    const RAW_1_34: &str = r#"{"spec":{"template":{"$patch":"replace","metadata":{"annotations":{"test":"value"},"labels":{"app":"foo"}},"spec":{"containers":[{"image":"test","imagePullPolicy":"Always","name":"test","resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}],"dnsPolicy":"ClusterFirst","restartPolicy":"Always","schedulerName":"default-scheduler","securityContext":{},"terminationGracePeriodSeconds":30}}}}"#;

    #[test]
    fn controller_revision_hash_matches_kube_controller_manager() {
        assert_eq!(hash_controller_revision(RAW_1_34, Some(0)), "776999688b");
        // The 1.33 form of the same revision (`stateful_set_compatibility_test.go`):
        // the template still carried `"creationTimestamp":null`.
        let raw_1_33 = RAW_1_34.replace(
            r#""labels":{"app":"foo"}},"spec""#,
            r#""creationTimestamp":null,"labels":{"app":"foo"}},"spec""#,
        );
        assert_eq!(hash_controller_revision(&raw_1_33, Some(0)), "c77f6d978");
    }

    #[test]
    fn go_json_round_trips_the_recorded_revision_data() {
        let parsed: Value = serde_json::from_str(RAW_1_34).unwrap();
        assert_eq!(go_json(&parsed), RAW_1_34);
    }

    #[test]
    fn go_json_escapes_like_encoding_json() {
        let v = json!({"b": "<a&b>\u{2028}\n\u{1}", "a": [1, 2.5, 1e21, 1.5e-7, -0.25]});
        assert_eq!(
            go_json(&v),
            r#"{"a":[1,2.5,1e+21,1.5e-7,-0.25],"b":"\u003ca\u0026b\u003e\u2028\n\u0001"}"#
        );
    }

    #[test]
    fn safe_encoding_maps_digits_into_the_alphabet() {
        // hooked-8bccc855c in tests/transcripts/admission_review.json is the
        // encoding of the FNV sum 467774117.
        assert_eq!(safe_encode("467774117"), "8bccc855c");
    }

    #[test]
    fn template_hashes_are_stable_and_differ_between_templates() {
        let a = json!({"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}});
        let b = json!({"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "x:2"}]}});
        assert_eq!(compute_hash(&a, None), compute_hash(&a.clone(), None));
        assert_ne!(compute_hash(&a, None), compute_hash(&b, None));
        assert_ne!(compute_hash(&a, None), compute_hash(&a, Some(1)));
        assert!(
            compute_hash(&a, None)
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
    }
}
