//! CustomResourceDefinitions used by the tests.

use serde_json::{Value, json};

/// A string map schema.
fn string_map() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}})
}

/// A list of `{name, ...}` items keyed by name.
fn named_list(item_properties: Value) -> Value {
    json!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"], "properties": item_properties}
    })
}

/// The `openAPIV3Schema` of the Rollout-like CRD.
pub fn rollout_schema() -> Value {
    let env = named_list(json!({"name": {"type": "string"}, "value": {"type": "string"}}));
    let containers = named_list(json!({
        "name": {"type": "string"},
        "image": {"type": "string"},
        "args": {"type": "array", "items": {"type": "string"}},
        "env": env,
        "ports": {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
            "items": {"type": "object", "required": ["containerPort"], "properties": {
                "containerPort": {"type": "integer"},
                "protocol": {"type": "string", "default": "TCP"}}}}
    }));
    json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "required": ["template"], "properties": {
                "replicas": {"type": "integer", "format": "int32", "minimum": 0},
                "paused": {"type": "boolean"},
                "revisionHistoryLimit": {"type": "integer", "default": 10},
                "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                    "properties": {"matchLabels": string_map()}},
                "strategy": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "template": {"type": "object", "properties": {
                    "metadata": {"type": "object", "properties": {
                        "labels": string_map(), "annotations": string_map()}},
                    "spec": {"type": "object", "required": ["containers"], "properties": {
                        "containers": containers,
                        "restartPolicy": {"type": "string", "enum": ["Always", "OnFailure", "Never"]}
                    }}
                }}
            }},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }
    })
}

/// An Argo Rollouts-like CRD: `argoproj.io/v1alpha1` `Rollout`, namespaced,
/// status (and scale) subresources.
pub fn rollout_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "rollouts.argoproj.io"},
        "spec": {
            "group": "argoproj.io",
            "names": {"kind": "Rollout", "listKind": "RolloutList", "plural": "rollouts",
                      "singular": "rollout", "shortNames": ["ro"], "categories": ["all"]},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.HPAReplicas",
                    "labelSelectorPath": ".status.selector"}},
                "schema": {"openAPIV3Schema": rollout_schema()}
            }]
        }
    })
}

/// A CRD whose schema keeps anything: `example.com/v1` `Thing`.
pub fn anything_crd(scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Thing", "plural": "things"},
            "scope": scope,
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"x-kubernetes-preserve-unknown-fields": true}}}]
        }
    })
}

/// A Rollout named `name` with one container.
pub fn rollout(name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"canary": {"steps": [{"setWeight": 20}, {"pause": {}}]}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": image,
                    "env": [{"name": "A", "value": "1"}]}]}
            }
        }
    })
}
