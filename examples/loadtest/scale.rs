//! How big a run is: the scales and their targets.

use std::time::Duration;

use super::model::WORKLOADS_PER_NAMESPACE;

/// How a run's workloads are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Ten workloads per namespace with fixed roles (see `Model::build`);
    /// changes never share a dependent.
    Standard,
    /// One workload (a Deployment) with a ConfigMap volume under `nudge.dev/auto`
    /// and one Consul key: the smallest real install. Each change is made once
    /// the previous one's PATCH arrived, so each owes exactly one PATCH.
    Single,
}

/// The targets for one scale (reported, never enforced).
#[derive(Debug, Clone, Copy)]
pub struct Targets {
    pub steady_mib: f64,
    pub peak_mib: f64,
    pub ready_seconds: f64,
    pub p99_ms: f64,
}

/// How big a run is.
#[derive(Debug, Clone)]
pub struct Scale {
    pub name: &'static str,
    pub layout: Layout,
    pub namespaces: usize,
    pub configmaps_per_namespace: usize,
    pub secrets_per_namespace: usize,
    /// Unreferenced Secrets added per namespace before the last nudge run.
    pub extra_secrets_per_namespace: usize,
    /// Sizes of ConfigMap and Secret content, bytes.
    pub object_bytes: (usize, usize),
    pub changes: usize,
    /// Time between two changes when the source kinds take turns; changed one
    /// kind at a time, each kind keeps its cadence: one change every
    /// `change_interval` × the number of kinds.
    pub change_interval: Duration,
    /// Idle period over which CPU is measured.
    pub idle: Duration,
    /// How long a restarted nudge is watched for PATCHes after it is ready.
    pub restart_watch: Duration,
    /// How long without a new stamp ends a wait for stamps (a PATCH too many
    /// arriving later shows as a count failure).
    pub quiet: Duration,
    /// The targets of this scale; `None`: counts only (CI).
    pub targets: Option<Targets>,
}

impl Scale {
    /// The smallest real install: one workload, one ConfigMap, one Consul key.
    pub fn small() -> Self {
        Self {
            name: "small",
            layout: Layout::Single,
            namespaces: 1,
            configmaps_per_namespace: 1,
            secrets_per_namespace: 0,
            extra_secrets_per_namespace: 100,
            object_bytes: (1024, 20 * 1024),
            changes: 100,
            change_interval: Duration::from_millis(600),
            idle: Duration::from_secs(60),
            restart_watch: Duration::from_secs(10),
            quiet: Duration::from_secs(3),
            targets: Some(Targets {
                steady_mib: 14.0,
                peak_mib: 24.0,
                ready_seconds: 1.0,
                p99_ms: 20.0,
            }),
        }
    }

    /// Issue 7's scale (1×): 10k ConfigMaps, 10k Secrets, 200 namespaces, 2k
    /// workloads, 2k Consul keys.
    pub fn large() -> Self {
        Self {
            name: "large",
            layout: Layout::Standard,
            namespaces: 200,
            configmaps_per_namespace: 50,
            secrets_per_namespace: 50,
            extra_secrets_per_namespace: 150,
            object_bytes: (1024, 20 * 1024),
            changes: 500,
            change_interval: Duration::from_millis(100),
            idle: Duration::from_secs(60),
            restart_watch: Duration::from_secs(20),
            quiet: Duration::from_secs(3),
            targets: Some(Targets {
                steady_mib: 24.0,
                peak_mib: 48.0,
                ready_seconds: 5.0,
                p99_ms: 20.0,
            }),
        }
    }

    /// 10×: large's namespace, 2,000 times: 100k ConfigMaps, 100k Secrets, 20k
    /// workloads, 20k Consul keys; +300k unreferenced Secrets for the last run.
    pub fn xl() -> Self {
        Self {
            name: "xl",
            namespaces: 2000,
            targets: Some(Targets {
                steady_mib: 48.0,
                peak_mib: 96.0,
                ready_seconds: 5.0,
                p99_ms: 20.0,
            }),
            ..Self::large()
        }
    }

    /// The CI scale: counts only, well under 60 s on a debug build, changes
    /// made quickly (one every 120 ms per source kind).
    pub fn ci() -> Self {
        Self {
            name: "ci",
            layout: Layout::Standard,
            namespaces: 10,
            configmaps_per_namespace: 20,
            secrets_per_namespace: 20,
            extra_secrets_per_namespace: 20,
            object_bytes: (1024, 20 * 1024),
            changes: 45,
            change_interval: Duration::from_millis(40),
            idle: Duration::from_secs(3),
            restart_watch: Duration::from_secs(4),
            quiet: Duration::from_secs(2),
            targets: None,
        }
    }

    /// The scale called `name`.
    pub fn named(name: &str) -> Option<Self> {
        Some(match name {
            "ci" => Self::ci(),
            "small" => Self::small(),
            "large" => Self::large(),
            "xl" => Self::xl(),
            _ => return None,
        })
    }

    pub fn workloads(&self) -> usize {
        match self.layout {
            Layout::Standard => self.namespaces * WORKLOADS_PER_NAMESPACE,
            Layout::Single => 1,
        }
    }
}
