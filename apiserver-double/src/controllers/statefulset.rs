//! The StatefulSet controller of kube-controller-manager in a cluster
//! without nodes (`pkg/controller/statefulset/stateful_set_control.go`
//! `UpdateStatefulSet`, `getStatefulSetRevisions`, `updateStatefulSet`,
//! `truncateHistory`; `stateful_set_utils.go` `newVersionedStatefulSetPod`,
//! `completeRollingUpdate`, `inconsistentStatus`;
//! `stateful_set_status_updater.go`).
//!
//! Pods are not served by the double; the controller keeps each
//! StatefulSet's pods (ordinal and revision) instead. They are created
//! Pending and never become Running and Ready, so with `OrderedReady` only
//! pod 0 is ever created and a template change never reaches it: the
//! `currentRevision` stays and the rollout never completes. With no
//! replicas there is nothing to wait for and `currentRevision` becomes the
//! `updateRevision` at once. A pod created by a sync is counted from the
//! next sync on (`isCreated` needs the phase the apiserver gives it).

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value, json};

use super::Requeue;
use super::client::{ClientError, Cluster, Kind};
use super::history::{
    Revision, create_revision, equal_revisions, new_stateful_set_revision, next_revision,
    renumber_revision,
};
use super::object::{generation, int_at, int_or_zero, is_deleting, observed_generation, str_at};
use crate::meta;

/// The most pods the double keeps for one StatefulSet: one asking for more
/// (a real cluster would try to make them all) gets this many.
const MAX_PODS: i64 = 10_000;

/// The pods of one StatefulSet: ordinal → the revision it was made from.
pub(crate) type Pods = BTreeMap<i64, String>;
/// The pods of every StatefulSet, by the StatefulSet's UID.
pub(crate) type StatefulPods = HashMap<String, Pods>;

/// `StatefulSetStatus` as the controller computes it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Status {
    observed_generation: i64,
    replicas: i64,
    ready_replicas: i64,
    current_replicas: i64,
    updated_replicas: i64,
    current_revision: String,
    update_revision: String,
    collision_count: i64,
    available_replicas: i64,
}

impl Status {
    fn read(set: &Value) -> Self {
        let n = |k: &str| int_or_zero(set, &["status", k]);
        let s = |k: &str| str_at(set, &["status", k]).to_string();
        Self {
            observed_generation: observed_generation(set),
            replicas: n("replicas"),
            ready_replicas: n("readyReplicas"),
            current_replicas: n("currentReplicas"),
            updated_replicas: n("updatedReplicas"),
            current_revision: s("currentRevision"),
            update_revision: s("updateRevision"),
            collision_count: n("collisionCount"),
            available_replicas: n("availableReplicas"),
        }
    }

    /// The JSON form (`replicas` and `availableReplicas` are not omitempty).
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: i64, always: bool| {
            if always || v != 0 {
                m.insert(k.into(), json!(v));
            }
        };
        put("observedGeneration", self.observed_generation, false);
        put("replicas", self.replicas, true);
        put("readyReplicas", self.ready_replicas, false);
        put("currentReplicas", self.current_replicas, false);
        put("updatedReplicas", self.updated_replicas, false);
        put("collisionCount", self.collision_count, true);
        put("availableReplicas", self.available_replicas, true);
        for (k, v) in [
            ("currentRevision", &self.current_revision),
            ("updateRevision", &self.update_revision),
        ] {
            if !v.is_empty() {
                m.insert(k.into(), json!(v));
            }
        }
        Value::Object(m)
    }

    /// `inconsistentStatus`: whether `self` (computed) differs from what
    /// `set` reports.
    fn differs_from(&self, set: &Value) -> bool {
        let old = Status::read(set);
        self.observed_generation > old.observed_generation
            || self.replicas != old.replicas
            || self.current_replicas != old.current_replicas
            || self.ready_replicas != old.ready_replicas
            || self.updated_replicas != old.updated_replicas
            || self.current_revision != old.current_revision
            || self.available_replicas != old.available_replicas
            || self.update_revision != old.update_revision
    }
}

/// One pod as the sync sees it: made before this sync (`created`) or not.
#[derive(Debug, Clone)]
struct Pod {
    ordinal: i64,
    revision: String,
    created: bool,
}

