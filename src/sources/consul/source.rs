//! One Consul cluster as a [`Source`]: reads through the client, watches with
//! blocking queries (`watch`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    ClientError, ClientSettings, ConsulClient, ConsulMetrics, check_key, key_problem, query, state,
    watch,
};
use crate::fingerprint::{Algorithm, Observation};
use crate::model::{KeySelection, Scope, SourceName, Tracked};
use crate::sources::{ObserveContext, Source, SourceContext, SourceError};

/// Non-blocking reads allowed in flight besides the blocking queries (first reads of
/// new queries, [`Source::observe`], new items on already watched keys).
pub const ONE_OFF_READS: usize = 2;

/// How a Consul source watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSettings {
    /// Longest wait of one blocking query (Consul caps it at 10 minutes).
    pub wait: Duration,
    /// Most blocking queries in flight; more keys share recursive prefix queries.
    pub max_concurrent_queries: usize,
    /// Time between two queries of one loop once its burst is spent: a key that keeps
    /// changing is read at most this often. Changes of different keys under one
    /// prefix query may run `query_burst` queries per interval. Zero: no limit.
    pub min_query_interval: Duration,
    /// Queries one loop may start back to back (after a quiet period) before
    /// `min_query_interval` applies, so that a few changes in a row under one prefix
    /// are each read at once.
    pub query_burst: u32,
    /// Cap of the exponential backoff after failures.
    pub max_retry_interval: Duration,
}

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            wait: Duration::from_secs(300),
            max_concurrent_queries: 64,
            min_query_interval: Duration::from_secs(1),
            query_burst: 5,
            max_retry_interval: Duration::from_secs(30),
        }
    }
}

/// One Consul cluster as a [`Source`].
pub struct ConsulSource {
    pub(super) name: SourceName,
    pub(super) address: String,
    pub(super) client: Arc<ConsulClient>,
    pub(super) settings: WatchSettings,
    pub(super) limits: Arc<query::QueryLimits>,
}

impl fmt::Debug for ConsulSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsulSource")
            .field("name", &self.name)
            .field("address", &self.address)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ConsulSource {
    /// A source named `name` (`consul`, `consul.eu`) reading the cluster `client`
    /// describes. The connection pool is sized for the query limit.
    pub fn new(
        name: SourceName,
        client: &ClientSettings,
        settings: WatchSettings,
    ) -> Result<Self, ClientError> {
        let settings = WatchSettings {
            max_concurrent_queries: settings.max_concurrent_queries.max(1),
            ..settings
        };
        let client_settings = ClientSettings {
            max_idle_connections: ONE_OFF_READS,
            ..client.clone()
        };
        Ok(Self {
            name,
            address: client.address.clone(),
            client: Arc::new(ConsulClient::new(&client_settings)?),
            limits: Arc::new(query::QueryLimits::new(
                settings.max_concurrent_queries,
                ONE_OFF_READS,
            )),
            settings,
        })
    }

    /// Exports failed queries and slot waits to `metrics`
    /// (`nudge_consul_query_errors_total`, `nudge_consul_blocking_slot_waits_total`).
    pub fn with_metrics(self, metrics: ConsulMetrics) -> Self {
        self.client.count_into(metrics, self.name.clone());
        self
    }

    /// The Consul address this source reads.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Failed Consul requests since start (transport errors, timeouts, error
    /// statuses, unreadable answers).
    pub fn query_errors(&self) -> u64 {
        self.client.stats().errors()
    }

    /// Times a query found every blocking-query slot taken for a second and
    /// read without blocking instead (`nudge_consul_blocking_slot_waits_total`).
    pub fn blocking_slot_waits(&self) -> u64 {
        self.client.stats().slot_waits()
    }

    /// Requests sent to Consul since start, blocking or not.
    pub fn requests_sent(&self) -> u64 {
        self.client.stats().requests()
    }

    /// Blocking queries sent since start.
    pub fn blocking_queries_started(&self) -> u64 {
        self.client.stats().blocking_started()
    }

    /// Blocking queries waiting for Consul right now.
    pub fn blocking_queries_in_flight(&self) -> u64 {
        self.client.stats().blocking_in_flight()
    }

    /// Checks that `tracked` names a usable key with a supported algorithm.
    pub(super) fn check(&self, tracked: &Tracked) -> Result<(), SourceError> {
        if !self.supports(tracked.algorithm) {
            return Err(SourceError::UnsupportedAlgorithm {
                source_name: self.name.clone(),
                algorithm: tracked.algorithm,
            });
        }
        let reference = &tracked.reference;
        let invalid = |reason: &str| SourceError::InvalidReference {
            source_name: self.name.clone(),
            reference: reference.to_string(),
            reason: reason.to_owned(),
        };
        if reference.keys != KeySelection::All {
            return Err(invalid("a Consul key cannot be narrowed to keys"));
        }
        key_problem(&reference.name).map_or(Ok(()), |reason| Err(invalid(reason)))
    }
}

#[async_trait]
impl Source for ConsulSource {
    fn name(&self) -> &SourceName {
        &self.name
    }

    fn scope(&self) -> Scope {
        Scope::External
    }

    /// Consul's key-path rules ([`check_key`]).
    fn check_reference(&self, reference: &str) -> Result<(), String> {
        check_key(reference)
    }

    fn supports(&self, algorithm: Algorithm) -> bool {
        state::supports(algorithm)
    }

    async fn observe(
        &self,
        tracked: &Tracked,
        _cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        self.check(tracked)?;
        let _permit = self
            .limits
            .one_off
            .acquire()
            .await
            .map_err(|e| SourceError::backend(&self.name, "source closed", e))?;
        let read = self
            .client
            .get_key(&tracked.reference.name, None)
            .await
            .map_err(|e| SourceError::backend(&self.name, "reading the key failed", e))?;
        Ok(match read.value {
            Some(value) => match state::fingerprint(tracked.algorithm, &value) {
                Some(fingerprint) => Observation::Present(fingerprint),
                None => {
                    return Err(SourceError::UnsupportedAlgorithm {
                        source_name: self.name.clone(),
                        algorithm: tracked.algorithm,
                    });
                }
            },
            None => Observation::Absent,
        })
    }

    async fn run(self: Arc<Self>, ctx: SourceContext) -> Result<(), SourceError> {
        watch::run(self, ctx).await
    }
}
