//! The Consul HTTP client: the only file that knows about consulrs, rustify and the
//! HTTP stack under them, so replacing the client library touches nothing else.
//!
//! # How consulrs is used, and where it is bypassed
//!
//! consulrs describes each API call as a rustify `Endpoint`; nudge uses its KV read
//! endpoints ([`ReadKeyRequest`]: path, `dc`, `ns`, `recurse`; [`ReadKeysRequest`]
//! for `?keys`, the names under a prefix) and its blocking-query
//! feature ([`Features`] with [`Blocking`]: `index`, `wait`); answers are decoded
//! by `super::kv`, as consulrs' `KVPair` reads them, without consulrs (the fuzz
//! targets decode answers without the client). The request is built by rustify's lower-level
//! `Endpoint::request` with a nudge [`MiddleWare`] (`RequestDecorator`) instead of
//! consulrs' own, carried over into an `http` 1 request and sent with reqwest
//! 0.12, which runs on the hyper and rustls the Kubernetes client uses: rustify's
//! own client (reqwest 0.11, hyper 0.14, rustls 0.21) is never called, so the
//! binary links one HTTP and TLS stack, not two. Executing through
//! consulrs/rustify (`exec_with_result`) is not possible for a watch because:
//!
//! - rustify's `Client::execute` turns every non-2xx status into an error and drops
//!   the response headers, so a 404 (key absent) loses `X-Consul-Index`, which is
//!   needed to block on a key that does not exist yet;
//! - consulrs' middleware re-encodes the already percent-encoded path when it
//!   prepends `/v1` (a key `a b` is sent as `a%2520b`), and panics on a token that
//!   is not a valid header value; nudge puts `/v1` into the base URL instead;
//! - consulrs' `ConsulClient::new` cannot set a TLS server name, the connection pool
//!   size or per-request timeouts, and has no `partition` parameter;
//! - rustify's `exec`/`parse` log failures at ERROR (`#[instrument(err)]`), and a
//!   parse error would carry the response body, i.e. values, into logs.
//!
//! Sending the built request with reqwest directly is the documented use of
//! `Endpoint::request` ("can be used for executing an endpoint without using a
//! built-in Client"). Everything consulrs can express for a request (path
//! encoding, query parameters, blocking features) still comes from it.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use consulrs::api::features::{Blocking, ConsistencyMode, Features};
use consulrs::api::kv::requests::{ReadKeyRequest, ReadKeysRequest};
use rustify::endpoint::{Endpoint, MiddleWare};

pub use super::kv::{
    ClientError, KeyRead, KeysRead, KvEntry, PrefixRead, parse_key_response, parse_keys_response,
    parse_prefix_response,
};

/// Header carrying the index a blocking query waits on.
const INDEX_HEADER: &str = "X-Consul-Index";
/// Header carrying the ACL token.
const TOKEN_HEADER: &str = "X-Consul-Token";
/// Consul adds up to `wait / 16` to a blocking query; this is the margin on top of
/// that before nudge gives up on the answer.
const BLOCKING_GRACE: Duration = Duration::from_secs(5);

/// How to reach and authenticate to one Consul cluster.
#[derive(Clone)]
pub struct ClientSettings {
    /// `http://host:port` or `https://host:port` of an agent or server.
    pub address: String,
    /// ACL token sent as `X-Consul-Token`.
    pub token: Option<String>,
    /// `dc` query parameter.
    pub datacenter: Option<String>,
    /// `ns` query parameter (Consul Enterprise).
    pub namespace: Option<String>,
    /// `partition` query parameter (Consul Enterprise).
    pub partition: Option<String>,
    /// TLS settings, used with `https` addresses.
    pub tls: TlsSettings,
    /// Deadline of a non-blocking read; blocking reads get their `wait` plus
    /// Consul's jitter plus a grace period.
    pub timeout: Duration,
    /// Most idle connections kept for reuse by non-blocking reads (blocking
    /// queries never reuse one); set it to the most such reads in flight.
    pub max_idle_connections: usize,
}

impl Default for ClientSettings {
    fn default() -> Self {
        Self {
            address: "http://127.0.0.1:8500".to_owned(),
            token: None,
            datacenter: None,
            namespace: None,
            partition: None,
            tls: TlsSettings::default(),
            timeout: Duration::from_secs(10),
            max_idle_connections: super::ONE_OFF_READS,
        }
    }
}

