//! Response shapes: content negotiation (full objects or
//! `PartialObjectMetadata`), list bodies, and continue tokens.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value, json};

use crate::patch::go_quote_char;
use crate::resources::ResourceType;
use crate::status::ApiError;

/// What a response carries per object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The objects as stored.
    Full,
    /// `meta.k8s.io/v1` `PartialObjectMetadata`.
    Metadata,
}

/// What kind of answer the request expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// A single object.
    Object,
    /// A list.
    List,
    /// A watch stream.
    Watch,
}

/// Picks the first alternative of an `Accept` header the server can serve.
pub(crate) fn negotiate(accept: Option<&str>, target: Target) -> Result<Shape, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Shape::Full);
    };
    for alt in accept.split(',') {
        let mut parts = alt.split(';').map(str::trim);
        let mime = parts.next().unwrap_or("").to_ascii_lowercase();
        if !matches!(mime.as_str(), "application/json" | "application/*" | "*/*") {
            continue;
        }
        let mut r#as = None;
        let mut g = None;
        let mut v = None;
        for p in parts {
            if let Some((k, val)) = p.split_once('=') {
                match k.trim() {
                    "as" => r#as = Some(val.trim()),
                    "g" => g = Some(val.trim()),
                    "v" => v = Some(val.trim()),
                    _ => {}
                }
            }
        }
        match r#as {
            None => return Ok(Shape::Full),
            Some(kind) => {
                if g != Some("meta.k8s.io") || v != Some("v1") {
                    continue;
                }
                let wanted = match target {
                    Target::Object | Target::Watch => "PartialObjectMetadata",
                    Target::List => "PartialObjectMetadataList",
                };
                if kind == wanted {
                    return Ok(Shape::Metadata);
                }
            }
        }
    }
    Err(ApiError::not_acceptable())
}

/// `PartialObjectMetadata` of an object.
pub(crate) fn to_metadata(obj: &Value) -> Value {
    let metadata = obj
        .get("metadata")
        .map(|m| crate::managed::expand_metadata(m).into_owned())
        .unwrap_or_else(|| json!({}));
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": metadata
    })
}

/// An object as it leaves the store, serialized without copying it:
/// `managedFields` expanded from their stored form, custom resources with
/// the `apiVersion` of the version served (the `None` conversion strategy
/// changes nothing else), and the type meta dropped from items of typed
/// (built-in) lists.
struct Served<'a> {
    fields: &'a Map<String, Value>,
    /// Replaces `apiVersion` (custom resources).
    api_version: Option<&'a str>,
    /// Whether `apiVersion` and `kind` are written.
    type_meta: bool,
}

impl<'a> Served<'a> {
    fn new(
        rt: &ResourceType,
        fields: &'a Map<String, Value>,
        api_version: &'a str,
        list_item: bool,
    ) -> Self {
        Served {
            fields,
            api_version: rt.is_custom().then_some(api_version),
            type_meta: rt.is_custom() || !list_item,
        }
    }
}

impl Serialize for Served<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.fields {
            match k.as_str() {
                "apiVersion" | "kind" if !self.type_meta => {}
                "apiVersion" => match self.api_version {
                    Some(av) => m.serialize_entry(k, av)?,
                    None => m.serialize_entry(k, v)?,
                },
                "metadata" => m.serialize_entry(k, &crate::managed::expand_metadata(v))?,
                _ => m.serialize_entry(k, v)?,
            }
        }
        m.end()
    }
}

/// Serializes an object served through `rt` in the requested shape.
pub(crate) fn object_bytes(rt: &ResourceType, obj: &Value, shape: Shape) -> Vec<u8> {
    let api_version = rt.api_version();
    let r = match (shape, obj.as_object()) {
        (Shape::Full, Some(fields)) => {
            serde_json::to_vec(&Served::new(rt, fields, &api_version, false))
        }
        (Shape::Full, None) => serde_json::to_vec(obj),
        (Shape::Metadata, _) => serde_json::to_vec(&to_metadata(obj)),
    };
    r.unwrap_or_default()
}

/// Metadata of a list response.
pub(crate) struct ListMeta {
    /// `metadata.resourceVersion`.
    pub resource_version: u64,
    /// `metadata.continue`.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`.
    pub remaining: Option<u64>,
}

