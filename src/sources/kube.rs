//! The Kubernetes-object source shared by ConfigMaps and Secrets.
//!
//! Objects are watched metadata-only; content is fetched (GET) only for objects some
//! workload references, fingerprinted, and dropped. Memory therefore grows with what
//! is referenced, not with the cluster.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, mpsc};
use tracing::Instrument;

use super::{Interest, Source, SourceContext, SourceError, SourceUpdate};
use crate::annotations::{AnnotationScheme, is_ignored};
use crate::fingerprint::{
    self, Algorithm, Fingerprint, FingerprintKey, ObjectData, ObjectKind, Observation,
};
use crate::model::{Scope, SourceName, Tracked};
use crate::runtime::admin::{Readiness, WatchReady};
use crate::runtime::metrics::{Metrics, Watch};
use crate::scope::NamespaceScope;
use crate::small::SmallSet;

/// How many content GETs run at once.
const FETCH_CONCURRENCY: usize = 16;
/// Delay before retrying a failed GET.
const FETCH_RETRY: Duration = Duration::from_secs(2);

/// A Kubernetes object kind whose content nudge fingerprints.
pub trait ContentObject:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
    /// Which kind, for the compatibility formats.
    const KIND: ObjectKind;

    /// The object's keyed content.
    fn data(&self) -> ObjectData;
}

/// What the built-in ConfigMap and Secret sources share.
#[derive(Debug, Clone)]
pub struct ObjectSourceSettings {
    /// Annotation scheme, for `<prefix>/ignore`.
    pub scheme: AnnotationScheme,
    /// Which namespaces are watched.
    pub scope: NamespaceScope,
    /// Server-side label selector for the watch (empty: none).
    pub label_selector: String,
    /// Where watch restarts are counted.
    pub metrics: Metrics,
    /// Each metadata stream registers here and marks its first complete list.
    pub readiness: Readiness,
}

/// A [`Source`] for ConfigMaps or Secrets.
pub struct ObjectSource<K> {
    name: SourceName,
    client: Client,
    key: FingerprintKey,
    settings: ObjectSourceSettings,
    /// Per metadata stream (`None`: all namespaces), its part of readiness.
    ready: HashMap<Option<String>, WatchReady>,
    kind: PhantomData<fn() -> K>,
}

/// Namespace and name of an object.
type ObjectKey = (String, String);

/// What the source keeps per referenced object: no content.
#[derive(Debug, Default)]
struct Watched {
    items: SmallSet<Tracked>,
    /// resourceVersion of the last content fetched.
    fetched: Option<String>,
    /// Sequence number of the newest fetch started and of the newest applied.
    started: u64,
    applied: u64,
    /// Whether an observation was ever reported (ignored objects freeze after it).
    reported: bool,
}

/// The result of one content GET.
struct Fetched<K> {
    key: ObjectKey,
    seq: u64,
    result: Result<Option<K>, kube::Error>,
}

/// A watch of object metadata, reduced to what the source needs.
enum MetaEvent {
    /// A (re)list of the stream for this namespace (`None`: all) starts.
    Init(Option<String>),
    Seen {
        key: ObjectKey,
        version: Option<String>,
        ignored: bool,
        initial: bool,
    },
    Deleted(ObjectKey),
    InitDone(Option<String>),
}

// === impl ObjectSource ===

impl<K: ContentObject> ObjectSource<K> {
    /// A source named `name` (`configmap`, `secret`) fingerprinting with `key`;
    /// registers each of its metadata streams with `settings.readiness`.
    pub fn new(
        name: SourceName,
        client: Client,
        key: FingerprintKey,
        settings: ObjectSourceSettings,
    ) -> Self {
        let ready = settings
            .scope
            .streams()
            .into_iter()
            .map(|ns| {
                let watch = format!("{name}/{}", ns.as_deref().unwrap_or("*"));
                let ready = settings.readiness.register(watch);
                (ns, ready)
            })
            .collect();
        Self {
            name,
            client,
            key,
            settings,
            ready,
            kind: PhantomData,
        }
    }

