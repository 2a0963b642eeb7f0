//! Leader election on a `coordination.k8s.io/v1` Lease (design §7): every replica
//! watches and serves the webhook; only the Lease holder stamps.
//!
//! A small implementation of client-go's algorithm, kept rather than a crate
//! (design §7, Decisions): of the crates checked only kube-lease-manager 0.13
//! supports kube 5, and it judges expiry from `renewTime` against the local wall
//! clock, keeps reporting leadership while renewals fail, and lets a successor
//! take a released Lease only when the old one would have expired (kubert's lease
//! needs kube 1.1, kube-leader-election 0.44 kube 4, kube-coordinate kube 2). The
//! algorithm:
//!
//! - **Acquire**: every `retry_period` a candidate reads the Lease. Absent: it
//!   creates it. Held by nobody, or expired (see below): it takes it over with an
//!   update carrying the `resourceVersion` it read, so of two candidates only one
//!   succeeds (the other gets 409).
//! - **Renew**: the leader updates `renewTime` every `retry_period`, again with
//!   optimistic concurrency. A 409 or a Lease held by someone else means another
//!   replica took over: leadership is lost at once. Other failures are retried until
//!   `renew_deadline` has passed since the last successful renewal, then leadership
//!   is lost. `renew_deadline < lease_duration`, so a leader stops stamping before
//!   anyone may take over.
//! - **Release**: on shutdown the leader clears `holderIdentity` and sets
//!   `leaseDurationSeconds = 1`, so a follower takes over within one retry period.
//!
//! Expiry is judged as client-go does, never from the timestamps in the Lease:
//! they were written by another replica's wall clock, and with clock skew a live
//! leader whose clock is behind would look expired (two leaders), or a dead one
//! whose clock is ahead would look alive for as long as the skew. Instead each
//! replica remembers the Lease record (its whole spec: holder, times, duration,
//! transitions) it last read and the instant, on its own monotonic clock, at which
//! it first read that record. A holder's Lease is expired only once that record has
//! stayed unchanged for `leaseDurationSeconds` (the duration the holder wrote) of
//! this replica's time: a live leader changes the record at every renewal, so it
//! is never taken over, whatever its `renewTime` says. A record read for the first
//! time counts as observed now, so a freshly started replica waits a full lease
//! duration before it takes over a held Lease. So the replicas' clocks may disagree
//! arbitrarily; only their rates must agree (the fastest may run faster than the
//! slowest by well under the ratio `lease_duration / renew_deadline`). A Lease with
//! no holder (never held, or released) is taken at once. No jitter is added to
//! `retry_period`.
//!
//! The decision ([`decide`]) is a pure function; the Lease is read and written
//! through [`LeaseStore`], implemented for the API server by [`KubeLeases`].

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;
use crate::config::LeaderElectionConfig;

/// Why a Lease could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
#[non_exhaustive]
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

/// The Lease record a replica last read, and when it first read it: all it
/// trusts to tell a live holder from a dead one (the times in the record come
/// from another replica's clock).
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// The Lease's spec as read (holder, times, duration, transitions, ...).
    pub record: LeaseSpec,
    /// When this replica first read `record`, on its own monotonic clock.
    pub since: Instant,
}

impl Observation {
    /// What a replica knows after reading `record` at `now`, having known
    /// `previous` before: `previous` again if the record is unchanged (its `since`
    /// kept), else `record` first seen at `now`.
    pub fn update(previous: Option<Self>, record: &LeaseSpec, now: Instant) -> Self {
        match previous {
            Some(previous) if previous.record == *record => previous,
            _ => Self {
                record: record.clone(),
                since: now,
            },
        }
    }
}

/// The decision of candidate `me` at monotonic time `now` given the Lease's spec
/// (`None`: no Lease) and what it had `observed` before this read. Pure, for
/// tests.
///
/// A Lease held by another replica is expired only if `observed` holds this very
/// record, first seen at least `leaseDurationSeconds` before `now`; a record not
/// seen before counts as first seen at `now`. `renewTime` and `acquireTime` are
/// not consulted.
pub fn decide(
    spec: Option<&LeaseSpec>,
    me: &str,
    observed: Option<&Observation>,
    now: Instant,
) -> Decision {
    let Some(spec) = spec else {
        return Decision::Create;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => Decision::TakeOver,
        Some(holder) if holder == me => Decision::Renew,
        Some(_) if is_expired(spec, observed, now) => Decision::TakeOver,
        Some(_) => Decision::Wait,
    }
}

/// Whether `spec` has been seen unchanged for at least its
/// `leaseDurationSeconds` (none or negative: zero) by `now`, as client-go's
/// `observedTime + leaseDuration` not after `now`.
fn is_expired(spec: &LeaseSpec, observed: Option<&Observation>, now: Instant) -> bool {
    let since = observed
        .filter(|o| o.record == *spec)
        .map_or(now, |o| o.since);
    let seconds = u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0);
    since
        .checked_add(Duration::from_secs(seconds))
        .is_some_and(|expiry| expiry <= now)
}

