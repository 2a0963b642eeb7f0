//! `pkg/controller/deployment/recreate.go`: a Recreate rollout, old pods gone
//! before the new ReplicaSet is made and sized.

use super::*;

impl<C: Cluster> DeploymentSync<'_, C> {
    /// `rolloutRecreate`: old ReplicaSets to zero, and once their pods are
    /// gone the new one to full size.
    pub(super) fn rollout_recreate(
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
}
