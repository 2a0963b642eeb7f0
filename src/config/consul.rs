//! `[sources.consul]`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Problem, Secret, duration};

/// `[sources.consul]` and `[sources.consul.instances.<name>]`: one Consul cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ConsulConfig {
    /// Whether this cluster is watched. Unset means `false` for `[sources.consul]` and
    /// `true` for each listed instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// HTTP(S) address of a Consul agent or server. Empty: `$CONSUL_HTTP_ADDR`, else
    /// `http://127.0.0.1:8500` (default instance only; instances must set it).
    pub address: String,
    /// ACL token. Empty: `token_file`, else `$CONSUL_HTTP_TOKEN` (default instance only).
    pub token: Secret,
    /// File holding the ACL token (read at start-up). Empty: `$CONSUL_HTTP_TOKEN_FILE`
    /// (default instance only).
    pub token_file: String,
    /// Datacenter to read from. Empty: the agent's own.
    pub datacenter: String,
    /// Namespace (Consul Enterprise). Empty: the token's default.
    pub namespace: String,
    /// Admin partition (Consul Enterprise). Empty: the token's default.
    pub partition: String,
    /// TLS towards Consul.
    pub tls: ConsulTlsConfig,
    /// Longest time one blocking query waits for a change (Consul caps it at 10m).
    #[serde(with = "duration")]
    pub wait: Duration,
    /// Most blocking queries (and so HTTP connections) in flight at once. When more
    /// keys are tracked, keys under common prefixes share one recursive query.
    pub max_concurrent_queries: usize,
    /// Time between two queries of the same watch once its burst is spent (a key
    /// that keeps changing must not spin the loop). Changes of different keys
    /// under one prefix query are not churn: they may run `query_burst` queries
    /// per interval. `0s`: no limit.
    #[serde(with = "duration")]
    pub min_query_interval: Duration,
    /// Queries one watch may run back to back after a quiet period, so that a few
    /// changes in a row under one prefix are each read at once.
    pub query_burst: u32,
    /// Longest pause between retries while Consul is unreachable or failing.
    #[serde(with = "duration")]
    pub max_retry_interval: Duration,
    /// Deadline of one non-blocking read.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Further Consul clusters, by name; `eu` becomes the source `consul.eu`. Only
    /// valid under `[sources.consul]`.
    pub instances: BTreeMap<String, ConsulConfig>,
}

impl Default for ConsulConfig {
    fn default() -> Self {
        Self {
            enabled: None,
            address: String::new(),
            token: Secret::default(),
            token_file: String::new(),
            datacenter: String::new(),
            namespace: String::new(),
            partition: String::new(),
            tls: ConsulTlsConfig::default(),
            wait: Duration::from_secs(300),
            max_concurrent_queries: 64,
            min_query_interval: Duration::from_secs(1),
            query_burst: 5,
            max_retry_interval: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
            instances: BTreeMap::new(),
        }
    }
}

impl ConsulConfig {
    /// Checks one cluster's values; `instance` is `None` for `[sources.consul]`.
    /// Returns the offending key (relative to the cluster's section) and the problem.
    pub(crate) fn problem(&self, instance: Option<&str>) -> Option<(&'static str, String)> {
        if instance.is_some() {
            if !self.instances.is_empty() {
                return Some(("instances", "instances cannot be nested".to_owned()));
            }
            if self.address.is_empty() {
                return Some(("address", "must be set for an extra instance".to_owned()));
            }
        }
        if !self.token.is_empty() && !self.token_file.is_empty() {
            return Some((
                "token",
                "set either token or token_file, not both".to_owned(),
            ));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&self.wait) {
            return Some((
                "wait",
                format!(
                    "must be between 1s and 10m (Consul's limit), got {}",
                    duration::human(self.wait)
                ),
            ));
        }
        if self.max_concurrent_queries == 0 {
            return Some(("max_concurrent_queries", "must be at least 1".to_owned()));
        }
        if self.query_burst == 0 {
            return Some(("query_burst", "must be at least 1".to_owned()));
        }
        if self.max_retry_interval < Duration::from_secs(1) {
            return Some(("max_retry_interval", "must be at least 1s".to_owned()));
        }
        if self.timeout.is_zero() {
            return Some(("timeout", "must be above 0".to_owned()));
        }
        let tls = &self.tls;
        if tls.cert_file.is_empty() != tls.key_file.is_empty() {
            return Some((
                "tls.cert_file",
                "tls.cert_file and tls.key_file must be set together".to_owned(),
            ));
        }
        None
    }
}

/// `[sources.consul.tls]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ConsulTlsConfig {
    /// PEM file of the CA that signed Consul's certificate. Empty: the built-in roots.
    pub ca_file: String,
    /// PEM client certificate (with `key_file`), for `verify_incoming` clusters.
    pub cert_file: String,
    /// PEM private key of `cert_file` (PKCS#8, RSA or SEC1).
    pub key_file: String,
    /// Name to verify Consul's certificate against, when it differs from the host in
    /// `address` (e.g. `server.dc1.consul`).
    pub server_name: String,
    /// Verify Consul's certificate. Turning it off is for experiments only.
    pub verify: bool,
}

impl Default for ConsulTlsConfig {
    fn default() -> Self {
        Self {
            ca_file: String::new(),
            cert_file: String::new(),
            key_file: String::new(),
            server_name: String::new(),
            verify: true,
        }
    }
}

/// `[sources.consul]`, then each of its instances.
pub(super) fn consul_problem(consul: &ConsulConfig) -> Problem {
    #[cfg(not(feature = "consul"))]
    if let Some(key) = enabled_without_the_feature(consul) {
        let problem = "asks for a Consul source, but this binary is built without it (cargo feature `consul`)";
        return Some((key, problem.to_owned()));
    }
    if let Some((key, problem)) = consul.problem(None) {
        return Some((consul_key(key), problem));
    }
    for (name, instance) in &consul.instances {
        if let Err(e) = crate::model::SourceName::new(format!("consul.{name}")) {
            return Some((
                "sources.consul.instances",
                format!("{name:?} cannot name a source: {e}"),
            ));
        }
        if let Some((key, problem)) = instance.problem(Some(name)) {
            return Some((
                "sources.consul.instances",
                format!("{name}.{key}: {problem}"),
            ));
        }
    }
    None
}

/// The key that enables a Consul cluster, when one is enabled.
#[cfg(not(feature = "consul"))]
fn enabled_without_the_feature(consul: &ConsulConfig) -> Option<&'static str> {
    if consul.enabled == Some(true) {
        return Some("sources.consul.enabled");
    }
    let instance = consul.instances.values().any(|i| i.enabled != Some(false));
    instance.then_some("sources.consul.instances")
}

/// The full dotted key of a `[sources.consul]` key, for error messages.
fn consul_key(key: &'static str) -> &'static str {
    match key {
        "instances" => "sources.consul.instances",
        "address" => "sources.consul.address",
        "token" => "sources.consul.token",
        "wait" => "sources.consul.wait",
        "max_concurrent_queries" => "sources.consul.max_concurrent_queries",
        "query_burst" => "sources.consul.query_burst",
        "max_retry_interval" => "sources.consul.max_retry_interval",
        "timeout" => "sources.consul.timeout",
        "tls.cert_file" => "sources.consul.tls.cert_file",
        _ => "sources.consul",
    }
}