impl fmt::Debug for ClientSettings {
    /// The token is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSettings")
            .field("address", &self.address)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("datacenter", &self.datacenter)
            .field("namespace", &self.namespace)
            .field("partition", &self.partition)
            .field("tls", &self.tls)
            .field("timeout", &self.timeout)
            .field("max_idle_connections", &self.max_idle_connections)
            .finish()
    }
}

/// TLS towards Consul.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// PEM CA certificate(s) to trust instead of the built-in roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate and its private key.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Name the server certificate must carry, when it differs from the address host.
    pub server_name: Option<String>,
    /// Verify the server certificate.
    pub verify: bool,
}

impl Default for TlsSettings {
    fn default() -> Self {
        Self {
            ca_file: None,
            client_cert: None,
            server_name: None,
            verify: true,
        }
    }
}

/// Makes a query block until the index passes `index`, for at most `wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockOn {
    /// The `X-Consul-Index` of the previous answer (at least 1).
    pub index: u64,
    /// Longest time to wait.
    pub wait: Duration,
}

/// Request counters, for metrics and tests.
#[derive(Debug, Default)]
pub struct ClientStats {
    requests: AtomicU64,
    blocking_started: AtomicU64,
    blocking_in_flight: AtomicU64,
    errors: AtomicU64,
    slot_waits: AtomicU64,
}

impl ClientStats {
    /// Requests sent, blocking or not.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Blocking queries sent.
    pub fn blocking_started(&self) -> u64 {
        self.blocking_started.load(Ordering::Relaxed)
    }

    /// Blocking queries waiting for their answer right now.
    pub fn blocking_in_flight(&self) -> u64 {
        self.blocking_in_flight.load(Ordering::Relaxed)
    }

    /// Requests that failed (transport, timeout, error status, bad answer).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Times a query found no blocking-query slot free in time and read
    /// without blocking instead.
    pub fn slot_waits(&self) -> u64 {
        self.slot_waits.load(Ordering::Relaxed)
    }
}

/// Decrements the in-flight gauge however the request ends (also when dropped).
struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A Consul KV reader. Cheap to share behind an `Arc`. Non-blocking reads use
/// pooled connections; each blocking query has a connection of its own, closed
/// after its answer (see `new`), so connections stay at most the number of
/// requests in flight plus the idle pool.
pub struct ConsulClient {
    /// Non-blocking reads, on pooled connections.
    http: reqwest::Client,
    /// Blocking queries, each on a connection of its own (see `new`).
    blocking: reqwest::Client,
    /// `<address>/v1`, without a trailing slash.
    base: String,
    token: Option<http02::HeaderValue>,
    datacenter: Option<String>,
    namespace: Option<String>,
    partition: Option<String>,
    timeout: Duration,
    stats: ClientStats,
    /// Where failed requests and slot waits are also exported, once set.
    consul_metrics: std::sync::OnceLock<(super::ConsulMetrics, crate::model::SourceName)>,
    /// Where the source's errors and read latency are recorded
    /// (`nudge_source_*`), once set.
    source_metrics: std::sync::OnceLock<(crate::health::SourceMetrics, crate::model::SourceName)>,
}

