//! Kinds whose references name a field's value (`reference_field`, design
//! §5b), such as the Secrets Store CSI preset's `SecretProviderClassPodStatus`
//! objects: one per pod and class, the class named in
//! `status.secretProviderClassName`.
//!
//! A reference (namespace, value) stands for every object of the kind in that
//! namespace whose field holds the value, and its observation is the one of
//! the object **written last** (highest resourceVersion; arrival order when a
//! resourceVersion is not a number). Deleting objects never changes it: a
//! pod going away is not new content. So when one pod's driver records a
//! rotation, the reference changes once; pods that record the same versions
//! after it (other pods rotating, new pods mounting) change nothing.
//!
//! These objects are watched whole (their content is what tells which
//! reference they belong to) and reduced at once to their fingerprints;
//! [`Latest`] is the pure state, [`run_latest`] its watch loop.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};

use super::KindSource;
use crate::fingerprint::{Algorithm, Fingerprint, Observation};
use crate::health::WatchHealth;
use crate::model::{Name, Tracked};
use crate::sources::{ContextParts, Interest, Provenance, SourceUpdate};

/// Namespace and name of an object.
pub(crate) type ObjectKey = (Name, Name);
/// Namespace and field value: the objects one reference stands for.
pub(crate) type GroupKey = (Name, Name);

/// What one object is reduced to: its fingerprints in each algorithm the
/// source offers, and who wrote it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Written {
    pub(crate) fingerprints: Vec<(Algorithm, Fingerprint)>,
    pub(crate) provenance: Provenance,
}

impl Written {
    /// The observation for `algorithm`, when the source offers it.
    pub(crate) fn observation(&self, algorithm: Algorithm) -> Option<Observation> {
        self.fingerprints
            .iter()
            .find(|(a, _)| *a == algorithm)
            .map(|(_, fingerprint)| Observation::Present(fingerprint.clone()))
    }
}

/// One reference's objects: how many exist, and the one written last.
#[derive(Debug)]
struct Group<V> {
    live: usize,
    newest: Option<(Name, V)>,
}

/// The pure state: which group each object is in, and per group the content
/// of the object written last.
#[derive(Debug)]
pub(crate) struct Latest<V> {
    objects: HashMap<ObjectKey, GroupKey>,
    groups: HashMap<GroupKey, Group<V>>,
}

impl<V> Default for Latest<V> {
    fn default() -> Self {
        Self {
            objects: HashMap::new(),
            groups: HashMap::new(),
        }
    }
}

/// Whether `revision` was written after `than`: resourceVersions compare as
/// numbers (kube-apiserver's are etcd revisions); otherwise the later event wins.
pub(crate) fn is_newer(revision: &str, than: &str) -> bool {
    match (revision.parse::<u64>(), than.parse::<u64>()) {
        (Ok(revision), Ok(than)) => revision > than,
        _ => true,
    }
}

impl<V> Latest<V> {
    /// Object `key`, at `revision`, is in `group` (`None`: its field holds no
    /// string) with content `value`. Returns the group when this write is now
    /// its newest (its observation may have changed).
    pub(crate) fn apply(
        &mut self,
        key: ObjectKey,
        group: Option<GroupKey>,
        revision: &str,
        value: V,
    ) -> Option<GroupKey> {
        let previous = self.objects.get(&key).cloned();
        if previous.is_some() && previous != group {
            // Its field changed: it left its old group (no pod moves
            // between classes; the old group's content is not kept).
            self.delete(&key, |_| false);
        }
        let group = group?;
        if previous.as_ref() != Some(&group) {
            self.objects.insert(key, group.clone());
            self.groups
                .entry(group.clone())
                .or_insert(Group {
                    live: 0,
                    newest: None,
                })
                .live += 1;
        }
        let entry = self.groups.get_mut(&group)?;
        let newer = entry
            .newest
            .as_ref()
            .is_none_or(|(at, _)| is_newer(revision, at));
        if !newer {
            return None;
        }
        entry.newest = Some((Name::from(revision), value));
        Some(group)
    }

    /// Object `key` is gone. Its group keeps its observation; a group without
    /// objects is forgotten unless `keep` says someone tracks it.
    pub(crate) fn delete(&mut self, key: &ObjectKey, keep: impl Fn(&GroupKey) -> bool) {
        let Some(group) = self.objects.remove(key) else {
            return;
        };
        if let Some(entry) = self.groups.get_mut(&group) {
            entry.live = entry.live.saturating_sub(1);
            if entry.live == 0 && !keep(&group) {
                self.groups.remove(&group);
            }
        }
    }

    /// Nobody tracks `group` any more: forgotten if it has no objects.
    pub(crate) fn untracked(&mut self, group: &GroupKey) {
        if self.groups.get(group).is_some_and(|g| g.live == 0) {
            self.groups.remove(group);
        }
    }

