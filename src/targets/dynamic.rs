//! [`KubeTarget`]: any namespaced kind with a pod template, through kube's
//! dynamic API. Workloads are read with [`Workload::from_object`] at the kind's
//! template path and stamped by server-side apply of
//! [`stamp::apply_body`], except where apply cannot
//! say what is meant: lifting a scheduling gate, and every write to a kind
//! outside `apps`/`batch` (its container lists may be atomic, so an applied env
//! var would replace them). Those are one JSON patch over the object as read,
//! guarded by its resourceVersion; on kinds outside `apps`/`batch` it also
//! removes the outputs nudge gave up, as apply does on the built-in kinds
//! ([`stamp::given_up_ops`]).
//!
//! A kind the API server does not serve (its CRD is not installed) never
//! blocks `/ready` and is picked up once served: the target counts as ready,
//! says so once in the log and (unless it is an optional built-in kind) in a
//! `/ready` note, and keeps checking (discovery, or the watch's list, every
//! 30 s at most) until the kind is served, then watches it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::core::DynamicResourceScope;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::Value;
use tracing::Instrument;

use super::object::WorkloadObject;
use super::{ApplyOutcome, Target, TargetContext, TargetError, WatchScope, WorkloadEvent};
use crate::annotations::AnnotationScheme;
use crate::model::{TemplatePath, Workload, WorkloadId, WorkloadKind};
use crate::rate::Backoff;
use crate::scope::NamespaceScope;
use crate::stamp::{self, StampPatch};

/// What every [`KubeTarget`] shares.
#[derive(Debug, Clone)]
pub struct TargetSettings {
    /// Server-side apply field manager (`nudge`).
    pub(crate) field_manager: String,
    /// nudge's annotation names, for the `last-updated` annotations.
    pub(crate) scheme: AnnotationScheme,
    /// Which namespaces are watched.
    pub(crate) scope: NamespaceScope,
}

/// Whether `kind` is stamped by server-side apply (see
/// `KubeTarget::applies_by_ssa`).
fn applies_by_ssa(kind: &WorkloadKind) -> bool {
    matches!(kind.group(), "apps" | "batch")
}

impl TargetSettings {
    /// The server-side apply of `patch` on `current`, with its parameters
    /// (nudge's field manager, forced): every annotation and env var nudge owns
    /// and its `last-updated` annotations (now), nothing else. For kinds whose
    /// pod spec merges containers and env vars by name (the built-in kinds
    /// do). It cannot lift the holds `patch` releases:
    /// [`json_patch`](Self::json_patch) can.
    pub fn apply_patch(
        &self,
        current: &Workload,
        patch: &StampPatch,
    ) -> (PatchParams, Patch<Value>) {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let params = PatchParams::apply(&self.field_manager).force();
        let body = stamp::apply_body(current, patch, &self.scheme, &now);
        (params, Patch::Apply(body))
    }

    /// The JSON patch (RFC 6902) writing `patch` onto `object` (the workload as
    /// read now) and lifting the holds it releases, with its parameters
    /// (nudge's field manager); on a kind outside `apps` and `batch` it also
    /// removes what nudge gave up. It tests `object`'s `resourceVersion`
    /// first: when the workload changed meanwhile the API server answers 422,
    /// and the workload is to be read again.
    pub fn json_patch(&self, object: &Value, patch: &StampPatch) -> (PatchParams, Patch<Value>) {
        let kind = &patch.id.kind;
        let version = object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        let decision = stamp::AdmissionDecision {
            values: patch.values.clone(),
            outputs: patch.changed.clone(),
            stamp_changed: true,
            gates: Vec::new(),
        };
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let mut ops = vec![json_patch::PatchOperation::Test(
            json_patch::TestOperation {
                path: json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "resourceVersion"]),
                value: Value::from(version),
            },
        )];
        let written = stamp::admission_patch(object, None, kind, &decision, &self.scheme, &now);
        ops.extend(written.0);
        ops.extend(stamp::release_ops(object, kind, &patch.releases));
        if !applies_by_ssa(kind) {
            let (manager, scheme) = (&self.field_manager, &self.scheme);
            ops.extend(stamp::given_up_ops(object, kind, patch, manager, scheme));
        }
        let params = PatchParams {
            field_manager: Some(self.field_manager.clone()),
            ..PatchParams::default()
        };
        (params, Patch::Json(json_patch::Patch(ops)))
    }

    /// The settings `config` gives every target (field manager, annotation
    /// prefix, watched namespaces).
    pub fn from_config(config: &crate::config::Config) -> Self {
        Self {
            field_manager: config.kubernetes.field_manager.clone(),
            scheme: config.scheme(),
            scope: NamespaceScope {
                namespaces: config.kubernetes.namespaces.clone(),
                ignore: config.kubernetes.ignore_namespaces.clone(),
            },
        }
    }
}