/// One sync of a StatefulSet from it, its revisions (as read now, sorted)
/// and its pods.
pub(crate) fn sync_stateful_set<C: Cluster>(
    cluster: &mut C,
    set: Value,
    revisions: Vec<Revision>,
    all_pods: &mut StatefulPods,
) -> Result<Requeue, ClientError> {
    let uid = meta::uid(&set).to_string();
    let seen = all_pods.get(&uid).cloned().unwrap_or_default();
    let (current, update, collision_count) = stateful_set_revisions(cluster, &set, &revisions)?;
    let plan = update_stateful_set(&set, &current, &update, collision_count, &seen);
    let status_result = update_status(cluster, &set, plan.status);
    truncate_history(cluster, &set, &seen, &revisions, &current, &update)?;
    status_result?;
    if plan.pods == seen {
        return Ok(Requeue::Done);
    }
    all_pods.insert(uid, plan.pods);
    Ok(Requeue::Observe)
}

/// `getStatefulSetRevisions`: the current revision and the revision of the
/// template now, created (or renumbered, for a rollback) when needed.
fn stateful_set_revisions<C: Cluster>(
    cluster: &mut C,
    set: &Value,
    revisions: &[Revision],
) -> Result<(Revision, Revision, i64), ClientError> {
    let mut collision_count = int_or_zero(set, &["status", "collisionCount"]);
    let wanted = new_stateful_set_revision(set, next_revision(revisions), collision_count);
    let equal = equal_revisions(revisions, &wanted);
    let update = match (equal.last(), revisions.last()) {
        (Some(eq), Some(last)) if eq.raw() == last.raw() => last.clone(),
        (Some(eq), _) => renumber_revision(cluster, eq, wanted.number())?,
        (None, _) => create_revision(cluster, set, &wanted, &mut collision_count)?,
    };
    let current_name = str_at(set, &["status", "currentRevision"]);
    let current = revisions
        .iter()
        .find(|r| r.name() == current_name)
        .cloned()
        .unwrap_or_else(|| update.clone());
    Ok((current, update, collision_count))
}

/// What `updateStatefulSet` decides: the status to report and the pods
/// after its creations and deletions.
struct Plan {
    status: Status,
    pods: Pods,
}

/// `updateStatefulSet` for pods that are never Running and Ready.
fn update_stateful_set(
    set: &Value,
    current: &Revision,
    update: &Revision,
    collision_count: i64,
    seen: &Pods,
) -> Plan {
    let mut status = Status {
        observed_generation: generation(set),
        current_revision: current.name().into(),
        update_revision: update.name().into(),
        collision_count,
        ..Status::default()
    };
    let seen_list: Vec<Pod> = seen
        .iter()
        .map(|(o, r)| Pod {
            ordinal: *o,
            revision: r.clone(),
            created: true,
        })
        .collect();
    count_pods(&mut status, &[&seen_list]);
    let mut pods = seen.clone();
    if is_deleting(set) {
        return Plan { status, pods };
    }
    let replica_count = int_at(set, &["spec", "replicas"])
        .unwrap_or(1)
        .clamp(0, MAX_PODS);
    let start = int_at(set, &["spec", "ordinals", "start"])
        .unwrap_or(0)
        .max(0);
    let end = start + replica_count - 1;
    let replicas: Vec<Pod> = (start..=end)
        .map(|ordinal| match seen.get(&ordinal) {
            Some(revision) => Pod {
                ordinal,
                revision: revision.clone(),
                created: true,
            },
            None => Pod {
                ordinal,
                revision: new_pod_revision(set, current, update, ordinal),
                created: false,
            },
        })
        .collect();
    let mut condemned: Vec<Pod> = seen_list
        .iter()
        .filter(|p| p.ordinal > end || p.ordinal < start)
        .cloned()
        .collect();
    condemned.sort_by_key(|p| std::cmp::Reverse(p.ordinal));
    let first_unavailable = replicas
        .first()
        .or_else(|| condemned.last())
        .map(|p| p.ordinal);
    let monotonic = str_at(set, &["spec", "podManagementPolicy"]) != "Parallel";

    // Each replica: create what is missing; in order, wait for the first
    // that is not Running and Ready (none ever is).
    for pod in &replicas {
        if !pod.created {
            pods.insert(pod.ordinal, pod.revision.clone());
        }
        if monotonic {
            count_pods(&mut status, &[&replicas, &condemned]);
            return Plan { status, pods };
        }
    }
    // Scale down, highest ordinal first; in order, only the first
    // unavailable pod may go.
    for pod in &condemned {
        if monotonic && Some(pod.ordinal) != first_unavailable {
            count_pods(&mut status, &[&replicas, &condemned]);
            return Plan { status, pods };
        }
        pods.remove(&pod.ordinal);
        if monotonic {
            count_pods(&mut status, &[&replicas, &condemned]);
            return Plan { status, pods };
        }
    }
    count_pods(&mut status, &[&replicas, &condemned]);
    if str_at(set, &["spec", "updateStrategy", "type"]) == "OnDelete" {
        return Plan { status, pods };
    }
    // Rolling update: the highest ordinal not at the update revision is
    // deleted (to be made again from it), then wait for it to be available.
    let partition = int_at(
        set,
        &["spec", "updateStrategy", "rollingUpdate", "partition"],
    )
    .unwrap_or(0);
    let update_min = usize::try_from(partition.max(0)).unwrap_or(0);
    if let Some(target) = (update_min..replicas.len()).next_back() {
        let pod = &replicas[target];
        if pod.revision != update.name() {
            pods.remove(&pod.ordinal);
            status.current_replicas -= 1;
        }
    }
    Plan { status, pods }
}

