//! nudge's Prometheus metrics (design §7), in one prometheus-client [`Registry`]
//! under the prefix `nudge`.
//!
//! [`Metrics`] is a cheap-to-clone handle with one typed method per event, so call
//! sites never spell label names or values: label sets are small structs, and every
//! label value comes from an enum or a configured name, never from `Debug` output.
//!
//! | series | type | labels |
//! | --- | --- | --- |
//! | `nudge_stamps_total` | counter | `kind`, `source`, `result` |
//! | `nudge_stamp_latency_seconds` | histogram | |
//! | `nudge_watch_restarts_total` | counter | `watch` |
//! | `nudge_consul_query_errors_total` | counter | `source` |
//! | `nudge_tracked_workloads` | gauge | |
//! | `nudge_tracked_references` | gauge | |
//! | `nudge_debounce_queue_depth` | gauge | |
//! | `nudge_leader` | gauge | |
//! | `nudge_webhook_requests_total` | counter | `result` |

use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::model::{SourceName, WorkloadKind};

/// Content type of [`Metrics::encode`]'s output (OpenMetrics text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the stamp latency buckets: the debounce window
/// (default 5 s) and the ceiling (default 60 s) sit inside the range.
const LATENCY_BUCKETS: [f64; 12] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// How one stamp decision ended (`result` label of `nudge_stamps_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StampResult {
    /// The stamp was written.
    Applied,
    /// Writing failed with a retryable error (conflict, 5xx, timeout); it is retried.
    Retried,
    /// The API server refused the stamp for good (403, 422, …).
    Failed,
    /// The workload was deleted before the stamp could be written.
    Gone,
    /// This replica is not the leader, so it did not write; the leader does.
    SkippedFollower,
}

impl StampResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Retried => "retried",
            Self::Failed => "failed",
            Self::Gone => "gone",
            Self::SkippedFollower => "skipped_follower",
        }
    }
}

/// How the admission webhook answered (`result` label of
/// `nudge_webhook_requests_total`): the webhook's own [`ReviewResult`].
pub use crate::webhook::ReviewResult as WebhookResult;

/// A watch stream whose restarts are counted (`watch` label of
/// `nudge_watch_restarts_total`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Watch {
    /// The watch of one workload kind.
    Workload(WorkloadKind),
    /// The metadata watch of a Kubernetes-object source (`configmap`, `secret`).
    Source(SourceName),
}

// === label values ===

/// The `kind` label: the workload kind in lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct KindLabel(WorkloadKind);

impl KindLabel {
    fn as_str(self) -> &'static str {
        match self.0 {
            WorkloadKind::Deployment => "deployment",
            WorkloadKind::StatefulSet => "statefulset",
            WorkloadKind::DaemonSet => "daemonset",
        }
    }
}

impl EncodeLabelValue for KindLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

/// A configured source name; low cardinality because sources are configured.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SourceLabel(SourceName);

impl EncodeLabelValue for SourceLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        encoder.write_str(self.0.as_str())
    }
}

impl EncodeLabelValue for StampResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for WebhookResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

impl EncodeLabelValue for Watch {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        match self {
            Self::Workload(kind) => encoder.write_str(KindLabel(*kind).as_str()),
            Self::Source(name) => encoder.write_str(name.as_str()),
        }
    }
}

