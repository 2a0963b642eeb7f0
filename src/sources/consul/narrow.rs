//! Finding what changed under a prefix query without reading the prefix whole.
//!
//! A prefix query blocks on `?keys` (names only), not `?recurse`: its answer is a
//! fraction of the size, and its `X-Consul-Index` is the same (the highest
//! `ModifyIndex` under the prefix, or of a deletion there). When the index moves,
//! the prefix is narrowed: its names are split one character past their longest
//! common prefix, each part is probed with a `?keys` read, and only the parts whose
//! index moved past the one the query blocked on are descended into, down to parts
//! of at most [`LEAF_KEYS`] names, which are read with their values. A change of
//! one key in a group of a thousand costs two rounds of small probes and one read
//! of a few values, not the group's every value.
//!
//! When the parts read show nothing as recent as the index that woke the query (a
//! deletion, or a probe answered from an older state), the whole prefix is read,
//! as before narrowing existed: narrowing saves work, and never loses a change.

use futures::future::try_join_all;
use tokio::sync::Semaphore;

use super::client::{ClientError, ConsulClient, KeysRead, PrefixRead};
use super::plan::{common_prefix, next_char};

/// Parts with at most this many names are read with their values.
pub(crate) const LEAF_KEYS: usize = 16;

/// One read of a prefix: everything under `within`, or, when `within` is `None`,
/// under the whole prefix the query watches.
#[derive(Debug)]
pub(crate) struct Narrowed {
    pub read: PrefixRead,
    pub within: Option<String>,
}

/// The reads covering what changed under `prefix` since index `since`, given the
/// `?keys` answer `woke` (its names sorted) that said something did (its index is
/// above `since`).
/// Each request holds a permit of `permits` while it runs.
pub(crate) async fn changed(
    client: &ConsulClient,
    permits: &Semaphore,
    prefix: &str,
    woke: &KeysRead,
    since: u64,
) -> Result<Vec<Narrowed>, ClientError> {
    let mut frontier = vec![(prefix.to_owned(), woke.keys.clone())];
    let mut leaves = Vec::new();
    while let Some((part, names)) = frontier.pop() {
        let parts = match split(&names) {
            Some(parts) if names.len() > LEAF_KEYS => parts,
            _ => {
                leaves.push(part);
                continue;
            }
        };
        let probes = parts.iter().map(|child| async move {
            let _permit = permits.acquire().await;
            client.list_keys(child, None).await
        });
        for (child, probe) in parts.iter().zip(try_join_all(probes).await?) {
            if probe.index > since {
                let mut names = probe.keys;
                names.sort_unstable();
                frontier.push((child.clone(), names));
            }
        }
    }
    let reads = leaves.iter().map(|leaf| async move {
        let _permit = permits.acquire().await;
        client.get_prefix(leaf, None).await
    });
    let reads = try_join_all(reads).await?;
    let newest = reads
        .iter()
        .flat_map(|read| &read.entries)
        .map(|entry| entry.modify_index)
        .max();
    if newest.is_none_or(|newest| newest < woke.index) {
        let _permit = permits.acquire().await;
        let read = client.get_prefix(prefix, None).await?;
        return Ok(vec![Narrowed { read, within: None }]);
    }
    Ok(leaves
        .into_iter()
        .zip(reads)
        .map(|(within, read)| Narrowed {
            read,
            within: Some(within),
        })
        .collect())
}

/// The prefixes one character past the longest common prefix of `names` (sorted),
/// each covering a run of them; `None` when there is nothing to split: no names,
/// or one that is the common prefix itself (it would be in no part).
fn split(names: &[String]) -> Option<Vec<String>> {
    let common = common_prefix(names).len();
    if names.first()?.len() == common {
        return None;
    }
    let mut parts: Vec<String> = Vec::new();
    for name in names {
        let part = &name[..next_char(name, common)];
        if parts.last().is_none_or(|last| last != part) {
            parts.push(part.to_owned());
        }
    }
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn names_split_one_character_past_their_common_prefix() {
        let parts = split(&names(&["app/a1", "app/a2", "app/b", "app/c/x"])).unwrap();
        assert_eq!(parts, ["app/a", "app/b", "app/c"]);
    }

    #[test]
    fn splitting_respects_multibyte_characters() {
        let parts = split(&names(&["k/é1", "k/é2", "k/ü"])).unwrap();
        assert_eq!(parts, ["k/é", "k/ü"]);
    }

    #[test]
    fn a_name_that_is_the_common_prefix_is_not_split() {
        assert_eq!(split(&names(&["app", "app/a", "app/b"])), None);
        assert_eq!(split(&names(&["only/one"])), None);
        assert_eq!(split(&[]), None);
    }
}
