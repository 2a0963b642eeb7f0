//! [`KindSource`]: the objects of one configured Kubernetes kind as a config
//! source (`[sources.kubernetes.<name>]`, design §5b): custom resources, or
//! any other namespaced kind, through kube's dynamic API.
//!
//! It is run by the same loop as ConfigMaps and Secrets (`super::objects`): one
//! metadata-only watch per namespace stream, a GET only of objects some
//! workload references, when their resourceVersion moves; the content is
//! fingerprinted by the configured fields ([`FieldSelection`]) and dropped.
//!
//! With `reference_field`, a reference names the objects whose field holds
//! it, and follows the one written last (`latest`, design §5b): the Secrets
//! Store CSI preset is such an entry.
//!
//! A kind the API server does not serve (its CRD is not installed yet) never
//! holds up `/ready`: the source counts as ready, says so once in the log and
//! in a `/ready` note, and runs discovery again (5 s doubling to 30 s) until
//! the kind is served, then watches it. Meanwhile its references are unknown,
//! never absent: nothing is stamped from a missing CRD.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use tokio_util::sync::CancellationToken;

use super::objects::{MetaEvent, ObjectReader, meta_streams, provenance_of, run_objects};
use super::{ObjectSourceSettings, ObserveContext, Source, SourceContext, SourceError};
use crate::config::{KubernetesSourceConfig, KubernetesSourcePreset};
use crate::fingerprint::{self, Algorithm, FieldSelection, Fingerprint, Observation};
use crate::health::{WatchHealth, WatchReady};
use crate::model::{PodSpecRule, Scope, SourceName, Tracked};
use crate::rate::Backoff;

mod latest;

use latest::{GroupKey, ObjectKey, Written};

/// First and last delay between two discoveries of a kind not served yet.
const FIRST_RECHECK: Duration = Duration::from_secs(5);
const MAX_RECHECK: Duration = Duration::from_secs(30);

/// Why a configured kind cannot be read (yet).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KindError {
    /// The API server does not serve the kind: the path of its group or
    /// version is not found (its CRD is not installed), or the group version
    /// lacks it (the group/version/kind is misspelled).
    #[error("the API server does not serve {api_version} {kind} ({answer}): is its CRD installed?")]
    NotServed {
        /// `group/version`.
        api_version: String,
        /// The kind.
        kind: String,
        /// What the API server answered: `404`, or what discovery found missing.
        answer: String,
    },
    /// Whether the API server serves the kind could not be found out (it is
    /// unreachable, or refused discovery).
    #[error("cannot find out whether the API server serves {api_version} {kind}")]
    Discovery {
        /// `group/version`.
        api_version: String,
        /// The kind.
        kind: String,
        /// What discovery failed with.
        #[source]
        source: kube::Error,
    },
    /// The kind exists but is cluster-scoped; references name objects in the
    /// workload's namespace.
    #[error("{api_version} {kind} is cluster-scoped; sources read namespaced kinds only")]
    ClusterScoped {
        /// `group/version`.
        api_version: String,
        /// The kind.
        kind: String,
    },
}

/// Why a `[sources.kubernetes.<name>]` entry cannot make a source (what
/// configuration validation reports first, naming the key).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KindConfigError {
    /// The section's name is not a source name.
    #[error("{name:?} cannot name a source")]
    Name {
        /// The section's name.
        name: String,
        /// Why.
        #[source]
        source: crate::model::NameError,
    },
    /// A field pointer is not a JSON pointer.
    #[error("sources.kubernetes.{name}.fields")]
    Fields {
        /// The section's name.
        name: String,
        /// Why.
        #[source]
        source: fingerprint::PointerError,
    },
    /// `reference_field` is not a JSON pointer.
    #[error("sources.kubernetes.{name}.reference_field")]
    ReferenceField {
        /// The section's name.
        name: String,
        /// Why.
        #[source]
        source: fingerprint::PointerError,
    },
}

