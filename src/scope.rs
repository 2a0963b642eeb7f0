//! Which namespaces nudge works in: the `kubernetes.namespaces` allow-list,
//! `kubernetes.ignore_namespaces` (a server-side field selector, so ignored
//! namespaces are never even sent) and `kubernetes.namespace_selector` (a label
//! selector on Namespace objects, followed live by [`watch_selected_namespaces`]).

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

/// The namespaces watch streams cover.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceScope {
    /// Watch only these namespaces (one stream each); empty: all namespaces.
    pub namespaces: Vec<String>,
    /// Never watch these.
    pub ignore: Vec<String>,
}

impl NamespaceScope {
    /// Whether workloads in `namespace` are nudge's to stamp (the label selector
    /// aside, which only the controller follows).
    pub fn contains(&self, namespace: &str) -> bool {
        let allowed = self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace);
        allowed && !self.ignore.iter().any(|n| n == namespace)
    }

    /// The watch streams: one per allowed namespace, or one (`None`) for all.
    pub fn streams(&self) -> Vec<Option<String>> {
        if self.namespaces.is_empty() {
            return vec![None];
        }
        self.namespaces
            .iter()
            .filter(|ns| !self.ignore.contains(ns))
            .cloned()
            .map(Some)
            .collect()
    }

    /// The server-side field selector of an all-namespaces stream that leaves out
    /// the ignored namespaces; `None` when there is nothing to leave out.
    pub fn field_selector(&self, stream: &Option<String>) -> Option<String> {
        if stream.is_some() || self.ignore.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .ignore
            .iter()
            .map(|ns| format!("metadata.namespace!={ns}"))
            .collect();
        Some(parts.join(","))
    }

    /// The watcher configuration for `stream`.
    pub fn watcher_config(&self, stream: &Option<String>) -> watcher::Config {
        let config = watcher::Config::default();
        match self.field_selector(stream) {
            Some(fields) => config.fields(&fields),
            None => config,
        }
    }
}

/// The namespaces matching the label `selector`: the whole set after the first
/// list and after every change. A watch error is logged and the watch resumes
/// with backoff. The engine polls the stream itself, so no task is left behind.
pub fn selected_namespaces(
    client: Client,
    selector: &str,
) -> impl futures::Stream<Item = BTreeSet<String>> + Send + 'static {
    let config = watcher::Config::default().labels(selector);
    let events = watcher(Api::<Namespace>::all(client), config).default_backoff();
    let mut selection = Selection::default();
    events.filter_map(move |event| futures::future::ready(selection.apply(event)))
}

/// The state behind [`selected_namespaces`].
#[derive(Default)]
struct Selection {
    listing: BTreeSet<String>,
    current: BTreeSet<String>,
    listed: bool,
}

impl Selection {
    /// Applies one watch event; the new set when it changed (or was first listed).
    fn apply(
        &mut self,
        event: Result<watcher::Event<Namespace>, watcher::Error>,
    ) -> Option<BTreeSet<String>> {
        match event {
            Ok(watcher::Event::Init) => {
                self.listing.clear();
                None
            }
            Ok(watcher::Event::InitApply(ns)) => {
                self.listing.insert(ns.name_any());
                None
            }
            Ok(watcher::Event::InitDone) => {
                let listed = std::mem::take(&mut self.listing);
                let changed = !self.listed || listed != self.current;
                self.listed = true;
                self.current = listed;
                changed.then(|| self.current.clone())
            }
            Ok(watcher::Event::Apply(ns)) => {
                (self.current.insert(ns.name_any()) && self.listed).then(|| self.current.clone())
            }
            Ok(watcher::Event::Delete(ns)) => {
                (self.current.remove(&ns.name_any()) && self.listed).then(|| self.current.clone())
            }
            Err(error) => {
                tracing::warn!(%error, "namespace watch failed; retrying");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(namespaces: &[&str], ignore: &[&str]) -> NamespaceScope {
        NamespaceScope {
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            ignore: ignore.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn no_allow_list_means_one_stream_for_all_namespaces() {
        assert_eq!(scope(&[], &[]).streams(), vec![None]);
    }

    #[test]
    fn allow_list_gives_one_stream_per_namespace_minus_ignored() {
        assert_eq!(
            scope(&["a", "b", "c"], &["b"]).streams(),
            vec![Some("a".to_owned()), Some("c".to_owned())]
        );
    }

    #[test]
    fn ignored_namespaces_become_a_server_side_field_selector_on_all_namespace_streams() {
        let scope = scope(&[], &["kube-system", "nudge-system"]);
        assert_eq!(
            scope.field_selector(&None).as_deref(),
            Some("metadata.namespace!=kube-system,metadata.namespace!=nudge-system")
        );
        assert_eq!(scope.field_selector(&Some("a".into())), None);
    }
}
