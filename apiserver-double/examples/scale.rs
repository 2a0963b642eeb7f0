//! Scale check of the double: seeds 2,000 namespaces, 100,000 ConfigMaps and
//! Secrets (half each, 1–20 KiB of data) and 20,000 workloads (Deployments,
//! StatefulSets, DaemonSets), through `ApiServerDouble::create` and over
//! HTTP, waits for the imitated kube-controller-manager to finish with them
//! (ReplicaSets, ControllerRevisions, status), then serves a client paged
//! metadata-only lists and a metadata-only streaming watch of all of them.
//! Prints timings and the process's memory (`VmHWM` is the peak RSS).
//!
//! ```text
//! cargo run --release -p apiserver-double --example scale
//! cargo run --release -p apiserver-double --example scale -- --http-every 10 --objects 100000
//! ```

use std::time::{Duration, Instant};

use apiserver_double::{ApiServerDouble, Config};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;

/// Settings from the command line.
struct Args {
    namespaces: usize,
    /// ConfigMaps + Secrets.
    objects: usize,
    workloads: usize,
    /// Every n-th object is created over HTTP (0: none).
    http_every: usize,
    record_bodies: bool,
    history_limit: usize,
    /// Also list everything in full, to measure the stored JSON size.
    full_lists: bool,
}

impl Args {
    fn parse() -> Self {
        let mut a = Args {
            namespaces: 2_000,
            objects: 100_000,
            workloads: 20_000,
            http_every: 10,
            record_bodies: true,
            history_limit: Config::default().history_limit,
            full_lists: false,
        };
        let argv: Vec<String> = std::env::args().skip(1).collect();
        let mut it = argv.iter();
        while let Some(flag) = it.next() {
            let mut num = || it.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            match flag.as_str() {
                "--namespaces" => a.namespaces = num(),
                "--objects" => a.objects = num(),
                "--workloads" => a.workloads = num(),
                "--http-every" => a.http_every = num(),
                "--no-record-bodies" => a.record_bodies = false,
                "--history-limit" => a.history_limit = num(),
                "--full-lists" => a.full_lists = true,
                other => panic!("unknown flag {other}"),
            }
        }
        a
    }
}

/// `VmHWM` and `VmRSS` from `/proc/self/status`, in MiB.
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kib("VmHWM:") / 1024.0, kib("VmRSS:") / 1024.0)
}

/// CPU time of the process so far (user + system, from `/proc/self/stat`,
/// at the usual 100 clock ticks a second): on a shared machine the wall time
/// of a phase says more about the neighbours than about the double.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the parenthesised command name; utime and stime are
    // the 14th and 15th of the whole line.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: f64 = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// When a phase started, on the wall clock and in CPU time.
struct Phase {
    wall: Instant,
    cpu: f64,
}

impl Phase {
    fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu: cpu_seconds(),
        }
    }
}

fn report(what: &str, phase: &Phase) {
    let (hwm, rss) = memory();
    println!(
        "{what:<52} {:>6.1} s  CPU {:>6.1} s  RSS {rss:>5.0} MiB  peak {hwm:>5.0} MiB",
        phase.wall.elapsed().as_secs_f64(),
        cpu_seconds() - phase.cpu,
    );
}

/// A deterministic size in 1..=20 KiB.
fn size_of(i: usize) -> usize {
    let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    1024 + (h as usize % (19 * 1024 + 1))
}

fn filler(i: usize, len: usize) -> String {
    let line = format!("key-{i:06} = value of object {i} for the scale check\n");
    line.repeat(len / line.len() + 1)[..len].to_string()
}

fn namespace(i: usize, namespaces: usize) -> String {
    format!("ns-{:04}", i % namespaces)
}

fn config_map(i: usize, namespaces: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("config-{i:06}"), "namespace": namespace(i, namespaces),
                     "labels": {"app": format!("app-{}", i % 500), "tier": "backend"}},
        "data": {"config.yaml": filler(i, size_of(i))}})
}

