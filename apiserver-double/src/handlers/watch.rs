//! WATCH: a stream of JSON lines (`{"type":…,"object":…}`, the type first as
//! kube-apiserver writes it: a client's reader can then read the object
//! without buffering it first), with replay
//! from a resourceVersion, initial events, bookmarks, selectors (an object
//! leaving the selector is DELETED for the watcher), timeouts, and 410
//! ERROR events for resourceVersions older than the history window.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, header};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::prefix;
use crate::body::ResponseBody;
use crate::meta;
use crate::output::{self, Shape, Target};
use crate::request::Ctx;
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::server::State;
use crate::status::{ApiError, ApiResult, Cause};
use crate::store::{Event, EventKind, ReadError};

const EXPIRED_WATCH: &str = "The resourceVersion for the provided watch is too old.";

/// Everything a watch stream needs to filter and render events.
struct Watcher {
    rt: Arc<ResourceType>,
    prefix: String,
    labels: LabelSelector,
    fields: FieldSelector,
    shape: Shape,
    bookmarks: bool,
}

impl Watcher {
    fn rt(&self) -> &ResourceType {
        &self.rt
    }

    fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    fn line(&self, kind: &str, obj: &Value) -> Bytes {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"object\":");
        out.extend_from_slice(&output::object_bytes(&self.rt, obj, self.shape));
        out.extend_from_slice(b"}\n");
        Bytes::from(out)
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({"resourceVersion": rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = match self.shape {
            Shape::Full => {
                json!({"apiVersion": self.rt().api_version(), "kind": self.rt().kind, "metadata": metadata})
            }
            Shape::Metadata => {
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": metadata})
            }
        };
        let mut out = Vec::with_capacity(160);
        out.extend_from_slice(b"{\"type\":\"BOOKMARK\",\"object\":");
        out.extend_from_slice(&serde_json::to_vec(&obj).unwrap_or_default());
        out.extend_from_slice(b"}\n");
        Bytes::from(out)
    }

    fn error_line(err: &ApiError) -> Bytes {
        let mut out = Vec::with_capacity(200);
        out.extend_from_slice(b"{\"type\":\"ERROR\",\"object\":");
        out.extend_from_slice(&serde_json::to_vec(&err.to_status()).unwrap_or_default());
        out.extend_from_slice(b"}\n");
        Bytes::from(out)
    }

    /// The line this watcher sees for a store event, if any.
    fn render(&self, ev: &Event) -> Option<Bytes> {
        if ev.resource != self.rt.storage || !ev.key.starts_with(&self.prefix) {
            return None;
        }
        let prev_passes = ev.prev.as_deref().is_some_and(|p| self.matches(p));
        match ev.kind {
            EventKind::Added => self
                .matches(&ev.object)
                .then(|| self.line("ADDED", &ev.object)),
            EventKind::Deleted => prev_passes.then(|| self.line("DELETED", &ev.object)),
            EventKind::Modified => match (prev_passes, self.matches(&ev.object)) {
                (true, true) => Some(self.line("MODIFIED", &ev.object)),
                (false, true) => Some(self.line("ADDED", &ev.object)),
                (true, false) => {
                    let mut last = ev.prev.as_deref().cloned().unwrap_or(Value::Null);
                    meta::set_meta(&mut last, "resourceVersion", ev.rv.to_string());
                    Some(self.line("DELETED", &last))
                }
                (false, false) => None,
            },
        }
    }
}

fn options_error(field: &str, reason: &'static str, message: &str) -> ApiError {
    ApiError::invalid_options(
        "ListOptions",
        vec![Cause {
            reason,
            message: message.into(),
            field: field.into(),
        }],
    )
}

/// How the stream starts.
enum Start {
    /// ADDED for the current objects, optionally followed by the
    /// initial-events-end bookmark.
    Initial { end_bookmark: bool },
    /// Replay of the events after a resourceVersion.
    From(u64),
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response<ResponseBody> {
    let mut r = Response::new(ResponseBody::Stream(rx));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Starts a watch.
pub(super) fn serve(
    state: &Arc<State>,
    rt: &Arc<ResourceType>,
    namespace: Option<&str>,
    ctx: &Ctx,
) -> ApiResult<Response<ResponseBody>> {
    let shape = output::negotiate(ctx.header("accept"), Target::Watch)?;
    let labels = LabelSelector::parse(ctx.query.get("labelSelector").unwrap_or(""))?;
    let fields = FieldSelector::parse(ctx.query.get("fieldSelector").unwrap_or(""), rt)?;
    let bookmarks = ctx.query.flag("allowWatchBookmarks")?.unwrap_or(false);
    let send_initial = ctx.query.flag("sendInitialEvents")?;
    let rvm = ctx
        .query
        .get("resourceVersionMatch")
        .filter(|m| !m.is_empty());
    let rv = ctx.query.get("resourceVersion").unwrap_or("");
    let timeout = ctx
        .query
        .int("timeoutSeconds")?
        .filter(|t| *t > 0)
        .map(|t| Duration::from_secs(t as u64))
        .unwrap_or(state.config.default_watch_timeout);

    match (send_initial, rvm) {
        (Some(_), Some("NotOlderThan")) => {}
        (Some(_), None) => {
            return Err(options_error(
                "resourceVersionMatch",
                "FieldValueForbidden",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        (_, Some(m)) if m != "NotOlderThan" => {
            return Err(options_error(
                "resourceVersionMatch",
                "FieldValueNotSupported",
                &format!("Unsupported value: \"{m}\": supported values: \"NotOlderThan\""),
            ));
        }
        (None, Some(_)) => {
            return Err(options_error(
                "resourceVersionMatch",
                "FieldValueForbidden",
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        _ => {}
    }
    if send_initial == Some(true) && !bookmarks {
        return Err(options_error(
            "allowWatchBookmarks",
            "FieldValueForbidden",
            "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
        ));
    }
    let start = match send_initial {
        Some(true) => Start::Initial { end_bookmark: true },
        Some(false) if rv.is_empty() || rv == "0" => Start::From(state.store.current_rv()),
        _ if rv.is_empty() || rv == "0" => Start::Initial {
            end_bookmark: false,
        },
        _ => Start::From(super::read::parse_rv(rv)?),
    };
    let watcher = Watcher {
        rt: rt.clone(),
        prefix: prefix(rt, namespace),
        labels,
        fields,
        shape,
        bookmarks,
    };

    let (tx, rx) = mpsc::channel::<Bytes>(state.config.watch_buffer.max(1));
    let (first, start_rv, events) = match start {
        Start::Initial { end_bookmark } => {
            let (rv, items, events) = state
                .store
                .subscribe_with_snapshot(rt.storage, &watcher.prefix);
            let mut first: Vec<Bytes> = items
                .iter()
                .filter(|o| watcher.matches(o))
                .map(|o| watcher.line("ADDED", o))
                .collect();
            if end_bookmark {
                first.push(watcher.bookmark(rv, true));
            }
            (first, rv, events)
        }
        Start::From(from) => match state.store.subscribe_from(from) {
            Ok((backlog, events)) => {
                let first: Vec<Bytes> = backlog.iter().filter_map(|e| watcher.render(e)).collect();
                let last = backlog.last().map_or(from, |e| e.rv);
                (first, last, events)
            }
            Err(ReadError::Expired) => {
                let (tx, rx) = mpsc::channel::<Bytes>(1);
                let _ = tx.try_send(Watcher::error_line(&ApiError::expired(EXPIRED_WATCH)));
                return Ok(stream_response(rx));
            }
            Err(ReadError::TooLarge(cur)) => {
                return Err(ApiError::too_large_resource_version(from, cur));
            }
        },
    };
    let state = state.clone();
    tokio::spawn(async move {
        state.open_watches.fetch_add(1, Ordering::SeqCst);
        run(&state, watcher, tx, first, start_rv, events, timeout).await;
        state.open_watches.fetch_sub(1, Ordering::SeqCst);
    });
    Ok(stream_response(rx))
}

async fn run(
    state: &Arc<State>,
    watcher: Watcher,
    tx: mpsc::Sender<Bytes>,
    first: Vec<Bytes>,
    start_rv: u64,
    mut events: broadcast::Receiver<Arc<Event>>,
    timeout: Duration,
) {
    let mut drops = state.faults.watch_drops();
    drops.mark_unchanged();
    let mut registry_changes = state.registry.subscribe();
    registry_changes.mark_unchanged();
    let mut shutdown = state.shutdown.clone();
    if *shutdown.borrow() {
        return;
    }
    for line in first {
        if tx.send(line).await.is_err() {
            return;
        }
    }
    let mut last_rv = start_rv;
    let started = Instant::now();
    let deadline = started + timeout;
    // The apiserver sends a bookmark 2s before the timeout so clients can resume.
    let pre_timeout = (timeout > Duration::from_secs(2)).then(|| deadline - Duration::from_secs(2));
    let mut pre_timeout_sent = false;
    let mut ticker = tokio::time::interval_at(
        started + state.config.bookmark_interval,
        state.config.bookmark_interval,
    );
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let bookmark_now = tokio::select! {
            _ = tx.closed() => return,
            _ = drops.changed() => return,
            _ = shutdown.changed() => return,
            _ = registry_changes.changed() => {
                // The CRD of a custom resource was deleted: its watches end,
                // after the deletions of its objects.
                if state.registry.is_retired(watcher.rt.storage) {
                    drain(state, &watcher, &tx, &mut events, &mut last_rv).await;
                    return;
                }
                false
            }
            _ = tokio::time::sleep_until(deadline) => return,
            _ = tokio::time::sleep_until(pre_timeout.unwrap_or(deadline)), if watcher.bookmarks && pre_timeout.is_some() && !pre_timeout_sent => {
                pre_timeout_sent = true;
                true
            }
            _ = ticker.tick(), if watcher.bookmarks => true,
            ev = events.recv() => {
                match ev {
                    Ok(ev) => {
                        if !deliver(&watcher, &tx, &ev, &mut last_rv).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        if !catch_up(state, &watcher, &tx, &mut last_rv).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
                false
            }
        };
        if bookmark_now {
            // Everything up to `current` is already queued on `events`.
            let current = state.store.current_rv();
            if !drain(state, &watcher, &tx, &mut events, &mut last_rv).await {
                return;
            }
            last_rv = last_rv.max(current);
            if tx.send(watcher.bookmark(last_rv, false)).await.is_err() {
                return;
            }
        }
    }
}

/// Delivers what is already queued on `events`; `false` when the watch
/// must end (client gone, or history lost).
async fn drain(
    state: &State,
    watcher: &Watcher,
    tx: &mpsc::Sender<Bytes>,
    events: &mut broadcast::Receiver<Arc<Event>>,
    last_rv: &mut u64,
) -> bool {
    loop {
        let alive = match events.try_recv() {
            Ok(ev) => deliver(watcher, tx, &ev, last_rv).await,
            Err(broadcast::error::TryRecvError::Lagged(_)) => {
                catch_up(state, watcher, tx, last_rv).await
            }
            Err(_) => return true,
        };
        if !alive {
            return false;
        }
    }
}

async fn deliver(
    watcher: &Watcher,
    tx: &mpsc::Sender<Bytes>,
    ev: &Event,
    last_rv: &mut u64,
) -> bool {
    if ev.rv <= *last_rv {
        return true;
    }
    *last_rv = ev.rv;
    match watcher.render(ev) {
        Some(line) => tx.send(line).await.is_ok(),
        None => true,
    }
}

/// Replays missed events from the history window after the broadcast
/// overflowed; ends the watch with 410 when they are gone too.
async fn catch_up(
    state: &State,
    watcher: &Watcher,
    tx: &mpsc::Sender<Bytes>,
    last_rv: &mut u64,
) -> bool {
    match state.store.events_since(*last_rv) {
        Ok(evs) => {
            for ev in evs {
                if !deliver(watcher, tx, &ev, last_rv).await {
                    return false;
                }
            }
            true
        }
        Err(_) => {
            let _ = tx
                .send(Watcher::error_line(&ApiError::expired(EXPIRED_WATCH)))
                .await;
            false
        }
    }
}
