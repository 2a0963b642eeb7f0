//! The object store: objects indexed by resource and `namespace/name`, one
//! global resourceVersion counter, a bounded window of past events (for
//! watches and exact-resourceVersion lists), and a broadcast of new events.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::meta;
use crate::resources::{BUILTINS, NAMESPACES};

/// The type of a stored change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    /// Created.
    Added,
    /// Updated.
    Modified,
    /// Deleted.
    Deleted,
}

/// One change, as kept in the history window and broadcast to watchers.
#[derive(Debug)]
pub(crate) struct Event {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Change type.
    pub kind: EventKind,
    /// Store slot of the object (`ResourceType::storage`).
    pub resource: usize,
    /// Store key (`namespace/name` or `name`).
    pub key: String,
    /// The object after the change (for deletions: its last state, carrying
    /// the deletion resourceVersion).
    pub object: Arc<Value>,
    /// The object before the change.
    pub prev: Option<Arc<Value>>,
}

/// Why a store write failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WriteError {
    /// The object does not exist.
    #[error("not found")]
    NotFound,
    /// The object exists already.
    #[error("already exists")]
    AlreadyExists,
    /// The object changed since it was read.
    #[error("conflict")]
    Conflict,
    /// The namespace of a new object does not exist.
    #[error("namespace not found")]
    NamespaceNotFound,
}

/// Why a read at a resourceVersion failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReadError {
    /// The resourceVersion is older than the history window.
    #[error("expired")]
    Expired,
    /// The resourceVersion is newer than the store.
    #[error("too large (current {0})")]
    TooLarge(u64),
}

type Objects = BTreeMap<String, Arc<Value>>;

struct Inner {
    rv: u64,
    /// Events with `rv <= compacted` are no longer in `history`.
    compacted: u64,
    /// By store slot; slots of new CRDs are added on first write.
    objects: Vec<Objects>,
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    /// `metadata.ownerReferences[].uid` → the `(store slot, key)` of the
    /// objects naming it: the garbage collector's graph.
    dependents: HashMap<String, BTreeSet<(usize, String)>>,
}

impl Inner {
    fn slot(&self, storage: usize) -> Option<&Objects> {
        self.objects.get(storage)
    }

    /// Keeps the owner index in step with a change of `key` from `old` to `new`.
    fn index_owners(
        &mut self,
        storage: usize,
        key: &str,
        old: Option<&Value>,
        new: Option<&Value>,
    ) {
        let before: BTreeSet<&str> = old.map(owner_uids).unwrap_or_default();
        let after: BTreeSet<&str> = new.map(owner_uids).unwrap_or_default();
        for uid in before.difference(&after) {
            if let Some(set) = self.dependents.get_mut(*uid) {
                set.remove(&(storage, key.to_string()));
                if set.is_empty() {
                    self.dependents.remove(*uid);
                }
            }
        }
        for uid in after.difference(&before) {
            self.dependents
                .entry((*uid).to_string())
                .or_default()
                .insert((storage, key.to_string()));
        }
    }

    fn slot_mut(&mut self, storage: usize) -> &mut Objects {
        if self.objects.len() <= storage {
            self.objects.resize_with(storage + 1, BTreeMap::new);
        }
        &mut self.objects[storage]
    }
}

/// The owner UIDs in `metadata.ownerReferences`.
fn owner_uids(obj: &Value) -> BTreeSet<&str> {
    meta::metadata(obj)
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
        .collect()
}

/// Objects under a prefix at a resourceVersion: `(resourceVersion, [(key, object)])`.
pub(crate) type Snapshot = (u64, Vec<(String, Arc<Value>)>);

/// One page of a list: what the list handler asks for.
pub(crate) struct PageRequest<'a> {
    /// Key prefix (`ns/` or empty).
    pub prefix: &'a str,
    /// resourceVersion of the snapshot (`None`: now).
    pub at: Option<u64>,
    /// Only keys after this one (a continue token's start key).
    pub start_after: Option<&'a str>,
    /// Page size.
    pub limit: Option<usize>,
    /// Whether selectors filter: the scan then stops at the first match
    /// beyond the page instead of counting all the remaining items.
    pub selecting: bool,
}

/// A list page.
pub(crate) struct Page {
    /// resourceVersion of the snapshot.
    pub rv: u64,
    /// `(key, object)` in key order.
    pub items: Vec<(String, Arc<Value>)>,
    /// Matching items after the page (at least one when selecting).
    pub remaining: u64,
}