// === label sets ===

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StampLabels {
    kind: KindLabel,
    source: SourceLabel,
    result: StampResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WatchLabels {
    watch: Watch,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabels {
    source: SourceLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WebhookLabels {
    result: WebhookResult,
}

// === Metrics ===

/// A handle on nudge's metrics; clones share one registry.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    stamps: Family<StampLabels, Counter>,
    stamp_latency: Histogram,
    watch_restarts: Family<WatchLabels, Counter>,
    consul_query_errors: Family<SourceLabels, Counter>,
    tracked_workloads: Gauge,
    tracked_references: Gauge,
    debounce_queue_depth: Gauge,
    leader: Gauge,
    webhook_requests: Family<WebhookLabels, Counter>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every nudge metric registered (and at zero).
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nudge");
        let stamps = Family::<StampLabels, Counter>::default();
        registry.register(
            "stamps",
            "Stamp decisions by workload kind, source of the change and result",
            stamps.clone(),
        );
        let stamp_latency = Histogram::new(LATENCY_BUCKETS);
        registry.register_with_unit(
            "stamp_latency",
            "Time from a source change being observed to the stamp being written",
            Unit::Seconds,
            stamp_latency.clone(),
        );
        let watch_restarts = Family::<WatchLabels, Counter>::default();
        registry.register(
            "watch_restarts",
            "Kubernetes watch streams that failed and were restarted",
            watch_restarts.clone(),
        );
        let consul_query_errors = Family::<SourceLabels, Counter>::default();
        registry.register(
            "consul_query_errors",
            "Consul queries that failed, by source",
            consul_query_errors.clone(),
        );
        let tracked_workloads = Gauge::default();
        registry.register(
            "tracked_workloads",
            "Workloads with at least one tracked reference",
            tracked_workloads.clone(),
        );
        let tracked_references = Gauge::default();
        registry.register(
            "tracked_references",
            "Distinct references being watched",
            tracked_references.clone(),
        );
        let debounce_queue_depth = Gauge::default();
        registry.register(
            "debounce_queue_depth",
            "Workloads waiting for their debounce window or for pacing",
            debounce_queue_depth.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader lease (or election is disabled), else 0",
            leader.clone(),
        );
        let webhook_requests = Family::<WebhookLabels, Counter>::default();
        // A fixed set of results: expose them all at zero from the start.
        for result in WebhookResult::ALL {
            drop(webhook_requests.get_or_create(&WebhookLabels { result }));
        }
        registry.register(
            "webhook_requests",
            "Admission webhook requests by result",
            webhook_requests.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                stamps,
                stamp_latency,
                watch_restarts,
                consul_query_errors,
                tracked_workloads,
                tracked_references,
                debounce_queue_depth,
                leader,
                webhook_requests,
            }),
        }
    }

    /// A stamp decision for a workload of `kind` whose change came from `source`.
    pub fn stamp(&self, kind: WorkloadKind, source: &SourceName, result: StampResult) {
        self.inner
            .stamps
            .get_or_create(&StampLabels {
                kind: KindLabel(kind),
                source: SourceLabel(source.clone()),
                result,
            })
            .inc();
    }

    /// A stamp was written `latency` after the change that caused it was observed.
    pub fn stamp_latency(&self, latency: Duration) {
        self.inner.stamp_latency.observe(latency.as_secs_f64());
    }

    /// A watch stream failed and is being restarted.
    pub fn watch_restarted(&self, watch: Watch) {
        self.inner
            .watch_restarts
            .get_or_create(&WatchLabels { watch })
            .inc();
    }

    /// A Consul query of `source` failed.
    pub fn consul_query_failed(&self, source: &SourceName) {
        self.inner
            .consul_query_errors
            .get_or_create(&SourceLabels {
                source: SourceLabel(source.clone()),
            })
            .inc();
    }

    /// The dependency graph's size: workloads tracked and distinct references.
    pub fn set_tracked(&self, workloads: usize, references: usize) {
        self.inner.tracked_workloads.set(saturating_i64(workloads));
        self.inner
            .tracked_references
            .set(saturating_i64(references));
    }

    /// Workloads waiting in the scheduler.
    pub fn set_queue_depth(&self, depth: usize) {
        self.inner.debounce_queue_depth.set(saturating_i64(depth));
    }

    /// Whether this replica is the leader.
    pub fn set_leader(&self, leader: bool) {
        self.inner.leader.set(i64::from(leader));
    }

    /// The admission webhook answered a request.
    pub fn webhook_request(&self, result: WebhookResult) {
        self.inner
            .webhook_requests
            .get_or_create(&WebhookLabels { result })
            .inc();
    }

    /// Every metric in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.inner.registry)?;
        Ok(out)
    }
}

