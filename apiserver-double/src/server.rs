//! The HTTP server: connection handling, authentication, latency and
//! failure injection, request recording, and the admin endpoints under
//! `/_double/`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::body::ResponseBody;
use crate::faults::{Faults, RequestFilter};
use crate::handlers::{self, error_response, json_response};
use crate::kubeconfig::KubeconfigFile;
use crate::recorder::{RecordedRequest, Recorder};
use crate::registry::Registry;
use crate::request::{Ctx, Query};
use crate::resources::NAMESPACES;
use crate::routes::{self, Route};
use crate::status::ApiError;
use crate::store::Store;
use crate::{Error, request_log, seed};

/// Settings of an [`ApiServerDouble`]. Every field has a default.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on (default `127.0.0.1:0`, an ephemeral port).
    pub bind: SocketAddr,
    /// Where to write the kubeconfig; `None` writes it into a temporary
    /// directory that is removed when the double is dropped.
    pub kubeconfig_path: Option<PathBuf>,
    /// How many past events are kept for watches and exact-resourceVersion
    /// lists (default 10,000). Older resourceVersions answer 410 Expired.
    pub history_limit: usize,
    /// Interval of periodic BOOKMARK events on watches that allow them
    /// (default 5 s). A bookmark is also sent 2 s before a watch times out.
    pub bookmark_interval: Duration,
    /// Watch duration when the client sends no `timeoutSeconds` (default 30 min).
    pub default_watch_timeout: Duration,
    /// Lines buffered per watch before the writer waits for the client.
    pub watch_buffer: usize,
    /// Events buffered per watcher before it falls back to the history window.
    pub broadcast_capacity: usize,
    /// Bearer token clients must send (default: a random one, written to the kubeconfig).
    pub token: Option<String>,
    /// Whether requests without the bearer token get 401 (default true).
    pub require_auth: bool,
    /// How many requests the log keeps (oldest dropped first; default 100,000).
    pub max_recorded_requests: usize,
    /// Whether request bodies are kept in the log (default true).
    pub record_bodies: bool,
    /// Largest accepted request body (default 3 MiB, the apiserver's limit).
    pub max_body_bytes: usize,
    /// Namespaces that exist at start (default: `default`, `kube-system`,
    /// `kube-public`, `kube-node-lease`).
    pub initial_namespaces: Vec<String>,
    /// How long the imitated kube-controller-manager takes to react to a
    /// change, per step (default 5 ms; a real one takes a few ms to ~100 ms).
    /// Its writes (ReplicaSets, ControllerRevisions, workload status) follow
    /// a client's write, never inside its response.
    pub controller_latency: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            kubeconfig_path: None,
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(5),
            default_watch_timeout: Duration::from_secs(1800),
            watch_buffer: 1024,
            broadcast_capacity: 4096,
            token: None,
            require_auth: true,
            max_recorded_requests: 100_000,
            record_bodies: true,
            max_body_bytes: 3 * 1024 * 1024,
            initial_namespaces: ["default", "kube-system", "kube-public", "kube-node-lease"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            controller_latency: Duration::from_millis(5),
        }
    }
}

/// State shared by all connections.
pub(crate) struct State {
    pub store: Store,
    pub registry: Registry,
    pub faults: Faults,
    pub recorder: Recorder,
    pub config: Config,
    pub token: String,
    pub addr: SocketAddr,
    pub shutdown: watch::Receiver<bool>,
    pub open_watches: AtomicUsize,
}

/// A running Kubernetes API server double.
///
/// ```no_run
/// # async fn demo() -> Result<(), apiserver_double::Error> {
/// let api = apiserver_double::ApiServerDouble::start().await?;
/// // Point the code under test at it, e.g. `KUBECONFIG=<path>` for a child process:
/// let kubeconfig = api.kubeconfig_path().to_owned();
/// # let _ = kubeconfig;
/// assert!(api.requests().iter().any(|r| r.method == "PATCH"));
/// api.shutdown().await;
/// # Ok(()) }
/// ```
pub struct ApiServerDouble {
    state: Arc<State>,
    url: String,
    kubeconfig: KubeconfigFile,
    shutdown_tx: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    controllers: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ApiServerDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServerDouble")
            .field("url", &self.url)
            .field("kubeconfig", &self.kubeconfig.path())
            .finish_non_exhaustive()
    }
}

impl ApiServerDouble {
    /// Starts a double on `127.0.0.1` with an ephemeral port and default settings.
    pub async fn start() -> Result<Self, Error> {
        Self::start_with(Config::default()).await
    }

