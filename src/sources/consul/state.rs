//! What is tracked per Consul key and what was last reported for it: the pure,
//! synchronous core of the watch. Answers from Consul go in, the observations that
//! differ from the last reported ones come out.

use std::collections::BTreeMap;

use crate::fingerprint::{Algorithm, Fingerprint, Observation, md5_value, native_value};
use crate::model::{Name, Tracked};
use crate::small::SmallMap;
use crate::sources::{Provenance, SourceUpdate};

/// What one answer says about one key.
#[derive(Clone, Copy)]
pub(crate) enum Seen<'a> {
    /// The key holds `value`, last written at `modify_index`.
    Present {
        /// The raw value.
        value: &'a [u8],
        /// Its `ModifyIndex`.
        modify_index: u64,
    },
    /// The key does not exist, as of the answer's `X-Consul-Index`.
    Absent {
        /// The answer's index.
        index: u64,
    },
}

impl Seen<'_> {
    /// The raft index this view of the key is current as of: a present key's
    /// `ModifyIndex`, an absent key's answer index (Consul's index for a missing key
    /// is its table's highest index, at or past the deletion).
    fn as_of(&self) -> u64 {
        match *self {
            Self::Present { modify_index, .. } => modify_index,
            Self::Absent { index } => index,
        }
    }
}

/// The result of [`Registry::track`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TrackOutcome {
    /// The first tracked item on this key: it needs a query.
    NewKey,
    /// The key is already watched; this item needs its first observation.
    NewItem,
    /// Already tracked; its last reported observation, if any.
    Known(Option<Observation>),
}

/// The result of [`Registry::untrack`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum UntrackOutcome {
    /// That was the last item on the key: its query can stop.
    KeyGone,
    /// Other items still track the key.
    Remaining,
    /// It was not tracked.
    Unknown,
}

/// The result of [`Registry::apply`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Observations that differ from the last reported ones.
    pub updates: Vec<SourceUpdate>,
    /// The answer was older than what is known while some item still waits for its
    /// first observation: the key should be read again.
    pub reread: bool,
}

#[derive(Debug, Default)]
struct KeyState {
    /// Each tracked item and its last reported observation.
    items: SmallMap<Tracked, Option<Observation>>,
    /// `ModifyIndex` of the value the current observations were computed from.
    modify_index: Option<u64>,
    /// The newest answer applied (see [`Seen::as_of`]).
    as_of: u64,
}

impl KeyState {
    /// Whether an item has had nothing reported for it yet.
    fn awaits_first(&self) -> bool {
        self.items.values().any(Option::is_none)
    }
}

/// Tracked items by Consul key, with the last observation reported for each.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    keys: BTreeMap<Name, KeyState>,
}

impl Registry {
    /// Starts tracking an item (whose key and algorithm were validated).
    pub fn track(&mut self, tracked: Tracked) -> TrackOutcome {
        let key = tracked.reference.name.clone();
        let is_new_key = !self.keys.contains_key(key.as_str());
        let state = self.keys.entry(key).or_default();
        if let Some(last) = state.items.get(&tracked) {
            return TrackOutcome::Known(last.clone());
        }
        state.items.insert(tracked, None);
        if is_new_key {
            TrackOutcome::NewKey
        } else {
            TrackOutcome::NewItem
        }
    }

    /// Stops tracking an item and forgets what was reported for it.
    pub fn untrack(&mut self, tracked: &Tracked) -> UntrackOutcome {
        let key = tracked.reference.name.as_str();
        let Some(state) = self.keys.get_mut(key) else {
            return UntrackOutcome::Unknown;
        };
        if state.items.remove(tracked).is_none() {
            return UntrackOutcome::Unknown;
        }
        if state.items.is_empty() {
            self.keys.remove(key);
            UntrackOutcome::KeyGone
        } else {
            UntrackOutcome::Remaining
        }
    }

    /// Every tracked key, sorted.
    pub fn keys(&self) -> Vec<Name> {
        self.keys.keys().cloned().collect()
    }

