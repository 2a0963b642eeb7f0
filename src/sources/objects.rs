//! The Kubernetes-object source: ConfigMaps and Secrets ([`ObjectSource`]),
//! and through `ObjectReader` the objects of configured kinds
//! (`super::kind`), all run by one loop (`run_objects`).
//!
//! Objects are watched metadata-only; content is fetched (GET) only for objects some
//! workload references, fingerprinted, and dropped. Memory therefore grows with what
//! is referenced, not with the cluster. Fetches run in a `JoinSet` the run loop
//! owns; a failed fetch is retried with exponential backoff and jitter.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinSet;
use tokio_util::time::DelayQueue;
use tracing::Instrument;

use super::{
    ContextParts, Interest, ObserveContext, Provenance, Source, SourceContext, SourceError,
    SourceUpdate,
};
use crate::annotations::{AnnotationScheme, RELOADER_MATCH, is_ignored};
use crate::fingerprint::{self, Algorithm, Fingerprint, ObjectData, ObjectKind, Observation};
use crate::health::{SourceMetrics, WatchHealth};
use crate::model::{Gate, Name, Scope, SourceName, Tracked};
use crate::rate::Backoff;
use crate::scope::NamespaceScope;
use crate::small::SmallMap;

/// Objects per page of a metadata list. A page of stubs is small (about
/// 0.5 KiB an object), and fewer pages end a cluster's list sooner: a paged
/// list whose first page is older than the API server keeps (etcd
/// compaction; the double keeps 10,000 revisions) starts over, and nudge's
/// own start-up writes age it.
const META_PAGE: u32 = 5_000;
/// How many content GETs run at once.
const FETCH_CONCURRENCY: usize = 16;
/// First delay before retrying a failed GET; doubles (with jitter) up to
/// [`MAX_FETCH_RETRY`]. A 403 on a Secret is retried forever, but rarely.
const FIRST_FETCH_RETRY: Duration = Duration::from_secs(1);
const MAX_FETCH_RETRY: Duration = Duration::from_secs(300);

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
}

/// A [`Source`] for ConfigMaps or Secrets.
pub struct ObjectSource<K> {
    name: SourceName,
    client: Client,
    settings: ObjectSourceSettings,
    kind: PhantomData<fn() -> K>,
}

/// Namespace and name of an object.
type ObjectKey = (Name, Name);

/// What the source keeps per referenced object: no content.
#[derive(Debug, Default)]
struct Watched {
    /// Each tracked item, and whether it was reported once (match-gated items
    /// keep that observation outside the gate).
    items: SmallMap<Tracked, bool>,
    /// resourceVersion of the last content fetched (short: stored inline).
    fetched: Option<Name>,
    /// Sequence number of the newest fetch started and of the newest applied.
    started: u64,
    applied: u64,
    /// Whether an observation was ever reported (ignored objects freeze after it).
    reported: bool,
    /// Set while fetches fail.
    backoff: Option<Box<Backoff>>,
    /// The object carries `reloader.stakater.com/match: "true"` (last seen).
    matched: bool,
}

/// The result of one content GET.
struct Fetched<O> {
    key: ObjectKey,
    seq: u64,
    result: Result<Option<O>, kube::Error>,
    /// How long the GET took.
    took: std::time::Duration,
}

/// A watch of object metadata, reduced to what the source needs.
pub(crate) enum MetaEvent {
    /// A (re)list of the stream for this namespace (`None`: all) starts.
    Init(Option<String>),
    Seen {
        key: ObjectKey,
        version: Option<Name>,
        ignored: bool,
        matched: bool,
        initial: bool,
    },
    Deleted(ObjectKey),
    InitDone(Option<String>),
}

// === impl ObjectSource ===

impl<K: ContentObject> ObjectSource<K> {
    /// A source named `name` (`configmap`, `secret`).
    pub fn new(name: SourceName, client: Client, settings: ObjectSourceSettings) -> Self {
        Self {
            name,
            client,
            settings,
            kind: PhantomData,
        }
    }
}

