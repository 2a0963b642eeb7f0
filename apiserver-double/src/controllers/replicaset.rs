//! The ReplicaSet controller of kube-controller-manager
//! (`pkg/controller/replicaset/replica_set.go` `syncReplicaSet`,
//! `replica_set_utils.go` `calculateStatus` and `updateReplicaSetStatus`)
//! in a cluster without nodes.
//!
//! Pods are not served by the double; the controller keeps the number of
//! pods each ReplicaSet has instead. As on a real cluster, a sync creates or
//! deletes pods towards `spec.replicas` but reports the pods it saw when it
//! started; the next sync, once the pod informer has seen the change,
//! reports them. The pods never become ready (no node runs them), and
//! deleting them is immediate (an unscheduled pod needs no graceful
//! termination).

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::Requeue;
use super::client::{ClientError, Cluster, Kind};
use super::object::{generation, int_at, int_or_zero, is_deleting, observed_generation};
use crate::meta;

/// The pods each ReplicaSet has, by the ReplicaSet's UID.
pub(crate) type PodCounts = HashMap<String, i64>;

/// One sync of a ReplicaSet: pods towards `spec.replicas`, and the status.
pub(crate) fn sync_replica_set<C: Cluster>(
    cluster: &mut C,
    rs: Value,
    pods: &mut PodCounts,
) -> Result<Requeue, ClientError> {
    let uid = meta::uid(&rs).to_string();
    let seen = pods.get(&uid).copied().unwrap_or(0);
    let desired = int_at(&rs, &["spec", "replicas"]).unwrap_or(1).max(0);
    let mut requeue = Requeue::Done;
    if !is_deleting(&rs) && seen != desired {
        pods.insert(uid, desired);
        requeue = Requeue::Observe;
    }
    update_status(cluster, rs, seen)?;
    Ok(requeue)
}

/// `calculateStatus` for `pods` pods, none of them ready.
fn calculate_status(rs: &Value, pods: i64) -> Map<String, Value> {
    let mut status = Map::new();
    status.insert("replicas".into(), json!(pods));
    if pods > 0 {
        // The pods carry the template's labels.
        status.insert("fullyLabeledReplicas".into(), json!(pods));
    }
    if let Some(c) = meta::get_path(rs, &["status", "conditions"]).filter(|c| !c.is_null()) {
        status.insert("conditions".into(), c.clone());
    }
    status
}

/// `updateReplicaSetStatus`: written when a count changed or the
/// generation was not observed yet; retried once after a fresh read.
fn update_status<C: Cluster>(cluster: &mut C, mut rs: Value, pods: i64) -> Result<(), ClientError> {
    let mut status = calculate_status(&rs, pods);
    let count = |rs: &Value, k: &str| int_or_zero(rs, &["status", k]);
    let unchanged = [
        "replicas",
        "fullyLabeledReplicas",
        "readyReplicas",
        "availableReplicas",
    ]
    .iter()
    .all(|k| count(&rs, k) == status.get(*k).and_then(Value::as_i64).unwrap_or(0))
        && generation(&rs) == observed_generation(&rs);
    if unchanged {
        return Ok(());
    }
    for attempt in 0..2 {
        if generation(&rs) != 0 {
            status.insert("observedGeneration".into(), json!(generation(&rs)));
        }
        if let Some(o) = rs.as_object_mut() {
            o.insert("status".into(), Value::Object(status.clone()));
        }
        match cluster.update_status(Kind::ReplicaSet, rs.clone()) {
            Ok(_) => return Ok(()),
            Err(e) if attempt == 1 => return Err(e),
            Err(_) => {}
        }
        rs = cluster
            .get(Kind::ReplicaSet, meta::namespace(&rs), meta::name(&rs))
            .ok_or(ClientError::NotFound)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::fake::FakeCluster;

    fn rs(replicas: i64) -> Value {
        json!({"metadata": {"name": "web-1", "namespace": "t", "uid": "u1", "generation": 1},
               "spec": {"replicas": replicas}, "status": {"replicas": 0}})
    }

    #[test]
    fn pods_are_reported_by_the_sync_after_the_one_that_made_them() {
        let mut cluster = FakeCluster::default();
        let stored = cluster.seed(Kind::ReplicaSet, rs(2));
        let mut pods = PodCounts::new();
        let first = sync_replica_set(&mut cluster, stored, &mut pods).unwrap();
        assert_eq!(first, Requeue::Observe);
        let after_first = cluster.object(Kind::ReplicaSet, "t", "web-1");
        assert_eq!(
            after_first["status"],
            json!({"replicas": 0, "observedGeneration": 1})
        );
        let second = sync_replica_set(&mut cluster, after_first, &mut pods).unwrap();
        assert_eq!(second, Requeue::Done);
        let after_second = cluster.object(Kind::ReplicaSet, "t", "web-1");
        assert_eq!(
            after_second["status"],
            json!({"replicas": 2, "fullyLabeledReplicas": 2, "observedGeneration": 1})
        );
        let writes = cluster.writes();
        sync_replica_set(&mut cluster, after_second, &mut pods).unwrap();
        assert_eq!(cluster.writes(), writes, "nothing changed, nothing written");
    }

    #[test]
    fn a_replica_set_without_replicas_only_observes_its_generation() {
        let mut cluster = FakeCluster::default();
        let stored = cluster.seed(Kind::ReplicaSet, rs(0));
        let mut pods = PodCounts::new();
        assert_eq!(
            sync_replica_set(&mut cluster, stored, &mut pods),
            Ok(Requeue::Done)
        );
        let now = cluster.object(Kind::ReplicaSet, "t", "web-1");
        assert_eq!(
            now["status"],
            json!({"replicas": 0, "observedGeneration": 1})
        );
    }
}
