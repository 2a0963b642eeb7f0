//! The checks a version's `openAPIV3Schema` must pass before a CRD is
//! accepted: `ValidateCustomResourceDefinitionOpenAPISchema` (supported
//! keywords, list and map markers) and `ValidateStructural` (every node
//! typed, metadata restricted, no `additionalProperties` at the root), with
//! the apiserver's paths (`...openAPIV3Schema.properties[spec].type`) and
//! messages. Errors are sorted by message, as `ValidateStructural` sorts its
//! own (Go walks properties in random order anyway).

use serde_json::{Map, Value, json};

use crate::pattern::{PatternError, Regex};
use crate::status::Cause;
use crate::validation::show;

/// Where a node sits, for the messages that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

struct Checker {
    causes: Vec<Cause>,
}

impl Checker {
    fn push(&mut self, reason: &'static str, field: String, message: String) {
        self.causes.push(Cause {
            reason,
            message,
            field,
        });
    }

    fn required(&mut self, field: String, detail: &str) {
        self.push(
            "FieldValueRequired",
            field,
            format!("Required value: {detail}"),
        );
    }

    fn forbidden(&mut self, field: String, detail: &str) {
        self.push("FieldValueForbidden", field, format!("Forbidden: {detail}"));
    }

    fn invalid(&mut self, field: String, value: &Value, detail: &str) {
        self.push(
            "FieldValueInvalid",
            field,
            format!("Invalid value: {}: {detail}", show(value)),
        );
    }
}

/// Checks one version's schema; `path` is e.g.
/// `spec.versions[0].schema.openAPIV3Schema`.
pub(crate) fn check(schema: &Value, path: &str) -> Vec<Cause> {
    let mut c = Checker { causes: Vec::new() };
    if schema.get("nullable") == Some(&Value::Bool(true)) {
        c.forbidden(
            format!("{path}.nullable"),
            "nullable cannot be true at the root",
        );
    }
    node(&mut c, schema, path, Level::Root, false);
    c.causes.sort_by_key(Cause::summary);
    c.causes
}

fn node(c: &mut Checker, s: &Value, path: &str, level: Level, in_meta: bool) {
    let Some(m) = s.as_object() else { return };
    let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
    keywords(c, m, path, ty, in_meta);
    markers(c, m, path, ty);
    structural(c, m, path, ty, level);
    let embedded = flag(m, "x-kubernetes-embedded-resource");
    let is_resource = level == Level::Root || embedded;
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            let child = format!("{path}.properties[{k}]");
            let meta = in_meta
                || (is_resource && matches!(k.as_str(), "metadata" | "kind" | "apiVersion"));
            if level == Level::Root && meta && p.get("default").is_some() {
                c.forbidden(
                    format!("{child}.default"),
                    &format!("must not be set in top-level {k}"),
                );
            }
            node(c, p, &child, Level::Field, meta);
        }
    }
    if let Some(ap @ Value::Object(_)) = m.get("additionalProperties") {
        node(
            c,
            ap,
            &format!("{path}.additionalProperties"),
            Level::Field,
            in_meta,
        );
    }
    if let Some(items @ Value::Object(_)) = m.get("items") {
        node(c, items, &format!("{path}.items"), Level::Item, in_meta);
    }
    let int_or_string = json!([{"type": "integer"}, {"type": "string"}]);
    let skip_any_of = m.get("anyOf") == Some(&int_or_string);
    for junctor in ["allOf", "anyOf", "oneOf"] {
        if junctor == "anyOf" && skip_any_of {
            continue;
        }
        for (i, sub) in m
            .get(junctor)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            // The IntOrString exception: `allOf: [{anyOf: [integer, string]}, ...]`.
            let sub = match sub {
                Value::Object(o)
                    if junctor == "allOf" && i == 0 && o.get("anyOf") == Some(&int_or_string) =>
                {
                    let mut o = o.clone();
                    o.remove("anyOf");
                    Value::Object(o)
                }
                other => other.clone(),
            };
            nested(c, &sub, &format!("{path}.{junctor}[{i}]"));
        }
    }
    if let Some(not) = m.get("not") {
        nested(c, not, &format!("{path}.not"));
    }
}

fn flag(m: &Map<String, Value>, k: &str) -> bool {
    m.get(k).and_then(Value::as_bool).unwrap_or(false)
}

