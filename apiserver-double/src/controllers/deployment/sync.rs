//! `pkg/controller/deployment/sync.go`: the new ReplicaSet and its revision,
//! scaling events and paused Deployments, the history limit, and the status
//! counts.

use super::*;

impl<C: Cluster> DeploymentSync<'_, C> {
    /// `syncStatusOnly`.
    pub(super) fn sync_status_only(
        &mut self,
        d: &mut Deployment,
        rs_list: &[ReplicaSet],
    ) -> Result<(), ClientError> {
        let (new_rs, old_rss) = self.all_replica_sets_and_sync_revision(d, rs_list, false)?;
        let all = all_of(&old_rss, new_rs.as_ref());
        self.sync_deployment_status(&all, new_rs.as_ref(), d)
    }

    /// `sync`: scaling events and paused Deployments.
    pub(super) fn sync(
        &mut self,
        d: &mut Deployment,
        rs_list: &[ReplicaSet],
    ) -> Result<(), ClientError> {
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
    pub(super) fn check_paused_conditions(
        &mut self,
        d: &mut Deployment,
    ) -> Result<(), ClientError> {
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
    pub(super) fn all_replica_sets_and_sync_revision(
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
    pub(super) fn scale_replica_set_and_record_event(
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
    pub(super) fn cleanup_deployment(
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
    pub(super) fn calculate_status(
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
    pub(super) fn is_scaling_event(
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
