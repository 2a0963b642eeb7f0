//! The I/O of snapshots (design §5e): creating a workload's copies before
//! the stamp that names them is written, checking that a rollback's copies
//! still exist, deleting copies no revision needs any more, and the gauge
//! of copies kept. What a copy is called and holds is the pure `snapshot`
//! module's; when any of this happens is the engine's.
//!
//! A copy is made from the source object as read now, and only when that
//! content has the fingerprint the stamp carries: the copy's content and the
//! stamp always agree, and a source that changed meanwhile makes the stamp
//! wait for the newer content ([`CopyError::Moved`]). Creation is idempotent
//! by name: a copy that exists already, owned by the workload and holding
//! that content, is the copy (a restart or a failover between the create and
//! the stamp neither duplicates nor loses one). A copy is never updated: its
//! content is immutable, and only an orphan's owner reference is ever added.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::{Value, json};

use crate::fingerprint::{self, FingerprintKey, ObjectData, ObjectKind};
use crate::snapshot::{CopyPlan, Owner, SnapshotNames, copy_object, owner_uids};

mod gauge;
mod metrics;

pub use gauge::run_gauge;
pub use metrics::{CopyMetrics, Operation};

/// Why copies could not be made, checked or deleted. Content never appears
/// in one: only kinds, names and the API server's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    /// The object to copy no longer holds the content the stamp carries (it
    /// changed or went since the stamp was decided): the stamp waits for
    /// the newer content, which the source reports next.
    #[error("{kind} {name} changed since the stamp was decided")]
    Moved {
        /// ConfigMap or Secret.
        kind: &'static str,
        /// The object copied.
        name: String,
    },
    /// The API server refused to create the copy: a ResourceQuota, RBAC,
    /// or the object is invalid or too large, until someone changes that.
    #[error("cannot create {kind} {copy}, the snapshot of {name}: {message}")]
    Refused {
        /// ConfigMap or Secret.
        kind: &'static str,
        /// The copy's name.
        copy: String,
        /// The object copied.
        name: String,
        /// The API server's message.
        message: String,
        /// `quota`, `forbidden`, `too_large` or `invalid`.
        category: &'static str,
    },
    /// An object of the copy's name exists and is not this workload's copy
    /// of that content: owned by another object (an earlier workload of the
    /// same name, which the garbage collector has yet to remove, when it is
    /// gone), or holding other content.
    #[error("{kind} {copy} exists and is not this workload's snapshot of {name}: {why}")]
    Taken {
        /// ConfigMap or Secret.
        kind: &'static str,
        /// The copy's name.
        copy: String,
        /// The object copied.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A copy a rollback points the template at does not exist (deleted by
    /// someone): it cannot be made again, its content is gone.
    #[error("{kind} {copy}, the snapshot of {name} it needs, does not exist")]
    Missing {
        /// ConfigMap or Secret.
        kind: &'static str,
        /// The copy's name.
        copy: String,
        /// The object it copied.
        name: String,
    },
    /// A failure worth retrying: a timeout, a connection error, 429, 5xx.
    #[error("{kind} {name}: {message}")]
    Transient {
        /// ConfigMap or Secret.
        kind: &'static str,
        /// The object read or written.
        name: String,
        /// What happened.
        message: String,
    },
}

impl CopyError {
    /// A low-cardinality label for metrics and Events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Moved { .. } => "moved",
            Self::Refused { category, .. } => category,
            Self::Taken { .. } => "taken",
            Self::Missing { .. } => "missing",
            Self::Transient { .. } => "transient",
        }
    }

    /// Whether trying again later may succeed: everything but a missing copy
    /// (its content is gone). A source that moves on or a transient failure
    /// pass by themselves, the garbage collector removes an earlier
    /// workload's copy, and a refusal ends when someone raises the quota or
    /// grants the RBAC; the engine retries after a growing backoff (60 s at
    /// most), and Events of the same refusal are counted on one.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Missing { .. })
    }

    /// Whether people should hear of it (a Warning Event): everything but a
    /// source that moved on, which the next stamp takes care of.
    pub fn is_news(&self) -> bool {
        !matches!(self, Self::Moved { .. })
    }
}

