//! Test support for the Consul source: a real `consul agent` on 127.0.0.1 with free
//! ports (killed on drop), a small KV writer, and a driver for a running source.
//!
//! Include it with `#[path = "support/consul.rs"] mod consul_support;`.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use base64::Engine as _;
use nudge::__private::fingerprint::Algorithm;
use nudge::__private::model::{SourceName, Tracked};
use nudge::__private::sources::consul::{ClientSettings, ConsulSource, WatchSettings};
use nudge::source::{ObserveContext, Source, SourceError};
use nudge::testing::SourceUpdate;
use nudge::testing::{SourceHarness, harness};
use tokio::task::JoinHandle;

/// Sends nudge's and the double's logs to the test's output (shown for a
/// failed test): `RUST_LOG` when set, else nudge's `info` and everyone's
/// warnings. Once per process; a test that set its own subscriber keeps it.
/// (Here rather than in `support/mod.rs` because this file is the one the
/// Consul tests' [`Driver`] and `examples/loadtest/` share.)
pub fn capture_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,nudge=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_test_writer()
        .try_init();
}

/// How long an agent may take to answer with a leader.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`Driver::wait_blocking`] waits for the queries to block again.
const SOON_ENOUGH: Duration = Duration::from_secs(10);

/// Agent-side sockets a peak sample may over-count: `/proc/net/tcp` is not read
/// atomically, so while queries are regrouped a connection being closed and its
/// replacement can both show as held in one sample. Not a budget nudge may use:
/// its semaphores bound what it holds; this only absorbs the sampling race.
pub const SAMPLING_SLACK: u64 = 8;

/// The ports one agent listens on.
#[derive(Debug, Clone, Copy)]
struct Ports {
    http: u16,
    serf_lan: u16,
    server: u16,
}

#[derive(Debug, Clone)]
enum Mode {
    /// `-dev`: in memory.
    Dev {
        extra_hcl: String,
        https: Option<u16>,
    },
    /// A single server keeping its state in `data_dir`.
    Persistent { data_dir: PathBuf },
}

/// A `consul agent` child process on 127.0.0.1, killed on drop.
pub struct ConsulAgent {
    ports: Ports,
    mode: Mode,
    child: Option<Child>,
    /// Config and log files.
    work_dir: PathBuf,
    http: reqwest::Client,
}

static NEXT_AGENT: AtomicU64 = AtomicU64::new(0);

impl ConsulAgent {
    /// Starts `consul agent -dev` and waits until it has a leader.
    pub fn start() -> Result<Self> {
        Self::start_dev_with("")
    }

    /// Starts `consul agent -dev` with extra HCL configuration (e.g. ACLs).
    pub fn start_dev_with(extra_hcl: &str) -> Result<Self> {
        Self::launch(Mode::Dev {
            extra_hcl: extra_hcl.to_owned(),
            https: None,
        })
    }

    /// Starts `consul agent -dev` that also serves HTTPS with certificates made by
    /// `consul tls` in `cert_dir` (see [`make_certificates`]) and requires client
    /// certificates there. Returns the agent and its `https://127.0.0.1:<port>`.
    pub fn start_dev_tls(cert_dir: &Path) -> Result<(Self, String)> {
        let [https] = free_ports()?;
        let file = |name: &str| cert_dir.join(name).display().to_string();
        let hcl = format!(
            "ca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\nverify_incoming_https = true\n",
            file("consul-agent-ca.pem"),
            file("dc1-server-consul-0.pem"),
            file("dc1-server-consul-0-key.pem"),
        );
        let agent = Self::launch(Mode::Dev {
            extra_hcl: hcl,
            https: Some(https),
        })?;
        Ok((agent, format!("https://127.0.0.1:{https}")))
    }

    /// Starts a single non-dev server keeping its state in `data_dir`, so that
    /// [`ConsulAgent::restart`] finds its data again.
    pub fn start_persistent(data_dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(data_dir)?;
        Self::launch(Mode::Persistent {
            data_dir: data_dir.to_owned(),
        })
    }

