//! When each workload may be evaluated (design §5): a debounce window with a
//! ceiling, then pacing (the workload's own eligibility and the global token
//! bucket). Synchronous: the caller passes the current time and asks for the next
//! wake-up.
//!
//! A touched workload waits in the [`Debouncer`] until its window passes (or
//! `max_delay` since its first touch), then in the held queue until it is
//! eligible (the caller decides when: the per-workload min-interval) and the
//! bucket has a token. Touches while held merge into the held entry; each entry is
//! released once.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use tokio::time::Instant;

use super::debounce::Debouncer;
use crate::model::WorkloadId;
use crate::rate::TokenBucket;
use crate::small::release_spare;

/// Debounced workloads and those waiting for pacing.
#[derive(Debug)]
pub(crate) struct Queue {
    debouncer: Debouncer<WorkloadId>,
    held: Held,
    bucket: TokenBucket,
}

impl Queue {
    pub(crate) fn new(bucket: TokenBucket) -> Self {
        Self {
            debouncer: Debouncer::new(),
            held: Held::default(),
            bucket,
        }
    }

    /// Something `id` depends on changed at `now`. Returns `false` when the
    /// workload was already held (the caller should recompute its eligibility
    /// with [`rehold`](Self::rehold)).
    pub(crate) fn touch(
        &mut self,
        id: WorkloadId,
        now: Instant,
        window: Duration,
        max_delay: Duration,
    ) -> bool {
        if self.held.contains(&id) {
            return false;
        }
        self.debouncer.touch(id, now, window, max_delay);
        true
    }

    /// Recomputes when a held workload may go: `eligible(since)` gets the time it
    /// left the debouncer.
    pub(crate) fn rehold(&mut self, id: &WorkloadId, eligible: impl FnOnce(Instant) -> Instant) {
        if let Some(since) = self.held.since(id) {
            self.held.insert(id.clone(), since, eligible(since));
        }
    }

    /// Forgets `id` (deleted).
    pub(crate) fn forget(&mut self, id: &WorkloadId) {
        self.debouncer.remove(id);
        self.held.remove(id);
    }

    /// Moves debounced workloads to the held queue (their eligibility from
    /// `eligible(id, now)`), then takes up to `room` that pacing allows now.
    pub(crate) fn release(
        &mut self,
        now: Instant,
        room: usize,
        mut eligible: impl FnMut(&WorkloadId, Instant) -> Instant,
    ) -> Vec<WorkloadId> {
        for id in self.debouncer.pop_due(now) {
            let at = eligible(&id, now);
            self.held.insert(id, now, at);
        }
        let mut released = Vec::new();
        while released.len() < room {
            match self.held.first_eligible() {
                Some(at) if at <= now => {}
                _ => break,
            }
            if self.bucket.try_take(now).is_err() {
                break;
            }
            released.extend(self.held.pop_first());
        }
        released
    }

    /// The next time something may become releasable, given whether there is room
    /// for a write (without room only the debouncer's moves matter).
    pub(crate) fn next_wake(&self, room: bool) -> Option<Instant> {
        let held = self
            .held
            .first_eligible()
            .filter(|_| room)
            .map(|at| self.bucket.available_at(at));
        [self.debouncer.next_due(), held]
            .into_iter()
            .flatten()
            .min()
    }

    /// Workloads waiting (metric).
    pub(crate) fn len(&self) -> usize {
        self.debouncer.len() + self.held.len()
    }
}

/// Debounced workloads waiting for pacing, ordered by when they become eligible,
/// then first come first served.
#[derive(Debug, Default)]
struct Held {
    queue: BTreeSet<(Instant, u64, WorkloadId)>,
    entries: HashMap<WorkloadId, HeldEntry>,
    next_seq: u64,
}

#[derive(Debug, Clone, Copy)]
struct HeldEntry {
    /// When the workload left the debouncer.
    since: Instant,
    eligible: Instant,
    seq: u64,
}

impl Held {
    /// Holds `id`, or updates its eligibility keeping its place among equals.
    fn insert(&mut self, id: WorkloadId, since: Instant, eligible: Instant) {
        let seq = match self.entries.get(&id) {
            Some(old) => {
                self.queue.remove(&(old.eligible, old.seq, id.clone()));
                old.seq
            }
            None => {
                self.next_seq += 1;
                self.next_seq
            }
        };
        self.queue.insert((eligible, seq, id.clone()));
        self.entries.insert(
            id,
            HeldEntry {
                since,
                eligible,
                seq,
            },
        );
    }

    fn remove(&mut self, id: &WorkloadId) {
        if let Some(entry) = self.entries.remove(id) {
            self.queue.remove(&(entry.eligible, entry.seq, id.clone()));
            release_spare(&mut self.entries);
        }
    }

    fn contains(&self, id: &WorkloadId) -> bool {
        self.entries.contains_key(id)
    }

