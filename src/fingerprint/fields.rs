//! The fingerprint of a Kubernetes object of a configured kind
//! (`[sources.kubernetes.<name>]`, design §3 and §5b): the content of the fields
//! its configuration names by JSON pointer (RFC 6901), or by default everything
//! but `apiVersion`, `kind`, `metadata` and `status`.
//!
//! The encoding: for each selected field in ascending byte order of its pointer,
//! the pointer length-prefixed, then tag 0 (the field does not exist) or tag 1
//! and the field's canonical JSON length-prefixed (lengths 8-byte big-endian).
//! Canonical JSON is compact, with object members in ascending byte order of
//! their names and strings escaped as JSON requires (`"`, `\`, control
//! characters), whatever order the object came in. The default selection is one
//! field, the empty pointer, whose value is the object without those four
//! members.

use std::borrow::Cow;

use hmac::Mac;
use serde_json::{Map, Value};
use sha2::digest::Update;
use sha2::{Digest, Sha256};

use super::{
    Fingerprint, FingerprintKey, HMAC_SHA256_PREFIX, SHA256_PREFIX, TAG_ABSENT, TAG_PRESENT,
    prefixed_hex, push_length_prefixed,
};

/// Top-level members the default selection leaves out: the type (which
/// changes with the configured version, not with content), the metadata the
/// API server maintains, and the status a controller reports.
const NOT_CONTENT: [&str; 4] = ["apiVersion", "kind", "metadata", "status"];

/// Metadata members the API server writes on every change; never content,
/// even when a pointer selects the whole `/metadata`.
const SERVER_METADATA: [&str; 8] = [
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "generation",
    "managedFields",
    "resourceVersion",
    "selfLink",
    "uid",
];

/// Which fields of an object are its content: JSON pointers, kept sorted and
/// without duplicates so that the order they are configured in changes
/// nothing. Empty: the default (everything but `apiVersion`, `kind`,
/// `metadata` and `status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelection {
    pointers: Vec<String>,
}

/// Why a string is not a JSON pointer (RFC 6901).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PointerError {
    /// The pointer does not start with `/` (only the empty pointer may).
    #[error("{pointer:?} is not a JSON pointer: it must start with \"/\" (e.g. \"/spec\")")]
    NoLeadingSlash {
        /// The pointer as written.
        pointer: String,
    },
    /// A `~` is followed by something other than `0` (for `~`) or `1` (for `/`).
    #[error("{pointer:?} is not a JSON pointer: \"~\" must be followed by 0 or 1")]
    BadEscape {
        /// The pointer as written.
        pointer: String,
    },
}

/// Checks that `pointer` is a JSON pointer naming a field: it starts with `/`
/// and every `~` is written `~0` or `~1`. The empty pointer (the whole object)
/// is refused: the default selection is what an empty list means.
pub fn check_pointer(pointer: &str) -> Result<(), PointerError> {
    if !pointer.starts_with('/') {
        return Err(PointerError::NoLeadingSlash {
            pointer: pointer.to_owned(),
        });
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(PointerError::BadEscape {
                pointer: pointer.to_owned(),
            });
        }
    }
    Ok(())
}

impl FieldSelection {
    /// The fields at `pointers`; none: the default selection.
    pub fn new<S: Into<String>>(
        pointers: impl IntoIterator<Item = S>,
    ) -> Result<Self, PointerError> {
        let mut pointers: Vec<String> = pointers.into_iter().map(Into::into).collect();
        for pointer in &pointers {
            check_pointer(pointer)?;
        }
        pointers.sort_unstable();
        pointers.dedup();
        Ok(Self { pointers })
    }

    /// Whether this is the default selection.
    pub fn is_default(&self) -> bool {
        self.pointers.is_empty()
    }

    /// The selected fields of `object` (a whole object as the API server
    /// returns it), each with its pointer and its value (`None`: it does not
    /// exist), in the order they are encoded. Metadata the API server writes
    /// is left out of whatever a pointer selects.
    pub fn select<'a>(&'a self, object: &'a Value) -> Vec<(&'a str, Option<Cow<'a, Value>>)> {
        if self.pointers.is_empty() {
            return vec![("", Some(Cow::Owned(without(object, &NOT_CONTENT))))];
        }
        self.pointers
            .iter()
            .map(|pointer| (pointer.as_str(), selected(object, pointer)))
            .collect()
    }
}

