//! An in-memory API for unit tests of the control loops: resourceVersion
//! preconditions, generations and the status/main split as the apiserver
//! applies them, and a log of every write.

use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

use super::client::{ClientError, Cluster, Kind};
use crate::ids;
use crate::meta;

/// Objects by kind, namespace and name.
#[derive(Debug, Default)]
pub(crate) struct FakeCluster {
    objects: BTreeMap<(Kind, String, String), Value>,
    rv: u64,
    log: Vec<String>,
}

fn key(kind: Kind, obj: &Value) -> (Kind, String, String) {
    (
        kind,
        meta::namespace(obj).to_string(),
        meta::name(obj).to_string(),
    )
}

impl FakeCluster {
    fn stamp(&mut self, obj: &mut Value) {
        self.rv += 1;
        meta::set_meta(obj, "resourceVersion", self.rv.to_string());
    }

    /// Stores an object as if a user created it: uid, resourceVersion,
    /// creationTimestamp (one second apart) and generation 1. Returns the
    /// stored object.
    pub fn seed(&mut self, kind: Kind, mut obj: Value) -> Value {
        self.set_created_fields(kind, &mut obj);
        self.stamp(&mut obj);
        self.objects.insert(key(kind, &obj), obj.clone());
        obj
    }

    fn set_created_fields(&mut self, kind: Kind, obj: &mut Value) {
        let n = self.rv + 1;
        let created = UNIX_EPOCH + Duration::from_secs(1_700_000_000 + n);
        let m = meta::metadata_mut(obj);
        m.entry("uid").or_insert_with(|| json!(format!("uid-{n}")));
        m.entry("creationTimestamp")
            .or_insert_with(|| json!(ids::format_rfc3339(created)));
        if kind != Kind::ControllerRevision {
            m.entry("generation").or_insert(json!(1));
        }
    }

    /// The stored object (panics when missing: a test failure).
    pub fn object(&self, kind: Kind, namespace: &str, name: &str) -> Value {
        self.get(kind, namespace, name)
            .unwrap_or_else(|| panic!("no {kind:?} {namespace}/{name}"))
    }

    /// Every stored object of a kind.
    pub fn list(&self, kind: Kind) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((k, _, _), _)| *k == kind)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Every write so far, as `verb Kind name`.
    pub fn writes(&self) -> Vec<String> {
        self.log.clone()
    }

    fn live(&self, kind: Kind, obj: &Value) -> Result<Value, ClientError> {
        let live = self
            .objects
            .get(&key(kind, obj))
            .cloned()
            .ok_or(ClientError::NotFound)?;
        if meta::resource_version(&live) != meta::resource_version(obj) {
            return Err(ClientError::Conflict);
        }
        Ok(live)
    }

    fn store(&mut self, kind: Kind, verb: &str, mut obj: Value) -> Value {
        self.stamp(&mut obj);
        self.log
            .push(format!("{verb} {kind:?} {}", meta::name(&obj)));
        self.objects.insert(key(kind, &obj), obj.clone());
        obj
    }
}

impl Cluster for FakeCluster {
    fn create(&mut self, kind: Kind, obj: Value) -> Result<Value, ClientError> {
        if self.objects.contains_key(&key(kind, &obj)) {
            return Err(ClientError::AlreadyExists);
        }
        let mut obj = obj;
        self.set_created_fields(kind, &mut obj);
        if kind == Kind::ReplicaSet {
            obj["status"] = json!({"replicas": 0});
        }
        Ok(self.store(kind, "create", obj))
    }

    fn update(&mut self, kind: Kind, mut obj: Value) -> Result<Value, ClientError> {
        let live = self.live(kind, &obj)?;
        if let Some(status) = live.get("status") {
            obj["status"] = status.clone();
        }
        if kind != Kind::ControllerRevision && live.get("spec") != obj.get("spec") {
            let next = live["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            obj["metadata"]["generation"] = json!(next);
        }
        Ok(self.store(kind, "update", obj))
    }

    fn update_status(&mut self, kind: Kind, mut obj: Value) -> Result<Value, ClientError> {
        let live = self.live(kind, &obj)?;
        obj["spec"] = live.get("spec").cloned().unwrap_or(Value::Null);
        obj["metadata"]["generation"] = live["metadata"]["generation"].clone();
        Ok(self.store(kind, "update_status", obj))
    }

    fn delete(&mut self, kind: Kind, namespace: &str, name: &str) -> Result<(), ClientError> {
        self.objects
            .remove(&(kind, namespace.to_string(), name.to_string()))
            .ok_or(ClientError::NotFound)?;
        self.log.push(format!("delete {kind:?} {name}"));
        Ok(())
    }

    fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        self.objects
            .get(&(kind, namespace.to_string(), name.to_string()))
            .cloned()
    }
}