/// One kind of object as the shared run loop reads it: its metadata watches,
/// a GET of one object, and how an object (or its absence) is observed.
pub(crate) trait ObjectReader: Send + Sync + 'static {
    /// What a GET returns.
    type Object: Send + 'static;

    /// The source's name, for logs and metrics.
    fn source_name(&self) -> &SourceName;

    /// The metadata of a fetched object (its resourceVersion, its provenance).
    fn object_meta(object: &Self::Object) -> &ObjectMeta;

    /// Reads one object now; `None` when it does not exist.
    fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Self::Object>, kube::Error>> + Send;

    /// The observation of `tracked` given the object (or its absence).
    fn observation(
        &self,
        tracked: &Tracked,
        object: Option<&Self::Object>,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError>;

    /// One metadata watch per namespace stream; `health` counts their restarts.
    fn meta_streams(&self, health: &WatchHealth) -> Vec<BoxStream<'static, MetaEvent>>;
}

/// An object's metadata as the sources' watches read it: its name, namespace,
/// resourceVersion and annotations, nothing else. Listed and watched
/// metadata-only, like kube's `PartialObjectMeta` (`metadata_api`), but
/// `managedFields` (a JSON tree per field manager), labels and the rest are
/// skipped while reading instead of built and dropped: at the benchmark's
/// 10× the watches list 200,000 ConfigMaps and Secrets at start-up, and
/// reading their `managedFields` was most of that work.
#[derive(Debug)]
pub(crate) struct ObjectStub<K> {
    metadata: ObjectMeta,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for ObjectStub<K> {
    fn clone(&self) -> Self {
        Self {
            metadata: self.metadata.clone(),
            kind: PhantomData,
        }
    }
}

impl<'de, K> serde::Deserialize<'de> for ObjectStub<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// The fields read; serde skips every other one without building it.
        #[derive(serde::Deserialize)]
        struct Object {
            #[serde(default)]
            metadata: Meta,
        }
        #[derive(serde::Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            name: Option<String>,
            namespace: Option<String>,
            resource_version: Option<String>,
            annotations: Option<std::collections::BTreeMap<String, String>>,
        }
        let Object { metadata } = Object::deserialize(deserializer)?;
        Ok(Self {
            metadata: ObjectMeta {
                name: metadata.name,
                namespace: metadata.namespace,
                resource_version: metadata.resource_version,
                annotations: metadata.annotations,
                ..ObjectMeta::default()
            },
            kind: PhantomData,
        })
    }
}

impl<K: Resource> Resource for ObjectStub<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn metadata_api() -> bool {
        true
    }

    fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// One metadata-only watch per namespace stream of `settings`, each over the
/// API `api` gives for its namespace (`None`: all), reduced to [`MetaEvent`]s.
/// A failing watch is logged and counted as a restart of `source`'s watch.
pub(crate) fn meta_streams<K>(
    source: &SourceName,
    settings: &ObjectSourceSettings,
    health: &WatchHealth,
    api: impl Fn(Option<&str>) -> Api<ObjectStub<K>>,
) -> Vec<BoxStream<'static, MetaEvent>>
where
    K: Resource + Debug + Send + Sync + 'static,
    K::DynamicType: Debug,
{
    settings
        .scope
        .streams()
        .into_iter()
        .map(|ns| {
            // An Api over ObjectStub asks for metadata-only responses.
            let api = api(ns.as_deref());
            let mut config = settings.scope.watcher_config(&ns).page_size(META_PAGE);
            if !settings.label_selector.is_empty() {
                config = config.labels(&settings.label_selector);
            }
            let scheme = settings.scheme.clone();
            let source = source.clone();
            let health = health.clone();
            watcher(api, config)
                .default_backoff()
                .filter_map(move |event| {
                    let event = match event {
                        Ok(event) => to_meta_event(event, &scheme, &ns),
                        Err(error) => {
                            let error = crate::errors::watch_failure(&error);
                            tracing::warn!(%source, %error, "metadata watch failed; retrying");
                            health.restarted(source.as_str());
                            None
                        }
                    };
                    futures::future::ready(event)
                })
                .boxed()
        })
        .collect()
}

impl<K: ContentObject> ObjectReader for ObjectSource<K> {
    type Object = K;

    fn source_name(&self) -> &SourceName {
        &self.name
    }

