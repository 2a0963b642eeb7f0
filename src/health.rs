//! Health signals that lower layers report and the runtime composes: whether
//! every watch has listed once ([`Readiness`], served as `/ready`), how often
//! watches had to restart ([`WatchHealth`], `nudge_watch_restarts_total`), and
//! what each source observes ([`SourceMetrics`], `nudge_source_*`, carried by
//! the [`WatchHealth`] every source is handed).
//!
//! Sources and targets never see the admin server or the registry: they are
//! handed a [`WatchReady`] and a [`WatchHealth`] and report on them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use tokio_util::sync::CancellationToken;

/// Whether nudge is ready: every registered watch has listed once and shutdown has
/// not started. Cheap to clone; clones share state.
///
/// Watches register while the controller is assembled ([`register`](Self::register));
/// [`seal`](Self::seal) says that all have, so that readiness cannot turn true while
/// some watch is yet to register.
#[derive(Clone)]
pub struct Readiness {
    inner: Arc<ReadinessInner>,
}

struct ReadinessInner {
    state: Mutex<ReadinessState>,
    shutdown: CancellationToken,
}

#[derive(Default)]
struct ReadinessState {
    sealed: bool,
    next_id: u64,
    /// Registered watches that have not listed yet, by id, with their names.
    pending: BTreeMap<u64, String>,
    /// Facts worth showing in `/ready` that do not make nudge unready (a
    /// configured kind the API server does not serve).
    notes: Vec<String>,
    /// Notes of registered watches, by id, each shown until its watch clears
    /// it (a target waiting for its CRD).
    watch_notes: BTreeMap<u64, String>,
}

/// One watch's part of [`Readiness`]: call [`listed`](Self::listed) when its initial
/// list completes (every relist may call it again; only the first counts).
#[derive(Clone)]
pub struct WatchReady {
    readiness: Readiness,
    id: u64,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("status", &self.status())
            .finish()
    }
}

impl std::fmt::Debug for WatchReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchReady").field("id", &self.id).finish()
    }
}

/// What `/ready` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadyStatus {
    /// Every watch has listed once.
    Ready,
    /// Still assembling, or these watches have not listed yet.
    Waiting(Vec<String>),
    /// Shutdown has started.
    ShuttingDown,
}

impl Readiness {
    /// Readiness that turns false for good once `shutdown` is cancelled.
    pub fn new(shutdown: CancellationToken) -> Self {
        Self {
            inner: Arc::new(ReadinessInner {
                state: Mutex::default(),
                shutdown,
            }),
        }
    }

    /// Registers a watch that must list once before nudge is ready; `name` is shown
    /// by `/ready` while it has not.
    pub fn register(&self, name: impl Into<String>) -> WatchReady {
        let mut state = self.lock();
        let id = state.next_id;
        state.next_id += 1;
        state.pending.insert(id, name.into());
        WatchReady {
            readiness: self.clone(),
            id,
        }
    }

    /// Every watch has registered; readiness now depends on them listing.
    pub fn seal(&self) {
        self.lock().sealed = true;
    }

    /// The current status.
    pub fn status(&self) -> ReadyStatus {
        if self.inner.shutdown.is_cancelled() {
            return ReadyStatus::ShuttingDown;
        }
        let state = self.lock();
        if !state.sealed {
            return ReadyStatus::Waiting(vec!["startup".to_owned()]);
        }
        if state.pending.is_empty() {
            ReadyStatus::Ready
        } else {
            ReadyStatus::Waiting(state.pending.values().cloned().collect())
        }
    }

    /// Adds a note shown by `/ready` whatever the status (e.g. a configured kind
    /// that is not served); notes never make nudge unready.
    pub fn note(&self, text: impl Into<String>) {
        self.lock().notes.push(text.into());
    }

    /// The notes added so far, then the notes watches show now.
    pub fn notes(&self) -> Vec<String> {
        let state = self.lock();
        state
            .notes
            .iter()
            .chain(state.watch_notes.values())
            .cloned()
            .collect()
    }

