//! `[fingerprint]`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Problem, is_dns_subdomain};

/// `[fingerprint]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct FingerprintConfig {
    /// File holding the installation key for Secret fingerprints (at least 32
    /// bytes). Empty: nudge generates a key once and keeps it in `key_secret`.
    pub key_file: Option<PathBuf>,
    /// Secret in `kubernetes.namespace` holding the generated key.
    pub key_secret: String,
}

impl Default for FingerprintConfig {
    fn default() -> Self {
        Self {
            key_file: None,
            key_secret: "nudge-fingerprint-key".to_owned(),
        }
    }
}

impl FingerprintConfig {
    pub(super) fn problem(&self) -> Problem {
        if !is_dns_subdomain(&self.key_secret) {
            return Some((
                "fingerprint.key_secret",
                format!("{:?} is not a Secret name", self.key_secret),
            ));
        }
        None
    }
}
