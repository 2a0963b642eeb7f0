//! How the controllers reach the API: the few calls kube-controller-manager
//! makes (create, update, update status, delete, get), behind a trait so the
//! control loops run against the store in the double and against a fake in
//! unit tests.
//!
//! Writes go through the apiserver's pipeline (defaults, the kind's update
//! preparation, validation, managed fields as field manager
//! `kube-controller-manager`) but not through admission webhooks. Updates
//! carry the resourceVersion the controller read, so a stale read is a
//! conflict, as for the real controllers working from informer caches.

use serde_json::Value;

use crate::handlers::{self, Ownership, SystemWrite};
use crate::managed::Subresource;
use crate::meta;
use crate::resources::{CONTROLLER_REVISIONS, DAEMONSETS, DEPLOYMENTS, REPLICASETS, STATEFULSETS};
use crate::server::State;
use crate::status::ApiError;

/// The field manager of every write the controllers make (as in
/// `tests/transcripts/admission_review.json`).
pub(crate) const MANAGER: &str = "kube-controller-manager";

/// The `apps/v1` resources the controllers read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    ControllerRevision,
}

impl Kind {
    /// The store slot (and built-in resource id) of the kind.
    pub fn storage(self) -> usize {
        match self {
            Kind::Deployment => DEPLOYMENTS,
            Kind::ReplicaSet => REPLICASETS,
            Kind::StatefulSet => STATEFULSETS,
            Kind::DaemonSet => DAEMONSETS,
            Kind::ControllerRevision => CONTROLLER_REVISIONS,
        }
    }
}

/// Why a call failed, as the controllers tell failures apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ClientError {
    /// The object changed since it was read (409 Conflict).
    #[error("the object has been modified")]
    Conflict,
    /// A create found the name taken (409 AlreadyExists).
    #[error("already exists")]
    AlreadyExists,
    /// The object is gone (404).
    #[error("not found")]
    NotFound,
    /// Anything else, with the apiserver's message (a 422 on a name too long).
    #[error("{0}")]
    Other(String),
}

impl From<ApiError> for ClientError {
    fn from(e: ApiError) -> Self {
        match e.reason {
            "Conflict" => ClientError::Conflict,
            "AlreadyExists" => ClientError::AlreadyExists,
            "NotFound" => ClientError::NotFound,
            _ => ClientError::Other(e.message),
        }
    }
}

/// The API calls a control loop makes.
pub(crate) trait Cluster {
    /// POST of a new object; the stored object.
    fn create(&mut self, kind: Kind, obj: Value) -> Result<Value, ClientError>;
    /// PUT of the main resource, at the object's resourceVersion.
    fn update(&mut self, kind: Kind, obj: Value) -> Result<Value, ClientError>;
    /// PUT of `/status`, at the object's resourceVersion.
    fn update_status(&mut self, kind: Kind, obj: Value) -> Result<Value, ClientError>;
    /// DELETE with the default options.
    fn delete(&mut self, kind: Kind, namespace: &str, name: &str) -> Result<(), ClientError>;
    /// GET (a live read, as a controller does before retrying a status write).
    fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value>;
}

/// The controllers' client inside the double: calls straight into the store.
pub(crate) struct StoreCluster<'a> {
    state: &'a State,
}

impl<'a> StoreCluster<'a> {
    /// A client over the double's state.
    pub fn new(state: &'a State) -> Self {
        Self { state }
    }

    fn put(&self, kind: Kind, obj: Value, sub: Subresource) -> Result<Value, ClientError> {
        let rt = self
            .state
            .registry
            .get(kind.storage())
            .ok_or(ClientError::NotFound)?;
        let key = meta::store_key(Some(meta::namespace(&obj)), meta::name(&obj));
        let write = SystemWrite {
            rt: &rt,
            key: &key,
            manager: MANAGER,
            sub,
        };
        handlers::system_replace(self.state, &write, obj)
            .map(|stored| (*stored).clone())
            .map_err(ClientError::from)
    }
}

impl Cluster for StoreCluster<'_> {
    fn create(&mut self, kind: Kind, obj: Value) -> Result<Value, ClientError> {
        let rt = self
            .state
            .registry
            .get(kind.storage())
            .ok_or(ClientError::NotFound)?;
        handlers::create_object(
            self.state,
            &rt,
            obj,
            Ownership::Update(MANAGER.into()),
            false,
        )
        .map(|stored| (*stored).clone())
        .map_err(ClientError::from)
    }

    fn update(&mut self, kind: Kind, obj: Value) -> Result<Value, ClientError> {
        self.put(kind, obj, Subresource::Main)
    }

    fn update_status(&mut self, kind: Kind, obj: Value) -> Result<Value, ClientError> {
        self.put(kind, obj, Subresource::Status)
    }

    fn delete(&mut self, kind: Kind, namespace: &str, name: &str) -> Result<(), ClientError> {
        let rt = self
            .state
            .registry
            .get(kind.storage())
            .ok_or(ClientError::NotFound)?;
        let key = meta::store_key(Some(namespace), name);
        if self.state.store.get(rt.storage, &key).is_none() {
            return Err(ClientError::NotFound);
        }
        handlers::delete_now(self.state, &rt, &key);
        Ok(())
    }

    fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        let key = meta::store_key(Some(namespace), name);
        self.state
            .store
            .get(kind.storage(), &key)
            .map(|o| (*o).clone())
    }
}
