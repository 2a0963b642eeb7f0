//! The DaemonSet controller of kube-controller-manager in a cluster without
//! nodes (`pkg/controller/daemon/daemon_controller.go` `syncDaemonSet`,
//! `constructHistory`, `snapshot`, `dedupCurHistories`, `cleanupHistory`,
//! `storeDaemonSetStatus`; `update.go`): no node wants a daemon pod, so
//! `desiredNumberScheduled` and every count stay 0 and each rollout is
//! complete as soon as the generation is observed. A ControllerRevision
//! `<name>-<hash>` records each template (the hash is `controller.ComputeHash`,
//! see [`super::hash`]).

use std::borrow::Borrow;

use serde_json::{Value, json};

use super::Requeue;
use super::client::{ClientError, Cluster, Kind};
use super::hash::{compute_hash, go_json};
use super::history::{Revision, template_patch};
use super::object::{
    controller_ref, generation, int_at, int_or_zero, is_controlled_by, observed_generation,
    selected_by, selects_everything, with_label,
};
use crate::meta;

/// The label with a DaemonSet revision's hash (`DefaultDaemonSetUniqueLabelKey`).
pub(crate) const HASH_LABEL: &str = "controller-revision-hash";

/// The revisions of `namespace` a DaemonSet owns: controlled by it and
/// selected by its selector (`controlledHistories`, without adoption).
pub(crate) fn owned_revisions(
    ds: &Value,
    in_namespace: impl IntoIterator<Item = impl Borrow<Value>>,
) -> Vec<Revision> {
    in_namespace
        .into_iter()
        .filter(|r| is_controlled_by(r.borrow(), meta::uid(ds)) && selected_by(ds, r.borrow()))
        .map(|obj| Revision {
            obj: obj.borrow().clone(),
        })
        .collect()
}

/// One sync of a DaemonSet from it and the revisions it owns.
pub(crate) fn sync_daemon_set<C: Cluster>(
    cluster: &mut C,
    ds: Value,
    histories: Vec<Revision>,
) -> Result<Requeue, ClientError> {
    if selects_everything(&ds) {
        return Ok(Requeue::Done);
    }
    let (_current, old) = construct_history(cluster, &ds, histories)?;
    let cleanup = cleanup_history(cluster, &ds, old);
    let status = store_status(cluster, &ds);
    cleanup?;
    status?;
    Ok(Requeue::Done)
}

/// `constructHistory`: the revision of the current template (made when
/// missing, renumbered after the newest when it is an old one) and the
/// others.
fn construct_history<C: Cluster>(
    cluster: &mut C,
    ds: &Value,
    histories: Vec<Revision>,
) -> Result<(Revision, Vec<Revision>), ClientError> {
    let patch = go_json(&template_patch(ds));
    let mut current = Vec::new();
    let mut old = Vec::new();
    for mut history in histories {
        if history.label(HASH_LABEL).is_none() {
            let mut relabelled = history.obj.clone();
            let name = history.name().to_string();
            if let Some(labels) = meta::ensure_map(&mut relabelled, &["metadata", "labels"]) {
                labels.insert(HASH_LABEL.into(), json!(name));
            }
            history = Revision {
                obj: cluster.update(Kind::ControllerRevision, relabelled)?,
            };
        }
        if history.raw() == patch {
            current.push(history);
        } else {
            old.push(history);
        }
    }
    let next = old
        .iter()
        .map(Revision::number)
        .max()
        .unwrap_or(0)
        .max(0)
        .saturating_add(1);
    let current = match current.len() {
        0 => snapshot(cluster, ds, next)?,
        _ => {
            let keep = dedup_current(cluster, ds, current)?;
            if keep.number() < next {
                let mut renumbered = keep.obj.clone();
                renumbered["revision"] = json!(next);
                cluster.update(Kind::ControllerRevision, renumbered)?;
            }
            keep
        }
    };
    Ok((current, old))
}

