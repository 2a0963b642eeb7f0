//! The Kubernetes-backed target shared by Deployment, StatefulSet and DaemonSet.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{ApplyOutcome, Target, TargetError, WatchScope, WorkloadEvent, render_apply_body};
use crate::model::{Workload, WorkloadId, WorkloadKind};
use crate::runtime::admin::{Readiness, WatchReady};
use crate::runtime::metrics::{Metrics, Watch};
use crate::scope::NamespaceScope;
use crate::stamp::StampPatch;

/// A workload type with a pod template.
pub trait PodTemplated:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
    /// nudge's name for the kind.
    const KIND: WorkloadKind;

    /// `spec.template`, when the object has a spec.
    fn pod_template(&self) -> Option<&PodTemplateSpec>;
}

/// What all built-in targets share.
#[derive(Debug, Clone)]
pub struct TargetSettings {
    /// Server-side apply field manager (`nudge`).
    pub field_manager: String,
    /// nudge's annotation prefix, for `<prefix>/last-updated`.
    pub prefix: String,
    /// Which namespaces are watched.
    pub scope: NamespaceScope,
    /// Where watch restarts are counted.
    pub metrics: Metrics,
    /// Each watch scope registers here and marks its first complete list.
    pub readiness: Readiness,
}

/// A [`Target`] for any [`PodTemplated`] kind.
pub struct KubeTarget<K> {
    client: Client,
    settings: TargetSettings,
    /// Per watch scope (`None`: all namespaces), its part of readiness.
    ready: Vec<(Option<String>, WatchReady)>,
    kind: PhantomData<fn() -> K>,
}

// === impl KubeTarget ===

impl<K: PodTemplated> KubeTarget<K> {
    /// A target for kind `K` using `client`; registers each of its watch scopes
    /// with `settings.readiness`.
    pub fn new(client: Client, settings: TargetSettings) -> Self {
        let ready = settings
            .scope
            .streams()
            .into_iter()
            .map(|ns| {
                let name = format!("{}/{}", K::KIND, ns.as_deref().unwrap_or("*"));
                let ready = settings.readiness.register(name);
                (ns, ready)
            })
            .collect();
        Self {
            client,
            settings,
            ready,
            kind: PhantomData,
        }
    }

    fn api(&self, namespace: Option<&str>) -> Api<K> {
        match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    async fn watch_scope(
        &self,
        namespace: Option<String>,
        events: mpsc::Sender<WorkloadEvent>,
        shutdown: CancellationToken,
    ) {
        let scope = WatchScope {
            kind: K::KIND,
            namespace: namespace.clone(),
        };
        let ready = self
            .ready
            .iter()
            .find(|(ns, _)| *ns == namespace)
            .map(|(_, ready)| ready.clone());
        let config = self.settings.scope.watcher_config(&namespace);
        let stream = watcher(self.api(namespace.as_deref()), config).default_backoff();
        let mut stream = std::pin::pin!(stream);
        loop {
            let event = tokio::select! {
                _ = shutdown.cancelled() => return,
                event = stream.next() => event,
            };
            let Some(event) = event else { return };
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    tracing::warn!(%error, "workload watch failed; retrying");
                    self.settings
                        .metrics
                        .watch_restarted(Watch::Workload(K::KIND));
                    continue;
                }
            };
            let listed = matches!(event, watcher::Event::InitDone);
            let Some(event) = to_workload_event(event, &scope) else {
                continue;
            };
            if events.send(event).await.is_err() {
                return;
            }
            if let (true, Some(ready)) = (listed, &ready) {
                ready.listed();
            }
        }
    }
}

fn to_workload_event<K: PodTemplated>(
    event: watcher::Event<K>,
    scope: &WatchScope,
) -> Option<WorkloadEvent> {
    Some(match event {
        watcher::Event::Init => WorkloadEvent::Init(scope.clone()),
        watcher::Event::InitDone => WorkloadEvent::InitDone(scope.clone()),
        watcher::Event::InitApply(obj) => WorkloadEvent::InitApply(to_workload(&obj)?),
        watcher::Event::Apply(obj) => WorkloadEvent::Apply(to_workload(&obj)?),
        watcher::Event::Delete(obj) => WorkloadEvent::Delete(workload_id(&obj)?),
    })
}

fn workload_id<K: PodTemplated>(obj: &K) -> Option<WorkloadId> {
    Some(WorkloadId::new(
        K::KIND,
        obj.namespace()?,
        obj.meta().name.clone()?,
    ))
}

/// Keeps only what nudge reads: annotations and the pod template.
pub(crate) fn to_workload<K: PodTemplated>(obj: &K) -> Option<Workload> {
    Some(Workload {
        id: workload_id(obj)?,
        annotations: obj.meta().annotations.clone().unwrap_or_default(),
        template: obj.pod_template().cloned().unwrap_or_default(),
    })
}

fn classify(id: &WorkloadId, error: kube::Error) -> TargetError {
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
impl<K: PodTemplated> Target for KubeTarget<K> {
    fn kind(&self) -> WorkloadKind {
        K::KIND
    }

    async fn run(
        self: Arc<Self>,
        events: mpsc::Sender<WorkloadEvent>,
        shutdown: CancellationToken,
    ) {
        let watches = self.settings.scope.streams().into_iter().map(|namespace| {
            let span = tracing::info_span!(
                "watch",
                kind = %K::KIND,
                namespace = namespace.as_deref().unwrap_or("*")
            );
            self.watch_scope(namespace, events.clone(), shutdown.clone())
                .instrument(span)
        });
        futures::future::join_all(watches).await;
    }

    async fn apply(
        &self,
        current: &Workload,
        patch: &StampPatch,
    ) -> Result<ApplyOutcome, TargetError> {
        let id = &current.id;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let body = render_apply_body(current, patch, &self.settings.prefix, &now);
        let params = PatchParams::apply(&self.settings.field_manager).force();
        let api = self.api(Some(&id.namespace));
        match api.patch(&id.name, &params, &Patch::Apply(&body)).await {
            Ok(obj) => Ok(to_workload(&obj)
                .map_or(ApplyOutcome::Gone, |w| ApplyOutcome::Applied(Box::new(w)))),
            Err(error) if is_status(&error, 404) => Ok(ApplyOutcome::Gone),
            // Apply is an upsert: on a workload deleted meanwhile the server tries to
            // create it from the partial body and answers 422.
            Err(error) if is_status(&error, 422) => match self.get(id).await? {
                None => Ok(ApplyOutcome::Gone),
                Some(_) => Err(classify(id, error)),
            },
            Err(error) => Err(classify(id, error)),
        }
    }

    async fn get(&self, id: &WorkloadId) -> Result<Option<Workload>, TargetError> {
        let obj = self
            .api(Some(&id.namespace))
            .get_opt(&id.name)
            .await
            .map_err(|e| classify(id, e))?;
        Ok(obj.as_ref().and_then(to_workload))
    }
}