/// Makes, checks and deletes snapshot copies. Cheap to share.
#[derive(Clone)]
pub struct Copier {
    client: Client,
    key: FingerprintKey,
    names: SnapshotNames,
    field_manager: String,
    metrics: Arc<CopyMetrics>,
}

impl std::fmt::Debug for Copier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Copier")
            .field("names", &self.names)
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

/// What [`Copier::ensure`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ensured {
    /// The copies this call created (a stamp that then finds its workload
    /// gone deletes them).
    pub created: Vec<(ObjectKind, String)>,
}

impl Copier {
    /// A copier writing as `field_manager`, fingerprinting Secrets with
    /// `key` (the installation key the sources use), counting into `metrics`.
    pub fn new(
        client: Client,
        key: FingerprintKey,
        names: SnapshotNames,
        field_manager: impl Into<String>,
        metrics: Arc<CopyMetrics>,
    ) -> Self {
        Self {
            client,
            key,
            names,
            field_manager: field_manager.into(),
            metrics,
        }
    }

    /// Makes sure each copy of `plans` exists in `namespace`, owned by
    /// `owner` and holding exactly the content its fingerprint names; stops
    /// at the first that cannot be.
    pub async fn ensure(
        &self,
        namespace: &str,
        owner: &Owner,
        plans: &[CopyPlan],
    ) -> Result<Ensured, CopyError> {
        let mut ensured = Ensured::default();
        for plan in plans {
            let result = self.ensure_one(namespace, owner, plan).await;
            match &result {
                Ok(operation) => self.metrics.record(plan.key.kind, *operation),
                Err(_) => self.metrics.record(plan.key.kind, Operation::Failed),
            }
            if result? == Operation::Created {
                ensured.created.push((plan.key.kind, plan.name.clone()));
            }
        }
        Ok(ensured)
    }

    /// Makes sure each copy of `plans` exists in `namespace` and is
    /// `owner`'s: a rollback's copies cannot be made again.
    pub async fn check(
        &self,
        namespace: &str,
        owner: &Owner,
        plans: &[CopyPlan],
    ) -> Result<(), CopyError> {
        for plan in plans {
            let Some(existing) = self.get(namespace, plan.key.kind, &plan.name).await? else {
                return Err(CopyError::Missing {
                    kind: plan.key.kind.as_str(),
                    copy: plan.name.clone(),
                    name: plan.key.name.to_string(),
                });
            };
            self.check_existing(namespace, owner, plan, &existing)
                .await?;
        }
        Ok(())
    }

    /// Deletes the copies `copies` in `namespace` (pruned: no revision kept
    /// names them). One already gone is deleted.
    pub async fn delete(
        &self,
        namespace: &str,
        copies: &[(ObjectKind, String)],
    ) -> Result<(), CopyError> {
        for (kind, name) in copies {
            let result = match kind {
                ObjectKind::ConfigMap => self.delete_one::<ConfigMap>(namespace, name).await,
                ObjectKind::Secret => self.delete_one::<Secret>(namespace, name).await,
            };
            let result = result.map_err(|error| classify(*kind, name, name, error));
            let operation = if result.is_ok() {
                Operation::Deleted
            } else {
                Operation::Failed
            };
            self.metrics.record(*kind, operation);
            result?;
        }
        Ok(())
    }