    /// Whether `key` is tracked.
    pub fn contains(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    /// Whether `key` has a tracked item that nothing was reported for yet.
    pub fn awaits_first(&self, key: &str) -> bool {
        self.keys.get(key).is_some_and(KeyState::awaits_first)
    }

    /// Applies what an answer says about `key`, returning what must be reported.
    ///
    /// An answer older than the newest one applied is ignored (a one-off read can
    /// finish after a blocking query saw a newer value), unless it is
    /// `authoritative`: the query's index went backwards (a snapshot restore, a
    /// wiped cluster), so older indexes are the new truth. A value whose
    /// `ModifyIndex` did not change is not fingerprinted again, except for items
    /// that have not been reported yet.
    pub fn apply(&mut self, key: &str, seen: Seen<'_>, authoritative: bool) -> Applied {
        let Some(state) = self.keys.get_mut(key) else {
            return Applied::default();
        };
        let as_of = seen.as_of();
        if !authoritative && as_of < state.as_of {
            return Applied {
                updates: Vec::new(),
                reread: state.awaits_first(),
            };
        }
        let unchanged = !authoritative
            && matches!(seen, Seen::Present { modify_index, .. } if state.modify_index == Some(modify_index));
        let mut computed: BTreeMap<Algorithm, Observation> = BTreeMap::new();
        let mut updates = Vec::new();
        for (tracked, last) in state.items.iter_mut() {
            if unchanged && last.is_some() {
                continue;
            }
            let observation = computed
                .entry(tracked.algorithm)
                .or_insert_with(|| match seen {
                    Seen::Present { value, .. } => match fingerprint(tracked.algorithm, value) {
                        Some(f) => Observation::Present(f),
                        // Unsupported algorithms are refused at `track`.
                        None => Observation::Absent,
                    },
                    Seen::Absent { .. } => Observation::Absent,
                })
                .clone();
            if last.as_ref() != Some(&observation) {
                let update = SourceUpdate::new(tracked.clone(), observation.clone());
                updates.push(match seen {
                    // Consul records no author: its ModifyIndex is the version.
                    Seen::Present { modify_index, .. } => {
                        update.with_provenance(Provenance::version(modify_index.to_string()))
                    }
                    Seen::Absent { .. } => update,
                });
                *last = Some(observation);
            }
        }
        state.modify_index = match seen {
            Seen::Present { modify_index, .. } => Some(modify_index),
            Seen::Absent { .. } => None,
        };
        state.as_of = as_of;
        Applied {
            updates,
            reread: false,
        }
    }
}

/// Whether the Consul source can fingerprint with `algorithm`.
pub(crate) fn supports(algorithm: Algorithm) -> bool {
    matches!(algorithm, Algorithm::Native | Algorithm::Md5)
}

/// The fingerprint of a raw value, for the algorithms a Consul key supports.
pub(crate) fn fingerprint(algorithm: Algorithm, value: &[u8]) -> Option<Fingerprint> {
    match algorithm {
        Algorithm::Native => Some(native_value(value)),
        Algorithm::Md5 => Some(md5_value(value)),
        Algorithm::Reloader | Algorithm::ReloaderSha512 | Algorithm::Wave => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Reference, SourceName};

    fn item(key: &str, algorithm: Algorithm) -> Tracked {
        Tracked::new(Reference::key(SourceName::consul(), key), algorithm)
    }

    fn present(value: &[u8], modify_index: u64) -> Seen<'_> {
        Seen::Present {
            value,
            modify_index,
        }
    }

    fn observations(applied: &Applied) -> Vec<(Algorithm, Observation)> {
        applied
            .updates
            .iter()
            .map(|u| (u.tracked.algorithm, u.observation.clone()))
            .collect()
    }

    #[test]
    fn first_answer_reports_every_item_of_the_key() {
        let mut r = Registry::default();
        assert_eq!(r.track(item("k", Algorithm::Native)), TrackOutcome::NewKey);
        assert_eq!(r.track(item("k", Algorithm::Md5)), TrackOutcome::NewItem);
        let applied = r.apply("k", present(b"v", 5), false);
        assert_eq!(
            observations(&applied),
            [
                (Algorithm::Native, Observation::Present(native_value(b"v"))),
                (Algorithm::Md5, Observation::Present(md5_value(b"v"))),
            ]
        );
    }

