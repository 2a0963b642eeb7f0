//! `pkg/controller/deployment/progress.go`: the Progressing condition judged
//! against the progress deadline, and when to look again.

use super::*;

impl<C: Cluster> DeploymentSync<'_, C> {
    /// `syncRolloutStatus`: the status with the Progressing condition
    /// judged against the progress deadline.
    pub(super) fn sync_rollout_status(
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
