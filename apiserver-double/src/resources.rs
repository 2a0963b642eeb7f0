//! The resource types the double serves, and what is known about each.

use serde_json::{Value, json};

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
    Lease,
    MutatingWebhookConfiguration,
}

/// One served resource (`group/version/plural`).
#[derive(Debug)]
pub(crate) struct ResourceType {
    /// API group, empty for the core group.
    pub group: &'static str,
    /// API version inside the group.
    pub version: &'static str,
    /// Plural resource name as used in URLs.
    pub plural: &'static str,
    /// Singular name for discovery.
    pub singular: &'static str,
    /// Object kind.
    pub kind: &'static str,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Discovery short names.
    pub short_names: &'static [&'static str],
    /// Discovery categories.
    pub categories: &'static [&'static str],
    /// Strategy.
    pub family: Family,
}

impl ResourceType {
    /// `apiVersion` of the objects, e.g. `apps/v1` or `v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `kind` of list responses.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// `plural.group` (or `plural` for the core group), as in error messages.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Workloads have a pod template, a generation and a status subresource.
    pub fn is_workload(&self) -> bool {
        matches!(
            self.family,
            Family::Deployment | Family::StatefulSet | Family::DaemonSet
        )
    }

    /// Whether `metadata.generation` is maintained for this resource.
    pub fn has_generation(&self) -> bool {
        self.is_workload() || self.family == Family::MutatingWebhookConfiguration
    }

    /// Whether the resource has a `/status` subresource (and its main
    /// endpoint therefore ignores `status`).
    pub fn has_status_subresource(&self) -> bool {
        self.is_workload() || self.family == Family::Namespace
    }

    /// Whether a PUT of a missing object creates it.
    pub fn allow_create_on_update(&self) -> bool {
        matches!(self.family, Family::CoreEvent | Family::EventsV1)
    }

    /// Field selectors accepted besides `metadata.name` and `metadata.namespace`.
    pub fn extra_field_selectors(&self) -> &'static [&'static str] {
        match self.family {
            Family::Secret => &["type"],
            Family::Namespace => &["status.phase"],
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
        }
    }

    /// The JSON form of the kind's Go zero value (fields serialized even
    /// when empty). Used as the "live" object of a create when computing
    /// managed fields, and to fill always-present fields into stored objects.
    pub fn skeleton(&self) -> Value {
        let template = json!({"metadata": {}, "spec": {"containers": null}});
        match self.family {
            Family::Namespace => json!({"metadata": {}, "spec": {}, "status": {}}),
            Family::ConfigMap | Family::Secret | Family::MutatingWebhookConfiguration => {
                json!({"metadata": {}})
            }
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
            Family::Lease => json!({"metadata": {}, "spec": {}}),
        }
    }
}

/// Builds a table row (v1 resources only).
#[allow(clippy::too_many_arguments)]
const fn rt(
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    family: Family,
) -> ResourceType {
    ResourceType {
        group,
        version: "v1",
        plural,
        singular,
        kind,
        namespaced,
        short_names,
        categories,
        family,
    }
}

/// Every served resource. The index into this table identifies a resource
/// inside the store.
pub(crate) static RESOURCES: &[ResourceType] = &[
    rt(
        "",
        "namespaces",
        "namespace",
        "Namespace",
        false,
        &["ns"],
        &[],
        Family::Namespace,
    ),
    rt(
        "",
        "configmaps",
        "configmap",
        "ConfigMap",
        true,
        &["cm"],
        &[],
        Family::ConfigMap,
    ),
    rt(
        "",
        "secrets",
        "secret",
        "Secret",
        true,
        &[],
        &[],
        Family::Secret,
    ),
    rt(
        "",
        "events",
        "event",
        "Event",
        true,
        &["ev"],
        &[],
        Family::CoreEvent,
    ),
    rt(
        "events.k8s.io",
        "events",
        "event",
        "Event",
        true,
        &["ev"],
        &[],
        Family::EventsV1,
    ),
    rt(
        "apps",
        "deployments",
        "deployment",
        "Deployment",
        true,
        &["deploy"],
        &["all"],
        Family::Deployment,
    ),
    rt(
        "apps",
        "statefulsets",
        "statefulset",
        "StatefulSet",
        true,
        &["sts"],
        &["all"],
        Family::StatefulSet,
    ),
    rt(
        "apps",
        "daemonsets",
        "daemonset",
        "DaemonSet",
        true,
        &["ds"],
        &["all"],
        Family::DaemonSet,
    ),
    rt(
        "coordination.k8s.io",
        "leases",
        "lease",
        "Lease",
        true,
        &[],
        &[],
        Family::Lease,
    ),
    rt(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        "MutatingWebhookConfiguration",
        false,
        &[],
        &["api-extensions"],
        Family::MutatingWebhookConfiguration,
    ),
];

/// Index of the namespaces resource in [`RESOURCES`].
pub(crate) const NAMESPACES: usize = 0;

/// Finds a resource by group, version and plural name.
pub(crate) fn lookup(group: &str, version: &str, plural: &str) -> Option<usize> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The API groups served besides the core group, in discovery order.
pub(crate) fn groups() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for r in RESOURCES {
        if !r.group.is_empty() && !out.contains(&r.group) {
            out.push(r.group);
        }
    }
    out
}
