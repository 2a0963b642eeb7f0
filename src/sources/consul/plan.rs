//! Which blocking queries watch which keys: one query per key while that fits under
//! the query limit, otherwise keys sharing a prefix share one recursive query.
//!
//! Pure and deterministic: the same key set always gives the same plan, so adding or
//! removing a key only changes the queries around it. Keys that join a running
//! query are read once outside it, together where they are dense enough
//! ([`Plan::one_off_reads`]).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt;
use std::ops::Bound;

use crate::model::Name;

/// What one blocking query reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum WatchTarget {
    /// One key.
    Key(String),
    /// Every key starting with this string (`""`: all keys), read recursively.
    Prefix(String),
}

impl fmt::Display for WatchTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Key(key) => write!(f, "key {key:?}"),
            Self::Prefix(prefix) => write!(f, "prefix {prefix:?}"),
        }
    }
}

/// A part of a prefix query is read whole for the keys joining it when they
/// are at least this fraction (1 in `DENSE`) of the query's keys under it.
const DENSE: usize = 4;

/// A read made once, outside the query loops, for keys whose first
/// observation the query watching them will not bring (they joined it while
/// it was running, or gained an item).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OneOffRead {
    /// One key.
    Key(String),
    /// Every value under `within`, answering for the keys of prefix query
    /// `query` there.
    Part {
        /// The prefix query whose keys the answer reports for.
        query: WatchTarget,
        /// The part read, a prefix of every key it reads for.
        within: String,
    },
}

/// The queries covering a key set, each with the keys it reports for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan(pub BTreeMap<WatchTarget, Vec<Name>>);

impl Plan {
    /// Plans at most `max_queries` (at least 1) queries covering every key of
    /// `keys` (sorted, without duplicates). Every key belongs to exactly one query.
    ///
    /// While there are few enough keys each gets its own query. Otherwise, starting
    /// from one query on the longest common prefix of all keys, the largest group is
    /// split into the groups one path segment further down (`app/` into `app/a/`,
    /// `app/b`, …) when that fits under the limit, else into the groups one character
    /// further down (Consul prefixes are plain string prefixes), else it stays one
    /// query. Groups of one key become key queries.
    pub fn new(keys: &[Name], max_queries: usize) -> Self {
        let max_queries = max_queries.max(1);
        let mut plan = BTreeMap::new();
        if keys.len() <= max_queries {
            for key in keys {
                plan.insert(WatchTarget::Key(key.to_string()), vec![key.clone()]);
            }
            return Self(plan);
        }
        let mut queries = 1;
        let mut heap = BinaryHeap::from([Group::new(keys, common_prefix(keys))]);
        while let Some(group) = heap.pop() {
            let children = group
                .split(|prefix_len, key| next_segment(key, prefix_len))
                .filter(|c| c.len() > 1 && queries - 1 + c.len() <= max_queries)
                .or_else(|| {
                    group
                        .split(|prefix_len, key| next_char(key, prefix_len))
                        .filter(|c| c.len() > 1 && queries - 1 + c.len() <= max_queries)
                });
            match children {
                Some(children) => {
                    queries = queries - 1 + children.len();
                    for child in children {
                        if let [key] = child.keys {
                            plan.insert(WatchTarget::Key(key.to_string()), vec![key.clone()]);
                        } else {
                            heap.push(child);
                        }
                    }
                }
                None => {
                    plan.insert(
                        WatchTarget::Prefix(group.prefix.to_owned()),
                        group.keys.to_vec(),
                    );
                }
            }
        }
        Self(plan)
    }

    /// The query reporting for each key.
    pub fn assignments(&self) -> impl Iterator<Item = (&Name, &WatchTarget)> {
        self.0
            .iter()
            .flat_map(|(target, keys)| keys.iter().map(move |k| (k, target)))
    }

    /// Whether `target` is the query reporting for `key`.
    pub fn assigns(&self, target: &WatchTarget, key: &str) -> bool {
        self.0
            .get(target)
            .is_some_and(|keys| keys.binary_search_by(|k| k.as_str().cmp(key)).is_ok())
    }

    /// The one-off reads that observe `keys` once. Keys of one prefix query
    /// are read together, as the part under their longest common prefix,
    /// when they are at least a quarter of the query's keys there; otherwise
    /// they are split one character past that prefix and each run is weighed
    /// alone. A key left alone, or not in a prefix query, is read by itself.
    /// At start-up nearly every key joins a running query: read one by one,
    /// 20,000 keys took 20,000 requests.
    pub(crate) fn one_off_reads(&self, keys: &BTreeSet<String>) -> Vec<OneOffRead> {
        let mut reads = Vec::new();
        let mut in_parts = BTreeSet::new();
        for (query, assigned) in &self.0 {
            let WatchTarget::Prefix(prefix) = query else {
                continue;
            };
            let joined: Vec<&str> = keys
                .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
                .map(String::as_str)
                .take_while(|key| key.starts_with(prefix.as_str()))
                .filter(|key| self.assigns(query, key))
                .collect();
            cover(query, assigned, &joined, &mut reads);
            in_parts.extend(joined);
        }
        let alone = keys.iter().filter(|key| !in_parts.contains(key.as_str()));
        reads.extend(alone.map(|key| OneOffRead::Key(key.clone())));
        reads
    }
}

