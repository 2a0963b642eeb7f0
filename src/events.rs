//! Kubernetes Events nudge publishes on workloads: `ConfigChanged` for each stamp,
//! `RolloutComplete`, `RolloutFailed` and `RolloutSuperseded` for how the
//! rollout it started ended, `InvalidAnnotation` and `MissingConfig` for
//! configuration problems. Notes name
//! references and annotations, never content. [`notify`] sends stamps to a chat or
//! HTTP webhook as well; [`FanOut`] publishes to both.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::Resource;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::time::Instant;

use crate::config::KubernetesSourceConfig;
use crate::fingerprint::ObjectKind;
use crate::model::{Reference, SourceName, WorkloadId};
use series::{Publication, SeriesCache};

pub mod notify;
mod series;

/// Why an Event is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// A stamp was written (Normal).
    ConfigChanged,
    /// An annotation could not be parsed (Warning).
    InvalidAnnotation,
    /// A required reference does not exist (Warning).
    MissingConfig,
    /// The API server refused a stamp for good (Warning).
    StampFailed,
    /// A rollout nudge started completed (Normal).
    RolloutComplete,
    /// A rollout nudge started failed: its controller gave up, or it ran past
    /// its progress deadline (Warning).
    RolloutFailed,
    /// A rollout nudge started was replaced before it ended: by a newer stamp,
    /// or someone else's pod-template change (Normal).
    RolloutSuperseded,
    /// Config changed, and the workload's mode keeps it back until someone
    /// acts: `notify`, `manual` without an approval, an invalid delivery
    /// annotation (Normal, and a notification; design §5d).
    ConfigPending,
    /// Config changed and waits for the workload's maintenance window or an
    /// earlier wave (Normal, no notification: it goes out on its own, or
    /// `WavesHalted` says why not; design §5d).
    ConfigWaiting,
    /// A rollout failed while later waves waited for it: they stay held until
    /// a newer change (Warning; design §5d).
    WavesHalted,
    /// The snapshot copies a stamp names could not be made or found (a
    /// ResourceQuota, RBAC, a copy deleted): the stamp waits, and no pod
    /// template names a copy that does not exist (Warning; design §5e).
    SnapshotFailed,
}

impl Reason {
    /// The Event `reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigChanged => "ConfigChanged",
            Self::InvalidAnnotation => "InvalidAnnotation",
            Self::MissingConfig => "MissingConfig",
            Self::StampFailed => "StampFailed",
            Self::RolloutComplete => "RolloutComplete",
            Self::RolloutFailed => "RolloutFailed",
            Self::RolloutSuperseded => "RolloutSuperseded",
            Self::ConfigPending => "ConfigPending",
            Self::ConfigWaiting => "ConfigWaiting",
            Self::WavesHalted => "WavesHalted",
            Self::SnapshotFailed => "SnapshotFailed",
        }
    }

    fn is_warning(self) -> bool {
        !matches!(
            self,
            Self::ConfigChanged
                | Self::RolloutComplete
                | Self::RolloutSuperseded
                | Self::ConfigPending
                | Self::ConfigWaiting
        )
    }

    /// The Event `type`.
    fn event_type(self) -> &'static str {
        if self.is_warning() {
            "Warning"
        } else {
            "Normal"
        }
    }
}

/// One Event about a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The workload it is about.
    pub workload: WorkloadId,
    /// Why.
    pub reason: Reason,
    /// Human text: names of references or annotations, never content.
    pub note: String,
    /// The config object the Event is about, when it is a Kubernetes object.
    /// Repeated Events aggregate into one series only when this matches too, so a
    /// change to another object gets its own Event and note.
    pub related: Option<Reference>,
    /// For `ConfigChanged`: every reference whose change the stamp carries, sorted
    /// (empty when a new or edited workload was stamped). Empty for the others.
    pub changed: Vec<Reference>,
}