/// The objects of one configured kind as a [`Source`] (see the module docs).
pub struct KindSource {
    name: SourceName,
    client: Client,
    gvk: GroupVersionKind,
    fields: FieldSelection,
    /// Fingerprint keyed with the installation key (secret content).
    secret: bool,
    settings: ObjectSourceSettings,
    /// The API resource (plural); set once discovery finds the kind served.
    resource: OnceLock<ApiResource>,
    /// The kind was found not served and not yet found served again.
    absent: AtomicBool,
    /// `reference_field`: references name this field's value, not objects.
    reference_field: Option<String>,
    /// Where workloads reference these objects in their pod spec.
    rule: Option<PodSpecRule>,
    /// The preset the entry is (the CSI preset also offers Reloader's hashes).
    preset: Option<KubernetesSourcePreset>,
}

// === impl KindSource ===

impl KindSource {
    /// The source `[sources.kubernetes.<name>]` configures, watching the
    /// namespaces of `settings`.
    pub fn from_config(
        name: &str,
        config: &KubernetesSourceConfig,
        client: Client,
        settings: ObjectSourceSettings,
    ) -> Result<Self, KindConfigError> {
        let config = &config.resolved();
        let source_name = SourceName::new(name).map_err(|source| KindConfigError::Name {
            name: name.to_owned(),
            source,
        })?;
        let fields = FieldSelection::new(config.fields.iter().cloned()).map_err(|source| {
            KindConfigError::Fields {
                name: name.to_owned(),
                source,
            }
        })?;
        if !config.reference_field.is_empty() {
            fingerprint::check_pointer(&config.reference_field).map_err(|source| {
                KindConfigError::ReferenceField {
                    name: name.to_owned(),
                    source,
                }
            })?;
        }
        Ok(Self {
            name: source_name,
            client,
            gvk: GroupVersionKind::gvk(&config.group, &config.version, &config.kind),
            fields,
            secret: config.secret,
            settings,
            resource: OnceLock::new(),
            absent: AtomicBool::new(false),
            reference_field: Some(config.reference_field.clone()).filter(|f| !f.is_empty()),
            rule: config
                .discover
                .as_ref()
                .map(|d| PodSpecRule::csi_volume(&d.csi_driver, &d.volume_attribute)),
            preset: config.preset,
        })
    }