/// Where the wall-clock times written into the Lease come from: the system clock,
/// or (in tests) tokio's clock, which pauses and advances with the test, from a
/// chosen wall time (tests skew replicas by choosing different ones). Expiry never
/// depends on it.
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
                use k8s_openapi::jiff::SignedDuration;
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
    /// The Lease record last read or written, and when it was first seen.
    observed: Option<Observation>,
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
            observed: None,
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
    pub async fn run(mut self, shutdown: CancellationToken) {
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
    async fn attempt(&mut self, timeout: Duration) -> Result<bool, LeaseError> {
        tokio::time::timeout(timeout, self.try_acquire_or_renew())
            .await
            .unwrap_or(Err(LeaseError::Timeout))
    }

    async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        let current = self.store.get().await?;
        let seen = Instant::now();
        let now = self.clock.now();
        let record = current.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        let decision = decide(
            record.as_ref(),
            &self.settings.identity,
            self.observed.as_ref(),
            seen,
        );
        self.observed = record.map(|r| Observation::update(self.observed.take(), &r, seen));
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
            Ok(lease) => {
                // What we wrote is the record others now see change; as client-go
                // does, it counts as observed now.
                let record = lease.spec.unwrap_or_default();
                self.observed = Some(Observation::update(None, &record, Instant::now()));
                Ok(true)
            }
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
        skewed_clock(0)
    }

    /// Tokio's clock, `skew` seconds ahead of [`tokio_clock`] (behind if negative).
    fn skewed_clock(skew: i64) -> Clock {
        Clock::Tokio {
            wall: Timestamp::from_second(WALL + skew).unwrap(),
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

    /// Wall-clock seconds of this test's "true" time; remote clocks are skewed
    /// from it.
    const WALL: i64 = 1_750_000_000;
    const HOUR: i64 = 3600;

    /// One read of the Lease by a follower at `now`: its decision, and what it
    /// remembers afterwards (as [`LeaderElector`] does).
    fn read(observed: &mut Option<Observation>, record: &LeaseSpec, now: Instant) -> Decision {
        let decision = decide(Some(record), "follower", observed.as_ref(), now);
        *observed = Some(Observation::update(observed.take(), record, now));
        decision
    }

    #[test]
    fn decide_creates_a_missing_lease_and_renews_its_own() {
        let now = Instant::now();
        assert_eq!(decide(None, "a", None, now), Decision::Create);
        let own = spec(Some("a"), 0, 15);
        assert_eq!(decide(Some(&own), "a", None, now), Decision::Renew);
        let seen_long_ago = Observation {
            record: own.clone(),
            since: now,
        };
        assert_eq!(
            decide(Some(&own), "a", Some(&seen_long_ago), now + LEASE * 10),
            Decision::Renew
        );
    }

    #[test]
    fn leader_renewing_with_a_clock_an_hour_behind_is_never_taken_over() {
        let start = Instant::now();
        let mut observed = None;
        // The leader renews every retry period; its renewTime is always an hour
        // old by the follower's wall clock (expired under a renewTime rule).
        for tick in 0..1000u32 {
            let elapsed = RETRY * tick;
            let renewed = WALL - HOUR + i64::from(tick) * 2;
            let record = spec(Some("leader"), renewed, 15);
            assert_eq!(
                read(&mut observed, &record, start + elapsed),
                Decision::Wait,
                "took over a live leader after {elapsed:?}"
            );
            // The follower also reads in between renewals.
            assert_eq!(
                read(&mut observed, &record, start + elapsed + RETRY / 2),
                Decision::Wait
            );
        }
    }

    #[test]
    fn dead_holder_with_a_clock_an_hour_ahead_is_taken_over_after_the_lease_duration_of_local_time()
    {
        let start = Instant::now();
        let mut observed = None;
        // Alive for a while: renewTime an hour in the future.
        let mut last = spec(Some("leader"), WALL + HOUR, 15);
        for tick in 0..10u32 {
            last = spec(Some("leader"), WALL + HOUR + i64::from(tick) * 2, 15);
            assert_eq!(
                read(&mut observed, &last, start + RETRY * tick),
                Decision::Wait
            );
        }
        // It dies: the follower keeps reading the same record.
        let died = start + RETRY * 9;
        let mut now = died;
        while now < died + LEASE {
            assert_eq!(read(&mut observed, &last, now), Decision::Wait);
            now += Duration::from_millis(500);
        }
        assert_eq!(
            read(
                &mut observed,
                &last,
                died + LEASE - Duration::from_millis(1)
            ),
            Decision::Wait
        );
        assert_eq!(
            read(&mut observed, &last, died + LEASE),
            Decision::TakeOver,
            "not taken over although unchanged for the lease duration"
        );
    }

    #[test]
    fn fresh_replica_waits_a_full_lease_duration_even_if_renew_time_looks_expired() {
        let start = Instant::now();
        // Renewed an hour ago by our wall clock, or at the epoch: the record
        // gives no evidence that the holder is dead until it stops changing for a
        // lease duration of our own time.
        for renewed in [WALL - HOUR, 0] {
            let record = spec(Some("holder"), renewed, 15);
            assert_eq!(decide(Some(&record), "a", None, start), Decision::Wait);
            let mut observed = None;
            assert_eq!(read(&mut observed, &record, start), Decision::Wait);
            assert_eq!(
                read(
                    &mut observed,
                    &record,
                    start + LEASE - Duration::from_millis(1)
                ),
                Decision::Wait
            );
            assert_eq!(
                read(&mut observed, &record, start + LEASE),
                Decision::TakeOver
            );
        }
        // Having seen another record before is no head start for a new one.
        let mut observed = Some(Observation {
            record: spec(Some("other"), WALL, 15),
            since: start,
        });
        let record = spec(Some("holder"), WALL - HOUR, 15);
        assert_eq!(
            read(&mut observed, &record, start + LEASE * 2),
            Decision::Wait
        );
    }

    #[test]
    fn released_or_unheld_lease_is_taken_at_once() {
        let now = Instant::now();
        // As `release` writes it: no holder, one second, renewed just now (or an
        // hour ahead: the clock does not matter either).
        for renewed in [WALL, WALL + HOUR, WALL - HOUR] {
            let released = spec(None, renewed, 1);
            assert_eq!(decide(Some(&released), "a", None, now), Decision::TakeOver);
        }
        let empty = spec(Some(""), WALL, 15);
        assert_eq!(decide(Some(&empty), "a", None, now), Decision::TakeOver);
        assert_eq!(
            decide(Some(&LeaseSpec::default()), "a", None, now),
            Decision::TakeOver
        );
    }

    #[test]
    fn any_change_to_the_record_restarts_the_observation() {
        let start = Instant::now();
        let later = start + LEASE * 2;
        let record = spec(Some("holder"), WALL, 15);
        let seen = Observation::update(None, &record, start);
        assert_eq!(seen.since, start);
        let unchanged = Observation::update(Some(seen.clone()), &record, later);
        assert_eq!(unchanged.since, start, "an unchanged record keeps its age");
        assert_eq!(
            decide(Some(&record), "a", Some(&seen), later),
            Decision::TakeOver
        );
        let changes = [
            spec(Some("holder"), WALL + 1, 15),
            spec(Some("other"), WALL, 15),
            spec(Some("holder"), WALL, 16),
            LeaseSpec {
                lease_transitions: Some(1),
                ..record.clone()
            },
            LeaseSpec {
                acquire_time: Some(MicroTime(Timestamp::from_second(WALL).unwrap())),
                ..record.clone()
            },
        ];
        for changed in changes {
            assert_eq!(
                decide(Some(&changed), "a", Some(&seen), later),
                Decision::Wait,
                "{changed:?}"
            );
            let renewed = Observation::update(Some(seen.clone()), &changed, later);
            assert_eq!((renewed.record, renewed.since), (changed, later));
        }
    }

    #[test]
    fn holder_is_given_the_lease_duration_it_wrote() {
        let start = Instant::now();
        let short = spec(Some("holder"), WALL, 2);
        let seen = Some(Observation {
            record: short.clone(),
            since: start,
        });
        assert_eq!(
            decide(
                Some(&short),
                "a",
                seen.as_ref(),
                start + Duration::from_secs(2)
            ),
            Decision::TakeOver
        );
        let unknown = LeaseSpec {
            lease_duration_seconds: None,
            ..short
        };
        assert_eq!(
            decide(Some(&unknown), "a", None, start),
            Decision::TakeOver,
            "no duration: expired as soon as seen, as in client-go"
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

    #[tokio::test(start_paused = true)]
    async fn leader_with_a_clock_an_hour_behind_keeps_the_lease_and_no_second_leader_appears() {
        let store = MemoryLeases::default();
        let a = candidate(&store, "a", skewed_clock(-HOUR));
        settle().await;
        assert!(a.is_leader());
        let b = candidate(&store, "b", tokio_clock());
        settle().await;
        for _ in 0..50 {
            assert!(a.is_leader(), "the live leader lost the lease");
            assert!(!b.is_leader(), "two leaders");
            tokio::time::sleep(RETRY).await;
        }
        assert_eq!(store.holder().as_deref(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn dead_holder_with_a_clock_an_hour_ahead_is_replaced_after_the_lease_duration() {
        let store = MemoryLeases::default();
        let a = candidate(&store, "a", skewed_clock(HOUR));
        settle().await;
        let b = candidate(&store, "b", tokio_clock());
        settle().await;
        assert!(a.is_leader() && !b.is_leader());
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
}