impl Notice {
    /// A notice about `workload` that relates to no particular reference.
    pub fn new(workload: WorkloadId, reason: Reason, note: String) -> Self {
        Self {
            workload,
            reason,
            note,
            related: None,
            changed: Vec::new(),
        }
    }

    /// The same notice for a stamp carrying the changes of `changed`: kept sorted,
    /// and the first one is the Event's related object.
    pub fn with_changed(mut self, mut changed: Vec<Reference>) -> Self {
        changed.sort();
        changed.dedup();
        self.related = changed.first().cloned();
        self.changed = changed;
        self
    }
}

/// Where Events go. Publishing is best effort: failures are logged, not retried.
/// The engine publishes from a task of its own, so a slow sink never delays a
/// stamp.
#[async_trait]
pub trait EventSink: Send + Sync + 'static {
    /// Publishes one Event.
    async fn publish(&self, notice: Notice);
}

/// A sink that drops every Event (an engine without a cluster to report to).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvents;

#[async_trait]
impl EventSink for NoEvents {
    async fn publish(&self, _notice: Notice) {}
}

/// Publishes every notice to several sinks at once (Kubernetes Events and
/// notifications), each with its own copy. The engine publishes from one task, so
/// a slow sink delays the next notice, never a stamp.
pub struct FanOut {
    sinks: Vec<Arc<dyn EventSink>>,
}

impl FanOut {
    /// A sink publishing to each of `sinks`.
    pub fn new(sinks: impl IntoIterator<Item = Arc<dyn EventSink>>) -> Self {
        Self {
            sinks: sinks.into_iter().collect(),
        }
    }
}

#[async_trait]
impl EventSink for FanOut {
    async fn publish(&self, notice: Notice) {
        let publishing = self.sinks.iter().map(|sink| sink.publish(notice.clone()));
        futures::future::join_all(publishing).await;
    }
}

/// Publishes Events through the Kubernetes `events.k8s.io/v1` API. A repeat of
/// an Event (same workload, reason, related object and note) within six minutes
/// is counted into the first one's `series`, as kubectl's recorder does.
///
/// Not kube's `Recorder`: that one keeps a full copy of every Event for six
/// minutes (`src/events/series.rs` says why that matters).
pub struct KubeEvents {
    client: Client,
    instance: String,
    recent: Mutex<SeriesCache>,
    /// `apiVersion` and `kind` of the objects each configured Kubernetes
    /// source holds, for the related object of an Event.
    kinds: BTreeMap<SourceName, (String, String)>,
}

/// The `reportingController` of nudge's Events.
const CONTROLLER: &str = "nudge";

impl KubeEvents {
    /// A sink reporting as controller `nudge`, instance `instance` (the pod name;
    /// `nudge` when unknown).
    pub fn new(client: Client, instance: Option<String>) -> Self {
        Self {
            client,
            instance: instance.unwrap_or_else(|| CONTROLLER.to_owned()),
            recent: Mutex::new(SeriesCache::default()),
            kinds: BTreeMap::new(),
        }
    }

