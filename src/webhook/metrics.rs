//! Counters of the admission webhook, as plain atomics. The Prometheus registry
//! registers them later (`webhook_reviews_total{result}` and friends); until then
//! they are readable through [`WebhookCounters::reviews`].

use std::sync::atomic::{AtomicU64, Ordering};

/// How one admission review ended. Every review is counted under exactly one result;
/// all of them answer `allowed: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReviewResult {
    /// A patch was returned.
    Patched,
    /// The workload already carries what nudge would write; no patch.
    Unchanged,
    /// Nothing for nudge: another kind, operation or subresource, a namespace
    /// outside nudge's scope, or a workload without references; no patch.
    Skipped,
    /// The body, the review or the object in it could not be parsed; no patch (or a
    /// 400 when there was no uid to answer to).
    Malformed,
    /// Some inputs could not be read before the deadline; their outputs were left as
    /// they are (or restored from the old object), the rest was patched.
    Timeout,
    /// An internal error (a bug); no patch.
    Error,
}

impl ReviewResult {
    /// Every result, in a stable order.
    pub const ALL: [ReviewResult; 6] = [
        Self::Patched,
        Self::Unchanged,
        Self::Skipped,
        Self::Malformed,
        Self::Timeout,
        Self::Error,
    ];

    /// A short, static label for metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Patched => "patched",
            Self::Unchanged => "unchanged",
            Self::Skipped => "skipped",
            Self::Malformed => "malformed",
            Self::Timeout => "timeout",
            Self::Error => "error",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Patched => 0,
            Self::Unchanged => 1,
            Self::Skipped => 2,
            Self::Malformed => 3,
            Self::Timeout => 4,
            Self::Error => 5,
        }
    }
}

/// What the webhook counts. Shared (`Arc`) between the server and whoever exports it.
#[derive(Debug, Default)]
pub struct WebhookCounters {
    reviews: [AtomicU64; 6],
    /// Where reviews are also exported (`nudge_webhook_requests_total`).
    metrics: Option<crate::runtime::metrics::Metrics>,
    /// TLS handshakes that failed (client gave up, wrong CA, garbage on the port).
    pub tls_handshake_failures: AtomicU64,
    /// Times the serving certificate was (re)loaded: from files, or from the
    /// self-managed Secret.
    pub certificate_loads: AtomicU64,
    /// Times a new certificate could not be loaded (the previous one stays in use).
    pub certificate_load_failures: AtomicU64,
}

impl WebhookCounters {
    /// Counters that also export every review to `metrics`.
    pub fn with_metrics(metrics: crate::runtime::metrics::Metrics) -> Self {
        Self {
            metrics: Some(metrics),
            ..Self::default()
        }
    }

    /// Counts one review.
    pub fn record(&self, result: ReviewResult) {
        self.reviews[result.index()].fetch_add(1, Ordering::Relaxed);
        if let Some(metrics) = &self.metrics {
            metrics.webhook_request(result);
        }
    }

    /// Reviews answered with `result` so far.
    pub fn reviews(&self, result: ReviewResult) -> u64 {
        self.reviews[result.index()].load(Ordering::Relaxed)
    }

    /// Reviews answered so far, whatever the result.
    pub fn total_reviews(&self) -> u64 {
        ReviewResult::ALL.iter().map(|r| self.reviews(*r)).sum()
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_result_is_counted_separately() {
        let counters = WebhookCounters::default();
        counters.record(ReviewResult::Patched);
        counters.record(ReviewResult::Malformed);
        counters.record(ReviewResult::Malformed);
        assert_eq!(counters.reviews(ReviewResult::Patched), 1);
        assert_eq!(counters.reviews(ReviewResult::Malformed), 2);
        assert_eq!(counters.reviews(ReviewResult::Error), 0);
        assert_eq!(counters.total_reviews(), 3);
    }

    #[test]
    fn labels_are_distinct() {
        let labels: std::collections::BTreeSet<_> =
            ReviewResult::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), ReviewResult::ALL.len());
    }
}
