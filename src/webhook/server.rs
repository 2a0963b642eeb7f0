//! The HTTPS server: TLS per connection from a [`CertificateSource`], HTTP/1.1,
//! `POST /mutate` to the [`Admission`] handler, `GET /healthz`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::admission::Admission;
use super::metrics::WebhookCounters;
use super::tls::CertificateSource;

/// The path the MutatingWebhookConfiguration points at.
pub const MUTATE_PATH: &str = "/mutate";
/// Largest review accepted: an object and its old version, each up to the
/// apiserver's 3 MiB request limit, plus the envelope.
const MAX_REVIEW_BYTES: usize = 8 * 1024 * 1024;
/// A client that has not finished its TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections get to finish after shutdown starts.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves admission reviews on `listener` until `shutdown` is cancelled, then lets
/// open connections finish their current request (up to 5 s).
pub async fn serve(
    listener: TcpListener,
    certificates: CertificateSource,
    admission: Arc<Admission>,
    shutdown: CancellationToken,
) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let span = tracing::debug_span!("webhook_connection", %peer);
        connections.spawn(
            connection(
                stream,
                peer,
                certificates.clone(),
                admission.clone(),
                shutdown.clone(),
            )
            .instrument(span),
        );
    }
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    certificates: CertificateSource,
    admission: Arc<Admission>,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let counters = admission.counters().clone();
    let config = match certificates.current().await {
        Ok(config) => config,
        Err(error) => {
            tracing::warn!(%error, category = error.category(), "no serving certificate; dropping connection");
            return;
        }
    };
    let tls =
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, TlsAcceptor::from(config).accept(stream))
            .await
        {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => {
                WebhookCounters::bump(&counters.tls_handshake_failures);
                tracing::debug!(%peer, %error, "TLS handshake failed");
                return;
            }
            Err(_) => {
                WebhookCounters::bump(&counters.tls_handshake_failures);
                tracing::debug!(%peer, "TLS handshake timed out");
                return;
            }
        };
    let service = service_fn(move |request| {
        let admission = admission.clone();
        async move { Ok::<_, Infallible>(route(admission, request).await) }
    });
    let conn = http1::Builder::new().serve_connection(TokioIo::new(tls), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        result = conn.as_mut() => result,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(error) = result {
        tracing::debug!(%error, "connection ended with an error");
    }
}

async fn route(admission: Arc<Admission>, request: Request<Incoming>) -> Response<Full<Bytes>> {
    match (request.method(), request.uri().path()) {
        (&Method::POST, MUTATE_PATH) => {}
        (&Method::GET, "/healthz") => return text(StatusCode::OK, "ok"),
        (_, MUTATE_PATH) => return text(StatusCode::METHOD_NOT_ALLOWED, "POST only"),
        _ => return text(StatusCode::NOT_FOUND, "not found"),
    }
    let apiserver_timeout = request.uri().query().and_then(timeout_param);
    let body = match Limited::new(request.into_body(), MAX_REVIEW_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(error) => {
            tracing::warn!(%error, "cannot read the review body");
            return text(StatusCode::BAD_REQUEST, "cannot read the body");
        }
    };
    let answer = admission.review(&body, apiserver_timeout).await;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let bytes = serde_json::to_vec(&answer.body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(bytes)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response
}

/// The apiserver's `?timeout=10s` (a Go duration; `humantime` reads the forms it
/// sends, e.g. `5s`, `1m0s`).
fn timeout_param(query: &str) -> Option<Duration> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == "timeout")
        .and_then(|(_, v)| humantime::parse_duration(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apiserver_timeout_parameter_is_read() {
        assert_eq!(timeout_param("timeout=5s"), Some(Duration::from_secs(5)));
        assert_eq!(
            timeout_param("a=b&timeout=1m0s"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(timeout_param("timeout=soon"), None);
        assert_eq!(timeout_param(""), None);
    }
}
