//! CronJobs and Jobs: kinds whose pod-template change has side effects, so they
//! implement [`Target`] around [`KubeTarget`] (Reloader's behaviour, design §5a).
//!
//! Both kinds adopt their first stamp into metadata
//! ([`Output::Adopted`](crate::model::Output::Adopted)), so nothing runs or is
//! recreated when nudge first sees one, nor after a restart (state-based).
//!
//! - [`CronJobTarget`]: the job template (`spec.jobTemplate.spec.template`) is
//!   stamped; when that changes the template, one Job is started from the CronJob
//!   at once, as `kubectl create job --from=cronjob/NAME` does
//!   (`cronjob.kubernetes.io/instantiate: manual`, owned by the CronJob), unless
//!   the CronJob says `<prefix>/run-on-change: "false"`.
//! - [`JobTarget`]: a Job's pod template is immutable, so a stamp that changes it
//!   recreates the Job: delete (background propagation), then create it again with
//!   the same spec minus what the API server generated, and the new stamp. The
//!   recreated Job carries its stamp, so a restart recreates nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, PostParams, Preconditions, PropagationPolicy};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::dynamic::classify;
use super::object::WorkloadObject;
use super::{ApplyOutcome, KubeTarget, Target, TargetContext, TargetError, TargetSettings};
use crate::model::{GENERATED_JOB_LABELS, TemplatePath, Workload, WorkloadId, WorkloadKind};
use crate::stamp::{self, AdmissionDecision, StampPatch};

/// How long a Job recreation waits for the old Job to be gone.
const JOB_GONE_TIMEOUT: Duration = Duration::from_secs(30);

/// `batch/v1` CronJob: the job template, adopting first stamps.
pub fn cron_job_kind() -> WorkloadKind {
    let template = TemplatePath::parse("spec.jobTemplate.spec.template").expect("valid path");
    WorkloadKind::new("batch", "v1", "CronJob", template).adopting_first_stamp()
}

/// `batch/v1` Job, adopting first stamps.
pub fn job_kind() -> WorkloadKind {
    WorkloadKind::new("batch", "v1", "Job", TemplatePath::spec_template())
        .adopting_first_stamp()
        .with_immutable_template()
}

// === CronJob ===

/// Stamps CronJobs and starts a Job when the stamp changes the job template.
pub struct CronJobTarget {
    inner: Arc<KubeTarget>,
    client: Client,
}

impl CronJobTarget {
    /// A CronJob target writing with `settings`.
    pub fn new(client: Client, settings: TargetSettings) -> Self {
        Self {
            inner: Arc::new(KubeTarget::new(
                client.clone(),
                cron_job_kind(),
                "cronjobs",
                settings,
            )),
            client,
        }
    }

    /// Starts one Job from the CronJob, as `kubectl create job --from=cronjob/…`.
    async fn run_now(&self, id: &WorkloadId, cron_job: &WorkloadObject) -> Result<(), TargetError> {
        let cron_job: CronJob = serde_json::from_value(cron_job.value().clone()).map_err(|e| {
            TargetError::Rejected {
                id: id.clone(),
                message: format!("cannot read the CronJob: {e}"),
            }
        })?;
        let job = job_from(&cron_job).ok_or_else(|| TargetError::Rejected {
            id: id.clone(),
            message: "the CronJob has no uid or job template".into(),
        })?;
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &id.namespace);
        let params = PostParams {
            field_manager: Some(self.inner.settings().field_manager.clone()),
            ..PostParams::default()
        };
        let created = jobs
            .create(&params, &job)
            .await
            .map_err(|e| classify(id, e))?;
        tracing::info!(cronjob = %id, job = %created.name_any(), "started a Job for the changed config");
        Ok(())
    }
}

