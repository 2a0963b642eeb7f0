//! The dependency graph: which [`Tracked`] items each workload depends on, and which
//! workloads depend on each tracked item (design §5).
//!
//! Updated when a workload is added or changed ([`DependencyGraph::apply`]) or
//! deleted ([`DependencyGraph::delete`]); each update reports which tracked items a
//! source must start fingerprinting and which nobody uses any more.

use std::collections::{BTreeSet, HashMap};

use crate::model::{Combine, StampSpec, Tracked, WorkloadId};
use crate::small::SmallSet;

/// What an update changed in the set of tracked items.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GraphDelta {
    /// Items no workload used before this update: their source starts tracking them.
    /// Sorted.
    pub newly_tracked: Vec<Tracked>,
    /// Items no workload uses any more after this update: their source stops
    /// tracking them and their fingerprints can be forgotten. Sorted.
    pub droppable: Vec<Tracked>,
}

impl GraphDelta {
    /// Whether the update changed nothing that sources need to know.
    pub fn is_empty(&self) -> bool {
        self.newly_tracked.is_empty() && self.droppable.is_empty()
    }
}

/// Workloads → their stamp specs, and tracked items → the workloads using them.
#[derive(Debug, Default)]
pub struct DependencyGraph {
    specs: HashMap<WorkloadId, Vec<StampSpec>>,
    dependents: HashMap<Tracked, SmallSet<WorkloadId>>,
}

impl DependencyGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces everything `id` depends on with `specs` (a workload was added, or its
    /// annotations or pod spec changed). Applying the same specs again returns an
    /// empty delta. A workload with no specs is not kept: that is the same as
    /// [`delete`](Self::delete).
    pub fn apply(&mut self, id: WorkloadId, specs: Vec<StampSpec>) -> GraphDelta {
        if specs.is_empty() {
            return self.delete(&id);
        }
        let old = self
            .specs
            .get(&id)
            .map(|s| tracked_of(s))
            .unwrap_or_default();
        let new = tracked_of(&specs);
        let delta = GraphDelta {
            newly_tracked: self.link(&id, new.difference(&old)),
            droppable: self.unlink(&id, old.difference(&new)),
        };
        let specs = self.share_tracked(compact(specs));
        self.specs.insert(id, specs);
        delta
    }

    /// Forgets a deleted workload.
    pub fn delete(&mut self, id: &WorkloadId) -> GraphDelta {
        let Some(specs) = self.specs.remove(id) else {
            return GraphDelta::default();
        };
        GraphDelta {
            newly_tracked: Vec::new(),
            droppable: self.unlink(id, tracked_of(&specs).iter()),
        }
    }

    /// The workloads that depend on `tracked`, in order.
    pub fn dependents(&self, tracked: &Tracked) -> impl Iterator<Item = &WorkloadId> {
        self.dependents.get(tracked).into_iter().flatten()
    }

    /// The graph's copy of `tracked`, while some workload depends on it.
    pub fn shared(&self, tracked: &Tracked) -> Option<&Tracked> {
        self.dependents
            .get_key_value(tracked)
            .map(|(shared, _)| shared)
    }

    /// The stamp specs of a workload, or `None` when the graph does not know it.
    pub fn specs(&self, id: &WorkloadId) -> Option<&[StampSpec]> {
        self.specs.get(id).map(Vec::as_slice)
    }

    /// Every workload in the graph, in no particular order.
    pub fn workloads(&self) -> impl Iterator<Item = &WorkloadId> {
        self.specs.keys()
    }

    /// Every tracked item, in no particular order (e.g. to resync a source).
    pub fn tracked(&self) -> impl Iterator<Item = &Tracked> {
        self.dependents.keys()
    }

    /// Number of workloads with at least one stamp spec (metric).
    pub fn workload_count(&self) -> usize {
        self.specs.len()
    }

    /// Number of distinct tracked items (metric).
    pub fn tracked_count(&self) -> usize {
        self.dependents.len()
    }

    /// Points each input at the graph's copy of its item, so the graph, the store
    /// and the sources hold one copy however many workloads use it.
    fn share_tracked(&self, mut specs: Vec<StampSpec>) -> Vec<StampSpec> {
        for input in specs.iter_mut().flat_map(|spec| &mut spec.inputs) {
            if let Some(shared) = self.shared(&input.tracked) {
                input.tracked = shared.clone();
            }
        }
        specs
    }

    /// Adds `id` as a dependent of each item; returns the items nobody used before.
    fn link<'a>(
        &mut self,
        id: &WorkloadId,
        items: impl Iterator<Item = &'a Tracked>,
    ) -> Vec<Tracked> {
        let mut fresh = Vec::new();
        for tracked in items {
            let users = self.dependents.entry(tracked.clone()).or_default();
            if users.is_empty() {
                fresh.push(tracked.clone());
            }
            users.insert(id.clone());
        }
        fresh
    }

    /// Removes `id` as a dependent of each item; returns the items nobody uses now.
    fn unlink<'a>(
        &mut self,
        id: &WorkloadId,
        items: impl Iterator<Item = &'a Tracked>,
    ) -> Vec<Tracked> {
        let mut dropped = Vec::new();
        for tracked in items {
            let Some(users) = self.dependents.get_mut(tracked) else {
                continue;
            };
            users.remove(id);
            if users.is_empty() {
                self.dependents.remove(tracked);
                dropped.push(tracked.clone());
            }
        }
        dropped
    }
}