    /// The algorithms this source fingerprints with: the native one, and for
    /// the CSI preset Reloader 2's two hashes of a `SecretProviderClassPodStatus`.
    fn algorithms(&self) -> &'static [Algorithm] {
        match self.preset {
            Some(KubernetesSourcePreset::SecretsStoreCsi) => &[
                Algorithm::Native,
                Algorithm::Reloader,
                Algorithm::ReloaderSha512,
            ],
            None => &[Algorithm::Native],
        }
    }

    /// A `reference_field` object reduced to its key, its group (`None` when
    /// the field holds no string), its resourceVersion and its fingerprints;
    /// `None` for an object without a name or namespace.
    fn written(
        &self,
        object: &DynamicObject,
        cx: &ObserveContext,
    ) -> Option<(ObjectKey, Option<GroupKey>, String, Written)> {
        let key = object_key(object)?;
        let value = match serde_json::to_value(object) {
            Ok(value) => value,
            Err(error) => {
                tracing::warn!(source = %self.name, %error, "cannot read the object as JSON; skipping it");
                return None;
            }
        };
        let field = self.reference_field.as_deref().unwrap_or_default();
        let group_value = value.pointer(field).and_then(serde_json::Value::as_str);
        let group = group_value.map(|v| (key.0.clone(), v.into()));
        let fingerprints = self
            .algorithms()
            .iter()
            .map(|algorithm| {
                (
                    *algorithm,
                    self.fingerprint(*algorithm, &value, group_value, cx),
                )
            })
            .collect();
        let written = Written {
            fingerprints,
            provenance: provenance_of(&object.metadata),
        };
        let revision = object.metadata.resource_version.clone().unwrap_or_default();
        Some((key, group, revision, written))
    }

    /// `value`'s fingerprint in `algorithm` (one of [`Self::algorithms`]).
    fn fingerprint(
        &self,
        algorithm: Algorithm,
        value: &serde_json::Value,
        class: Option<&str>,
        cx: &ObserveContext,
    ) -> Fingerprint {
        let class = class.unwrap_or_default();
        match algorithm {
            Algorithm::Reloader => fingerprint::reloader_csi(class, &csi_objects(value)),
            Algorithm::ReloaderSha512 => {
                fingerprint::reloader_csi_sha512_256(class, &csi_objects(value))
            }
            _ if self.preset == Some(KubernetesSourcePreset::SecretsStoreCsi) => {
                fingerprint::native_csi_pod_status(value, self.secret.then(|| cx.key()))
            }
            _ => fingerprint::native_fields(value, &self.fields, self.secret.then(|| cx.key())),
        }
    }

    /// `observe` of a `reference_field` source: the objects of the namespace
    /// listed, the newest holding the reference observed. None yet is an
    /// error, not absence: no pod has recorded anything.
    async fn observe_latest(
        &self,
        tracked: &Tracked,
        namespace: &str,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        let resource = self.resource().await?;
        let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &resource);
        let list = api
            .list(&kube::api::ListParams::default())
            .await
            .map_err(|e| {
                let what = format!("LIST {} in {namespace}", self.gvk.kind);
                SourceError::backend(&self.name, what, e)
            })?;
        let group = group_of(tracked);
        let mut state = latest::Latest::default();
        for object in &list.items {
            if let Some((key, object_group, revision, written)) = self.written(object, cx) {
                state.apply(key, object_group, &revision, written);
            }
        }
        group
            .as_ref()
            .and_then(|group| state.newest(group))
            .and_then(|written| written.observation(tracked.algorithm))
            .ok_or_else(|| {
                let message = format!(
                    "no {} in {namespace} records {:?} yet",
                    self.gvk.kind, tracked.reference.name
                );
                SourceError::backend_message(&self.name, message)
            })
    }

    /// `group/version kind`, for logs and notes.
    fn kind_label(&self) -> String {
        format!("{} {}", self.gvk.api_version(), self.gvk.kind)
    }

    /// Discovers the kind: its API resource when served and namespaced.
    async fn resolve(&self) -> Result<ApiResource, KindError> {
        let api_version = self.gvk.api_version();
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, &self.gvk)
            .await
            .map_err(|source| {
                let kind = self.gvk.kind.clone();
                match crate::errors::not_served_answer(&source) {
                    Some(answer) => KindError::NotServed {
                        api_version: api_version.clone(),
                        kind,
                        answer,
                    },
                    None => KindError::Discovery {
                        api_version: api_version.clone(),
                        kind,
                        source,
                    },
                }
            })?;
        if capabilities.scope != kube::discovery::Scope::Namespaced {
            return Err(KindError::ClusterScoped {
                api_version,
                kind: self.gvk.kind.clone(),
            });
        }
        Ok(resource)
    }

    /// The API resource, discovered once (for `observe`, which cannot wait).
    async fn resource(&self) -> Result<ApiResource, SourceError> {
        if let Some(resource) = self.resource.get() {
            return Ok(resource.clone());
        }
        let resource = self
            .resolve()
            .await
            .map_err(|error| SourceError::backend(&self.name, "cannot read this kind", error))?;
        Ok(self.resource.get_or_init(|| resource).clone())
    }

    /// The API resource, discovering it until the kind is served (checked
    /// again with backoff); `None` on shutdown. Meanwhile the source counts
    /// as ready and reports the kind once.
    async fn served_resource(
        &self,
        ready: &WatchReady,
        shutdown: &CancellationToken,
    ) -> Option<ApiResource> {
        if let Some(resource) = self.resource.get() {
            return Some(resource.clone());
        }
        let mut backoff = Backoff::new(FIRST_RECHECK, MAX_RECHECK);
        loop {
            match self.resolve().await {
                Ok(resource) => {
                    self.report_served(ready);
                    return Some(self.resource.get_or_init(|| resource).clone());
                }
                Err(error) => self.report_absent(ready, &error),
            }
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(backoff.next_delay()) => {}
            }
        }
    }

    /// The kind cannot be read: the source does not hold up `/ready`; the
    /// first time, one log line and a `/ready` note.
    fn report_absent(&self, ready: &WatchReady, error: &KindError) {
        if !self.absent.swap(true, Ordering::Relaxed) {
            let text = crate::errors::error_chain(error);
            let waiting = match error {
                KindError::NotServed { .. } => String::new(),
                KindError::Discovery { .. } => " (checking again)".to_owned(),
                KindError::ClusterScoped { .. } => {
                    format!(" (fix sources.kubernetes.{})", self.name)
                }
            };
            tracing::warn!(source = %self.name, error = %text, "not watching this source until its kind can be read; install its CRD (or fix its sources.kubernetes entry)");
            // Noted before the source counts as ready, so that no `/ready`
            // answer misses it.
            ready.note(format!(
                "not watching source {}: {text}{waiting}",
                self.name
            ));
        }
        ready.listed();
    }

    /// The kind is served (again): clears the note, says so once.
    fn report_served(&self, ready: &WatchReady) {
        if self.absent.swap(false, Ordering::Relaxed) {
            ready.clear_note();
            tracing::info!(source = %self.name, kind = %self.kind_label(), "the API server serves this kind now; watching it");
        }
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        let resource = self.resource.get().cloned().unwrap_or_else(|| {
            // Not discovered: the plural is kube's guess, which the API
            // server answers 404 until the kind is served.
            ApiResource::from_gvk(&self.gvk)
        });
        Api::namespaced_with(self.client.clone(), namespace, &resource)
    }
}

