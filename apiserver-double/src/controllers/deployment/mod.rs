//! The Deployment controller of kube-controller-manager, in a cluster
//! without nodes: pods are created but never scheduled, so never ready.
//!
//! A port of `pkg/controller/deployment/` (`deployment_controller.go`
//! `syncDeployment`, `sync.go`, `rolling.go`, `recreate.go`, `progress.go`)
//! and `util/deployment_util.go`, step for step: the new ReplicaSet
//! `<deployment>-<pod-template-hash>` with its revision, desired-replicas
//! and max-replicas annotations, surge and unavailability arithmetic,
//! proportional scaling, the revision history limit, the Progressing and
//! Available conditions with kube-controller-manager's reasons, messages and
//! times, and the progress deadline. Like the real controller it writes from
//! the object it read: a status write after an earlier write in the same
//! sync conflicts and the key is retried (which is why a real Deployment's
//! first status carries only `NewReplicaSetCreated`, as in
//! `tests/transcripts/patch_kinds.json`).
//!
//! Not ported: adoption and release of ReplicaSets whose owner references do
//! not say so, the `deprecated.deployment.rollback.to` annotation, Events,
//! and the `terminatingReplicas` status field (alpha in 1.34).

mod progress;
mod recreate;
mod rolling;
pub(crate) mod status;
mod sync;
pub(crate) mod util;

// The other files of this module are `impl` blocks of `DeploymentSync`, one
// per Go file of the controller; they share these imports (`use super::*`).
use std::borrow::Borrow;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use self::status::{AVAILABLE, Condition, DeploymentStatus, PROGRESSING, REPLICA_FAILURE};
use self::util::*;
use super::Requeue;
use super::client::{ClientError, Cluster, Kind};
use super::hash::compute_hash;
use super::object::{
    controller_ref, int_or_zero, is_controlled_by, is_deleting, selected_by, selects_everything,
    with_label,
};
use super::replicaset::PodCounts;
use crate::ids;
use crate::meta;

pub(crate) use self::util::ReplicaSet;

/// The ReplicaSets of `namespace` a Deployment owns: controlled by it and
/// selected by its selector (`getReplicaSetsForDeployment`, without the
/// adoption and release of others).
pub(crate) fn owned_replica_sets(
    deployment: &Value,
    in_namespace: impl IntoIterator<Item = impl Borrow<Value>>,
) -> Vec<ReplicaSet> {
    let uid = meta::uid(deployment);
    in_namespace
        .into_iter()
        .filter(|rs| is_controlled_by(rs.borrow(), uid) && selected_by(deployment, rs.borrow()))
        .map(|obj| ReplicaSet {
            obj: obj.borrow().clone(),
        })
        .collect()
}

/// One sync of a Deployment (`syncDeployment`) from the Deployment and the
/// ReplicaSets it owns as read now. Returns when to look again.
pub(crate) fn sync_deployment<C: Cluster>(
    cluster: &mut C,
    now: SystemTime,
    deployment: Value,
    replica_sets: &[ReplicaSet],
    pods: &PodCounts,
) -> Result<Requeue, ClientError> {
    let mut sync = DeploymentSync {
        cluster,
        now,
        pods,
        requeue: Requeue::Done,
    };
    sync.run(&mut Deployment::new(deployment), replica_sets)?;
    Ok(sync.requeue)
}

/// `"name"` as Go's `%q` prints a Kubernetes name.
fn quoted(name: &str) -> String {
    format!("\"{name}\"")
}

/// The old ReplicaSets and the new one (if any), as one list.
fn all_of(old: &[ReplicaSet], new: Option<&ReplicaSet>) -> Vec<ReplicaSet> {
    old.iter().cloned().chain(new.cloned()).collect()
}

/// The state of one sync: the client, the clock, and the requeue the
/// progress check asked for.
struct DeploymentSync<'a, C> {
    cluster: &'a mut C,
    now: SystemTime,
    pods: &'a PodCounts,
    requeue: Requeue,
}

impl<C: Cluster> DeploymentSync<'_, C> {
    fn now_str(&self) -> String {
        ids::format_rfc3339(self.now)
    }

    fn update_status(&mut self, d: &Deployment) -> Result<(), ClientError> {
        self.cluster
            .update_status(Kind::Deployment, d.to_status_update())
            .map(drop)
    }

    /// `syncDeployment` after the lookups.
    fn run(&mut self, d: &mut Deployment, rs_list: &[ReplicaSet]) -> Result<(), ClientError> {
        if selects_everything(&d.obj) {
            if d.status.observed_generation < d.generation() {
                d.status.observed_generation = d.generation();
                // Like the real controller, a failure here is not retried.
                let _ = self.update_status(d);
            }
            return Ok(());
        }
        if is_deleting(&d.obj) {
            return self.sync_status_only(d, rs_list);
        }
        self.check_paused_conditions(d)?;
        if d.paused() {
            return self.sync(d, rs_list);
        }
        if self.is_scaling_event(d, rs_list)? {
            return self.sync(d, rs_list);
        }
        match d.strategy().to_string().as_str() {
            "Recreate" => self.rollout_recreate(d, rs_list),
            "RollingUpdate" => self.rollout_rolling(d, rs_list),
            other => Err(ClientError::Other(format!(
                "unexpected deployment strategy type: {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