    fn since(&self, id: &WorkloadId) -> Option<Instant> {
        self.entries.get(id).map(|entry| entry.since)
    }

    fn first_eligible(&self) -> Option<Instant> {
        self.queue.first().map(|(eligible, _, _)| *eligible)
    }

    fn pop_first(&mut self) -> Option<WorkloadId> {
        let (_, _, id) = self.queue.pop_first()?;
        self.entries.remove(&id);
        release_spare(&mut self.entries);
        Some(id)
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::WorkloadKind;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn mk_id(name: &str) -> WorkloadId {
        WorkloadId::new(WorkloadKind::deployment(), "ns", name)
    }

    fn mk_queue(rate: f64, burst: u32) -> Queue {
        Queue::new(TokenBucket::new(rate, burst).unwrap())
    }

    fn now_eligible(_: &WorkloadId, at: Instant) -> Instant {
        at
    }

    #[test]
    fn two_touches_inside_the_window_release_once() {
        let t0 = Instant::now();
        let mut queue = mk_queue(1000.0, 10);
        queue.touch(mk_id("web"), t0, ms(500), ms(10_000));
        queue.touch(mk_id("web"), t0 + ms(300), ms(500), ms(10_000));
        assert!(queue.release(t0 + ms(700), 8, now_eligible).is_empty());
        assert_eq!(queue.next_wake(true), Some(t0 + ms(800)));
        assert_eq!(queue.release(t0 + ms(800), 8, now_eligible), [mk_id("web")]);
        assert!(queue.release(t0 + ms(5000), 8, now_eligible).is_empty());
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn the_bucket_spaces_a_burst_at_the_configured_rate() {
        let t0 = Instant::now();
        let mut queue = mk_queue(5.0, 2);
        for i in 0..5 {
            queue.touch(mk_id(&format!("w{i}")), t0, Duration::ZERO, ms(1000));
        }
        assert_eq!(queue.release(t0, 100, now_eligible).len(), 2);
        assert_eq!(queue.next_wake(true), Some(t0 + ms(200)));
        assert_eq!(queue.release(t0 + ms(200), 100, now_eligible).len(), 1);
        assert_eq!(queue.release(t0 + ms(400), 100, now_eligible).len(), 1);
    }

    #[test]
    fn room_bounds_each_release_and_no_room_waits_for_the_debouncer_only() {
        let t0 = Instant::now();
        let mut queue = mk_queue(1000.0, 100);
        for i in 0..3 {
            queue.touch(mk_id(&format!("w{i}")), t0, Duration::ZERO, ms(1000));
        }
        assert_eq!(queue.release(t0, 2, now_eligible).len(), 2);
        assert_eq!(queue.release(t0, 0, now_eligible).len(), 0);
        assert_eq!(queue.next_wake(false), None);
        assert_eq!(queue.len(), 1);
    }

    #[test]
    fn a_workload_not_yet_eligible_does_not_hold_up_others() {
        let t0 = Instant::now();
        let mut queue = mk_queue(1000.0, 100);
        queue.touch(mk_id("slow"), t0, Duration::ZERO, ms(1000));
        queue.touch(mk_id("fast"), t0, Duration::ZERO, ms(1000));
        let eligible = |id: &WorkloadId, at: Instant| {
            if id.name == "slow" {
                at + ms(30_000)
            } else {
                at
            }
        };
        assert_eq!(queue.release(t0, 8, eligible), [mk_id("fast")]);
        assert_eq!(queue.next_wake(true), Some(t0 + ms(30_000)));
        // Its rollout completed: eligible at once.
        queue.rehold(&mk_id("slow"), |since| since);
        assert_eq!(queue.release(t0 + ms(1), 8, eligible), [mk_id("slow")]);
    }

    #[test]
    fn touches_while_held_merge_into_the_held_entry() {
        let t0 = Instant::now();
        let mut queue = mk_queue(1000.0, 100);
        let later = |_: &WorkloadId, at: Instant| at + ms(1000);
        queue.touch(mk_id("web"), t0, Duration::ZERO, ms(1000));
        assert!(queue.release(t0, 8, later).is_empty());
        assert!(!queue.touch(mk_id("web"), t0 + ms(10), Duration::ZERO, ms(1000)));
        assert_eq!(queue.release(t0 + ms(1000), 8, later), [mk_id("web")]);
        assert!(queue.release(t0 + ms(5000), 8, later).is_empty());
    }

    #[test]
    fn a_forgotten_workload_is_never_released() {
        let t0 = Instant::now();
        let mut queue = mk_queue(1000.0, 100);
        queue.touch(mk_id("web"), t0, Duration::ZERO, ms(1000));
        queue.forget(&mk_id("web"));
        assert!(queue.release(t0 + ms(10), 8, now_eligible).is_empty());
        assert_eq!(queue.next_wake(true), None);
    }
}
