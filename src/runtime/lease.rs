//! Leader election on a `coordination.k8s.io/v1` Lease (design §7): every replica
//! watches and serves the webhook; only the Lease holder stamps.
//!
//! No published crate supports kube 5 / k8s-openapi 0.29 yet (kube-leader-election
//! 0.44 needs kube 4, kube-coordinate kube 2, kubert's lease kube 1.1), so this is a
//! small implementation of client-go's algorithm:
//!
//! - **Acquire**: every `retry_period` a candidate reads the Lease. Absent: it
//!   creates it. Held by nobody, or expired (`renewTime + leaseDurationSeconds` is
//!   in the past): it takes it over with an update carrying the `resourceVersion` it
//!   read, so of two candidates only one succeeds (the other gets 409).
//! - **Renew**: the leader updates `renewTime` every `retry_period`, again with
//!   optimistic concurrency. A 409 or a Lease held by someone else means another
//!   replica took over: leadership is lost at once. Other failures are retried until
//!   `renew_deadline` has passed since the last successful renewal, then leadership
//!   is lost. `renew_deadline < lease_duration`, so a leader stops stamping before
//!   anyone may take over.
//! - **Release**: on shutdown the leader clears `holderIdentity` and sets
//!   `leaseDurationSeconds = 1`, so a follower takes over within one retry period.
//!
//! Expiry is judged from the Lease's `renewTime` against this replica's wall clock,
//! so the replicas' clocks are assumed to agree to well within `lease_duration -
//! renew_deadline` (as NTP-synced nodes do). No jitter is added to `retry_period`.
//!
//! The decision ([`decide`]) is a pure function; the Lease is read and written
//! through [`LeaseStore`], implemented for the API server by [`KubeLeases`].

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;
use crate::config::LeaderElectionConfig;

/// Why a Lease could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Someone else wrote the Lease since it was read (409 Conflict, or 409
    /// AlreadyExists on create).
    #[error("the Lease was changed by someone else")]
    Conflict,
    /// The API server failed or could not be reached.
    #[error("Lease request failed")]
    Api(#[source] kube::Error),
    /// A request did not finish before the deadline.
    #[error("Lease request timed out")]
    Timeout,
}

impl LeaseError {
    /// A low-cardinality label for logs and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Conflict => "conflict",
            Self::Api(_) => "api",
            Self::Timeout => "timeout",
        }
    }
}

/// Where the Lease lives: read, create, and replace with optimistic concurrency.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// The Lease, or `None` when it does not exist.
    async fn get(&self) -> Result<Option<Lease>, LeaseError>;
    /// Creates the Lease; [`LeaseError::Conflict`] when it exists already.
    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseError>;
    /// Replaces the Lease if its `metadata.resourceVersion` is still current;
    /// [`LeaseError::Conflict`] otherwise.
    async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseError>;
}

/// The Lease `name` in one namespace of the API server.
pub struct KubeLeases {
    api: Api<Lease>,
    name: String,
}

impl KubeLeases {
    /// The Lease `name` in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
        }
    }
}

fn classify(error: kube::Error) -> LeaseError {
    match error {
        kube::Error::Api(status) if status.code == 409 => LeaseError::Conflict,
        other => LeaseError::Api(other),
    }
}

#[async_trait]
impl LeaseStore for KubeLeases {
    async fn get(&self) -> Result<Option<Lease>, LeaseError> {
        self.api.get_opt(&self.name).await.map_err(classify)
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        self.api
            .create(&PostParams::default(), lease)
            .await
            .map_err(classify)
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        self.api
            .replace(&self.name, &PostParams::default(), lease)
            .await
            .map_err(classify)
    }
}

/// Timing and identity of one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// Name of the Lease.
    pub name: String,
    /// This replica's `holderIdentity`.
    pub identity: String,
    /// Validity of a renewal (written as whole seconds, rounded up).
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it steps down.
    pub renew_deadline: Duration,
    /// Interval between attempts.
    pub retry_period: Duration,
}

impl LeaseSettings {
    /// Settings from `[leader_election]`, with [`holder_identity`].
    pub fn from_config(config: &LeaderElectionConfig) -> Self {
        Self {
            name: config.lease_name.clone(),
            identity: holder_identity(),
            lease_duration: config.lease_duration,
            renew_deadline: config.renew_deadline,
            retry_period: config.retry_period,
        }
    }