/// Keys (a sorted run) sharing `prefix`, the prefix their query would read. It is
/// the parent's prefix plus one segment or character, not the group's longest
/// common prefix, so that a new key inside the group does not move it.
#[derive(Debug)]
struct Group<'a> {
    prefix: &'a str,
    /// Length of the keys' longest common prefix: where splitting starts.
    common: usize,
    keys: &'a [Name],
}

impl<'a> Group<'a> {
    fn new(keys: &'a [Name], prefix: &'a str) -> Self {
        Self {
            prefix,
            common: common_prefix(keys).len(),
            keys,
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    /// Splits into runs of keys that agree on `boundary(prefix_len, key)`: the
    /// length of the key's part that decides its child. Sorted keys sharing a
    /// prefix are contiguous, so every child is a run.
    fn split(&self, boundary: impl Fn(usize, &str) -> usize) -> Option<Vec<Group<'a>>> {
        // `Option` so that callers can chain `filter`/`or_else`.
        let start = self.common;
        let mut children = Vec::new();
        let mut run_start = 0;
        for i in 1..=self.keys.len() {
            let same = i < self.keys.len() && {
                let (a, b) = (&self.keys[run_start], &self.keys[i]);
                let head = &a[..boundary(start, a)];
                b.len() >= head.len() && b.starts_with(head) && boundary(start, b) == head.len()
            };
            if !same {
                let first = &self.keys[run_start];
                let prefix = &first[..boundary(start, first)];
                children.push(Group::new(&self.keys[run_start..i], prefix));
                run_start = i;
            }
        }
        Some(children)
    }
}

impl PartialEq for Group<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Group<'_> {}

impl PartialOrd for Group<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Group<'_> {
    /// Largest first; among equals, the smallest prefix first (deterministic).
    fn cmp(&self, other: &Self) -> Ordering {
        self.len()
            .cmp(&other.len())
            .then_with(|| other.prefix.cmp(self.prefix))
    }
}

/// Length of `key` up to and including the first `/` after `from`, or all of it.
fn next_segment(key: &str, from: usize) -> usize {
    match key.get(from..).and_then(|rest| rest.find('/')) {
        Some(i) => from + i + 1,
        None => key.len(),
    }
}

/// Length of `key` up to and including the first character after `from`.
pub(super) fn next_char(key: &str, from: usize) -> usize {
    key.get(from..)
        .and_then(|rest| rest.chars().next())
        .map_or(key.len(), |c| from + c.len_utf8())
}

/// Adds the reads covering `joined` (sorted keys of prefix query `query`,
/// whose keys are `assigned`, sorted) to `reads`.
fn cover(query: &WatchTarget, assigned: &[Name], joined: &[&str], reads: &mut Vec<OneOffRead>) {
    let [first, ..] = joined else {
        return;
    };
    if joined.len() == 1 {
        reads.push(OneOffRead::Key((*first).to_owned()));
        return;
    }
    let common = common_prefix(joined);
    let start = assigned.partition_point(|key| key.as_str() < common);
    let under = assigned[start..]
        .iter()
        .take_while(|key| key.starts_with(common))
        .count();
    if under <= DENSE * joined.len() {
        reads.push(OneOffRead::Part {
            query: query.clone(),
            within: common.to_owned(),
        });
        return;
    }
    // Sorted keys agreeing one character past `common` are contiguous; the
    // first and last differ there, so there are at least two runs.
    let mut rest = joined;
    while let [head, ..] = rest {
        let part = &head[..next_char(head, common.len())];
        let run = rest
            .iter()
            .take_while(|key| key.starts_with(part) && next_char(key, common.len()) == part.len())
            .count();
        cover(query, assigned, &rest[..run], reads);
        rest = &rest[run..];
    }
}

