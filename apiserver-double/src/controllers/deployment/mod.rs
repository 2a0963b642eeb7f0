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

pub(crate) mod status;
pub(crate) mod util;

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
pub(crate) fn owned_replica_sets(deployment: &Value, in_namespace: Vec<Value>) -> Vec<ReplicaSet> {
    let uid = meta::uid(deployment);
    in_namespace
        .into_iter()
        .filter(|rs| is_controlled_by(rs, uid) && selected_by(deployment, rs))
        .map(|obj| ReplicaSet { obj })
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

    /// `syncStatusOnly`.
    fn sync_status_only(
        &mut self,
        d: &mut Deployment,
        rs_list: &[ReplicaSet],
    ) -> Result<(), ClientError> {
        let (new_rs, old_rss) = self.all_replica_sets_and_sync_revision(d, rs_list, false)?;
        let all = all_of(&old_rss, new_rs.as_ref());
        self.sync_deployment_status(&all, new_rs.as_ref(), d)
    }

    /// `sync`: scaling events and paused Deployments.
    fn sync(&mut self, d: &mut Deployment, rs_list: &[ReplicaSet]) -> Result<(), ClientError> {
        let (new_rs, old_rss) = self.all_replica_sets_and_sync_revision(d, rs_list, false)?;
        self.scale(d, new_rs.as_ref(), &old_rss)?;
        if d.paused() {
            self.cleanup_deployment(&old_rss, d)?;
        }
        let all = all_of(&old_rss, new_rs.as_ref());
        self.sync_deployment_status(&all, new_rs.as_ref(), d)
    }

    /// `checkPausedConditions`: an Unknown Progressing condition while
    /// paused, so that the time paused does not count against the deadline.
    fn check_paused_conditions(&mut self, d: &mut Deployment) -> Result<(), ClientError> {
        if d.progress_deadline().is_none() {
            return Ok(());
        }
        let reason = d.status.condition(PROGRESSING).map(|c| c.reason.clone());
        if reason.as_deref() == Some(TIMED_OUT) {
            return Ok(());
        }
        let paused_condition = reason.as_deref() == Some(PAUSED);
        let (reason, message) = match (d.paused(), paused_condition) {
            (true, false) => (PAUSED, "Deployment is paused"),
            (false, true) => (RESUMED, "Deployment is resumed"),
            _ => return Ok(()),
        };
        let now = self.now_str();
        d.status.set_condition(Condition::new(
            PROGRESSING,
            "Unknown",
            reason,
            message.into(),
            &now,
        ));
        self.update_status(d)
    }

    /// `getAllReplicaSetsAndSyncRevision`.
    fn all_replica_sets_and_sync_revision(
        &mut self,
        d: &mut Deployment,
        rs_list: &[ReplicaSet],
        create: bool,
    ) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), ClientError> {
        let old_rss = find_old_replica_sets(d, rs_list);
        let new_rs = self.new_replica_set(d, rs_list, &old_rss, create)?;
        Ok((new_rs, old_rss))
    }

    /// `getNewReplicaSet`: the ReplicaSet of the current template, its
    /// annotations and revision brought up to date, created when missing
    /// and `create` is set.
    fn new_replica_set(
        &mut self,
        d: &mut Deployment,
        rs_list: &[ReplicaSet],
        old_rss: &[ReplicaSet],
        create: bool,
    ) -> Result<Option<ReplicaSet>, ClientError> {
        let new_revision = max_revision(old_rss).saturating_add(1);
        if let Some(existing) = find_new_replica_set(d, rs_list) {
            return self
                .sync_existing_new_replica_set(d, existing, new_revision)
                .map(Some);
        }
        if !create {
            return Ok(None);
        }
        self.create_new_replica_set(d, old_rss, new_revision)
            .map(Some)
    }

    /// The existing-ReplicaSet half of `getNewReplicaSet`.
    fn sync_existing_new_replica_set(
        &mut self,
        d: &mut Deployment,
        existing: ReplicaSet,
        new_revision: i64,
    ) -> Result<ReplicaSet, ClientError> {
        let mut rs = existing;
        let annotations_updated = set_new_replica_set_annotations(d, &mut rs, new_revision, true);
        let min_ready = int_or_zero(&rs.obj, &["spec", "minReadySeconds"]);
        if annotations_updated || min_ready != d.min_ready_seconds() {
            set_min_ready_seconds(&mut rs.obj, d.min_ready_seconds());
            let updated = self.cluster.update(Kind::ReplicaSet, rs.obj)?;
            return Ok(ReplicaSet { obj: updated });
        }
        let revision = rs.annotation(REVISION).unwrap_or("").to_string();
        let mut needs_update = d.set_revision(&revision);
        if d.progress_deadline().is_some() && d.status.condition(PROGRESSING).is_none() {
            let message = format!("Found new replica set {}", quoted(rs.name()));
            let now = self.now_str();
            d.status.set_condition(Condition::new(
                PROGRESSING,
                "True",
                FOUND_NEW_RS,
                message,
                &now,
            ));
            needs_update = true;
        }
        if needs_update {
            self.update_status(d)?;
        }
        Ok(rs)
    }

    /// The creating half of `getNewReplicaSet`.
    fn create_new_replica_set(
        &mut self,
        d: &mut Deployment,
        old_rss: &[ReplicaSet],
        new_revision: i64,
    ) -> Result<ReplicaSet, ClientError> {
        let mut new_rs = self.new_replica_set_object(d);
        let all = all_of(old_rss, Some(&new_rs));
        let replicas = new_rs_new_replicas(d, &all, &new_rs).map_err(ClientError::Other)?;
        new_rs.set_replicas(replicas);
        set_new_replica_set_annotations(d, &mut new_rs, new_revision, false);
        let now = self.now_str();
        let (created, already_existed) =
            match self.cluster.create(Kind::ReplicaSet, new_rs.obj.clone()) {
                Ok(obj) => (ReplicaSet { obj }, false),
                Err(ClientError::AlreadyExists) => (self.adopt_or_collide(d, &new_rs)?, true),
                Err(e) => {
                    if d.progress_deadline().is_some() {
                        let message = format!(
                            "Failed to create new replica set {}: {e}",
                            quoted(new_rs.name())
                        );
                        d.status.set_condition(Condition::new(
                            PROGRESSING,
                            "False",
                            FAILED_RS_CREATE,
                            message,
                            &now,
                        ));
                        // The bigger problem is reported; this write may fail.
                        let _ = self.update_status(d);
                    }
                    return Err(e);
                }
            };
        let mut needs_update = d.set_revision(&new_revision.to_string());
        if !already_existed && d.progress_deadline().is_some() {
            let message = format!("Created new replica set {}", quoted(created.name()));
            d.status.set_condition(Condition::new(
                PROGRESSING,
                "True",
                NEW_RS_CREATED,
                message,
                &now,
            ));
            needs_update = true;
        }
        if needs_update {
            self.update_status(d)?;
        }
        Ok(created)
    }

    /// The ReplicaSet for the current template, not yet sized.
    fn new_replica_set_object(&self, d: &Deployment) -> ReplicaSet {
        let mut template = d.template();
        let hash = compute_hash(&template, d.status.collision_count);
        let labels = with_label(
            meta::get_path(&template, &["metadata", "labels"]),
            POD_TEMPLATE_HASH,
            &hash,
        );
        if let Some(m) = meta::ensure_map(&mut template, &["metadata"]) {
            m.insert("labels".into(), labels.clone());
        }
        let mut selector = meta::get_path(&d.obj, &["spec", "selector"])
            .cloned()
            .unwrap_or_else(|| json!({}));
        let match_labels = with_label(selector.get("matchLabels"), POD_TEMPLATE_HASH, &hash);
        if let Some(s) = selector.as_object_mut() {
            s.insert("matchLabels".into(), match_labels);
        }
        let mut obj = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": format!("{}-{hash}", d.name()),
                "namespace": d.namespace(),
                "labels": labels,
                "ownerReferences": [controller_ref(&d.obj, "Deployment")]
            },
            "spec": {"replicas": 0, "selector": selector, "template": template}
        });
        set_min_ready_seconds(&mut obj, d.min_ready_seconds());
        ReplicaSet { obj }
    }

    /// A create that found the name taken: the Deployment's own ReplicaSet
    /// for this template (a stale read), or a hash collision, which bumps
    /// `collisionCount` so that the next sync tries another name.
    fn adopt_or_collide(
        &mut self,
        d: &mut Deployment,
        new_rs: &ReplicaSet,
    ) -> Result<ReplicaSet, ClientError> {
        let existing = self
            .cluster
            .get(Kind::ReplicaSet, d.namespace(), new_rs.name())
            .map(|obj| ReplicaSet { obj })
            .ok_or(ClientError::NotFound)?;
        let same_template = existing
            .template()
            .is_some_and(|t| equal_ignore_hash(&d.template(), t));
        if is_controlled_by(&existing.obj, d.uid()) && same_template {
            return Ok(existing);
        }
        d.status.collision_count = Some(d.status.collision_count.unwrap_or(0).saturating_add(1));
        let _ = self.update_status(d);
        Err(ClientError::AlreadyExists)
    }

    /// `scale`: a scaling event or a paused Deployment: the only active
    /// ReplicaSet gets the replicas, or they are spread proportionally.
    fn scale(
        &mut self,
        d: &Deployment,
        new_rs: Option<&ReplicaSet>,
        old_rss: &[ReplicaSet],
    ) -> Result<(), ClientError> {
        if let Some(rs) = find_active_or_latest(new_rs, old_rss) {
            if rs.replicas() != d.replicas() {
                self.scale_replica_set_and_record_event(&rs, d.replicas(), d)?;
            }
            return Ok(());
        }
        if is_saturated(d, new_rs) {
            for old in active(old_rss) {
                self.scale_replica_set_and_record_event(&old, 0, d)?;
            }
            return Ok(());
        }
        if d.is_rolling_update() {
            self.scale_proportionally(d, &active(&all_of(old_rss, new_rs)))?;
        }
        Ok(())
    }

    /// The rolling half of `scale`: replicas to add or remove are shared
    /// among the active ReplicaSets by their size, the rest to the first.
    fn scale_proportionally(
        &mut self,
        d: &Deployment,
        active_rss: &[ReplicaSet],
    ) -> Result<(), ClientError> {
        let mut all = active_rss.to_vec();
        let allowed = if d.replicas() > 0 {
            d.replicas() + d.max_surge()
        } else {
            0
        };
        let to_add = allowed - replica_count(&all);
        match to_add.cmp(&0) {
            std::cmp::Ordering::Greater => all.sort_by(by_size_newer),
            std::cmp::Ordering::Less => all.sort_by(by_size_older),
            std::cmp::Ordering::Equal => {}
        }
        let mut added = 0;
        let mut sizes = Vec::with_capacity(all.len());
        for rs in &all {
            if to_add == 0 {
                sizes.push(rs.replicas());
                continue;
            }
            let p = proportion(rs, d, to_add, added);
            sizes.push(rs.replicas() + p);
            added += p;
        }
        for (i, rs) in all.iter().enumerate() {
            let mut size = sizes[i];
            if i == 0 && to_add != 0 {
                size = (size + to_add - added).max(0);
            }
            self.scale_replica_set(rs, size, d)?;
        }
        Ok(())
    }

    /// `scaleReplicaSetAndRecordEvent` (without the Event).
    fn scale_replica_set_and_record_event(
        &mut self,
        rs: &ReplicaSet,
        replicas: i64,
        d: &Deployment,
    ) -> Result<(bool, ReplicaSet), ClientError> {
        if rs.replicas() == replicas {
            return Ok((false, rs.clone()));
        }
        self.scale_replica_set(rs, replicas, d)
    }

    /// `scaleReplicaSet`: the size and the replica annotations.
    fn scale_replica_set(
        &mut self,
        rs: &ReplicaSet,
        replicas: i64,
        d: &Deployment,
    ) -> Result<(bool, ReplicaSet), ClientError> {
        let max = d.replicas() + d.max_surge();
        let resize = rs.replicas() != replicas;
        if !resize && !replicas_annotations_need_update(rs, d.replicas(), max) {
            return Ok((false, rs.clone()));
        }
        let mut copy = rs.clone();
        copy.set_replicas(replicas);
        set_replicas_annotations(&mut copy, d.replicas(), max);
        let updated = self.cluster.update(Kind::ReplicaSet, copy.obj)?;
        Ok((resize, ReplicaSet { obj: updated }))
    }

    /// `cleanupDeployment`: old ReplicaSets beyond `revisionHistoryLimit`,
    /// oldest revision first, once they have no pods.
    fn cleanup_deployment(
        &mut self,
        old_rss: &[ReplicaSet],
        d: &Deployment,
    ) -> Result<(), ClientError> {
        let Some(limit) = d.revision_history_limit() else {
            return Ok(());
        };
        let mut cleanable: Vec<ReplicaSet> = old_rss
            .iter()
            .filter(|rs| !rs.is_deleting())
            .cloned()
            .collect();
        let excess = cleanable.len() as i64 - limit;
        if excess <= 0 {
            return Ok(());
        }
        cleanable.sort_by(by_revision);
        for rs in cleanable.iter().take(usize::try_from(excess).unwrap_or(0)) {
            let busy = rs.status_replicas() != 0
                || rs.replicas() != 0
                || rs.generation() > rs.observed_generation();
            if busy || rs.is_deleting() {
                continue;
            }
            match self
                .cluster
                .delete(Kind::ReplicaSet, d.namespace(), rs.name())
            {
                Ok(()) | Err(ClientError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `syncDeploymentStatus`.
    fn sync_deployment_status(
        &mut self,
        all: &[ReplicaSet],
        new_rs: Option<&ReplicaSet>,
        d: &mut Deployment,
    ) -> Result<(), ClientError> {
        let status = self.calculate_status(all, new_rs, d);
        if status == d.status {
            return Ok(());
        }
        d.status = status;
        self.update_status(d)
    }

    /// `calculateStatus`: counts from the ReplicaSets and the Available
    /// condition.
    fn calculate_status(
        &self,
        all: &[ReplicaSet],
        new_rs: Option<&ReplicaSet>,
        d: &Deployment,
    ) -> DeploymentStatus {
        let available = available_replica_count(all);
        let mut status = DeploymentStatus {
            observed_generation: d.generation(),
            replicas: actual_replica_count(all),
            updated_replicas: new_rs.map_or(0, ReplicaSet::status_replicas),
            ready_replicas: ready_replica_count(all),
            available_replicas: available,
            unavailable_replicas: (replica_count(all) - available).max(0),
            conditions: d.status.conditions.clone(),
            collision_count: d.status.collision_count,
        };
        let now = self.now_str();
        let condition = if available >= d.replicas() - d.max_unavailable() {
            Condition::new(
                AVAILABLE,
                "True",
                MIN_AVAILABLE,
                "Deployment has minimum availability.".into(),
                &now,
            )
        } else {
            Condition::new(
                AVAILABLE,
                "False",
                MIN_UNAVAILABLE,
                "Deployment does not have minimum availability.".into(),
                &now,
            )
        };
        status.set_condition(condition);
        status
    }

    /// `isScalingEvent`: an active ReplicaSet was sized for another replica count.
    fn is_scaling_event(
        &mut self,
        d: &mut Deployment,
        rs_list: &[ReplicaSet],
    ) -> Result<bool, ClientError> {
        let (new_rs, old_rss) = self.all_replica_sets_and_sync_revision(d, rs_list, false)?;
        let scaled = active(&all_of(&old_rss, new_rs.as_ref()))
            .iter()
            .filter_map(desired_replicas_annotation)
            .any(|desired| desired != d.replicas());
        Ok(scaled)
    }

    /// `rolloutRolling`.
    fn rollout_rolling(
        &mut self,
        d: &mut Deployment,
        rs_list: &[ReplicaSet],
    ) -> Result<(), ClientError> {
        let (new_rs, old_rss) = self.all_replica_sets_and_sync_revision(d, rs_list, true)?;
        let new_rs = new_rs.ok_or_else(|| ClientError::Other("no new replica set".into()))?;
        let all = all_of(&old_rss, Some(&new_rs));
        if self.reconcile_new_replica_set(&all, &new_rs, d)? {
            return self.sync_rollout_status(&all, Some(&new_rs), d);
        }
        if self.reconcile_old_replica_sets(&all, &active(&old_rss), &new_rs, d)? {
            return self.sync_rollout_status(&all, Some(&new_rs), d);
        }
        if deployment_complete(d, &d.status) {
            self.cleanup_deployment(&old_rss, d)?;
        }
        self.sync_rollout_status(&all, Some(&new_rs), d)
    }

    /// `reconcileNewReplicaSet`: grow the new ReplicaSet within the surge.
    fn reconcile_new_replica_set(
        &mut self,
        all: &[ReplicaSet],
        new_rs: &ReplicaSet,
        d: &Deployment,
    ) -> Result<bool, ClientError> {
        if new_rs.replicas() == d.replicas() {
            return Ok(false);
        }
        let target = if new_rs.replicas() > d.replicas() {
            d.replicas()
        } else {
            new_rs_new_replicas(d, all, new_rs).map_err(ClientError::Other)?
        };
        Ok(self
            .scale_replica_set_and_record_event(new_rs, target, d)?
            .0)
    }

    /// `reconcileOldReplicaSets`: shrink old ReplicaSets as far as the
    /// minimum availability allows, unhealthy replicas first.
    fn reconcile_old_replica_sets(
        &mut self,
        all: &[ReplicaSet],
        old_rss: &[ReplicaSet],
        new_rs: &ReplicaSet,
        d: &Deployment,
    ) -> Result<bool, ClientError> {
        if replica_count(old_rss) == 0 {
            return Ok(false);
        }
        let min_available = d.replicas() - d.max_unavailable();
        let new_unavailable = new_rs.replicas() - new_rs.available_replicas();
        let max_scaled_down = replica_count(all) - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return Ok(false);
        }
        // The real controller swallows these errors too.
        let Ok((old_rss, cleaned)) = self.cleanup_unhealthy_replicas(old_rss, d, max_scaled_down)
        else {
            return Ok(false);
        };
        let all = all_of(&old_rss, Some(new_rs));
        let Ok(scaled) = self.scale_down_old_replica_sets(&all, &old_rss, d) else {
            return Ok(false);
        };
        Ok(cleaned + scaled > 0)
    }

    /// `cleanupUnhealthyReplicas`: old replicas that are not available go
    /// first, oldest ReplicaSet first.
    fn cleanup_unhealthy_replicas(
        &mut self,
        old_rss: &[ReplicaSet],
        d: &Deployment,
        max_cleanup: i64,
    ) -> Result<(Vec<ReplicaSet>, i64), ClientError> {
        let mut olds = old_rss.to_vec();
        olds.sort_by(by_creation);
        let mut total = 0;
        for target in &mut olds {
            if total >= max_cleanup {
                break;
            }
            let unhealthy = target.replicas() - target.available_replicas();
            if target.replicas() == 0 || unhealthy == 0 {
                continue;
            }
            let count = (max_cleanup - total).min(unhealthy);
            let (_, updated) =
                self.scale_replica_set_and_record_event(target, target.replicas() - count, d)?;
            total += count;
            *target = updated;
        }
        Ok((olds, total))
    }

    /// `scaleDownOldReplicaSetsForRollingUpdate`: available old replicas
    /// beyond the minimum availability.
    fn scale_down_old_replica_sets(
        &mut self,
        all: &[ReplicaSet],
        old_rss: &[ReplicaSet],
        d: &Deployment,
    ) -> Result<i64, ClientError> {
        let min_available = d.replicas() - d.max_unavailable();
        let available = available_replica_count(all);
        if available <= min_available {
            return Ok(0);
        }
        let mut olds = old_rss.to_vec();
        olds.sort_by(by_creation);
        let to_scale = available - min_available;
        let mut total = 0;
        for target in &olds {
            if total >= to_scale {
                break;
            }
            if target.replicas() == 0 {
                continue;
            }
            let count = target.replicas().min(to_scale - total);
            self.scale_replica_set_and_record_event(target, target.replicas() - count, d)?;
            total += count;
        }
        Ok(total)
    }

    /// `rolloutRecreate`: old ReplicaSets to zero, and once their pods are
    /// gone the new one to full size.
    fn rollout_recreate(
        &mut self,
        d: &mut Deployment,
        rs_list: &[ReplicaSet],
    ) -> Result<(), ClientError> {
        let (new_rs, old_rss) = self.all_replica_sets_and_sync_revision(d, rs_list, false)?;
        let all = all_of(&old_rss, new_rs.as_ref());
        let mut scaled_down = false;
        for rs in active(&old_rss) {
            scaled_down |= self.scale_replica_set_and_record_event(&rs, 0, d)?.0;
        }
        if scaled_down || self.old_pods_running(new_rs.as_ref(), &old_rss) {
            return self.sync_rollout_status(&all, new_rs.as_ref(), d);
        }
        let (new_rs, old_rss) = match new_rs {
            Some(rs) => (rs, old_rss),
            None => {
                let (new_rs, old_rss) =
                    self.all_replica_sets_and_sync_revision(d, rs_list, true)?;
                let new_rs =
                    new_rs.ok_or_else(|| ClientError::Other("no new replica set".into()))?;
                (new_rs, old_rss)
            }
        };
        let all = all_of(&old_rss, Some(&new_rs));
        self.scale_replica_set_and_record_event(&new_rs, d.replicas(), d)?;
        if deployment_complete(d, &d.status) {
            self.cleanup_deployment(&old_rss, d)?;
        }
        self.sync_rollout_status(&all, Some(&new_rs), d)
    }

    /// `oldPodsRunning`: old ReplicaSets still report pods, or pods of them
    /// still exist.
    fn old_pods_running(&self, new_rs: Option<&ReplicaSet>, old_rss: &[ReplicaSet]) -> bool {
        if actual_replica_count(old_rss) > 0 {
            return true;
        }
        old_rss
            .iter()
            .filter(|rs| new_rs.is_none_or(|n| n.uid() != rs.uid()))
            .any(|rs| self.pods.get(rs.uid()).is_some_and(|n| *n > 0))
    }

    /// `syncRolloutStatus`: the status with the Progressing condition
    /// judged against the progress deadline.
    fn sync_rollout_status(
        &mut self,
        all: &[ReplicaSet],
        new_rs: Option<&ReplicaSet>,
        d: &mut Deployment,
    ) -> Result<(), ClientError> {
        let mut status = self.calculate_status(all, new_rs, d);
        if d.progress_deadline().is_none() {
            status.remove_condition(PROGRESSING);
        }
        let current = d.status.condition(PROGRESSING).cloned();
        let complete_before = status.replicas == status.updated_replicas
            && current
                .as_ref()
                .is_some_and(|c| c.reason == NEW_RS_AVAILABLE);
        if d.progress_deadline().is_some() && !complete_before {
            self.judge_progress(d, new_rs, current.as_ref(), &mut status);
        }
        match replica_failures(all, new_rs).into_iter().next() {
            Some(failure) => status.set_condition(failure),
            None => status.remove_condition(REPLICA_FAILURE),
        }
        if status == d.status {
            self.requeue_stuck_deployment(d, &status);
            return Ok(());
        }
        d.status = status;
        self.update_status(d)
    }

    /// The Progressing condition: complete, progressing, or timed out.
    fn judge_progress(
        &self,
        d: &Deployment,
        new_rs: Option<&ReplicaSet>,
        current: Option<&Condition>,
        status: &mut DeploymentStatus,
    ) {
        let subject = match new_rs {
            Some(rs) => format!("ReplicaSet {}", quoted(rs.name())),
            None => format!("Deployment {}", quoted(d.name())),
        };
        let now = self.now_str();
        if deployment_complete(d, status) {
            let message = format!("{subject} has successfully progressed.");
            status.set_condition(Condition::new(
                PROGRESSING,
                "True",
                NEW_RS_AVAILABLE,
                message,
                &now,
            ));
        } else if deployment_progressing(d, status) {
            let message = format!("{subject} is progressing.");
            let mut condition = Condition::new(PROGRESSING, "True", RS_UPDATED, message, &now);
            // Progress updates the time even with an unchanged reason.
            if let Some(current) = current {
                if current.status == "True" {
                    condition.last_transition = current.last_transition.clone();
                }
                status.remove_condition(PROGRESSING);
            }
            status.set_condition(condition);
        } else if deployment_timed_out(d, status, self.now) {
            let message = format!("{subject} has timed out progressing.");
            status.set_condition(Condition::new(
                PROGRESSING,
                "False",
                TIMED_OUT,
                message,
                &now,
            ));
        }
    }

    /// `requeueStuckDeployment`: look again when the deadline may have
    /// passed. Where the real controller polls every few milliseconds for
    /// the last second, the double looks once just after the deadline.
    fn requeue_stuck_deployment(&mut self, d: &Deployment, status: &DeploymentStatus) {
        let Some(current) = d.status.condition(PROGRESSING) else {
            return;
        };
        if d.progress_deadline().is_none()
            || deployment_complete(d, status)
            || current.reason == TIMED_OUT
        {
            return;
        }
        let Some(deadline) = progress_deadline_at(d, current) else {
            return;
        };
        let after = deadline.duration_since(self.now).unwrap_or(Duration::ZERO);
        self.requeue = if after < Duration::from_secs(1) {
            Requeue::After(after + Duration::from_millis(5))
        } else {
            Requeue::After(after + Duration::from_secs(1))
        };
    }
}

/// `spec.minReadySeconds`, left out at zero as the Go type does.
fn set_min_ready_seconds(rs: &mut Value, seconds: i64) {
    if let Some(spec) = meta::ensure_map(rs, &["spec"]) {
        if seconds == 0 {
            spec.remove("minReadySeconds");
        } else {
            spec.insert("minReadySeconds".into(), Value::from(seconds));
        }
    }
}

/// `getReplicaFailures`: the ReplicaFailure conditions of the new
/// ReplicaSet, else of any, as Deployment conditions.
fn replica_failures(all: &[ReplicaSet], new_rs: Option<&ReplicaSet>) -> Vec<Condition> {
    let failures = |rs: &ReplicaSet| -> Vec<Condition> {
        rs.conditions()
            .iter()
            .filter(|c| c.get("type").and_then(Value::as_str) == Some(REPLICA_FAILURE))
            .map(|c| {
                let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                let transition = c
                    .get("lastTransitionTime")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                Condition {
                    kind: REPLICA_FAILURE.into(),
                    status: s("status"),
                    last_update: transition.clone(),
                    last_transition: transition,
                    reason: s("reason"),
                    message: s("message"),
                }
            })
            .collect()
    };
    let from_new = new_rs.map(failures).unwrap_or_default();
    if !from_new.is_empty() {
        return from_new;
    }
    all.iter().flat_map(failures).collect()
}

#[cfg(test)]
mod tests;
