//! The workloads `nudge explain` judges a wave plan with (design §5d): those
//! sharing an input with the explained workload, of every kind nudge stamps
//! (the core's dependency graph sees them all), read with one LIST per kind
//! and place. Which kinds and which places are pure ([`kinds_to_list`],
//! [`reach`]); the rest is I/O.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams};

use super::{ExplainError, Neighbour, read_workload};
use crate::annotations::{self, AnnotationScheme};
use crate::config::{Config, TargetConfig};
use crate::model::{SourceCatalog, TemplatePath, Tracked, Workload, WorkloadKind};
use crate::scope::NamespaceScope;
use crate::targets::{KubeTarget, Target, TargetSettings, TargetSetupError};

/// A kind whose workloads may share an input with the explained one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KindToList {
    /// A built-in kind (Deployment, StatefulSet, DaemonSet, CronJob, Job),
    /// served under its plural.
    Builtin(WorkloadKind, &'static str),
    /// A kind found by API discovery: Argo Rollouts (when its CRD is
    /// served), a `[[targets]]` entry. Skipped when not served.
    Discovered(TargetConfig),
}

impl KindToList {
    /// `group/Kind`, what two entries for the same kind share.
    fn key(&self) -> (String, String) {
        match self {
            Self::Builtin(kind, _) => (kind.group().to_owned(), kind.as_str().to_owned()),
            Self::Discovered(entry) => (entry.group.clone(), entry.kind.clone()),
        }
    }
}

/// Every kind nudge stamps with `config`, as `nudge run` builds its targets:
/// the built-in ones, Argo Rollouts, the `[[targets]]` entries; each once,
/// and none whose kind an embedder's target (`custom`) takes over.
pub(crate) fn kinds_to_list(config: &Config, custom: &[&WorkloadKind]) -> Vec<KindToList> {
    let mut seen: BTreeSet<(String, String)> = custom
        .iter()
        .map(|k| (k.group().to_owned(), k.as_str().to_owned()))
        .collect();
    let builtin = super::builtin_kinds_with_batch();
    let argo = TargetConfig {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        kind: "Rollout".into(),
        template: "spec.template".into(),
    };
    builtin
        .map(|(kind, plural)| KindToList::Builtin(kind, plural))
        .chain([KindToList::Discovered(argo)])
        .chain(
            config
                .targets
                .kinds
                .iter()
                .cloned()
                .map(KindToList::Discovered),
        )
        .filter(|kind| seen.insert(kind.key()))
        .collect()
}

/// Where the workloads sharing an input can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Every input is a namespaced Kubernetes object: the workloads of these
    /// namespaces (the inputs'; the workload's own, as references are
    /// written).
    Namespaces(BTreeSet<String>),
    /// An input is cluster-wide (a Consul key, an embedder's external
    /// source): workloads of any namespace nudge watches.
    Everywhere,
}

/// Where the workloads sharing an input of `tracked` can be.
pub(crate) fn reach(tracked: &BTreeSet<Tracked>) -> Reach {
    let mut namespaces = BTreeSet::new();
    for tracked in tracked {
        match &tracked.reference.namespace {
            Some(namespace) => namespaces.insert(namespace.to_string()),
            None => return Reach::Everywhere,
        };
    }
    Reach::Namespaces(namespaces)
}

/// One LIST: a namespace (`None`: all) and the field selector leaving out
/// ignored namespaces.
type Place = (Option<String>, Option<String>);

/// The LISTs `reach` needs within `scope`.
pub(crate) fn places(reach: &Reach, scope: &NamespaceScope) -> Vec<Place> {
    match reach {
        Reach::Namespaces(namespaces) => namespaces
            .iter()
            .filter(|ns| scope.contains(ns))
            .map(|ns| (Some(ns.clone()), None))
            .collect(),
        Reach::Everywhere => scope
            .streams()
            .into_iter()
            .map(|stream| {
                let fields = scope.field_selector(&stream);
                (stream, fields)
            })
            .collect(),
    }
}

/// What the listing needs besides the kinds.
pub(crate) struct Lookup<'a> {
    pub(crate) client: &'a kube::Client,
    pub(crate) config: &'a Config,
    pub(crate) scheme: &'a AnnotationScheme,
    pub(crate) catalog: &'a SourceCatalog,
    /// An embedder's targets (each read by GET, having no LIST).
    pub(crate) custom: &'a [Arc<dyn Target>],
}