fn secret(i: usize, namespaces: usize) -> Value {
    let raw = filler(i + 7, size_of(i + 7) * 3 / 4);
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("secret-{i:06}"), "namespace": namespace(i, namespaces),
                     "labels": {"app": format!("app-{}", i % 500)}},
        "type": "Opaque",
        "data": {"credentials": base64::engine::general_purpose::STANDARD.encode(raw)}})
}

fn workload(i: usize, namespaces: usize) -> Value {
    let (api_version, kind) = match i % 10 {
        0..=3 => ("apps/v1", "Deployment"),
        4..=6 => ("apps/v1", "StatefulSet"),
        _ => ("apps/v1", "DaemonSet"),
    };
    let name = format!("{}-{i:05}", kind.to_ascii_lowercase());
    json!({"apiVersion": api_version, "kind": kind,
    "metadata": {"name": name, "namespace": namespace(i, namespaces),
                 "annotations": {"nudge.dev/auto": "true"}},
    "spec": {
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{
                "name": "app", "image": format!("registry.invalid/app:{}", i % 17),
                "env": [{"name": "MODE", "value": "scale"}],
                "envFrom": [{"configMapRef": {"name": format!("config-{:06}", i % 50_000)}}],
                "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}]
            }],
            "volumes": [{"name": "creds", "secret": {"secretName": format!("secret-{:06}", i % 50_000)}}]}
        }
    }})
}

/// A keep-alive HTTP/1.1 connection to the double.
struct Client {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: String,
    token: String,
}

impl Client {
    async fn connect(api: &ApiServerDouble) -> Self {
        let stream = TcpStream::connect(api.addr()).await.expect("connect");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        Client {
            sender,
            host: api.addr().to_string(),
            token: api.token().to_string(),
        }
    }

    fn request(&self, method: &str, path: &str) -> http::request::Builder {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host)
            .header("authorization", format!("Bearer {}", self.token))
    }

    async fn post(&mut self, path: &str, body: &Value) -> u16 {
        let req = self
            .request("POST", path)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())))
            .unwrap();
        self.sender.ready().await.expect("connection");
        let resp = self.sender.send_request(req).await.expect("send");
        let status = resp.status().as_u16();
        let _ = resp.into_body().collect().await;
        status
    }

    /// GET with an Accept header; the whole body.
    async fn get(&mut self, path: &str, accept: &str) -> (u16, Bytes) {
        let req = self
            .request("GET", path)
            .header("accept", accept)
            .body(Full::new(Bytes::new()))
            .unwrap();
        self.sender.ready().await.expect("connection");
        let resp = self.sender.send_request(req).await.expect("send");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, body)
    }
}

fn collection(obj: &Value) -> String {
    let ns = obj["metadata"]["namespace"].as_str().unwrap();
    match obj["kind"].as_str().unwrap() {
        "ConfigMap" => format!("/api/v1/namespaces/{ns}/configmaps"),
        "Secret" => format!("/api/v1/namespaces/{ns}/secrets"),
        "Deployment" => format!("/apis/apps/v1/namespaces/{ns}/deployments"),
        "StatefulSet" => format!("/apis/apps/v1/namespaces/{ns}/statefulsets"),
        _ => format!("/apis/apps/v1/namespaces/{ns}/daemonsets"),
    }
}

/// Creates the objects, every `http_every`-th over HTTP on 8 connections.
async fn seed(api: &ApiServerDouble, objects: Vec<Value>, http_every: usize) -> (usize, usize) {
    let (mut direct, mut over_http): (Vec<Value>, Vec<Value>) = (Vec::new(), Vec::new());
    for (i, o) in objects.into_iter().enumerate() {
        if http_every > 0 && i % http_every == 0 {
            over_http.push(o);
        } else {
            direct.push(o);
        }
    }
    let counts = (direct.len(), over_http.len());
    let workers = 8;
    let mut chunks: Vec<Vec<Value>> = (0..workers).map(|_| Vec::new()).collect();
    for (i, o) in over_http.into_iter().enumerate() {
        chunks[i % workers].push(o);
    }
    let mut tasks = Vec::new();
    for chunk in chunks {
        let mut client = Client::connect(api).await;
        tasks.push(tokio::spawn(async move {
            for o in chunk {
                let status = client.post(&collection(&o), &o).await;
                assert_eq!(status, 201, "POST {}", collection(&o));
            }
        }));
    }
    for o in direct {
        api.create(o).expect("create");
    }
    for t in tasks {
        t.await.expect("http seeding");
    }
    counts
}

