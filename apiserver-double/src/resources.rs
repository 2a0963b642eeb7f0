//! The resource types the double serves, and what is known about each.
//!
//! Built-in kinds are a static table ([`BUILTINS`]); custom resources are
//! registered at run time from CustomResourceDefinitions (see
//! [`crate::registry`]). Both end up as a [`ResourceType`] held by the
//! registry, one per served `group/version/plural`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::structural::Structural;

/// Which strategy (defaults, validation, field rules) a resource follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Namespace,
    ConfigMap,
    Secret,
    CoreEvent,
    EventsV1,
    Deployment,
    StatefulSet,
    DaemonSet,
    ReplicaSet,
    ControllerRevision,
    Job,
    CronJob,
    Lease,
    MutatingWebhookConfiguration,
    CustomResourceDefinition,
    ResourceQuota,
    /// A custom resource served from a CustomResourceDefinition.
    Custom,
}

/// What a CustomResourceDefinition says about one served version.
#[derive(Debug)]
pub(crate) struct CustomVersion {
    /// `metadata.name` of the CRD (`<plural>.<group>`).
    pub crd: String,
    /// The version's `openAPIV3Schema` as a structural schema.
    pub schema: Arc<Structural>,
    /// Whether `subresources.status` is declared.
    pub status: bool,
    /// `apiVersion` of stored objects (the CRD's storage version).
    pub storage_api_version: String,
    /// `selectableFields[].jsonPath` without the leading dot.
    pub selectable_fields: Vec<String>,
    /// Whether versions convert through a webhook (which the double cannot call).
    pub webhook_conversion: bool,
}

/// One served resource (`group/version/plural`).
#[derive(Debug)]
pub(crate) struct ResourceType {
    /// API group, empty for the core group.
    pub group: String,
    /// API version inside the group.
    pub version: String,
    /// Plural resource name as used in URLs.
    pub plural: String,
    /// Singular name for discovery.
    pub singular: String,
    /// Object kind.
    pub kind: String,
    /// Kind of list responses.
    pub list_kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Discovery short names.
    pub short_names: Vec<String>,
    /// Discovery categories.
    pub categories: Vec<String>,
    /// Strategy.
    pub family: Family,
    /// The store slot of the objects (shared by the versions of one CRD).
    pub storage: usize,
    /// For custom resources: the CRD's description of this version.
    pub custom: Option<CustomVersion>,
}

impl ResourceType {
    /// `apiVersion` of the objects, e.g. `apps/v1` or `v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural.group` (or `plural` for the core group), as in error messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Workloads with a pod template at `spec.template`, a generation, an
    /// immutable selector and a status subresource (ReplicaSets included:
    /// kube-controller-manager makes them for Deployments).
    pub fn is_workload(&self) -> bool {
        matches!(
            self.family,
            Family::Deployment | Family::StatefulSet | Family::DaemonSet | Family::ReplicaSet
        )
    }

    /// Whether the objects are custom resources.
    pub fn is_custom(&self) -> bool {
        self.family == Family::Custom
    }

    /// Whether `metadata.generation` is maintained for this resource.
    pub fn has_generation(&self) -> bool {
        self.is_workload()
            || matches!(
                self.family,
                Family::MutatingWebhookConfiguration
                    | Family::Job
                    | Family::CronJob
                    | Family::CustomResourceDefinition
                    | Family::Custom
            )
    }

    /// Whether the resource has a `/status` subresource (and its main
    /// endpoint therefore ignores `status`).
    pub fn has_status_subresource(&self) -> bool {
        match self.family {
            Family::Custom => self.custom.as_ref().is_some_and(|c| c.status),
            Family::Namespace
            | Family::Job
            | Family::CronJob
            | Family::CustomResourceDefinition
            | Family::ResourceQuota => true,
            _ => self.is_workload(),
        }
    }

    /// Whether a PUT of a missing object creates it.
    pub fn allow_create_on_update(&self) -> bool {
        matches!(self.family, Family::CoreEvent | Family::EventsV1)
    }