    /// The content of `group`'s newest object, if one was seen.
    pub(crate) fn newest(&self, group: &GroupKey) -> Option<&V> {
        self.groups
            .get(group)?
            .newest
            .as_ref()
            .map(|(_, value)| value)
    }

    /// The objects in the namespace of `stream` (`None`: all).
    fn objects_in(&self, stream: Option<&str>) -> Vec<ObjectKey> {
        self.objects
            .keys()
            .filter(|(ns, _)| stream.is_none_or(|s| s == ns.as_str()))
            .cloned()
            .collect()
    }
}

/// A watch event of one namespace stream.
enum Event {
    Init(Option<String>),
    Applied(DynamicObject, bool),
    Deleted(DynamicObject),
    InitDone(Option<String>),
}

/// The source's watches: every object, whole, per namespace stream.
fn streams(
    source: &KindSource,
    resource: &ApiResource,
    health: &WatchHealth,
) -> Vec<BoxStream<'static, Event>> {
    let settings = &source.settings;
    settings
        .scope
        .streams()
        .into_iter()
        .map(|ns| {
            let api: Api<DynamicObject> = match ns.as_deref() {
                Some(ns) => Api::namespaced_with(source.client.clone(), ns, resource),
                None => Api::all_with(source.client.clone(), resource),
            };
            let config = settings.scope.watcher_config(&ns);
            let name = source.name.clone();
            let health = health.clone();
            watcher(api, config)
                .default_backoff()
                .filter_map(move |event| {
                    let event = match event {
                        Ok(watcher::Event::Init) => Some(Event::Init(ns.clone())),
                        Ok(watcher::Event::InitApply(object)) => Some(Event::Applied(object, true)),
                        Ok(watcher::Event::Apply(object)) => Some(Event::Applied(object, false)),
                        Ok(watcher::Event::Delete(object)) => Some(Event::Deleted(object)),
                        Ok(watcher::Event::InitDone) => Some(Event::InitDone(ns.clone())),
                        Err(error) => {
                            tracing::warn!(source = %name, %error, "watch failed; retrying");
                            health.restarted(name.as_str());
                            None
                        }
                    };
                    futures::future::ready(event)
                })
                .boxed()
        })
        .collect()
}

/// The running state of one source of this form.
struct Runner {
    source: Arc<KindSource>,
    cx: crate::sources::ObserveContext,
    latest: Latest<Written>,
    tracked: HashMap<GroupKey, Vec<Tracked>>,
    relisting: HashMap<Option<String>, HashSet<ObjectKey>>,
    listed: HashSet<Option<String>>,
    updates: tokio::sync::mpsc::Sender<SourceUpdate>,
}

impl Runner {
    /// Reports `group`'s newest observation to everything tracking it;
    /// `false` when the engine is gone.
    async fn report(&self, group: &GroupKey, only: Option<&Tracked>) -> bool {
        let Some(written) = self.latest.newest(group) else {
            return true;
        };
        let items = self.tracked.get(group).into_iter().flatten();
        for tracked in items.filter(|t| only.is_none_or(|only| only == *t)) {
            let Some(observation) = written.observation(tracked.algorithm) else {
                continue;
            };
            let update = SourceUpdate::new(tracked.clone(), observation)
                .with_provenance(written.provenance.clone());
            if self.updates.send(update).await.is_err() {
                return false;
            }
        }
        true
    }

    async fn on_interest(&mut self, interest: Interest) -> bool {
        match interest {
            Interest::Track(tracked) => {
                let Some(group) = super::group_of(&tracked) else {
                    tracing::warn!(%tracked, "reference without namespace; ignoring");
                    return true;
                };
                let items = self.tracked.entry(group.clone()).or_default();
                if items.contains(&tracked) {
                    return true;
                }
                items.push(tracked.clone());
                self.report(&group, Some(&tracked)).await
            }
            Interest::Untrack(tracked) => {
                let Some(group) = super::group_of(&tracked) else {
                    return true;
                };
                if let Some(items) = self.tracked.get_mut(&group) {
                    items.retain(|t| *t != tracked);
                    if items.is_empty() {
                        self.tracked.remove(&group);
                        self.latest.untracked(&group);
                    }
                }
                true
            }
        }
    }

    async fn on_event(&mut self, event: Event) -> bool {
        match event {
            Event::Init(stream) => {
                self.relisting.insert(stream, HashSet::new());
            }
            Event::Applied(object, initial) => {
                let Some((key, group, revision, written)) = self.source.written(&object, &self.cx)
                else {
                    return true;
                };
                let in_stream =
                    |s: &Option<String>| s.as_deref().is_none_or(|s| s == key.0.as_str());
                if initial
                    && let Some((_, seen)) = self.relisting.iter_mut().find(|(s, _)| in_stream(s))
                {
                    seen.insert(key.clone());
                }
                if let Some(group) = self.latest.apply(key, group, &revision, written) {
                    return self.report(&group, None).await;
                }
            }
            Event::Deleted(object) => {
                if let Some(key) = super::object_key(&object) {
                    let tracked = &self.tracked;
                    self.latest.delete(&key, |g| tracked.contains_key(g));
                }
            }
            Event::InitDone(stream) => {
                self.listed.insert(stream.clone());
                let Some(seen) = self.relisting.remove(&stream) else {
                    return true;
                };
                for key in self.latest.objects_in(stream.as_deref()) {
                    if !seen.contains(&key) {
                        let tracked = &self.tracked;
                        self.latest.delete(&key, |g| tracked.contains_key(g));
                    }
                }
            }
        }
        true
    }
}

