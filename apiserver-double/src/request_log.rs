//! The request log as a stream of JSON lines, `GET /_double/request-log?after=SEQ`,
//! for a process that measures the double from outside (nudge's benchmark): every
//! request still kept whose `seq` is above `SEQ`, then each new one as it is
//! recorded, until the client hangs up or the double shuts down. A jump in `seq`
//! means requests dropped from the log for its limit. Times are wall-clock
//! microseconds since the Unix epoch, so another process on the machine can set
//! them against its own clock.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Response, header};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::body::ResponseBody;
use crate::recorder::RecordedRequest;
use crate::server::State;

/// Requests per chunk of the stream: a client catching up on a long log reads
/// it in pieces rather than one buffer of all of it.
const CHUNK: usize = 1000;

/// The streaming response; a task follows the log until the client is gone.
pub(crate) fn stream(state: Arc<State>, after: u64) -> Response<ResponseBody> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(follow(state, after, tx));
    let mut r = Response::new(ResponseBody::Stream(rx));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/x-ndjson"),
    );
    r
}

async fn follow(state: Arc<State>, mut cursor: u64, tx: mpsc::Sender<Bytes>) {
    let mut latest = state.recorder.latest();
    let mut shutdown = state.shutdown.clone();
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        // Marked seen before reading, so a request recorded meanwhile wakes
        // the wait below rather than being missed.
        latest.borrow_and_update();
        let requests = state.recorder.after(cursor);
        for chunk in requests.chunks(CHUNK) {
            let mut lines = Vec::with_capacity(chunk.len() * 256);
            for r in chunk {
                // A `Value` always serialises.
                let _ = serde_json::to_writer(&mut lines, &line(r));
                lines.push(b'\n');
                cursor = r.seq;
            }
            if tx.send(Bytes::from(lines)).await.is_err() {
                return;
            }
        }
        tokio::select! {
            changed = latest.changed() => if changed.is_err() { return },
            _ = shutdown.changed() => {}
            () = tx.closed() => return,
        }
    }
}

/// One request as a line of the stream (without its body).
fn line(r: &RecordedRequest) -> Value {
    json!({
        "seq": r.seq,
        "method": r.method,
        "path": r.path,
        "query": r.query,
        "headers": r.headers,
        "status": r.status,
        "receivedAtMicros": micros_since_epoch(r.received_at),
        "serviceMicros": u64::try_from(r.service_time.as_micros()).unwrap_or(u64::MAX),
    })
}

fn micros_since_epoch(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}
