//! A workload as nudge reads it: identity, annotations, the pod template, and
//! whether its last rollout has finished. Built from the object's JSON by
//! [`Workload::from_object`], the one place that knows where a kind keeps its
//! pod template.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

use super::{WorkloadId, WorkloadKind};

/// Whether a workload's last rollout has finished, from its `status` (design §5:
/// `min_interval` holds a re-stamp only while the previous rollout has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Rollout {
    /// The controller caught up with the latest generation and every replica is
    /// updated and ready.
    Complete,
    /// The controller has not caught up, or replicas are still being replaced.
    InProgress,
    /// The workload's controller gave up on the rollout: a Deployment's
    /// `Progressing` condition is `False` with reason `ProgressDeadlineExceeded`,
    /// an Argo Rollout's `status.phase` is `Degraded`.
    Failed {
        /// The condition reason or phase that says so.
        reason: RolloutFailure,
    },
    /// The status says nothing usable (no status yet, or a kind without
    /// replica counts).
    #[default]
    Unknown,
}

/// Why a workload's controller says its rollout failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RolloutFailure {
    /// A Deployment's `Progressing` condition: `False`, `ProgressDeadlineExceeded`.
    ProgressDeadlineExceeded,
    /// An Argo Rollout's `status.phase`: `Degraded`.
    Degraded,
    /// A Job's `Failed` (or `FailureTarget`) condition is `True`.
    JobFailed,
}

impl RolloutFailure {
    /// The condition reason or phase, as the controller wrote it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
            Self::Degraded => "Degraded",
            Self::JobFailed => "Failed",
        }
    }
}

/// The parts of a workload nudge reads: what annotations and discovery look at,
/// what the stamp diff compares against, and the rollout state pacing needs.
/// `managedFields`, the rest of the spec and the status are dropped.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Workload {
    /// Which workload.
    pub id: WorkloadId,
    /// `metadata.annotations` of the workload itself.
    pub annotations: BTreeMap<String, String>,
    /// The pod template (at the kind's [`TemplatePath`](super::TemplatePath)).
    pub template: PodTemplateSpec,
    /// Whether its last rollout has finished.
    pub(crate) rollout: Rollout,
    /// Whether its controller starts or replaces a pod only once the previous
    /// one is Running and Ready (a StatefulSet without `podManagementPolicy:
    /// Parallel`): a pod held `Pending` would stall it for good.
    pub(crate) ordered_pods: bool,
    /// `metadata.resourceVersion`, when the object has one: tells an event that
    /// reached nudge late (older than nudge's own write) from a newer one.
    pub resource_version: Option<String>,
    /// `metadata.uid`, when the object has one: the owner of its snapshot
    /// copies (design §5e) is this object, not a later one of the same name.
    pub uid: Option<String>,
    /// The object that controls it (a Job's CronJob), when it has one.
    pub(crate) controller: Option<ControllerRef>,
}

/// The controlling owner of an object: its `metadata.ownerReferences` entry
/// with `controller: true`, in the object's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerRef {
    /// The owner's `apiVersion` (`batch/v1`).
    pub api_version: String,
    /// The owner's kind (`CronJob`).
    pub kind: String,
    /// The owner's name.
    pub name: String,
}