/// Past events and a receiver for the following ones.
pub(crate) type Subscription = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>);

/// The object store. Cheap reads (Arc clones), serialized writes.
pub(crate) struct Store {
    inner: RwLock<Inner>,
    events: broadcast::Sender<Arc<Event>>,
}

impl Store {
    /// A new empty store keeping `history_limit` events.
    pub fn new(history_limit: usize, channel_capacity: usize) -> Self {
        let (events, _) = broadcast::channel(channel_capacity.max(16));
        Self {
            inner: RwLock::new(Inner {
                rv: 0,
                compacted: 0,
                objects: BUILTINS.iter().map(|_| BTreeMap::new()).collect(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                dependents: HashMap::new(),
            }),
            events,
        }
    }

    /// The latest resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.inner.read().rv
    }

    /// Forgets the history so far: watches and exact lists from older
    /// resourceVersions answer 410 (as after an apiserver restart).
    pub fn compact_all(&self) {
        let mut g = self.inner.write();
        g.compacted = g.rv;
        g.history.clear();
    }

    /// One object.
    pub fn get(&self, resource: usize, key: &str) -> Option<Arc<Value>> {
        self.inner.read().slot(resource)?.get(key).cloned()
    }

    /// Whether a namespace exists.
    pub fn namespace_exists(&self, ns: &str) -> bool {
        self.inner
            .read()
            .slot(NAMESPACES)
            .is_some_and(|m| m.contains_key(ns))
    }

    /// Number of stored objects of a resource.
    pub fn count(&self, resource: usize) -> usize {
        self.inner.read().slot(resource).map_or(0, BTreeMap::len)
    }

    fn commit(
        g: &mut Inner,
        tx: &broadcast::Sender<Arc<Event>>,
        resource: usize,
        key: &str,
        kind: EventKind,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        let ev = Arc::new(Event {
            rv: g.rv,
            kind,
            resource,
            key: key.to_string(),
            object,
            prev,
        });
        g.history.push_back(ev.clone());
        while g.history.len() > g.history_limit {
            if let Some(old) = g.history.pop_front() {
                g.compacted = old.rv;
            }
        }
        // No receivers is fine.
        let _ = tx.send(ev);
    }

    /// Stores a new object, assigning its resourceVersion.
    pub fn create(
        &self,
        resource: usize,
        key: &str,
        mut obj: Value,
        namespace: Option<&str>,
    ) -> Result<Arc<Value>, WriteError> {
        let mut g = self.inner.write();
        if let Some(ns) = namespace
            && !g.slot(NAMESPACES).is_some_and(|m| m.contains_key(ns))
        {
            return Err(WriteError::NamespaceNotFound);
        }
        if g.slot_mut(resource).contains_key(key) {
            return Err(WriteError::AlreadyExists);
        }
        g.rv += 1;
        meta::set_meta(&mut obj, "resourceVersion", g.rv.to_string());
        crate::managed::compact(&mut obj);
        let obj = Arc::new(obj);
        g.index_owners(resource, key, None, Some(&obj));
        g.slot_mut(resource).insert(key.to_string(), obj.clone());
        Self::commit(
            &mut g,
            &self.events,
            resource,
            key,
            EventKind::Added,
            obj.clone(),
            None,
        );
        Ok(obj)
    }

    /// Replaces an object if it is still at `expected_rv`.
    pub fn update(
        &self,
        resource: usize,
        key: &str,
        expected_rv: &str,
        mut obj: Value,
    ) -> Result<Arc<Value>, WriteError> {
        let mut g = self.inner.write();
        let prev = g
            .slot(resource)
            .and_then(|m| m.get(key))
            .cloned()
            .ok_or(WriteError::NotFound)?;
        if meta::resource_version(&prev) != expected_rv {
            return Err(WriteError::Conflict);
        }
        g.rv += 1;
        meta::set_meta(&mut obj, "resourceVersion", g.rv.to_string());
        crate::managed::compact(&mut obj);
        let obj = Arc::new(obj);
        g.index_owners(resource, key, Some(&prev), Some(&obj));
        g.slot_mut(resource).insert(key.to_string(), obj.clone());
        Self::commit(
            &mut g,
            &self.events,
            resource,
            key,
            EventKind::Modified,
            obj.clone(),
            Some(prev),
        );
        Ok(obj)
    }

