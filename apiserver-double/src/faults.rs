//! Fault injection: failing the next requests, latency, dropping watches.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

/// Which requests a fault applies to. The default matches every request.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestFilter {
    /// HTTP method (`GET`, `PATCH`, ...), case-insensitive.
    pub method: Option<String>,
    /// Prefix the request path must start with, e.g. `/apis/apps/v1`.
    pub path_prefix: Option<String>,
    /// Substring the path must contain, e.g. `/deployments/`.
    pub path_contains: Option<String>,
    /// `Some(true)`: only watch requests; `Some(false)`: only non-watch requests.
    pub watch: Option<bool>,
}

impl RequestFilter {
    /// Matches every request.
    pub fn any() -> Self {
        Self::default()
    }

    /// Matches requests with this method.
    pub fn method(mut self, method: impl Into<String>) -> Self {
        self.method = Some(method.into());
        self
    }

    /// Matches requests whose path starts with `prefix`.
    pub fn path_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.path_prefix = Some(prefix.into());
        self
    }

    /// Matches requests whose path contains `part`.
    pub fn path_contains(mut self, part: impl Into<String>) -> Self {
        self.path_contains = Some(part.into());
        self
    }

    /// Matches only watch (`true`) or only non-watch (`false`) requests.
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = Some(watch);
        self
    }

    /// Whether a request matches.
    pub fn matches(&self, method: &str, path: &str, is_watch: bool) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self
                .path_prefix
                .as_deref()
                .is_none_or(|p| path.starts_with(p))
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
            && self.watch.is_none_or(|w| w == is_watch)
    }
}

#[derive(Debug)]
struct FailRule {
    remaining: u32,
    status: u16,
    retry_after: u32,
    filter: RequestFilter,
}

/// Fault state shared by the server and its handle.
#[derive(Debug)]
pub(crate) struct Faults {
    rules: Mutex<Vec<FailRule>>,
    latency: Mutex<Duration>,
    drop_watches: watch::Sender<u64>,
}

impl Faults {
    /// No faults.
    pub fn new() -> Self {
        Self {
            rules: Mutex::new(Vec::new()),
            latency: Mutex::new(Duration::ZERO),
            drop_watches: watch::Sender::new(0),
        }
    }

    /// Fails the next `n` matching requests with `status`.
    pub fn fail_next(&self, n: u32, status: u16, retry_after: u32, filter: RequestFilter) {
        if n > 0 {
            self.rules.lock().push(FailRule {
                remaining: n,
                status,
                retry_after,
                filter,
            });
        }
    }

    /// Removes all pending failures.
    pub fn clear_failures(&self) {
        self.rules.lock().clear();
    }

    /// The injected status for this request, consuming one use of the first
    /// matching rule.
    pub fn take(&self, method: &str, path: &str, is_watch: bool) -> Option<(u16, u32)> {
        let mut rules = self.rules.lock();
        let i = rules
            .iter()
            .position(|r| r.filter.matches(method, path, is_watch))?;
        let r = &mut rules[i];
        r.remaining -= 1;
        let out = (r.status, r.retry_after);
        if r.remaining == 0 {
            rules.remove(i);
        }
        Some(out)
    }

    /// Sets the latency added to every response.
    pub fn set_latency(&self, d: Duration) {
        *self.latency.lock() = d;
    }

    /// The current added latency.
    pub fn latency(&self) -> Duration {
        *self.latency.lock()
    }

    /// Ends every open watch.
    pub fn drop_watches(&self) {
        self.drop_watches.send_modify(|g| *g += 1);
    }

    /// A receiver that changes when watches must be dropped.
    pub fn watch_drops(&self) -> watch::Receiver<u64> {
        self.drop_watches.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_consumed_in_order() {
        let f = Faults::new();
        f.fail_next(2, 500, 1, RequestFilter::any().method("patch"));
        assert_eq!(f.take("GET", "/api/v1/x", false), None);
        assert_eq!(f.take("PATCH", "/x", false), Some((500, 1)));
        assert_eq!(f.take("PATCH", "/x", false), Some((500, 1)));
        assert_eq!(f.take("PATCH", "/x", false), None);
        f.fail_next(
            1,
            429,
            2,
            RequestFilter::any().watch(true).path_prefix("/apis/apps"),
        );
        assert_eq!(f.take("GET", "/apis/apps/v1/deployments", false), None);
        assert_eq!(
            f.take("GET", "/apis/apps/v1/deployments", true),
            Some((429, 2))
        );
    }
}
