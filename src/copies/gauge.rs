//! The copies kept and their bytes: a metadata-only watch of nudge's copies
//! (ConfigMaps and Secrets labelled `<prefix>/snapshot-copy=true`), run only
//! with snapshots on. Each copy's size is read from its `<prefix>/snapshot-bytes`
//! annotation, so its content is never fetched; what is kept per copy is a
//! hash of its name and its size.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use tokio_util::sync::CancellationToken;

use super::CopyMetrics;
use crate::fingerprint::ObjectKind;
use crate::scope::NamespaceScope;
use crate::snapshot::SnapshotNames;

/// The copies one watch stream has seen: the size of each, by a hash of its
/// namespace and name.
#[derive(Debug, Default)]
pub(super) struct Kept {
    copies: HashMap<u64, u64>,
    /// While the stream relists: what it has listed so far.
    relisting: Option<HashMap<u64, u64>>,
}

impl Kept {
    /// A copy was created or changed.
    pub(super) fn apply(&mut self, copy: u64, bytes: u64) {
        self.copies.insert(copy, bytes);
    }

    /// A copy was deleted.
    pub(super) fn delete(&mut self, copy: u64) {
        self.copies.remove(&copy);
    }

    /// A relist starts.
    pub(super) fn init(&mut self) {
        self.relisting = Some(HashMap::new());
    }

    /// A copy the relist lists.
    pub(super) fn init_apply(&mut self, copy: u64, bytes: u64) {
        self.relisting
            .get_or_insert_with(HashMap::new)
            .insert(copy, bytes);
    }

    /// The relist is complete: what it listed is what exists.
    pub(super) fn init_done(&mut self) {
        self.copies = self.relisting.take().unwrap_or_default();
    }

    /// How many copies, and their bytes.
    pub(super) fn totals(&self) -> (u64, u64) {
        (self.copies.len() as u64, self.copies.values().sum())
    }
}

/// What a copy watch saw, reduced to what the gauge keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Init,
    InitApply { copy: u64, bytes: u64 },
    InitDone,
    Apply { copy: u64, bytes: u64 },
    Delete { copy: u64 },
}

impl Kept {
    fn see(&mut self, seen: Seen) {
        match seen {
            Seen::Init => self.init(),
            Seen::InitApply { copy, bytes } => self.init_apply(copy, bytes),
            Seen::InitDone => self.init_done(),
            Seen::Apply { copy, bytes } => self.apply(copy, bytes),
            Seen::Delete { copy } => self.delete(copy),
        }
    }
}

/// Watches the copies in `scope` until `shutdown`, keeping `metrics`'
/// `copies` and `bytes` gauges.
pub async fn run_gauge(
    client: Client,
    scope: NamespaceScope,
    names: SnapshotNames,
    metrics: Arc<CopyMetrics>,
    shutdown: CancellationToken,
) {
    let mut streams: Vec<(ObjectKind, Kept)> = Vec::new();
    let mut watches: Vec<BoxStream<'static, (usize, watcher::Result<Seen>)>> = Vec::new();
    let label = format!("{}=true", names.copy_label);
    for namespace in scope.streams() {
        let config = scope.watcher_config(&namespace).labels(&label);
        for kind in [ObjectKind::ConfigMap, ObjectKind::Secret] {
            let index = streams.len();
            streams.push((kind, Kept::default()));
            let bytes_key = names.bytes.clone();
            let events = match kind {
                ObjectKind::ConfigMap => {
                    watch::<ConfigMap>(&client, &namespace, config.clone(), bytes_key)
                }
                ObjectKind::Secret => {
                    watch::<Secret>(&client, &namespace, config.clone(), bytes_key)
                }
            };
            watches.push(events.map(move |seen| (index, seen)).boxed());
        }
    }
    let mut events = futures::stream::select_all(watches);
    loop {
        let (index, seen) = tokio::select! {
            () = shutdown.cancelled() => return,
            next = events.next() => match next {
                Some(next) => next,
                None => return,
            },
        };
        let (kind, kept) = &mut streams[index];
        let kind = *kind;
        match seen {
            Ok(seen) => kept.see(seen),
            Err(error) => {
                tracing::warn!(kind = kind.as_str(), %error, "snapshot copy watch failed; retrying");
                continue;
            }
        }
        let (copies, bytes) = streams
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, kept)| kept.totals())
            .fold((0, 0), |(c, b), (c2, b2)| (c + c2, b + b2));
        metrics.set_kept(kind, copies, bytes);
    }
}

/// The metadata watch of copies of kind `K` in `namespace` (`None`: all),
/// each event reduced to a hash of the copy's name and its size.
fn watch<K>(
    client: &Client,
    namespace: &Option<String>,
    config: watcher::Config,
    bytes_key: String,
) -> BoxStream<'static, watcher::Result<Seen>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    // An Api over PartialObjectMeta asks for metadata-only responses.
    let api: Api<PartialObjectMeta<K>> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    watcher(api, config)
        .default_backoff()
        .map(move |event| event.map(|event| seen(event, &bytes_key)))
        .boxed()
}

fn seen<K>(event: watcher::Event<PartialObjectMeta<K>>, bytes_key: &str) -> Seen {
    let copy = |object: &PartialObjectMeta<K>| {
        let mut hasher = DefaultHasher::new();
        object.metadata.namespace.hash(&mut hasher);
        object.metadata.name.hash(&mut hasher);
        hasher.finish()
    };
    let bytes = |object: &PartialObjectMeta<K>| {
        object
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(bytes_key))
            .and_then(|b| b.parse().ok())
            .unwrap_or(0)
    };
    match event {
        watcher::Event::Init => Seen::Init,
        watcher::Event::InitApply(o) => Seen::InitApply {
            copy: copy(&o),
            bytes: bytes(&o),
        },
        watcher::Event::InitDone => Seen::InitDone,
        watcher::Event::Apply(o) => Seen::Apply {
            copy: copy(&o),
            bytes: bytes(&o),
        },
        watcher::Event::Delete(o) => Seen::Delete { copy: copy(&o) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_counted_once_each_and_a_relist_replaces_what_was_known() {
        let mut kept = Kept::default();
        kept.apply(1, 10);
        kept.apply(2, 5);
        kept.apply(1, 10);
        assert_eq!(kept.totals(), (2, 15));
        kept.delete(2);
        kept.delete(3);
        assert_eq!(kept.totals(), (1, 10));
        kept.init();
        kept.init_apply(4, 7);
        // Until the relist completes, what was known stands.
        assert_eq!(kept.totals(), (1, 10));
        kept.init_done();
        assert_eq!(kept.totals(), (1, 7));
    }
}
