//! `kubernetes.namespace_selector` in the core (design §5): which namespaces
//! workloads may be stamped in, and the workloads of the others, kept aside
//! untracked until their namespace is selected.

use std::collections::{BTreeSet, HashMap};

use crate::model::{Workload, WorkloadId};

/// Which namespaces workloads may be stamped in, and the workloads parked
/// outside them.
pub(super) struct Selection {
    namespaces: Namespaces,
    /// Workloads in namespaces outside the selection: kept, not tracked.
    parked: HashMap<WorkloadId, Workload>,
}

enum Namespaces {
    /// No `namespace_selector`: all (within the watched scope).
    All,
    /// A selector whose first list has not arrived: none yet.
    Pending,
    /// The namespaces the selector matches.
    Selected(BTreeSet<String>),
}

impl Selection {
    /// Every namespace, or (`selector`) none until the first [`Selection::select`].
    pub(super) fn new(selector: bool) -> Self {
        let namespaces = if selector {
            Namespaces::Pending
        } else {
            Namespaces::All
        };
        Self {
            namespaces,
            parked: HashMap::new(),
        }
    }

    /// Whether `id` may be stamped.
    pub(super) fn contains(&self, id: &WorkloadId) -> bool {
        match &self.namespaces {
            Namespaces::All => true,
            Namespaces::Pending => false,
            Namespaces::Selected(set) => set.contains(id.namespace.as_str()),
        }
    }

    /// Whether a selector is in use: then the core keeps whole workloads, to
    /// park one whose namespace leaves the selection.
    pub(super) fn by_selector(&self) -> bool {
        !matches!(self.namespaces, Namespaces::All)
    }

    /// The namespaces selected are now `selected`; the parked workloads that
    /// enter it, no longer parked.
    pub(super) fn select(&mut self, selected: BTreeSet<String>) -> Vec<Workload> {
        self.namespaces = Namespaces::Selected(selected);
        let entering: Vec<WorkloadId> = self
            .parked
            .keys()
            .filter(|id| self.contains(id))
            .cloned()
            .collect();
        entering
            .iter()
            .filter_map(|id| self.parked.remove(id))
            .collect()
    }

    pub(super) fn park(&mut self, id: WorkloadId, workload: Workload) {
        self.parked.insert(id, workload);
    }

    pub(super) fn unpark(&mut self, id: &WorkloadId) {
        self.parked.remove(id);
    }

    pub(super) fn parked(&self) -> impl Iterator<Item = &WorkloadId> {
        self.parked.keys()
    }
}