/// Serializes a list response.
pub(crate) fn list_bytes(
    rt: &ResourceType,
    items: &[&Value],
    meta: &ListMeta,
    shape: Shape,
) -> Vec<u8> {
    let mut lm = Map::new();
    if let Some(c) = &meta.continue_token {
        lm.insert("continue".into(), Value::from(c.clone()));
    }
    if let Some(r) = meta.remaining {
        lm.insert("remainingItemCount".into(), Value::from(r));
    }
    lm.insert(
        "resourceVersion".into(),
        Value::from(meta.resource_version.to_string()),
    );
    let (api_version, kind) = match shape {
        Shape::Full => (rt.api_version(), rt.list_kind.clone()),
        Shape::Metadata => (
            "meta.k8s.io/v1".to_string(),
            "PartialObjectMetadataList".to_string(),
        ),
    };
    let served_version = rt.api_version();
    let mut out = Vec::with_capacity(64 + items.len() * 512);
    out.extend_from_slice(b"{\"apiVersion\":");
    let _ = serde_json::to_writer(&mut out, &api_version);
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = match (shape, item.as_object()) {
            (Shape::Metadata, _) => serde_json::to_writer(&mut out, &to_metadata(item)),
            (Shape::Full, Some(fields)) => {
                serde_json::to_writer(&mut out, &Served::new(rt, fields, &served_version, true))
            }
            (Shape::Full, None) => serde_json::to_writer(&mut out, item),
        };
    }
    out.extend_from_slice(b"],\"kind\":");
    let _ = serde_json::to_writer(&mut out, &kind);
    out.extend_from_slice(b",\"metadata\":");
    let _ = serde_json::to_writer(&mut out, &Value::Object(lm));
    out.push(b'}');
    out
}

fn continue_engine() -> GeneralPurpose {
    GeneralPurpose::new(
        &alphabet::URL_SAFE,
        GeneralPurposeConfig::new()
            .with_encode_padding(false)
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::RequireNone),
    )
}

/// Encodes a continue token like the etcd3 storage does:
/// `{"v":"meta.k8s.io/v1","rv":<rv>,"start":"<key>\u0000"}` in unpadded base64url.
pub(crate) fn encode_continue(rv: u64, start: &str) -> String {
    // Field order as Go encodes the struct: v, rv, start.
    let start = Value::from(format!("{start}\u{0}"));
    continue_engine().encode(format!(
        "{{\"v\":\"meta.k8s.io/v1\",\"rv\":{rv},\"start\":{start}}}"
    ))
}

/// Decodes a continue token into `(resourceVersion, start key)`; errors are
/// the apiserver's 400s.
pub(crate) fn decode_continue(token: &str) -> Result<(u64, String), ApiError> {
    let bad = |why: String| {
        ApiError::bad_request(format!(
            "invalid continue token: continue key is not valid: {why}"
        ))
    };
    let bytes = continue_engine().decode(token).map_err(|e| {
        let at = match e {
            base64::DecodeError::InvalidByte(i, _)
            | base64::DecodeError::InvalidLastSymbol(i, _) => i,
            _ => token.len(),
        };
        bad(format!("illegal base64 data at input byte {at}"))
    })?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| {
        let first = bytes.iter().copied().find(|b| !b.is_ascii_whitespace());
        match first {
            Some(b) if !b"{[\"-0123456789tfn".contains(&b) => bad(format!(
                "invalid character {} looking for beginning of value",
                go_quote_char(b)
            )),
            _ => bad(e.to_string()),
        }
    })?;
    let v = doc.get("v").and_then(Value::as_str).unwrap_or("");
    if v != "meta.k8s.io/v1" {
        return Err(bad(format!(
            "server does not recognize this encoded version \"{v}\""
        )));
    }
    let rv = doc.get("rv").and_then(Value::as_u64).unwrap_or(0);
    if rv == 0 {
        return Err(bad(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
        ));
    }
    let start = doc.get("start").and_then(Value::as_str).unwrap_or("");
    if start.is_empty() {
        return Err(bad("encoded start key empty".into()));
    }
    let start = start.strip_suffix('\u{0}').unwrap_or(start);
    let start = start.strip_prefix('/').unwrap_or(start);
    Ok((rv, start.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_match_the_apiserver_encoding() {
        assert_eq!(
            encode_continue(4827, "/b"),
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDgyNywic3RhcnQiOiIvYlx1MDAwMCJ9"
        );
        assert_eq!(
            decode_continue(
                "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDgyNywic3RhcnQiOiIvcDFcdTAwMDAifQ"
            )
            .unwrap(),
            (4827, "p1".to_string())
        );
        let e = decode_continue("garbage").unwrap_err();
        assert_eq!(
            e.message,
            "invalid continue token: continue key is not valid: invalid character '\\u0081' looking for beginning of value"
        );
    }

    #[test]
    fn negotiation() {
        let meta = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        let meta_list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(negotiate(None, Target::Object).unwrap(), Shape::Full);
        assert_eq!(
            negotiate(Some(meta), Target::Object).unwrap(),
            Shape::Metadata
        );
        assert_eq!(
            negotiate(Some(meta_list), Target::List).unwrap(),
            Shape::Metadata
        );
        assert_eq!(negotiate(Some(meta), Target::List).unwrap_err().code, 406);
        assert_eq!(
            negotiate(Some(&format!("{meta}, application/json")), Target::List).unwrap(),
            Shape::Full
        );
        assert_eq!(
            negotiate(
                Some("application/json;as=Table;v=v1;g=meta.k8s.io, application/json"),
                Target::List
            )
            .unwrap(),
            Shape::Full
        );
        assert_eq!(
            negotiate(Some("application/yaml"), Target::Object)
                .unwrap_err()
                .code,
            406
        );
    }
}
