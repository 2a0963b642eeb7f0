//! Reading the double's request log: which requests are nudge's, their verbs, and
//! which are stamps; waiting for stamps.

use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;

use super::double::{Double, Request};
use super::nudge::Nudge;

/// The user agent of the benchmark's own requests, told apart from nudge's.
pub const USER_AGENT: &str = "nudge-loadtest";
/// nudge's field manager (the default).
const FIELD_MANAGER: &str = "nudge";

/// The path after `/api/v1` or `/apis/<group>/<version>`, without
/// `namespaces/<ns>`: `[resource]`, `[resource, name]` or
/// `[resource, name, subresource]`.
fn resource_segments(path: &str) -> Vec<&str> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match segments.first() {
        Some(&"api") => segments.get(2..).unwrap_or(&[]),
        Some(&"apis") => segments.get(3..).unwrap_or(&[]),
        _ => &[],
    };
    match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail.to_vec(),
        other => other.to_vec(),
    }
}

/// A Kubernetes verb for a recorded request.
pub fn verb(r: &Request) -> &'static str {
    let rest = resource_segments(&r.path);
    match r.method.as_str() {
        // `/apis/<group>/<version>`: API discovery (an absent CRD's kind is
        // looked up again now and then), not a list of objects.
        "GET" if rest.is_empty() => "DISCOVERY",
        "GET" if r.is_watch() => "WATCH",
        "GET" if rest.len() >= 2 => "GET",
        "GET" => "LIST",
        "POST" => "CREATE",
        "PUT" => "UPDATE",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        _ => "OTHER",
    }
}

/// The resource a request addresses (`configmaps`, `deployments`, …; the
/// API group's path for discovery).
pub fn resource(r: &Request) -> String {
    match resource_segments(&r.path).first() {
        Some(resource) => (*resource).to_owned(),
        None => r.path.clone(),
    }
}

/// `VERB resource`, the key of the per-request tables.
pub fn verb_and_resource(r: &Request) -> String {
    format!("{} {}", verb(r), resource(r))
}

pub fn by_nudge(r: &Request) -> bool {
    r.user_agent.as_deref() != Some(USER_AGENT)
}

/// A stamp: nudge's server-side apply (or JSON patch) of a workload. Its merge
/// patches record how a rollout ended (`nudge.dev/history`), counted apart.
pub fn is_stamp(r: &Request) -> bool {
    r.method == "PATCH"
        && r.path.starts_with("/apis/apps/v1/")
        && r.query_param("fieldManager").as_deref() == Some(FIELD_MANAGER)
        && r.content_type.as_deref() != Some("application/merge-patch+json")
}

/// nudge's stamps (2xx PATCHes of workloads) received at or after `since`.
pub fn stamps_since(double: &Double, since: SystemTime) -> Vec<Request> {
    double.requests(|r| r.received_at >= since && is_stamp(r) && (200..300).contains(&r.status))
}

/// Waits until `done(stamps so far)` holds, then until no stamp arrived for `quiet`;
/// at `within`, returns what arrived. Fails at once when nudge or the double
/// exits meanwhile.
pub async fn wait_for_stamps(
    double: &Double,
    nudge: &mut Nudge,
    since: SystemTime,
    within: Duration,
    quiet: Duration,
    done: impl Fn(&[Request]) -> bool,
) -> Result<Vec<Request>> {
    let deadline = Instant::now() + within;
    loop {
        nudge.check_running()?;
        double.check_following()?;
        let stamps = stamps_since(double, since);
        if done(&stamps) {
            break;
        }
        if Instant::now() > deadline {
            // The count checks report what is missing.
            return Ok(stamps);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut count = stamps_since(double, since).len();
    loop {
        tokio::time::sleep(quiet).await;
        double.sync().await?;
        let now = stamps_since(double, since).len();
        if now == count || Instant::now() > deadline {
            return Ok(stamps_since(double, since));
        }
        count = now;
    }
}