    fn duration_seconds(&self) -> i32 {
        let secs = self
            .lease_duration
            .as_secs()
            .saturating_add(u64::from(self.lease_duration.subsec_nanos() > 0));
        i32::try_from(secs).unwrap_or(i32::MAX).max(1)
    }
}

/// This replica's identity: `POD_NAME` (unique per pod), else the host name plus a
/// random suffix (two processes on one host must differ).
pub fn holder_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "nudge".to_owned());
    let mut bytes = [0u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        // Fall back to something process-specific.
        bytes = std::process::id().to_be_bytes();
    }
    format!("{host}-{}", hex::encode(bytes))
}

/// What a candidate should do given the Lease it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// There is no Lease: create it.
    Create,
    /// Nobody holds it, or its holder let it expire: take it over.
    TakeOver,
    /// It is ours: renew it.
    Renew,
    /// Someone else holds it and it has not expired.
    Wait,
}

/// The decision of candidate `me` at wall-clock time `now` given the Lease's spec
/// (`None`: no Lease). Pure, for tests.
pub fn decide(spec: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Decision {
    let Some(spec) = spec else {
        return Decision::Create;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => Decision::TakeOver,
        Some(holder) if holder == me => Decision::Renew,
        Some(_) if is_expired(spec, now) => Decision::TakeOver,
        Some(_) => Decision::Wait,
    }
}

/// Whether `renewTime` (else `acquireTime`) plus `leaseDurationSeconds` is before
/// `now`. A Lease without either time is expired.
fn is_expired(spec: &LeaseSpec, now: Timestamp) -> bool {
    let Some(MicroTime(renewed)) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)));
    match renewed.checked_add(duration) {
        Ok(expiry) => expiry < now,
        Err(_) => false,
    }
}

/// Where "now" comes from: the system clock, or (in tests) tokio's clock, which
/// pauses and advances with the test.
#[derive(Debug, Clone, Copy)]
enum Clock {
    System,
    #[cfg(test)]
    Tokio {
        wall: Timestamp,
        at: Instant,
    },
}

impl Clock {
    fn now(self) -> Timestamp {
        match self {
            Self::System => Timestamp::now(),
            #[cfg(test)]
            Self::Tokio { wall, at } => {
                let elapsed = SignedDuration::try_from(at.elapsed()).unwrap_or(SignedDuration::MAX);
                wall.checked_add(elapsed).unwrap_or(wall)
            }
        }
    }
}

/// A candidate for leadership. [`run`](Self::run) it; [`subscribe`](Self::subscribe)
/// tells whether it leads.
pub struct LeaderElector<S = KubeLeases> {
    store: S,
    settings: LeaseSettings,
    clock: Clock,
    leader: watch::Sender<bool>,
    metrics: Metrics,
}

impl LeaderElector<KubeLeases> {
    /// A candidate for the Lease `settings.name` in `namespace`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        settings: LeaseSettings,
        metrics: Metrics,
    ) -> Self {
        let store = KubeLeases::new(client, namespace, &settings.name);
        Self::with_store(store, settings, metrics)
    }
}

impl<S: LeaseStore> LeaderElector<S> {
    /// A candidate using `store` for the Lease.
    pub fn with_store(store: S, settings: LeaseSettings, metrics: Metrics) -> Self {
        let (leader, _) = watch::channel(false);
        metrics.set_leader(false);
        Self {
            store,
            settings,
            clock: Clock::System,
            leader,
            metrics,
        }
    }