impl fmt::Debug for ConsulClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsulClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl ConsulClient {
    /// Builds a client; reads the certificate files now.
    pub fn new(settings: &ClientSettings) -> Result<Self, ClientError> {
        let invalid = |reason: &str| ClientError::InvalidAddress {
            address: settings.address.clone(),
            reason: reason.to_owned(),
        };
        let mut url =
            reqwest::Url::parse(&settings.address).map_err(|e| invalid(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("the scheme must be http or https"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("must not have a query or fragment"));
        }
        // The TLS server name is the URL's host; it resolves to the configured
        // host (reqwest cannot set the server name on its own).
        let server_name = match (&settings.tls.server_name, url.scheme()) {
            (Some(name), "https") => {
                let addrs = resolve(&url).map_err(|e| invalid(&e))?;
                url.set_host(Some(name))
                    .map_err(|e| invalid(&format!("tls server name: {e}")))?;
                Some((name.clone(), addrs))
            }
            _ => None,
        };
        let tls = match url.scheme() {
            "https" => Some(TlsMaterial::read(&settings.tls, server_name)?),
            _ => None,
        };
        if tls.is_some() && !settings.tls.verify {
            tracing::warn!(address = %settings.address, "Consul server certificate is not verified");
        }
        let http = http_client(tls.as_ref(), settings.max_idle_connections)?;
        // Blocking queries never reuse a connection: hyper keeps a connection's
        // read buffer as large as the largest answer read on it (up to ~400 KiB),
        // and a blocking query holds its connection for minutes. A new connection
        // waits with a small buffer; it is closed by nudge after the answer (not
        // with `Connection: close`, which Consul's Go server answers by holding
        // the socket 500 ms longer).
        let blocking = http_client(tls.as_ref(), 0)?;
        url.path_segments_mut()
            .map_err(|()| invalid("cannot be a base URL"))?
            .pop_if_empty()
            .push("v1");
        let token = settings
            .token
            .as_deref()
            .map(|t| {
                let mut value =
                    http02::HeaderValue::from_str(t).map_err(|_| ClientError::InvalidToken)?;
                value.set_sensitive(true);
                Ok(value)
            })
            .transpose()?;
        Ok(Self {
            http,
            blocking,
            base: url.as_str().trim_end_matches('/').to_owned(),
            token,
            datacenter: settings.datacenter.clone(),
            namespace: settings.namespace.clone(),
            partition: settings.partition.clone(),
            timeout: settings.timeout,
            stats: ClientStats::default(),
            consul_metrics: std::sync::OnceLock::new(),
            source_metrics: std::sync::OnceLock::new(),
        })
    }

    /// Also records failed requests (as `SourceError` categories: `timeout`,
    /// else `backend`) and the latency of non-blocking reads in `metrics`
    /// under source `name`; the first call wins.
    pub(crate) fn record_into(
        &self,
        metrics: crate::health::SourceMetrics,
        name: crate::model::SourceName,
    ) {
        let _ = self.source_metrics.set((metrics, name));
    }

    /// Also counts failed requests and slot waits in `metrics` under source
    /// `name`; the first call wins.
    pub fn count_into(&self, metrics: super::ConsulMetrics, name: crate::model::SourceName) {
        let _ = self.consul_metrics.set((metrics, name));
    }

    /// A query found every blocking-query slot taken and reads without
    /// blocking instead: counted, since its changes are read up to a second
    /// late and each such read costs the agent a read of the query's keys.
    pub(crate) fn no_blocking_slot(&self) {
        self.stats.slot_waits.fetch_add(1, Ordering::Relaxed);
        if let Some((metrics, name)) = self.consul_metrics.get() {
            metrics.slot_waited(name);
        }
    }

    /// Request counters.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// Reads one key; with `block_on`, waits until it changes (or the wait ends).
    /// A missing key is `Ok` with `value: None`.
    pub async fn get_key(
        &self,
        key: &str,
        block_on: Option<BlockOn>,
    ) -> Result<KeyRead, ClientError> {
        self.get(key, Listing::One, Mode::from(block_on), |a| {
            parse_key_response(key, a.status, a.index.as_deref(), &a.body)
        })
        .await
    }

    /// Reads every key under `prefix` (a plain string prefix, `""` for all keys);
    /// with `block_on`, waits until something under it changes.
    pub async fn get_prefix(
        &self,
        prefix: &str,
        block_on: Option<BlockOn>,
    ) -> Result<PrefixRead, ClientError> {
        self.get(prefix, Listing::Recurse, Mode::from(block_on), |a| {
            parse_prefix_response(a.status, a.index.as_deref(), &a.body)
        })
        .await
    }

    /// The names of the keys under `prefix`, without their values (Consul's
    /// `?keys`); with `block_on`, waits until something under the prefix
    /// changes. Its index is what a recursive read's would be (the highest
    /// `ModifyIndex` under the prefix, or of a deletion there), for an answer
    /// a fraction of the size: an index probe.
    pub async fn list_keys(
        &self,
        prefix: &str,
        block_on: Option<BlockOn>,
    ) -> Result<KeysRead, ClientError> {
        self.get(prefix, Listing::Keys, Mode::from(block_on), |a| {
            parse_keys_response(a.status, a.index.as_deref(), &a.body)
        })
        .await
    }

    /// Reads one key in Consul's `consistent` mode: the leader first confirms
    /// its leadership, and a leader that has not yet applied its log (just
    /// elected, after a restart) refuses with an error instead of answering
    /// from its older state.
    pub async fn get_key_consistent(&self, key: &str) -> Result<KeyRead, ClientError> {
        self.get(key, Listing::One, Mode::Consistent, |a| {
            parse_key_response(key, a.status, a.index.as_deref(), &a.body)
        })
        .await
    }

    /// [`get_prefix`](Self::get_prefix) in Consul's `consistent` mode (see
    /// [`get_key_consistent`](Self::get_key_consistent)).
    pub async fn get_prefix_consistent(&self, prefix: &str) -> Result<PrefixRead, ClientError> {
        self.get(prefix, Listing::Recurse, Mode::Consistent, |a| {
            parse_prefix_response(a.status, a.index.as_deref(), &a.body)
        })
        .await
    }

    /// One GET of `kv/<path>`, its answer decoded by `decode`; a failure to
    /// decode counts as a failed request, as a transport error does.
    async fn get<T>(
        &self,
        path: &str,
        listing: Listing,
        mode: Mode,
        decode: impl FnOnce(KvAnswer) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let block_on = mode.block_on();
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let _in_flight = block_on.map(|_| {
            self.stats.blocking_started.fetch_add(1, Ordering::Relaxed);
            self.stats
                .blocking_in_flight
                .fetch_add(1, Ordering::Relaxed);
            InFlight(&self.stats.blocking_in_flight)
        });
        let started = tokio::time::Instant::now();
        let result = self.send(path, listing, mode).await.and_then(decode);
        let recorder = self.source_metrics.get();
        if let Some((metrics, name)) = recorder
            && block_on.is_none()
        {
            // A blocking query's time is Consul's wait, not a read's latency.
            metrics.observe_took(name.as_str(), started.elapsed());
        }
        if let Err(error) = &result {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
            if let Some((metrics, name)) = self.consul_metrics.get() {
                metrics.query_failed(name);
            }
            if let Some((metrics, name)) = recorder {
                let category = match error {
                    ClientError::Timeout => "timeout",
                    _ => "backend",
                };
                metrics.failed(name.as_str(), category);
            }
        }
        result
    }

    /// The request reading `kv/<path>` as `listing` says, in `mode`.
    fn request(
        &self,
        path: &str,
        listing: Listing,
        mode: Mode,
    ) -> Result<http::Request<Vec<u8>>, ClientError> {
        let decorator = RequestDecorator {
            token: self.token.as_ref(),
            mode,
            partition: self.partition.as_deref(),
        };
        let built = match listing {
            Listing::One | Listing::Recurse => ReadKeyRequest {
                features: None,
                key: path.to_owned(),
                dc: self.datacenter.clone(),
                ns: self.namespace.clone(),
                recurse: (listing == Listing::Recurse).then_some(true),
            }
            .with_middleware(&decorator)
            .request(&self.base),
            Listing::Keys => ReadKeysRequest {
                features: None,
                key: path.to_owned(),
                dc: self.datacenter.clone(),
                keys: true,
                ns: self.namespace.clone(),
                raw: None,
                recurse: None,
                separator: None,
            }
            .with_middleware(&decorator)
            .request(&self.base),
        };
        built
            .and_then(carried_over)
            .map_err(|source| ClientError::Request {
                path: path.to_owned(),
                source,
            })
    }

    async fn send(
        &self,
        path: &str,
        listing: Listing,
        mode: Mode,
    ) -> Result<KvAnswer, ClientError> {
        let block_on = mode.block_on();
        let request = self.request(path, listing, mode)?;
        let mut request = reqwest::Request::try_from(request).map_err(ClientError::Transport)?;
        *request.timeout_mut() = Some(match block_on {
            Some(b) => b.wait + b.wait / 16 + BLOCKING_GRACE,
            None => self.timeout,
        });

        let http = if block_on.is_some() {
            &self.blocking
        } else {
            &self.http
        };
        let response = http.execute(request).await.map_err(transport)?;
        let status = response.status().as_u16();
        let index = response
            .headers()
            .get(INDEX_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.bytes().await.map_err(transport)?;
        Ok(KvAnswer {
            status,
            index,
            body: body.into(),
        })
    }
}

// === answers ===

/// One raw answer of Consul's KV read endpoint, before
/// [`parse_key_response`] or [`parse_prefix_response`] decodes it.
struct KvAnswer {
    status: u16,
    index: Option<String>,
    body: Vec<u8>,
}

/// What a read of `kv/<path>` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    /// The key itself.
    One,
    /// Every key under the path, with its value (`?recurse`).
    Recurse,
    /// The names of the keys under the path, without values (`?keys`).
    Keys,
}

/// How a read is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Consul's default mode, at once.
    Now,
    /// Consul's default mode, as a blocking query.
    Blocking(BlockOn),
    /// Consul's `consistent` mode, at once.
    Consistent,
}