    /// Starts an agent on free ports. Tests run in parallel processes, so a
    /// port found free can be taken by another agent before this one binds
    /// it: an agent that exits while starting is started again on other ports.
    fn launch(mode: Mode) -> Result<Self> {
        const ATTEMPTS: usize = 3;
        let n = NEXT_AGENT.fetch_add(1, Ordering::Relaxed);
        let work_dir =
            std::env::temp_dir().join(format!("nudge-consul-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&work_dir)?;
        let mut agent = Self {
            ports: Ports {
                http: 0,
                serf_lan: 0,
                server: 0,
            },
            mode,
            child: None,
            work_dir,
            http: reqwest::Client::new(),
        };
        let mut attempt = 1;
        loop {
            let [http, serf_lan, server] = free_ports()?;
            agent.ports = Ports {
                http,
                serf_lan,
                server,
            };
            match agent.spawn(http) {
                Ok(()) => return Ok(agent),
                Err(error) if attempt < ATTEMPTS && agent.exited() => {
                    eprintln!(
                        "consul agent did not start (attempt {attempt}): {error:#}; new ports"
                    );
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Whether the agent process has exited (it is not running).
    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|child| child.try_wait().is_ok_and(|status| status.is_some()))
    }

    /// `http://127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.http)
    }

    /// The HTTP port.
    pub fn http_port(&self) -> u16 {
        self.ports.http
    }

    /// The agent's process id, while it runs (the benchmark reads its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the agent (SIGKILL) and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the agent again on the same ports (and data directory).
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        self.spawn(self.ports.http)
    }

    /// Starts the (persistent) agent on its data directory but on another HTTP port,
    /// returning that port's address: data can change while the usual address stays
    /// unreachable. Call [`ConsulAgent::stop`] then [`ConsulAgent::restart`] after.
    pub fn start_on_side_port(&mut self) -> Result<String> {
        self.stop();
        let [side] = free_ports()?;
        self.spawn(side)?;
        Ok(format!("http://127.0.0.1:{side}"))
    }

    fn spawn(&mut self, http_port: u16) -> Result<()> {
        let Ports {
            serf_lan, server, ..
        } = self.ports;
        let https = match &self.mode {
            Mode::Dev {
                https: Some(port), ..
            } => format!(", https = {port}"),
            _ => String::new(),
        };
        let ports = format!(
            "ports {{ http = {http_port}, dns = -1, serf_lan = {serf_lan}, serf_wan = -1, server = {server}, grpc = -1{https} }}\n\
             disable_update_check = true\n"
        );
        let mut command = Command::new("consul");
        command.args([
            "agent",
            "-bind",
            "127.0.0.1",
            "-client",
            "127.0.0.1",
            "-log-level",
            "warn",
        ]);
        let config = match &self.mode {
            Mode::Dev { extra_hcl, .. } => {
                command.arg("-dev");
                format!("{ports}{extra_hcl}\n")
            }
            Mode::Persistent { data_dir } => {
                command
                    .args(["-server", "-bootstrap-expect=1", "-node", "nudge-test"])
                    .arg(format!("-data-dir={}", data_dir.display()));
                format!("{ports}performance {{ raft_multiplier = 1 }}\n")
            }
        };
        let config_file = self.work_dir.join("agent.hcl");
        std::fs::write(&config_file, config)?;
        command.arg(format!("-config-file={}", config_file.display()));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.work_dir.join("agent.log"))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot run `consul` (is it on PATH?)")?;
        self.child = Some(child);
        wait_for_leader(http_port, self.child.as_mut().expect("just spawned"))
            .with_context(|| format!("agent log: {}", self.work_dir.join("agent.log").display()))
    }

    /// Takes every connection the agent still accepts from 127.0.0.1 (its
    /// `limits.http_max_conns_per_client`) with an idle connection, until one is
    /// refused (reset at once). Dropping a returned connection frees its slot.
    pub async fn take_free_connections(&self) -> Result<Vec<tokio::net::TcpStream>> {
        use tokio::io::AsyncReadExt as _;
        let mut held = Vec::new();
        for _ in 0..1000 {
            let mut stream =
                tokio::net::TcpStream::connect(("127.0.0.1", self.http_port())).await?;
            let mut buf = [0u8; 1];
            match tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf)).await {
                // Open and quiet: the agent counts it.
                Err(_) => held.push(stream),
                // Closed or reset: refused.
                Ok(_) => return Ok(held),
            }
        }
        bail!("the agent accepted 1000 connections: is its connection limit set?")
    }

    /// Writes a key through this agent.
    pub async fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        put_at(&self.http, &self.addr(), key, value).await
    }

    /// Writes a key's value again with other flags: a new ModifyIndex, the same
    /// content. (Consul ignores a write of the same value and flags: no new
    /// index, no answer to a blocking query.)
    pub async fn touch(&self, key: &str, value: &[u8], flags: u64) -> Result<()> {
        let mut url = kv_url(&self.addr(), key)?;
        url.query_pairs_mut()
            .append_pair("flags", &flags.to_string());
        let response = self.http.put(url).body(value.to_vec()).send().await?;
        if !response.status().is_success() {
            bail!("PUT {key}?flags={flags}: {}", response.status());
        }
        Ok(())
    }

    /// Deletes a key through this agent.
    pub async fn delete(&self, key: &str) -> Result<()> {
        let response = self.http.delete(kv_url(&self.addr(), key)?).send().await?;
        if !response.status().is_success() {
            bail!("DELETE {key}: {}", response.status());
        }
        Ok(())
    }

    /// Writes many keys with the transaction API (64 per request).
    pub async fn put_many(&self, entries: &[(String, Vec<u8>)]) -> Result<()> {
        let b64 = base64::engine::general_purpose::STANDARD;
        for chunk in entries.chunks(64) {
            let ops: Vec<serde_json::Value> = chunk
                .iter()
                .map(|(key, value)| {
                    serde_json::json!({"KV": {"Verb": "set", "Key": key, "Value": b64.encode(value)}})
                })
                .collect();
            let response = self
                .http
                .put(format!("{}/v1/txn", self.addr()))
                .body(serde_json::to_vec(&ops)?)
                .send()
                .await?;
            if !response.status().is_success() {
                bail!("txn: {}", response.status());
            }
        }
        Ok(())
    }
}

