//! [`SourceCatalog`]: the configured sources as annotation parsing sees them,
//! each with its scope and its own reference check.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use super::{Scope, SourceName};

/// How a source checks one reference before anything tracks it: `Err` says why
/// the reference cannot name anything in that source (the text ends up in the
/// `InvalidAnnotation` Event). Built from [`Source::check_reference`] by the
/// engine and `nudge explain`.
///
/// [`Source::check_reference`]: crate::source::Source::check_reference
pub type ReferenceCheck = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// The rule a source gets unless it has its own (`Source::check_reference`'s
/// default): a reference must not be empty and must not hold control characters
/// (newlines, tabs, NUL, …), which no key, path or URL needs and which would
/// garble logs and Events. Anything else is the source's business.
pub fn default_reference_check(reference: &str) -> Result<(), String> {
    if reference.is_empty() {
        return Err("a reference must not be empty".to_owned());
    }
    if reference.chars().any(char::is_control) {
        return Err("a reference must not contain control characters".to_owned());
    }
    Ok(())
}

/// The sources configured in this installation, by annotation name: each one's
/// [`Scope`] and its own reference check. Annotations that name any other source
/// are invalid. Clones share the checks.
#[derive(Clone, Default)]
pub struct SourceCatalog {
    sources: BTreeMap<SourceName, CatalogEntry>,
}

#[derive(Clone)]
struct CatalogEntry {
    scope: Scope,
    check: ReferenceCheck,
    rule: Option<PodSpecRule>,
}

/// Where a source's references appear in a pod spec, so that
/// `<prefix>/auto` (and Reloader's `auto`, for the Secrets Store CSI preset)
/// finds them without an annotation naming each one (design §5b).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum PodSpecRule {
    /// Every `csi` volume of `driver` references the object named by its
    /// `volumeAttributes[attribute]`.
    CsiVolume {
        /// The CSI driver's name, e.g. `secrets-store.csi.k8s.io`.
        driver: String,
        /// The volume attribute holding the object's name, e.g.
        /// `secretProviderClass`.
        attribute: String,
    },
}

impl PodSpecRule {
    /// `csi` volumes of `driver`, naming their object in `volumeAttributes[attribute]`.
    pub fn csi_volume(driver: impl Into<String>, attribute: impl Into<String>) -> Self {
        Self::CsiVolume {
            driver: driver.into(),
            attribute: attribute.into(),
        }
    }
}

impl SourceCatalog {
    /// A catalog without sources.
    pub fn new() -> Self {
        Self::default()
    }

    /// This catalog with source `name` added (or replaced).
    #[must_use]
    pub fn with(
        mut self,
        name: SourceName,
        scope: Scope,
        check: impl Fn(&str) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.insert(name, scope, Arc::new(check));
        self
    }

    /// Adds (or replaces) source `name`.
    pub fn insert(&mut self, name: SourceName, scope: Scope, check: ReferenceCheck) {
        let rule = None;
        self.sources
            .insert(name, CatalogEntry { scope, check, rule });
    }

    /// Gives the configured source `name` a pod-spec rule (nothing when it is
    /// not configured).
    pub fn set_rule(&mut self, name: &SourceName, rule: PodSpecRule) {
        if let Some(entry) = self.sources.get_mut(name) {
            entry.rule = Some(rule);
        }
    }

    /// The sources that have a pod-spec rule, sorted by name.
    pub fn rules(&self) -> impl Iterator<Item = (&SourceName, &PodSpecRule)> {
        self.sources
            .iter()
            .filter_map(|(name, entry)| Some((name, entry.rule.as_ref()?)))
    }

    /// The scope of a configured source, or `None` when it is not configured.
    pub fn scope(&self, name: &SourceName) -> Option<Scope> {
        self.sources.get(name).map(|entry| entry.scope)
    }

    /// Whether source `name` accepts `reference`, by its own check; `None` when
    /// it is not configured. (A namespaced source's references must also be
    /// object names; annotation parsing checks that, as the scope says.)
    pub fn check(&self, name: &SourceName, reference: &str) -> Option<Result<(), String>> {
        self.sources.get(name).map(|entry| (entry.check)(reference))
    }

    /// The configured source names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &SourceName> {
        self.sources.keys()
    }

    /// How many sources are configured.
    pub fn len(&self) -> usize {
        self.sources.len()
    }

    /// Whether no source is configured.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }
}

impl fmt::Debug for SourceCatalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(
                self.sources
                    .iter()
                    .map(|(name, entry)| (name.as_str(), entry.scope)),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http() -> SourceName {
        SourceName::new("http").expect("valid")
    }

    #[test]
    fn default_check_refuses_empty_and_control_characters_only() {
        for ok in [
            "a",
            "/abs",
            "a b",
            "https://x.example/y?z#w",
            "größe",
            "../x",
        ] {
            assert_eq!(default_reference_check(ok), Ok(()), "{ok:?}");
        }
        for bad in ["", "a\nb", "\t", "a\u{7f}", "nul\0"] {
            assert!(default_reference_check(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn catalog_answers_with_each_sources_own_check() {
        let catalog = SourceCatalog::new()
            .with(SourceName::consul(), Scope::External, |r: &str| {
                if r.starts_with('/') {
                    Err("no leading /".to_owned())
                } else {
                    Ok(())
                }
            })
            .with(http(), Scope::External, default_reference_check);
        assert_eq!(
            catalog.check(&SourceName::consul(), "/a"),
            Some(Err("no leading /".to_owned()))
        );
        assert_eq!(catalog.check(&http(), "/a"), Some(Ok(())));
        assert_eq!(
            catalog.check(&http(), ""),
            Some(Err("a reference must not be empty".to_owned()))
        );
        assert_eq!(catalog.check(&SourceName::secret(), "a"), None);
        assert_eq!(catalog.scope(&http()), Some(Scope::External));
        assert_eq!(catalog.scope(&SourceName::secret()), None);
    }

    #[test]
    fn catalog_lists_names_sorted_and_a_second_insert_replaces() {
        let mut catalog = SourceCatalog::new()
            .with(http(), Scope::External, |_: &str| Err("never".to_owned()))
            .with(
                SourceName::configmap(),
                Scope::Namespaced,
                default_reference_check,
            );
        catalog.insert(http(), Scope::External, Arc::new(|_: &str| Ok(())));
        assert_eq!(catalog.len(), 2);
        assert!(!catalog.is_empty());
        assert!(SourceCatalog::new().is_empty());
        let names: Vec<&str> = catalog.names().map(SourceName::as_str).collect();
        assert_eq!(names, ["configmap", "http"]);
        assert_eq!(catalog.check(&http(), "x"), Some(Ok(())));
        // Clones share the checks; Debug shows names and scopes.
        let clone = catalog.clone();
        assert_eq!(clone.check(&http(), "x"), Some(Ok(())));
        assert_eq!(
            format!("{clone:?}"),
            r#"{"configmap": Namespaced, "http": External}"#
        );
    }
}
