//! The admin HTTP server (design §7): `/live`, `/ready` and `/metrics` on their own
//! port, apart from the webhook.
//!
//! - `/live` answers 200 while the process runs.
//! - `/ready` answers 200 once every registered watch has listed once (see
//!   [`Readiness`]), and 503 before that and again from the moment shutdown starts.
//!   Leadership does not matter: followers keep warm caches and serve the webhook.
//! - `/metrics` is the [`Metrics`] registry in the OpenMetrics text format.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics::{self, Metrics};

/// Why the admin server could not run.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The configured address could not be bound (in use, no permission).
    #[error("cannot listen on {addr} for the admin server")]
    Bind {
        /// The address from `admin.bind`.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The listener failed while serving.
    #[error("admin server failed")]
    Serve(#[source] std::io::Error),
}

// === Readiness ===

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

// === server ===

#[derive(Clone)]
struct AdminState {
    readiness: Readiness,
    metrics: Metrics,
}

/// The routes of the admin server, for embedding or tests.
pub fn router(readiness: Readiness, metrics: Metrics) -> Router {
    Router::new()
        .route("/live", get(live))
        .route("/ready", get(ready))
        .route("/metrics", get(serve_metrics))
        .with_state(AdminState { readiness, metrics })
}

/// The admin server, bound and ready to serve.
pub struct AdminServer {
    listener: TcpListener,
    router: Router,
}

impl AdminServer {
    /// Binds `addr` (port 0 picks a free port).
    pub async fn bind(
        addr: SocketAddr,
        readiness: Readiness,
        metrics: Metrics,
    ) -> Result<Self, AdminError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| AdminError::Bind { addr, source })?;
        Ok(Self {
            listener,
            router: router(readiness, metrics),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr, AdminError> {
        self.listener.local_addr().map_err(AdminError::Serve)
    }

    /// Serves until `stop` is cancelled. Stop it after the rest of nudge has
    /// drained, so that probes keep getting answers (`/ready`: 503) meanwhile.
    pub async fn serve(self, stop: CancellationToken) -> Result<(), AdminError> {
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
            .map_err(AdminError::Serve)
    }
}

async fn live() -> &'static str {
    "live\n"
}

async fn ready(State(state): State<AdminState>) -> Response {
    match state.readiness.status() {
        ReadyStatus::Ready => (StatusCode::OK, "ready\n".to_owned()).into_response(),
        ReadyStatus::Waiting(watches) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("waiting for: {}\n", watches.join(", ")),
        )
            .into_response(),
        ReadyStatus::ShuttingDown => (
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down\n".to_owned(),
        )
            .into_response(),
    }
}

async fn serve_metrics(State(state): State<AdminState>) -> Response {
    match state.metrics.encode() {
        Ok(body) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body).into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot encode metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::model::WorkloadKind;
    use crate::runtime::metrics::Watch;

    /// A minimal HTTP/1.1 GET: status code, headers (lower-cased names), body.
    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_lowercase(), body.to_owned())
    }

    struct Running {
        addr: SocketAddr,
        stop: CancellationToken,
        task: tokio::task::JoinHandle<Result<(), AdminError>>,
    }

    async fn start(readiness: Readiness, metrics: Metrics) -> Running {
        let server = AdminServer::bind(([127, 0, 0, 1], 0).into(), readiness, metrics)
            .await
            .unwrap();
        let addr = server.local_addr().unwrap();
        let stop = CancellationToken::new();
        let task = tokio::spawn(server.serve(stop.clone()));
        Running { addr, stop, task }
    }

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

    #[tokio::test]
    async fn live_is_ok_and_ready_follows_watches_then_shutdown() {
        let shutdown = CancellationToken::new();
        let readiness = Readiness::new(shutdown.clone());
        let watch = readiness.register("StatefulSet/team-a");
        readiness.seal();
        let server = start(readiness, Metrics::new()).await;

        assert_eq!(get(server.addr, "/live").await.0, 200);
        let (status, _, body) = get(server.addr, "/ready").await;
        assert_eq!(status, 503);
        assert!(body.contains("StatefulSet/team-a"), "{body}");

        watch.listed();
        assert_eq!(get(server.addr, "/ready").await.0, 200);

        shutdown.cancel();
        let (status, _, body) = get(server.addr, "/ready").await;
        assert_eq!((status, body.as_str()), (503, "shutting down\n"));
        assert_eq!(get(server.addr, "/live").await.0, 200);

        server.stop.cancel();
        server.task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn metrics_are_served_as_openmetrics_text() {
        let metrics = Metrics::new();
        metrics.watch_restarted(Watch::Workload(WorkloadKind::Deployment));
        let server = start(Readiness::new(CancellationToken::new()), metrics).await;
        let (status, head, body) = get(server.addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            head.contains("content-type: application/openmetrics-text; version=1.0.0"),
            "{head}"
        );
        assert!(body.contains(r#"nudge_watch_restarts_total{watch="deployment"} 1"#));
        assert_eq!(get(server.addr, "/nope").await.0, 404);
        server.stop.cancel();
        server.task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn binding_a_taken_port_names_the_address() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let error = AdminServer::bind(
            addr,
            Readiness::new(CancellationToken::new()),
            Metrics::new(),
        )
        .await
        .err()
        .unwrap();
        assert!(error.to_string().contains(&addr.to_string()), "{error}");
    }
}
