//! The Deployment controller against the in-memory API, with the
//! ReplicaSet controller beside it, synced until nothing changes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::*;
use crate::controllers::fake::FakeCluster;
use crate::controllers::replicaset::sync_replica_set;

struct World {
    cluster: FakeCluster,
    pods: PodCounts,
    now: SystemTime,
}

fn deployment(replicas: i64, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "t"},
        "spec": {"replicas": replicas, "progressDeadlineSeconds": 600, "revisionHistoryLimit": 10,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": image}]}}},
        "status": {}})
}

impl World {
    fn new(d: Value) -> Self {
        let mut cluster = FakeCluster::default();
        cluster.seed(Kind::Deployment, d);
        Self {
            cluster,
            pods: PodCounts::new(),
            now: UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        }
    }

    fn deployment(&self) -> Value {
        self.cluster.object(Kind::Deployment, "t", "web")
    }

    fn replica_sets(&self) -> Vec<ReplicaSet> {
        let d = self.deployment();
        owned_replica_sets(&d, self.cluster.list(Kind::ReplicaSet))
    }

    fn sync_deployment(&mut self) -> Requeue {
        let rss = self.replica_sets();
        let d = self.deployment();
        sync_deployment(&mut self.cluster, self.now, d, &rss, &self.pods).unwrap_or(Requeue::Done)
    }

    /// Syncs the Deployment and its ReplicaSets until no write happens;
    /// the last requeue the Deployment asked for.
    fn settle(&mut self) -> Requeue {
        for _ in 0..50 {
            let writes = self.cluster.writes().len();
            let requeue = self.sync_deployment();
            for rs in self.cluster.list(Kind::ReplicaSet) {
                let _ = sync_replica_set(&mut self.cluster, rs, &mut self.pods);
            }
            if self.cluster.writes().len() == writes {
                return requeue;
            }
        }
        panic!("no steady state: {:?}", self.cluster.writes());
    }

    fn edit(&mut self, change: impl FnOnce(&mut Value)) {
        let mut d = self.deployment();
        change(&mut d);
        self.cluster.update(Kind::Deployment, d).unwrap();
    }

    fn conditions(&self) -> Vec<(String, String, String)> {
        self.deployment()["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
                (s("type"), s("status"), s("reason"))
            })
            .collect()
    }

    fn sizes(&self) -> Vec<(String, i64)> {
        let mut rss = self.replica_sets();
        rss.sort_by(util::by_creation);
        rss.iter()
            .map(|rs| {
                (
                    rs.annotation(REVISION).unwrap_or("").to_string(),
                    rs.replicas(),
                )
            })
            .collect()
    }
}

fn triple(t: &str, s: &str, r: &str) -> (String, String, String) {
    (t.into(), s.into(), r.into())
}

#[test]
fn no_replicas_completes_with_the_real_reasons() {
    let mut w = World::new(deployment(0, "x:1"));
    w.sync_deployment();
    // First write: the new ReplicaSet's condition and revision only; the
    // status written next from the same stale read conflicted.
    let first = w.deployment();
    assert_eq!(first["metadata"]["annotations"][REVISION], "1");
    let rs_name = w.replica_sets()[0].name().to_string();
    assert_eq!(
        first["status"],
        json!({"conditions": [{"type": "Progressing", "status": "True",
            "lastUpdateTime": "2027-01-15T08:00:00Z", "lastTransitionTime": "2027-01-15T08:00:00Z",
            "reason": "NewReplicaSetCreated", "message": format!("Created new replica set \"{rs_name}\"")}]})
    );
    w.settle();
    let d = w.deployment();
    assert_eq!(d["status"]["observedGeneration"], 1);
    assert_eq!(
        w.conditions(),
        [
            triple("Available", "True", MIN_AVAILABLE),
            triple("Progressing", "True", NEW_RS_AVAILABLE)
        ]
    );
    assert_eq!(
        d["status"]["conditions"][1]["message"],
        format!("ReplicaSet \"{rs_name}\" has successfully progressed.")
    );
    assert_eq!(
        d["status"]["conditions"][0]["message"],
        "Deployment has minimum availability."
    );
}