/// Why a target could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetSetupError {
    /// The API server does not serve the kind: the path of its group or
    /// version is not found (its CRD is not installed), or the group version
    /// lacks it (the group/version/kind is misspelled).
    #[error("the API server does not serve {api_version} {kind} ({answer}): is its CRD installed?")]
    NotServed {
        /// `group/version`.
        api_version: String,
        /// The kind.
        kind: String,
        /// What the API server answered: `404`, or what discovery found missing.
        answer: String,
    },
    /// Whether the API server serves the kind could not be found out (it is
    /// unreachable, or refused discovery).
    #[error("cannot find out whether the API server serves {api_version} {kind}")]
    Discovery {
        /// `group/version`.
        api_version: String,
        /// The kind.
        kind: String,
        /// What discovery failed with.
        #[source]
        source: kube::Error,
    },
    /// The kind exists but is cluster-scoped; nudge stamps namespaced workloads.
    #[error("{api_version} {kind} is cluster-scoped; nudge stamps namespaced kinds only")]
    ClusterScoped {
        /// `group/version`.
        api_version: String,
        /// The kind.
        kind: String,
    },
}

impl TargetSetupError {
    /// The kind `gvk` is not served, or discovery failed, as `error` says.
    fn from_discovery(gvk: &GroupVersionKind, error: kube::Error) -> Self {
        let (api_version, kind) = (gvk.api_version(), gvk.kind.clone());
        match crate::errors::not_served_answer(&error) {
            Some(answer) => Self::NotServed {
                api_version,
                kind,
                answer,
            },
            None => Self::Discovery {
                api_version,
                kind,
                source: error,
            },
        }
    }

    /// Whether the API server answered that it does not serve the kind (no CRD
    /// installed), as opposed to failing to answer.
    pub(crate) fn is_absent(&self) -> bool {
        matches!(self, Self::NotServed { .. })
    }
}

/// The built-in kinds nudge stamps without configuration, with their plurals:
/// Deployment, StatefulSet and DaemonSet (`apps/v1`, `spec.template`).
pub fn builtin_kinds() -> Vec<(WorkloadKind, &'static str)> {
    vec![
        (WorkloadKind::deployment(), "deployments"),
        (WorkloadKind::stateful_set(), "statefulsets"),
        (WorkloadKind::daemon_set(), "daemonsets"),
    ]
}

/// Workloads per page of a kind's initial list. The watcher holds a whole
/// page, parsed, until it has handed on every object of it, and every kind
/// lists at once: in pages of 500 (kube's default) that was the largest part
/// of the heap's peak at the benchmark's 10× scale (16 MB of 85).
const WATCH_PAGE: u32 = 100;

/// First and last delay between two discoveries of a kind not served yet.
const FIRST_RECHECK: Duration = Duration::from_secs(5);
const MAX_RECHECK: Duration = Duration::from_secs(30);

/// A [`Target`] for any namespaced kind with a pod template.
pub struct KubeTarget {
    client: Client,
    kind: WorkloadKind,
    /// The API resource (plural); set once discovery finds the kind served.
    resource: OnceLock<ApiResource>,
    settings: TargetSettings,
    /// A built-in optional kind (Argo Rollouts): while not served, one info
    /// line and no `/ready` note.
    optional: bool,
    /// The kind was found not served and not yet found served again.
    absent: AtomicBool,
}

// === impl KubeTarget ===

