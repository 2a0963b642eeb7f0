//! nudge's Prometheus metrics (design §7), composed: one prometheus-client
//! [`Registry`] under the prefix `nudge`, into which each component registers its
//! own metrics (the engine, watch health, the Consul sources, the webhook) and the
//! runtime adds `nudge_leader`. Library users register theirs with
//! [`Metrics::register`].
//!
//! | series | type | labels | owner |
//! | --- | --- | --- | --- |
//! | `nudge_stamps_total` | counter | `kind`, `source`, `result` | engine |
//! | `nudge_stamp_latency_seconds` | histogram | | engine |
//! | `nudge_tracked_workloads` | gauge | | engine |
//! | `nudge_tracked_references` | gauge | | engine |
//! | `nudge_debounce_queue_depth` | gauge | | engine |
//! | `nudge_stamps_outstanding` | gauge | | engine |
//! | `nudge_rollouts_total` | counter | `kind`, `source`, `outcome` | engine (`follow`) |
//! | `nudge_rollout_duration_seconds` | histogram | `kind`, `outcome` | engine (`follow`) |
//! | `nudge_watch_restarts_total` | counter | `watch` | sources, targets (`health`) |
//! | `nudge_source_observations_total` | counter | `source` | engine driver (`health::SourceMetrics`) |
//! | `nudge_source_errors_total` | counter | `source`, `category` | source wrappers, built-in sources, driver |
//! | `nudge_source_observe_duration_seconds` | histogram | `source` | source wrappers, built-in sources |
//! | `nudge_source_tracked_references` | gauge | `source` | engine driver |
//! | `nudge_consul_query_errors_total` | counter | `source` | Consul sources |
//! | `nudge_consul_blocking_slot_waits_total` | counter | `source` | Consul sources |
//! | `nudge_webhook_requests_total` | counter | `result` | webhook |
//! | `nudge_notifications_total` | counter | `format`, `result` | notifications (`events::notify`) |
//! | `nudge_snapshot_copies` | gauge | `kind` | snapshot copy watch (`copies`) |
//! | `nudge_snapshot_bytes` | gauge | `kind` | snapshot copy watch (`copies`) |
//! | `nudge_snapshot_operations_total` | counter | `kind`, `operation` | snapshot copier (`copies`) |
//! | `nudge_leader` | gauge | | runtime (leader election) |

use std::fmt;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::copies::CopyMetrics;
use crate::engine::EngineMetrics;
use crate::events::notify::NotifyMetrics;
use crate::health::WatchHealth;
use crate::sources::consul::ConsulMetrics;
use crate::webhook::WebhookCounters;

