//! A loopback HTTP proxy between nudge and the Consul agent that timestamps each
//! exchange, so that the agent's response time is measured apart from nudge's
//! handling: when the request reached the proxy, when the agent's response head
//! came back, and when the last byte of its body was handed on to nudge.
//!
//! Each connection nudge opens gets one connection of its own to the agent, so
//! the connections the agent sees (and counts against its
//! `http_max_conns_per_client`) are nudge's, one for one. HTTP/1.1 carries one
//! exchange at a time per connection, so the timestamps of an exchange are
//! those of that request alone. What the proxy itself adds to a request is
//! measured by [`overhead`] and reported beside the figures. The proxy also
//! counts nudge's connections to Consul as they open and close (rather than
//! sampling `/proc/net/tcp`, whose thousands of lines on a busy machine cost
//! the benchmark more CPU than nudge used).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result};
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One request nudge sent to the agent, and its answer.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: String,
    /// Path and query, as sent: `/v1/kv/<key or prefix>?…`.
    pub target: String,
    /// The agent's status; 0 while unanswered.
    pub status: u16,
    /// When the request head reached the proxy.
    pub sent_at: SystemTime,
    /// When the agent's response head reached the proxy; `None` when nudge hung
    /// up before (a blocking query nudge gave up, e.g. when it stopped).
    pub head_at: Option<SystemTime>,
    /// When the last byte of the body was handed on to nudge; `None` when nudge
    /// hung up first.
    pub done_at: Option<SystemTime>,
    pub body_bytes: u64,
    /// The agent closed or reset the connection instead of answering (beyond
    /// its `http_max_conns_per_client` it resets a new connection at once);
    /// nudge saw its connection closed.
    pub agent_failed: bool,
}

impl Exchange {
    /// A blocking query (`index=` given): the agent holds it until something
    /// under it changes.
    pub fn is_blocking(&self) -> bool {
        self.query().split('&').any(|p| p.starts_with("index="))
    }

    fn query(&self) -> &str {
        self.target.split_once('?').map_or("", |(_, q)| q)
    }

    /// Whether this read covers the Consul key `key`: the key itself, or a
    /// prefix of it read with `recurse` or `keys` (names only: what wakes a
    /// prefix query and probes its parts).
    pub fn covers(&self, key: &str) -> bool {
        let Some(read) = self.kv_path() else {
            return false;
        };
        let listing = self.query().split('&').any(|p| {
            ["recurse", "keys"]
                .iter()
                .any(|flag| p == *flag || p.starts_with(&format!("{flag}=")))
        });
        if listing {
            key.starts_with(read)
        } else {
            key == read
        }
    }

    /// The key or prefix a KV read names.
    pub fn kv_path(&self) -> Option<&str> {
        let path = self
            .target
            .split_once('?')
            .map_or(&*self.target, |(p, _)| p);
        path.strip_prefix("/v1/kv/")
            .filter(|_| self.method == "GET")
    }
}

type Log = Arc<Mutex<Vec<Exchange>>>;

fn lock(log: &Log) -> MutexGuard<'_, Vec<Exchange>> {
    log.lock().unwrap_or_else(PoisonError::into_inner)
}

/// nudge's connections through the proxy: open now, and the most at once.
#[derive(Debug, Default)]
struct Connections {
    open: AtomicU64,
    peak: AtomicU64,
}

impl Connections {
    fn opened(self: &Arc<Self>) -> OpenConnection {
        let open = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(open, Ordering::SeqCst);
        OpenConnection(self.clone())
    }
}