impl KubeTarget {
    /// A target for `kind`, served under `plural` (no discovery request).
    pub fn new(client: Client, kind: WorkloadKind, plural: &str, settings: TargetSettings) -> Self {
        let gvk = GroupVersionKind::gvk(kind.group(), kind.version(), kind.as_str());
        Self {
            resource: OnceLock::from(ApiResource::from_gvk_with_plural(&gvk, plural)),
            client,
            kind,
            settings,
            optional: false,
            absent: AtomicBool::new(false),
        }
    }

    /// A target for `kind` whose plural API discovery resolves when it runs:
    /// while the API server does not serve the kind (its CRD is not
    /// installed yet), the target counts as ready, notes it in `/ready` and
    /// checks again with backoff (5 s doubling to 30 s), then watches the
    /// kind from the moment it is served. No restart needed.
    pub fn when_served(client: Client, kind: WorkloadKind, settings: TargetSettings) -> Self {
        Self {
            client,
            kind,
            resource: OnceLock::new(),
            settings,
            optional: false,
            absent: AtomicBool::new(false),
        }
    }

    /// Makes this an optional kind (as Argo Rollouts are): while the API
    /// server does not serve it, one info line and no `/ready` note (most
    /// clusters do not have it). Other discovery failures are still noted.
    pub(crate) fn optional(mut self) -> Self {
        self.optional = true;
        self
    }

    /// A target for `group/version` `kind` with its pod template at `template`,
    /// its plural resolved by API discovery. Fails when the API server does not
    /// serve the kind (e.g. its CRD is not installed).
    pub(crate) async fn discover(
        client: Client,
        group: &str,
        version: &str,
        kind: &str,
        template: TemplatePath,
        settings: TargetSettings,
    ) -> Result<Self, TargetSetupError> {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .map_err(|error| TargetSetupError::from_discovery(&gvk, error))?;
        if capabilities.scope != kube::discovery::Scope::Namespaced {
            return Err(TargetSetupError::ClusterScoped {
                api_version: gvk.api_version(),
                kind: kind.to_owned(),
            });
        }
        let kind = WorkloadKind::new(group, version, kind, template);
        Ok(Self {
            client,
            kind,
            resource: OnceLock::from(resource),
            settings,
            optional: false,
            absent: AtomicBool::new(false),
        })
    }