impl From<Option<BlockOn>> for Mode {
    fn from(block_on: Option<BlockOn>) -> Self {
        block_on.map_or(Self::Now, Self::Blocking)
    }
}

impl Mode {
    fn block_on(self) -> Option<BlockOn> {
        match self {
            Self::Blocking(block_on) => Some(block_on),
            Self::Now | Self::Consistent => None,
        }
    }

    /// consulrs' [`Features`] for this mode, if it needs any.
    fn features(self) -> Option<Features> {
        match self {
            Self::Now => None,
            Self::Blocking(block_on) => Some(Features {
                blocking: Some(Blocking {
                    index: block_on.index,
                    wait: Some(format!("{}ms", block_on.wait.as_millis())),
                }),
                ..Features::default()
            }),
            Self::Consistent => Some(Features {
                mode: Some(ConsistencyMode::CONSISTENT),
                ..Features::default()
            }),
        }
    }
}

/// nudge's request middleware: ACL token, blocking parameters and consistency
/// mode (through consulrs' [`Features`]) and the partition. Unlike consulrs' own
/// middleware it leaves the path alone (the base URL already ends in `/v1`) and
/// cannot panic on a token.
struct RequestDecorator<'a> {
    token: Option<&'a http02::HeaderValue>,
    mode: Mode,
    partition: Option<&'a str>,
}