    /// The propagation policy of a DELETE without one: `Orphan` for
    /// `batch/v1` Jobs (kept for backwards compatibility by the apiserver),
    /// `Background` for everything else.
    pub fn default_propagation(&self) -> &'static str {
        if self.family == Family::Job {
            "Orphan"
        } else {
            "Background"
        }
    }

    /// Field selectors accepted besides `metadata.name` and `metadata.namespace`.
    pub fn extra_field_selectors(&self) -> Vec<&str> {
        let fixed: &[&str] = match self.family {
            Family::Secret => &["type"],
            Family::Namespace => &["status.phase"],
            Family::Job => &["status.successful"],
            Family::CoreEvent => &[
                "involvedObject.apiVersion",
                "involvedObject.fieldPath",
                "involvedObject.kind",
                "involvedObject.name",
                "involvedObject.namespace",
                "involvedObject.resourceVersion",
                "involvedObject.uid",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            _ => &[],
        };
        let mut out = fixed.to_vec();
        if let Some(c) = &self.custom {
            out.extend(c.selectable_fields.iter().map(String::as_str));
        }
        out
    }

    /// The JSON form of the kind's Go zero value (fields serialized even
    /// when empty). Used as the "live" object of a create when computing
    /// managed fields, and to fill always-present fields into stored objects.
    pub fn skeleton(&self) -> Value {
        let template = json!({"metadata": {}, "spec": {"containers": null}});
        match self.family {
            Family::Namespace | Family::ResourceQuota => {
                json!({"metadata": {}, "spec": {}, "status": {}})
            }
            Family::ConfigMap
            | Family::Secret
            | Family::MutatingWebhookConfiguration
            | Family::Custom => json!({"metadata": {}}),
            Family::CoreEvent => json!({
                "metadata": {},
                "involvedObject": {},
                "source": {},
                "firstTimestamp": null,
                "lastTimestamp": null,
                "eventTime": null,
                "reportingComponent": "",
                "reportingInstance": ""
            }),
            Family::EventsV1 => json!({
                "metadata": {},
                "eventTime": null,
                "regarding": {},
                "deprecatedSource": {},
                "deprecatedFirstTimestamp": null,
                "deprecatedLastTimestamp": null
            }),
            Family::Deployment => json!({
                "metadata": {},
                "spec": {"selector": null, "template": template, "strategy": {}},
                "status": {}
            }),
            Family::StatefulSet => json!({
                "metadata": {},
                "spec": {"selector": null, "template": template, "updateStrategy": {}},
                "status": {"replicas": 0, "availableReplicas": 0}
            }),
            Family::DaemonSet => json!({
                "metadata": {},
                "spec": {"selector": null, "template": template, "updateStrategy": {}},
                "status": {
                    "currentNumberScheduled": 0,
                    "numberMisscheduled": 0,
                    "desiredNumberScheduled": 0,
                    "numberReady": 0
                }
            }),
            Family::ReplicaSet => json!({
                "metadata": {},
                "spec": {"selector": null, "template": template},
                "status": {"replicas": 0}
            }),
            Family::ControllerRevision => json!({"metadata": {}, "revision": 0}),
            Family::Job => json!({
                "metadata": {},
                "spec": {"template": template},
                "status": {}
            }),
            Family::CronJob => json!({
                "metadata": {},
                "spec": {
                    "schedule": "",
                    "jobTemplate": {"metadata": {}, "spec": {"template": template}}
                },
                "status": {}
            }),
            Family::CustomResourceDefinition => json!({
                "metadata": {},
                "spec": {
                    "group": "",
                    "names": {"plural": "", "kind": ""},
                    "scope": "",
                    "versions": null
                },
                "status": {
                    "acceptedNames": {"plural": "", "kind": ""},
                    "storedVersions": null
                }
            }),
            Family::Lease => json!({"metadata": {}, "spec": {}}),
        }
    }
}

/// A row of the built-in table.
pub(crate) struct Builtin {
    group: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    family: Family,
}

impl Builtin {
    /// The resource type of this row, stored in slot `storage`.
    pub fn to_resource_type(&self, storage: usize) -> ResourceType {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        ResourceType {
            group: self.group.into(),
            version: "v1".into(),
            plural: self.plural.into(),
            singular: self.kind.to_ascii_lowercase(),
            kind: self.kind.into(),
            list_kind: format!("{}List", self.kind),
            namespaced: self.namespaced,
            short_names: strings(self.short_names),
            categories: strings(self.categories),
            family: self.family,
            storage,
            custom: None,
        }
    }
}

/// Builds a table row (v1 resources only).
const fn rt(
    group: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    family: Family,
) -> Builtin {
    Builtin {
        group,
        plural,
        kind,
        namespaced,
        short_names,
        categories,
        family,
    }
}