/// Runs a `reference_field` source until shutdown: its watches, its
/// interest, its reports. Ready once every watch has listed.
pub(crate) async fn run_latest(
    source: Arc<KindSource>,
    resource: ApiResource,
    parts: ContextParts,
    health: &WatchHealth,
) {
    let ContextParts {
        mut interest,
        updates,
        observe,
        ready,
        shutdown,
    } = parts;
    let watches = streams(&source, &resource, health);
    let count = watches.len();
    let mut events = futures::stream::select_all(watches);
    let mut runner = Runner {
        source,
        cx: observe,
        latest: Latest::default(),
        tracked: HashMap::new(),
        relisting: HashMap::new(),
        listed: HashSet::new(),
        updates,
    };
    loop {
        if runner.listed.len() == count {
            ready.listed();
        }
        let going = tokio::select! {
            () = shutdown.cancelled() => false,
            Some(request) = interest.recv() => runner.on_interest(request).await,
            Some(event) = events.next() => runner.on_event(event).await,
            else => false,
        };
        if !going {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> ObjectKey {
        (ns.into(), name.into())
    }

    fn group(ns: &str, value: &str) -> Option<GroupKey> {
        Some((ns.into(), value.into()))
    }

    #[test]
    fn the_object_written_last_is_the_groups_content() {
        let mut latest = Latest::default();
        let vault = group("shop", "vault").unwrap();
        assert_eq!(
            latest.apply(key("shop", "a"), group("shop", "vault"), "10", "v1"),
            Some(vault.clone())
        );
        latest.apply(key("shop", "b"), group("shop", "vault"), "11", "v1");
        // A rotation recorded on one pod.
        latest.apply(key("shop", "a"), group("shop", "vault"), "12", "v2");
        assert_eq!(latest.newest(&vault), Some(&"v2"));
        // A relist hands back an older write after a newer one: ignored.
        assert_eq!(
            latest.apply(key("shop", "b"), group("shop", "vault"), "11", "v1"),
            None
        );
        assert_eq!(latest.newest(&vault), Some(&"v2"));
        // Another class, another namespace: other groups.
        latest.apply(key("shop", "c"), group("shop", "aws"), "13", "x");
        latest.apply(key("bar", "a"), group("bar", "vault"), "14", "y");
        assert_eq!(latest.newest(&vault), Some(&"v2"));
    }

    #[test]
    fn deleting_objects_keeps_the_content_of_tracked_groups_and_forgets_the_rest() {
        let mut latest = Latest::default();
        let vault = group("shop", "vault").unwrap();
        latest.apply(key("shop", "a"), group("shop", "vault"), "10", "v1");
        latest.apply(key("shop", "b"), group("shop", "vault"), "12", "v2");
        // The newest object goes: the content stays (a pod going is not content).
        latest.delete(&key("shop", "b"), |_| true);
        assert_eq!(latest.newest(&vault), Some(&"v2"));
        latest.delete(&key("shop", "a"), |_| true);
        assert_eq!(latest.newest(&vault), Some(&"v2"), "tracked: kept");
        latest.untracked(&vault);
        assert_eq!(
            latest.newest(&vault),
            None,
            "untracked and empty: forgotten"
        );
        latest.apply(key("shop", "c"), group("shop", "vault"), "13", "v3");
        latest.delete(&key("shop", "c"), |_| false);
        assert_eq!(latest.newest(&vault), None);
    }

    #[test]
    fn an_object_whose_field_changes_or_goes_leaves_its_group() {
        let mut latest = Latest::default();
        latest.apply(key("shop", "a"), group("shop", "vault"), "10", "v1");
        latest.apply(key("shop", "a"), group("shop", "aws"), "11", "x");
        assert_eq!(latest.newest(&group("shop", "vault").unwrap()), None);
        assert_eq!(latest.newest(&group("shop", "aws").unwrap()), Some(&"x"));
        assert_eq!(latest.apply(key("shop", "a"), None, "12", "y"), None);
        assert_eq!(latest.newest(&group("shop", "aws").unwrap()), None);
    }

    #[test]
    fn revisions_compare_as_numbers_and_otherwise_arrival_wins() {
        assert!(is_newer("10", "9"));
        assert!(!is_newer("9", "10"));
        assert!(!is_newer("10", "10"));
        assert!(is_newer("b", "a") && is_newer("a", "b"));
    }
}