    fn object_meta(object: &K) -> &ObjectMeta {
        object.meta()
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<K>, kube::Error> {
        Api::<K>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
    }

    fn observation(
        &self,
        tracked: &Tracked,
        object: Option<&K>,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        let Some(object) = object else {
            return Ok(Observation::Absent);
        };
        let data = object.data();
        let keys = &*tracked.reference.keys;
        let fingerprint = match tracked.algorithm {
            Algorithm::Native => {
                fingerprint::native_object(K::KIND, &data.narrowed(keys), cx.key())
            }
            Algorithm::Wave => Fingerprint::Wave(fingerprint::wave_fragment(&data.narrowed(keys))),
            Algorithm::Reloader => fingerprint::reloader_object(K::KIND, &data),
            Algorithm::ReloaderSha512 => fingerprint::reloader_object_sha512_256(K::KIND, &data),
            Algorithm::Md5 => {
                return Err(SourceError::UnsupportedAlgorithm {
                    source_name: self.name.clone(),
                    algorithm: tracked.algorithm,
                });
            }
        };
        Ok(Observation::Present(fingerprint))
    }

    fn meta_streams(&self, health: &WatchHealth) -> Vec<BoxStream<'static, MetaEvent>> {
        let client = self.client.clone();
        meta_streams(&self.name, &self.settings, health, |ns| match ns {
            Some(ns) => Api::<ObjectStub<K>>::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        })
    }
}

/// The object's resourceVersion, stored inline (it is short).
fn resource_version<M: Resource>(object: &M) -> Option<Name> {
    object.meta().resource_version.as_deref().map(Name::from)
}

fn object_key<M: Resource>(meta: &M) -> Option<ObjectKey> {
    let meta = meta.meta();
    Some((
        meta.namespace.as_deref()?.into(),
        meta.name.as_deref()?.into(),
    ))
}