    /// The same sink, naming objects of the `[sources.kubernetes.<name>]`
    /// kinds as Events' related objects, like ConfigMaps and Secrets.
    pub fn with_source_kinds<'a>(
        mut self,
        sources: impl IntoIterator<Item = (&'a String, &'a KubernetesSourceConfig)>,
    ) -> Self {
        for (name, source) in sources {
            let name = SourceName::new(name.as_str()).ok();
            if let Some((name, kind)) = name.zip(source.referenced_kind()) {
                self.kinds.insert(name, kind);
            }
        }
        self
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, SeriesCache> {
        // The cache holds no invariant a panicking holder could break.
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn create(&self, notice: &Notice, key: u64) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        // Nanoseconds since the epoch, as kube and client-go name Events.
        let suffix = u64::try_from(now.as_nanosecond()).unwrap_or_default();
        let event = serde_json::to_vec(&self.event(notice, suffix, now))
            .map_err(kube::Error::SerdeError)?;
        let request = self
            .request(notice)
            .create(&PostParams::default(), event)
            .map_err(kube::Error::BuildRequest)?;
        self.send(request, "create").await?;
        self.recent().created(key, suffix, Instant::now());
        Ok(())
    }

    async fn repeat(&self, notice: &Notice, suffix: u64, count: i32) -> Result<(), kube::Error> {
        let patch = serde_json::json!({
            "series": EventSeries { count, last_observed_time: MicroTime(Timestamp::now()) },
        });
        let request = self
            .request(notice)
            .patch(
                &event_name(&notice.workload, suffix),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .map_err(kube::Error::BuildRequest)?;
        self.send(request, "patch").await
    }

    /// Requests on the Events of `notice`'s namespace.
    fn request(&self, notice: &Notice) -> kube::core::Request {
        kube::core::Request::new(K8sEvent::url_path(&(), Some(&notice.workload.namespace)))
    }

    /// Sends `request` (its `verb` names kube's trace span, as `Api` does),
    /// reading the answer's status only: the Event the API server echoes back
    /// (with its `managedFields`) is not needed, and parsing it was about a
    /// quarter of publishing one.
    async fn send(
        &self,
        mut request: http::Request<Vec<u8>>,
        verb: &'static str,
    ) -> Result<(), kube::Error> {
        request.extensions_mut().insert(verb);
        self.client.request_text(request).await.map(drop)
    }

    fn event(&self, notice: &Notice, suffix: u64, now: Timestamp) -> K8sEvent {
        let workload = &notice.workload;
        K8sEvent {
            metadata: ObjectMeta {
                namespace: Some(workload.namespace.to_string()),
                name: Some(event_name(workload, suffix)),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(notice.reason.event_type().into()),
            reason: Some(notice.reason.as_str().into()),
            action: Some(ACTION.into()),
            note: Some(truncate(&notice.note)),
            regarding: Some(ObjectReference {
                api_version: Some(workload.kind.api_version()),
                kind: Some(workload.kind.as_str().into()),
                namespace: Some(workload.namespace.to_string()),
                name: Some(workload.name.to_string()),
                ..Default::default()
            }),
            related: notice
                .related
                .as_ref()
                .and_then(|reference| object_reference(reference, &self.kinds)),
            reporting_controller: Some(CONTROLLER.into()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        }
    }
}

/// The Event `action` of every nudge Event.
const ACTION: &str = "Stamp";

/// `<workload>.<suffix in hex>`, as kube and client-go name Events.
fn event_name(workload: &WorkloadId, suffix: u64) -> String {
    format!("{}.{suffix:x}", workload.name)
}

/// Longest Event note the API accepts (1 kB).
const MAX_NOTE: usize = 1024;

fn truncate(note: &str) -> String {
    if note.len() <= MAX_NOTE {
        return note.to_owned();
    }
    let mut end = MAX_NOTE - 3;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &note[..end])
}

#[async_trait]
impl EventSink for KubeEvents {
    async fn publish(&self, notice: Notice) {
        let (key, publication) = {
            let mut recent = self.recent();
            let identity = (
                &notice.workload,
                notice.reason,
                &notice.related,
                &notice.note,
            );
            let key = recent.key(identity);
            (key, recent.publication(key, Instant::now()))
        };
        let result = match publication {
            Publication::Create => self.create(&notice, key).await,
            Publication::Repeat { suffix, count } => {
                match self.repeat(&notice, suffix, count).await {
                    Ok(()) => {
                        self.recent().repeated(key, count, Instant::now());
                        Ok(())
                    }
                    // Deleted meanwhile (the API server keeps Events for an hour
                    // by default): start a new one.
                    Err(kube::Error::Api(status)) if status.is_not_found() => {
                        self.recent().forget(key);
                        self.create(&notice, key).await
                    }
                    Err(error) => Err(error),
                }
            }
        };
        if let Err(error) = result {
            let workload = &notice.workload;
            tracing::warn!(%workload, reason = notice.reason.as_str(), %error, "cannot publish Event");
        }
    }
}

/// The Kubernetes object a reference names, for ConfigMaps, Secrets and the
/// objects of configured kinds (`kinds`, by source).
fn object_reference(
    reference: &Reference,
    kinds: &BTreeMap<SourceName, (String, String)>,
) -> Option<ObjectReference> {
    let (api_version, kind) = match ObjectKind::of_source(&reference.source) {
        Some(kind) => ("v1".to_owned(), kind.as_str().to_owned()),
        None => kinds.get(&reference.source)?.clone(),
    };
    Some(ObjectReference {
        api_version: Some(api_version),
        kind: Some(kind),
        namespace: reference.namespace.as_ref().map(ToString::to_string),
        name: Some(reference.name.to_string()),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_at_a_char_boundary() {
        let note = "é".repeat(1000);
        let cut = truncate(&note);
        assert!(cut.len() <= MAX_NOTE);
        assert!(cut.ends_with("..."));
    }

    /// Records what it is handed.
    #[derive(Default)]
    struct Recording(std::sync::Mutex<Vec<Notice>>);

    #[async_trait]
    impl EventSink for Recording {
        async fn publish(&self, notice: Notice) {
            self.0.lock().unwrap().push(notice);
        }
    }

    #[tokio::test]
    async fn fan_out_hands_every_sink_the_whole_notice() {
        let (events, notifications) = (
            Arc::new(Recording::default()),
            Arc::new(Recording::default()),
        );
        let sinks: [Arc<dyn EventSink>; 2] = [events.clone(), notifications.clone()];
        let fan_out = FanOut::new(sinks);
        let id = WorkloadId::new(crate::model::WorkloadKind::deployment(), "shop", "web");
        let changed = vec![
            Reference::object(crate::model::SourceName::secret(), "shop", "db"),
            Reference::object(crate::model::SourceName::configmap(), "shop", "app"),
        ];
        let notice = Notice::new(id, Reason::ConfigChanged, "changed".into()).with_changed(changed);
        fan_out.publish(notice.clone()).await;
        for sink in [&events, &notifications] {
            assert_eq!(*sink.0.lock().unwrap(), std::slice::from_ref(&notice));
        }
        assert_eq!(
            notice.related.as_ref(),
            notice.changed.first(),
            "sorted: configmap first"
        );
        assert_eq!(notice.changed[0].name, "app");
    }

    #[test]
    fn the_related_object_is_a_configmap_a_secret_or_an_object_of_a_configured_kind() {
        let flags = SourceName::new("flags").unwrap();
        let kinds = BTreeMap::from([(
            flags.clone(),
            ("example.com/v1".to_owned(), "FeatureFlags".to_owned()),
        )]);
        let related = |reference: Reference| {
            object_reference(&reference, &kinds)
                .map(|r| (r.api_version.unwrap(), r.kind.unwrap(), r.name.unwrap()))
        };
        assert_eq!(
            related(Reference::object(flags, "shop", "checkout")),
            Some((
                "example.com/v1".into(),
                "FeatureFlags".into(),
                "checkout".into()
            ))
        );
        assert_eq!(
            related(Reference::object(SourceName::configmap(), "shop", "app")),
            Some(("v1".into(), "ConfigMap".into(), "app".into()))
        );
        let consul = Reference::key(SourceName::consul(), "app/config");
        assert_eq!(related(consul), None);
    }

    #[test]
    fn only_config_changed_is_normal() {
        assert!(!Reason::ConfigChanged.is_warning());
        assert!(Reason::MissingConfig.is_warning());
        assert!(Reason::InvalidAnnotation.is_warning());
    }
}
