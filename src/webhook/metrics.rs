//! Counters of the admission webhook. Reviews by result are a prometheus-client
//! family the webhook registers itself ([`WebhookCounters::register`]:
//! `requests_total{result}`, `nudge_webhook_requests_total` under nudge's
//! registry); TLS and certificate counters are plain atomics for tests and logs.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// How one admission review ended. Every review is counted under exactly one result;
/// all of them answer `allowed: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
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
}

impl EncodeLabelValue for ReviewResult {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReviewLabels {
    result: ReviewResult,
}

/// What the webhook counts. Shared (`Arc`) between the server and whoever exports it.
#[derive(Debug, Default)]
pub struct WebhookCounters {
    reviews: Family<ReviewLabels, Counter>,
    /// TLS handshakes that failed (client gave up, wrong CA, garbage on the port).
    pub tls_handshake_failures: AtomicU64,
    /// Times the serving certificate was (re)loaded: from files, or from the
    /// self-managed Secret.
    pub certificate_loads: AtomicU64,
    /// Times a new certificate could not be loaded (the previous one stays in use).
    pub certificate_load_failures: AtomicU64,
}

impl WebhookCounters {
    /// Counters whose reviews are registered into `registry` as `requests`
    /// (give it the `webhook` sub-registry), every result exposed at zero.
    pub fn register(registry: &mut Registry) -> Self {
        let counters = Self::default();
        for result in ReviewResult::ALL {
            drop(counters.reviews.get_or_create(&ReviewLabels { result }));
        }
        registry.register(
            "requests",
            "Admission webhook requests by result",
            counters.reviews.clone(),
        );
        counters
    }

    /// Counts one review.
    pub fn record(&self, result: ReviewResult) {
        self.reviews.get_or_create(&ReviewLabels { result }).inc();
    }

    /// Reviews answered with `result` so far.
    pub fn reviews(&self, result: ReviewResult) -> u64 {
        self.reviews.get_or_create(&ReviewLabels { result }).get()
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
