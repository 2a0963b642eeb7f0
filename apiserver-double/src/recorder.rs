//! The log of requests the double received, for test assertions.

use std::collections::{BTreeMap, VecDeque};
use std::time::SystemTime;

use bytes::Bytes;
use parking_lot::Mutex;

/// One request as the double received it, with the status it answered.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// HTTP method, e.g. `PATCH`.
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// Raw query string, if any.
    pub query: Option<String>,
    /// Request headers (lower-case names), without `authorization`.
    pub headers: BTreeMap<String, String>,
    /// Request body (empty when body recording is off).
    pub body: Bytes,
    /// Status code of the response (for watches: of the response head).
    pub status: u16,
    /// When the request arrived.
    pub received_at: SystemTime,
}

impl RecordedRequest {
    /// The `Content-Type` header.
    pub fn content_type(&self) -> Option<&str> {
        self.headers.get("content-type").map(String::as_str)
    }

    /// The `Accept` header.
    pub fn accept(&self) -> Option<&str> {
        self.headers.get("accept").map(String::as_str)
    }

    /// The body parsed as JSON, if it is JSON.
    pub fn body_json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The first value of a query parameter.
    pub fn query_param(&self, name: &str) -> Option<String> {
        let q = self.query.as_deref()?;
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// Whether this was a watch request.
    pub fn is_watch(&self) -> bool {
        matches!(self.query_param("watch").as_deref(), Some("1" | "true"))
    }
}

/// A bounded log of requests.
#[derive(Debug)]
pub(crate) struct Recorder {
    entries: Mutex<VecDeque<RecordedRequest>>,
    limit: usize,
    bodies: bool,
}

impl Recorder {
    /// Keeps at most `limit` requests (oldest dropped first).
    pub fn new(limit: usize, bodies: bool) -> Self {
        Self {
            entries: Mutex::new(VecDeque::new()),
            limit,
            bodies,
        }
    }

    /// Whether bodies are kept.
    pub fn keeps_bodies(&self) -> bool {
        self.bodies
    }

    /// Adds a request.
    pub fn push(&self, r: RecordedRequest) {
        if self.limit == 0 {
            return;
        }
        let mut e = self.entries.lock();
        e.push_back(r);
        while e.len() > self.limit {
            e.pop_front();
        }
    }

    /// A copy of the log.
    pub fn all(&self) -> Vec<RecordedRequest> {
        self.entries.lock().iter().cloned().collect()
    }

    /// Empties the log.
    pub fn clear(&self) {
        self.entries.lock().clear();
    }
}
