//! The log of requests the double received, for test assertions and for a
//! benchmark reading it from another process (`GET /_double/request-log`).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;

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
    /// How long the double took to answer: from the request's arrival to its
    /// response head (for a watch, to the start of its stream). Sending the
    /// body is not included.
    pub service_time: Duration,
    /// The request's place in the log: 1 for the first one recorded, never
    /// reused (also not after [`clear`](crate::ApiServerDouble::clear_requests)).
    pub seq: u64,
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
    /// The `seq` of the latest request recorded (0: none yet).
    latest: watch::Sender<u64>,
}

impl Recorder {
    /// Keeps at most `limit` requests (oldest dropped first).
    pub fn new(limit: usize, bodies: bool) -> Self {
        Self {
            entries: Mutex::new(VecDeque::new()),
            limit,
            bodies,
            latest: watch::Sender::new(0),
        }
    }

    /// Whether bodies are kept.
    pub fn keeps_bodies(&self) -> bool {
        self.bodies
    }

    /// Adds a request, giving it the next `seq`.
    pub fn push(&self, mut r: RecordedRequest) {
        if self.limit == 0 {
            return;
        }
        let mut e = self.entries.lock();
        r.seq = *self.latest.borrow() + 1;
        let seq = r.seq;
        e.push_back(r);
        while e.len() > self.limit {
            e.pop_front();
        }
        // Under the lock, so that `seq`s appear in the log in order.
        self.latest.send_replace(seq);
    }

    /// The requests recorded after `seq` that are still kept, oldest first.
    pub fn after(&self, seq: u64) -> Vec<RecordedRequest> {
        let e = self.entries.lock();
        // `seq`s are consecutive in the deque, so the first one wanted is found
        // by arithmetic rather than a scan of the whole log.
        let first = e.front().map_or(seq + 1, |r| r.seq);
        let skip = usize::try_from((seq + 1).saturating_sub(first)).unwrap_or(usize::MAX);
        e.iter().skip(skip).cloned().collect()
    }

    /// The `seq` of the latest request recorded, changing as requests arrive.
    pub fn latest(&self) -> watch::Receiver<u64> {
        self.latest.subscribe()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str) -> RecordedRequest {
        RecordedRequest {
            method: "GET".into(),
            path: path.into(),
            query: None,
            headers: BTreeMap::new(),
            body: Bytes::new(),
            status: 200,
            received_at: SystemTime::now(),
            service_time: Duration::ZERO,
            seq: 0,
        }
    }

    fn paths(requests: &[RecordedRequest]) -> Vec<(u64, &str)> {
        requests.iter().map(|r| (r.seq, r.path.as_str())).collect()
    }

    #[test]
    fn after_returns_what_follows_a_seq_among_what_is_kept() {
        let log = Recorder::new(3, false);
        for path in ["/a", "/b", "/c", "/d"] {
            log.push(request(path));
        }
        assert_eq!(*log.latest().borrow(), 4);
        // `/a` (seq 1) was dropped for the limit.
        assert_eq!(paths(&log.after(0)), [(2, "/b"), (3, "/c"), (4, "/d")]);
        assert_eq!(paths(&log.after(3)), [(4, "/d")]);
        assert!(log.after(4).is_empty());
        assert!(log.after(99).is_empty());
    }

    #[test]
    fn seqs_go_on_after_clear() {
        let log = Recorder::new(10, false);
        log.push(request("/a"));
        log.clear();
        log.push(request("/b"));
        assert_eq!(paths(&log.after(0)), [(2, "/b")]);
        assert_eq!(paths(&log.after(1)), [(2, "/b")]);
    }
}