/// Why an object could not be read as a workload.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// `metadata.namespace` or `metadata.name` is missing (nudge stamps
    /// namespaced workloads only).
    #[error("the object has no namespace or name")]
    NoIdentity,
    /// `metadata.annotations` is not a map of strings.
    #[error("metadata.annotations is not a map of strings")]
    Annotations(#[source] serde_json::Error),
    /// The value at the kind's template path is not a pod template.
    #[error("{path} is not a pod template")]
    Template {
        /// The template path of the kind.
        path: String,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}

impl Workload {
    /// The resource version as the etcd revision kube-apiserver makes it, for
    /// ordering; `None` when absent or not a number (another API server).
    pub(crate) fn revision(&self) -> Option<u64> {
        self.resource_version.as_deref()?.parse().ok()
    }

    /// Reads a workload of `kind` from its JSON object. A missing pod template
    /// reads as an empty one (nothing to discover, nothing stamped yet).
    pub fn from_object(kind: &WorkloadKind, mut object: Value) -> Result<Self, WorkloadError> {
        let rollout = if is_job(kind) {
            job_rollout_of(&object)
        } else {
            rollout_of(&object)
        };
        let controller = controller_of(&object);
        let ordered_pods = ordered_pods(kind, &object);
        let str_at = |v: &Value, field: &str| {
            v.pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let (Some(namespace), Some(name)) = (str_at(&object, "namespace"), str_at(&object, "name"))
        else {
            return Err(WorkloadError::NoIdentity);
        };
        let resource_version = str_at(&object, "resourceVersion");
        let uid = str_at(&object, "uid");
        let annotations = match object.pointer_mut("/metadata/annotations").map(Value::take) {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(value) => serde_json::from_value(value).map_err(WorkloadError::Annotations)?,
        };
        let template = take_at(&mut object, kind);
        let template = match template {
            None | Some(Value::Null) => PodTemplateSpec::default(),
            Some(value) => {
                serde_json::from_value(value).map_err(|source| WorkloadError::Template {
                    path: kind.template_path().to_string(),
                    source,
                })?
            }
        };
        Ok(Self {
            id: WorkloadId::new(kind.clone(), namespace, name),
            annotations,
            template,
            rollout,
            ordered_pods,
            resource_version,
            uid,
            controller,
        })
    }

    /// The pod template's annotations, or an empty map.
    pub(crate) fn template_annotations(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .unwrap_or(&EMPTY)
    }
}

/// Whether `object` is a StatefulSet whose pods start in order (the default
/// `OrderedReady` policy).
fn ordered_pods(kind: &WorkloadKind, object: &Value) -> bool {
    kind.group() == "apps"
        && kind.as_str() == "StatefulSet"
        && object
            .pointer("/spec/podManagementPolicy")
            .and_then(Value::as_str)
            != Some("Parallel")
}

/// The owner reference of `object` with `controller: true`.
fn controller_of(object: &Value) -> Option<ControllerRef> {
    let owners = object.pointer("/metadata/ownerReferences")?.as_array()?;
    let owner = owners
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))?;
    let field = |name: &str| owner.get(name).and_then(Value::as_str).map(str::to_owned);
    Some(ControllerRef {
        api_version: field("apiVersion")?,
        kind: field("kind")?,
        name: field("name")?,
    })
}

/// Whether `kind` is `batch/v1` Job.
pub(crate) fn is_job(kind: &WorkloadKind) -> bool {
    kind.group() == "batch" && kind.as_str() == "Job"
}

/// Labels the API server generates on a Job's pod template (and selector):
/// not part of the template the Job was made from.
pub(crate) const GENERATED_JOB_LABELS: [&str; 4] = [
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
];

/// A Job's run, from the conditions kube-controller-manager's Job controller
/// writes: `Complete` (or `SuccessCriteriaMet`, which comes first) `True` is
/// complete, `Failed` (or `FailureTarget`, which comes first) `True` is failed;
/// a Job without either is in progress (its pods may be Pending for good on a
/// cluster without nodes: nudge's own deadline ends that).
fn job_rollout_of(object: &Value) -> Rollout {
    let conditions = object
        .pointer("/status/conditions")
        .and_then(Value::as_array);
    let holds = |types: [&str; 2]| {
        conditions.into_iter().flatten().any(|c| {
            c.get("status").and_then(Value::as_str) == Some("True")
                && c.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| types.contains(&t))
        })
    };
    if holds(["Failed", "FailureTarget"]) {
        Rollout::Failed {
            reason: RolloutFailure::JobFailed,
        }
    } else if holds(["Complete", "SuccessCriteriaMet"]) {
        Rollout::Complete
    } else {
        Rollout::InProgress
    }
}

/// Takes the value at `kind`'s template path out of `object`.
fn take_at(object: &mut Value, kind: &WorkloadKind) -> Option<Value> {
    let mut current = object;
    for segment in kind.template_path().segments() {
        current = current.get_mut(segment)?;
    }
    Some(current.take())
}

/// The rollout state a workload's `status` shows. Rules, in order:
/// `status.observedGeneration` (when a number) behind `metadata.generation` is in
/// progress; a controller's verdict of failure ([`failure_of`]) is failed; an
/// Argo Rollout's `status.phase` is complete when `Healthy`; DaemonSet counts (`desiredNumberScheduled`, `updatedNumberScheduled`,
/// `numberAvailable`) or replica counts (`spec.replicas` against
/// `status.replicas`, `updatedReplicas`, `readyReplicas`, and
/// `currentRevision`/`updateRevision` when both are set; absent counts are 0
/// once the status has an `observedGeneration`) decide the rest; a status with
/// neither is unknown.
fn rollout_of(object: &Value) -> Rollout {
    let Some(status) = object.get("status").filter(|s| s.is_object()) else {
        return Rollout::Unknown;
    };
    let int = |v: &Value, field: &str| v.get(field).and_then(Value::as_i64);
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    // Argo Rollouts writes its observedGeneration as a string.
    let observed = status.get("observedGeneration").and_then(|v| {
        v.as_i64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
    });
    if let (Some(observed), Some(generation)) = (observed, generation)
        && observed < generation
    {
        return Rollout::InProgress;
    }
    if let Some(failed) = failure_of(status) {
        return failed;
    }
    if let Some(phase) = status.get("phase").and_then(Value::as_str) {
        // Argo Rollouts: its phase sums up the counts below.
        return match phase {
            "Healthy" => Rollout::Complete,
            _ => Rollout::InProgress,
        };
    }
    let complete = if let Some(desired) = int(status, "desiredNumberScheduled") {
        let updated = int(status, "updatedNumberScheduled").unwrap_or(0);
        let available = int(status, "numberAvailable").unwrap_or(0);
        updated == desired && available == desired
    } else if ["replicas", "updatedReplicas", "readyReplicas"]
        .iter()
        .any(|f| status.get(f).is_some())
        // A Deployment's counts are `omitempty`: scaled to zero, a caught-up
        // status has none of them.
        || (observed.is_some()
            && object.pointer("/spec/replicas").and_then(Value::as_i64).is_some())
    {
        let desired = object
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let counts = ["replicas", "updatedReplicas", "readyReplicas"]
            .map(|field| int(status, field).unwrap_or(0));
        let revisions = (
            status.get("currentRevision").and_then(Value::as_str),
            status.get("updateRevision").and_then(Value::as_str),
        );
        let same_revision = match revisions {
            (Some(current), Some(update)) => current == update,
            _ => true,
        };
        counts.iter().all(|n| *n == desired) && same_revision
    } else {
        return Rollout::Unknown;
    };
    if complete {
        Rollout::Complete
    } else {
        Rollout::InProgress
    }
}

