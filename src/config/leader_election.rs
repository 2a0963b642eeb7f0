//! `[leader_election]`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Problem, duration, is_dns_subdomain};

/// `[leader_election]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct LeaderElectionConfig {
    /// Elect a leader through a Lease; when false every replica stamps.
    pub enabled: bool,
    /// Name of the `coordination.k8s.io/v1` Lease in `kubernetes.namespace`.
    pub lease_name: String,
    /// How long a lease is valid after its last renewal; a follower takes over an
    /// expired lease. Whole seconds (rounded up).
    #[serde(with = "duration")]
    pub lease_duration: Duration,
    /// A leader that could not renew for this long steps down (shorter than
    /// `lease_duration`, so it stops before anyone may take over).
    #[serde(with = "duration")]
    pub renew_deadline: Duration,
    /// Interval between attempts to acquire or renew the lease.
    #[serde(with = "duration")]
    pub retry_period: Duration,
}

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            lease_name: "nudge".to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaderElectionConfig {
    pub(super) fn problem(&self) -> Problem {
        if !is_dns_subdomain(&self.lease_name) {
            return Some((
                "leader_election.lease_name",
                format!("{:?} is not a Lease name", self.lease_name),
            ));
        }
        if self.retry_period.is_zero() {
            return Some(("leader_election.retry_period", "must be above 0".to_owned()));
        }
        if self.renew_deadline <= self.retry_period {
            return Some((
                "leader_election.renew_deadline",
                format!(
                    "({}) must be longer than leader_election.retry_period ({})",
                    duration::human(self.renew_deadline),
                    duration::human(self.retry_period)
                ),
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return Some((
                "leader_election.lease_duration",
                format!(
                    "({}) must be longer than leader_election.renew_deadline ({})",
                    duration::human(self.lease_duration),
                    duration::human(self.renew_deadline)
                ),
            ));
        }
        None
    }
}