    /// Discovers the kind: its API resource when served and namespaced.
    async fn resolve(&self) -> Result<ApiResource, TargetSetupError> {
        let kind = &self.kind;
        let gvk = GroupVersionKind::gvk(kind.group(), kind.version(), kind.as_str());
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|error| TargetSetupError::from_discovery(&gvk, error))?;
        if capabilities.scope != kube::discovery::Scope::Namespaced {
            return Err(TargetSetupError::ClusterScoped {
                api_version: gvk.api_version(),
                kind: kind.as_str().to_owned(),
            });
        }
        Ok(resource)
    }

    /// The API resource, discovering it until the kind is served (checked
    /// again with backoff); `None` on shutdown. Meanwhile the target counts
    /// as ready and reports the kind once ([`Self::report_absent`]).
    async fn served_resource(&self, ctx: &TargetContext) -> Option<ApiResource> {
        if let Some(resource) = self.resource.get() {
            return Some(resource.clone());
        }
        let mut backoff = Backoff::new(FIRST_RECHECK, MAX_RECHECK);
        loop {
            match self.resolve().await {
                Ok(resource) => {
                    self.report_served(ctx);
                    return Some(self.resource.get_or_init(|| resource).clone());
                }
                Err(error) => self.report_absent(ctx, &error, error.is_absent()),
            }
            tokio::select! {
                () = ctx.cancelled() => return None,
                () = tokio::time::sleep(backoff.next_delay()) => {}
            }
        }
    }

    /// The kind is not served (or could not be discovered): the target does
    /// not block `/ready`; the first time, one log line, and a `/ready` note
    /// unless the kind is optional and simply absent.
    fn report_absent(&self, ctx: &TargetContext, error: &TargetSetupError, absent: bool) {
        if !self.absent.swap(true, Ordering::Relaxed) {
            let kind = format!("{} {}", self.kind.api_version(), self.kind.as_str());
            if self.optional && absent {
                tracing::info!(
                    "{kind} is not served by this cluster (its CRD is not installed): not stamping it until it is"
                );
            } else {
                let text = crate::errors::error_chain(error);
                tracing::warn!(error = %text, "not stamping this kind until the API server serves it; install its CRD (or fix the [[targets]] entry)");
                // Noted before the target counts as ready, so that no
                // `/ready` answer misses it.
                let waiting = if absent { "" } else { " (checking again)" };
                ctx.note(format!("not stamping: {text}{waiting}"));
            }
        }
        ctx.ready();
    }

    /// The kind is served (again): clears the note, says so once.
    fn report_served(&self, ctx: &TargetContext) {
        if self.absent.swap(false, Ordering::Relaxed) {
            ctx.clear_note();
            tracing::info!(kind = %self.kind, "the API server serves this kind now; stamping it");
        }
    }

    /// Server-side applies `patch` and returns the object as stored afterwards
    /// (`None`: the workload no longer exists). For targets that build on this one
    /// and need more of the object than a [`Workload`].
    pub(crate) async fn apply_object(
        &self,
        current: &Workload,
        patch: &StampPatch,
    ) -> Result<Option<WorkloadObject>, TargetError> {
        if !patch.releases.is_empty() || !self.applies_by_ssa() || stamp::changes_snapshot(patch) {
            return self.apply_json_patch(current, patch).await;
        }
        let id = &current.id;
        let (params, body) = self.settings.apply_patch(current, patch);
        let api = self.api(Some(&id.namespace));
        match api.patch(&id.name, &params, &body).await {
            Ok(obj) => Ok(Some(obj)),
            Err(error) if is_status(&error, 404) => Ok(None),
            // Apply is an upsert: on a workload deleted meanwhile the server tries to
            // create it from the partial body and answers 422.
            Err(error) if is_status(&error, 422) => match self.get_object(id).await? {
                None => Ok(None),
                Some(_) => Err(classify(id, error)),
            },
            Err(error) => Err(classify(id, error)),
        }
    }

    /// Whether this kind is stamped by server-side apply: the built-in kinds
    /// (groups `apps` and `batch`), whose pod spec keys containers and env by
    /// name. A CRD does so only if its schema says so, and many leave the pod
    /// template schemaless, where an apply of nudge's env var alone would
    /// replace every container. The other kinds are stamped by JSON patch,
    /// every write alike, so that one path knows every output nudge wrote
    /// there and removes those it gave up.
    fn applies_by_ssa(&self) -> bool {
        applies_by_ssa(&self.kind)
    }

    /// Writes `patch` (and lifts its releases) in one JSON patch over the object
    /// as read now, guarded by its resourceVersion: a gate the webhook put into
    /// the user's object is not nudge's to drop by server-side apply, and an env
    /// var is set in place whatever the kind's list semantics. On a kind not
    /// stamped by apply, the outputs nudge gave up are removed in the same
    /// patch. Not on the built-in kinds, where apply removes them at its next
    /// write: a Job nudge recreated is wholly nudge's in `managedFields`, so
    /// that record does not tell nudge's outputs there.
    async fn apply_json_patch(
        &self,
        current: &Workload,
        patch: &StampPatch,
    ) -> Result<Option<WorkloadObject>, TargetError> {
        let id = &current.id;
        let Some(object) = self.get_object(id).await? else {
            return Ok(None);
        };
        let value = object.into_value();
        let (params, mut body) = self.settings.json_patch(&value, patch);
        if stamp::changes_snapshot(patch) {
            let guards = self.snapshot_guards(current, patch, &value)?;
            if let Patch::Json(json_patch::Patch(ops)) = &mut body {
                // After the resourceVersion's test, before any write.
                ops.splice(1..1, guards);
            }
        }
        let api = self.api(Some(&id.namespace));
        match api.patch(&id.name, &params, &body).await {
            Ok(obj) => Ok(Some(obj)),
            Err(error) if is_status(&error, 404) => Ok(None),
            // The test of resourceVersion failed: changed meanwhile; read again.
            Err(error) if is_status(&error, 422) => Err(TargetError::Conflict {
                id: id.clone(),
                message: crate::errors::error_chain(&error),
            }),
            Err(error) => Err(classify(id, error)),
        }
    }

    /// What a write moving the template to other snapshot copies (design
    /// §5e) checks of `object`, the workload as read: its template still uses
    /// exactly the keys the copies hold (a key used since would be missing
    /// from its copy: a conflict, decided again on the new template), and the
    /// operation the write carries that it is still the object `current`
    /// names by uid, the owner of the copies made for it (a workload deleted
    /// and created again meanwhile is not pointed at the old one's copies).
    fn snapshot_guards(
        &self,
        current: &Workload,
        patch: &StampPatch,
        object: &Value,
    ) -> Result<Vec<json_patch::PatchOperation>, TargetError> {
        let id = &current.id;
        let read = Workload::from_object(&self.kind, object.clone()).map_err(|error| {
            TargetError::Rejected {
                id: id.clone(),
                message: format!("cannot read the workload: {error}"),
            }
        })?;
        let wanted = patch
            .values
            .iter()
            .find_map(|(output, value)| match output {
                crate::model::Output::Snapshots(key) => Some((key, value)),
                _ => None,
            });
        if let Some((key, value)) = wanted {
            let to = crate::snapshot::Snapshot::parse(value).unwrap_or_default();
            let template = crate::snapshot::TemplateSnapshot::read(id, &read.template, key);
            if !template.fits(&to) {
                return Err(TargetError::Conflict {
                    id: id.clone(),
                    message: "its pod template uses other keys than the snapshot copies hold"
                        .into(),
                });
            }
        }
        Ok(current
            .uid
            .iter()
            .map(|uid| {
                json_patch::PatchOperation::Test(json_patch::TestOperation {
                    path: json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "uid"]),
                    value: Value::from(uid.as_str()),
                })
            })
            .collect())
    }

    /// A merge patch of `annotations` on the object's own metadata, guarded by
    /// `current`'s resourceVersion (a merge patch carrying one is refused with
    /// 409 when the object moved on). `Ok(false)`: the workload is gone.
    pub(crate) async fn annotate_object(
        &self,
        current: &Workload,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<bool, TargetError> {
        let id = &current.id;
        let body = serde_json::json!({
            "metadata": {
                "resourceVersion": current.resource_version,
                "annotations": annotations,
            },
        });
        let params = PatchParams {
            field_manager: Some(self.settings.field_manager.clone()),
            ..PatchParams::default()
        };
        let url = self.api(Some(&id.namespace)).resource_url().to_owned();
        let mut request = kube::core::Request::new(url)
            .patch(&id.name, &params, &Patch::Merge(&body))
            .map_err(|error| classify(id, kube::Error::BuildRequest(error)))?;
        // Named as `Api::patch` names its span.
        request.extensions_mut().insert("patch");
        // The answer's status only: the workload it echoes is not needed (its
        // watch event follows), and parsing it was a quarter of recording an
        // outcome.
        match self.client.request_text(request).await {
            Ok(_) => Ok(true),
            Err(error) if is_status(&error, 404) => Ok(false),
            Err(error) => Err(classify(id, error)),
        }
    }

    /// Reads the whole object of `id` now, `managedFields` included: the
    /// JSON patch path reads nudge's own entry there
    /// ([`stamp::given_up_ops`]).
    pub(crate) async fn get_object(
        &self,
        id: &WorkloadId,
    ) -> Result<Option<WorkloadObject>, TargetError> {
        let object: Option<DynamicObject> = self
            .api_as(Some(&id.namespace))
            .get_opt(&id.name)
            .await
            .map_err(|e| classify(id, e))?;
        Ok(object.map(|o| WorkloadObject::from_value(serde_json::to_value(o).unwrap_or_default())))
    }

    /// What `pick` makes of the workloads of this kind in `namespace`
    /// (`None`: every namespace, less those the field selector `fields`
    /// leaves out), listed a page at a time so that only what it keeps is
    /// held. Objects that cannot be read as workloads are skipped (logged).
    pub(crate) async fn list<T>(
        &self,
        namespace: Option<&str>,
        fields: Option<&str>,
        mut pick: impl FnMut(Workload) -> Option<T>,
    ) -> Result<Vec<T>, kube::Error> {
        const PAGE: u32 = 500;
        let api = self.api(namespace);
        let mut params = kube::api::ListParams::default().limit(PAGE);
        if let Some(fields) = fields {
            params = params.fields(fields);
        }
        let mut kept = Vec::new();
        loop {
            let page = api.list(&params).await?;
            let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
            kept.extend(
                page.items
                    .into_iter()
                    .filter_map(|object| self.workload(object))
                    .filter_map(&mut pick),
            );
            match next {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(kept),
            }
        }
    }

    /// The settings this target writes with.
    pub(crate) fn settings(&self) -> &TargetSettings {
        &self.settings
    }

    /// Reads a [`Workload`] of this target's kind from an object it returned.
    pub(crate) fn workload_of(&self, object: WorkloadObject) -> Option<Workload> {
        self.workload(object)
    }

    /// The API of this kind, its objects read as [`WorkloadObject`]s.
    fn api(&self, namespace: Option<&str>) -> Api<WorkloadObject> {
        self.api_as(namespace)
    }

    /// The API of this kind, its objects read as `K`.
    fn api_as<K>(&self, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>,
    {
        let resource = self.resource.get().cloned().unwrap_or_else(|| {
            // Not served yet: the plural is unknown. Requests go to kube's
            // guess, which the API server answers 404 (not found: nothing to
            // stamp) until the kind is served and discovered.
            let kind = &self.kind;
            ApiResource::from_gvk(&GroupVersionKind::gvk(
                kind.group(),
                kind.version(),
                kind.as_str(),
            ))
        });
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// Reads a workload from a dynamic object; malformed ones are logged and
    /// skipped (a bad object must not stop the stream).
    fn workload(&self, object: WorkloadObject) -> Option<Workload> {
        let name = object.name_any();
        match Workload::from_object(&self.kind, object.into_value()) {
            Ok(workload) => Some(workload),
            Err(error) => {
                tracing::warn!(kind = %self.kind, %name, %error, "cannot read workload; skipping it");
                None
            }
        }
    }

    fn workload_id(&self, object: &WorkloadObject) -> Option<WorkloadId> {
        Some(WorkloadId::new(
            self.kind.clone(),
            object.namespace()?,
            object.meta().name.clone()?,
        ))
    }

    fn to_event(
        &self,
        event: watcher::Event<WorkloadObject>,
        scope: &WatchScope,
    ) -> Option<WorkloadEvent> {
        Some(match event {
            watcher::Event::Init => WorkloadEvent::Init(scope.clone()),
            watcher::Event::InitDone => WorkloadEvent::InitDone(scope.clone()),
            watcher::Event::InitApply(obj) => WorkloadEvent::InitApply(self.workload(obj)?),
            watcher::Event::Apply(obj) => WorkloadEvent::Apply(self.workload(obj)?),
            watcher::Event::Delete(obj) => WorkloadEvent::Delete(self.workload_id(&obj)?),
        })
    }
}

/// A kube error as a [`TargetError`]: 409 conflict, 429/5xx/transport transient,
/// anything else a rejection.
pub(crate) fn classify(id: &WorkloadId, error: kube::Error) -> TargetError {
    match error {
        kube::Error::Api(status) => {
            let message = status.message.clone();
            match status.code {
                409 => TargetError::Conflict {
                    id: id.clone(),
                    message,
                },
                429 | 500..=599 => TargetError::Transient {
                    id: id.clone(),
                    message,
                },
                _ => TargetError::Rejected {
                    id: id.clone(),
                    message,
                },
            }
        }
        other => TargetError::Transient {
            id: id.clone(),
            message: other.to_string(),
        },
    }
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

#[async_trait]
impl Target for KubeTarget {
    fn kind(&self) -> &WorkloadKind {
        &self.kind
    }

    async fn run(self: Arc<Self>, ctx: TargetContext) {
        if self.served_resource(&ctx).await.is_none() {
            return;
        }
        let streams = self.settings.scope.streams();
        let listed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let total = streams.len();
        let ctx = Arc::new(ctx);
        let watches = streams.into_iter().map(|namespace| {
            let span = tracing::info_span!(
                "watch",
                kind = %self.kind,
                namespace = namespace.as_deref().unwrap_or("*")
            );
            let this = self.clone();
            let ctx = ListedContext {
                inner: ctx.clone(),
                listed: listed.clone(),
                total,
                counted: std::sync::atomic::AtomicBool::new(false),
            };
            async move { this.watch_listed(namespace, &ctx).await }.instrument(span)
        });
        futures::future::join_all(watches).await;
    }

    async fn apply(
        &self,
        current: &Workload,
        patch: &StampPatch,
    ) -> Result<ApplyOutcome, TargetError> {
        Ok(match self.apply_object(current, patch).await? {
            Some(obj) => self
                .workload(obj)
                .map_or(ApplyOutcome::Gone, |w| ApplyOutcome::Applied(Box::new(w))),
            None => ApplyOutcome::Gone,
        })
    }

    async fn annotate(
        &self,
        current: &Workload,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<bool, TargetError> {
        self.annotate_object(current, annotations).await
    }

    async fn get(&self, id: &WorkloadId) -> Result<Option<Workload>, TargetError> {
        let obj = self
            .api(Some(&id.namespace))
            .get_opt(&id.name)
            .await
            .map_err(|e| classify(id, e))?;
        Ok(obj.and_then(|obj| self.workload(obj)))
    }

    /// Every kind but one whose template cannot change (a Job's, which a
    /// stamp replaces with the Job: its copies would go with the old one).
    fn takes_snapshots(&self) -> bool {
        !self.kind.has_immutable_template()
    }
}

/// One watch stream's view of the target context: it marks the target ready
/// once every stream has listed.
struct ListedContext {
    inner: Arc<TargetContext>,
    listed: Arc<std::sync::atomic::AtomicUsize>,
    total: usize,
    counted: std::sync::atomic::AtomicBool,
}

impl ListedContext {
    fn stream_listed(&self) {
        use std::sync::atomic::Ordering;
        if !self.counted.swap(true, Ordering::Relaxed)
            && self.listed.fetch_add(1, Ordering::Relaxed) + 1 == self.total
        {
            self.inner.ready();
        }
    }
}

impl KubeTarget {
    async fn watch_listed(&self, namespace: Option<String>, ctx: &ListedContext) {
        let scope = WatchScope {
            kind: self.kind.clone(),
            namespace: namespace.clone(),
        };
        let config = self
            .settings
            .scope
            .watcher_config(&namespace)
            .page_size(WATCH_PAGE);
        let stream = watcher(self.api(namespace.as_deref()), config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        loop {
            let event = tokio::select! {
                () = ctx.inner.cancelled() => return,
                event = stream.next() => event,
            };
            let Some(event) = event else { return };
            let event = match event {
                Ok(event) => event,
                Err(watcher::Error::InitialListFailed(error)) if is_status(&error, 404) => {
                    // The kind is not served (a custom target's CRD is not
                    // installed): not a failure to count; the watcher lists
                    // again with backoff (30 s at most) until it is.
                    let error = TargetSetupError::NotServed {
                        api_version: self.kind.api_version(),
                        kind: self.kind.as_str().to_owned(),
                        answer: "404".to_owned(),
                    };
                    self.report_absent(&ctx.inner, &error, true);
                    ctx.stream_listed();
                    continue;
                }
                Err(error) => {
                    let error = crate::errors::watch_failure(&error);
                    tracing::warn!(%error, "workload watch failed; retrying");
                    ctx.inner.watch_restarted(self.kind.label());
                    continue;
                }
            };
            self.report_served(&ctx.inner);
            let listed = matches!(event, watcher::Event::InitDone);
            let Some(event) = self.to_event(event, &scope) else {
                continue;
            };
            if !ctx.inner.report(event).await {
                return;
            }
            if listed {
                ctx.stream_listed();
            }
        }
    }
}