    /// Whether `/ready` answers 200.
    pub fn is_ready(&self) -> bool {
        self.status() == ReadyStatus::Ready
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReadinessState> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl WatchReady {
    /// The watch has delivered its initial list.
    pub fn listed(&self) {
        self.readiness.lock().pending.remove(&self.id);
    }

    /// Shows `text` as a note in `/ready` (replacing this watch's previous
    /// note) until [`clear_note`](Self::clear_note). Notes never make nudge
    /// unready.
    pub fn note(&self, text: impl Into<String>) {
        self.readiness
            .lock()
            .watch_notes
            .insert(self.id, text.into());
    }

    /// Removes this watch's note, if any.
    pub fn clear_note(&self) {
        self.readiness.lock().watch_notes.remove(&self.id);
    }
}

// === WatchHealth ===

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WatchLabels {
    watch: String,
}

/// Restarts of Kubernetes watch streams, by watch (`deployment`, `configmap`, …:
/// configured kinds and sources, so low cardinality), and the per-source
/// metrics ([`SourceMetrics`]). Clones share the counters.
#[derive(Debug, Clone, Default)]
pub struct WatchHealth {
    restarts: Family<WatchLabels, Counter>,
    sources: SourceMetrics,
}

impl WatchHealth {
    /// Counters registered as `watch_restarts` (`nudge_watch_restarts_total`
    /// under nudge's registry), and the source metrics under `source_`
    /// ([`SourceMetrics::register`]).
    pub fn register(registry: &mut Registry) -> Self {
        let health = Self {
            restarts: Family::default(),
            sources: SourceMetrics::register(registry.sub_registry_with_prefix("source")),
        };
        registry.register(
            "watch_restarts",
            "Kubernetes watch streams that failed and were restarted",
            health.restarts.clone(),
        );
        health
    }

    /// What each source observes: every source and the engine's driver record
    /// here.
    pub fn sources(&self) -> &SourceMetrics {
        &self.sources
    }

    /// The watch named `watch` failed and is being restarted.
    pub fn restarted(&self, watch: &str) {
        self.restarts
            .get_or_create(&WatchLabels {
                watch: watch.to_owned(),
            })
            .inc();
    }

    /// Restarts of `watch` so far.
    pub fn restarts(&self, watch: &str) -> u64 {
        self.restarts
            .get_or_create(&WatchLabels {
                watch: watch.to_owned(),
            })
            .get()
    }
}

// === SourceMetrics ===

/// Upper bounds (seconds) of the observe latency buckets: a GET of a ConfigMap
/// or an HTTP read takes milliseconds; a slow backend, seconds.
const OBSERVE_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabels {
    /// A registered source's name (configured names: low cardinality).
    source: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceErrorLabels {
    source: String,
    /// A `SourceError` category: a static word.
    category: &'static str,
}

type HistogramFamily = Family<SourceLabels, Histogram, fn() -> Histogram>;

fn observe_histogram() -> Histogram {
    Histogram::new(OBSERVE_BUCKETS)
}

/// The same metrics for every source, built-in or custom, labelled by the
/// source's name: observations reported, errors by category, how long one
/// reference takes to observe, and how many references are tracked. The
/// engine's driver counts observations and tracked references for every
/// source; the [`PollSource`](crate::sources::PollSource) and
/// [`WatchSource`](crate::sources::WatchSource) wrappers and the built-in
/// sources record errors and latency, so a custom source records nothing
/// itself. Clones share the series.
#[derive(Debug, Clone)]
pub struct SourceMetrics {
    observations: Family<SourceLabels, Counter>,
    errors: Family<SourceErrorLabels, Counter>,
    observe_duration: HistogramFamily,
    tracked: Family<SourceLabels, Gauge>,
}

impl Default for SourceMetrics {
    /// Metrics that are kept but not exported (tests, embedders without a
    /// registry).
    fn default() -> Self {
        Self {
            observations: Family::default(),
            errors: Family::default(),
            observe_duration: Family::new_with_constructor(observe_histogram),
            tracked: Family::default(),
        }
    }
}

impl SourceMetrics {
    /// Metrics registered into `registry` (nudge's `source` sub-registry:
    /// `nudge_source_observations_total`, `nudge_source_errors_total`,
    /// `nudge_source_observe_duration_seconds`, `nudge_source_tracked_references`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "observations",
            "Observations sources reported to the engine, by source",
            metrics.observations.clone(),
        );
        registry.register(
            "errors",
            "Failed observations and source failures, by source and error category",
            metrics.errors.clone(),
        );
        registry.register_with_unit(
            "observe_duration",
            "Time a source took to observe one reference (a poll, a GET, a watch's first item)",
            Unit::Seconds,
            metrics.observe_duration.clone(),
        );
        registry.register(
            "tracked_references",
            "References each source is asked to track",
            metrics.tracked.clone(),
        );
        metrics
    }

    fn labels(source: &str) -> SourceLabels {
        SourceLabels {
            source: source.to_owned(),
        }
    }

    /// Creates `source`'s series at zero, so that a source that never reports
    /// shows 0 rather than nothing.
    pub fn register_source(&self, source: &str) {
        let labels = Self::labels(source);
        let _ = self.observations.get_or_create(&labels);
        let _ = self.tracked.get_or_create(&labels);
    }

    /// `source` reported an observation.
    pub fn observed(&self, source: &str) {
        self.observations.get_or_create(&Self::labels(source)).inc();
    }

    /// Observations `source` reported so far.
    pub fn observations(&self, source: &str) -> u64 {
        self.observations.get_or_create(&Self::labels(source)).get()
    }

    /// `source` failed to observe (or failed as a whole) with an error of
    /// `category` (`SourceError::category`).
    pub fn failed(&self, source: &str, category: &'static str) {
        self.errors
            .get_or_create(&SourceErrorLabels {
                source: source.to_owned(),
                category,
            })
            .inc();
    }

    /// Errors of `category` from `source` so far.
    pub fn errors(&self, source: &str, category: &'static str) -> u64 {
        self.errors
            .get_or_create(&SourceErrorLabels {
                source: source.to_owned(),
                category,
            })
            .get()
    }

    /// `source` took `took` to observe one reference (successfully or not).
    pub fn observe_took(&self, source: &str, took: Duration) {
        self.observe_duration
            .get_or_create(&Self::labels(source))
            .observe(took.as_secs_f64());
    }

    /// `source` is asked to track `delta` more (or, negative, fewer) references.
    pub fn tracked_changed(&self, source: &str, delta: i64) {
        self.tracked
            .get_or_create(&Self::labels(source))
            .inc_by(delta);
    }

    /// `source` is asked to track exactly `count` references (its whole
    /// interest, sent again when it restarts).
    pub fn set_tracked(&self, source: &str, count: usize) {
        self.tracked
            .get_or_create(&Self::labels(source))
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// References `source` is tracking.
    pub fn tracked(&self, source: &str) -> i64 {
        self.tracked.get_or_create(&Self::labels(source)).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_waits_for_seal_and_every_watch() {
        let readiness = Readiness::new(CancellationToken::new());
        let deployments = readiness.register("Deployment/*");
        let configmaps = readiness.register("configmap/*");
        assert_eq!(
            readiness.status(),
            ReadyStatus::Waiting(vec!["startup".into()])
        );
        readiness.seal();
        deployments.listed();
        assert_eq!(
            readiness.status(),
            ReadyStatus::Waiting(vec!["configmap/*".into()])
        );
        configmaps.listed();
        configmaps.listed();
        assert!(readiness.is_ready());
    }

    #[test]
    fn readiness_is_lost_for_good_when_shutdown_starts() {
        let shutdown = CancellationToken::new();
        let readiness = Readiness::new(shutdown.clone());
        readiness.seal();
        assert!(readiness.is_ready());
        shutdown.cancel();
        assert_eq!(readiness.status(), ReadyStatus::ShuttingDown);
        // A relist during shutdown does not make it ready again.
        readiness.register("late").listed();
        assert!(!readiness.is_ready());
    }

    #[test]
    fn a_watch_note_shows_until_cleared_and_never_makes_nudge_unready() {
        let readiness = Readiness::new(CancellationToken::new());
        let gizmos = readiness.register("target Gizmo");
        readiness.seal();
        readiness.note("fixed");
        gizmos.note("waiting for its CRD");
        gizmos.listed();
        assert!(readiness.is_ready());
        assert_eq!(readiness.notes(), ["fixed", "waiting for its CRD"]);
        gizmos.note("still waiting");
        assert_eq!(readiness.notes(), ["fixed", "still waiting"]);
        gizmos.clear_note();
        assert_eq!(readiness.notes(), ["fixed"]);
    }

    #[test]
    fn source_metrics_are_named_with_units_and_labelled_by_source() {
        let mut registry = Registry::with_prefix("nudge");
        let health = WatchHealth::register(&mut registry);
        let sources = health.sources();
        sources.register_source("quiet");
        sources.observed("consul.eu");
        sources.failed("consul.eu", "timeout");
        sources.observe_took("consul.eu", Duration::from_millis(30));
        sources.tracked_changed("consul.eu", 2);
        sources.tracked_changed("consul.eu", -1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"nudge_source_observations_total{source="consul.eu"} 1"#,
            r#"nudge_source_observations_total{source="quiet"} 0"#,
            r#"nudge_source_errors_total{source="consul.eu",category="timeout"} 1"#,
            r#"nudge_source_observe_duration_seconds_bucket{le="0.05",source="consul.eu"} 1"#,
            r#"nudge_source_observe_duration_seconds_count{source="consul.eu"} 1"#,
            "# UNIT nudge_source_observe_duration_seconds seconds",
            r#"nudge_source_tracked_references{source="consul.eu"} 1"#,
            r#"nudge_source_tracked_references{source="quiet"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
    }
}
