//! Which Events were published recently, so that a repeat is counted into the
//! first one's `series` instead of creating another Event (as kubectl's recorder
//! and kube's `Recorder` do).
//!
//! kube's `Recorder` keeps a full copy of every Event it published for six
//! minutes and forgets them only on its next publish: after the initial stamps
//! of a large install that was ~4 KiB per workload held at idle (the benchmark's
//! heap profile). This cache keeps 24 bytes per Event, under a hashed key, and is
//! bounded.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::time::Duration;

use tokio::time::Instant;

/// How long a published Event takes repeats into its series (kube's value).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Most Events remembered at once; beyond that a repeat creates a new Event.
pub const MAX_REMEMBERED: usize = 65_536;

/// Expired Events are swept out at most this many times per window (a lookup
/// checks the window itself), so that a publish does not scan the whole table.
const SWEEPS_PER_WINDOW: u32 = 8;

/// What to do with an Event about to be published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publication {
    /// Create a new Event.
    Create,
    /// Patch the Event with this name suffix (see [`SeriesCache::created`]) to a
    /// series of `count` occurrences.
    Repeat {
        /// The suffix of the first Event's name.
        suffix: u64,
        /// Occurrences including this one (at least 2).
        count: i32,
    },
}

#[derive(Debug, Clone, Copy)]
struct Remembered {
    suffix: u64,
    count: i32,
    last_seen: Instant,
}

impl Remembered {
    /// Whether a repeat at `now` still joins this Event's series.
    fn within(&self, window: Duration, now: Instant) -> bool {
        now.saturating_duration_since(self.last_seen) < window
    }
}

/// Recently published Events by a hash of everything that makes two Events the
/// same (a 64-bit collision would count an Event into another's series: a wrong
/// count, never a wrong content).
#[derive(Debug)]
pub struct SeriesCache {
    hasher: RandomState,
    remembered: HashMap<u64, Remembered>,
    window: Duration,
    capacity: usize,
    /// When expired Events are next swept out; `None`: at the next publish.
    next_sweep: Option<Instant>,
}

impl Default for SeriesCache {
    fn default() -> Self {
        Self::new(SERIES_WINDOW, MAX_REMEMBERED)
    }
}

impl SeriesCache {
    /// A cache taking repeats within `window`, remembering at most `capacity` Events.
    pub fn new(window: Duration, capacity: usize) -> Self {
        Self {
            hasher: RandomState::new(),
            remembered: HashMap::new(),
            window,
            capacity,
            next_sweep: None,
        }
    }

    /// The key of an Event made of `identity`.
    pub fn key(&self, identity: impl Hash) -> u64 {
        self.hasher.hash_one(identity)
    }

    /// What to do with the Event `key` at `now`. Forgets Events whose window has
    /// passed.
    pub fn publication(&mut self, key: u64, now: Instant) -> Publication {
        if self.next_sweep.is_none_or(|at| now >= at) {
            self.sweep(now);
        }
        match self.remembered.get(&key) {
            Some(r) if r.within(self.window, now) => Publication::Repeat {
                suffix: r.suffix,
                count: r.count.saturating_add(1),
            },
            _ => Publication::Create,
        }
    }

    /// The Event `key` was created with name suffix `suffix`.
    pub fn created(&mut self, key: u64, suffix: u64, now: Instant) {
        if self.is_full(key) {
            self.sweep(now);
            if self.is_full(key) {
                return;
            }
        }
        let remembered = Remembered {
            suffix,
            count: 1,
            last_seen: now,
        };
        self.remembered.insert(key, remembered);
    }

    fn is_full(&self, key: u64) -> bool {
        self.remembered.len() >= self.capacity && !self.remembered.contains_key(&key)
    }

