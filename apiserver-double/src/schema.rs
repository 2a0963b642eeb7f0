//! The slice of the Kubernetes OpenAPI schema that server-side apply and
//! strategic merge patch need: which maps are atomic or granular, and which
//! lists are associative (and by which keys).
//!
//! Rules are by field name; that is exact for the kinds the double serves.

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListType {
    /// Replaced as a whole (`x-kubernetes-list-type: atomic`).
    Atomic,
    /// A set of scalars (`x-kubernetes-list-type: set`).
    Set,
    /// A map keyed by the given item fields (`x-kubernetes-list-type: map`).
    Map(&'static [&'static str]),
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

/// The list type of a field by name.
pub(crate) fn list_type(field: &str) -> ListType {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims"
        | "webhooks" => ListType::Map(&["name"]),
        "volumeMounts" => ListType::Map(&["mountPath"]),
        "volumeDevices" => ListType::Map(&["devicePath"]),
        "ports" => ListType::Map(&["containerPort", "protocol"]),
        "conditions" => ListType::Map(&["type"]),
        "ownerReferences" => ListType::Map(&["uid"]),
        "hostAliases" => ListType::Map(&["ip"]),
        "topologySpreadConstraints" => ListType::Map(&["topologyKey", "whenUnsatisfiable"]),
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
