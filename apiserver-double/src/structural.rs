//! Structural schemas: the `openAPIV3Schema` of a CRD version as the
//! apiserver uses it for custom resources (pruning, defaulting, validation,
//! server-side apply). The checks a schema must pass before a CRD is
//! accepted are in [`crate::crd::schema_checks`].

use std::collections::BTreeMap;

use serde_json::Value;

use crate::pattern::{PatternError, Regex};

/// A `pattern` keyword.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    /// As written in the schema.
    pub source: String,
    /// Compiled, or why it cannot be used.
    pub regex: Result<Regex, PatternError>,
}

/// The value validations of a node (OpenAPI keywords).
#[derive(Debug, Clone, Default)]
pub(crate) struct Validation {
    pub required: Vec<String>,
    pub enum_values: Option<Vec<Value>>,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub pattern: Option<Pattern>,
    pub all_of: Vec<Structural>,
    pub any_of: Vec<Structural>,
    pub one_of: Vec<Structural>,
    pub not: Option<Box<Structural>>,
}

/// One node of a structural schema.
#[derive(Debug, Clone, Default)]
pub(crate) struct Structural {
    /// `type` (empty when unset).
    pub type_: String,
    /// `properties`.
    pub properties: BTreeMap<String, Structural>,
    /// `additionalProperties` as a schema (`true` is kept as an empty schema
    /// with `x-kubernetes-preserve-unknown-fields`).
    pub additional_properties: Option<Box<Structural>>,
    /// `items`.
    pub items: Option<Box<Structural>>,
    /// `x-kubernetes-preserve-unknown-fields: true`.
    pub preserve_unknown: bool,
    /// `x-kubernetes-int-or-string: true`.
    pub int_or_string: bool,
    /// `nullable: true`.
    pub nullable: bool,
    /// `default`.
    pub default: Option<Value>,
    /// `x-kubernetes-list-type`.
    pub list_type: Option<String>,
    /// `x-kubernetes-list-map-keys`.
    pub list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type`.
    pub map_type: Option<String>,
    /// The root of a resource (the schema root or an embedded resource):
    /// `apiVersion`, `kind` and `metadata` follow the built-in rules.
    pub resource: bool,
    /// Number of `x-kubernetes-validations` rules (CEL; not evaluated).
    pub cel_rules: usize,
    /// Value validations.
    pub validation: Validation,
}

impl Structural {
    /// Builds the structural schema of a CRD version's `openAPIV3Schema`
    /// (already checked by [`crate::crd::schema_checks`]).
    pub fn root(schema: &Value) -> Structural {
        let mut s = Self::parse(schema);
        s.resource = true;
        s
    }

    /// The schema that accepts anything (a CRD version without schema).
    pub fn anything() -> Structural {
        Structural {
            preserve_unknown: true,
            resource: true,
            ..Structural::default()
        }
    }

    fn parse(v: &Value) -> Structural {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let b = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
        let u = |k: &str| v.get(k).and_then(Value::as_u64);
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        let list = |k: &str| -> Vec<Structural> {
            v.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().map(Self::parse).collect())
                .unwrap_or_default()
        };
        let properties = v
            .get("properties")
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, p)| (k.clone(), Self::parse(p))).collect())
            .unwrap_or_default();
        let additional_properties = match v.get("additionalProperties") {
            Some(Value::Object(m)) => Some(Box::new(Self::parse(&Value::Object(m.clone())))),
            Some(Value::Bool(true)) => Some(Box::new(Structural {
                preserve_unknown: true,
                ..Structural::default()
            })),
            _ => None,
        };
        Structural {
            type_: s("type").unwrap_or_default(),
            properties,
            additional_properties,
            items: v
                .get("items")
                .filter(|i| i.is_object())
                .map(|i| Box::new(Self::parse(i))),
            preserve_unknown: b("x-kubernetes-preserve-unknown-fields"),
            int_or_string: b("x-kubernetes-int-or-string"),
            nullable: b("nullable"),
            default: v.get("default").cloned(),
            list_type: s("x-kubernetes-list-type"),
            list_map_keys: v
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            map_type: s("x-kubernetes-map-type"),
            resource: b("x-kubernetes-embedded-resource"),
            cel_rules: v
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .map_or(0, Vec::len),
            validation: Validation {
                required: v
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
                enum_values: v.get("enum").and_then(Value::as_array).cloned(),
                minimum: f("minimum"),
                exclusive_minimum: b("exclusiveMinimum"),
                maximum: f("maximum"),
                exclusive_maximum: b("exclusiveMaximum"),
                multiple_of: f("multipleOf"),
                min_length: u("minLength"),
                max_length: u("maxLength"),
                min_items: u("minItems"),
                max_items: u("maxItems"),
                min_properties: u("minProperties"),
                max_properties: u("maxProperties"),
                pattern: s("pattern").map(|p| Pattern {
                    regex: Regex::new(&p),
                    source: p,
                }),
                all_of: list("allOf"),
                any_of: list("anyOf"),
                one_of: list("oneOf"),
                not: v
                    .get("not")
                    .filter(|n| n.is_object())
                    .map(|n| Box::new(Self::parse(n))),
            },
        }
    }

    /// The schema of a map key: a declared property, else `additionalProperties`.
    pub fn child(&self, key: &str) -> Option<&Structural> {
        self.properties
            .get(key)
            .or(self.additional_properties.as_deref())
    }

    /// Whether any node has `x-kubernetes-validations` rules.
    pub fn has_cel_rules(&self) -> bool {
        self.cel_rules > 0
            || self.properties.values().any(Structural::has_cel_rules)
            || self
                .additional_properties
                .as_deref()
                .is_some_and(Structural::has_cel_rules)
            || self.items.as_deref().is_some_and(Structural::has_cel_rules)
    }

    /// The node at a dotted path of properties (`spec.replicas`).
    #[cfg(test)]
    pub fn at_path(&self, path: &str) -> Option<&Structural> {
        path.split('.')
            .try_fold(self, |node, part| node.properties.get(part))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_markers_and_validations() {
        let s = Structural::root(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "required": ["containers"], "properties": {
                "containers": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "replicas": {"type": "integer", "minimum": 0, "default": 1},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "rules": {"x-kubernetes-validations": [{"rule": "self > 0"}], "type": "integer"}
            }}}
        }));
        assert!(s.resource);
        let spec = s.at_path("spec").unwrap();
        assert_eq!(spec.validation.required, ["containers"]);
        let c = s.at_path("spec.containers").unwrap();
        assert_eq!(c.list_type.as_deref(), Some("map"));
        assert_eq!(c.list_map_keys, ["name"]);
        assert_eq!(s.at_path("spec.replicas").unwrap().default, Some(json!(1)));
        assert_eq!(
            spec.child("labels").unwrap().child("x").unwrap().type_,
            "string"
        );
        assert!(s.has_cel_rules());
    }
}