impl MiddleWare for RequestDecorator<'_> {
    fn request<E: Endpoint>(
        &self,
        _: &E,
        req: &mut http02::Request<Vec<u8>>,
    ) -> Result<(), rustify::errors::ClientError> {
        if let Some(token) = self.token {
            req.headers_mut().insert(TOKEN_HEADER, token.clone());
        }
        if let Some(features) = self.mode.features() {
            features.process(req);
        }
        if let Some(partition) = self.partition {
            let mut url = reqwest::Url::parse(&req.uri().to_string())
                .map_err(|source| rustify::errors::ClientError::UrlParseError { source })?;
            url.query_pairs_mut().append_pair("partition", partition);
            *req.uri_mut() = url
                .as_str()
                .parse()
                .map_err(|source| rustify::errors::ClientError::UrlBuildError { source })?;
        }
        Ok(())
    }

    fn response<E: Endpoint>(
        &self,
        _: &E,
        _: &mut http02::Response<Vec<u8>>,
    ) -> Result<(), rustify::errors::ClientError> {
        Ok(())
    }
}

/// rustify builds `http` 0.2 requests and reqwest sends `http` 1 ones: the
/// request is carried over part by part (what reqwest 0.11's own
/// `TryFrom<http::Request>` took from it), the token header staying sensitive.
fn carried_over(
    request: http02::Request<Vec<u8>>,
) -> Result<http::Request<Vec<u8>>, rustify::errors::ClientError> {
    let (parts, body) = request.into_parts();
    let unusable =
        |error: anyhow::Error| rustify::errors::ClientError::GenericError { source: error };
    let mut builder = http::Request::builder()
        .method(parts.method.as_str())
        .uri(parts.uri.to_string());
    for (name, value) in &parts.headers {
        let mut carried =
            http::HeaderValue::from_bytes(value.as_bytes()).map_err(|e| unusable(e.into()))?;
        carried.set_sensitive(value.is_sensitive());
        builder = builder.header(name.as_str(), carried);
    }
    builder.body(body).map_err(|e| unusable(e.into()))
}