    /// Starts a double with the given settings.
    pub async fn start_with(config: Config) -> Result<Self, Error> {
        let listener = TcpListener::bind(config.bind).await.map_err(Error::Bind)?;
        let addr = listener.local_addr().map_err(Error::Bind)?;
        let url = format!("http://{addr}");
        let token = config.token.clone().unwrap_or_else(crate::ids::new_token);
        let kubeconfig = KubeconfigFile::write(config.kubeconfig_path.as_deref(), &url, &token)
            .map_err(Error::Kubeconfig)?;
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let state = Arc::new(State {
            store: Store::new(config.history_limit, config.broadcast_capacity),
            registry: Registry::new(),
            faults: Faults::new(),
            recorder: Recorder::new(config.max_recorded_requests, config.record_bodies),
            token,
            addr,
            shutdown: shutdown_rx,
            open_watches: AtomicUsize::new(0),
            config,
        });
        let namespaces = state
            .registry
            .get(NAMESPACES)
            .expect("namespaces are built in");
        for ns in &state.config.initial_namespaces {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            handlers::create_object(
                &state,
                &namespaces,
                obj,
                handlers::Ownership::Update("kube-apiserver".into()),
                false,
            )
            .map_err(|e| Error::Api {
                code: e.code,
                reason: e.reason.to_string(),
                message: e.message,
            })?;
        }
        // The history before start is not available, as after an apiserver restart.
        state.store.compact_all();
        let controllers = crate::controllers::spawn(state.clone());
        let task = tokio::spawn(serve(listener, state.clone()));
        Ok(Self {
            state,
            url,
            kubeconfig,
            shutdown_tx,
            task: Some(task),
            controllers: Some(controllers),
        })
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.state.addr
    }

    /// The kubeconfig file pointing at this double.
    pub fn kubeconfig_path(&self) -> &Path {
        self.kubeconfig.path()
    }

    /// The bearer token clients must send.
    pub fn token(&self) -> &str {
        &self.state.token
    }

    /// Every recorded request so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.recorder.all()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.state.recorder.clear();
    }

    /// Ends every open watch now (cleanly: the response body ends, as when
    /// the apiserver closes a watch). Clients are expected to re-watch.
    pub fn drop_watches(&self) {
        self.state.faults.drop_watches();
    }

    /// Answers the next `n` requests matching `filter` with `status` (e.g.
    /// 500, or 429 with `Retry-After: 1`) and a matching `Status` body.
    pub fn fail_next(&self, n: u32, status: u16, filter: RequestFilter) {
        self.state.faults.fail_next(n, status, 1, filter);
    }

    /// Like [`fail_next`](Self::fail_next) with an explicit `Retry-After` (for 429/503).
    pub fn fail_next_with_retry_after(
        &self,
        n: u32,
        status: u16,
        retry_after_secs: u32,
        filter: RequestFilter,
    ) {
        self.state
            .faults
            .fail_next(n, status, retry_after_secs, filter);
    }

    /// Cancels pending injected failures.
    pub fn clear_failures(&self) {
        self.state.faults.clear_failures();
    }

    /// Delays every API response by `d` (zero to turn off).
    pub fn set_latency(&self, d: Duration) {
        self.state.faults.set_latency(d);
    }

    /// Number of watches currently streaming.
    pub fn open_watches(&self) -> usize {
        self.state.open_watches.load(Ordering::SeqCst)
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.state.store.current_rv()
    }

    /// Forgets the event history: watches and exact lists from earlier
    /// resourceVersions now answer 410 Expired.
    pub fn compact_history(&self) {
        self.state.store.compact_all();
    }

    /// Creates an object directly (no HTTP, not recorded), through the same
    /// defaulting and validation as a POST. `apiVersion` and `kind` pick the
    /// resource. Useful to seed large data sets quickly.
    pub fn create(&self, object: Value) -> Result<Value, Error> {
        seed::create(&self.state, object)
    }

    /// Stops accepting connections, ends open watches and waits (up to 5 s)
    /// for connections to finish.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown_tx.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        if let Some(controllers) = self.controllers.take() {
            let _ = controllers.await;
        }
    }
}

impl Drop for ApiServerDouble {
    fn drop(&mut self) {
        let _ = self.shutdown_tx.send(true);
        for task in [self.task.take(), self.controllers.take()]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
    }
}

async fn serve(listener: TcpListener, state: Arc<State>) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            conn = listener.accept() => {
                let Ok((stream, _)) = conn else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                let svc = service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(handle(state, req).await) }
                });
                let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
                let fut = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = fut.await;
                });
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(5)) => {}
    }
}

fn recorded_headers(headers: &HeaderMap) -> std::collections::BTreeMap<String, String> {
    headers
        .iter()
        .filter(|(k, _)| *k != header::AUTHORIZATION)
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<ResponseBody> {
    let received_at = SystemTime::now();
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let raw_query = parts.uri.query().map(str::to_string);
    let body = match Limited::new(body, state.config.max_body_bytes)
        .collect()
        .await
    {
        Ok(c) => c.to_bytes(),
        Err(_) => return error_response(&ApiError::too_large(state.config.max_body_bytes)),
    };
    if let Some(admin) = path.strip_prefix("/_double/") {
        return admin_request(&state, &parts.method, admin, raw_query.as_deref(), &body);
    }
    let response = api_request(
        &state,
        parts.method.clone(),
        &path,
        raw_query.as_deref(),
        parts.headers.clone(),
        body.clone(),
    )
    .await;
    state.recorder.push(RecordedRequest {
        method: parts.method.as_str().to_string(),
        path,
        query: raw_query,
        headers: recorded_headers(&parts.headers),
        body: if state.recorder.keeps_bodies() {
            body
        } else {
            Bytes::new()
        },
        status: response.status().as_u16(),
        received_at,
        service_time: started.elapsed(),
        seq: 0,
    });
    response
}

fn authorized(state: &State, headers: &HeaderMap) -> bool {
    if !state.config.require_auth {
        return true;
    }
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t.trim() == state.token)
}