    /// Whether this replica leads now, and every change; `false` until it wins.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leader.subscribe()
    }

    /// Campaigns, renews and observes until `shutdown` is cancelled; then, if it
    /// leads, steps down and releases the Lease.
    pub async fn run(self, shutdown: CancellationToken) {
        let retry = self.settings.retry_period;
        // When the lease was last written by us; `Some` while leading.
        let mut renewed: Option<Instant> = None;
        loop {
            match renewed {
                None => {
                    let started = Instant::now();
                    match self.attempt(self.settings.renew_deadline).await {
                        Ok(true) => {
                            tracing::info!(identity = %self.settings.identity, "acquired the lease; leading");
                            renewed = Some(started);
                            self.set_leader(true);
                        }
                        Ok(false) => {}
                        Err(error) => {
                            tracing::warn!(%error, category = error.category(), "cannot read or acquire the lease")
                        }
                    }
                }
                Some(last) => {
                    let deadline = last + self.settings.renew_deadline;
                    let started = Instant::now();
                    let remaining = deadline.saturating_duration_since(started);
                    match self.attempt(remaining).await {
                        Ok(true) => renewed = Some(started),
                        Ok(false) => {
                            tracing::warn!("another replica holds the lease; following");
                            renewed = None;
                            self.set_leader(false);
                        }
                        Err(error) if Instant::now() >= deadline => {
                            tracing::warn!(%error, category = error.category(), "cannot renew the lease within the deadline; following");
                            renewed = None;
                            self.set_leader(false);
                        }
                        Err(error) => {
                            tracing::warn!(%error, category = error.category(), "cannot renew the lease; retrying")
                        }
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(retry) => {}
            }
        }
        if renewed.is_some() {
            self.set_leader(false);
            match self.release().await {
                Ok(()) => tracing::info!("released the lease"),
                Err(error) => {
                    tracing::warn!(%error, category = error.category(), "cannot release the lease; it expires by itself")
                }
            }
        }
    }

    fn set_leader(&self, leader: bool) {
        self.leader.send_replace(leader);
        self.metrics.set_leader(leader);
    }

    /// One acquire-or-renew, bounded by `timeout`: whether this replica holds the
    /// Lease afterwards.
    async fn attempt(&self, timeout: Duration) -> Result<bool, LeaseError> {
        tokio::time::timeout(timeout, self.try_acquire_or_renew())
            .await
            .unwrap_or(Err(LeaseError::Timeout))
    }

    async fn try_acquire_or_renew(&self) -> Result<bool, LeaseError> {
        let current = self.store.get().await?;
        let now = self.clock.now();
        let decision = decide(
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &self.settings.identity,
            now,
        );
        let written = match (decision, current) {
            (Decision::Wait, _) => return Ok(false),
            (Decision::Create, _) | (_, None) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.settings.name.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.spec(now, None)),
                };
                self.store.create(&lease).await
            }
            (Decision::TakeOver, Some(mut lease)) => {
                let transitions = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.lease_transitions)
                    .unwrap_or(0);
                lease.spec = Some(self.spec(now, Some(transitions.saturating_add(1))));
                self.store.replace(&lease).await
            }
            (Decision::Renew, Some(mut lease)) => {
                let mut spec = lease.spec.take().unwrap_or_default();
                spec.renew_time = Some(MicroTime(now));
                spec.lease_duration_seconds = Some(self.settings.duration_seconds());
                lease.spec = Some(spec);
                self.store.replace(&lease).await
            }
        };
        match written {
            Ok(_) => Ok(true),
            Err(LeaseError::Conflict) => Ok(false),
            Err(error) => Err(error),
        }
    }

    fn spec(&self, now: Timestamp, transitions: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(self.settings.duration_seconds()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions.unwrap_or(0)),
            ..LeaseSpec::default()
        }
    }

    /// Clears the holder so that a follower takes over at its next attempt.
    async fn release(&self) -> Result<(), LeaseError> {
        let release = async {
            let Some(mut lease) = self.store.get().await? else {
                return Ok(());
            };
            let mut spec = lease.spec.take().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
                return Ok(());
            }
            let now = MicroTime(self.clock.now());
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now.clone());
            spec.acquire_time = Some(now);
            lease.spec = Some(spec);
            self.store.replace(&lease).await.map(drop)
        };
        tokio::time::timeout(self.settings.renew_deadline, release)
            .await
            .unwrap_or(Err(LeaseError::Timeout))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A Lease in memory, with resourceVersions and a switch that makes every
    /// request fail.
    #[derive(Clone, Default)]
    struct MemoryLeases {
        lease: Arc<Mutex<Option<Lease>>>,
        version: Arc<Mutex<u64>>,
        failing: Arc<AtomicBool>,
    }

    impl MemoryLeases {
        fn check(&self) -> Result<(), LeaseError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(LeaseError::Timeout);
            }
            Ok(())
        }

        fn store(&self, mut lease: Lease) -> Lease {
            let mut version = self.version.lock().unwrap();
            *version += 1;
            lease.metadata.resource_version = Some(version.to_string());
            *self.lease.lock().unwrap() = Some(lease.clone());
            lease
        }

        fn holder(&self) -> Option<String> {
            self.lease
                .lock()
                .unwrap()
                .as_ref()
                .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
        }

        /// Someone outside the test's candidates writes the Lease.
        fn steal(&self, holder: &str) {
            let mut lease = self.lease.lock().unwrap().clone().unwrap();
            let spec = lease.spec.get_or_insert_default();
            spec.holder_identity = Some(holder.to_owned());
            self.store(lease);
        }
    }

    #[async_trait]
    impl LeaseStore for MemoryLeases {
        async fn get(&self) -> Result<Option<Lease>, LeaseError> {
            self.check()?;
            Ok(self.lease.lock().unwrap().clone())
        }

        async fn create(&self, lease: &Lease) -> Result<Lease, LeaseError> {
            self.check()?;
            if self.lease.lock().unwrap().is_some() {
                return Err(LeaseError::Conflict);
            }
            Ok(self.store(lease.clone()))
        }

        async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseError> {
            self.check()?;
            let current = self
                .lease
                .lock()
                .unwrap()
                .as_ref()
                .and_then(|l| l.metadata.resource_version.clone());
            if current != lease.metadata.resource_version {
                return Err(LeaseError::Conflict);
            }
            Ok(self.store(lease.clone()))
        }
    }

    const LEASE: Duration = Duration::from_secs(15);
    const DEADLINE: Duration = Duration::from_secs(10);
    const RETRY: Duration = Duration::from_secs(2);

    struct Candidate {
        leader: watch::Receiver<bool>,
        stop: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    impl Candidate {
        fn is_leader(&self) -> bool {
            *self.leader.borrow()
        }
    }

    fn candidate(store: &MemoryLeases, identity: &str, clock: Clock) -> Candidate {
        let settings = LeaseSettings {
            name: "nudge".into(),
            identity: identity.into(),
            lease_duration: LEASE,
            renew_deadline: DEADLINE,
            retry_period: RETRY,
        };
        let mut elector = LeaderElector::with_store(store.clone(), settings, Metrics::new());
        elector.clock = clock;
        let leader = elector.subscribe();
        let stop = CancellationToken::new();
        let task = tokio::spawn(elector.run(stop.clone()));
        Candidate { leader, stop, task }
    }

    fn tokio_clock() -> Clock {
        Clock::Tokio {
            wall: Timestamp::from_second(1_750_000_000).unwrap(),
            at: Instant::now(),
        }
    }

    /// Lets spawned tasks run without moving the paused clock much.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    fn spec(holder: Option<&str>, renewed: i64, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(Into::into),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
            lease_duration_seconds: Some(seconds),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn decide_creates_a_missing_lease_and_renews_its_own() {
        let now = Timestamp::from_second(1000).unwrap();
        assert_eq!(decide(None, "a", now), Decision::Create);
        assert_eq!(
            decide(Some(&spec(Some("a"), 0, 15)), "a", now),
            Decision::Renew
        );
    }

    #[test]
    fn decide_waits_for_a_live_holder_and_takes_over_an_expired_or_released_one() {
        let now = Timestamp::from_second(1000).unwrap();
        assert_eq!(
            decide(Some(&spec(Some("b"), 990, 15)), "a", now),
            Decision::Wait
        );
        assert_eq!(
            decide(Some(&spec(Some("b"), 985, 15)), "a", now),
            Decision::Wait,
            "exactly at expiry it is still held"
        );
        assert_eq!(
            decide(Some(&spec(Some("b"), 984, 15)), "a", now),
            Decision::TakeOver
        );
        assert_eq!(
            decide(Some(&spec(None, 999, 1)), "a", now),
            Decision::TakeOver
        );
        assert_eq!(
            decide(Some(&spec(Some(""), 999, 15)), "a", now),
            Decision::TakeOver
        );
        assert_eq!(
            decide(Some(&LeaseSpec::default()), "a", now),
            Decision::TakeOver
        );
    }

    #[test]
    fn lease_duration_is_written_in_whole_seconds_rounded_up() {
        let mut settings = LeaseSettings {
            name: "nudge".into(),
            identity: "a".into(),
            lease_duration: Duration::from_millis(1500),
            renew_deadline: DEADLINE,
            retry_period: RETRY,
        };
        assert_eq!(settings.duration_seconds(), 2);
        settings.lease_duration = Duration::ZERO;
        assert_eq!(settings.duration_seconds(), 1);
    }

    #[test]
    fn holder_identity_prefers_pod_name() {
        // POD_NAME is not set in tests; the fallback is host name plus a suffix.
        if std::env::var_os("POD_NAME").is_none() {
            let a = holder_identity();
            let b = holder_identity();
            assert_ne!(a, b, "two processes on one host must differ");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_one_of_two_candidates_leads() {
        let store = MemoryLeases::default();
        let clock = tokio_clock();
        let a = candidate(&store, "a", clock);
        let b = candidate(&store, "b", clock);
        settle().await;
        for _ in 0..20 {
            assert!(a.is_leader() ^ b.is_leader());
            tokio::time::sleep(RETRY).await;
        }
        let holder = store.holder().unwrap();
        assert_eq!(a.is_leader(), holder == "a");
    }

    #[tokio::test(start_paused = true)]
    async fn released_lease_is_taken_within_a_retry_period() {
        let store = MemoryLeases::default();
        let clock = tokio_clock();
        let a = candidate(&store, "a", clock);
        settle().await;
        let b = candidate(&store, "b", clock);
        settle().await;
        assert!(a.is_leader() && !b.is_leader());
        a.stop.cancel();
        a.task.await.unwrap();
        assert!(!*a.leader.borrow());
        assert_eq!(store.holder(), None);
        let released = Instant::now();
        let mut leader = b.leader.clone();
        leader.wait_for(|l| *l).await.unwrap();
        assert!(released.elapsed() <= RETRY);
    }

    #[tokio::test(start_paused = true)]
    async fn crashed_holder_is_replaced_after_the_lease_duration() {
        let store = MemoryLeases::default();
        let clock = tokio_clock();
        let a = candidate(&store, "a", clock);
        settle().await;
        let b = candidate(&store, "b", clock);
        settle().await;
        // SIGKILL: the task is gone without releasing.
        a.task.abort();
        let killed = Instant::now();
        let mut leader = b.leader.clone();
        leader.wait_for(|l| *l).await.unwrap();
        let waited = killed.elapsed();
        assert!(waited > LEASE - RETRY, "took over too early: {waited:?}");
        assert!(waited <= LEASE + RETRY, "took over too late: {waited:?}");
        assert_eq!(store.holder().as_deref(), Some("b"));
        let _ = (a.stop, b.stop);
    }

    #[tokio::test(start_paused = true)]
    async fn leader_that_cannot_renew_steps_down_at_the_renew_deadline() {
        let store = MemoryLeases::default();
        let a = candidate(&store, "a", tokio_clock());
        settle().await;
        assert!(a.is_leader());
        store.failing.store(true, Ordering::SeqCst);
        let failing = Instant::now();
        let mut leader = a.leader.clone();
        leader.wait_for(|l| !*l).await.unwrap();
        let waited = failing.elapsed();
        assert!(
            waited >= DEADLINE - RETRY,
            "stepped down too early: {waited:?}"
        );
        assert!(
            waited <= DEADLINE + RETRY,
            "stepped down too late: {waited:?}"
        );
        assert!(
            waited < LEASE,
            "must stop leading before others may take over"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn leader_steps_down_at_once_when_another_holder_appears() {
        let store = MemoryLeases::default();
        let a = candidate(&store, "a", tokio_clock());
        settle().await;
        assert!(a.is_leader());
        store.steal("intruder");
        let stolen = Instant::now();
        let mut leader = a.leader.clone();
        leader.wait_for(|l| !*l).await.unwrap();
        assert!(stolen.elapsed() <= RETRY);
        // It keeps campaigning and does not fight the live holder.
        tokio::time::sleep(RETRY * 3).await;
        assert_eq!(store.holder().as_deref(), Some("intruder"));
    }
}
