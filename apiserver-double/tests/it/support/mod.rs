//! A minimal HTTP client for talking to the double in tests.
#![allow(dead_code)]

pub mod crds;

use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// A response with its whole body.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// The body as JSON (panics with the body text when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// A watch body as its JSON lines.
    pub fn lines(&self) -> Vec<Value> {
        String::from_utf8_lossy(&self.body)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad watch line ({e}): {l}"))
            })
            .collect()
    }
}

/// Sends requests to the double with its bearer token.
#[derive(Clone)]
pub struct Http {
    pub addr: std::net::SocketAddr,
    pub token: String,
}

impl Http {
    pub fn new(api: &apiserver_double::ApiServerDouble) -> Self {
        Self {
            addr: api.addr(),
            token: api.token().to_string(),
        }
    }

    /// Sends one request on a fresh connection and reads the whole response.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Resp {
        let stream = TcpStream::connect(self.addr).await.expect("connect");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).expect("method"))
            .uri(path)
            .header("host", self.addr.to_string())
            .header("authorization", format!("Bearer {}", self.token));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .expect("request");
        let resp = sender.send_request(req).await.expect("send");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        Resp {
            status,
            headers,
            body,
        }
    }

    /// Opens the watch `path` (which should ask for a `timeoutSeconds` longer
    /// than `within`) and reads its JSON lines until `done` accepts those that
    /// have arrived; then closes it and returns them. Panics with what arrived
    /// when the stream ends first or `within` passes: a watch read ends on what
    /// it waits for, never after a fixed time.
    pub async fn watch_until(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        within: std::time::Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let stream = TcpStream::connect(self.addr).await.expect("connect");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header("host", self.addr.to_string())
            .header("authorization", format!("Bearer {}", self.token));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(Bytes::new())).expect("request");
        let mut body = sender.send_request(req).await.expect("send").into_body();
        let mut lines: Vec<Value> = Vec::new();
        let mut pending = Vec::new();
        let read = tokio::time::timeout(within, async {
            while !done(&lines) {
                let Some(frame) = body.frame().await else {
                    return false;
                };
                let Ok(data) = frame.expect("a body frame").into_data() else {
                    continue;
                };
                pending.extend_from_slice(&data);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let line = String::from_utf8_lossy(&line);
                    if !line.trim().is_empty() {
                        let value = serde_json::from_str(&line)
                            .unwrap_or_else(|e| panic!("bad watch line ({e}): {line}"));
                        lines.push(value);
                    }
                }
            }
            true
        })
        .await;
        conn.abort();
        match read {
            Ok(true) => lines,
            Ok(false) => panic!("the watch {path} ended with only {lines:?}"),
            Err(_) => panic!(
                "the watch {path} had only {} lines after {within:?}: {lines:?}",
                lines.len()
            ),
        }
    }

    /// The events the watch `path` (from a past resourceVersion) replays before
    /// the ADDED event of object `last`, made after the events in question: a
    /// replay is in resourceVersion order, so nothing of theirs comes after it.
    pub async fn replay_until_added(&self, path: &str, last: &str) -> Vec<Value> {
        let is_last = |l: &Value| l["type"] == "ADDED" && l["object"]["metadata"]["name"] == last;
        let mut lines = self
            .watch_until(
                &format!("{path}&timeoutSeconds=60"),
                &[("accept", "application/json")],
                std::time::Duration::from_secs(30),
                |lines| lines.iter().any(is_last),
            )
            .await;
        let at = lines.iter().position(is_last).expect("the last event");
        lines.truncate(at);
        lines
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send("GET", path, &[("accept", "application/json")], None)
            .await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.send(
            "POST",
            path,
            &[("content-type", "application/json")],
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Resp {
        self.send(
            "PUT",
            path,
            &[("content-type", "application/json")],
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    pub async fn patch(&self, path: &str, content_type: &str, body: &str) -> Resp {
        self.send(
            "PATCH",
            path,
            &[("content-type", content_type)],
            Some(body.as_bytes().to_vec()),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.send("DELETE", path, &[], None).await
    }
}

/// Polls `check` every 10 ms until it returns `Some`, failing the test
/// with `what` after `timeout` (the controllers act asynchronously).
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