async fn api_request(
    state: &Arc<State>,
    method: Method,
    path: &str,
    raw_query: Option<&str>,
    headers: HeaderMap,
    body: Bytes,
) -> Response<ResponseBody> {
    let route = routes::parse(&state.registry, path);
    let public = matches!(route, Route::Health | Route::Version);
    if !public && !authorized(state, &headers) {
        return error_response(&ApiError::unauthorized());
    }
    let latency = state.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let query = Query::parse(raw_query);
    let is_watch = method == Method::GET && matches!(query.get("watch"), Some("1" | "true"));
    if let Some((status, retry_after)) = state.faults.take(method.as_str(), path, is_watch) {
        return error_response(&ApiError::injected(status, retry_after));
    }
    let ctx = Ctx {
        method,
        query,
        headers,
        body,
    };
    match handlers::dispatch(state, route, ctx).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct FailNext {
    count: u32,
    status: u16,
    #[serde(default = "one")]
    retry_after_seconds: u32,
    #[serde(default)]
    filter: RequestFilter,
}

fn one() -> u32 {
    1
}

fn admin_error(code: u16, message: String) -> Response<ResponseBody> {
    json_response(
        code,
        serde_json::to_vec(&json!({"error": message})).unwrap_or_default(),
    )
}

fn admin_request(
    state: &Arc<State>,
    method: &Method,
    path: &str,
    query: Option<&str>,
    body: &Bytes,
) -> Response<ResponseBody> {
    let ok = |v: Value| json_response(200, serde_json::to_vec(&v).unwrap_or_default());
    match (method.as_str(), path.trim_end_matches('/')) {
        ("POST", "drop-watches") => {
            let open = state.open_watches.load(Ordering::SeqCst);
            state.faults.drop_watches();
            ok(json!({"dropped": open}))
        }
        ("POST", "fail-next") => match serde_json::from_slice::<FailNext>(body) {
            Ok(f) => {
                state
                    .faults
                    .fail_next(f.count, f.status, f.retry_after_seconds, f.filter);
                ok(json!({}))
            }
            Err(e) => admin_error(400, format!("invalid fail-next body: {e}")),
        },
        ("DELETE", "fail-next") => {
            state.faults.clear_failures();
            ok(json!({}))
        }
        ("PUT" | "POST", "latency") => match serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("millis").and_then(Value::as_u64))
        {
            Some(ms) => {
                state.faults.set_latency(Duration::from_millis(ms));
                ok(json!({}))
            }
            None => admin_error(400, "expected {\"millis\": <n>}".into()),
        },
        ("GET", "requests") => {
            let all = state.recorder.all();
            let since = Query::parse(query)
                .get("since")
                .and_then(|s| s.parse::<usize>().ok())
                .unwrap_or(0);
            ok(Value::Array(
                all.iter().skip(since).map(recorded_json).collect(),
            ))
        }
        ("GET", "request-log") => {
            let after = Query::parse(query)
                .get("after")
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0);
            request_log::stream(state.clone(), after)
        }
        ("POST", "objects") => seed::create_lines(state, body),
        ("DELETE", "requests") => {
            state.recorder.clear();
            ok(json!({}))
        }
        ("POST", "compact") => {
            state.store.compact_all();
            ok(json!({"resourceVersion": state.store.current_rv().to_string()}))
        }
        ("GET", "state") => ok(json!({
            "resourceVersion": state.store.current_rv().to_string(),
            "openWatches": state.open_watches.load(Ordering::SeqCst),
            "lastRequestSeq": *state.recorder.latest().borrow(),
            "objects": state.registry.all().iter().map(|(_, r)| (r.group_resource(), Value::from(state.store.count(r.storage)))).collect::<serde_json::Map<_, _>>(),
        })),
        _ => admin_error(
            404,
            format!("unknown admin endpoint {method} /_double/{path}"),
        ),
    }
}

fn recorded_json(r: &RecordedRequest) -> Value {
    let body = if r.body.is_empty() {
        Value::Null
    } else {
        r.body_json()
            .unwrap_or_else(|| Value::from(String::from_utf8_lossy(&r.body).into_owned()))
    };
    json!({
        "method": r.method,
        "path": r.path,
        "query": r.query,
        "headers": r.headers,
        "body": body,
        "status": r.status,
        "receivedAt": crate::ids::format_rfc3339(r.received_at),
    })
}