/// The distinct tracked items of a workload's specs, sorted.
fn tracked_of(specs: &[StampSpec]) -> BTreeSet<Tracked> {
    specs
        .iter()
        .flat_map(|spec| &spec.inputs)
        .map(|input| input.tracked.clone())
        .collect()
}

/// Specs are kept as long as their workload: without the spare capacity their
/// vectors grew with (at least four slots for one input), and without the
/// origins of their references (a copy of each reference and a description),
/// which stamping reads only for Reloader's `last-reloaded-from` (it names
/// containers). `nudge explain` derives its own specs from the workload.
fn compact(mut specs: Vec<StampSpec>) -> Vec<StampSpec> {
    for spec in &mut specs {
        spec.inputs.shrink_to_fit();
        if spec.combine == Combine::ReloaderSource {
            spec.origins.shrink_to_fit();
        } else {
            spec.origins = Vec::new();
        }
    }
    specs.shrink_to_fit();
    specs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::Algorithm;
    use crate::model::{Input, Output, Reference, SourceName, WorkloadKind};

    fn mk_id(name: &str) -> WorkloadId {
        WorkloadId::new(WorkloadKind::deployment(), "ns", name)
    }

    fn mk_tracked(name: &str) -> Tracked {
        Tracked::new(
            Reference::object(SourceName::configmap(), "ns", name),
            Algorithm::Native,
        )
    }

    fn mk_spec(slot: &str, inputs: &[&str]) -> StampSpec {
        StampSpec {
            output: Output::PodTemplateAnnotation(format!("nudge.dev/checksum-{slot}")),
            combine: Combine::NativeHash,
            inputs: inputs
                .iter()
                .map(|name| Input {
                    tracked: mk_tracked(name),
                    optional: false,
                })
                .collect(),
            origins: Vec::new(),
        }
    }

    fn mk_tracked_list(names: &[&str]) -> Vec<Tracked> {
        names.iter().map(|n| mk_tracked(n)).collect()
    }

    #[test]
    fn first_apply_tracks_every_input() {
        let mut graph = DependencyGraph::new();
        let delta = graph.apply(
            mk_id("web"),
            vec![mk_spec("a", &["b", "a"]), mk_spec("c", &["a"])],
        );
        assert_eq!(delta.newly_tracked, mk_tracked_list(&["a", "b"]));
        assert!(delta.droppable.is_empty());
        assert_eq!(graph.workload_count(), 1);
        assert_eq!(graph.tracked_count(), 2);
    }

    #[test]
    fn same_specs_again_give_an_empty_delta() {
        let mut graph = DependencyGraph::new();
        graph.apply(mk_id("web"), vec![mk_spec("a", &["a", "b"])]);
        let delta = graph.apply(mk_id("web"), vec![mk_spec("a", &["a", "b"])]);
        assert!(delta.is_empty(), "{delta:?}");
        assert_eq!(graph.tracked_count(), 2);
    }

    #[test]
    fn replace_reports_droppable_and_newly_tracked_references() {
        let mut graph = DependencyGraph::new();
        graph.apply(mk_id("web"), vec![mk_spec("a", &["a", "b"])]);
        let delta = graph.apply(mk_id("web"), vec![mk_spec("a", &["b", "c"])]);
        assert_eq!(delta.newly_tracked, mk_tracked_list(&["c"]));
        assert_eq!(delta.droppable, mk_tracked_list(&["a"]));
        assert_eq!(graph.dependents(&mk_tracked("a")).count(), 0);
        assert_eq!(
            graph.dependents(&mk_tracked("c")).collect::<Vec<_>>(),
            [&mk_id("web")]
        );
        assert_eq!(graph.tracked_count(), 2);
    }

    #[test]
    fn shared_reference_is_not_droppable_while_another_workload_uses_it() {
        let mut graph = DependencyGraph::new();
        graph.apply(mk_id("web"), vec![mk_spec("a", &["shared", "own"])]);
        let second = graph.apply(mk_id("api"), vec![mk_spec("a", &["shared"])]);
        assert!(
            second.newly_tracked.is_empty(),
            "shared was already tracked"
        );

        let delta = graph.delete(&mk_id("web"));
        assert_eq!(delta.droppable, mk_tracked_list(&["own"]));
        assert_eq!(
            graph.dependents(&mk_tracked("shared")).collect::<Vec<_>>(),
            [&mk_id("api")]
        );

        let last = graph.delete(&mk_id("api"));
        assert_eq!(last.droppable, mk_tracked_list(&["shared"]));
        assert_eq!((graph.workload_count(), graph.tracked_count()), (0, 0));
    }

    #[test]
    fn dependents_lists_every_user_in_order() {
        let mut graph = DependencyGraph::new();
        graph.apply(mk_id("b"), vec![mk_spec("x", &["cfg"])]);
        graph.apply(mk_id("a"), vec![mk_spec("x", &["cfg"])]);
        let users: Vec<_> = graph.dependents(&mk_tracked("cfg")).cloned().collect();
        assert_eq!(users, [mk_id("a"), mk_id("b")]);
    }

    #[test]
    fn applying_no_specs_forgets_the_workload() {
        let mut graph = DependencyGraph::new();
        graph.apply(mk_id("web"), vec![mk_spec("a", &["a"])]);
        let delta = graph.apply(mk_id("web"), Vec::new());
        assert_eq!(delta.droppable, mk_tracked_list(&["a"]));
        assert!(graph.specs(&mk_id("web")).is_none());
        assert_eq!(graph.workload_count(), 0);
    }

    #[test]
    fn deleting_an_unknown_workload_changes_nothing() {
        let mut graph = DependencyGraph::new();
        graph.apply(mk_id("web"), vec![mk_spec("a", &["a"])]);
        assert!(graph.delete(&mk_id("other")).is_empty());
        assert_eq!(graph.tracked_count(), 1);
    }

    #[test]
    fn specs_are_replaced_even_when_tracked_items_stay_the_same() {
        let mut graph = DependencyGraph::new();
        graph.apply(mk_id("web"), vec![mk_spec("a", &["a"])]);
        let delta = graph.apply(mk_id("web"), vec![mk_spec("renamed", &["a"])]);
        assert!(delta.is_empty());
        let specs = graph.specs(&mk_id("web")).unwrap();
        assert_eq!(specs[0].output.key(), "nudge.dev/checksum-renamed");
    }

    #[test]
    fn origins_are_kept_only_where_stamping_reads_them() {
        let with_origin = |combine| {
            let mut spec = mk_spec("a", &["a"]);
            spec.combine = combine;
            let reference = spec.inputs[0].tracked.reference.clone();
            spec.origins = vec![(
                reference,
                crate::model::Origin::Discovered(r#"env in container "app""#.into()),
            )];
            spec
        };
        let mut graph = DependencyGraph::new();
        graph.apply(
            mk_id("web"),
            vec![
                with_origin(Combine::NativeHash),
                with_origin(Combine::ReloaderSource),
            ],
        );
        let specs = graph.specs(&mk_id("web")).unwrap();
        assert!(specs[0].origins.is_empty());
        assert_eq!(
            specs[1].origins.len(),
            1,
            "Reloader's document names containers"
        );
    }

    #[test]
    fn workloads_using_one_item_share_the_graphs_copy() {
        let mut graph = DependencyGraph::new();
        let delta = graph.apply(mk_id("web"), vec![mk_spec("a", &["cfg"])]);
        graph.apply(mk_id("api"), vec![mk_spec("a", &["cfg"])]);
        let key = graph.tracked().next().unwrap().clone();
        assert!(
            delta.newly_tracked[0].shares(&key),
            "sources get the graph's copy"
        );
        for id in [mk_id("web"), mk_id("api")] {
            let input = &graph.specs(&id).unwrap()[0].inputs[0];
            assert!(input.tracked.shares(&key), "{id}");
        }
    }
}