impl ObjectReader for KindSource {
    type Object = DynamicObject;

    fn source_name(&self) -> &SourceName {
        &self.name
    }

    fn object_meta(object: &DynamicObject) -> &ObjectMeta {
        &object.metadata
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<DynamicObject>, kube::Error> {
        self.api(namespace).get_opt(name).await
    }

    fn observation(
        &self,
        tracked: &Tracked,
        object: Option<&DynamicObject>,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        if tracked.algorithm != Algorithm::Native {
            return Err(SourceError::UnsupportedAlgorithm {
                source_name: self.name.clone(),
                algorithm: tracked.algorithm,
            });
        }
        let Some(object) = object else {
            return Ok(Observation::Absent);
        };
        let value = serde_json::to_value(object).map_err(|error| {
            SourceError::backend(&self.name, "cannot read the object as JSON", error)
        })?;
        let key = self.secret.then(|| cx.key());
        Ok(Observation::Present(fingerprint::native_fields(
            &value,
            &self.fields,
            key,
        )))
    }

    fn meta_streams(&self, health: &WatchHealth) -> Vec<BoxStream<'static, MetaEvent>> {
        let client = self.client.clone();
        let resource = self
            .resource
            .get()
            .cloned()
            .unwrap_or_else(|| ApiResource::from_gvk(&self.gvk));
        meta_streams(&self.name, &self.settings, health, |ns| match ns {
            Some(ns) => Api::<PartialObjectMeta<DynamicObject>>::namespaced_with(
                client.clone(),
                ns,
                &resource,
            ),
            None => Api::all_with(client.clone(), &resource),
        })
    }
}

#[async_trait]
impl Source for KindSource {
    fn name(&self) -> &SourceName {
        &self.name
    }

    fn scope(&self) -> Scope {
        Scope::Namespaced
    }

    /// An object name: a DNS-1123 subdomain (with `reference_field`, the
    /// name its objects' field holds, such as a SecretProviderClass's).
    fn check_reference(&self, reference: &str) -> Result<(), String> {
        crate::annotations::check_object_name(reference).map_err(str::to_owned)
    }

    fn supports(&self, algorithm: Algorithm) -> bool {
        self.algorithms().contains(&algorithm)
    }

    fn pod_spec_rule(&self) -> Option<PodSpecRule> {
        self.rule.clone()
    }

    async fn observe(
        &self,
        tracked: &Tracked,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        let reference = &tracked.reference;
        let Some(namespace) = reference.namespace.as_deref() else {
            return Err(SourceError::invalid_reference(
                &self.name,
                reference.name.as_str(),
                "a namespaced source needs a namespace",
            ));
        };
        if self.reference_field.is_some() {
            return self.observe_latest(tracked, namespace, cx).await;
        }
        let resource = self.resource().await?;
        let object =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), namespace, &resource)
                .get_opt(&reference.name)
                .await
                .map_err(|e| {
                    let what = format!("GET {} {namespace}/{}", self.gvk.kind, reference.name);
                    SourceError::backend(&self.name, what, e)
                })?;
        self.observation(tracked, object.as_ref(), cx)
    }

    async fn run(self: Arc<Self>, ctx: SourceContext) -> Result<(), SourceError> {
        let (parts, health) = ctx.into_parts();
        let Some(resource) = self.served_resource(&parts.ready, &parts.shutdown).await else {
            return Ok(());
        };
        if self.reference_field.is_some() {
            latest::run_latest(self, resource, parts, &health).await;
        } else {
            run_objects(self, parts, &health).await;
        }
        Ok(())
    }
}