/// What an `https` client is built with, read from the files once for both of
/// the client's connection pools.
struct TlsMaterial {
    root: Option<reqwest::Certificate>,
    identity: Option<reqwest::Identity>,
    verify: bool,
    /// The TLS server name and the addresses it resolves to.
    server_name: Option<(String, Vec<SocketAddr>)>,
}

impl TlsMaterial {
    fn read(
        tls: &TlsSettings,
        server_name: Option<(String, Vec<SocketAddr>)>,
    ) -> Result<Self, ClientError> {
        let root = match &tls.ca_file {
            Some(path) => {
                let pem = read(path)?;
                let cert = reqwest::Certificate::from_pem(&pem).map_err(|source| {
                    ClientError::Certificate {
                        path: path.clone(),
                        source,
                    }
                })?;
                Some(cert)
            }
            None => None,
        };
        let identity = match &tls.client_cert {
            Some((cert, key)) => {
                let mut pem = read(cert)?;
                pem.push(b'\n');
                pem.extend(read(key)?);
                let identity = reqwest::Identity::from_pem(&pem).map_err(|source| {
                    ClientError::Certificate {
                        path: cert.clone(),
                        source,
                    }
                })?;
                Some(identity)
            }
            None => None,
        };
        Ok(Self {
            root,
            identity,
            verify: tls.verify,
            server_name,
        })
    }
}

/// A reqwest client (with `tls` for an `https` address), keeping at most
/// `max_idle` idle connections.
fn http_client(tls: Option<&TlsMaterial>, max_idle: usize) -> Result<reqwest::Client, ClientError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .user_agent(concat!("nudge/", env!("CARGO_PKG_VERSION")))
        .pool_max_idle_per_host(max_idle)
        .connect_timeout(Duration::from_secs(5))
        .tcp_keepalive(Duration::from_secs(60));
    if let Some(tls) = tls {
        if let Some(cert) = &tls.root {
            builder = builder
                .tls_built_in_root_certs(false)
                .add_root_certificate(cert.clone());
        }
        if let Some(identity) = &tls.identity {
            builder = builder.identity(identity.clone());
        }
        if !tls.verify {
            builder = builder.danger_accept_invalid_certs(true);
        }
        if let Some((server_name, addrs)) = &tls.server_name {
            builder = builder.resolve_to_addrs(server_name, addrs);
        }
    }
    builder.build().map_err(ClientError::Build)
}

fn transport(error: reqwest::Error) -> ClientError {
    if error.is_timeout() {
        ClientError::Timeout
    } else {
        ClientError::Transport(error)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|source| ClientError::ReadFile {
        path: path.to_owned(),
        source,
    })
}

