//! Workload kinds: an API group, version and kind, and where the kind keeps its
//! pod template. An open set: built-in kinds, kinds from `[[targets]]`
//! configuration and kinds of targets registered by code are all values of one type.

use std::fmt;
use std::sync::{Arc, LazyLock};

use serde::{Serialize, Serializer};

/// Where a kind keeps its pod template, as field names from the object's root:
/// `spec.template` (Deployment), `spec.jobTemplate.spec.template` (CronJob).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TemplatePath(Vec<String>);

/// Why a template path was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplatePathError {
    /// The path is empty, has an empty segment, or does not start under `spec`.
    #[error(
        "{0:?} is not a pod template path: expected dot-separated field names under spec, e.g. spec.template"
    )]
    Invalid(String),
}

impl TemplatePath {
    /// `spec.template`.
    pub(crate) fn spec_template() -> Self {
        Self(vec!["spec".into(), "template".into()])
    }

    /// Parses `spec.template`, `spec.jobTemplate.spec.template`, …
    pub fn parse(value: &str) -> Result<Self, TemplatePathError> {
        let segments: Vec<String> = value.split('.').map(str::to_owned).collect();
        let valid = segments.len() >= 2
            && segments[0] == "spec"
            && segments.iter().all(|s| {
                !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            });
        if valid {
            Ok(Self(segments))
        } else {
            Err(TemplatePathError::Invalid(value.to_owned()))
        }
    }

    /// The field names, from the object's root.
    pub(crate) fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

impl fmt::Display for TemplatePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

/// A kind of workload nudge can stamp. Cheap to clone; equal when group and kind
/// are equal (the version is how nudge talks to it, not what it is).
#[derive(Clone)]
pub struct WorkloadKind(Arc<KindInfo>);

struct KindInfo {
    group: String,
    version: String,
    kind: String,
    template: TemplatePath,
    /// The `kind` metric label: the kind in lower case.
    label: String,
    /// Whether a first stamp is adopted into metadata (see
    /// [`Output::Adopted`](super::Output::Adopted)) because writing the template
    /// has side effects (CronJob: a run; Job: a recreation).
    adopt_first_stamp: bool,
    /// Whether the API server refuses changes to the pod template of a stored
    /// object (Job): only a new object can carry a new stamp.
    immutable_template: bool,
}

static DEPLOYMENT: LazyLock<WorkloadKind> =
    LazyLock::new(|| WorkloadKind::new("apps", "v1", "Deployment", TemplatePath::spec_template()));
static STATEFUL_SET: LazyLock<WorkloadKind> =
    LazyLock::new(|| WorkloadKind::new("apps", "v1", "StatefulSet", TemplatePath::spec_template()));
static DAEMON_SET: LazyLock<WorkloadKind> =
    LazyLock::new(|| WorkloadKind::new("apps", "v1", "DaemonSet", TemplatePath::spec_template()));

impl WorkloadKind {
    /// A kind served at `group/version` (empty group: the core group) whose pod
    /// template is at `template`.
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
        template: TemplatePath,
    ) -> Self {
        let kind = kind.into();
        Self(Arc::new(KindInfo {
            group: group.into(),
            version: version.into(),
            label: kind.to_ascii_lowercase(),
            kind,
            template,
            adopt_first_stamp: false,
            immutable_template: false,
        }))
    }

    /// The same kind, adopting its first stamps into workload metadata instead of
    /// writing them on the pod template (for kinds whose template change has side
    /// effects).
    pub(crate) fn adopting_first_stamp(self) -> Self {
        self.with(|info| info.adopt_first_stamp = true)
    }

    /// Whether first stamps are adopted into workload metadata.
    pub(crate) fn adopts_first_stamp(&self) -> bool {
        self.0.adopt_first_stamp
    }

    /// The same kind, whose stored objects' pod template cannot change (a Job):
    /// the admission webhook stamps it at creation only, and nothing holds its
    /// pods with a scheduling gate.
    pub(crate) fn with_immutable_template(self) -> Self {
        self.with(|info| info.immutable_template = true)
    }

    /// Whether a stored object's pod template cannot change.
    pub(crate) fn has_immutable_template(&self) -> bool {
        self.0.immutable_template
    }