/// `snapshot`: a new revision; a name taken by another template is a hash
/// collision, counted in `status.collisionCount` for the next sync.
fn snapshot<C: Cluster>(
    cluster: &mut C,
    ds: &Value,
    revision: i64,
) -> Result<Revision, ClientError> {
    let template = meta::get_path(ds, &["spec", "template"])
        .cloned()
        .unwrap_or(Value::Null);
    let collision_count = int_at(ds, &["status", "collisionCount"]);
    let hash = compute_hash(&template, collision_count);
    let name = format!("{}-{hash}", meta::name(ds));
    let mut obj = json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": name,
            "namespace": meta::namespace(ds),
            "labels": with_label(meta::get_path(&template, &["metadata", "labels"]), HASH_LABEL, &hash),
            "ownerReferences": [controller_ref(ds, "DaemonSet")]
        },
        "data": template_patch(ds),
        "revision": revision
    });
    if let Some(a) = meta::string_map(ds, "annotations").filter(|a| !a.is_empty()) {
        obj["metadata"]["annotations"] = Value::Object(a.clone());
    }
    match cluster.create(Kind::ControllerRevision, obj) {
        Ok(obj) => Ok(Revision { obj }),
        Err(ClientError::AlreadyExists) => {
            let existing = cluster
                .get(Kind::ControllerRevision, meta::namespace(ds), &name)
                .map(|obj| Revision { obj })
                .ok_or(ClientError::NotFound)?;
            if existing.raw() == go_json(&template_patch(ds)) {
                return Ok(existing);
            }
            if let Some(mut live) =
                cluster.get(Kind::DaemonSet, meta::namespace(ds), meta::name(ds))
            {
                let count = int_or_zero(&live, &["status", "collisionCount"]).saturating_add(1);
                if let Some(status) = meta::ensure_map(&mut live, &["status"]) {
                    status.insert("collisionCount".into(), json!(count));
                }
                let _ = cluster.update_status(Kind::DaemonSet, live);
            }
            Err(ClientError::AlreadyExists)
        }
        Err(e) => Err(e),
    }
}

/// `dedupCurHistories`: of several revisions of the current template the
/// highest is kept, the others deleted.
fn dedup_current<C: Cluster>(
    cluster: &mut C,
    ds: &Value,
    current: Vec<Revision>,
) -> Result<Revision, ClientError> {
    let keep = current
        .iter()
        .fold(None::<&Revision>, |best, r| match best {
            Some(b) if r.number() < b.number() => Some(b),
            _ => Some(r),
        })
        .cloned()
        .ok_or(ClientError::NotFound)?;
    for r in current.iter().filter(|r| r.name() != keep.name()) {
        cluster.delete(Kind::ControllerRevision, meta::namespace(ds), r.name())?;
    }
    Ok(keep)
}

/// `cleanupHistory`: old revisions beyond `revisionHistoryLimit`, lowest
/// revision first (no pod uses any of them: there are no pods).
fn cleanup_history<C: Cluster>(
    cluster: &mut C,
    ds: &Value,
    mut old: Vec<Revision>,
) -> Result<(), ClientError> {
    let keep = int_at(ds, &["spec", "revisionHistoryLimit"]).unwrap_or(10);
    let excess = old.len() as i64 - keep;
    if excess <= 0 {
        return Ok(());
    }
    old.sort_by(|a, b| {
        a.number()
            .cmp(&b.number())
            .then_with(|| a.name().cmp(b.name()))
    });
    for r in old.iter().take(usize::try_from(excess).unwrap_or(0)) {
        cluster.delete(Kind::ControllerRevision, meta::namespace(ds), r.name())?;
    }
    Ok(())
}

