//! [`WorkloadObject`]: a workload object as the API server sends it, read in
//! one pass into the JSON [`Workload::from_object`](crate::model::Workload::from_object)
//! takes, without `managedFields`.
//!
//! kube's `DynamicObject` reads `metadata` into a typed `ObjectMeta`, every
//! `managedFields` entry included (a JSON tree per field manager), and the
//! rest through `#[serde(flatten)]`, which buffers the whole object once more
//! before building it; nudge then dropped `managedFields` and wrote the
//! metadata back to JSON. At the benchmark's 10x, reading workloads that way
//! was about a quarter of nudge's CPU from start to ready (20,000 listed) and
//! a fifth while the initial stamps ran (watch events and PATCH answers). A
//! Deployment as kube-apiserver sends it took 22 µs to read that way and
//! takes 14 µs this way. `managedFields` is skipped while reading, as the
//! object sources' metadata stubs do.

use std::borrow::Cow;
use std::fmt;

use kube::Resource;
use kube::api::{ApiResource, ObjectMeta};
use kube::core::DynamicResourceScope;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A workload's object as JSON, `managedFields` left out. Its [`Resource`]
/// metadata, what kube's watcher and `ResourceExt` read, carries only the
/// name, namespace, uid and resourceVersion; everything else is read from
/// [`WorkloadObject::value`].
#[derive(Debug, Clone)]
pub(crate) struct WorkloadObject {
    meta: ObjectMeta,
    value: Value,
}

impl WorkloadObject {
    /// The object built from its JSON (`managedFields` kept if present).
    pub(crate) fn from_value(value: Value) -> Self {
        Self {
            meta: identity_of(&value),
            value,
        }
    }

    /// The object as JSON.
    pub(crate) fn value(&self) -> &Value {
        &self.value
    }

    /// The object as JSON, taken.
    pub(crate) fn into_value(self) -> Value {
        self.value
    }

    /// The annotation `key` of the object, if set.
    pub(crate) fn annotation(&self, key: &str) -> Option<&str> {
        self.value
            .get("metadata")?
            .get("annotations")?
            .get(key)?
            .as_str()
    }
}

/// The metadata fields kube reads of an object: identity and version.
fn identity_of(value: &Value) -> ObjectMeta {
    let field = |name: &str| {
        value
            .get("metadata")
            .and_then(|m| m.get(name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    ObjectMeta {
        name: field("name"),
        namespace: field("namespace"),
        uid: field("uid"),
        resource_version: field("resourceVersion"),
        ..ObjectMeta::default()
    }
}

impl<'de> Deserialize<'de> for WorkloadObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor)
    }
}

/// Reads an object's fields into a JSON map, `metadata` through
/// [`WithoutManagedFields`].
struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = WorkloadObject;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = if key == "metadata" {
                map.next_value_seed(WithoutManagedFields)?
            } else {
                map.next_value::<Value>()?
            };
            object.insert(key, value);
        }
        Ok(WorkloadObject::from_value(Value::Object(object)))
    }
}

/// Reads an object's `metadata` as JSON, skipping `managedFields` unbuilt.
struct WithoutManagedFields;

impl<'de> DeserializeSeed<'de> for WithoutManagedFields {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for WithoutManagedFields {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("object metadata")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut metadata = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "managedFields" {
                map.next_value::<IgnoredAny>()?;
            } else {
                metadata.insert(key, map.next_value()?);
            }
        }
        Ok(Value::Object(metadata))
    }
}

impl Serialize for WorkloadObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

/// As kube's `DynamicObject`: the kind is known at run time.
impl Resource for WorkloadObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_is_read_without_its_managed_fields_and_with_everything_else() {
        let sent = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "shop",
                "uid": "u-1",
                "resourceVersion": "42",
                "generation": 3,
                "annotations": {"a": "b"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {"template": {"metadata": {"labels": {"app": "web"}}}},
            "status": {"observedGeneration": 3},
        });
        let object: WorkloadObject = serde_json::from_str(&sent.to_string()).unwrap();
        let mut expected = sent.clone();
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        assert_eq!(object.value(), &expected);
        assert_eq!(object.meta().name.as_deref(), Some("web"));
        assert_eq!(object.meta().namespace.as_deref(), Some("shop"));
        assert_eq!(object.meta().uid.as_deref(), Some("u-1"));
        assert_eq!(object.meta().resource_version.as_deref(), Some("42"));
        assert_eq!(object.annotation("a"), Some("b"));
        assert_eq!(object.annotation("c"), None);
        assert_eq!(serde_json::to_value(&object).unwrap(), expected);
    }

    #[test]
    fn an_object_without_or_with_null_metadata_reads_without_identity() {
        for sent in [json!({"kind": "X"}), json!({"kind": "X", "metadata": null})] {
            let object: WorkloadObject = serde_json::from_str(&sent.to_string()).unwrap();
            assert_eq!(object.value(), &sent);
            assert_eq!(object.meta().name, None);
            assert_eq!(object.annotation("a"), None);
        }
    }

    #[test]
    fn what_is_not_an_object_is_an_error_not_a_panic() {
        for sent in [
            "[]",
            "\"x\"",
            "3",
            "{\"metadata\": 3}",
            "{\"metadata\": {\"x\"",
        ] {
            assert!(
                serde_json::from_str::<WorkloadObject>(sent).is_err(),
                "{sent} read"
            );
        }
    }
}