fn resolve(url: &reqwest::Url) -> Result<Vec<SocketAddr>, String> {
    let host = url.host_str().ok_or("has no host")?;
    let port = url.port_or_known_default().ok_or("has no port")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(settings: ClientSettings) -> ConsulClient {
        ConsulClient::new(&settings).unwrap()
    }

    fn url_of(client: &ConsulClient, path: &str, recurse: bool, mode: Mode) -> String {
        let listing = if recurse {
            Listing::Recurse
        } else {
            Listing::One
        };
        client
            .request(path, listing, mode)
            .unwrap()
            .uri()
            .to_string()
            .trim_end_matches('?')
            .to_owned()
    }

    #[test]
    fn a_keys_read_asks_for_names_only() {
        let c = client(ClientSettings {
            address: "http://consul:8500".to_owned(),
            ..ClientSettings::default()
        });
        let block_on = BlockOn {
            index: 42,
            wait: Duration::from_secs(300),
        };
        let url = c
            .request("app/", Listing::Keys, Mode::Blocking(block_on))
            .unwrap()
            .uri()
            .to_string();
        assert!(url.starts_with("http://consul:8500/v1/kv/app/?"), "{url}");
        for part in ["keys=true", "index=42"] {
            assert!(url.contains(part), "{url} lacks {part}");
        }
        assert!(!url.contains("recurse"), "{url}");
        assert!(!url.contains("separator"), "{url}");
    }

    #[test]
    fn key_paths_are_encoded_once_under_v1() {
        let c = client(ClientSettings {
            address: "http://consul:8500/".to_owned(),
            ..ClientSettings::default()
        });
        assert_eq!(
            url_of(&c, "app/a b%", false, Mode::Now),
            "http://consul:8500/v1/kv/app/a%20b%25"
        );
        assert_eq!(
            url_of(&c, "app/", true, Mode::Now),
            "http://consul:8500/v1/kv/app/?recurse=true"
        );
        assert_eq!(
            url_of(&c, "", true, Mode::Now),
            "http://consul:8500/v1/kv/?recurse=true"
        );
    }

    #[test]
    fn blocking_and_scope_parameters_are_sent() {
        let c = client(ClientSettings {
            address: "http://consul:8500".to_owned(),
            datacenter: Some("eu1".to_owned()),
            namespace: Some("team".to_owned()),
            partition: Some("p1".to_owned()),
            ..ClientSettings::default()
        });
        let url = url_of(
            &c,
            "k",
            false,
            Mode::Blocking(BlockOn {
                index: 42,
                wait: Duration::from_secs(300),
            }),
        );
        for part in [
            "dc=eu1",
            "ns=team",
            "partition=p1",
            "index=42",
            "wait=300000ms",
        ] {
            assert!(url.contains(part), "{url} lacks {part}");
        }
    }

    #[test]
    fn a_consistent_read_asks_for_the_consistent_mode_and_does_not_block() {
        let c = client(ClientSettings {
            address: "http://consul:8500".to_owned(),
            ..ClientSettings::default()
        });
        assert_eq!(
            url_of(&c, "app/k", false, Mode::Consistent),
            "http://consul:8500/v1/kv/app/k?consistent"
        );
        let prefix = url_of(&c, "app/", true, Mode::Consistent);
        assert!(
            prefix.contains("recurse=true") && prefix.contains("consistent"),
            "{prefix}"
        );
        assert!(!prefix.contains("index="), "{prefix}");
    }

    #[test]
    fn token_is_a_sensitive_header() {
        let c = client(ClientSettings {
            token: Some("s3cr3t".to_owned()),
            ..ClientSettings::default()
        });
        // As sent: carried over from rustify's request into reqwest's.
        let req = c.request("k", Listing::One, Mode::Now).unwrap();
        let value = req.headers().get(TOKEN_HEADER).unwrap();
        assert_eq!(value.as_bytes(), b"s3cr3t");
        assert!(value.is_sensitive());
        assert!(
            !format!(
                "{:?}",
                ClientSettings {
                    token: Some("s3cr3t".into()),
                    ..ClientSettings::default()
                }
            )
            .contains("s3cr3t")
        );
    }

    #[test]
    fn unusable_settings_are_errors_not_panics() {
        for address in ["consul:8500", "ftp://consul", "http://consul:8500/?x=1", ""] {
            let err = ConsulClient::new(&ClientSettings {
                address: address.to_owned(),
                ..ClientSettings::default()
            })
            .unwrap_err();
            assert!(
                matches!(err, ClientError::InvalidAddress { .. }),
                "{address}: {err}"
            );
        }
        let err = ConsulClient::new(&ClientSettings {
            token: Some("bad\ntoken".to_owned()),
            ..ClientSettings::default()
        })
        .unwrap_err();
        assert!(matches!(err, ClientError::InvalidToken));
        let err = ConsulClient::new(&ClientSettings {
            address: "https://consul:8501".to_owned(),
            tls: TlsSettings {
                ca_file: Some("/nonexistent/ca.pem".into()),
                ..TlsSettings::default()
            },
            ..ClientSettings::default()
        })
        .unwrap_err();
        assert!(matches!(err, ClientError::ReadFile { .. }));
    }

    #[test]
    fn tls_server_name_becomes_the_url_host() {
        let c = client(ClientSettings {
            address: "https://127.0.0.1:8501".to_owned(),
            tls: TlsSettings {
                server_name: Some("server.dc1.consul".to_owned()),
                ..TlsSettings::default()
            },
            ..ClientSettings::default()
        });
        assert_eq!(c.base, "https://server.dc1.consul:8501/v1");
    }
}
