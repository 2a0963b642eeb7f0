//! The controllers' work queue, after client-go's rate-limited delaying
//! queue (`staging/src/k8s.io/client-go/util/workqueue`): a key is queued
//! once however often it is added (the earliest due time wins), failed keys
//! come back after an exponential per-key delay (5 ms doubling up to
//! 1000 s, `DefaultTypedControllerRateLimiter`), and a success forgets the
//! key's failures. The token bucket the default limiter also applies (10/s,
//! burst 100) is left out.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// First delay after a failure.
const BASE_DELAY: Duration = Duration::from_millis(5);
/// Longest delay after repeated failures.
const MAX_DELAY: Duration = Duration::from_secs(1000);

/// Keys due at instants, deduplicated.
#[derive(Debug)]
pub(crate) struct WorkQueue<K> {
    /// Due time and insertion number → key.
    due: BTreeMap<(Instant, u64), K>,
    /// Key → its entry in `due`.
    queued: HashMap<K, (Instant, u64)>,
    /// Failures since the key last succeeded.
    failures: HashMap<K, u32>,
    next_seq: u64,
}

impl<K: Clone + Eq + Hash> Default for WorkQueue<K> {
    fn default() -> Self {
        Self {
            due: BTreeMap::new(),
            queued: HashMap::new(),
            failures: HashMap::new(),
            next_seq: 0,
        }
    }
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    /// Queues `key` for `at`, or for its current due time if that is earlier.
    pub fn add_at(&mut self, key: K, at: Instant) {
        if let Some(&(current, seq)) = self.queued.get(&key) {
            if current <= at {
                return;
            }
            self.due.remove(&(current, seq));
        }
        let entry = (at, self.next_seq);
        self.next_seq += 1;
        self.due.insert(entry, key.clone());
        self.queued.insert(key, entry);
    }

    /// Queues `key` after its failure delay and counts one more failure
    /// (`AddRateLimited`).
    pub fn add_rate_limited(&mut self, key: K, now: Instant) {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        let delay = BASE_DELAY
            .checked_mul(2u32.saturating_pow(*failures))
            .unwrap_or(MAX_DELAY)
            .min(MAX_DELAY);
        *failures = failures.saturating_add(1);
        self.add_at(key, now + delay);
    }

    /// How many times `key` failed since it last succeeded (`NumRequeues`).
    pub fn failures(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    /// Forgets the failures of `key` (`Forget`).
    pub fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    /// Takes the earliest key due at `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<K> {
        let (&entry, _) = self.due.first_key_value()?;
        if entry.0 > now {
            return None;
        }
        let key = self.due.remove(&entry)?;
        self.queued.remove(&key);
        Some(key)
    }

    /// When the next key is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.due.first_key_value().map(|((at, _), _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_queued_once_at_its_earliest_time() {
        let t0 = Instant::now();
        let mut q = WorkQueue::default();
        q.add_at("a", t0 + Duration::from_millis(10));
        q.add_at("a", t0 + Duration::from_millis(20));
        q.add_at("b", t0 + Duration::from_millis(5));
        q.add_at("a", t0 + Duration::from_millis(1));
        assert_eq!(q.next_due(), Some(t0 + Duration::from_millis(1)));
        assert_eq!(q.pop_due(t0), None);
        let later = t0 + Duration::from_secs(1);
        assert_eq!(q.pop_due(later), Some("a"));
        assert_eq!(q.pop_due(later), Some("b"));
        assert_eq!(q.pop_due(later), None);
        assert_eq!(q.next_due(), None);
    }

    #[test]
    fn failures_back_off_exponentially_until_forgotten() {
        let t0 = Instant::now();
        let mut q = WorkQueue::default();
        for expected_ms in [5, 10, 20, 40] {
            q.add_rate_limited("k", t0);
            assert_eq!(q.next_due(), Some(t0 + Duration::from_millis(expected_ms)));
            assert_eq!(q.pop_due(t0 + Duration::from_secs(1)), Some("k"));
        }
        assert_eq!(q.failures(&"k"), 4);
        q.forget(&"k");
        q.add_rate_limited("k", t0);
        assert_eq!(q.next_due(), Some(t0 + Duration::from_millis(5)));
    }

    #[test]
    fn the_failure_delay_is_capped() {
        let t0 = Instant::now();
        let mut q = WorkQueue::default();
        for _ in 0..40 {
            q.add_rate_limited("k", t0);
            q.pop_due(t0 + MAX_DELAY);
        }
        q.add_rate_limited("k", t0);
        assert_eq!(q.next_due(), Some(t0 + MAX_DELAY));
    }
}
