//! The Kubernetes client the `nudge` binary runs with: kube's own layers
//! (TLS and client identity, timeouts, base URI, retry, authentication, extra
//! headers, request spans) over a connection pool that lets go of what a quiet
//! controller does not use.
//!
//! kube's default client talks HTTP/1.1, one connection per request in flight,
//! and its pool keeps every connection a burst opened for as long as the API
//! server does, each with the read buffer its largest response grew (up to
//! ~400 KiB). After nudge's start-up burst (stamps, Events, object reads) that
//! was about fifty idle connections, a few MiB of a controller that then waits.
//! Here idle connections close after [`IDLE_TIMEOUT`], and a connection's read
//! buffer stops at [`MAX_READ_BUFFER`]: a larger response is read in more
//! pieces, not held.

use std::time::Duration;

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};
use tower_http::trace::TraceLayer;

/// How long a connection may sit unused in the pool before it is closed. A
/// change after a quiet spell opens one again (a TCP and TLS handshake).
const IDLE_TIMEOUT: Duration = Duration::from_secs(20);

/// The most a connection's read buffer grows to (hyper's default: ~400 KiB).
const MAX_READ_BUFFER: usize = 64 * 1024;

/// The Kubernetes client the `nudge` binary runs with, for the in-cluster
/// configuration or the current kubeconfig context as
/// [`kube::Client::try_default`] finds them: kube's client, over a connection
/// pool that closes a connection left idle for 20 s and stops a connection's
/// read buffer at 64 KiB, so that a controller waiting between changes does not
/// keep the connections and buffers of its last burst.
///
/// # Errors
///
/// When no configuration is found, or it cannot be used (kube's error).
pub async fn kube_client() -> Result<kube::Client, kube::Error> {
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    pooled(config, IDLE_TIMEOUT)
}

/// The client for `config`, closing connections idle for `idle_timeout`. A
/// proxy is left to kube's own builder, which says whether this build can use
/// it.
fn pooled(config: kube::Config, idle_timeout: Duration) -> Result<kube::Client, kube::Error> {
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let mut connector = TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let pool = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .pool_idle_timeout(idle_timeout)
        .pool_timer(TokioTimer::new())
        .http1_max_buf_size(MAX_READ_BUFFER)
        .build(connector);
    let retry = config
        .default_retry
        .then(|| RetryLayer::new(RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .layer(TraceLayer::new_for_http())
        .map_err(BoxError::from)
        .service(pool);
    Ok(kube::Client::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    const VERSION: &str = r#"{"major":"1","minor":"33","gitVersion":"v1.33.0","gitCommit":"","gitTreeState":"","buildDate":"","goVersion":"","compiler":"","platform":""}"#;

    fn config(url: &str) -> kube::Config {
        kube::Config::new(url.parse().unwrap())
    }

    /// Answers one request on one connection, then reports how long the
    /// client kept that connection open after the answer.
    async fn one_answer(listener: TcpListener) -> Duration {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0; 4096];
        let read = socket.read(&mut request).await.unwrap();
        assert!(request[..read].starts_with(b"GET /version"));
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{VERSION}",
            VERSION.len()
        );
        socket.write_all(answer.as_bytes()).await.unwrap();
        let answered = tokio::time::Instant::now();
        // The client closes the idle connection: end of stream.
        assert_eq!(socket.read(&mut request).await.unwrap(), 0);
        answered.elapsed()
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_after_the_idle_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(one_answer(listener));
        let client = pooled(config(&url), Duration::from_millis(300)).unwrap();
        let version = client.apiserver_version().await.unwrap();
        assert_eq!(version.minor, "33");
        let kept = tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the idle connection was never closed")
            .unwrap();
        // kube's default pool keeps it until the server closes it.
        assert!(kept >= Duration::from_millis(300), "{kept:?}");
        drop(client);
    }

    #[tokio::test]
    async fn a_proxy_is_left_to_kube_which_names_the_missing_feature() {
        let mut config = config("http://127.0.0.1:1");
        config.proxy_url = Some("http://127.0.0.1:3128".parse().unwrap());
        let Err(error) = pooled(config, IDLE_TIMEOUT) else {
            panic!("a proxy this build cannot use was accepted");
        };
        let error = error.to_string();
        assert!(error.contains("http-proxy"), "{error}");
    }
}