/// Longest common prefix of sorted keys (on a character boundary).
pub(super) fn common_prefix<K: AsRef<str>>(keys: &[K]) -> &str {
    let (Some(first), Some(last)) = (keys.first(), keys.last()) else {
        return "";
    };
    let (first, last) = (first.as_ref(), last.as_ref());
    let mut len = 0;
    for ((i, a), b) in first.char_indices().zip(last.chars()) {
        if a != b {
            break;
        }
        len = i + a.len_utf8();
    }
    &first[..len]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(list: &[&str]) -> Vec<Name> {
        let mut keys: Vec<Name> = list.iter().map(|s| Name::from(*s)).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    fn targets(plan: &Plan) -> Vec<String> {
        plan.0.keys().map(|t| t.to_string()).collect()
    }

    fn assert_covers(plan: &Plan, keys: &[Name], max: usize) {
        assert!(
            plan.0.len() <= max.max(1),
            "{} queries > {max}",
            plan.0.len()
        );
        let mut assigned: Vec<&Name> = plan.assignments().map(|(k, _)| k).collect();
        assigned.sort();
        assert_eq!(
            assigned,
            keys.iter().collect::<Vec<_>>(),
            "every key exactly once"
        );
        for (key, target) in plan.assignments() {
            match target {
                WatchTarget::Key(k) => assert_eq!(k, key),
                WatchTarget::Prefix(p) => assert!(key.starts_with(p.as_str())),
            }
        }
    }

    #[test]
    fn few_keys_get_one_query_each() {
        let k = keys(&["a/x", "a/y", "b"]);
        let plan = Plan::new(&k, 3);
        assert_eq!(targets(&plan), ["key \"a/x\"", "key \"a/y\"", "key \"b\""]);
    }

    #[test]
    fn over_the_limit_keys_share_a_segment_prefix() {
        let k = keys(&["app/a/x", "app/a/y", "app/b"]);
        let plan = Plan::new(&k, 2);
        assert_eq!(targets(&plan), ["key \"app/b\"", "prefix \"app/a/\""]);
        assert_covers(&plan, &k, 2);
    }

    #[test]
    fn a_limit_of_one_watches_the_common_prefix() {
        let k = keys(&["app/a/x", "app/b", "apple"]);
        let plan = Plan::new(&k, 1);
        assert_eq!(targets(&plan), ["prefix \"app\""]);
        assert_covers(&plan, &k, 1);
    }

    #[test]
    fn too_many_segments_fall_back_to_character_prefixes() {
        let k: Vec<Name> = {
            let mut v: Vec<Name> = (0..200).map(|i| format!("cfg/g{i}/k").into()).collect();
            v.sort();
            v
        };
        let plan = Plan::new(&k, 16);
        assert_covers(&plan, &k, 16);
        assert!(plan.0.len() > 1, "{:?}", targets(&plan));
    }

    #[test]
    fn five_thousand_keys_in_64_groups_use_64_queries() {
        let mut k: Vec<Name> = (0..5000)
            .map(|i| format!("t/g{}/k{i}", i % 64).into())
            .collect();
        k.sort();
        let plan = Plan::new(&k, 64);
        assert_covers(&plan, &k, 64);
        assert_eq!(plan.0.len(), 64);
        assert!(
            plan.0
                .keys()
                .all(|t| matches!(t, WatchTarget::Prefix(p) if p.ends_with('/')))
        );
        assert!(
            plan.0
                .contains_key(&WatchTarget::Prefix("t/g7/".to_owned()))
        );
    }

    #[test]
    fn plans_always_cover_and_respect_the_limit() {
        let k = keys(&[
            "", "a", "a/", "a/b", "a/b/c", "a/bc", "b", "ba", "é/x", "é/y", "z/z/z/z", "z/z/y",
        ]);
        for max in 1..=k.len() + 1 {
            assert_covers(&Plan::new(&k, max), &k, max);
        }
    }

    #[test]
    fn adding_a_key_inside_a_group_keeps_the_plan() {
        let mut k: Vec<Name> = (0..100)
            .map(|i| format!("t/g{}/k{i}", i % 4).into())
            .collect();
        k.sort();
        let before = Plan::new(&k, 4);
        k.push("t/g1/k999".into());
        k.sort();
        let after = Plan::new(&k, 4);
        assert_eq!(targets(&before), targets(&after));
        assert_eq!(
            targets(&after),
            [
                "prefix \"t/g0/\"",
                "prefix \"t/g1/\"",
                "prefix \"t/g2/\"",
                "prefix \"t/g3/\""
            ]
        );
    }

    #[test]
    fn adding_a_key_only_replans_its_own_group() {
        let mut k: Vec<Name> = (0..100)
            .map(|i| format!("t/g{}/k{i}", i % 4).into())
            .collect();
        k.sort();
        let before = Plan::new(&k, 8);
        k.push("t/g1/new".into());
        k.sort();
        let after = Plan::new(&k, 8);
        let changed: Vec<&WatchTarget> = after
            .0
            .keys()
            .filter(|t| !before.0.contains_key(*t))
            .collect();
        assert!(
            changed.iter().all(|t| t.to_string().contains("t/g1/")),
            "{changed:?}"
        );
        assert_covers(&after, &k, 8);
    }

    /// A plan of one prefix query `prefix` over `keys`.
    fn one_query(prefix: &str, keys: &[&str]) -> Plan {
        let mut assigned: Vec<Name> = keys.iter().map(|k| Name::from(*k)).collect();
        assigned.sort();
        Plan(BTreeMap::from([(
            WatchTarget::Prefix(prefix.to_owned()),
            assigned,
        )]))
    }

    fn joined(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| (*k).to_owned()).collect()
    }

    fn part(prefix: &str, within: &str) -> OneOffRead {
        OneOffRead::Part {
            query: WatchTarget::Prefix(prefix.to_owned()),
            within: within.to_owned(),
        }
    }

    #[test]
    fn keys_joining_a_query_together_are_read_as_one_part() {
        let plan = one_query("p/", &["p/a1", "p/a2", "p/a3", "p/b1", "p/b2"]);
        let reads = plan.one_off_reads(&joined(&["p/a2", "p/a3"]));
        // Two of the three keys under p/a.
        assert_eq!(reads, [part("p/", "p/a")]);
        let reads = plan.one_off_reads(&joined(&["p/a1", "p/b2"]));
        // Two of five under p/: dense enough.
        assert_eq!(reads, [part("p/", "p/")]);
    }

    #[test]
    fn sparse_keys_are_split_and_a_key_alone_is_read_alone() {
        let mut keys: Vec<String> = (0..40).map(|i| format!("p/a{i:02}")).collect();
        keys.extend((0..40).map(|i| format!("p/b{i:02}")));
        let all: Vec<&str> = keys.iter().map(String::as_str).collect();
        let plan = one_query("p/", &all);
        let mut wanted: Vec<&str> = (10..20).map(|i| all[i]).collect();
        wanted.push("p/b07");
        let reads = plan.one_off_reads(&joined(&wanted));
        // p/a10..p/a19 are all of p/a1*; p/b07 is one of 80.
        assert_eq!(
            reads,
            [part("p/", "p/a1"), OneOffRead::Key("p/b07".to_owned())]
        );
    }

    #[test]
    fn keys_outside_prefix_queries_are_read_alone() {
        let mut plan = one_query("p/", &["p/a", "p/b"]);
        plan.0
            .insert(WatchTarget::Key("q".to_owned()), vec![Name::from("q")]);
        let reads = plan.one_off_reads(&joined(&["q", "r"]));
        assert_eq!(
            reads,
            [
                OneOffRead::Key("q".to_owned()),
                OneOffRead::Key("r".to_owned())
            ]
        );
    }

    #[test]
    fn one_off_reads_cover_each_key_once_without_reading_much_more() {
        // Keys of a few shapes, a plan of them under a small limit, and
        // pseudo-random subsets joining.
        let mut keys: Vec<Name> = (0..300)
            .map(|i| format!("s/n{:02}/w{}/k{}", i % 23, i % 7, i).into())
            .chain(["s", "s/", "s/n1", "t/é", "t/éa"].map(Name::from))
            .collect();
        keys.sort();
        keys.dedup();
        let plan = Plan::new(&keys, 8);
        let mut seed = 7u64;
        let mut parts = 0;
        for round in 0..200 {
            let wanted: BTreeSet<String> = keys
                .iter()
                .filter(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (seed >> 33).is_multiple_of(round % 9 + 2)
                })
                .map(|k| k.to_string())
                .collect();
            let reads = plan.one_off_reads(&wanted);
            let mut covered = Vec::new();
            for read in &reads {
                match read {
                    OneOffRead::Key(key) => covered.push(key.clone()),
                    OneOffRead::Part { query, within } => {
                        let WatchTarget::Prefix(prefix) = query else {
                            panic!("a part of a key query: {read:?}");
                        };
                        assert!(within.starts_with(prefix.as_str()), "{read:?}");
                        let assigned = &plan.0[query];
                        let under: Vec<&Name> = assigned
                            .iter()
                            .filter(|k| k.starts_with(within.as_str()))
                            .collect();
                        let mine: Vec<String> = under
                            .iter()
                            .filter(|k| wanted.contains(k.as_str()))
                            .map(|k| k.to_string())
                            .collect();
                        assert!(mine.len() >= 2, "{read:?}");
                        assert!(under.len() <= DENSE * mine.len(), "{read:?}");
                        covered.extend(mine);
                        parts += 1;
                    }
                }
            }
            covered.sort();
            assert_eq!(covered, wanted.iter().cloned().collect::<Vec<_>>());
        }
        assert!(parts > 200, "only {parts} parts read together");
    }

    #[test]
    fn common_prefix_respects_char_boundaries() {
        assert_eq!(common_prefix(&keys(&["é1", "é2"])), "é");
        assert_eq!(common_prefix(&keys(&["a", "b"])), "");
        assert_eq!(common_prefix(&keys(&["ab"])), "ab");
    }
}