    /// Whether its controller enforces a progress deadline of its own (a
    /// Deployment's `progressDeadlineSeconds`, reported as
    /// `ProgressDeadlineExceeded`); every other kind is judged by nudge's own
    /// deadline (design §5c).
    pub(crate) fn has_own_progress_deadline(&self) -> bool {
        self.group() == "apps" && self.as_str() == "Deployment"
    }

    /// The same kind, served at `version`.
    pub(crate) fn at_version(&self, version: impl Into<String>) -> Self {
        let version = version.into();
        self.clone().with(|info| info.version = version)
    }

    fn with(self, change: impl FnOnce(&mut KindInfo)) -> Self {
        let info = &self.0;
        let mut copy = KindInfo {
            group: info.group.clone(),
            version: info.version.clone(),
            kind: info.kind.clone(),
            template: info.template.clone(),
            label: info.label.clone(),
            adopt_first_stamp: info.adopt_first_stamp,
            immutable_template: info.immutable_template,
        };
        change(&mut copy);
        Self(Arc::new(copy))
    }

    /// `apps/v1` Deployment.
    pub(crate) fn deployment() -> Self {
        DEPLOYMENT.clone()
    }

    /// `apps/v1` StatefulSet.
    pub(crate) fn stateful_set() -> Self {
        STATEFUL_SET.clone()
    }

    /// `apps/v1` DaemonSet.
    pub(crate) fn daemon_set() -> Self {
        DAEMON_SET.clone()
    }

    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        &self.0.group
    }

    /// The API version inside the group.
    pub fn version(&self) -> &str {
        &self.0.version
    }

    /// `apiVersion` of the objects: `apps/v1`, `argoproj.io/v1alpha1`, `v1`.
    pub fn api_version(&self) -> String {
        if self.0.group.is_empty() {
            self.0.version.clone()
        } else {
            format!("{}/{}", self.0.group, self.0.version)
        }
    }

    /// The Kubernetes `kind` string.
    pub fn as_str(&self) -> &str {
        &self.0.kind
    }

    /// Where the pod template is.
    pub(crate) fn template_path(&self) -> &TemplatePath {
        &self.0.template
    }

    /// The kind in lower case, as metric labels and command lines spell it.
    pub(crate) fn label(&self) -> &str {
        &self.0.label
    }

    fn identity(&self) -> (&str, &str) {
        (&self.0.group, &self.0.kind)
    }
}

impl PartialEq for WorkloadKind {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for WorkloadKind {}

impl PartialOrd for WorkloadKind {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for WorkloadKind {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.identity().cmp(&other.identity())
    }
}

impl std::hash::Hash for WorkloadKind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl fmt::Debug for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version(), self.0.kind)
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.kind)
    }
}

impl Serialize for WorkloadKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_equal_by_group_and_kind_whatever_the_version() {
        let v1 = WorkloadKind::new("apps", "v1", "Deployment", TemplatePath::spec_template());
        let beta = WorkloadKind::new(
            "apps",
            "v1beta2",
            "Deployment",
            TemplatePath::spec_template(),
        );
        assert_eq!(v1, beta);
        assert_eq!(v1, WorkloadKind::deployment());
        assert_ne!(WorkloadKind::deployment(), WorkloadKind::stateful_set());
        let other_group = WorkloadKind::new(
            "example.com",
            "v1",
            "Deployment",
            TemplatePath::spec_template(),
        );
        assert_ne!(other_group, v1);
    }

    #[test]
    fn api_version_of_the_core_group_has_no_slash() {
        let pod_template = TemplatePath::parse("spec.template").unwrap();
        assert_eq!(
            WorkloadKind::new("", "v1", "X", pod_template).api_version(),
            "v1"
        );
        assert_eq!(WorkloadKind::deployment().api_version(), "apps/v1");
        assert_eq!(WorkloadKind::deployment().label(), "deployment");
    }

    #[test]
    fn template_paths_are_field_names_under_spec() {
        let path = TemplatePath::parse("spec.jobTemplate.spec.template").unwrap();
        assert_eq!(path.to_string(), "spec.jobTemplate.spec.template");
        assert_eq!(path.segments().count(), 4);
        for bad in [
            "",
            "spec",
            "template",
            "spec..template",
            "status.template",
            "spec.a/b",
        ] {
            assert!(TemplatePath::parse(bad).is_err(), "{bad:?}");
        }
    }
}
