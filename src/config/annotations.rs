//! `[annotations]`.

use serde::{Deserialize, Serialize};

use super::{Problem, is_dns_subdomain};

/// `[annotations]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AnnotationsConfig {
    /// Prefix of nudge's own annotations (`<prefix>/auto`, `<prefix>/checksum-x`).
    pub prefix: String,
    /// Reloader's `--auto-reload-all`: every workload that no annotation of any
    /// scheme manages is Reloader-`auto` unless it opts out with
    /// `reloader.stakater.com/auto: "false"`.
    pub reloader_auto_all: bool,
}

impl Default for AnnotationsConfig {
    fn default() -> Self {
        Self {
            prefix: "nudge.dev".to_owned(),
            reloader_auto_all: false,
        }
    }
}

impl AnnotationsConfig {
    /// The annotation scheme these settings describe.
    pub(crate) fn scheme(&self) -> crate::annotations::AnnotationScheme {
        crate::annotations::AnnotationScheme::new(self.prefix.clone())
            .with_reloader_auto_all(self.reloader_auto_all)
    }
}

impl AnnotationsConfig {
    pub(super) fn problem(&self) -> Problem {
        if !is_dns_subdomain(&self.prefix) {
            return Some((
                "annotations.prefix",
                format!(
                    "{:?} is not a DNS subdomain (an annotation prefix)",
                    self.prefix
                ),
            ));
        }
        None
    }
}