    /// Deletes an object (if still at `expected_rv`, when given). Returns its
    /// last state carrying the deletion resourceVersion.
    pub fn delete(
        &self,
        resource: usize,
        key: &str,
        expected_rv: Option<&str>,
    ) -> Result<Arc<Value>, WriteError> {
        let mut g = self.inner.write();
        Self::delete_locked(&mut g, &self.events, resource, key, expected_rv)
    }

    fn delete_locked(
        g: &mut Inner,
        tx: &broadcast::Sender<Arc<Event>>,
        resource: usize,
        key: &str,
        expected_rv: Option<&str>,
    ) -> Result<Arc<Value>, WriteError> {
        let prev = g
            .slot(resource)
            .and_then(|m| m.get(key))
            .cloned()
            .ok_or(WriteError::NotFound)?;
        if let Some(rv) = expected_rv
            && meta::resource_version(&prev) != rv
        {
            return Err(WriteError::Conflict);
        }
        g.slot_mut(resource).remove(key);
        g.index_owners(resource, key, Some(&prev), None);
        g.rv += 1;
        let mut last = (*prev).clone();
        meta::set_meta(&mut last, "resourceVersion", g.rv.to_string());
        let last = Arc::new(last);
        Self::commit(
            g,
            tx,
            resource,
            key,
            EventKind::Deleted,
            last.clone(),
            Some(prev),
        );
        Ok(last)
    }

    /// Deletes every object in `ns` of the given (namespaced) store slots
    /// (the namespace controller's job).
    pub fn delete_namespace_contents(&self, ns: &str, storages: &[usize]) {
        let mut g = self.inner.write();
        let prefix = format!("{ns}/");
        for &resource in storages {
            let keys = Self::keys_under(&g, resource, &prefix);
            for k in keys {
                let _ = Self::delete_locked(&mut g, &self.events, resource, &k, None);
            }
        }
    }