/// A controller's verdict that the rollout failed: a Deployment's
/// `Progressing=False` with `ProgressDeadlineExceeded` (kube-controller-manager's
/// `deployment/util/deployment_util.go`), an Argo Rollout's `Degraded` phase.
fn failure_of(status: &Value) -> Option<Rollout> {
    const DEADLINE: &str = "ProgressDeadlineExceeded";
    let conditions = status.get("conditions").and_then(Value::as_array);
    let deadline_exceeded = conditions.into_iter().flatten().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("Progressing")
            && c.get("status").and_then(Value::as_str) == Some("False")
            && c.get("reason").and_then(Value::as_str) == Some(DEADLINE)
    });
    if deadline_exceeded {
        return Some(Rollout::Failed {
            reason: RolloutFailure::ProgressDeadlineExceeded,
        });
    }
    (status.get("phase").and_then(Value::as_str) == Some("Degraded")).then_some(Rollout::Failed {
        reason: RolloutFailure::Degraded,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::TemplatePath;

    fn mk_deployment(status: Value) -> Value {
        json!({
            "metadata": {"namespace": "ns", "name": "web", "generation": 3,
                         "annotations": {"nudge.dev/auto": "true"}},
            "spec": {"replicas": 2, "template": {"metadata": {"annotations": {"a": "b"}},
                     "spec": {"containers": [{"name": "app"}]}}},
            "status": status,
        })
    }

    #[test]
    fn a_workload_is_read_from_its_object_at_the_kinds_template_path() {
        let workload =
            Workload::from_object(&WorkloadKind::deployment(), mk_deployment(json!({}))).unwrap();
        assert_eq!(workload.id.to_string(), "Deployment/ns/web");
        assert_eq!(workload.annotations["nudge.dev/auto"], "true");
        assert_eq!(workload.template_annotations()["a"], "b");

        let cron = WorkloadKind::new(
            "batch",
            "v1",
            "CronJob",
            TemplatePath::parse("spec.jobTemplate.spec.template").unwrap(),
        );
        let object = json!({
            "metadata": {"namespace": "ns", "name": "nightly"},
            "spec": {"jobTemplate": {"spec": {"template": {"metadata": {"annotations": {"x": "y"}}}}}},
        });
        let workload = Workload::from_object(&cron, object).unwrap();
        assert_eq!(workload.template_annotations()["x"], "y");
    }

    #[test]
    fn objects_without_identity_or_with_a_bad_template_are_errors() {
        let kind = WorkloadKind::deployment();
        let no_name = json!({"metadata": {"namespace": "ns"}});
        assert!(matches!(
            Workload::from_object(&kind, no_name),
            Err(WorkloadError::NoIdentity)
        ));
        let bad = json!({"metadata": {"namespace": "ns", "name": "x"},
                         "spec": {"template": {"spec": {"containers": "nope"}}}});
        assert!(matches!(
            Workload::from_object(&kind, bad),
            Err(WorkloadError::Template { .. })
        ));
        let missing = json!({"metadata": {"namespace": "ns", "name": "x"}});
        assert!(Workload::from_object(&kind, missing).is_ok());
    }

    #[test]
    fn rollout_is_complete_only_when_caught_up_and_every_replica_is_updated_and_ready() {
        let done = json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2,
                          "readyReplicas": 2, "availableReplicas": 2});
        assert_eq!(rollout_of(&mk_deployment(done)), Rollout::Complete);
        let behind = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                            "readyReplicas": 2});
        assert_eq!(rollout_of(&mk_deployment(behind)), Rollout::InProgress);
        let surging = json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 2,
                             "readyReplicas": 2});
        assert_eq!(rollout_of(&mk_deployment(surging)), Rollout::InProgress);
        assert_eq!(rollout_of(&mk_deployment(json!({}))), Rollout::Unknown);
        assert_eq!(rollout_of(&json!({"metadata": {}})), Rollout::Unknown);
    }

    #[test]
    fn a_deployment_scaled_to_zero_is_complete_once_caught_up() {
        // What kube-controller-manager writes: the counts are `omitempty`.
        let scaled_to_zero = |observed: i64| {
            json!({"metadata": {"generation": 2}, "spec": {"replicas": 0},
                   "status": {"observedGeneration": observed}})
        };
        assert_eq!(rollout_of(&scaled_to_zero(2)), Rollout::Complete);
        assert_eq!(rollout_of(&scaled_to_zero(1)), Rollout::InProgress);
        let no_counts_yet = json!({"metadata": {"generation": 2}, "spec": {"replicas": 2},
                                   "status": {"observedGeneration": 2}});
        assert_eq!(rollout_of(&no_counts_yet), Rollout::InProgress);
    }

    #[test]
    fn a_deployment_past_its_progress_deadline_failed_once_caught_up() {
        let timed_out = |observed: i64| {
            json!({"metadata": {"generation": 2}, "spec": {"replicas": 1},
                   "status": {"observedGeneration": observed, "replicas": 1,
                              "updatedReplicas": 1, "unavailableReplicas": 1,
                              "conditions": [
                {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
                {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}})
        };
        assert_eq!(
            rollout_of(&timed_out(2)),
            Rollout::Failed {
                reason: RolloutFailure::ProgressDeadlineExceeded
            }
        );
        // Not yet caught up with the latest template: that one is in progress.
        assert_eq!(rollout_of(&timed_out(1)), Rollout::InProgress);
    }

    #[test]
    fn an_argo_rollout_is_read_by_its_phase_and_string_generation() {
        let rollout = |observed: &str, phase: &str| {
            json!({"metadata": {"generation": 4}, "spec": {"replicas": 1},
                   "status": {"observedGeneration": observed, "phase": phase,
                              "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}})
        };
        assert_eq!(rollout_of(&rollout("4", "Healthy")), Rollout::Complete);
        assert_eq!(rollout_of(&rollout("3", "Healthy")), Rollout::InProgress);
        assert_eq!(
            rollout_of(&rollout("4", "Progressing")),
            Rollout::InProgress
        );
        assert_eq!(rollout_of(&rollout("4", "Paused")), Rollout::InProgress);
        assert_eq!(
            rollout_of(&rollout("4", "Degraded")),
            Rollout::Failed {
                reason: RolloutFailure::Degraded
            }
        );
    }

    #[test]
    fn daemon_sets_and_stateful_set_revisions_count_too() {
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 2}});
        assert_eq!(rollout_of(&ds), Rollout::InProgress);
        let sts = json!({"metadata": {"generation": 1}, "spec": {"replicas": 1},
            "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                       "readyReplicas": 1, "currentRevision": "a", "updateRevision": "b"}});
        assert_eq!(rollout_of(&sts), Rollout::InProgress);
    }

    #[test]
    fn a_job_is_read_by_its_conditions_and_knows_its_cron_job() {
        let job = |conditions: Value| {
            let object = json!({
                "metadata": {"namespace": "ns", "name": "nightly-29001",
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Other", "name": "x", "uid": "1"},
                        {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly",
                         "uid": "2", "controller": true}]},
                "status": {"conditions": conditions},
            });
            let kind = WorkloadKind::new("batch", "v1", "Job", TemplatePath::spec_template());
            Workload::from_object(&kind, object).unwrap()
        };
        let condition = |kind: &str, status: &str| json!({"type": kind, "status": status});
        assert_eq!(job(json!([])).rollout, Rollout::InProgress);
        let done = json!([
            condition("SuccessCriteriaMet", "True"),
            condition("Complete", "True")
        ]);
        assert_eq!(job(done).rollout, Rollout::Complete);
        let failing = json!([condition("FailureTarget", "True")]);
        let failed = Rollout::Failed {
            reason: RolloutFailure::JobFailed,
        };
        assert_eq!(job(failing).rollout, failed);
        assert_eq!(
            job(json!([condition("Complete", "False")])).rollout,
            Rollout::InProgress
        );
        let controller = job(json!([])).controller.unwrap();
        assert_eq!(controller.name, "nightly");
        assert_eq!(
            (controller.api_version.as_str(), controller.kind.as_str()),
            ("batch/v1", "CronJob")
        );
    }
}
