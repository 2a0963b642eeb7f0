//! Debounce with a ceiling (design §5): changes to a key within a window produce one
//! due time, and a key that keeps changing is still due `max_delay` after its first
//! change.
//!
//! Pure and synchronous: callers pass the current time and ask what is due; nothing
//! here sleeps.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use crate::rate::debounced;
use crate::small::release_spare;

/// Pending keys and when each is due.
#[derive(Debug)]
pub struct Debouncer<K> {
    entries: HashMap<K, Entry>,
    /// `(due, key)` of every entry, earliest first.
    queue: BTreeSet<(Instant, K)>,
}

/// One pending key.
#[derive(Debug, Clone, Copy)]
struct Entry {
    first_touch: Instant,
    due: Instant,
}

impl<K> Default for Debouncer<K> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            queue: BTreeSet::new(),
        }
    }
}

impl<K: Clone + Eq + Hash + Ord> Debouncer<K> {
    /// No pending keys.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a change of `key` at `now`. The key becomes due at
    /// `min(now + window, first_touch + max_delay)`, where `first_touch` is the time
    /// of its first change since it was last popped or removed. Returns the due time.
    pub fn touch(
        &mut self,
        key: K,
        now: Instant,
        window: Duration,
        max_delay: Duration,
    ) -> Instant {
        let first_touch = match self.entries.get(&key) {
            Some(entry) => {
                self.queue.remove(&(entry.due, key.clone()));
                entry.first_touch
            }
            None => now,
        };
        let due = debounced(now, first_touch, window, max_delay);
        self.queue.insert((due, key.clone()));
        self.entries.insert(key, Entry { first_touch, due });
        due
    }

    /// When `key` is due, if it is pending.
    pub fn due(&self, key: &K) -> Option<Instant> {
        self.entries.get(key).map(|entry| entry.due)
    }

    /// The earliest due time of any pending key.
    pub fn next_due(&self) -> Option<Instant> {
        self.queue.first().map(|(due, _)| *due)
    }

    /// Removes and returns every key due at or before `now`, earliest first.
    pub fn pop_due(&mut self, now: Instant) -> Vec<K> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.queue.first() {
            if *at > now {
                break;
            }
            let Some((_, key)) = self.queue.pop_first() else {
                break;
            };
            self.entries.remove(&key);
            due.push(key);
        }
        release_spare(&mut self.entries);
        due
    }

    /// Drops a pending key; returns whether it was pending.
    pub fn remove(&mut self, key: &K) -> bool {
        let Some(entry) = self.entries.remove(key) else {
            return false;
        };
        self.queue.remove(&(entry.due, key.clone()));
        release_spare(&mut self.entries);
        true
    }

    /// Whether `key` is pending.
    pub fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// Number of pending keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(5);
    const MAX_DELAY: Duration = Duration::from_secs(60);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn mk_debouncer() -> (Debouncer<&'static str>, Instant) {
        (Debouncer::new(), Instant::now())
    }

    #[test]
    fn two_changes_inside_the_window_give_one_due_time() {
        let (mut debouncer, t0) = mk_debouncer();
        debouncer.touch("web", t0, WINDOW, MAX_DELAY);
        debouncer.touch("web", t0 + secs(3), WINDOW, MAX_DELAY);
        assert_eq!(debouncer.len(), 1);
        assert_eq!(debouncer.next_due(), Some(t0 + secs(8)));
        assert!(debouncer.pop_due(t0 + secs(7)).is_empty());
        assert_eq!(debouncer.pop_due(t0 + secs(8)), ["web"]);
        assert!(debouncer.pop_due(t0 + secs(100)).is_empty());
    }

    #[test]
    fn key_changing_every_second_is_due_at_max_delay() {
        let (mut debouncer, t0) = mk_debouncer();
        for second in 0..60 {
            let now = t0 + secs(second);
            assert!(
                debouncer.pop_due(now).is_empty(),
                "popped early at {second}s"
            );
            debouncer.touch("web", now, WINDOW, MAX_DELAY);
        }
        assert_eq!(debouncer.due(&"web"), Some(t0 + MAX_DELAY));
        assert_eq!(debouncer.pop_due(t0 + MAX_DELAY), ["web"]);
    }

    #[test]
    fn ceiling_restarts_after_a_pop() {
        let (mut debouncer, t0) = mk_debouncer();
        debouncer.touch("web", t0, WINDOW, MAX_DELAY);
        debouncer.pop_due(t0 + WINDOW);
        let due = debouncer.touch("web", t0 + secs(100), WINDOW, MAX_DELAY);
        assert_eq!(due, t0 + secs(105));
    }

    #[test]
    fn keys_pop_in_due_order() {
        let (mut debouncer, t0) = mk_debouncer();
        debouncer.touch("late", t0, secs(9), MAX_DELAY);
        debouncer.touch("early", t0, secs(2), MAX_DELAY);
        debouncer.touch("middle", t0, secs(5), MAX_DELAY);
        assert_eq!(debouncer.pop_due(t0 + secs(5)), ["early", "middle"]);
        assert_eq!(debouncer.next_due(), Some(t0 + secs(9)));
    }

    #[test]
    fn removed_key_never_becomes_due() {
        let (mut debouncer, t0) = mk_debouncer();
        debouncer.touch("web", t0, WINDOW, MAX_DELAY);
        assert!(debouncer.remove(&"web"));
        assert!(!debouncer.remove(&"web"));
        assert_eq!(debouncer.next_due(), None);
        assert!(debouncer.pop_due(t0 + secs(100)).is_empty());
        assert!(debouncer.is_empty());
    }

    #[test]
    fn huge_window_does_not_panic() {
        let (mut debouncer, t0) = mk_debouncer();
        let due = debouncer.touch("web", t0, Duration::MAX, Duration::MAX);
        assert!(due > t0 + secs(1_000_000));
    }
}
