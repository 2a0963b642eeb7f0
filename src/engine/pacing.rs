//! Pacing of stamps (design §5): a global [`TokenBucket`] protects the cluster from a
//! config source that rewrites itself in a loop, and [`MinInterval`] keeps a workload
//! from being re-stamped before its previous rollout had time to progress.
//!
//! Pure and synchronous: callers pass the current time.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use crate::model::WorkloadId;
use crate::rate::saturating_add;
pub use crate::rate::{PacingError, TokenBucket};

/// When each workload was last stamped, for the per-workload minimum interval
/// between two stamps.
#[derive(Debug)]
pub struct MinInterval<K = WorkloadId> {
    last_stamp: HashMap<K, Instant>,
}

impl<K> Default for MinInterval<K> {
    fn default() -> Self {
        Self {
            last_stamp: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash> MinInterval<K> {
    /// Nothing recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// The earliest time `key` may be stamped again given `interval`, or `None` when
    /// it has no recorded stamp (it may be stamped at any time).
    pub fn ready_at(&self, key: &K, interval: Duration) -> Option<Instant> {
        self.last_stamp
            .get(key)
            .map(|at| saturating_add(*at, interval))
    }

    /// Records that a stamp of `key` was written at `now`.
    pub fn record(&mut self, key: K, now: Instant) {
        self.last_stamp.insert(key, now);
    }

    /// Forgets `key` (the workload was deleted); returns whether it was known.
    pub fn forget(&mut self, key: &K) -> bool {
        self.last_stamp.remove(key).is_some()
    }

    /// Number of workloads with a recorded stamp.
    pub fn len(&self) -> usize {
        self.last_stamp.len()
    }

    /// Whether no stamp is recorded.
    pub fn is_empty(&self) -> bool {
        self.last_stamp.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn min_interval_counts_from_the_recorded_stamp() {
        let t0 = Instant::now();
        let mut pacing = MinInterval::<&str>::new();
        assert_eq!(pacing.ready_at(&"web", ms(30_000)), None);
        pacing.record("web", t0);
        assert_eq!(pacing.ready_at(&"web", ms(30_000)), Some(t0 + ms(30_000)));
        assert_eq!(pacing.ready_at(&"web", ms(10_000)), Some(t0 + ms(10_000)));
        pacing.record("web", t0 + ms(5_000));
        assert_eq!(pacing.ready_at(&"web", ms(30_000)), Some(t0 + ms(35_000)));
        assert!(pacing.forget(&"web"));
        assert_eq!(pacing.ready_at(&"web", ms(30_000)), None);
    }
}