    async fn delete_one<K>(&self, namespace: &str, name: &str) -> Result<(), kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api = Api::<K>::namespaced(self.client.clone(), namespace);
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(error),
        }
    }

    async fn ensure_one(
        &self,
        namespace: &str,
        owner: &Owner,
        plan: &CopyPlan,
    ) -> Result<Operation, CopyError> {
        let kind = plan.key.kind;
        let source = plan.key.name.as_str();
        let Some(object) = self.get(namespace, kind, source).await? else {
            return Err(moved(plan));
        };
        let secret_type = object
            .get("type")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let data = object_data(kind, object)
            .ok_or_else(|| moved(plan))?
            .narrowed(&plan.key.keys);
        if self.fingerprint(kind, &data) != plan.fingerprint {
            return Err(moved(plan));
        }
        let copy = copy_object(
            plan,
            namespace,
            owner,
            &data,
            secret_type.as_deref(),
            &self.names,
        );
        match self.create(namespace, kind, copy).await {
            Ok(()) => Ok(Operation::Created),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let existing = self
                    .get(namespace, kind, &plan.name)
                    .await?
                    // Deleted since the 409: try again from the start.
                    .ok_or_else(|| transient(plan, "deleted while being created"))?;
                self.check_existing(namespace, owner, plan, &existing).await
            }
            Err(error) => Err(refused(plan, error)),
        }
    }

    /// Whether `existing`, of the copy's name, is `owner`'s copy of `plan`'s
    /// content; an orphan holding that content is adopted.
    async fn check_existing(
        &self,
        namespace: &str,
        owner: &Owner,
        plan: &CopyPlan,
        existing: &Value,
    ) -> Result<Operation, CopyError> {
        let taken = |why| CopyError::Taken {
            kind: plan.key.kind.as_str(),
            copy: plan.name.clone(),
            name: plan.key.name.to_string(),
            why,
        };
        if existing.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(taken("it is being deleted"));
        }
        if existing.get("immutable") != Some(&Value::Bool(true)) {
            return Err(taken("it is not immutable"));
        }
        let data = object_data(plan.key.kind, existing.clone())
            .ok_or_else(|| taken("its content cannot be read"))?;
        if self.fingerprint(plan.key.kind, &data.narrowed(&plan.key.keys)) != plan.fingerprint {
            return Err(taken("it holds other content"));
        }
        if owner.owns(existing) {
            return Ok(Operation::Reused);
        }
        if owner_uids(existing).next().is_some() {
            // An earlier workload of this name: the garbage collector removes
            // its copies; adding an owner now could race with that deletion.
            return Err(taken("another object owns it"));
        }
        self.adopt(namespace, owner, plan, existing).await?;
        Ok(Operation::Adopted)
    }

    /// Adds `owner`'s reference to an orphaned copy (its workload was
    /// deleted with `--cascade=orphan`), guarded by its resourceVersion. The
    /// garbage collector never deletes an object without owners, so nothing
    /// races with this.
    async fn adopt(
        &self,
        namespace: &str,
        owner: &Owner,
        plan: &CopyPlan,
        existing: &Value,
    ) -> Result<(), CopyError> {
        let version = existing
            .pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(Value::Null);
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
            {"op": "add", "path": "/metadata/ownerReferences", "value": [owner.reference()]},
        ]))
        .map_err(|error| transient(plan, &error.to_string()))?;
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        let patch = Patch::<Value>::Json(patch);
        let result = match plan.key.kind {
            ObjectKind::ConfigMap => Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
                .patch(&plan.name, &params, &patch)
                .await
                .map(drop),
            ObjectKind::Secret => Api::<Secret>::namespaced(self.client.clone(), namespace)
                .patch(&plan.name, &params, &patch)
                .await
                .map(drop),
        };
        result.map_err(|error| match error {
            // Changed or deleted meanwhile: decide again.
            kube::Error::Api(status) if matches!(status.code, 404 | 409 | 422) => {
                transient(plan, &status.message)
            }
            error => classify(plan.key.kind, &plan.name, &plan.key.name, error),
        })
    }

    fn fingerprint(&self, kind: ObjectKind, data: &ObjectData) -> String {
        fingerprint::native_object(kind, data, &self.key)
            .as_digest()
            .map(|digest| digest.into_owned())
            .unwrap_or_default()
    }

    /// The object `name` of `kind` as JSON, or `None` when it does not exist.
    async fn get(
        &self,
        namespace: &str,
        kind: ObjectKind,
        name: &str,
    ) -> Result<Option<Value>, CopyError> {
        let read = match kind {
            ObjectKind::ConfigMap => Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
                .get_opt(name)
                .await
                .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default())),
            ObjectKind::Secret => Api::<Secret>::namespaced(self.client.clone(), namespace)
                .get_opt(name)
                .await
                .map(|o| o.map(|o| serde_json::to_value(o).unwrap_or_default())),
        };
        read.map_err(|error| classify(kind, name, name, error))
    }

    async fn create(
        &self,
        namespace: &str,
        kind: ObjectKind,
        copy: Value,
    ) -> Result<(), kube::Error> {
        let params = PostParams {
            field_manager: Some(self.field_manager.clone()),
            ..PostParams::default()
        };
        let decode = |error: serde_json::Error| kube::Error::SerdeError(error);
        match kind {
            ObjectKind::ConfigMap => {
                let copy: ConfigMap = serde_json::from_value(copy).map_err(decode)?;
                Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
                    .create(&params, &copy)
                    .await
                    .map(drop)
            }
            ObjectKind::Secret => {
                let copy: Secret = serde_json::from_value(copy).map_err(decode)?;
                Api::<Secret>::namespaced(self.client.clone(), namespace)
                    .create(&params, &copy)
                    .await
                    .map(drop)
            }
        }
    }
}

