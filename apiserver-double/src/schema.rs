//! The slice of the Kubernetes OpenAPI schema that server-side apply and
//! strategic merge patch need: which maps are atomic or granular, and which
//! lists are associative (and by which keys).
//!
//! Built-in kinds: rules by field name, exact for the kinds the double
//! serves. Custom resources: the markers of their CRD's structural schema
//! (`x-kubernetes-list-type`, `-list-map-keys`, `-map-type`,
//! `-preserve-unknown-fields`), with the built-in rules for `metadata`.
//! A [`Cursor`] walks either.

use serde_json::Value;

use crate::resources::ResourceType;
use crate::structural::Structural;

/// The key fields of an associative list.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keys<'a> {
    /// Built-in lists.
    Static(&'static [&'static str]),
    /// From `x-kubernetes-list-map-keys`.
    Schema(&'a [String]),
}

impl<'a> Keys<'a> {
    /// The key field names in order.
    pub fn names(&self) -> Vec<&'a str> {
        match self {
            Keys::Static(k) => k.to_vec(),
            Keys::Schema(k) => k.iter().map(String::as_str).collect(),
        }
    }
}

impl PartialEq for Keys<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.names() == other.names()
    }
}

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ListType<'a> {
    /// Replaced as a whole (`x-kubernetes-list-type: atomic`).
    Atomic,
    /// A set of scalars (`x-kubernetes-list-type: set`).
    Set,
    /// A map keyed by the given item fields (`x-kubernetes-list-type: map`).
    Map(Keys<'a>),
}

/// A position in an object's schema during a walk.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cursor<'a> {
    /// A built-in kind, at a field of this name (`""` at the root and for
    /// list items).
    Named(&'a str),
    /// A custom resource at a schema node; `None` where the schema says
    /// nothing (preserved unknown fields): maps merge per key, lists are
    /// atomic (structured-merge-diff's deduced type).
    Custom(Option<&'a Structural>),
}

impl<'a> Cursor<'a> {
    /// The root of an object of a resource.
    pub fn root(rt: &'a ResourceType) -> Cursor<'a> {
        match &rt.custom {
            Some(c) => Cursor::Custom(Some(&c.schema)),
            None => Cursor::Named(""),
        }
    }

    /// The value of map key `key` under this node.
    pub fn field(self, key: &'a str) -> Cursor<'a> {
        match self {
            Cursor::Named(_) => Cursor::Named(key),
            Cursor::Custom(Some(s)) if s.resource && key == "metadata" => Cursor::Named(key),
            Cursor::Custom(node) => Cursor::Custom(node.and_then(|s| s.child(key))),
        }
    }

    /// The items of the list at this node.
    pub fn item(self) -> Cursor<'a> {
        match self {
            Cursor::Named(_) => Cursor::Named(""),
            Cursor::Custom(node) => Cursor::Custom(node.and_then(|s| s.items.as_deref())),
        }
    }

    /// How a map at this node merges.
    pub fn map_type(self) -> MapType {
        match self {
            Cursor::Named(f) => map_type(f),
            Cursor::Custom(None) => MapType::Granular,
            Cursor::Custom(Some(s)) => {
                if s.map_type.as_deref() == Some("atomic") {
                    MapType::Atomic
                } else if s.properties.is_empty() && !s.resource {
                    MapType::Granular
                } else {
                    MapType::Struct
                }
            }
        }
    }

    /// Whether `key` is a declared field of the struct at this node (else
    /// a map entry, which is its own member in field sets).
    pub fn declares(self, key: &str) -> bool {
        match self {
            Cursor::Named(f) => map_type(f) != MapType::Granular,
            Cursor::Custom(None) => false,
            Cursor::Custom(Some(s)) => {
                s.properties.contains_key(key)
                    || (s.resource && matches!(key, "apiVersion" | "kind" | "metadata"))
            }
        }
    }

    /// How a list at this node merges; lists without a marker are atomic.
    pub fn list_type(self) -> ListType<'a> {
        match self {
            Cursor::Named(f) => list_type(f),
            Cursor::Custom(Some(s)) => match s.list_type.as_deref() {
                Some("set") => ListType::Set,
                Some("map") => ListType::Map(Keys::Schema(&s.list_map_keys)),
                _ => ListType::Atomic,
            },
            Cursor::Custom(None) => ListType::Atomic,
        }
    }

    /// The value of a key field missing from an item of the list at this
    /// node, when the schema defaults it.
    pub fn key_default(self, key: &str) -> Option<Value> {
        match self {
            Cursor::Named(f) => key_default(f, key).map(Value::from),
            Cursor::Custom(node) => node
                .and_then(|s| s.items.as_deref())
                .and_then(|i| i.properties.get(key))
                .and_then(|p| p.default.clone()),
        }
    }
}

/// How a map field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MapType {
    /// A Go struct: declared fields.
    Struct,
    /// A `map[string]T`: every key is its own field.
    Granular,
    /// Replaced as a whole (`x-kubernetes-map-type: atomic`).
    Atomic,
}

/// The list type of a built-in field by name.
pub(crate) fn list_type(field: &str) -> ListType<'static> {
    let map = |k: &'static [&'static str]| ListType::Map(Keys::Static(k));
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims"
        | "webhooks" => map(&["name"]),
        "volumeMounts" => map(&["mountPath"]),
        "volumeDevices" => map(&["devicePath"]),
        "ports" => map(&["containerPort", "protocol"]),
        "conditions" => map(&["type"]),
        "ownerReferences" => map(&["uid"]),
        "hostAliases" => map(&["ip"]),
        "topologySpreadConstraints" => map(&["topologyKey", "whenUnsatisfiable"]),
        "finalizers" => ListType::Set,
        _ => ListType::Atomic,
    }
}

/// Default values of associative-list keys that the schema defaults.
pub(crate) fn key_default(list_field: &str, key: &str) -> Option<&'static str> {
    match (list_field, key) {
        ("ports", "protocol") => Some("TCP"),
        _ => None,
    }
}

/// The map type of a field by name.
pub(crate) fn map_type(field: &str) -> MapType {
    match field {
        "labels" | "annotations" | "data" | "binaryData" | "stringData" | "matchLabels"
        | "nodeSelector" | "limits" | "requests" | "capacity" | "allocatable" | "overhead" => {
            MapType::Granular
        }
        "selector" | "namespaceSelector" | "objectSelector" | "labelSelector"
        | "involvedObject" | "regarding" | "related" | "configMapKeyRef" | "secretKeyRef"
        | "fieldRef" | "resourceFieldRef" => MapType::Atomic,
        _ => MapType::Struct,
    }
}

/// Strategic-merge-patch rules of a list field: `Some(key)` to merge items
/// by that key, `Some("")` to merge a list of scalars, `None` to replace.
pub(crate) fn patch_merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims"
        | "webhooks" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "ports" => Some("containerPort"),
        "conditions" => Some("type"),
        "ownerReferences" => Some("uid"),
        "hostAliases" => Some("ip"),
        "topologySpreadConstraints" => Some("topologyKey"),
        "finalizers" => Some(""),
        _ => None,
    }
}
