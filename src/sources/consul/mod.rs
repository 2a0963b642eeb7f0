//! Consul KV as a config source (design §8).
//!
//! A reference is a key path (`nudge.dev/consul-config: app/config`); its fingerprint
//! is `sha256-<hex>` of the raw value (`Algorithm::Native`) or, for
//! k8s-consul-mutator compatibility, `md5-<hex>` (`Algorithm::Md5`). A key that
//! does not exist is `Observation::Absent`.
//!
//! Changes are followed with blocking queries: one per distinct key, shared by every
//! tracked item on that key, while there are at most `max_concurrent_queries` keys;
//! beyond that, keys under common prefixes share one prefix query (`plan`), which
//! blocks on the names under the prefix and, when they move, reads the values of
//! only the part that changed (`narrow`); changes are told apart by `ModifyIndex`.
//! Failures back off and report nothing, so the last known fingerprints stay in
//! force; when Consul answers again, whatever changed meanwhile is reported once.
//!
//! Files: `client` talks HTTP (the only file using consulrs), `plan` groups keys
//! into queries, `narrow` finds what changed under a prefix query, `state` diffs
//! answers against what was reported, `query` runs one blocking-query loop,
//! `watch` runs the source, `source` is the [`Source`](crate::sources::Source),
//! `settings` maps configuration. All but the metrics and the key rules here are
//! the cargo feature `consul`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::model::SourceName;

// The source itself, and the consulrs client it is built on: the cargo
// feature `consul` (a default one).
#[cfg(feature = "consul")]
pub mod client;
// Decoding Consul's answers needs no client: the fuzz targets use it alone.
#[cfg(any(feature = "consul", feature = "testing"))]
pub mod kv;
#[cfg(feature = "consul")]
mod narrow;
#[cfg(feature = "consul")]
pub mod plan;
#[cfg(feature = "consul")]
mod query;
#[cfg(feature = "consul")]
pub mod settings;
#[cfg(feature = "consul")]
mod source;
#[cfg(feature = "consul")]
mod state;
#[cfg(feature = "consul")]
mod watch;

#[cfg(feature = "consul")]
pub use client::{ClientError, ClientSettings, ConsulClient, TlsSettings};
#[cfg(feature = "consul")]
pub use settings::SettingsError;
#[cfg(feature = "consul")]
pub use source::{ConsulSource, ONE_OFF_READS, WatchSettings};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SourceLabels {
    source: String,
}

/// Failed Consul queries and waits for a blocking-query slot, by source,
/// shared by every Consul instance. Clones share the counters.
#[derive(Debug, Clone, Default)]
pub struct ConsulMetrics {
    query_errors: Family<SourceLabels, Counter>,
    slot_waits: Family<SourceLabels, Counter>,
}

impl ConsulMetrics {
    /// Counters registered into `registry` as `query_errors` and
    /// `blocking_slot_waits` (give it the `consul` sub-registry:
    /// `nudge_consul_query_errors_total`, `nudge_consul_blocking_slot_waits_total`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "query_errors",
            "Consul queries that failed, by source",
            metrics.query_errors.clone(),
        );
        registry.register(
            "blocking_slot_waits",
            "Times a Consul query found every blocking-query slot (max_concurrent_queries) taken for a second and read its keys without blocking instead, by source",
            metrics.slot_waits.clone(),
        );
        metrics
    }

    /// A query of `source` failed.
    pub fn query_failed(&self, source: &SourceName) {
        self.query_errors.get_or_create(&labels(source)).inc();
    }

    /// A query of `source` found no blocking-query slot free in time.
    pub fn slot_waited(&self, source: &SourceName) {
        self.slot_waits.get_or_create(&labels(source)).inc();
    }
}

fn labels(source: &SourceName) -> SourceLabels {
    SourceLabels {
        source: source.as_str().to_owned(),
    }
}

/// Why `key` cannot name a Consul key, if it cannot: the one place Consul's
/// key-path rules live (`Source::check_reference` for annotations, and every
/// read). Not empty, not `/`-led (the KV path is relative), no `.` or `..`
/// segment (it could leave the KV path), no whitespace or control characters
/// (a key with them is almost surely a slip in the annotation).
pub fn key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("a Consul key must not be empty")
    } else if key.starts_with('/') {
        Some("a Consul key must not start with '/'")
    } else if key
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        Some("a Consul key must not contain . or .. segments")
    } else if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("a Consul key must not contain whitespace or control characters")
    } else {
        None
    }
}

/// [`key_problem`] as a reference check (what `ConsulSource::check_reference`
/// answers).
pub fn check_key(key: &str) -> Result<(), String> {
    key_problem(key).map_or(Ok(()), |reason| Err(reason.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_could_escape_the_kv_path_are_refused() {
        for key in ["", "/abs", "a/../agent/self", "./x", "a\nb", "a b", "a\tb"] {
            assert!(key_problem(key).is_some(), "{key:?}");
        }
        for key in ["app/config", "app/", "a%20b/ü%?#", "a..b", "app/größe"] {
            assert_eq!(key_problem(key), None, "{key:?}");
        }
    }
}