/// The value at `pointer`, without the metadata the API server writes.
fn selected<'a>(object: &'a Value, pointer: &str) -> Option<Cow<'a, Value>> {
    let value = object.pointer(pointer)?;
    if pointer == "/metadata" {
        return Some(Cow::Owned(without(value, &SERVER_METADATA)));
    }
    if pointer.starts_with("/metadata/")
        && SERVER_METADATA
            .iter()
            .any(|member| pointer["/metadata/".len()..].split('/').next() == Some(*member))
    {
        return None;
    }
    Some(Cow::Borrowed(value))
}

/// `value` without the top-level `members` (unchanged when it is no object).
fn without(value: &Value, members: &[&str]) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(name, _)| !members.contains(&name.as_str()))
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect::<Map<String, Value>>(),
        ),
        other => other.clone(),
    }
}

/// nudge's fingerprint of the `selection` of `object`: `sha256-<hex>`, or
/// `hmac-sha256-<hex>` keyed with `key` when the content is secret.
pub fn native_fields(
    object: &Value,
    selection: &FieldSelection,
    key: Option<&FingerprintKey>,
) -> Fingerprint {
    let fields = selection.select(object);
    match key {
        None => {
            let mut hasher = Sha256::default();
            encode_fields(&mut hasher, &fields);
            prefixed_hex(SHA256_PREFIX, &hasher.finalize())
        }
        Some(key) => {
            let mut mac = key.mac();
            encode_fields(&mut mac, &fields);
            prefixed_hex(HMAC_SHA256_PREFIX, &mac.finalize().into_bytes())
        }
    }
}

/// Feeds the encoding of `fields` (already in pointer order) to `sink`.
fn encode_fields(sink: &mut impl Update, fields: &[(&str, Option<Cow<'_, Value>>)]) {
    let mut json = Vec::new();
    for (pointer, value) in fields {
        push_length_prefixed(sink, pointer.as_bytes());
        match value {
            None => sink.update(&[TAG_ABSENT]),
            Some(value) => {
                sink.update(&[TAG_PRESENT]);
                json.clear();
                canonical_json(value, &mut json);
                push_length_prefixed(sink, &json);
            }
        }
    }
}

/// Writes `value` as compact JSON with object members sorted by name (byte
/// order), so that the bytes depend on content only.
fn canonical_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical_json(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (name, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(&Value::String(name.clone()), out);
                out.push(b':');
                canonical_json(member, out);
            }
            out.push(b'}');
        }
        scalar => write_scalar(scalar, out),
    }
}