/// The Job `kubectl create job --from=cronjob/NAME` would create: the job
/// template's labels, annotations and spec, `cronjob.kubernetes.io/instantiate:
/// manual`, and the CronJob as controlling owner.
fn job_from(cron_job: &CronJob) -> Option<Job> {
    let spec = cron_job.spec.as_ref()?;
    let template = &spec.job_template;
    let metadata = template.metadata.clone().unwrap_or_default();
    let mut annotations = std::collections::BTreeMap::from([(
        "cronjob.kubernetes.io/instantiate".to_owned(),
        "manual".to_owned(),
    )]);
    annotations.extend(metadata.annotations.unwrap_or_default());
    let owner = OwnerReference {
        api_version: "batch/v1".into(),
        kind: "CronJob".into(),
        name: cron_job.name_any(),
        uid: cron_job.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    Some(Job {
        metadata: kube::api::ObjectMeta {
            generate_name: Some(format!("{}-", cron_job.name_any())),
            namespace: cron_job.metadata.namespace.clone(),
            labels: metadata.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    })
}

#[async_trait]
impl Target for CronJobTarget {
    fn kind(&self) -> &WorkloadKind {
        self.inner.kind()
    }

    async fn run(self: Arc<Self>, ctx: TargetContext) {
        self.inner.clone().run(ctx).await;
    }

    async fn apply(
        &self,
        current: &Workload,
        patch: &StampPatch,
    ) -> Result<ApplyOutcome, TargetError> {
        // Pointing the template at other copies of the same config (taking
        // snapshots, a rollback) changes where its pods read it, not the
        // config a run would carry: no Job for that.
        let changes_template = stamp::changes_config(current, patch);
        let Some(cron_job) = self.inner.apply_object(current, patch).await? else {
            return Ok(ApplyOutcome::Gone);
        };
        let opted_out =
            cron_job.annotation(&self.inner.settings().scheme.run_on_change()) == Some("false");
        if changes_template && !opted_out {
            self.run_now(&current.id, &cron_job).await?;
        }
        Ok(self
            .inner
            .workload_of(cron_job)
            .map_or(ApplyOutcome::Gone, |w| ApplyOutcome::Applied(Box::new(w))))
    }

    async fn get(&self, id: &WorkloadId) -> Result<Option<Workload>, TargetError> {
        self.inner.get(id).await
    }

    fn takes_snapshots(&self) -> bool {
        true
    }

    async fn annotate(
        &self,
        current: &Workload,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<bool, TargetError> {
        self.inner.annotate(current, annotations).await
    }
}

// === Job ===

/// Stamps Jobs; a stamp that changes the (immutable) pod template recreates the Job.
pub struct JobTarget {
    inner: Arc<KubeTarget>,
    client: Client,
    /// Jobs deleted for recreation whose new object is not created yet: a retry
    /// creates it from here instead of finding the Job gone.
    recreating: Mutex<HashMap<WorkloadId, Value>>,
}

impl JobTarget {
    /// A Job target writing with `settings`.
    pub fn new(client: Client, settings: TargetSettings) -> Self {
        Self {
            inner: Arc::new(KubeTarget::new(
                client.clone(),
                job_kind(),
                "jobs",
                settings,
            )),
            client,
            recreating: Mutex::new(HashMap::new()),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<WorkloadId, Value>> {
        self.recreating.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Deletes the Job and creates it again as `replacement`.
    async fn recreate(
        &self,
        id: &WorkloadId,
        old_uid: Option<String>,
        replacement: Value,
    ) -> Result<ApplyOutcome, TargetError> {
        self.pending().insert(id.clone(), replacement.clone());
        let api = self.api(&id.namespace);
        if let Some(uid) = old_uid {
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&id.name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(classify(id, error)),
            }
            self.wait_gone(id, &uid).await?;
        }
        let object = WorkloadObject::from_value(replacement);
        let params = PostParams {
            field_manager: Some(self.inner.settings().field_manager.clone()),
            ..PostParams::default()
        };
        let created = api
            .create(&params, &object)
            .await
            .map_err(|e| classify(id, e))?;
        self.pending().remove(id);
        tracing::info!(job = %id, "recreated the Job for the changed config");
        Ok(self
            .inner
            .workload_of(created)
            .map_or(ApplyOutcome::Gone, |w| ApplyOutcome::Applied(Box::new(w))))
    }

    /// Waits until the Job with `uid` is gone (finalizers may hold it a moment).
    async fn wait_gone(&self, id: &WorkloadId, uid: &str) -> Result<(), TargetError> {
        let deadline = tokio::time::Instant::now() + JOB_GONE_TIMEOUT;
        let mut backoff =
            crate::rate::Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        loop {
            match self.inner.get_object(id).await? {
                Some(object) if object.uid().as_deref() == Some(uid) => {}
                _ => return Ok(()),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(TargetError::Transient {
                    id: id.clone(),
                    message: "the old Job is still being deleted".into(),
                });
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    fn api(&self, namespace: &str) -> Api<WorkloadObject> {
        let gvk = kube::api::GroupVersionKind::gvk("batch", "v1", "Job");
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &kube::api::ApiResource::from_gvk_with_plural(&gvk, "jobs"),
        )
    }
}

/// The Job to create in place of `job`: the same object without what the API
/// server generated (identity, status, generated selector and labels) and with
/// `patch`'s values written.
fn replacement(job: &WorkloadObject, patch: &StampPatch, settings: &TargetSettings) -> Value {
    let mut object = job.value().clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            meta.remove(field);
        }
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            for label in GENERATED_JOB_LABELS {
                labels.remove(label);
            }
        }
    }
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
    let manual = object
        .pointer("/spec/manualSelector")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
        && !manual
    {
        spec.remove("selector");
    }
    if let Some(labels) = object
        .pointer_mut("/spec/template/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        for label in GENERATED_JOB_LABELS {
            labels.remove(label);
        }
    }
    // The stamp, written by the admission renderer over the one decision.
    let decision = AdmissionDecision {
        values: patch.values.clone(),
        outputs: patch.changed.clone(),
        stamp_changed: true,
        gates: Vec::new(),
    };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let ops = stamp::admission_patch(
        &object,
        None,
        &job_kind(),
        &decision,
        &settings.scheme,
        &now,
    );
    let mut stamped = object.clone();
    match json_patch::patch(&mut stamped, &ops) {
        Ok(()) => stamped,
        Err(error) => {
            tracing::warn!(%error, "cannot write the stamp into the new Job; recreating it unstamped");
            object
        }
    }
}

#[async_trait]
impl Target for JobTarget {
    fn kind(&self) -> &WorkloadKind {
        self.inner.kind()
    }

    async fn run(self: Arc<Self>, ctx: TargetContext) {
        self.inner.clone().run(ctx).await;
    }

    async fn apply(
        &self,
        current: &Workload,
        patch: &StampPatch,
    ) -> Result<ApplyOutcome, TargetError> {
        let id = &current.id;
        let waiting = self.pending().get(id).cloned();
        let Some(job) = self.inner.get_object(id).await? else {
            // Deleted by an earlier attempt whose create failed: create it now.
            return match waiting {
                Some(replacement) => self.recreate(id, None, replacement).await,
                None => Ok(ApplyOutcome::Gone),
            };
        };
        if !stamp::changes_pod_template(current, patch) {
            // Adoption, or metadata only: the Job's metadata is mutable.
            return self.inner.apply(current, patch).await;
        }
        let replacement = replacement(&job, patch, self.inner.settings());
        self.recreate(id, job.uid(), replacement).await
    }

    async fn get(&self, id: &WorkloadId) -> Result<Option<Workload>, TargetError> {
        self.inner.get(id).await
    }

    async fn annotate(
        &self,
        current: &Workload,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<bool, TargetError> {
        self.inner.annotate(current, annotations).await
    }
}