/// The workloads of every kind nudge stamps that share one of `tracked`
/// (the explained workload's inputs) with `workload`, within the configured
/// namespace scope (`kubernetes.namespaces`, `ignore_namespaces`,
/// `namespace_selector`). A kind the API server does not serve is skipped.
pub(crate) async fn neighbours(
    lookup: &Lookup<'_>,
    workload: &Workload,
    tracked: &BTreeSet<Tracked>,
) -> Result<Vec<Neighbour>, ExplainError> {
    let config = lookup.config;
    let scope = NamespaceScope {
        namespaces: config.kubernetes.namespaces.clone(),
        ignore: config.kubernetes.ignore_namespaces.clone(),
    };
    let places = places(&reach(tracked), &scope);
    let selected = selected_namespaces(lookup.client, &config.kubernetes.namespace_selector)
        .await
        .map_err(|source| ExplainError::Neighbours {
            kind: "Namespace".into(),
            namespace: String::new(),
            source,
        })?;
    let pick = |other: Workload| {
        let same = other.id.namespace == workload.id.namespace
            && other.id.name == workload.id.name
            && other.id.kind.group() == workload.id.kind.group()
            && other.id.kind.as_str() == workload.id.kind.as_str();
        let selected = selected
            .as_ref()
            .is_none_or(|s| s.contains(other.id.namespace.as_str()));
        if same || !selected {
            return None;
        }
        let deps = annotations::dependencies(&other, lookup.scheme, lookup.catalog);
        let shares = deps.tracked().any(|t| tracked.contains(t));
        shares.then_some(Neighbour {
            workload: other,
            deps,
        })
    };
    let custom: Vec<&WorkloadKind> = lookup.custom.iter().map(|t| t.kind()).collect();
    let listed = kinds_to_list(config, &custom)
        .into_iter()
        .map(|kind| list_kind(lookup, kind, &places, &pick));
    let read = lookup
        .custom
        .iter()
        .map(|target| read_custom(lookup.client, &**target, &places, &pick));
    let (listed, read) = futures::join!(join_all(listed), join_all(read));
    let mut found = Vec::new();
    for neighbours in listed.into_iter().chain(read) {
        found.extend(neighbours?);
    }
    Ok(found)
}

/// The namespaces `kubernetes.namespace_selector` selects; `None` without one.
async fn selected_namespaces(
    client: &kube::Client,
    selector: &str,
) -> Result<Option<BTreeSet<String>>, kube::Error> {
    if selector.is_empty() {
        return Ok(None);
    }
    let params = ListParams::default().labels(selector);
    let listed = Api::<Namespace>::all(client.clone())
        .list_metadata(&params)
        .await?;
    Ok(Some(
        listed
            .items
            .into_iter()
            .filter_map(|ns| ns.metadata.name)
            .collect(),
    ))
}

/// The neighbours of one kind, one LIST per place.
async fn list_kind(
    lookup: &Lookup<'_>,
    kind: KindToList,
    places: &[Place],
    pick: &impl Fn(Workload) -> Option<Neighbour>,
) -> Result<Vec<Neighbour>, ExplainError> {
    let settings = TargetSettings::from_config(lookup.config);
    let target = match kind {
        KindToList::Builtin(kind, plural) => {
            KubeTarget::new(lookup.client.clone(), kind, plural, settings)
        }
        KindToList::Discovered(entry) => {
            let Ok(template) = TemplatePath::parse(&entry.template) else {
                return Ok(Vec::new()); // refused at load; `nudge run` skips it too
            };
            let client = lookup.client.clone();
            let (group, version, kind) = (&entry.group, &entry.version, &entry.kind);
            match KubeTarget::discover(client, group, version, kind, template, settings).await {
                Ok(target) => target,
                Err(error) if not_stamped(&error) => return Ok(Vec::new()),
                Err(TargetSetupError::Discovery { kind, source, .. }) => {
                    return Err(ExplainError::Neighbours {
                        kind,
                        namespace: String::new(),
                        source,
                    });
                }
                Err(error) => return Err(ExplainError::NotServed(Box::new(error))),
            }
        }
    };
    let mut found = Vec::new();
    for (namespace, fields) in places {
        match target
            .list(namespace.as_deref(), fields.as_deref(), pick)
            .await
        {
            Ok(neighbours) => found.extend(neighbours),
            // A built-in kind this API server does not serve (a plain-text
            // 404, which kube cannot parse as a NotFound Status).
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(found),
            Err(source) => {
                return Err(ExplainError::Neighbours {
                    kind: target.kind().as_str().to_owned(),
                    namespace: namespace.clone().unwrap_or_default(),
                    source,
                });
            }
        }
    }
    Ok(found)
}

/// Whether `nudge run` would not stamp the kind at all: not served (no CRD),
/// or cluster-scoped.
fn not_stamped(error: &TargetSetupError) -> bool {
    error.is_absent() || matches!(error, TargetSetupError::ClusterScoped { .. })
}

/// The neighbours of an embedder's target: its trait has no LIST, so names
/// are listed (metadata only) and each read through the target. A kind the
/// API server does not serve (not a Kubernetes kind) is skipped.
async fn read_custom(
    client: &kube::Client,
    target: &dyn Target,
    places: &[Place],
    pick: &impl Fn(Workload) -> Option<Neighbour>,
) -> Result<Vec<Neighbour>, ExplainError> {
    let kind = target.kind();
    let gvk = GroupVersionKind::gvk(kind.group(), kind.version(), kind.as_str());
    let Ok((resource, _)) = kube::discovery::pinned_kind(client, &gvk).await else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for (namespace, fields) in places {
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let mut params = ListParams::default();
        if let Some(fields) = fields {
            params = params.fields(fields);
        }
        let listing = |source| ExplainError::Neighbours {
            kind: kind.as_str().to_owned(),
            namespace: namespace.clone().unwrap_or_default(),
            source,
        };
        let names = api.list_metadata(&params).await.map_err(listing)?;
        for object in names.items {
            let (Some(ns), Some(name)) = (object.metadata.namespace, object.metadata.name) else {
                continue;
            };
            let Ok(other) = read_workload(target, &ns, &name).await else {
                continue; // deleted meanwhile
            };
            found.extend(pick(other));
        }
    }
    Ok(found)
}
