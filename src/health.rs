//! Health signals that lower layers report and the runtime composes: whether
//! every watch has listed once ([`Readiness`], served as `/ready`) and how often
//! watches had to restart ([`WatchHealth`], `nudge_watch_restarts_total`).
//!
//! Sources and targets never see the admin server or the registry: they are
//! handed a [`WatchReady`] and a [`WatchHealth`] and report on them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
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

    /// The notes added so far.
    pub fn notes(&self) -> Vec<String> {
        self.lock().notes.clone()
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
}

// === WatchHealth ===

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WatchLabels {
    watch: String,
}

/// Restarts of Kubernetes watch streams, by watch (`deployment`, `configmap`, …:
/// configured kinds and sources, so low cardinality). Clones share the counters.
#[derive(Debug, Clone, Default)]
pub struct WatchHealth {
    restarts: Family<WatchLabels, Counter>,
}

impl WatchHealth {
    /// Counters registered as `watch_restarts` (`nudge_watch_restarts_total`
    /// under nudge's registry).
    pub fn register(registry: &mut Registry) -> Self {
        let health = Self::default();
        registry.register(
            "watch_restarts",
            "Kubernetes watch streams that failed and were restarted",
            health.restarts.clone(),
        );
        health
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
}