fn to_meta_event<K: Resource>(
    event: watcher::Event<ObjectStub<K>>,
    scheme: &AnnotationScheme,
    stream: &Option<String>,
) -> Option<MetaEvent> {
    let seen = |meta: &ObjectStub<K>, initial: bool| {
        Some(MetaEvent::Seen {
            key: object_key(meta)?,
            version: resource_version(meta),
            ignored: is_ignored(meta.annotations(), scheme),
            matched: meta
                .annotations()
                .get(RELOADER_MATCH)
                .is_some_and(|v| v == "true"),
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

/// The running state of one object source.
struct Runner<R: ObjectReader> {
    source: Arc<R>,
    cx: ObserveContext,
    /// Boxed: a map's slots run a quarter to a half empty, and an object's
    /// state (80 bytes, one per referenced object: 24,000 at xl) would take
    /// room in the empty ones too.
    watched: HashMap<ObjectKey, Box<Watched>>,
    /// Per metadata stream being relisted, the objects it has listed so far.
    relisting: HashMap<Option<String>, HashSet<ObjectKey>>,
    /// Metadata streams that have listed once, of how many.
    listed: HashSet<Option<String>>,
    streams: usize,
    fetches: JoinSet<Fetched<R::Object>>,
    /// Fetches waiting for a slot, and retries waiting for their time.
    queued: std::collections::VecDeque<(ObjectKey, u64)>,
    retries: DelayQueue<ObjectKey>,
    updates: tokio::sync::mpsc::Sender<SourceUpdate>,
    /// Where GET latency and errors are recorded.
    metrics: SourceMetrics,
}

impl<R: ObjectReader> Runner<R> {
    fn on_interest(&mut self, interest: Interest) {
        match interest {
            Interest::Track(tracked) => {
                let Some(key) = namespaced_key(&tracked) else {
                    tracing::warn!(%tracked, "reference without namespace; ignoring");
                    return;
                };
                let watched = self.watched.entry(key.clone()).or_default();
                if watched.items.get(&tracked).is_none() {
                    watched.items.insert(tracked, false);
                    // Tracked during a relist, the object may have been listed
                    // before it was watched: the fetch says whether it exists.
                    mark_seen(&mut self.relisting, &key);
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

    /// GETs the object, within the fetch concurrency limit; the result comes back
    /// through the join set tagged with a new sequence number.
    fn fetch(&mut self, key: ObjectKey) {
        let Some(watched) = self.watched.get_mut(&key) else {
            return;
        };
        watched.started += 1;
        let seq = watched.started;
        if self.fetches.len() >= FETCH_CONCURRENCY {
            self.queued.push_back((key, seq));
            return;
        }
        self.spawn_fetch(key, seq);
    }

    fn spawn_fetch(&mut self, key: ObjectKey, seq: u64) {
        let source = self.source.clone();
        let span = tracing::debug_span!("fetch", namespace = %key.0, name = %key.1);
        self.fetches.spawn(
            async move {
                let started = tokio::time::Instant::now();
                let result = source.get(&key.0, &key.1).await;
                let took = started.elapsed();
                Fetched {
                    key,
                    seq,
                    result,
                    took,
                }
            }
            .instrument(span),
        );
    }

    /// Starts the next queued fetch whose object is still watched.
    fn next_queued(&mut self) {
        while self.fetches.len() < FETCH_CONCURRENCY {
            let Some((key, seq)) = self.queued.pop_front() else {
                // The start-up burst queues a fetch per watched object; keep
                // none of that room once it is drained.
                self.queued.shrink_to(FETCH_CONCURRENCY);
                return;
            };
            if self.watched.get(&key).is_some_and(|w| w.started == seq) {
                self.spawn_fetch(key, seq);
            }
        }
    }

    async fn on_fetched(&mut self, fetched: Fetched<R::Object>) -> bool {
        self.next_queued();
        let Fetched {
            key,
            seq,
            result,
            took,
        } = fetched;
        let name = self.source.source_name().as_str();
        self.metrics.observe_took(name, took);
        let Some(watched) = self.watched.get_mut(&key) else {
            return true;
        };
        let object = match result {
            Ok(object) => object,
            Err(error) => {
                // A failed GET is a backend error, as `observe` reports it.
                self.metrics.failed(name, "backend");
                if seq == watched.started {
                    let delay = watched
                        .backoff
                        .get_or_insert_with(|| {
                            Box::new(Backoff::new(FIRST_FETCH_RETRY, MAX_FETCH_RETRY))
                        })
                        .next_delay();
                    tracing::warn!(namespace = %key.0, name = %key.1, %error, retry_in = ?delay, "fetch failed; retrying");
                    self.retries.insert(key, delay);
                }
                return true;
            }
        };
        watched.backoff = None;
        // A later GET started after this one answers with newer content.
        if seq <= watched.applied {
            return true;
        }
        watched.applied = seq;
        watched.fetched = object
            .as_ref()
            .and_then(|object| R::object_meta(object).resource_version.as_deref())
            .map(Name::from);
        watched.reported = true;
        let mut updates = Vec::new();
        for (tracked, reported) in watched.items.iter_mut() {
            // Outside the gate the first observation stays in force.
            if tracked.gate == Gate::ReloaderMatch && !watched.matched && *reported {
                continue;
            }
            *reported = true;
            match self.source.observation(tracked, object.as_ref(), &self.cx) {
                Ok(observation) => {
                    let update = SourceUpdate::new(tracked.clone(), observation);
                    updates.push(match object.as_ref() {
                        Some(object) => {
                            update.with_provenance(provenance_of(R::object_meta(object)))
                        }
                        None => update,
                    });
                }
                Err(error) => {
                    self.metrics.failed(name, error.category());
                    tracing::warn!(%tracked, %error, "cannot fingerprint");
                }
            }
        }
        for update in updates {
            if self.updates.send(update).await.is_err() {
                return false;
            }
        }
        true
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
                matched,
                initial,
            } => {
                let Some(watched) = self.watched.get_mut(&key) else {
                    return;
                };
                if initial {
                    // Only watched objects are remembered: unreferenced ones are
                    // most of a cluster, and nothing is owed when they vanish.
                    mark_seen(&mut self.relisting, &key);
                }
                watched.matched = matched;
                let changed = watched.fetched.is_none() || watched.fetched != version;
                // An ignored object keeps its last reported fingerprint.
                if changed && !(ignored && watched.reported) {
                    self.fetch(key);
                }
            }
            MetaEvent::Deleted(key) => self.report_absent(&key).await,
            MetaEvent::InitDone(stream) => {
                self.listed.insert(stream.clone());
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
        let items: Vec<Tracked> = watched.items.keys().cloned().collect();
        for tracked in items {
            let update = SourceUpdate::new(tracked, Observation::Absent);
            if self.updates.send(update).await.is_err() {
                return;
            }
        }
    }
}

/// Records `key` as listed by the relist of the stream covering it, if one runs.
fn mark_seen(relisting: &mut HashMap<Option<String>, HashSet<ObjectKey>>, key: &ObjectKey) {
    if let Some((_, seen)) = relisting.iter_mut().find(|(s, _)| in_stream(s, key)) {
        seen.insert(key.clone());
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

    /// A ConfigMap or Secret name: a DNS-1123 subdomain.
    fn check_reference(&self, reference: &str) -> Result<(), String> {
        crate::annotations::check_object_name(reference).map_err(str::to_owned)
    }

    fn supports(&self, algorithm: Algorithm) -> bool {
        algorithm != Algorithm::Md5
    }

    async fn observe(
        &self,
        tracked: &Tracked,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        let (namespace, name) =
            namespaced_key(tracked).ok_or_else(|| SourceError::InvalidReference {
                source_name: self.name.clone(),
                reference: tracked.reference.name.to_string(),
                reason: "a namespaced source needs a namespace".into(),
            })?;
        let object = self
            .get(&namespace, &name)
            .await
            .map_err(|e| SourceError::backend(&self.name, format!("GET {namespace}/{name}"), e))?;
        self.observation(tracked, object.as_ref(), cx)
    }

    async fn run(self: Arc<Self>, ctx: SourceContext) -> Result<(), SourceError> {
        let (parts, health) = ctx.into_parts();
        run_objects(self, parts, &health).await;
        Ok(())
    }
}

/// Runs an object source until shutdown: its metadata watches, the GETs of
/// the objects it is asked to track, their observations. Ready once every
/// metadata watch has listed.
pub(crate) async fn run_objects<R: ObjectReader>(
    source: Arc<R>,
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
    let streams = source.meta_streams(health);
    let mut runner = Runner {
        source,
        cx: observe,
        watched: HashMap::new(),
        relisting: HashMap::new(),
        listed: HashSet::new(),
        streams: streams.len(),
        fetches: JoinSet::new(),
        queued: std::collections::VecDeque::new(),
        retries: DelayQueue::new(),
        updates,
        metrics: health.sources().clone(),
    };
    let mut meta = futures::stream::select_all(streams);
    loop {
        if runner.listed.len() == runner.streams {
            ready.listed();
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(request) = interest.recv() => runner.on_interest(request),
            Some(done) = runner.fetches.join_next() => {
                let Ok(fetched) = done else { continue };
                if !runner.on_fetched(fetched).await {
                    break;
                }
            }
            Some(retry) = runner.retries.next() => runner.fetch(retry.into_inner()),
            Some(event) = meta.next() => runner.on_meta(event).await,
            else => break,
        }
    }
    runner.fetches.shutdown().await;
}

/// Who changed `meta`'s object last: the manager and time of its latest
/// `managedFields` entry, with its `resourceVersion`.
pub(crate) fn provenance_of(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Provenance {
    let latest = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.manager.is_some())
        .max_by_key(|entry| entry.time.as_ref().map(|t| t.0));
    let mut provenance = Provenance {
        version: meta.resource_version.clone(),
        ..Provenance::default()
    };
    if let Some(entry) = latest {
        let at = entry.time.as_ref().map(|t| t.0.to_string());
        provenance = provenance.changed_by(entry.manager.clone().unwrap_or_default(), at);
    }
    provenance
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One per referenced object (24,000 at the benchmark's 10×): past 80
    /// bytes it costs the next allocator size class, 96.
    #[test]
    fn an_objects_state_fits_an_80_byte_allocation() {
        assert!(size_of::<Watched>() <= 80, "{} bytes", size_of::<Watched>());
    }
}
