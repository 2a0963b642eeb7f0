//! The served resource types: the built-in table plus whatever the
//! CustomResourceDefinitions in the store declare, registered and removed
//! at run time.
//!
//! A resource id (an index into the registry) names one served
//! `group/version/plural`; ids are never reused, so a stale id can only
//! resolve to nothing. Every version of one CRD shares a store slot
//! (`ResourceType::storage`), as the real apiserver stores one object per
//! custom resource whatever version it was written through.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::watch;

use crate::resources::{BUILTINS, ResourceType};

struct Slots {
    /// By resource id; `None` once unregistered.
    types: Vec<Option<Arc<ResourceType>>>,
    /// Store slots handed out so far.
    storages: usize,
    /// Store slots whose resource is gone (its CRD was deleted).
    retired: Vec<bool>,
    /// The store slot of each CRD by name, while it exists.
    crds: HashMap<String, usize>,
}

/// The served resource types.
pub(crate) struct Registry {
    slots: RwLock<Slots>,
    /// Bumped on every (un)registration; watches wait on it to notice that
    /// their resource went away.
    changes: watch::Sender<u64>,
}

impl Registry {
    /// A registry serving the built-in kinds.
    pub fn new() -> Self {
        let types = BUILTINS
            .iter()
            .enumerate()
            .map(|(i, b)| Some(Arc::new(b.to_resource_type(i))))
            .collect();
        let (changes, _) = watch::channel(0);
        Self {
            slots: RwLock::new(Slots {
                types,
                storages: BUILTINS.len(),
                retired: vec![false; BUILTINS.len()],
                crds: HashMap::new(),
            }),
            changes,
        }
    }

    /// The resource type of an id, if it is still served.
    pub fn get(&self, id: usize) -> Option<Arc<ResourceType>> {
        self.slots.read().types.get(id).cloned().flatten()
    }

    /// Every served resource type with its id, in registration order.
    pub fn all(&self) -> Vec<(usize, Arc<ResourceType>)> {
        self.slots
            .read()
            .types
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.clone().map(|t| (i, t)))
            .collect()
    }

    /// Finds a served resource by group, version and plural name.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.slots.read().types.iter().position(|t| {
            t.as_ref()
                .is_some_and(|t| t.group == group && t.version == version && t.plural == plural)
        })
    }

    /// Finds a served resource by `apiVersion` and kind.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.all()
            .into_iter()
            .map(|(_, t)| t)
            .find(|t| t.kind == kind && t.api_version() == api_version)
    }

    /// A served resource type of a store slot (any of its versions).
    pub fn by_storage(&self, storage: usize) -> Option<Arc<ResourceType>> {
        self.slots
            .read()
            .types
            .iter()
            .flatten()
            .find(|t| t.storage == storage)
            .cloned()
    }

    /// The store slot of a CRD, allocated on first use.
    pub fn storage_for_crd(&self, crd: &str) -> usize {
        let mut g = self.slots.write();
        if let Some(s) = g.crds.get(crd) {
            return *s;
        }
        g.storages += 1;
        g.retired.push(false);
        let storage = g.storages - 1;
        g.crds.insert(crd.to_string(), storage);
        storage
    }

    /// The store slot of an existing CRD.
    pub fn crd_storage(&self, crd: &str) -> Option<usize> {
        self.slots.read().crds.get(crd).copied()
    }

    /// Serves exactly `types` for the store slot `storage` (the versions of
    /// one CRD): versions no longer listed stop being served, listed ones
    /// are (re)registered. Ids of versions served before are kept.
    pub fn replace_storage(&self, storage: usize, types: Vec<ResourceType>) {
        let mut g = self.slots.write();
        let mut incoming: Vec<Option<ResourceType>> = types.into_iter().map(Some).collect();
        for slot in g.types.iter_mut() {
            let Some(cur) = slot.as_ref().filter(|t| t.storage == storage) else {
                continue;
            };
            let same = incoming.iter_mut().find(|t| {
                t.as_ref()
                    .is_some_and(|t| t.version == cur.version && t.plural == cur.plural)
            });
            *slot = same.and_then(Option::take).map(Arc::new);
        }
        for t in incoming.into_iter().flatten() {
            g.types.push(Some(Arc::new(t)));
        }
        drop(g);
        self.changes.send_modify(|n| *n += 1);
    }

    /// Stops serving every resource of a store slot for good: watches on it end.
    pub fn retire_storage(&self, storage: usize) {
        let mut g = self.slots.write();
        for slot in g.types.iter_mut() {
            if slot.as_ref().is_some_and(|t| t.storage == storage) {
                *slot = None;
            }
        }
        if let Some(r) = g.retired.get_mut(storage) {
            *r = true;
        }
        g.crds.retain(|_, s| *s != storage);
        drop(g);
        self.changes.send_modify(|n| *n += 1);
    }

    /// Whether a store slot was retired.
    pub fn is_retired(&self, storage: usize) -> bool {
        self.slots
            .read()
            .retired
            .get(storage)
            .copied()
            .unwrap_or(true)
    }

    /// A receiver notified on every (un)registration.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The API groups served besides the core group: built-in groups in
    /// table order, then custom groups by name (the aggregator orders
    /// CRD groups, which share one priority, alphabetically).
    pub fn groups(&self) -> Vec<String> {
        let mut builtin: Vec<String> = Vec::new();
        let mut custom: Vec<String> = Vec::new();
        for (_, t) in self.all() {
            if t.group.is_empty() {
                continue;
            }
            let list = if t.is_custom() {
                &mut custom
            } else {
                &mut builtin
            };
            if !list.contains(&t.group) {
                list.push(t.group.clone());
            }
        }
        custom.retain(|g| !builtin.contains(g));
        custom.sort();
        builtin.extend(custom);
        builtin
    }

    /// The served versions of a group, preferred first (Kubernetes version
    /// priority: GA, then beta, then alpha, newest first).
    pub fn versions(&self, group: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, t) in self.all() {
            if t.group == group && !out.contains(&t.version) {
                out.push(t.version.clone());
            }
        }
        out.sort_by(|a, b| version_priority(b).cmp(&version_priority(a)).then(a.cmp(b)));
        out
    }
}

/// Sort key of a Kubernetes API version: `v2` > `v1` > `v2beta1` >
/// `v1beta2` > `v1alpha1` > anything else.
fn version_priority(v: &str) -> (u8, u64, u64) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u64>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    for (level, word) in [(2, "beta"), (1, "alpha")] {
        if let Some(n) = tail.strip_prefix(word)
            && let Ok(minor) = n.parse::<u64>()
        {
            return (level, major, minor);
        }
    }
    (0, 0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_by_kubernetes_priority() {
        let mut v = vec!["v1alpha1", "v1", "v2beta1", "v1beta2", "foo", "v2"];
        v.sort_by(|a, b| version_priority(b).cmp(&version_priority(a)).then(a.cmp(b)));
        assert_eq!(v, ["v2", "v1", "v2beta1", "v1beta2", "v1alpha1", "foo"]);
    }

    #[test]
    fn builtins_are_served_at_their_table_index() {
        let r = Registry::new();
        assert_eq!(r.lookup("", "v1", "configmaps"), Some(1));
        let deployments = r.lookup("apps", "v1", "deployments").and_then(|i| r.get(i));
        assert_eq!(deployments.unwrap().kind, "Deployment");
        assert!(r.groups().contains(&"apps".to_string()));
        assert_eq!(r.versions("apps"), ["v1"]);
    }
}