    /// Forgets the Events whose window has passed.
    fn sweep(&mut self, now: Instant) {
        let window = self.window;
        self.remembered.retain(|_, r| r.within(window, now));
        // After a burst (the first stamps of a large install) the table would
        // keep its peak size.
        if self.remembered.len() < self.remembered.capacity() / 4 {
            self.remembered.shrink_to_fit();
        }
        self.next_sweep = Some(now + self.window / SWEEPS_PER_WINDOW);
    }

    /// The Event `key` was patched to a series of `count`.
    pub fn repeated(&mut self, key: u64, count: i32, now: Instant) {
        if let Some(r) = self.remembered.get_mut(&key) {
            r.count = count;
            r.last_seen = now;
        }
    }

    /// The Event `key` is gone (deleted by the API server's TTL): the next one is
    /// created anew.
    pub fn forget(&mut self, key: u64) {
        self.remembered.remove(&key);
    }

    /// Number of Events remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.remembered.len()
    }

    /// Whether no Event is remembered.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.remembered.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_within_the_window_joins_the_series() {
        let mut cache = SeriesCache::new(Duration::from_secs(60), 10);
        let now = Instant::now();
        let key = cache.key(("web", "ConfigChanged"));
        assert_eq!(cache.publication(key, now), Publication::Create);
        cache.created(key, 0xabc, now);
        let later = now + Duration::from_secs(30);
        assert_eq!(
            cache.publication(key, later),
            Publication::Repeat {
                suffix: 0xabc,
                count: 2
            }
        );
        cache.repeated(key, 2, later);
        assert_eq!(
            cache.publication(key, later + Duration::from_secs(59)),
            Publication::Repeat {
                suffix: 0xabc,
                count: 3
            },
            "the window runs from the last occurrence"
        );
    }

    #[test]
    fn an_event_older_than_the_window_is_forgotten() {
        let mut cache = SeriesCache::new(Duration::from_secs(60), 10);
        let now = Instant::now();
        let key = cache.key("a");
        cache.created(key, 1, now);
        let other = cache.key("b");
        assert_eq!(
            cache.publication(other, now + Duration::from_secs(60)),
            Publication::Create
        );
        assert!(
            cache.is_empty(),
            "expired entries are dropped on any publish"
        );
    }

    #[test]
    fn an_expired_event_not_yet_swept_out_is_not_repeated() {
        let mut cache = SeriesCache::new(Duration::from_secs(80), 10);
        let now = Instant::now();
        let key = cache.key("a");
        cache.created(key, 1, now);
        // A sweep 79 s in keeps it and schedules the next one 10 s later…
        let other = cache.key("b");
        cache.publication(other, now + Duration::from_secs(79));
        assert_eq!(cache.len(), 1);
        // …so at 81 s it is still in the table, but its window has passed.
        assert_eq!(
            cache.publication(key, now + Duration::from_secs(81)),
            Publication::Create
        );
    }

    #[test]
    fn different_identities_are_different_events() {
        let mut cache = SeriesCache::new(Duration::from_secs(60), 10);
        let now = Instant::now();
        let first = cache.key(("web", "note one"));
        cache.created(first, 1, now);
        let second = cache.key(("web", "note two"));
        assert_ne!(first, second);
        assert_eq!(cache.publication(second, now), Publication::Create);
    }

    #[test]
    fn a_full_cache_creates_without_remembering() {
        let mut cache = SeriesCache::new(Duration::from_secs(60), 2);
        let now = Instant::now();
        for i in 0..3u8 {
            let key = cache.key(i);
            cache.created(key, u64::from(i), now);
        }
        assert_eq!(cache.len(), 2);
        let third = cache.key(2u8);
        assert_eq!(cache.publication(third, now), Publication::Create);
    }

    #[test]
    fn a_forgotten_event_is_created_again() {
        let mut cache = SeriesCache::new(Duration::from_secs(60), 10);
        let now = Instant::now();
        let key = cache.key("a");
        cache.created(key, 1, now);
        cache.forget(key);
        assert_eq!(cache.publication(key, now), Publication::Create);
    }
}