/// The keyed content of a ConfigMap or Secret read as JSON.
fn object_data(kind: ObjectKind, object: Value) -> Option<ObjectData> {
    match kind {
        ObjectKind::ConfigMap => serde_json::from_value::<ConfigMap>(object)
            .ok()
            .map(|cm| ObjectData::from_config_map(&cm)),
        ObjectKind::Secret => serde_json::from_value::<Secret>(object)
            .ok()
            .map(|secret| ObjectData::from_secret(&secret)),
    }
}

fn moved(plan: &CopyPlan) -> CopyError {
    CopyError::Moved {
        kind: plan.key.kind.as_str(),
        name: plan.key.name.to_string(),
    }
}

fn transient(plan: &CopyPlan, message: &str) -> CopyError {
    CopyError::Transient {
        kind: plan.key.kind.as_str(),
        name: plan.name.clone(),
        message: message.to_owned(),
    }
}

/// A failed create: refused for good (quota, RBAC, invalid, too large), or
/// transient.
fn refused(plan: &CopyPlan, error: kube::Error) -> CopyError {
    let kind = plan.key.kind.as_str();
    let kube::Error::Api(status) = &error else {
        return transient(plan, &crate::errors::error_chain(&error));
    };
    let category = match status.code {
        403 if status.message.contains("exceeded quota") => "quota",
        403 => "forbidden",
        413 => "too_large",
        400 | 404 | 422 => "invalid",
        _ => return transient(plan, &status.message),
    };
    CopyError::Refused {
        kind,
        copy: plan.name.clone(),
        name: plan.key.name.to_string(),
        message: status.message.clone(),
        category,
    }
}

/// A failed read or delete of `name` (copying `source`).
fn classify(kind: ObjectKind, name: &str, source: &str, error: kube::Error) -> CopyError {
    match error {
        kube::Error::Api(status) if matches!(status.code, 400 | 403 | 413 | 422) => {
            CopyError::Refused {
                kind: kind.as_str(),
                copy: name.to_owned(),
                name: source.to_owned(),
                message: status.message.clone(),
                category: if status.code == 403 {
                    "forbidden"
                } else {
                    "invalid"
                },
            }
        }
        kube::Error::Api(status) => CopyError::Transient {
            kind: kind.as_str(),
            name: name.to_owned(),
            message: status.message.clone(),
        },
        other => CopyError::Transient {
            kind: kind.as_str(),
            name: name.to_owned(),
            message: crate::errors::error_chain(&other),
        },
    }
}
