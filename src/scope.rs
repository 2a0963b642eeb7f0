//! Which namespaces nudge watches: the `kubernetes.namespaces` allow-list and
//! `kubernetes.ignore_namespaces` (a server-side field selector, so ignored
//! namespaces are never even sent). `kubernetes.namespace_selector` is followed
//! live by the runtime's namespace feed.

use kube::runtime::watcher;

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