const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const META: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// Lists a collection metadata-only in pages of 500; returns items and bytes.
async fn list_paged(client: &mut Client, path: &str) -> (usize, usize, String) {
    let (mut items, mut bytes, mut cont) = (0, 0, String::new());
    loop {
        let url = if cont.is_empty() {
            format!("{path}?limit=500")
        } else {
            format!("{path}?limit=500&continue={cont}")
        };
        let (status, body) = client.get(&url, META_LIST).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        bytes += body.len();
        let page: Value = serde_json::from_slice(&body).expect("list JSON");
        items += page["items"].as_array().map_or(0, Vec::len);
        match page["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => cont = c.to_string(),
            _ => {
                return (
                    items,
                    bytes,
                    page["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or("")
                        .into(),
                );
            }
        }
    }
}

/// A metadata-only streaming watch (initial events, then the end bookmark).
async fn watch_initial(client: &mut Client, path: &str) -> (usize, usize) {
    let url = format!(
        "{path}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=600"
    );
    let req = client
        .request("GET", &url)
        .header("accept", META)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.sender.send_request(req).await.expect("watch");
    assert_eq!(resp.status().as_u16(), 200);
    let mut body = resp.into_body();
    let (mut added, mut bytes, mut buf) = (0, 0, Vec::new());
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.expect("frame").into_data() else {
            continue;
        };
        bytes += data.len();
        buf.extend_from_slice(&data);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let ev: Value = serde_json::from_slice(&line).expect("watch line");
            match ev["type"].as_str() {
                Some("ADDED") => added += 1,
                Some("BOOKMARK") => return (added, bytes),
                _ => {}
            }
        }
    }
    (added, bytes)
}

/// Memory per `serde_json::Value` parsed from `json`, measured as the RSS
/// growth of holding 5,000 copies (kept in `held`, so that no freed memory
/// is reused by the next measurement).
fn in_memory_size(json: &[u8], stored_form: bool, held: &mut Vec<Vec<Value>>) -> usize {
    const COPIES: usize = 5_000;
    let before = memory().1;
    let copies: Vec<Value> = (0..COPIES)
        .map(|_| {
            let mut v: Value = serde_json::from_slice(json).expect("JSON");
            if stored_form {
                compact_fields(&mut v);
            }
            v
        })
        .collect();
    let after = memory().1;
    held.push(copies);
    ((after - before).max(0.0) * 1024.0 * 1024.0 / COPIES as f64) as usize
}

/// What the store does to `managedFields` (each `fieldsV1` kept as JSON text).
fn compact_fields(obj: &mut Value) {
    if let Some(Value::Array(entries)) = obj.pointer_mut("/metadata/managedFields") {
        for e in entries {
            if let Some(f) = e.get_mut("fieldsV1") {
                *f = Value::String(f.to_string());
            }
        }
    }
}

/// How big stored objects are as JSON, as a plain `serde_json::Value`, and
/// in the store's form (fieldsV1 as text), and what `managedFields` weigh.
async fn object_sizes(client: &mut Client) {
    let mut held = Vec::new();
    for path in [
        "/api/v1/namespaces/ns-0001/configmaps/config-000001",
        "/api/v1/namespaces/ns-0001/secrets/secret-000001",
        "/apis/apps/v1/namespaces/ns-0001/deployments/deployment-00001",
    ] {
        let (_, body) = client.get(path, "application/json").await;
        let obj: Value = serde_json::from_slice(&body).expect("JSON");
        let managed = serde_json::to_vec(&obj["metadata"]["managedFields"]).unwrap();
        println!(
            "{path}: JSON {} B, as Value ~{} B, stored ~{} B (managedFields: JSON {} B, as Value ~{} B)",
            body.len(),
            in_memory_size(&body, false, &mut held),
            in_memory_size(&body, true, &mut held),
            managed.len(),
            in_memory_size(&managed, false, &mut held)
        );
    }
}