/// `newVersionedStatefulSetPod`: the revision a new pod is made from.
fn new_pod_revision(set: &Value, current: &Revision, update: &Revision, ordinal: i64) -> String {
    let start = int_at(set, &["spec", "ordinals", "start"]).unwrap_or(0);
    let rolling = str_at(set, &["spec", "updateStrategy", "type"]) == "RollingUpdate";
    let partition = meta::get_path(set, &["spec", "updateStrategy", "rollingUpdate"])
        .filter(|r| !r.is_null())
        .map(|r| int_or_zero(r, &["partition"]));
    let current_replicas = int_or_zero(set, &["status", "currentReplicas"]);
    let keeps_current = match partition {
        None => rolling && ordinal < start + current_replicas,
        Some(p) => ordinal < start + p,
    };
    if keeps_current {
        current.name().into()
    } else {
        update.name().into()
    }
}

/// `updateStatus`: counts over the pods made before this sync (none ready).
fn count_pods(status: &mut Status, lists: &[&[Pod]]) {
    status.replicas = 0;
    status.ready_replicas = 0;
    status.available_replicas = 0;
    status.current_replicas = 0;
    status.updated_replicas = 0;
    for pod in lists.iter().flat_map(|l| l.iter()).filter(|p| p.created) {
        status.replicas += 1;
        if pod.revision == status.current_revision {
            status.current_replicas += 1;
        }
        if pod.revision == status.update_revision {
            status.updated_replicas += 1;
        }
    }
}

/// `updateStatefulSetStatus`: completes a rolling update whose pods are all
/// updated and ready, and writes the status when it changed (retrying on
/// conflicts from a fresh read).
fn update_status<C: Cluster>(
    cluster: &mut C,
    set: &Value,
    mut status: Status,
) -> Result<(), ClientError> {
    let rolling = str_at(set, &["spec", "updateStrategy", "type"]) == "RollingUpdate";
    if rolling
        && status.updated_replicas == status.replicas
        && status.ready_replicas == status.replicas
    {
        status.current_replicas = status.updated_replicas;
        status.current_revision = status.update_revision.clone();
    }
    if !status.differs_from(set) {
        return Ok(());
    }
    let mut target = set.clone();
    for attempt in 0..5 {
        target["status"] = status.to_json();
        match cluster.update_status(Kind::StatefulSet, target.clone()) {
            Ok(_) => return Ok(()),
            Err(e) if attempt == 4 => return Err(e),
            Err(_) => {
                if let Some(fresh) =
                    cluster.get(Kind::StatefulSet, meta::namespace(set), meta::name(set))
                {
                    target = fresh;
                }
            }
        }
    }
    Ok(())
}