fn saturating_i64(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn every_series_is_exposed_with_its_unit_suffix() {
        let metrics = Metrics::new();
        // Labelled families appear once a label set has been used.
        let source = SourceName::configmap();
        metrics.stamp(WorkloadKind::Deployment, &source, StampResult::Applied);
        metrics.watch_restarted(Watch::Source(source.clone()));
        metrics.consul_query_failed(&source);
        let text = metrics.encode().unwrap();
        for name in [
            "nudge_stamps_total",
            "nudge_stamp_latency_seconds",
            "nudge_watch_restarts_total",
            "nudge_consul_query_errors_total",
            "nudge_tracked_workloads",
            "nudge_tracked_references",
            "nudge_debounce_queue_depth",
            "nudge_leader",
            "nudge_webhook_requests_total",
        ] {
            let family = name.trim_end_matches("_total");
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{family} missing in\n{text}"
            );
        }
        assert!(text.contains("# UNIT nudge_stamp_latency_seconds seconds"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn stamps_are_labelled_with_kind_source_and_result() {
        let metrics = Metrics::new();
        let clone = metrics.clone();
        clone.stamp(
            WorkloadKind::StatefulSet,
            &SourceName::configmap(),
            StampResult::SkippedFollower,
        );
        metrics.stamp(
            WorkloadKind::StatefulSet,
            &SourceName::configmap(),
            StampResult::SkippedFollower,
        );
        let text = metrics.encode().unwrap();
        let series = line(&text, "nudge_stamps_total{").expect(&text);
        assert_eq!(
            series,
            r#"nudge_stamps_total{kind="statefulset",source="configmap",result="skipped_follower"} 2"#
        );
    }

    #[test]
    fn latency_lands_in_the_right_bucket() {
        let metrics = Metrics::new();
        metrics.stamp_latency(Duration::from_millis(5300));
        let text = metrics.encode().unwrap();
        assert!(text.contains(r#"nudge_stamp_latency_seconds_bucket{le="5.0"} 0"#));
        assert!(text.contains(r#"nudge_stamp_latency_seconds_bucket{le="10.0"} 1"#));
        assert!(text.contains("nudge_stamp_latency_seconds_count 1"));
    }

    #[test]
    fn gauges_report_the_last_value_set() {
        let metrics = Metrics::new();
        metrics.set_tracked(3, 7);
        metrics.set_queue_depth(2);
        metrics.set_leader(true);
        metrics.set_leader(false);
        let text = metrics.encode().unwrap();
        assert_eq!(
            line(&text, "nudge_tracked_workloads "),
            Some("nudge_tracked_workloads 3")
        );
        assert_eq!(
            line(&text, "nudge_tracked_references "),
            Some("nudge_tracked_references 7")
        );
        assert_eq!(
            line(&text, "nudge_debounce_queue_depth "),
            Some("nudge_debounce_queue_depth 2")
        );
        assert_eq!(line(&text, "nudge_leader "), Some("nudge_leader 0"));
    }

    #[test]
    fn watch_and_webhook_labels_use_static_names() {
        let metrics = Metrics::new();
        metrics.watch_restarted(Watch::Workload(WorkloadKind::DaemonSet));
        metrics.watch_restarted(Watch::Source(SourceName::secret()));
        metrics.webhook_request(WebhookResult::Timeout);
        metrics.consul_query_failed(&SourceName::configmap());
        let text = metrics.encode().unwrap();
        assert!(text.contains(r#"nudge_watch_restarts_total{watch="daemonset"} 1"#));
        assert!(text.contains(r#"nudge_watch_restarts_total{watch="secret"} 1"#));
        assert!(text.contains(r#"nudge_webhook_requests_total{result="timeout"} 1"#));
        assert!(text.contains(r#"nudge_consul_query_errors_total{source="configmap"} 1"#));
    }
}