/// Waits until nothing has been written for 5 s: the controllers are done
/// with the seeded workloads (a paged list must not outlive the history
/// window while they write, and the syncs that follow their last write, which
/// change nothing, take a few more seconds at this scale).
async fn settle(api: &ApiServerDouble) {
    let mut last = api.resource_version();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = api.resource_version();
        if now != last {
            last = now;
            quiet_since = Instant::now();
        }
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let api = ApiServerDouble::start_with(Config {
        record_bodies: args.record_bodies,
        history_limit: args.history_limit,
        ..Config::default()
    })
    .await
    .expect("start");
    println!(
        "namespaces {}, ConfigMaps+Secrets {}, workloads {}, every {}th over HTTP, record bodies {}, history {}",
        args.namespaces,
        args.objects,
        args.workloads,
        args.http_every,
        args.record_bodies,
        args.history_limit
    );
    report("started", &Phase::start());

    let t = Phase::start();
    for i in 0..args.namespaces {
        api.create(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace(i, args.namespaces)}}))
            .expect("namespace");
    }
    report("namespaces", &t);

    let seeding = Phase::start();
    let half = args.objects / 2;
    let t = Phase::start();
    let objects: Vec<Value> = (0..half)
        .flat_map(|i| [config_map(i, args.namespaces), secret(i, args.namespaces)])
        .collect();
    let (direct, over_http) = seed(&api, objects, args.http_every).await;
    report(
        &format!("ConfigMaps+Secrets ({direct} direct, {over_http} HTTP)"),
        &t,
    );
    let t = Phase::start();
    let workloads: Vec<Value> = (0..args.workloads)
        .map(|i| workload(i, args.namespaces))
        .collect();
    let (direct, over_http) = seed(&api, workloads, args.http_every).await;
    report(
        &format!("workloads ({direct} direct, {over_http} HTTP)"),
        &t,
    );
    report("seeding total", &seeding);
    let t = Phase::start();
    settle(&api).await;
    report("kube-controller-manager done with the workloads", &t);

    let mut client = Client::connect(&api).await;
    for path in [
        "/api/v1/configmaps",
        "/api/v1/secrets",
        "/apis/apps/v1/deployments",
        "/apis/apps/v1/statefulsets",
        "/apis/apps/v1/daemonsets",
        "/apis/apps/v1/replicasets",
        "/apis/apps/v1/controllerrevisions",
    ] {
        let t = Phase::start();
        let (items, bytes, _) = list_paged(&mut client, path).await;
        report(
            &format!("list {path}: {items} items, {} KiB", bytes / 1024),
            &t,
        );
    }
    if args.full_lists {
        let mut total = 0;
        for path in [
            "/api/v1/configmaps",
            "/api/v1/secrets",
            "/apis/apps/v1/deployments",
            "/apis/apps/v1/statefulsets",
            "/apis/apps/v1/daemonsets",
        ] {
            let (mut cont, mut bytes) = (String::new(), 0);
            loop {
                let url = format!("{path}?limit=500&continue={cont}");
                let (_, body) = client.get(&url, "application/json").await;
                bytes += body.len();
                let page: Value = serde_json::from_slice(&body).unwrap();
                match page["metadata"]["continue"].as_str() {
                    Some(c) if !c.is_empty() => cont = c.to_string(),
                    _ => break,
                }
            }
            println!("stored JSON of {path}: {} MiB", bytes / (1024 * 1024));
            total += bytes;
        }
        println!("stored JSON in total: {} MiB", total / (1024 * 1024));
    }
    for path in ["/api/v1/configmaps", "/api/v1/secrets"] {
        let mut watcher = Client::connect(&api).await;
        let t = Phase::start();
        let (added, bytes) = watch_initial(&mut watcher, path).await;
        report(
            &format!("watch {path}: {added} ADDED, {} KiB", bytes / 1024),
            &t,
        );
    }
    let (hwm, rss) = memory();
    println!("peak RSS (VmHWM) {hwm:.0} MiB, RSS now {rss:.0} MiB");
    object_sizes(&mut client).await;
    api.shutdown().await;
    tokio::time::sleep(Duration::from_millis(10)).await;
}
