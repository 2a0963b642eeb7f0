//! Kubernetes Events nudge publishes on workloads: `ConfigChanged` for each stamp,
//! `InvalidAnnotation` and `MissingConfig` for configuration problems. Notes name
//! references and annotations, never content. [`notify`] sends stamps to a chat or
//! HTTP webhook as well; [`FanOut`] publishes to both.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::fingerprint::ObjectKind;
use crate::model::{Reference, WorkloadId};

pub mod notify;

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
}

impl Reason {
    /// The Event `reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigChanged => "ConfigChanged",
            Self::InvalidAnnotation => "InvalidAnnotation",
            Self::MissingConfig => "MissingConfig",
            Self::StampFailed => "StampFailed",
        }
    }

    fn is_warning(self) -> bool {
        !matches!(self, Self::ConfigChanged)
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

/// Publishes Events through the Kubernetes `events.k8s.io/v1` API, aggregating
/// repeats into series like kubectl's recorder does.
pub struct KubeEvents {
    recorder: Recorder,
}

impl KubeEvents {
    /// A sink reporting as controller `nudge`, instance `instance` (the pod name).
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: "nudge".into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }
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
        let workload = &notice.workload;
        let reference = ObjectReference {
            api_version: Some(workload.kind.api_version()),
            kind: Some(workload.kind.as_str().into()),
            namespace: Some(workload.namespace.clone()),
            name: Some(workload.name.clone()),
            ..Default::default()
        };
        let event = Event {
            type_: if notice.reason.is_warning() {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: notice.reason.as_str().into(),
            note: Some(truncate(&notice.note)),
            action: "Stamp".into(),
            secondary: notice.related.as_ref().and_then(object_reference),
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%workload, reason = notice.reason.as_str(), %error, "cannot publish Event");
        }
    }
}

/// The Kubernetes object a reference names, for ConfigMaps and Secrets.
fn object_reference(reference: &Reference) -> Option<ObjectReference> {
    let kind = ObjectKind::of_source(&reference.source)?;
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some(kind.as_str().into()),
        namespace: reference.namespace.clone(),
        name: Some(reference.name.clone()),
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
    fn only_config_changed_is_normal() {
        assert!(!Reason::ConfigChanged.is_warning());
        assert!(Reason::MissingConfig.is_warning());
        assert!(Reason::InvalidAnnotation.is_warning());
    }
}