#[test]
fn pending_pods_never_become_available_and_the_deadline_passes() {
    let mut w = World::new(deployment(1, "x:1"));
    let requeue = w.settle();
    let d = w.deployment();
    assert_eq!(
        d["status"],
        json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1,
            "conditions": d["status"]["conditions"].clone()})
    );
    assert_eq!(
        w.conditions(),
        [
            triple("Available", "False", MIN_UNAVAILABLE),
            triple("Progressing", "True", RS_UPDATED)
        ]
    );
    // The next look is a second after the deadline.
    assert_eq!(requeue, Requeue::After(Duration::from_secs(601)));
    w.now += Duration::from_secs(601);
    w.settle();
    assert_eq!(
        w.conditions(),
        [
            triple("Available", "False", MIN_UNAVAILABLE),
            triple("Progressing", "False", TIMED_OUT)
        ]
    );
    let rs_name = w.replica_sets()[0].name().to_string();
    assert_eq!(
        w.deployment()["status"]["conditions"][1]["message"],
        format!("ReplicaSet \"{rs_name}\" has timed out progressing.")
    );
}

#[test]
fn a_template_change_with_pending_pods_surges_but_keeps_the_old_pods() {
    let mut w = World::new(deployment(1, "x:1"));
    w.settle();
    w.edit(|d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("x:2"));
    w.settle();
    // maxUnavailable 25% of 1 is 0: the old pod stays until a new one is
    // available, which never happens.
    assert_eq!(w.sizes(), [("1".to_string(), 1), ("2".to_string(), 1)]);
    assert_eq!(w.deployment()["status"]["updatedReplicas"], 1);
    assert_eq!(w.deployment()["status"]["replicas"], 2);
}

#[test]
fn a_template_change_scales_the_old_replica_set_to_zero_when_unavailability_allows() {
    let mut d = deployment(2, "x:1");
    d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = json!("100%");
    let mut w = World::new(d);
    w.settle();
    w.edit(|d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("x:2"));
    w.settle();
    assert_eq!(w.sizes(), [("1".to_string(), 0), ("2".to_string(), 2)]);
}

#[test]
fn an_annotation_change_is_observed_without_a_new_replica_set() {
    let mut w = World::new(deployment(0, "x:1"));
    w.settle();
    w.edit(|d| d["metadata"]["annotations"]["team"] = json!("a"));
    assert_eq!(
        w.deployment()["metadata"]["generation"],
        1,
        "the fake bumps on spec only"
    );
    w.edit(|d| {
        d["metadata"]["generation"] = json!(2);
    });
    w.settle();
    assert_eq!(w.replica_sets().len(), 1);
    assert_eq!(w.deployment()["status"]["observedGeneration"], 2);
    assert_eq!(
        w.replica_sets()[0].annotation("team"),
        Some("a"),
        "copied to the ReplicaSet"
    );
}

#[test]
fn a_rollback_reuses_the_old_replica_set_with_the_next_revision() {
    let mut w = World::new(deployment(0, "x:1"));
    w.settle();
    w.edit(|d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("x:2"));
    w.settle();
    w.edit(|d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("x:1"));
    w.settle();
    assert_eq!(w.sizes(), [("3".to_string(), 0), ("2".to_string(), 0)]);
    let first = &w
        .replica_sets()
        .into_iter()
        .find(|rs| rs.annotation(REVISION) == Some("3"))
        .unwrap();
    assert_eq!(first.annotation(REVISION_HISTORY), Some("1"));
    assert_eq!(w.deployment()["metadata"]["annotations"][REVISION], "3");
}

#[test]
fn old_replica_sets_beyond_the_history_limit_are_deleted() {
    let mut d = deployment(0, "x:0");
    d["spec"]["revisionHistoryLimit"] = json!(1);
    let mut w = World::new(d);
    w.settle();
    for image in ["x:1", "x:2", "x:3"] {
        w.edit(|d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image));
        w.settle();
    }
    let revisions: Vec<String> = w.sizes().into_iter().map(|(r, _)| r).collect();
    assert_eq!(revisions, ["3", "4"]);
}

#[test]
fn a_paused_deployment_makes_no_replica_set_and_has_no_deadline() {
    let mut w = World::new(deployment(1, "x:1"));
    w.settle();
    w.edit(|d| {
        d["spec"]["paused"] = json!(true);
        d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("x:2");
    });
    let requeue = w.settle();
    assert_eq!(w.replica_sets().len(), 1);
    assert_eq!(requeue, Requeue::Done);
    assert!(
        w.conditions()
            .contains(&triple("Progressing", "Unknown", PAUSED))
    );
    w.now += Duration::from_secs(3600);
    w.settle();
    assert!(
        w.conditions()
            .contains(&triple("Progressing", "Unknown", PAUSED))
    );
    w.edit(|d| d["spec"]["paused"] = json!(false));
    w.settle();
    assert_eq!(w.replica_sets().len(), 2);
    let progressing = w
        .conditions()
        .into_iter()
        .find(|c| c.0 == PROGRESSING)
        .unwrap();
    assert_eq!(
        progressing.1, "True",
        "resumed and rolling: {progressing:?}"
    );
}