    #[test]
    fn unchanged_modify_index_is_not_reported_again() {
        let mut r = Registry::default();
        r.track(item("k", Algorithm::Native));
        r.apply("k", present(b"v", 5), false);
        assert!(r.apply("k", present(b"v", 5), false).updates.is_empty());
    }

    #[test]
    fn rewriting_the_same_value_reports_nothing() {
        let mut r = Registry::default();
        r.track(item("k", Algorithm::Native));
        r.apply("k", present(b"v", 5), false);
        assert!(r.apply("k", present(b"v", 9), false).updates.is_empty());
    }

    #[test]
    fn a_new_item_on_a_known_key_gets_its_observation_even_if_unchanged() {
        let mut r = Registry::default();
        r.track(item("k", Algorithm::Native));
        r.apply("k", present(b"v", 5), false);
        r.track(item("k", Algorithm::Md5));
        let applied = r.apply("k", present(b"v", 5), false);
        assert_eq!(
            observations(&applied),
            [(Algorithm::Md5, Observation::Present(md5_value(b"v")))]
        );
    }

    #[test]
    fn delete_then_recreate_reports_absent_then_present_once() {
        let mut r = Registry::default();
        r.track(item("k", Algorithm::Native));
        r.apply("k", present(b"v", 5), false);
        let gone = r.apply("k", Seen::Absent { index: 7 }, false);
        assert_eq!(
            observations(&gone),
            [(Algorithm::Native, Observation::Absent)]
        );
        assert!(
            r.apply("k", Seen::Absent { index: 8 }, false)
                .updates
                .is_empty()
        );
        let back = r.apply("k", present(b"w", 9), false);
        assert_eq!(
            observations(&back),
            [(Algorithm::Native, Observation::Present(native_value(b"w")))]
        );
    }

    #[test]
    fn older_answers_are_ignored_unless_authoritative() {
        let mut r = Registry::default();
        r.track(item("k", Algorithm::Native));
        r.apply("k", present(b"new", 10), false);
        let stale = r.apply("k", present(b"old", 9), false);
        assert_eq!(stale, Applied::default());
        let restored = r.apply("k", present(b"old", 9), true);
        assert_eq!(
            observations(&restored),
            [(
                Algorithm::Native,
                Observation::Present(native_value(b"old"))
            )]
        );
    }

    #[test]
    fn an_older_answer_asks_for_a_reread_when_an_item_waits() {
        let mut r = Registry::default();
        r.track(item("k", Algorithm::Native));
        r.apply("k", present(b"new", 10), false);
        r.track(item("k", Algorithm::Md5));
        let stale = r.apply("k", present(b"old", 9), false);
        assert!(stale.updates.is_empty());
        assert!(stale.reread);
    }

    #[test]
    fn authoritative_answers_refingerprint_even_with_the_same_modify_index() {
        let mut r = Registry::default();
        r.track(item("k", Algorithm::Native));
        r.apply("k", present(b"v", 5), false);
        // A wiped cluster can hand out index 5 again for different content.
        let applied = r.apply("k", present(b"other", 5), true);
        assert_eq!(observations(&applied).len(), 1);
    }

    #[test]
    fn untracking_the_last_item_forgets_the_key() {
        let mut r = Registry::default();
        r.track(item("k", Algorithm::Native));
        r.track(item("k", Algorithm::Md5));
        assert_eq!(
            r.untrack(&item("k", Algorithm::Md5)),
            UntrackOutcome::Remaining
        );
        assert_eq!(
            r.untrack(&item("k", Algorithm::Native)),
            UntrackOutcome::KeyGone
        );
        assert_eq!(
            r.untrack(&item("k", Algorithm::Native)),
            UntrackOutcome::Unknown
        );
        assert!(!r.contains("k"));
        assert!(r.apply("k", present(b"v", 1), false).updates.is_empty());
    }

    #[test]
    fn tracking_twice_returns_the_last_observation() {
        let mut r = Registry::default();
        r.track(item("k", Algorithm::Native));
        r.apply("k", Seen::Absent { index: 3 }, false);
        assert_eq!(
            r.track(item("k", Algorithm::Native)),
            TrackOutcome::Known(Some(Observation::Absent))
        );
    }
}