/// Content type of [`Metrics::encode`]'s output (OpenMetrics text).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The composed registry and every component's metrics; clones share them.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Mutex<Registry>,
    engine: EngineMetrics,
    watches: WatchHealth,
    consul: ConsulMetrics,
    webhook: Arc<WebhookCounters>,
    notify: NotifyMetrics,
    snapshots: Arc<CopyMetrics>,
    leader: Gauge,
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
    /// A fresh registry with every built-in component's metrics registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nudge");
        let engine = EngineMetrics::register(&mut registry);
        let watches = WatchHealth::register(&mut registry);
        let consul = ConsulMetrics::register(registry.sub_registry_with_prefix("consul"));
        let webhook = Arc::new(WebhookCounters::register(
            registry.sub_registry_with_prefix("webhook"),
        ));
        let notify = NotifyMetrics::register(&mut registry);
        let snapshots = Arc::new(CopyMetrics::register(
            registry.sub_registry_with_prefix("snapshot"),
        ));
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader lease (or election is disabled), else 0",
            leader.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry: Mutex::new(registry),
                engine,
                watches,
                consul,
                webhook,
                notify,
                snapshots,
                leader,
            }),
        }
    }

    /// The engine's metrics.
    pub fn engine(&self) -> EngineMetrics {
        self.inner.engine.clone()
    }

    /// Watch restarts of sources and targets.
    pub fn watches(&self) -> WatchHealth {
        self.inner.watches.clone()
    }

    /// Failed Consul queries.
    pub fn consul(&self) -> ConsulMetrics {
        self.inner.consul.clone()
    }

    /// The webhook's counters.
    pub fn webhook(&self) -> Arc<WebhookCounters> {
        self.inner.webhook.clone()
    }

    /// Notifications of stamps.
    pub fn notify(&self) -> NotifyMetrics {
        self.inner.notify.clone()
    }

    /// Snapshot copies made, kept and pruned (design §5e).
    pub fn snapshots(&self) -> Arc<CopyMetrics> {
        self.inner.snapshots.clone()
    }

    /// Whether this replica is the leader.
    pub fn set_leader(&self, leader: bool) {
        self.inner.leader.set(i64::from(leader));
    }

    /// Lets a component register its own metrics (custom sources and targets of
    /// library users), under nudge's prefix.
    pub fn register(&self, with: impl FnOnce(&mut Registry)) {
        with(&mut self.lock());
    }

    /// Every metric in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> Result<String, fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.lock())?;
        Ok(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner
            .registry
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NotifyFormat;
    use crate::engine::StampResult;
    use crate::events::notify::NotifyResult;
    use crate::model::{SourceName, WorkloadKind};
    use crate::webhook::ReviewResult;

    #[test]
    fn every_series_is_exposed_with_its_name_of_record() {
        let metrics = Metrics::new();
        let source = SourceName::configmap();
        metrics
            .engine()
            .stamp(&WorkloadKind::deployment(), &source, StampResult::Applied);
        metrics
            .engine()
            .rollout(&WorkloadKind::deployment(), &["configmap"], "started");
        metrics.engine().rollout_ended(
            &WorkloadKind::deployment(),
            "complete",
            std::time::Duration::from_secs(42),
        );
        metrics.watches().restarted("configmap");
        metrics.watches().sources().observed("configmap");
        metrics.watches().sources().failed("configmap", "backend");
        metrics.watches().sources().register_source("configmap");
        metrics
            .watches()
            .sources()
            .observe_took("configmap", std::time::Duration::from_millis(3));
        metrics.consul().query_failed(&SourceName::consul());
        metrics.consul().slot_waited(&SourceName::consul());
        metrics.webhook().record(ReviewResult::Timeout);
        metrics
            .notify()
            .record(NotifyFormat::Slack, NotifyResult::Failed);
        let text = metrics.encode().unwrap();
        for family in [
            "nudge_stamps",
            "nudge_stamp_latency_seconds",
            "nudge_watch_restarts",
            "nudge_source_observations",
            "nudge_source_errors",
            "nudge_source_observe_duration_seconds",
            "nudge_source_tracked_references",
            "nudge_consul_query_errors",
            "nudge_consul_blocking_slot_waits",
            "nudge_tracked_workloads",
            "nudge_tracked_references",
            "nudge_debounce_queue_depth",
            "nudge_stamps_outstanding",
            "nudge_rollouts",
            "nudge_rollout_duration_seconds",
            "nudge_leader",
            "nudge_webhook_requests",
            "nudge_notifications",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{family} missing in\n{text}"
            );
        }
        assert!(text.contains(r#"nudge_watch_restarts_total{watch="configmap"} 1"#));
        assert!(text.contains(r#"nudge_source_observations_total{source="configmap"} 1"#));
        assert!(
            text.contains(r#"nudge_source_errors_total{source="configmap",category="backend"} 1"#)
        );
        assert!(text.contains(r#"nudge_consul_query_errors_total{source="consul"} 1"#));
        assert!(text.contains(r#"nudge_consul_blocking_slot_waits_total{source="consul"} 1"#));
        assert!(text.contains(r#"nudge_webhook_requests_total{result="timeout"} 1"#));
        assert!(text.contains(r#"nudge_notifications_total{format="slack",result="failed"} 1"#));
        assert!(text.contains(
            r#"nudge_rollouts_total{kind="deployment",source="configmap",outcome="started"} 1"#
        ));
        assert!(text.contains(
            r#"nudge_rollout_duration_seconds_bucket{le="60.0",kind="deployment",outcome="complete"} 1"#
        ), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn components_of_library_users_register_under_the_prefix() {
        let metrics = Metrics::new();
        let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
        metrics.register(|registry| registry.register("http_polls", "polls", counter.clone()));
        counter.inc();
        assert!(
            metrics
                .encode()
                .unwrap()
                .contains("nudge_http_polls_total 1")
        );
    }
}