#[test]
fn recreate_scales_the_old_replica_set_down_before_creating_the_new_one() {
    let mut d = deployment(2, "x:1");
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    let mut w = World::new(d);
    w.settle();
    assert_eq!(w.sizes(), [("1".to_string(), 2)]);
    w.edit(|d| d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("x:2"));
    w.sync_deployment();
    assert_eq!(
        w.sizes(),
        [("1".to_string(), 0)],
        "no new ReplicaSet while old pods run"
    );
    w.settle();
    assert_eq!(w.sizes(), [("1".to_string(), 0), ("2".to_string(), 2)]);
}

#[test]
fn scaling_a_stable_deployment_resizes_its_replica_set() {
    let mut w = World::new(deployment(1, "x:1"));
    w.settle();
    w.edit(|d| d["spec"]["replicas"] = json!(3));
    w.settle();
    assert_eq!(w.sizes(), [("1".to_string(), 3)]);
    let rs = &w.replica_sets()[0];
    assert_eq!(rs.annotation(DESIRED_REPLICAS), Some("3"));
    assert_eq!(rs.annotation(MAX_REPLICAS), Some("4"));
    assert_eq!(w.deployment()["status"]["replicas"], 3);
}

#[test]
fn new_replica_sets_are_named_after_the_template_and_selected_by_it() {
    let mut w = World::new(deployment(1, "x:1"));
    w.settle();
    let rs = &w.replica_sets()[0];
    let hash = rs.obj["metadata"]["labels"][POD_TEMPLATE_HASH]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rs.name(), format!("web-{hash}"));
    assert_eq!(
        rs.obj["spec"]["selector"]["matchLabels"],
        json!({"app": "web", POD_TEMPLATE_HASH: hash})
    );
    assert_eq!(
        rs.obj["spec"]["template"]["metadata"]["labels"][POD_TEMPLATE_HASH],
        hash.as_str()
    );
    assert_eq!(
        rs.obj["metadata"]["ownerReferences"][0]["kind"],
        "Deployment"
    );
    assert_eq!(rs.obj["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(rs.annotation(DESIRED_REPLICAS), Some("1"));
    assert_eq!(rs.annotation(MAX_REPLICAS), Some("2"));
}

#[test]
fn bad_input_is_synced_without_panicking() {
    let mut d = deployment(i64::MAX, "x:1");
    d["spec"]["strategy"]["rollingUpdate"] = json!({"maxSurge": "x%", "maxUnavailable": [1]});
    d["spec"]["progressDeadlineSeconds"] = json!(-5);
    d["spec"]["minReadySeconds"] = json!("soon");
    d["metadata"]["annotations"] = json!({REVISION: i64::MAX.to_string()});
    let mut w = World::new(d);
    w.cluster.seed(
        Kind::ReplicaSet,
        json!({"metadata": {"name": "web-old", "namespace": "t", "uid": "old",
                "annotations": {REVISION: i64::MAX.to_string(), MAX_REPLICAS: "0"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                    "uid": "uid-1", "controller": true}],
                "labels": {"app": "web"}},
            "spec": {"replicas": i64::MAX, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}},
            "status": {"replicas": i64::MAX, "availableReplicas": i64::MIN,
                "conditions": [{"type": "ReplicaFailure", "status": "True"}]}}),
    );
    for _ in 0..5 {
        w.sync_deployment();
        for rs in w.cluster.list(Kind::ReplicaSet) {
            let _ = sync_replica_set(&mut w.cluster, rs, &mut w.pods);
        }
    }
    w.now = SystemTime::UNIX_EPOCH;
    w.sync_deployment();
}

/// `tests/transcripts/admission_review.json`: a Deployment of one replica
/// a moment after its creation, before its ReplicaSet reported the pod.
#[test]
fn the_status_before_the_pod_is_reported_is_the_recorded_one() {
    let mut w = World::new(deployment(1, "x:1"));
    w.sync_deployment();
    w.sync_deployment();
    let status = &w.deployment()["status"];
    let rs_name = w.replica_sets()[0].name().to_string();
    assert_eq!(
        status,
        &json!({"observedGeneration": 1, "unavailableReplicas": 1, "conditions": [
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
             "message": format!("Created new replica set \"{rs_name}\""),
             "lastUpdateTime": "2027-01-15T08:00:00Z", "lastTransitionTime": "2027-01-15T08:00:00Z"},
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
             "message": "Deployment does not have minimum availability.",
             "lastUpdateTime": "2027-01-15T08:00:00Z", "lastTransitionTime": "2027-01-15T08:00:00Z"}]})
    );
}