/// One open connection of nudge's; counted as closed when dropped.
struct OpenConnection(Arc<Connections>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The running proxy.
pub struct ConsulProxy {
    port: u16,
    log: Log,
    connections: Arc<Connections>,
    task: JoinHandle<()>,
}

impl ConsulProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to the agent's `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let log: Log = Arc::default();
        let connections = Arc::<Connections>::default();
        let task = tokio::spawn(accept(listener, upstream, log.clone(), connections.clone()));
        Ok(Self {
            port,
            log,
            connections,
            task,
        })
    }

    /// `http://127.0.0.1:<port>`, the address nudge is given for Consul.
    pub fn addr(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The exchanges so far, in the order they ended (or were abandoned).
    pub fn exchanges(&self) -> Vec<Exchange> {
        lock(&self.log).clone()
    }

    /// Forgets the exchanges so far.
    pub fn clear(&self) {
        lock(&self.log).clear();
    }

    /// Waits (up to 5 s) until no connection is open, so that a count taken
    /// next is nudge's alone.
    pub async fn wait_closed(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.connections.open.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The most connections nudge held at once since the last call (or the
    /// start); the count starts again from those open now.
    pub fn take_peak_connections(&self) -> u64 {
        let open = self.connections.open.load(Ordering::SeqCst);
        self.connections.peak.swap(open, Ordering::SeqCst)
    }
}

impl Drop for ConsulProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    log: Log,
    connections: Arc<Connections>,
) {
    loop {
        let Ok((downstream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let open = connections.opened();
        let log = log.clone();
        tokio::spawn(async move {
            connection(downstream, upstream, log).await;
            drop(open);
        });
    }
}

/// One of nudge's connections, with its own connection to the agent. When the
/// agent cannot be reached, nudge's connection is closed, as the agent's own
/// refusal would be seen.
async fn connection(downstream: TcpStream, upstream: SocketAddr, log: Log) {
    let Ok(agent) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = (downstream.set_nodelay(true), agent.set_nodelay(true));
    let Ok((sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(agent)).await
    else {
        return;
    };
    let upstream_conn = tokio::spawn(conn);
    let sender = Arc::new(tokio::sync::Mutex::new(sender));
    let service =
        hyper::service::service_fn(move |request| forward(sender.clone(), request, log.clone()));
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(downstream), service)
        .await;
    upstream_conn.abort();
}

async fn forward(
    sender: Arc<tokio::sync::Mutex<SendRequest<Incoming>>>,
    request: Request<Incoming>,
    log: Log,
) -> Result<Response<TimedBody>, hyper::Error> {
    let sent_at = SystemTime::now();
    let method = request.method().to_string();
    let target = request
        .uri()
        .path_and_query()
        .map_or_else(|| request.uri().path().to_owned(), ToString::to_string);
    // Logged when dropped unanswered: nudge hung up while the agent held it.
    let mut recording = Recording {
        exchange: Some(Exchange {
            method,
            target,
            status: 0,
            sent_at,
            head_at: None,
            done_at: None,
            body_bytes: 0,
            agent_failed: false,
        }),
        log,
    };
    let response = async {
        let mut sender = sender.lock().await;
        sender.ready().await?;
        sender.send_request(request).await
    }
    .await;
    let response = match response {
        Ok(response) => response,
        Err(error) => {
            if let Some(exchange) = recording.exchange.as_mut() {
                exchange.agent_failed = true;
            }
            return Err(error);
        }
    };
    if let Some(exchange) = recording.exchange.as_mut() {
        exchange.head_at = Some(SystemTime::now());
        exchange.status = response.status().as_u16();
    }
    let (parts, body) = response.into_parts();
    Ok(Response::from_parts(
        parts,
        TimedBody {
            inner: body,
            recording,
        },
    ))
}

/// An exchange on its way: logged once, when it ends or is abandoned.
struct Recording {
    exchange: Option<Exchange>,
    log: Log,
}

impl Recording {
    /// Logs the exchange, complete at `done_at` (`None`: abandoned).
    fn finish(&mut self, done_at: Option<SystemTime>) {
        if let Some(mut exchange) = self.exchange.take() {
            exchange.done_at = done_at;
            lock(&self.log).push(exchange);
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.finish(None);
    }
}

/// The agent's response body on its way to nudge; logs its exchange when the
/// last byte is handed on, or when nudge hangs up first.
struct TimedBody {
    inner: Incoming,
    recording: Recording,
}

impl TimedBody {
    fn finish(&mut self, complete: bool) {
        self.recording.finish(complete.then(SystemTime::now));
    }
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(exchange)) =
                    (frame.data_ref(), this.recording.exchange.as_mut())
                {
                    exchange.body_bytes += data.len() as u64;
                }
                if this.inner.is_end_stream() {
                    this.finish(true);
                }
            }
            Poll::Ready(None) => this.finish(true),
            Poll::Ready(Some(Err(_))) => this.finish(false),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TimedBody {
    fn drop(&mut self) {
        // An empty body may never be polled: it was complete when handed on.
        let complete = self.inner.is_end_stream();
        self.finish(complete);
    }
}

/// What the proxy adds to a request: round trips of a small read of `key`,
/// straight to the agent and through the proxy, taken in turns.
#[derive(Debug, Clone)]
pub struct Overhead {
    pub samples: usize,
    /// Round trips in µs, sorted.
    pub direct_us: Vec<f64>,
    pub proxied_us: Vec<f64>,
}

/// Measures [`Overhead`] with `samples` reads each way (after a warm-up), each
/// way on a kept-alive connection of its own.
pub async fn overhead(agent: &str, proxy: &str, key: &str, samples: usize) -> Result<Overhead> {
    let direct_client = reqwest::Client::new();
    let proxied_client = reqwest::Client::new();
    let (direct_url, proxied_url) = (
        format!("{agent}/v1/kv/{key}"),
        format!("{proxy}/v1/kv/{key}"),
    );
    let round_trip = |client: &reqwest::Client, url: &str| {
        let request = client.get(url);
        async move {
            let began = Instant::now();
            let response = request.send().await?;
            let status = response.status();
            response.bytes().await?;
            anyhow::ensure!(status.is_success(), "GET of the key: {status}");
            anyhow::Ok(began.elapsed().as_secs_f64() * 1e6)
        }
    };
    for _ in 0..20 {
        round_trip(&direct_client, &direct_url).await?;
        round_trip(&proxied_client, &proxied_url).await?;
    }
    let (mut direct_us, mut proxied_us) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        direct_us.push(
            round_trip(&direct_client, &direct_url)
                .await
                .context("direct read")?,
        );
        proxied_us.push(
            round_trip(&proxied_client, &proxied_url)
                .await
                .context("read through the proxy")?,
        );
    }
    direct_us.sort_by(f64::total_cmp);
    proxied_us.sort_by(f64::total_cmp);
    Ok(Overhead {
        samples,
        direct_us,
        proxied_us,
    })
}