    /// The observation of `tracked` given the object (or its absence).
    fn observation(
        &self,
        tracked: &Tracked,
        object: Option<&K>,
    ) -> Result<Observation, SourceError> {
        let Some(object) = object else {
            return Ok(Observation::Absent);
        };
        let data = object.data();
        let keys = &tracked.reference.keys;
        let fingerprint = match tracked.algorithm {
            Algorithm::Native => {
                fingerprint::native_object(K::KIND, &data.narrowed(keys), &self.key)
            }
            Algorithm::Wave => Fingerprint::Wave(fingerprint::wave_fragment(&data.narrowed(keys))),
            Algorithm::Reloader => fingerprint::reloader_object(K::KIND, &data),
            Algorithm::Md5 => {
                return Err(SourceError::UnsupportedAlgorithm {
                    source_name: self.name.clone(),
                    algorithm: tracked.algorithm,
                });
            }
        };
        Ok(Observation::Present(fingerprint))
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<K>, kube::Error> {
        Api::<K>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
    }

    fn meta_streams(&self) -> Vec<futures::stream::BoxStream<'static, MetaEvent>> {
        self.settings
            .scope
            .streams()
            .into_iter()
            .map(|ns| {
                // An Api over PartialObjectMeta asks for metadata-only responses.
                let api: Api<PartialObjectMeta<K>> = match &ns {
                    Some(ns) => Api::namespaced(self.client.clone(), ns),
                    None => Api::all(self.client.clone()),
                };
                let mut config = self.settings.scope.watcher_config(&ns);
                if !self.settings.label_selector.is_empty() {
                    config = config.labels(&self.settings.label_selector);
                }
                let scheme = self.settings.scheme.clone();
                let source = self.name.clone();
                let metrics = self.settings.metrics.clone();
                let ready = self.ready.get(&ns).cloned();
                watcher(api, config)
                    .default_backoff()
                    .filter_map(move |event| {
                        let event = match event {
                            Ok(event) => {
                                if let (watcher::Event::InitDone, Some(ready)) = (&event, &ready) {
                                    ready.listed();
                                }
                                to_meta_event(event, &scheme, &ns)
                            }
                            Err(error) => {
                                tracing::warn!(%source, %error, "metadata watch failed; retrying");
                                metrics.watch_restarted(Watch::Source(source.clone()));
                                None
                            }
                        };
                        futures::future::ready(event)
                    })
                    .boxed()
            })
            .collect()
    }
}

fn object_key<M: Resource>(meta: &M) -> Option<ObjectKey> {
    Some((meta.meta().namespace.clone()?, meta.meta().name.clone()?))
}

fn to_meta_event<K: Resource>(
    event: watcher::Event<PartialObjectMeta<K>>,
    scheme: &AnnotationScheme,
    stream: &Option<String>,
) -> Option<MetaEvent> {
    let seen = |meta: &PartialObjectMeta<K>, initial: bool| {
        Some(MetaEvent::Seen {
            key: object_key(meta)?,
            version: meta.resource_version(),
            ignored: is_ignored(meta.annotations(), scheme),
            initial,
        })
    };
    match event {
        watcher::Event::Init => Some(MetaEvent::Init(stream.clone())),
        watcher::Event::InitDone => Some(MetaEvent::InitDone(stream.clone())),
        watcher::Event::InitApply(meta) => seen(&meta, true),
        watcher::Event::Apply(meta) => seen(&meta, false),
        watcher::Event::Delete(meta) => Some(MetaEvent::Deleted(object_key(&meta)?)),
    }
}

/// The running state of one [`ObjectSource`].
struct Runner<K> {
    source: Arc<ObjectSource<K>>,
    watched: HashMap<ObjectKey, Watched>,
    /// Per metadata stream being relisted, the objects it has listed so far.
    relisting: HashMap<Option<String>, HashSet<ObjectKey>>,
    fetch_tx: mpsc::UnboundedSender<Fetched<K>>,
    fetch_slots: Arc<Semaphore>,
    updates: mpsc::Sender<SourceUpdate>,
}

impl<K: ContentObject> Runner<K> {
    fn on_interest(&mut self, interest: Interest) {
        match interest {
            Interest::Track(tracked) => {
                let Some(key) = namespaced_key(&tracked) else {
                    tracing::warn!(%tracked, "reference without namespace; ignoring");
                    return;
                };
                let watched = self.watched.entry(key.clone()).or_default();
                if watched.items.insert(tracked) {
                    // A new algorithm or key selection needs the content again.
                    self.fetch(key);
                }
            }
            Interest::Untrack(tracked) => {
                let Some(key) = namespaced_key(&tracked) else {
                    return;
                };
                if let Some(watched) = self.watched.get_mut(&key) {
                    watched.items.remove(&tracked);
                    if watched.items.is_empty() {
                        self.watched.remove(&key);
                    }
                }
            }
        }
    }

    fn fetch(&mut self, key: ObjectKey) {
        self.fetch_after(key, Duration::ZERO);
    }

    /// GETs the object after `delay`, within the fetch concurrency limit; the
    /// result comes back through `fetch_tx` tagged with a new sequence number.
    fn fetch_after(&mut self, key: ObjectKey, delay: Duration) {
        let Some(watched) = self.watched.get_mut(&key) else {
            return;
        };
        watched.started += 1;
        let seq = watched.started;
        let source = self.source.clone();
        let slots = self.fetch_slots.clone();
        let tx = self.fetch_tx.clone();
        let span = tracing::debug_span!("fetch", namespace = %key.0, name = %key.1);
        tokio::spawn(
            async move {
                tokio::time::sleep(delay).await;
                let Ok(_slot) = slots.acquire_owned().await else {
                    return;
                };
                let result = source.get(&key.0, &key.1).await;
                let _ = tx.send(Fetched { key, seq, result });
            }
            .instrument(span),
        );
    }

