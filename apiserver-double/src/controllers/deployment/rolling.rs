//! `pkg/controller/deployment/rolling.go`: a RollingUpdate rollout, the new
//! ReplicaSet grown within the surge and the old ones shrunk within the
//! minimum availability.

use super::*;

impl<C: Cluster> DeploymentSync<'_, C> {
    /// `rolloutRolling`.
    pub(super) fn rollout_rolling(
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
}