/// Namespace and name of an object.
fn object_key(object: &DynamicObject) -> Option<ObjectKey> {
    let meta = &object.metadata;
    Some((
        meta.namespace.as_deref()?.into(),
        meta.name.as_deref()?.into(),
    ))
}

/// The group a `reference_field` reference stands for: its namespace and name.
fn group_of(tracked: &Tracked) -> Option<GroupKey> {
    let reference = &tracked.reference;
    Some((reference.namespace.clone()?, reference.name.clone()))
}

/// The `id`/`version` pairs of a `SecretProviderClassPodStatus`'s
/// `status.objects`, as written (entries without an `id` are left out).
fn csi_objects(value: &serde_json::Value) -> Vec<(String, String)> {
    let objects = value.pointer("/status/objects").and_then(|o| o.as_array());
    objects
        .into_iter()
        .flatten()
        .filter_map(|object| {
            let id = object.get("id")?.as_str()?;
            let version = object.get("version").and_then(|v| v.as_str());
            Some((id.to_owned(), version.unwrap_or_default().to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ObjectSourceSettings {
        ObjectSourceSettings {
            scheme: crate::annotations::AnnotationScheme::new("nudge.dev"),
            scope: crate::scope::NamespaceScope::default(),
            label_selector: String::new(),
        }
    }

    /// A client that answers every request with an error (the tests here
    /// read no cluster). Needs a tokio runtime.
    fn offline() -> Client {
        let refuse = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("offline"))
        });
        Client::new(refuse, "default")
    }

    fn gizmos(fields: &[&str], secret: bool) -> KindSource {
        let mut config = KubernetesSourceConfig::new("example.com", "v1", "Gizmo");
        config.fields = fields.iter().map(|f| (*f).to_owned()).collect();
        config.secret = secret;
        KindSource::from_config("gizmo", &config, offline(), settings()).expect("a valid entry")
    }

    fn object(spec_size: u64) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "Gizmo",
            "metadata": { "name": "g", "namespace": "shop", "resourceVersion": spec_size.to_string() },
            "spec": { "size": spec_size },
            "status": { "observed": spec_size },
        }))
        .unwrap()
    }

    fn tracked(algorithm: Algorithm) -> Tracked {
        let name = SourceName::new("gizmo").unwrap();
        Tracked::new(
            crate::model::Reference::object(name, "shop", "g"),
            algorithm,
        )
    }

    fn cx() -> ObserveContext {
        ObserveContext::new(crate::fingerprint::FingerprintKey::new(vec![1; 32]).unwrap())
    }

    #[tokio::test]
    async fn an_object_is_fingerprinted_by_its_configured_fields_and_absence_is_absent() {
        let source = gizmos(&["/spec"], false);
        let observe = |object: Option<&DynamicObject>| {
            source
                .observation(&tracked(Algorithm::Native), object, &cx())
                .unwrap()
        };
        let three = observe(Some(&object(3)));
        let Observation::Present(fingerprint) = &three else {
            panic!("present: {three:?}");
        };
        let expected = fingerprint::native_fields(
            &serde_json::to_value(object(3)).unwrap(),
            &FieldSelection::new(["/spec"]).unwrap(),
            None,
        );
        assert_eq!(*fingerprint, expected);
        assert_ne!(observe(Some(&object(4))), three);
        assert_eq!(observe(None), Observation::Absent);
    }

    #[tokio::test]
    async fn secret_content_is_keyed_and_only_the_native_format_is_offered() {
        let source = gizmos(&[], true);
        let observation = source
            .observation(&tracked(Algorithm::Native), Some(&object(3)), &cx())
            .unwrap();
        let Observation::Present(fingerprint) = observation else {
            panic!("present");
        };
        assert!(fingerprint.as_digest().unwrap().starts_with("hmac-sha256-"));
        let error = source
            .observation(&tracked(Algorithm::Wave), Some(&object(3)), &cx())
            .unwrap_err();
        assert_eq!(error.category(), "unsupported_algorithm");
        assert!(!source.supports(Algorithm::Reloader));
    }

    #[tokio::test]
    async fn a_bad_entry_is_an_error_naming_it_not_a_panic() {
        let mut config = KubernetesSourceConfig::new("example.com", "v1", "Gizmo");
        config.fields = vec!["spec".to_owned()];
        let error = KindSource::from_config("gizmo", &config, offline(), settings());
        let error = error.err().expect("refused");
        assert_eq!(
            crate::errors::error_chain(&error),
            "sources.kubernetes.gizmo.fields: \"spec\" is not a JSON pointer: it must start with \"/\" (e.g. \"/spec\")"
        );
        let bad_name = KindSource::from_config("giz-mo", &config, offline(), settings());
        assert!(matches!(bad_name, Err(KindConfigError::Name { .. })));
        let mut config = KubernetesSourceConfig::new("example.com", "v1", "Gizmo");
        config.reference_field = "spec/owner".to_owned();
        let error = KindSource::from_config("gizmo", &config, offline(), settings());
        let error = error.err().expect("refused");
        assert!(
            crate::errors::error_chain(&error).starts_with(
                "sources.kubernetes.gizmo.reference_field: \"spec/owner\" is not a JSON pointer"
            ),
            "{error}"
        );
    }

    fn csi_source() -> KindSource {
        let config = KubernetesSourceConfig::preset(KubernetesSourcePreset::SecretsStoreCsi);
        KindSource::from_config("csi", &config, offline(), settings()).expect("the preset")
    }

    fn pod_status(pod: &str, class: &str, objects: &[(&str, &str)]) -> DynamicObject {
        let objects: Vec<_> = objects
            .iter()
            .map(|(id, version)| serde_json::json!({ "id": id, "version": version }))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "secrets-store.csi.x-k8s.io/v1", "kind": "SecretProviderClassPodStatus",
            "metadata": { "name": format!("{pod}-shop-{class}"), "namespace": "shop", "resourceVersion": "5" },
            "status": { "podName": pod, "secretProviderClassName": class, "mounted": true,
                        "targetPath": format!("/var/lib/kubelet/pods/{pod}"), "objects": objects },
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn the_csi_preset_groups_pod_statuses_by_class_and_offers_reloaders_hashes() {
        let source = csi_source();
        assert_eq!(
            source.pod_spec_rule(),
            Some(PodSpecRule::csi_volume(
                "secrets-store.csi.k8s.io",
                "secretProviderClass"
            ))
        );
        assert!(source.supports(Algorithm::Reloader) && source.supports(Algorithm::ReloaderSha512));
        let object = pod_status("web-1", "vault", &[("db", "3"), ("api", "12")]);
        let (key, group, revision, written) = source.written(&object, &cx()).unwrap();
        assert_eq!(key, ("shop".into(), "web-1-shop-vault".into()));
        assert_eq!(group, Some(("shop".into(), "vault".into())));
        assert_eq!(revision, "5");
        let pairs = [("db", "3"), ("api", "12")].map(|(i, v)| (i.to_owned(), v.to_owned()));
        let sha1 = fingerprint::reloader_csi("vault", &pairs);
        assert_eq!(
            written.observation(Algorithm::Reloader),
            Some(Observation::Present(sha1))
        );
        // Another pod with the same versions: the same fingerprints, whatever
        // its name and mount path.
        let other = pod_status("web-2", "vault", &[("db", "3"), ("api", "12")]);
        let (_, _, _, other) = source.written(&other, &cx()).unwrap();
        assert_eq!(other.fingerprints, written.fingerprints);
        let rotated = pod_status("web-2", "vault", &[("db", "4"), ("api", "12")]);
        let (_, _, _, rotated) = source.written(&rotated, &cx()).unwrap();
        for algorithm in source.algorithms() {
            assert_ne!(
                rotated.observation(*algorithm),
                written.observation(*algorithm),
                "{algorithm:?}"
            );
        }
    }
}