/// A string, number, boolean or null, as serde_json writes it.
fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Writing a scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn selection(pointers: &[&str]) -> FieldSelection {
        FieldSelection::new(pointers.iter().copied()).expect("valid pointers")
    }

    fn gizmo() -> Value {
        json!({
            "apiVersion": "example.com/v1", "kind": "Gizmo",
            "metadata": { "name": "g", "namespace": "ns", "resourceVersion": "7",
                          "labels": { "tier": "web" },
                          "managedFields": [{ "manager": "kubectl" }] },
            "spec": { "size": 3, "colour": "blue" },
            "data": { "a/b": "slash", "t~": "tilde" },
            "status": { "ready": true },
        })
    }

    #[test]
    fn pointers_must_start_with_a_slash_and_escape_tildes() {
        for good in ["/spec", "/data/a~1b", "/t~0", "/items/0", "/"] {
            assert_eq!(check_pointer(good), Ok(()), "{good}");
        }
        assert!(matches!(
            check_pointer("spec"),
            Err(PointerError::NoLeadingSlash { .. })
        ));
        assert!(matches!(
            check_pointer(""),
            Err(PointerError::NoLeadingSlash { .. })
        ));
        for bad in ["/a~", "/a~2", "/~x"] {
            assert!(
                matches!(check_pointer(bad), Err(PointerError::BadEscape { .. })),
                "{bad}"
            );
        }
        let error = FieldSelection::new(["/spec", "data"]).unwrap_err();
        assert!(error.to_string().contains("\"data\""), "{error}");
    }

    #[test]
    fn the_default_selection_is_the_object_without_type_metadata_and_status() {
        let (default, object) = (FieldSelection::default(), gizmo());
        let selected: Vec<(&str, Option<Value>)> = default
            .select(&object)
            .into_iter()
            .map(|(pointer, value)| (pointer, value.map(Cow::into_owned)))
            .collect();
        assert_eq!(
            selected,
            [(
                "",
                Some(json!({
                    "spec": { "size": 3, "colour": "blue" },
                    "data": { "a/b": "slash", "t~": "tilde" },
                }))
            )]
        );
    }

    #[test]
    fn pointers_select_fields_in_byte_order_unescaped_and_missing_ones_as_none() {
        let object = gizmo();
        let selection = selection(&[
            "/spec/size",
            "/data/a~1b",
            "/data/t~0",
            "/nope",
            "/spec/size",
        ]);
        let selected: Vec<(&str, Option<Value>)> = selection
            .select(&object)
            .into_iter()
            .map(|(pointer, value)| (pointer, value.map(Cow::into_owned)))
            .collect();
        assert_eq!(
            selected,
            [
                ("/data/a~1b", Some(json!("slash"))),
                ("/data/t~0", Some(json!("tilde"))),
                ("/nope", None),
                ("/spec/size", Some(json!(3))),
            ]
        );
    }

    #[test]
    fn metadata_the_api_server_writes_is_never_selected() {
        let object = gizmo();
        let whole = selection(&["/metadata"]);
        let selected = whole.select(&object);
        let metadata = selected[0].1.as_deref().expect("metadata exists");
        assert_eq!(metadata["labels"], json!({ "tier": "web" }));
        assert!(metadata.get("resourceVersion").is_none(), "{metadata}");
        assert!(metadata.get("managedFields").is_none(), "{metadata}");
        let version = selection(&["/metadata/resourceVersion"]);
        assert_eq!(version.select(&object)[0].1, None);
        let labels = selection(&["/metadata/labels/tier"]);
        assert_eq!(labels.select(&object)[0].1.as_deref(), Some(&json!("web")));
    }

    #[test]
    fn canonical_json_sorts_members_at_every_depth_and_is_compact() {
        let mut out = Vec::new();
        canonical_json(
            &json!({ "b": [ { "y": 1, "x": null } ], "a": "é\n\"", "ä": true, "Z": 1.5 }),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"Z":1.5,"a":"é\n\"","b":[{"x":null,"y":1}],"ä":true}"#
        );
    }

    #[test]
    fn only_the_selected_content_moves_the_fingerprint() {
        let spec = selection(&["/spec"]);
        let before = native_fields(&gizmo(), &spec, None);
        let mut relabelled = gizmo();
        relabelled["metadata"]["resourceVersion"] = json!("8");
        relabelled["data"]["a/b"] = json!("changed");
        relabelled["status"]["ready"] = json!(false);
        assert_eq!(native_fields(&relabelled, &spec, None), before);
        let mut resized = gizmo();
        resized["spec"]["size"] = json!(4);
        assert_ne!(native_fields(&resized, &spec, None), before);
        // Member order is not content.
        let reordered = json!({ "spec": { "colour": "blue", "size": 3 } });
        assert_eq!(native_fields(&reordered, &spec, None), before);
    }

    #[test]
    fn a_missing_field_differs_from_every_value_and_secret_content_is_keyed() {
        let nope = selection(&["/nope"]);
        let absent = native_fields(&json!({}), &nope, None);
        assert_ne!(absent, native_fields(&json!({ "nope": null }), &nope, None));
        assert_ne!(absent, native_fields(&json!({ "nope": "" }), &nope, None));
        let key = FingerprintKey::new(vec![7; 32]).unwrap();
        let keyed = native_fields(&gizmo(), &FieldSelection::default(), Some(&key));
        let text = keyed.as_digest().unwrap().into_owned();
        assert!(text.starts_with("hmac-sha256-"), "{text}");
        let plain = native_fields(&gizmo(), &FieldSelection::default(), None);
        assert!(plain.as_digest().unwrap().starts_with("sha256-"));
    }
}