/// Every built-in resource. The index into this table is the resource's id
/// (and store slot) in every registry.
pub(crate) static BUILTINS: &[Builtin] = &[
    rt(
        "",
        "namespaces",
        "Namespace",
        false,
        &["ns"],
        &[],
        Family::Namespace,
    ),
    rt(
        "",
        "configmaps",
        "ConfigMap",
        true,
        &["cm"],
        &[],
        Family::ConfigMap,
    ),
    rt("", "secrets", "Secret", true, &[], &[], Family::Secret),
    rt("", "events", "Event", true, &["ev"], &[], Family::CoreEvent),
    rt(
        "events.k8s.io",
        "events",
        "Event",
        true,
        &["ev"],
        &[],
        Family::EventsV1,
    ),
    rt(
        "apps",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        &["all"],
        Family::Deployment,
    ),
    rt(
        "apps",
        "statefulsets",
        "StatefulSet",
        true,
        &["sts"],
        &["all"],
        Family::StatefulSet,
    ),
    rt(
        "apps",
        "daemonsets",
        "DaemonSet",
        true,
        &["ds"],
        &["all"],
        Family::DaemonSet,
    ),
    rt("batch", "jobs", "Job", true, &[], &["all"], Family::Job),
    rt(
        "batch",
        "cronjobs",
        "CronJob",
        true,
        &["cj"],
        &["all"],
        Family::CronJob,
    ),
    rt(
        "coordination.k8s.io",
        "leases",
        "Lease",
        true,
        &[],
        &[],
        Family::Lease,
    ),
    rt(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        false,
        &[],
        &["api-extensions"],
        Family::MutatingWebhookConfiguration,
    ),
    rt(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        &["api-extensions"],
        Family::CustomResourceDefinition,
    ),
    // Appended rather than listed beside the other `apps` kinds: ids are
    // store slots, and discovery sorts resources by name anyway.
    rt(
        "apps",
        "replicasets",
        "ReplicaSet",
        true,
        &["rs"],
        &["all"],
        Family::ReplicaSet,
    ),
    rt(
        "apps",
        "controllerrevisions",
        "ControllerRevision",
        true,
        &[],
        &[],
        Family::ControllerRevision,
    ),
    rt(
        "",
        "resourcequotas",
        "ResourceQuota",
        true,
        &["quota"],
        &[],
        Family::ResourceQuota,
    ),
];

/// Id of the namespaces resource.
pub(crate) const NAMESPACES: usize = 0;
/// Id of the ConfigMaps resource.
#[cfg(test)]
pub(crate) const CONFIGMAPS: usize = 1;
/// Id of the Secrets resource.
#[cfg(test)]
pub(crate) const SECRETS: usize = 2;
/// Id of the Deployments resource.
pub(crate) const DEPLOYMENTS: usize = 5;
/// Id of the StatefulSets resource.
pub(crate) const STATEFULSETS: usize = 6;
/// Id of the DaemonSets resource.
pub(crate) const DAEMONSETS: usize = 7;
/// Id of the MutatingWebhookConfigurations resource.
pub(crate) const MUTATING_WEBHOOKS: usize = 11;
/// Id of the CustomResourceDefinitions resource.
pub(crate) const CRDS: usize = 12;
/// Id of the ReplicaSets resource.
pub(crate) const REPLICASETS: usize = 13;
/// Id of the ControllerRevisions resource.
pub(crate) const CONTROLLER_REVISIONS: usize = 14;

/// The resource type of a built-in id (tests).
#[cfg(test)]
pub(crate) fn builtin(id: usize) -> ResourceType {
    BUILTINS[id].to_resource_type(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_ids_point_at_their_kinds() {
        assert_eq!(BUILTINS[NAMESPACES].kind, "Namespace");
        assert_eq!(BUILTINS[CONFIGMAPS].kind, "ConfigMap");
        assert_eq!(BUILTINS[SECRETS].kind, "Secret");
        assert_eq!(BUILTINS[DEPLOYMENTS].kind, "Deployment");
        assert_eq!(BUILTINS[CRDS].kind, "CustomResourceDefinition");
        assert_eq!(BUILTINS[STATEFULSETS].kind, "StatefulSet");
        assert_eq!(BUILTINS[DAEMONSETS].kind, "DaemonSet");
        assert_eq!(BUILTINS[REPLICASETS].kind, "ReplicaSet");
        assert_eq!(BUILTINS[CONTROLLER_REVISIONS].kind, "ControllerRevision");
        assert_eq!(
            BUILTINS[MUTATING_WEBHOOKS].kind,
            "MutatingWebhookConfiguration"
        );
    }
}