/// `specStandardValidatorV3.validate` and the keyword rules.
fn keywords(c: &mut Checker, m: &Map<String, Value>, path: &str, ty: &str, in_meta: bool) {
    if ty == "null" {
        c.forbidden(
            format!("{path}.type"),
            "type cannot be set to null, use nullable as an alternative",
        );
    } else if !ty.is_empty() && !TYPES.contains(&ty) {
        let supported = TYPES.map(|t| format!("\"{t}\"")).join(", ");
        c.push(
            "FieldValueNotSupported",
            format!("{path}.type"),
            format!("Unsupported value: \"{ty}\": supported values: {supported}"),
        );
    }
    for (k, what) in [
        ("id", "id is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("definitions", "definitions is not supported"),
        ("dependencies", "dependencies is not supported"),
        ("$ref", "$ref is not supported"),
    ] {
        if m.get(k).is_some_and(|v| !v.is_null()) {
            c.forbidden(format!("{path}.{k}"), what);
        }
    }
    if m.get("items").is_some_and(Value::is_array) {
        c.forbidden(
            format!("{path}.items"),
            "items must be a schema object and not an array",
        );
    }
    if in_meta && flag(m, "x-kubernetes-embedded-resource") {
        c.forbidden(
            format!("{path}.x-kubernetes-embedded-resource"),
            "must not be used inside of resource meta",
        );
    }
    if flag(m, "uniqueItems") {
        c.forbidden(
            format!("{path}.uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        );
    }
    if let Some(ap) = m.get("additionalProperties")
        && m.get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty())
        && (ap.is_object() || ap == &Value::Bool(false))
    {
        c.forbidden(
            format!("{path}.additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        );
    }
    if m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        c.invalid(
            format!("{path}.x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(false),
            "must be true or undefined",
        );
    }
    if let Some(p) = m.get("pattern").and_then(Value::as_str)
        && let Err(PatternError::Invalid(e)) = Regex::new(p)
    {
        c.invalid(
            format!("{path}.pattern"),
            &Value::from(p),
            &format!("must be a valid regular expression, but isn't: {e}"),
        );
    }
}

/// `x-kubernetes-map-type`, `-list-type` and `-list-map-keys`.
fn markers(c: &mut Checker, m: &Map<String, Value>, path: &str, ty: &str) {
    let type_needed = |c: &mut Checker, want: &str, marker: &str| {
        let detail = format!("must be {want} if x-kubernetes-{marker} is specified");
        if ty.is_empty() {
            c.required(format!("{path}.type"), &detail);
        } else if ty != want {
            c.invalid(format!("{path}.type"), &Value::from(ty), &detail);
        }
    };
    if let Some(mt) = m.get("x-kubernetes-map-type").and_then(Value::as_str) {
        type_needed(c, "object", "map-type");
        if mt != "atomic" && mt != "granular" {
            c.push(
                "FieldValueNotSupported",
                format!("{path}.x-kubernetes-map-type"),
                format!("Unsupported value: \"{mt}\": supported values: \"atomic\", \"granular\""),
            );
        }
    }
    let list_type = m.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys: Vec<&str> = m
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(lt) = list_type {
        type_needed(c, "array", "list-type");
        if !matches!(lt, "atomic" | "set" | "map") {
            c.push(
                "FieldValueNotSupported",
                format!("{path}.x-kubernetes-list-type"),
                format!(
                    "Unsupported value: \"{lt}\": supported values: \"atomic\", \"set\", \"map\""
                ),
            );
        }
    }
    if !keys.is_empty() {
        match list_type {
            None => c.required(
                format!("{path}.x-kubernetes-list-type"),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            ),
            Some("map") => {}
            Some(lt) => c.invalid(
                format!("{path}.x-kubernetes-list-type"),
                &Value::from(lt),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            ),
        }
    }
    let items = m.get("items").and_then(Value::as_object);
    match list_type {
        Some("map") => map_list(c, m, path, &keys, items),
        Some("set") => set_list(c, path, items),
        _ => {}
    }
}

fn map_list(
    c: &mut Checker,
    m: &Map<String, Value>,
    path: &str,
    keys: &[&str],
    items: Option<&Map<String, Value>>,
) {
    if keys.is_empty() {
        c.required(
            format!("{path}.x-kubernetes-list-map-keys"),
            "must not be empty if x-kubernetes-list-type is map",
        );
    }
    let Some(items) = items else {
        c.required(
            format!("{path}.items"),
            "must have a schema if x-kubernetes-list-type is map",
        );
        return;
    };
    let item_type = items.get("type").and_then(Value::as_str).unwrap_or("");
    if item_type != "object" {
        c.invalid(
            format!("{path}.items.type"),
            &Value::from(item_type),
            "must be object if parent array's x-kubernetes-list-type is map",
        );
        return;
    }
    if flag(items, "nullable") {
        c.forbidden(
            format!("{path}.items.nullable"),
            "cannot be nullable when x-kubernetes-list-type is map",
        );
    }
    let props = items.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = items
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let keys_value = m
        .get("x-kubernetes-list-map-keys")
        .cloned()
        .unwrap_or_default();
    let mut seen = Vec::new();
    for k in keys {
        match props.and_then(|p| p.get(*k)) {
            Some(p) => {
                let t = p.get("type").and_then(Value::as_str).unwrap_or("");
                if t == "array" || t == "object" {
                    c.invalid(
                        format!("{path}.items.properties[{k}].type"),
                        &Value::from(item_type),
                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                    );
                }
                if !required.contains(k) && p.get("default").is_none() {
                    c.required(
                        format!("{path}.items.properties[{k}].default"),
                        "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                    );
                }
                if p.get("nullable") == Some(&Value::Bool(true)) {
                    c.forbidden(
                        format!("{path}.items.properties[{k}].nullable"),
                        "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                    );
                }
            }
            None => c.invalid(
                format!("{path}.x-kubernetes-list-map-keys"),
                &keys_value,
                "entries must all be names of item properties",
            ),
        }
        if seen.contains(k) {
            c.invalid(
                format!("{path}.x-kubernetes-list-map-keys"),
                &keys_value,
                "must not contain duplicate entries",
            );
        }
        seen.push(*k);
    }
}

fn set_list(c: &mut Checker, path: &str, items: Option<&Map<String, Value>>) {
    let Some(items) = items else { return };
    if flag(items, "nullable") {
        c.forbidden(
            format!("{path}.items.nullable"),
            "cannot be nullable when x-kubernetes-list-type is set",
        );
    }
    match items.get("type").and_then(Value::as_str) {
        Some("array")
            if items
                .get("x-kubernetes-list-type")
                .and_then(Value::as_str)
                .is_some_and(|t| t != "atomic") =>
        {
            c.invalid(
                format!("{path}.items.x-kubernetes-list-type"),
                items.get("x-kubernetes-list-type").unwrap_or(&Value::Null),
                "must be atomic as item of a list with x-kubernetes-list-type=set",
            );
        }
        Some("object")
            if items.get("x-kubernetes-map-type").and_then(Value::as_str) != Some("atomic") =>
        {
            c.invalid(
                format!("{path}.items.x-kubernetes-map-type"),
                items.get("x-kubernetes-list-type").unwrap_or(&Value::Null),
                "must be atomic as item of a list with x-kubernetes-list-type=set",
            );
        }
        _ => {}
    }
}

/// `validateStructuralInvariants`.
fn structural(c: &mut Checker, m: &Map<String, Value>, path: &str, ty: &str, level: Level) {
    let embedded = flag(m, "x-kubernetes-embedded-resource");
    let int_or_string = flag(m, "x-kubernetes-int-or-string");
    let preserve = flag(m, "x-kubernetes-preserve-unknown-fields");
    if ty == "array" && m.get("items").is_none() {
        c.required(format!("{path}.items"), "must be specified");
    }
    if m.get("additionalProperties").is_some() && level == Level::Root {
        c.forbidden(
            format!("{path}.additionalProperties"),
            "must not be used at the root",
        );
    }
    if int_or_string && preserve {
        c.invalid(
            format!("{path}.x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        );
    }
    if embedded && ty != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        if ty.is_empty() {
            c.required(format!("{path}.type"), detail);
        } else {
            c.invalid(format!("{path}.type"), &Value::from(ty), detail);
        }
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        c.required(format!("{path}.type"), detail);
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        c.invalid(
            format!("{path}.type"),
            &Value::from(ty),
            "must be object at the root",
        );
    }
    let props = m.get("properties").and_then(Value::as_object);
    if level == Level::Root || embedded {
        for k in ["kind", "apiVersion"] {
            if let Some(p) = props.and_then(|p| p.get(k)) {
                let t = p.get("type").and_then(Value::as_str).unwrap_or("");
                if t != "string" {
                    c.invalid(
                        format!("{path}.properties[{k}].type"),
                        &Value::from(t),
                        "must be string",
                    );
                }
            }
        }
    }
    if let Some(meta) = props.and_then(|p| p.get("metadata")) {
        metadata(
            c,
            meta,
            &format!("{path}.properties[metadata]"),
            level,
            embedded,
        );
    }
    if embedded && !preserve && props.is_none_or(Map::is_empty) {
        c.required(
            format!("{path}.properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        );
    }
}

/// `validateStructuralMetadataInvariants`: `metadata` may only restrict
/// `name` and `generateName`.
fn metadata(c: &mut Checker, meta: &Value, path: &str, level: Level, embedded: bool) {
    let ty = meta.get("type").and_then(Value::as_str).unwrap_or("");
    if (level == Level::Root || embedded) && ty != "object" {
        c.invalid(format!("{path}.type"), &Value::from(ty), "must be object");
    }
    if level != Level::Root {
        return;
    }
    // What `validateStructuralMetadataInvariants` clears before requiring
    // an otherwise empty schema.
    let allowed = |k: &str| matches!(k, "type" | "properties" | "default");
    let props_ok = meta
        .get("properties")
        .and_then(Value::as_object)
        .is_none_or(|p| p.keys().all(|k| k == "name" || k == "generateName"));
    let other_keys = meta
        .as_object()
        .is_some_and(|m| m.keys().any(|k| !allowed(k)));
    if !props_ok || other_keys {
        c.forbidden(
            path.to_string(),
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        );
    }
}

/// `validateNestedValueValidation`: what may not appear under `allOf`,
/// `anyOf`, `oneOf` or `not`.
fn nested(c: &mut Checker, s: &Value, path: &str) {
    let Some(m) = s.as_object() else { return };
    for (k, what) in [
        ("type", "must be empty to be structural"),
        ("additionalProperties", "must be undefined to be structural"),
        ("default", "must be undefined to be structural"),
        ("title", "must be empty to be structural"),
        ("description", "must be empty to be structural"),
        (
            "x-kubernetes-list-map-keys",
            "must be empty to be structural",
        ),
        (
            "x-kubernetes-list-type",
            "must be undefined to be structural",
        ),
        (
            "x-kubernetes-map-type",
            "must be undefined to be structural",
        ),
        ("x-kubernetes-validations", "must be empty to be structural"),
    ] {
        if m.contains_key(k) {
            c.forbidden(format!("{path}.{k}"), what);
        }
    }
    for (k, what) in [
        ("nullable", "must be false to be structural"),
        (
            "x-kubernetes-preserve-unknown-fields",
            "must be false to be structural",
        ),
        (
            "x-kubernetes-embedded-resource",
            "must be false to be structural",
        ),
        (
            "x-kubernetes-int-or-string",
            "must be false to be structural",
        ),
    ] {
        if flag(m, k) {
            c.forbidden(format!("{path}.{k}"), what);
        }
    }
    if let Some(props) = m.get("properties").and_then(Value::as_object) {
        if props.contains_key("metadata") {
            c.forbidden(
                format!("{path}.properties[metadata]"),
                "must not be specified in a nested context",
            );
        }
        for (k, p) in props {
            nested(c, p, &format!("{path}.properties[{k}]"));
        }
    }
    if let Some(items) = m.get("items") {
        nested(c, items, &format!("{path}.items"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "spec.versions[0].schema.openAPIV3Schema";

    fn msgs(schema: Value) -> Vec<String> {
        check(&schema, ROOT).iter().map(Cause::summary).collect()
    }

    #[test]
    fn accepts_typical_schemas() {
        assert!(msgs(json!({"x-kubernetes-preserve-unknown-fields": true})).is_empty());
        assert!(
            msgs(json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "containers": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "required": ["name"],
                            "properties": {"name": {"type": "string"}}}},
                    "port": {"x-kubernetes-int-or-string": true,
                        "anyOf": [{"type": "integer"}, {"type": "string"}]},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
                }},
                "metadata": {"type": "object"}
            }}))
            .is_empty()
        );
    }

    #[test]
    fn reports_like_the_apiserver() {
        assert_eq!(
            msgs(json!({})),
            [format!(
                "{ROOT}.type: Required value: must not be empty at the root"
            )]
        );
        assert_eq!(
            msgs(json!({"type": "string"})),
            [format!(
                "{ROOT}.type: Invalid value: \"string\": must be object at the root"
            )]
        );
        assert_eq!(
            msgs(
                json!({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "array"}}}}})
            ),
            [
                format!(
                    "{ROOT}.properties[spec].properties[a].items: Required value: must be specified"
                ),
                format!(
                    "{ROOT}.properties[spec].type: Required value: must not be empty for specified object fields"
                ),
            ]
        );
        assert_eq!(
            msgs(
                json!({"type": "object", "properties": {"l": {"type": "array",
                "x-kubernetes-list-type": "map", "items": {"type": "object",
                "properties": {"k": {"type": "string"}}}}}})
            ),
            [format!(
                "{ROOT}.properties[l].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
            )]
        );
        assert_eq!(
            msgs(
                json!({"type": "object", "properties": {"l": {"type": "array",
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                "items": {"type": "object", "properties": {"k": {"type": "string"}}}}}})
            ),
            [format!(
                "{ROOT}.properties[l].items.properties[k].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"
            )]
        );
        assert_eq!(
            msgs(
                json!({"type": "object", "properties": {"metadata": {"type": "object",
                "properties": {"labels": {"type": "object"}}}}})
            ),
            [format!(
                "{ROOT}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
            )]
        );
        assert_eq!(
            msgs(
                json!({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}}})
            ),
            [format!(
                "{ROOT}.properties[a].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
            )]
        );
    }
}