    /// The `(store slot, key)` of every object whose `ownerReferences` name `uid`.
    pub fn dependents(&self, uid: &str) -> Vec<(usize, String)> {
        self.inner
            .read()
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Deletes every object of a store slot (a CRD going away); returns
    /// their last states.
    pub fn delete_all(&self, storage: usize) -> Vec<Arc<Value>> {
        let mut g = self.inner.write();
        Self::keys_under(&g, storage, "")
            .into_iter()
            .filter_map(|k| Self::delete_locked(&mut g, &self.events, storage, &k, None).ok())
            .collect()
    }

    fn keys_under(g: &Inner, storage: usize, prefix: &str) -> Vec<String> {
        g.slot(storage)
            .map(|m| {
                m.range(prefix.to_string()..)
                    .take_while(|(k, _)| k.starts_with(prefix))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The objects of a resource under a key prefix, at resourceVersion `at`
    /// (`None`: now). Returns the resourceVersion of the snapshot.
    pub fn snapshot(
        &self,
        resource: usize,
        prefix: &str,
        at: Option<u64>,
    ) -> Result<Snapshot, ReadError> {
        let g = self.inner.read();
        let at = at.unwrap_or(g.rv);
        if at > g.rv {
            return Err(ReadError::TooLarge(g.rv));
        }
        if at < g.compacted {
            return Err(ReadError::Expired);
        }
        let mut items: BTreeMap<String, Arc<Value>> = g
            .slot(resource)
            .into_iter()
            .flat_map(|m| m.range(prefix.to_string()..))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if at < g.rv {
            // Undo newer changes, newest first, so the oldest `prev` wins.
            for ev in g.history.iter().rev().take_while(|e| e.rv > at) {
                if ev.resource != resource || !ev.key.starts_with(prefix) {
                    continue;
                }
                match &ev.prev {
                    Some(p) => items.insert(ev.key.clone(), p.clone()),
                    None => items.remove(&ev.key),
                };
            }
        }
        Ok((at, items.into_iter().collect()))
    }

    /// One page of the objects under a prefix at a resourceVersion, without
    /// copying the collection: the current objects merged with the states
    /// that newer events replaced.
    pub fn page(
        &self,
        resource: usize,
        req: &PageRequest<'_>,
        matches: impl Fn(&Value) -> bool,
    ) -> Result<Page, ReadError> {
        use std::ops::Bound;
        let g = self.inner.read();
        let at = req.at.unwrap_or(g.rv);
        if at > g.rv {
            return Err(ReadError::TooLarge(g.rv));
        }
        if at < g.compacted {
            return Err(ReadError::Expired);
        }
        let from = match req.start_after {
            Some(s) => Bound::Excluded(s),
            None => Bound::Included(req.prefix),
        };
        // Newest first, so that the oldest `prev` of a key wins.
        let mut undone: BTreeMap<&str, Option<&Arc<Value>>> = BTreeMap::new();
        for ev in g.history.iter().rev().take_while(|e| e.rv > at) {
            let after_start = req.start_after.is_none_or(|s| ev.key.as_str() > s);
            if ev.resource == resource && ev.key.starts_with(req.prefix) && after_start {
                undone.insert(ev.key.as_str(), ev.prev.as_ref());
            }
        }
        let mut current = g
            .slot(resource)
            .into_iter()
            .flat_map(|m| m.range::<str, _>((from, Bound::Unbounded)))
            .take_while(|(k, _)| k.starts_with(req.prefix))
            .peekable();
        let mut past = undone.into_iter().peekable();
        let mut page = Page {
            rv: at,
            items: Vec::new(),
            remaining: 0,
        };
        loop {
            let next = match (current.peek(), past.peek()) {
                (None, None) => break,
                (Some((ck, _)), Some((pk, _))) if ck.as_str() == *pk => {
                    current.next();
                    past.next()
                }
                (Some((ck, _)), Some((pk, _))) if ck.as_str() > *pk => past.next(),
                (Some(_), _) => current.next().map(|(k, v)| (k.as_str(), Some(v))),
                (None, Some(_)) => past.next(),
            };
            let Some((key, Some(obj))) = next else {
                continue;
            };
            if !matches(obj) {
                continue;
            }
            if req.limit.is_some_and(|l| page.items.len() >= l) {
                page.remaining += 1;
                if req.selecting {
                    break;
                }
                continue;
            }
            page.items.push((key.to_string(), obj.clone()));
        }
        Ok(page)
    }

    /// A receiver for every change from now on (the controllers' informer).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }

    /// Every object of a store slot under a key prefix, now.
    pub fn list(&self, resource: usize, prefix: &str) -> Vec<Arc<Value>> {
        self.snapshot(resource, prefix, None)
            .map(|(_, items)| items.into_iter().map(|(_, v)| v).collect())
            .unwrap_or_default()
    }

    /// Events newer than `rv` from the window and a receiver for later ones,
    /// taken atomically.
    pub fn subscribe_from(&self, rv: u64) -> Result<Subscription, ReadError> {
        let g = self.inner.read();
        if rv > g.rv {
            return Err(ReadError::TooLarge(g.rv));
        }
        if rv < g.compacted {
            return Err(ReadError::Expired);
        }
        let backlog = Self::since(&g, rv);
        Ok((backlog, self.events.subscribe()))
    }

    /// A snapshot of a resource under a prefix and a receiver for changes
    /// after it, taken atomically.
    pub fn subscribe_with_snapshot(
        &self,
        resource: usize,
        prefix: &str,
    ) -> (u64, Vec<Arc<Value>>, broadcast::Receiver<Arc<Event>>) {
        let g = self.inner.read();
        let items = g
            .slot(resource)
            .into_iter()
            .flat_map(|m| m.range(prefix.to_string()..))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect();
        (g.rv, items, self.events.subscribe())
    }

    /// Events newer than `rv`, for a watcher that fell behind the broadcast.
    pub fn events_since(&self, rv: u64) -> Result<Vec<Arc<Event>>, ReadError> {
        let g = self.inner.read();
        if rv < g.compacted {
            return Err(ReadError::Expired);
        }
        Ok(Self::since(&g, rv))
    }

    fn since(g: &Inner, rv: u64) -> Vec<Arc<Event>> {
        let start = g.history.partition_point(|e| e.rv <= rv);
        g.history.range(start..).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, v: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns"}, "data": {"v": v}})
    }

    fn setup() -> Store {
        let s = Store::new(100, 16);
        s.create(NAMESPACES, "ns", json!({"metadata": {"name": "ns"}}), None)
            .unwrap();
        s
    }

    #[test]
    fn snapshots_at_past_versions() {
        let s = setup();
        let a = s.create(1, "ns/a", obj("a", "1"), Some("ns")).unwrap();
        let rv_a = meta::resource_version(&a).to_string();
        s.create(1, "ns/b", obj("b", "1"), Some("ns")).unwrap();
        s.update(1, "ns/a", &rv_a, obj("a", "2")).unwrap();
        s.delete(1, "ns/b", None).unwrap();
        let (_, now) = s.snapshot(1, "ns/", None).unwrap();
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].1["data"]["v"], "2");
        let (at, then) = s.snapshot(1, "ns/", Some(rv_a.parse().unwrap())).unwrap();
        assert_eq!(at.to_string(), rv_a);
        assert_eq!(then.len(), 1);
        assert_eq!(then[0].1["data"]["v"], "1");
        let (_, mid) = s.snapshot(1, "ns/", Some(3)).unwrap();
        assert_eq!(mid.len(), 2);
    }

    #[test]
    fn pages_at_past_versions_merge_undone_changes() {
        let s = setup();
        for n in ["a", "b", "c", "d"] {
            s.create(1, &format!("ns/{n}"), obj(n, "1"), Some("ns"))
                .unwrap();
        }
        let at = s.current_rv();
        s.delete(1, "ns/b", None).unwrap();
        s.create(1, "ns/bb", obj("bb", "1"), Some("ns")).unwrap();
        let c = s.get(1, "ns/c").unwrap();
        s.update(1, "ns/c", meta::resource_version(&c), obj("c", "2"))
            .unwrap();
        let req = |start: Option<&'static str>, limit| PageRequest {
            prefix: "ns/",
            at: Some(at),
            start_after: start,
            limit: Some(limit),
            selecting: false,
        };
        let p = s.page(1, &req(None, 2), |_| true).unwrap();
        let keys: Vec<&str> = p.items.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!((keys, p.remaining, p.rv), (vec!["ns/a", "ns/b"], 2, at));
        let p = s.page(1, &req(Some("ns/b"), 5), |_| true).unwrap();
        let got: Vec<(&str, &Value)> = p
            .items
            .iter()
            .map(|(k, v)| (k.as_str(), &v["data"]["v"]))
            .collect();
        assert_eq!(got, [("ns/c", &json!("1")), ("ns/d", &json!("1"))]);
        let now = s
            .page(
                1,
                &PageRequest {
                    at: None,
                    ..req(None, 10)
                },
                |_| true,
            )
            .unwrap();
        assert_eq!(now.items.len(), 4);
        assert_eq!(now.items[1].0, "ns/bb");
    }

    #[test]
    fn writes_check_preconditions() {
        let s = setup();
        assert_eq!(
            s.create(1, "x/a", obj("a", "1"), Some("x")).unwrap_err(),
            WriteError::NamespaceNotFound
        );
        s.create(1, "ns/a", obj("a", "1"), Some("ns")).unwrap();
        assert_eq!(
            s.create(1, "ns/a", obj("a", "1"), Some("ns")).unwrap_err(),
            WriteError::AlreadyExists
        );
        assert_eq!(
            s.update(1, "ns/a", "1", obj("a", "2")).unwrap_err(),
            WriteError::Conflict
        );
        assert_eq!(
            s.delete(1, "ns/zz", None).unwrap_err(),
            WriteError::NotFound
        );
    }

    #[test]
    fn owner_index_follows_writes() {
        let s = setup();
        let owned = |uid: &str| json!({"metadata": {"name": "d", "namespace": "ns", "ownerReferences": [{"uid": uid}]}});
        let d = s.create(1, "ns/d", owned("u1"), Some("ns")).unwrap();
        assert_eq!(s.dependents("u1"), vec![(1, "ns/d".to_string())]);
        s.update(1, "ns/d", meta::resource_version(&d), owned("u2"))
            .unwrap();
        assert!(s.dependents("u1").is_empty());
        assert_eq!(s.dependents("u2").len(), 1);
        s.delete(1, "ns/d", None).unwrap();
        assert!(s.dependents("u2").is_empty());
    }

    #[test]
    fn history_window_compacts() {
        let s = Store::new(3, 16);
        for i in 0..10 {
            s.create(
                NAMESPACES,
                &format!("n{i}"),
                json!({"metadata": {"name": format!("n{i}")}}),
                None,
            )
            .unwrap();
        }
        assert_eq!(s.subscribe_from(2).unwrap_err(), ReadError::Expired);
        let (backlog, _) = s.subscribe_from(7).unwrap();
        assert_eq!(
            backlog.iter().map(|e| e.rv).collect::<Vec<_>>(),
            vec![8, 9, 10]
        );
        assert_eq!(
            s.snapshot(NAMESPACES, "", Some(11)).unwrap_err(),
            ReadError::TooLarge(10)
        );
    }
}
