//! Sorted-vector sets and maps for the many tiny collections nudge keeps per
//! tracked item (the workloads depending on it, the algorithms a key is read
//! with). Those hold one or two entries; a `BTreeMap` allocates a node of eleven
//! slots for the first one, which the benchmark's heap profile showed as
//! megabytes across thousands of items. Order and lookups stay those of a
//! `BTreeMap`/`BTreeSet`.
//!
//! They grow one slot at a time while small: a `Vec` gives its first element
//! room for four, which for a 112-byte tracked item held once per watched
//! object was the largest single item of the 10× heap profile.

use std::borrow::Borrow;

/// Up to this many entries a collection grows by exactly one slot; beyond, by
/// doubling (so a ConfigMap shared by thousands of workloads stays linear).
const EXACT_UP_TO: usize = 8;

/// Inserts `value` at `at`, growing `entries` by one slot while it is small.
fn insert_at<T>(entries: &mut Vec<T>, at: usize, value: T) {
    if entries.len() == entries.capacity() {
        if entries.len() < EXACT_UP_TO {
            entries.reserve_exact(1);
        } else {
            entries.reserve(1);
        }
    }
    entries.insert(at, value);
}

/// Removes the entry at `at`, giving back memory once three quarters are unused.
fn remove_at<T>(entries: &mut Vec<T>, at: usize) -> T {
    let value = entries.remove(at);
    if entries.capacity() > EXACT_UP_TO && entries.len() * 4 <= entries.capacity() {
        entries.shrink_to(entries.len() * 2);
    }
    value
}

/// Gives back a hash map's room once three quarters of it are unused: queues
/// that held every workload during start-up keep none of that afterwards.
pub fn release_spare<K: Eq + std::hash::Hash, V>(map: &mut std::collections::HashMap<K, V>) {
    if map.capacity() > 4 * EXACT_UP_TO && map.len() * 4 <= map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// A set kept as a sorted vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmallSet<T>(Vec<T>);

impl<T> Default for SmallSet<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T: Ord> SmallSet<T> {
    /// Adds `value`; returns whether it was new.
    pub fn insert(&mut self, value: T) -> bool {
        match self.0.binary_search(&value) {
            Ok(_) => false,
            Err(at) => {
                insert_at(&mut self.0, at, value);
                true
            }
        }
    }

    /// Removes `value`; returns whether it was there.
    pub fn remove<Q: Ord + ?Sized>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        match self.0.binary_search_by(|v| v.borrow().cmp(value)) {
            Ok(at) => {
                remove_at(&mut self.0, at);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether `value` is in the set.
    pub fn contains<Q: Ord + ?Sized>(&self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        self.0.binary_search_by(|v| v.borrow().cmp(value)).is_ok()
    }

    /// The values in order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a, T> IntoIterator for &'a SmallSet<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A map kept as a vector of entries sorted by key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmallMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<K: Ord, V> SmallMap<K, V> {
    fn position<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// The value of `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.position(key).ok().map(|at| &self.0[at].1)
    }

    /// Sets the value of `key`; returns the previous one.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.position(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.0[at].1, value)),
            Err(at) => {
                insert_at(&mut self.0, at, (key, value));
                None
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.position(key)
            .ok()
            .map(|at| remove_at(&mut self.0, at).1)
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(k, _)| k)
    }

    /// The values, in key order.
    #[cfg_attr(
        not(feature = "consul"),
        allow(dead_code, reason = "the Consul source's")
    )]
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    /// The entries in key order, values mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.0.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    /// The same operations give the same contents, order and answers as the std
    /// B-tree collections.
    #[test]
    fn behave_like_btree_collections() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut set = SmallSet::default();
        let mut btree_set = BTreeSet::new();
        let mut map = SmallMap::default();
        let mut btree_map = BTreeMap::new();
        for step in 0..2_000u32 {
            let key = rng.u32(0..40);
            if rng.bool() {
                assert_eq!(set.insert(key), btree_set.insert(key), "step {step}");
                assert_eq!(map.insert(key, step), btree_map.insert(key, step));
            } else {
                assert_eq!(set.remove(&key), btree_set.remove(&key), "step {step}");
                assert_eq!(map.remove(&key), btree_map.remove(&key));
            }
            assert_eq!(map.get(&key), btree_map.get(&key));
            assert_eq!(set.len(), btree_set.len());
            assert_eq!(set.is_empty(), btree_set.is_empty());
            assert_eq!(map.is_empty(), btree_map.is_empty());
        }
        assert!(set.iter().eq(btree_set.iter()));
        assert!(map.values().eq(btree_map.values()));
        for (k, v) in map.iter_mut() {
            *v += k;
        }
        for (k, v) in btree_map.iter_mut() {
            *v += k;
        }
        assert!(map.values().eq(btree_map.values()));
    }

    /// Small collections hold no spare slots; large ones grow by doubling and
    /// give memory back when emptied.
    #[test]
    fn capacity_follows_length() {
        let mut set = SmallSet::default();
        let mut map = SmallMap::default();
        for n in 0..EXACT_UP_TO as u32 {
            set.insert(n);
            map.insert(n, ());
            assert_eq!(set.0.capacity(), set.len());
            assert_eq!(map.0.capacity(), map.0.len());
        }
        for n in EXACT_UP_TO as u32..1_000 {
            set.insert(n);
        }
        assert!(set.0.capacity() < 2 * 1_000);
        for n in 10..1_000 {
            set.remove(&n);
        }
        assert_eq!(set.len(), 10);
        assert!(set.0.capacity() <= 4 * 10, "capacity {}", set.0.capacity());
    }

    #[test]
    fn maps_give_back_room_after_a_burst() {
        let mut map: std::collections::HashMap<u32, ()> = (0..10_000).map(|n| (n, ())).collect();
        map.retain(|n, ()| *n < 10);
        release_spare(&mut map);
        assert!(map.capacity() < 100, "capacity {}", map.capacity());
        assert_eq!(map.len(), 10);
    }

    #[test]
    fn lookups_by_borrowed_key() {
        let mut map: SmallMap<String, u8> = SmallMap::default();
        map.insert("b".into(), 2);
        map.insert("a".into(), 1);
        assert_eq!(map.get("a"), Some(&1));
        assert_eq!(map.remove("b"), Some(2));
        let mut set: SmallSet<String> = SmallSet::default();
        set.insert("x".into());
        assert!(set.remove("x"));
        assert!(set.is_empty());
    }
}
