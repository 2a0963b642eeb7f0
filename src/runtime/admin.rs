//! The admin HTTP server (design §7): `/live`, `/ready` and `/metrics` on their own
//! port, apart from the webhook.
//!
//! - `/live` answers 200 while the process runs.
//! - `/ready` answers 200 once every registered watch has listed once (see
//!   [`Readiness`]), and 503 before that and again from the moment shutdown starts.
//!   Leadership does not matter: followers keep warm caches and serve the webhook.
//! - `/metrics` is the [`Metrics`] registry in the OpenMetrics text format.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics::{self, Metrics};
pub use crate::health::{Readiness, ReadyStatus, WatchReady};

/// Why the admin server could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    let (status, mut body) = match state.readiness.status() {
        ReadyStatus::Ready => (StatusCode::OK, "ready\n".to_owned()),
        ReadyStatus::Waiting(watches) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("waiting for: {}\n", watches.join(", ")),
        ),
        ReadyStatus::ShuttingDown => (
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down\n".to_owned(),
        ),
    };
    for note in state.readiness.notes() {
        body.push_str(&format!("note: {note}\n"));
    }
    (status, body).into_response()
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
        metrics.watches().restarted("deployment");
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
