//! `DeploymentStatus` and its conditions as typed values, read from and
//! written to JSON the way the Go types serialize (`omitempty` integers
//! left out at zero), with the condition helpers of
//! `pkg/controller/deployment/util/deployment_util.go`.

use serde_json::{Map, Value, json};

use crate::controllers::object::{int_or_zero, observed_generation};

/// Condition type `Progressing`.
pub(crate) const PROGRESSING: &str = "Progressing";
/// Condition type `Available`.
pub(crate) const AVAILABLE: &str = "Available";
/// Condition type `ReplicaFailure`.
pub(crate) const REPLICA_FAILURE: &str = "ReplicaFailure";

/// `DeploymentCondition`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Condition {
    /// `type`.
    pub kind: String,
    /// `status`: `True`, `False` or `Unknown`.
    pub status: String,
    /// `lastUpdateTime` (RFC 3339).
    pub last_update: Option<String>,
    /// `lastTransitionTime` (RFC 3339).
    pub last_transition: Option<String>,
    /// `reason`.
    pub reason: String,
    /// `message`.
    pub message: String,
}

impl Condition {
    /// `NewDeploymentCondition`: both times are now.
    pub fn new(kind: &str, status: &str, reason: &str, message: String, now: &str) -> Self {
        Self {
            kind: kind.into(),
            status: status.into(),
            last_update: Some(now.into()),
            last_transition: Some(now.into()),
            reason: reason.into(),
            message,
        }
    }

    fn from_json(v: &Value) -> Self {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let time = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Self {
            kind: s("type"),
            status: s("status"),
            last_update: time("lastUpdateTime"),
            last_transition: time("lastTransitionTime"),
            reason: s("reason"),
            message: s("message"),
        }
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), json!(self.kind));
        m.insert("status".into(), json!(self.status));
        for (k, t) in [
            ("lastUpdateTime", &self.last_update),
            ("lastTransitionTime", &self.last_transition),
        ] {
            m.insert(k.into(), t.as_ref().map_or(Value::Null, |t| json!(t)));
        }
        for (k, v) in [("reason", &self.reason), ("message", &self.message)] {
            if !v.is_empty() {
                m.insert(k.into(), json!(v));
            }
        }
        Value::Object(m)
    }
}

/// `DeploymentStatus`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DeploymentStatus {
    pub observed_generation: i64,
    pub replicas: i64,
    pub updated_replicas: i64,
    pub ready_replicas: i64,
    pub available_replicas: i64,
    pub unavailable_replicas: i64,
    pub conditions: Vec<Condition>,
    pub collision_count: Option<i64>,
}

impl DeploymentStatus {
    /// Reads `status` of a Deployment (missing fields are zero).
    pub fn from_object(obj: &Value) -> Self {
        let status = obj.get("status").cloned().unwrap_or(Value::Null);
        let n = |k: &str| int_or_zero(&status, &[k]);
        Self {
            observed_generation: observed_generation(obj),
            replicas: n("replicas"),
            updated_replicas: n("updatedReplicas"),
            ready_replicas: n("readyReplicas"),
            available_replicas: n("availableReplicas"),
            unavailable_replicas: n("unavailableReplicas"),
            conditions: status
                .get("conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(Condition::from_json)
                .collect(),
            collision_count: status
                .get("collisionCount")
                .map(|_| int_or_zero(&status, &["collisionCount"])),
        }
    }

    /// The JSON form: zero integers and an empty condition list left out.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in [
            ("observedGeneration", self.observed_generation),
            ("replicas", self.replicas),
            ("updatedReplicas", self.updated_replicas),
            ("readyReplicas", self.ready_replicas),
            ("availableReplicas", self.available_replicas),
            ("unavailableReplicas", self.unavailable_replicas),
        ] {
            if v != 0 {
                m.insert(k.into(), json!(v));
            }
        }
        if !self.conditions.is_empty() {
            let list = self.conditions.iter().map(Condition::to_json).collect();
            m.insert("conditions".into(), Value::Array(list));
        }
        if let Some(c) = self.collision_count {
            m.insert("collisionCount".into(), json!(c));
        }
        Value::Object(m)
    }

    /// `GetDeploymentCondition`.
    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }

    /// `SetDeploymentCondition`: nothing when a condition of the type has the
    /// same status and reason; the transition time kept when the status is
    /// the same; the condition moves to the end of the list.
    pub fn set_condition(&mut self, mut condition: Condition) {
        if let Some(current) = self.condition(&condition.kind) {
            if current.status == condition.status && current.reason == condition.reason {
                return;
            }
            if current.status == condition.status {
                condition.last_transition = current.last_transition.clone();
            }
        }
        self.remove_condition(&condition.kind.clone());
        self.conditions.push(condition);
    }

    /// `RemoveDeploymentCondition`.
    pub fn remove_condition(&mut self, kind: &str) {
        self.conditions.retain(|c| c.kind != kind);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(status: &str, reason: &str, at: &str) -> Condition {
        Condition::new(PROGRESSING, status, reason, String::new(), at)
    }

    #[test]
    fn zero_counts_are_left_out_as_omitempty_does() {
        let s = DeploymentStatus {
            observed_generation: 1,
            unavailable_replicas: 1,
            ..DeploymentStatus::default()
        };
        assert_eq!(
            s.to_json(),
            json!({"observedGeneration": 1, "unavailableReplicas": 1})
        );
        assert_eq!(
            DeploymentStatus::from_object(&json!({"status": s.to_json()})),
            s
        );
    }

    #[test]
    fn set_condition_keeps_the_transition_time_and_moves_the_condition_last() {
        let mut s = DeploymentStatus::default();
        s.set_condition(cond("True", "NewReplicaSetCreated", "t1"));
        s.set_condition(Condition::new(
            AVAILABLE,
            "False",
            "MinimumReplicasUnavailable",
            String::new(),
            "t1",
        ));
        s.set_condition(cond("True", "NewReplicaSetCreated", "t2"));
        assert_eq!(
            s.conditions[0].last_update.as_deref(),
            Some("t1"),
            "same status and reason: no change"
        );
        s.set_condition(cond("True", "NewReplicaSetAvailable", "t3"));
        let kinds: Vec<&str> = s.conditions.iter().map(|c| c.kind.as_str()).collect();
        assert_eq!(kinds, [AVAILABLE, PROGRESSING]);
        let p = s.condition(PROGRESSING).unwrap();
        assert_eq!(
            (p.last_update.as_deref(), p.last_transition.as_deref()),
            (Some("t3"), Some("t1"))
        );
        s.set_condition(cond("False", "ProgressDeadlineExceeded", "t4"));
        let p = s.condition(PROGRESSING).unwrap();
        assert_eq!(p.last_transition.as_deref(), Some("t4"));
    }
}
