//! The namespace feed: the namespaces matching `kubernetes.namespace_selector`, as
//! a stream the engine's driver polls (no task of its own).

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

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