    async fn on_fetched(&mut self, fetched: Fetched<K>) {
        let Fetched { key, seq, result } = fetched;
        let object = match result {
            Ok(object) => object,
            Err(error) => {
                tracing::warn!(namespace = %key.0, name = %key.1, %error, "fetch failed; retrying");
                self.fetch_after(key, FETCH_RETRY);
                return;
            }
        };
        let Some(watched) = self.watched.get_mut(&key) else {
            return;
        };
        // A later GET started after this one answers with newer content.
        if seq <= watched.applied {
            return;
        }
        watched.applied = seq;
        watched.fetched = object.as_ref().and_then(|o| o.resource_version());
        watched.reported = true;
        let mut updates = Vec::with_capacity(watched.items.len());
        for tracked in &watched.items {
            match self.source.observation(tracked, object.as_ref()) {
                Ok(observation) => updates.push(SourceUpdate {
                    tracked: tracked.clone(),
                    observation,
                }),
                Err(error) => tracing::warn!(%tracked, %error, "cannot fingerprint"),
            }
        }
        for update in updates {
            if self.updates.send(update).await.is_err() {
                return;
            }
        }
    }

    async fn on_meta(&mut self, event: MetaEvent) {
        match event {
            MetaEvent::Init(stream) => {
                self.relisting.insert(stream, HashSet::new());
            }
            MetaEvent::Seen {
                key,
                version,
                ignored,
                initial,
            } => {
                if initial {
                    let stream = self.relisting.keys().find(|s| in_stream(s, &key)).cloned();
                    if let Some(seen) = stream.and_then(|s| self.relisting.get_mut(&s)) {
                        seen.insert(key.clone());
                    }
                }
                let Some(watched) = self.watched.get(&key) else {
                    return;
                };
                let changed = watched.fetched.is_none() || watched.fetched != version;
                // An ignored object keeps its last reported fingerprint.
                if changed && !(ignored && watched.reported) {
                    self.fetch(key);
                }
            }
            MetaEvent::Deleted(key) => self.report_absent(&key).await,
            MetaEvent::InitDone(stream) => {
                let Some(seen) = self.relisting.remove(&stream) else {
                    return;
                };
                let gone: Vec<ObjectKey> = self
                    .watched
                    .iter()
                    .filter(|(key, w)| {
                        in_stream(&stream, key) && w.fetched.is_some() && !seen.contains(*key)
                    })
                    .map(|(key, _)| key.clone())
                    .collect();
                for key in gone {
                    self.report_absent(&key).await;
                }
            }
        }
    }

    async fn report_absent(&mut self, key: &ObjectKey) {
        let Some(watched) = self.watched.get_mut(key) else {
            return;
        };
        watched.fetched = None;
        // Fetches started before the deletion must not resurrect it.
        watched.applied = watched.started;
        let items: Vec<Tracked> = watched.items.iter().cloned().collect();
        for tracked in items {
            let update = SourceUpdate {
                tracked,
                observation: Observation::Absent,
            };
            if self.updates.send(update).await.is_err() {
                return;
            }
        }
    }
}

/// Whether the metadata stream for `stream` (`None`: all namespaces) covers `key`.
fn in_stream(stream: &Option<String>, key: &ObjectKey) -> bool {
    stream.as_ref().is_none_or(|ns| *ns == key.0)
}

fn namespaced_key(tracked: &Tracked) -> Option<ObjectKey> {
    let reference = &tracked.reference;
    Some((reference.namespace.clone()?, reference.name.clone()))
}

#[async_trait]
impl<K: ContentObject> Source for ObjectSource<K> {
    fn name(&self) -> &SourceName {
        &self.name
    }

    fn scope(&self) -> Scope {
        Scope::Namespaced
    }

    fn supports(&self, algorithm: Algorithm) -> bool {
        algorithm != Algorithm::Md5
    }

    async fn observe(&self, tracked: &Tracked) -> Result<Observation, SourceError> {
        let (namespace, name) =
            namespaced_key(tracked).ok_or_else(|| SourceError::InvalidReference {
                source_name: self.name.clone(),
                reference: tracked.reference.name.clone(),
                reason: "a namespaced source needs a namespace".into(),
            })?;
        let object = self
            .get(&namespace, &name)
            .await
            .map_err(|e| SourceError::backend(&self.name, format!("GET {namespace}/{name}"), e))?;
        self.observation(tracked, object.as_ref())
    }

    async fn run(self: Arc<Self>, ctx: SourceContext) -> Result<(), SourceError> {
        let SourceContext {
            mut interest,
            updates,
            shutdown,
        } = ctx;
        let (fetch_tx, mut fetch_rx) = mpsc::unbounded_channel();
        let mut meta = futures::stream::select_all(self.meta_streams());
        let mut runner = Runner {
            source: self.clone(),
            watched: HashMap::new(),
            relisting: HashMap::new(),
            fetch_tx,
            fetch_slots: Arc::new(Semaphore::new(FETCH_CONCURRENCY)),
            updates,
        };
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                Some(request) = interest.recv() => runner.on_interest(request),
                Some(fetched) = fetch_rx.recv() => runner.on_fetched(fetched).await,
                Some(event) = meta.next() => runner.on_meta(event).await,
                else => return Ok(()),
            }
        }
    }
}