impl Drop for ConsulAgent {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.work_dir);
    }
}

/// Makes a CA, a server certificate (`server.dc1.consul`, `localhost`, `127.0.0.1`)
/// and a client certificate in `dir` with `consul tls`.
pub fn make_certificates(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for args in [
        &["tls", "ca", "create"][..],
        &["tls", "cert", "create", "-server", "-dc", "dc1"],
        &["tls", "cert", "create", "-client", "-dc", "dc1"],
    ] {
        let status = Command::new("consul")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("consul {}: {status}", args.join(" "));
        }
    }
    Ok(())
}

/// Writes a key through the agent at `addr`.
pub async fn put_at(http: &reqwest::Client, addr: &str, key: &str, value: &[u8]) -> Result<()> {
    let response = http
        .put(kv_url(addr, key)?)
        .body(value.to_vec())
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("PUT {key}: {}", response.status());
    }
    Ok(())
}

fn kv_url(addr: &str, key: &str) -> Result<reqwest::Url> {
    let mut url = reqwest::Url::parse(addr)?;
    url.path_segments_mut()
        .map_err(|()| anyhow::anyhow!("bad address"))?
        .extend(["v1", "kv"])
        .extend(key.split('/'));
    Ok(url)
}

/// `count` ports free for TCP and UDP on 127.0.0.1 right now.
fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let mut held = Vec::new();
    let mut ports = [0; N];
    let mut i = 0;
    while i < N {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        // Serf also needs the UDP port.
        let Ok(udp) = UdpSocket::bind(("127.0.0.1", port)) else {
            continue;
        };
        held.push((listener, udp));
        ports[i] = port;
        i += 1;
    }
    Ok(ports)
}

/// Waits until `GET /v1/status/leader` names a leader.
fn wait_for_leader(http_port: u16, child: &mut Child) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            bail!("consul agent exited: {status}");
        }
        if let Ok(body) = http_get(http_port, "/v1/status/leader") {
            let leader = body.trim().trim_matches('"');
            if !leader.is_empty() {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("consul agent on port {http_port} has no leader after {READY_TIMEOUT:?}")
}

/// A minimal blocking HTTP GET (no client runtime needed during start-up).
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    if !response.starts_with("HTTP/1.0 200") && !response.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other("not 200"));
    }
    Ok(response.split("\r\n\r\n").nth(1).unwrap_or("").to_owned())
}