/// `truncateHistory`: revisions no pod, nor the current or update revision,
/// uses, beyond `revisionHistoryLimit`, lowest revision first.
fn truncate_history<C: Cluster>(
    cluster: &mut C,
    set: &Value,
    pods: &Pods,
    revisions: &[Revision],
    current: &Revision,
    update: &Revision,
) -> Result<(), ClientError> {
    let live = |r: &Revision| {
        r.name() == current.name()
            || r.name() == update.name()
            || pods.values().any(|p| p == r.name())
    };
    let history: Vec<&Revision> = revisions.iter().filter(|r| !live(r)).collect();
    let limit = int_at(set, &["spec", "revisionHistoryLimit"]).unwrap_or(10);
    let excess = history.len() as i64 - limit;
    if limit < 0 || excess <= 0 {
        return Ok(());
    }
    for r in history.iter().take(usize::try_from(excess).unwrap_or(0)) {
        cluster.delete(Kind::ControllerRevision, meta::namespace(set), r.name())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::fake::FakeCluster;
    use crate::controllers::history::revisions_of;

    fn set(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": "t", "uid": "s1"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "db"}},
                "podManagementPolicy": "OrderedReady", "revisionHistoryLimit": 10,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "template": {"metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "c", "image": image}]}}},
            "status": {"replicas": 0, "availableReplicas": 0}})
    }

    /// Syncs the stored StatefulSet `db` until nothing changes any more.
    fn settle(cluster: &mut FakeCluster, pods: &mut StatefulPods) -> Value {
        for _ in 0..10 {
            let live = cluster.object(Kind::StatefulSet, "t", "db");
            let revisions = revisions_of(&live, cluster.list(Kind::ControllerRevision));
            let writes = cluster.writes().len();
            let requeue = sync_stateful_set(cluster, live, revisions, pods).unwrap();
            if requeue == Requeue::Done && cluster.writes().len() == writes {
                break;
            }
        }
        cluster.object(Kind::StatefulSet, "t", "db")
    }

    fn patch_image(cluster: &mut FakeCluster, image: &str) {
        let mut live = cluster.object(Kind::StatefulSet, "t", "db");
        live["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
        cluster.update(Kind::StatefulSet, live).unwrap();
    }

    #[test]
    fn without_replicas_every_template_change_completes_at_once() {
        let mut cluster = FakeCluster::default();
        cluster.seed(Kind::StatefulSet, set(0, "x:1"));
        let mut pods = StatefulPods::new();
        let first = settle(&mut cluster, &mut pods)["status"].clone();
        assert_eq!(first["currentRevision"], first["updateRevision"]);
        assert_eq!(first["observedGeneration"], 1);
        assert_eq!(first["collisionCount"], 0);
        patch_image(&mut cluster, "x:2");
        let second = settle(&mut cluster, &mut pods)["status"].clone();
        assert_ne!(second["updateRevision"], first["updateRevision"]);
        assert_eq!(second["currentRevision"], second["updateRevision"]);
        assert_eq!(cluster.list(Kind::ControllerRevision).len(), 2);
    }

    #[test]
    fn a_pending_pod_holds_the_current_revision_for_ever() {
        let mut cluster = FakeCluster::default();
        cluster.seed(Kind::StatefulSet, set(3, "x:1"));
        let mut pods = StatefulPods::new();
        let created = settle(&mut cluster, &mut pods)["status"].clone();
        // Ordered: pod 0 only, Pending; it is counted once observed.
        assert_eq!(pods["s1"].len(), 1);
        assert_eq!(created["replicas"], 1);
        assert_eq!(
            (
                created["currentReplicas"].clone(),
                created["updatedReplicas"].clone()
            ),
            (json!(1), json!(1))
        );
        assert!(created.get("readyReplicas").is_none());
        patch_image(&mut cluster, "x:2");
        let after = settle(&mut cluster, &mut pods)["status"].clone();
        assert_eq!(after["currentRevision"], created["currentRevision"]);
        assert_ne!(after["updateRevision"], created["updateRevision"]);
        assert_eq!(after["currentReplicas"], 1);
        assert!(after.get("updatedReplicas").is_none());
        assert_eq!(after["observedGeneration"], 2);
    }

    #[test]
    fn in_parallel_the_highest_pod_is_replaced_then_waited_for() {
        let mut cluster = FakeCluster::default();
        let mut s = set(2, "x:1");
        s["spec"]["podManagementPolicy"] = json!("Parallel");
        cluster.seed(Kind::StatefulSet, s);
        let mut pods = StatefulPods::new();
        let created = settle(&mut cluster, &mut pods)["status"].clone();
        assert_eq!(created["replicas"], 2);
        patch_image(&mut cluster, "x:2");
        let after = settle(&mut cluster, &mut pods)["status"].clone();
        assert_eq!(pods["s1"][&1], after["updateRevision"].as_str().unwrap());
        assert_eq!(pods["s1"][&0], created["currentRevision"].as_str().unwrap());
        assert_eq!(
            (
                after["currentReplicas"].clone(),
                after["updatedReplicas"].clone()
            ),
            (json!(1), json!(1))
        );
        assert_ne!(after["currentRevision"], after["updateRevision"]);
    }

    #[test]
    fn an_absurd_replica_count_is_kept_within_bounds() {
        let mut cluster = FakeCluster::default();
        let mut s = set(i64::MAX, "x:1");
        s["spec"]["podManagementPolicy"] = json!("Parallel");
        s["spec"]["ordinals"] = json!({"start": i64::MAX});
        cluster.seed(Kind::StatefulSet, s);
        let mut pods = StatefulPods::new();
        settle(&mut cluster, &mut pods);
        assert!(pods["s1"].len() as i64 <= MAX_PODS);
    }
}
