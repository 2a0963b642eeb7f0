//! `[kubernetes]`.

use serde::{Deserialize, Serialize};

use super::{Problem, is_dns_label, selector};

/// `[kubernetes]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct KubernetesConfig {
    /// Namespaces whose workloads, ConfigMaps and Secrets are watched; empty
    /// means all namespaces.
    pub namespaces: Vec<String>,
    /// Namespaces never watched (left out server-side).
    pub ignore_namespaces: Vec<String>,
    /// Label selector on Namespace objects: only workloads in matching namespaces
    /// are stamped (empty: no such restriction). Followed live. Reloader's
    /// `key:value` form is read as `key=value` (`key:*`: has the label).
    pub namespace_selector: String,
    /// Server-side label selector for the ConfigMap and Secret watches (empty:
    /// every object). Objects outside it are never fetched nor fingerprinted.
    /// Reloader's `key:value` form is read as for `namespace_selector`.
    pub source_label_selector: String,
    /// Built-in workload kinds never stamped, by kind or plural, any case:
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `CronJob`, `Job`, `Rollout`
    /// (Argo). Reloader's `--ignored-workload-types=jobs,cronjobs` is
    /// `["jobs", "cronjobs"]`.
    pub ignore_kinds: Vec<String>,
    /// Field manager of nudge's server-side applies.
    pub field_manager: String,
    /// The namespace nudge runs in (its key Secret, Lease and webhook Secret live
    /// there). Empty: the pod's namespace in a cluster, else the current kubeconfig
    /// context's namespace (as kubectl does). The manifests set it from the pod.
    pub namespace: String,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            ignore_namespaces: Vec::new(),
            namespace_selector: String::new(),
            source_label_selector: String::new(),
            ignore_kinds: Vec::new(),
            field_manager: "nudge".to_owned(),
            namespace: String::new(),
        }
    }
}

impl KubernetesConfig {
    pub(super) fn namespaces_problem(&self) -> Problem {
        let lists = [
            ("kubernetes.namespaces", &self.namespaces),
            ("kubernetes.ignore_namespaces", &self.ignore_namespaces),
        ];
        for (key, namespaces) in lists {
            for (i, namespace) in namespaces.iter().enumerate() {
                if !is_dns_label(namespace) {
                    return Some((
                        key,
                        format!("entry {i} ({namespace:?}) is not a namespace name"),
                    ));
                }
            }
        }
        if !self.namespace.is_empty() && !is_dns_label(&self.namespace) {
            return Some((
                "kubernetes.namespace",
                format!("{:?} is not a namespace name", self.namespace),
            ));
        }
        None
    }

    /// The label selectors, each as kube-apiserver would parse it.
    pub(crate) fn selectors_problem(&self) -> Problem {
        let selectors = [
            ("kubernetes.namespace_selector", &self.namespace_selector),
            (
                "kubernetes.source_label_selector",
                &self.source_label_selector,
            ),
        ];
        selectors.into_iter().find_map(|(key, text)| {
            selector::label_selector(text).err().map(|problem| {
                (
                    key,
                    format!("({text:?}) is not a label selector: {problem}"),
                )
            })
        })
    }

    /// Every `ignore_kinds` entry names a built-in kind.
    pub(crate) fn kinds_problem(&self) -> Problem {
        let unknown = self
            .ignore_kinds
            .iter()
            .find(|name| builtin_kind(name).is_none())?;
        let known: Vec<&str> = BUILTIN_KINDS.iter().map(|(kind, _)| *kind).collect();
        Some((
            "kubernetes.ignore_kinds",
            format!(
                "{unknown:?} is not a built-in kind ({}; a [[targets]] kind is turned off by removing its entry)",
                known.join(", ")
            ),
        ))
    }

    /// Whether the built-in kind `kind` (`CronJob`, …) is turned off by
    /// `ignore_kinds`.
    pub(crate) fn ignores_kind(&self, kind: &str) -> bool {
        ignores_kind(&self.ignore_kinds, kind)
    }

    /// Checked after `[[targets]]`, as it always was.
    pub(super) fn field_manager_problem(&self) -> Problem {
        if self.field_manager.is_empty() {
            return Some(("kubernetes.field_manager", "must not be empty".to_owned()));
        }
        None
    }
}

/// The built-in workload kinds `kubernetes.ignore_kinds` turns off: each kind
/// and its plural (Reloader's `--ignored-workload-types` takes `jobs` and
/// `cronjobs`).
const BUILTIN_KINDS: [(&str, &str); 6] = [
    ("Deployment", "deployments"),
    ("StatefulSet", "statefulsets"),
    ("DaemonSet", "daemonsets"),
    ("CronJob", "cronjobs"),
    ("Job", "jobs"),
    ("Rollout", "rollouts"),
];

/// Whether `ignore_kinds` (`kubernetes.ignore_kinds`) names the built-in kind
/// `kind`.
pub(crate) fn ignores_kind(ignore_kinds: &[String], kind: &str) -> bool {
    ignore_kinds
        .iter()
        .any(|name| builtin_kind(name).is_some_and(|k| k.eq_ignore_ascii_case(kind)))
}

/// The built-in kind `name` names, by kind or plural, in any case.
fn builtin_kind(name: &str) -> Option<&'static str> {
    BUILTIN_KINDS
        .iter()
        .find(|(kind, plural)| name.eq_ignore_ascii_case(kind) || name.eq_ignore_ascii_case(plural))
        .map(|(kind, _)| *kind)
}