/// `storeDaemonSetStatus` with every count 0: written when the generation
/// is not observed yet or a count is not 0; retried once after a fresh read.
fn store_status<C: Cluster>(cluster: &mut C, ds: &Value) -> Result<(), ClientError> {
    let counts = [
        "desiredNumberScheduled",
        "currentNumberScheduled",
        "numberMisscheduled",
        "numberReady",
        "updatedNumberScheduled",
        "numberAvailable",
        "numberUnavailable",
    ];
    let observed = observed_generation(ds);
    if counts.iter().all(|k| int_or_zero(ds, &["status", k]) == 0) && observed >= generation(ds) {
        return Ok(());
    }
    let mut target = ds.clone();
    for attempt in 0..2 {
        if let Some(status) = meta::ensure_map(&mut target, &["status"]) {
            for k in &counts[..4] {
                status.insert((*k).into(), json!(0));
            }
            for k in &counts[4..] {
                status.remove(*k);
            }
            status.insert("observedGeneration".into(), json!(generation(ds)));
        }
        match cluster.update_status(Kind::DaemonSet, target.clone()) {
            Ok(_) => return Ok(()),
            Err(e) if attempt == 1 => return Err(e),
            Err(_) => {
                target = cluster
                    .get(Kind::DaemonSet, meta::namespace(ds), meta::name(ds))
                    .ok_or(ClientError::NotFound)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::fake::FakeCluster;

    fn ds(image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "t"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "revisionHistoryLimit": 1,
                "template": {"metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "c", "image": image}]}}},
            "status": {"currentNumberScheduled": 0, "desiredNumberScheduled": 0,
                "numberMisscheduled": 0, "numberReady": 0}})
    }

    fn sync(cluster: &mut FakeCluster) -> Value {
        let live = cluster.object(Kind::DaemonSet, "t", "agent");
        let histories = owned_revisions(&live, cluster.list(Kind::ControllerRevision));
        sync_daemon_set(cluster, live, histories).unwrap();
        cluster.object(Kind::DaemonSet, "t", "agent")
    }

    #[test]
    fn every_rollout_completes_at_once_with_a_revision_per_template() {
        let mut cluster = FakeCluster::default();
        cluster.seed(Kind::DaemonSet, ds("x:1"));
        let synced = sync(&mut cluster);
        assert_eq!(synced["status"]["observedGeneration"], 1);
        assert_eq!(synced["status"]["desiredNumberScheduled"], 0);
        let revisions = cluster.list(Kind::ControllerRevision);
        assert_eq!(revisions.len(), 1);
        let name = revisions[0]["metadata"]["name"].as_str().unwrap();
        let hash = revisions[0]["metadata"]["labels"][HASH_LABEL]
            .as_str()
            .unwrap();
        assert_eq!(name, format!("agent-{hash}"));
        assert_eq!(revisions[0]["revision"], 1);

        let mut live = synced;
        live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("x:2");
        cluster.update(Kind::DaemonSet, live).unwrap();
        let after = sync(&mut cluster);
        assert_eq!(after["status"]["observedGeneration"], 2);
        assert_eq!(cluster.list(Kind::ControllerRevision).len(), 2);
        let writes = cluster.writes().len();
        sync(&mut cluster);
        assert_eq!(cluster.writes().len(), writes, "settled");
    }

    #[test]
    fn a_rollback_renumbers_the_old_revision_and_old_ones_are_pruned() {
        let mut cluster = FakeCluster::default();
        cluster.seed(Kind::DaemonSet, ds("x:1"));
        let mut live = sync(&mut cluster);
        for image in ["x:2", "x:3", "x:1"] {
            live["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
            cluster.update(Kind::DaemonSet, live).unwrap();
            live = sync(&mut cluster);
        }
        let revisions = cluster.list(Kind::ControllerRevision);
        let numbers: Vec<i64> = revisions
            .iter()
            .map(|r| r["revision"].as_i64().unwrap())
            .collect();
        // revisionHistoryLimit 1: the current one (x:1, now revision 4) and one old.
        assert_eq!(revisions.len(), 2, "{numbers:?}");
        assert!(numbers.contains(&4), "{numbers:?}");
    }
}