/// TCP connections to `port` on this host: `(client, agent)`, where `client`
/// counts established client-side sockets and `agent` the agent's sockets it still
/// counts against `limits.http_max_conns_per_client` (established or half-closed by
/// the client), from `/proc/net/tcp{,6}`.
pub fn connections_to(port: u16) -> (u64, u64) {
    const ESTABLISHED: &str = "01";
    const CLOSE_WAIT: &str = "08";
    let (mut client, mut agent) = (0, 0);
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(table) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in table.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(remote), Some(state)) =
                (fields.get(1), fields.get(2), fields.get(3))
            else {
                continue;
            };
            let port_of = |addr: &str| {
                addr.rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
            };
            if *state == ESTABLISHED && port_of(remote) == Some(port) {
                client += 1;
            }
            if (*state == ESTABLISHED || *state == CLOSE_WAIT) && port_of(local) == Some(port) {
                agent += 1;
            }
        }
    }
    (client, agent)
}

/// Samples [`connections_to`] every 10 ms on a thread and keeps the peaks.
pub struct ConnectionSampler {
    port: u16,
    count: fn(u16) -> (u64, u64),
    client_peak: Arc<AtomicU64>,
    agent_peak: Arc<AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ConnectionSampler {
    /// Starts sampling connections to `port`.
    pub fn start(port: u16) -> Self {
        Self::start_counting(port, connections_to)
    }

    /// Starts sampling `(client, agent)` counts that `count` reads for `port`.
    pub fn start_counting(port: u16, count: fn(u16) -> (u64, u64)) -> Self {
        let client_peak = Arc::new(AtomicU64::new(0));
        let agent_peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let (client_peak, agent_peak, stop) =
                (client_peak.clone(), agent_peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (client, agent) = count(port);
                    client_peak.fetch_max(client, Ordering::Relaxed);
                    agent_peak.fetch_max(agent, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        Self {
            port,
            count,
            client_peak,
            agent_peak,
            stop,
            thread: Some(thread),
        }
    }

    /// Counts now, on the caller's thread, until the client has held at least
    /// `connections` at once, or `timeout` passes. On a loaded machine the
    /// sampling thread may sleep through a short-lived peak; a caller that
    /// knows the connections are open now waits for the count to show them.
    pub async fn wait_for_client(&self, connections: u64, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (client, agent) = (self.count)(self.port);
            self.client_peak.fetch_max(client, Ordering::Relaxed);
            self.agent_peak.fetch_max(agent, Ordering::Relaxed);
            if self.client_peak() >= connections {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "the client held at most {} connections to port {} within {timeout:?}, expected {connections}",
                    self.client_peak(),
                    self.port
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The most established client connections seen so far.
    pub fn client_peak(&self) -> u64 {
        self.client_peak.load(Ordering::Relaxed)
    }

    /// The most connections the agent held open (established or half-closed).
    pub fn agent_peak(&self) -> u64 {
        self.agent_peak.load(Ordering::Relaxed)
    }
}

impl Drop for ConnectionSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Watch settings that make tests fast: short waits and retries.
pub fn fast_watch() -> WatchSettings {
    WatchSettings {
        wait: Duration::from_secs(30),
        max_concurrent_queries: 64,
        min_query_interval: Duration::from_millis(50),
        query_burst: 5,
        max_retry_interval: Duration::from_secs(2),
    }
}

/// A Consul source named `consul` on `addr`.
pub fn source(addr: &str, watch: WatchSettings) -> Arc<ConsulSource> {
    source_with(
        ClientSettings {
            address: addr.to_owned(),
            ..ClientSettings::default()
        },
        watch,
    )
}

/// A Consul source named `consul` with explicit client settings.
pub fn source_with(client: ClientSettings, watch: WatchSettings) -> Arc<ConsulSource> {
    Arc::new(
        ConsulSource::new(SourceName::new("consul").unwrap(), &client, watch)
            .expect("valid settings"),
    )
}

/// An observe context with a fresh installation key.
pub fn cx() -> ObserveContext {
    nudge::testing::observe_context()
}

/// A tracked Consul key.
pub fn tracked(key: &str, algorithm: Algorithm) -> Tracked {
    nudge::testing::tracked(SourceName::new("consul").unwrap(), None, key, algorithm)
}

/// A running source driven through nudge's test harness.
pub struct Driver {
    /// The source.
    pub source: Arc<ConsulSource>,
    engine: SourceHarness,
    task: Option<JoinHandle<Result<(), SourceError>>>,
}

impl Driver {
    /// Runs `source` with an updates channel of `capacity`.
    pub fn run(source: Arc<ConsulSource>, capacity: usize) -> Self {
        capture_logs();
        let (ctx, engine) = harness(
            source.name().clone(),
            nudge::testing::observe_context(),
            capacity,
        );
        let task = tokio::spawn(source.clone().run(ctx));
        Self {
            source,
            engine,
            task: Some(task),
        }
    }

    /// Sends `Track`.
    pub fn track(&self, tracked: Tracked) {
        self.engine.track(tracked);
    }

    /// Sends `Untrack`.
    pub fn untrack(&self, tracked: Tracked) {
        self.engine.untrack(tracked);
    }

    /// The next update, or an error after `within`.
    /// The next update, without its provenance (compared with
    /// `SourceUpdate::new`; [`next_with_provenance`](Self::next_with_provenance)
    /// keeps it).
    pub async fn next(&mut self, within: Duration) -> Result<SourceUpdate> {
        let update = self.next_with_provenance(within).await?;
        Ok(SourceUpdate::new(update.tracked, update.observation))
    }

    /// The next update as the source sent it.
    pub async fn next_with_provenance(&mut self, within: Duration) -> Result<SourceUpdate> {
        match tokio::time::timeout(within, self.engine.next_update()).await {
            Ok(Some(update)) => Ok(update),
            Ok(None) => bail!("the source closed its updates channel"),
            Err(_) => bail!("no update within {within:?}"),
        }
    }

    /// The updates that have arrived and were not taken yet, without waiting.
    pub fn received(&mut self) -> Vec<SourceUpdate> {
        std::iter::from_fn(|| self.engine.try_next_update()).collect()
    }

    /// Updates until (and with) the first that `last` accepts, or an error when
    /// none comes within `within`.
    pub async fn collect_until(
        &mut self,
        within: Duration,
        last: impl Fn(&SourceUpdate) -> bool,
    ) -> Result<Vec<SourceUpdate>> {
        let mut seen = Vec::new();
        loop {
            let update = self.next(within).await?;
            let done = last(&update);
            seen.push(update);
            if done {
                return Ok(seen);
            }
        }
    }

    /// Waits until the source's blocking queries have all answered what came
    /// before and block again (`in_flight` of them): the answers are on their
    /// way to the updates, in order with every later answer of the same query.
    pub async fn wait_blocking(&self, in_flight: u64) -> Result<()> {
        self.wait_until(SOON_ENOUGH, "the queries to block again", |s| {
            s.blocking_queries_in_flight() == in_flight
        })
        .await
    }

    /// Every update arriving within `window`: for a test of pacing, where the
    /// window is the duration under test.
    pub async fn collect_for(&mut self, window: Duration) -> Vec<SourceUpdate> {
        let deadline = tokio::time::Instant::now() + window;
        let mut seen = Vec::new();
        while let Ok(Some(update)) =
            tokio::time::timeout_at(deadline, self.engine.next_update()).await
        {
            seen.push(SourceUpdate::new(update.tracked, update.observation));
        }
        seen
    }

    /// Waits until `condition` holds on the source, checking every 20 ms.
    pub async fn wait_until(
        &self,
        within: Duration,
        what: &str,
        condition: impl Fn(&ConsulSource) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + within;
        while !condition(&self.source) {
            if Instant::now() > deadline {
                bail!("{what}: not within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Cancels the source and checks that `run` returns `Ok` promptly.
    pub async fn shutdown(mut self) -> Result<()> {
        self.engine.shutdown();
        let task = self.task.take().expect("running");
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .context("run did not return within 2s of shutdown")??
            .context("run returned an error")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.engine.shutdown();
    }
}
