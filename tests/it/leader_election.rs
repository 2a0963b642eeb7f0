//! Leader election on a real Lease (the double, or `NUDGE_TEST_KUBECONFIG`): one
//! of several candidates leads, a released lease passes on within a retry period,
//! a crashed holder is replaced after the lease duration, and only the leader
//! stamps.

use std::time::{Duration, Instant};

use crate::support::*;
use k8s_openapi::api::coordination::v1::Lease;
use nudge::__private::runtime::lease::{
    KubeLeases, LeaderElector, LeaseError, LeaseSettings, LeaseStore,
};
use nudge::__private::runtime::metrics::Metrics;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const LEASE_DURATION: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_secs(1);
const RETRY_PERIOD: Duration = Duration::from_millis(400);
/// The lease of the test that watches a leader keep it.
const STEADY_LEASE_DURATION: Duration = Duration::from_secs(3);
/// Allowance for HTTP round trips on a loaded machine.
const SLACK: Duration = Duration::from_millis(400);
const CONFIG_HASH: &str = "nudge.dev/config-hash";

/// The Lease in the test namespace, counting the reads that have answered: a
/// candidate that has read it has decided on what it read before its next read.
struct CountedLeases {
    leases: KubeLeases,
    reads: watch::Sender<usize>,
}

#[nudge::async_trait]
impl LeaseStore for CountedLeases {
    async fn get(&self) -> Result<Option<Lease>, LeaseError> {
        let lease = self.leases.get().await;
        self.reads.send_modify(|n| *n += 1);
        lease
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        self.leases.create(lease).await
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        self.leases.replace(lease).await
    }
}

struct Candidate {
    identity: String,
    leader: watch::Receiver<bool>,
    reads: watch::Receiver<usize>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The tests' lease timing, for candidate `identity`.
fn settings(identity: &str) -> LeaseSettings {
    LeaseSettings {
        name: "nudge".into(),
        identity: identity.into(),
        lease_duration: LEASE_DURATION,
        renew_deadline: RENEW_DEADLINE,
        retry_period: RETRY_PERIOD,
    }
}

impl Candidate {
    fn start(cluster: &TestCluster, identity: &str) -> Candidate {
        Self::start_with(cluster, settings(identity))
    }

    fn start_with(cluster: &TestCluster, settings: LeaseSettings) -> Candidate {
        let identity = settings.identity.clone();
        let (reads, counted) = watch::channel(0);
        let leases = CountedLeases {
            leases: KubeLeases::new(cluster.client(), cluster.namespace(), "nudge"),
            reads,
        };
        let elector = LeaderElector::with_store(leases, settings, Metrics::new());
        let leader = elector.subscribe();
        let stop = CancellationToken::new();
        let task = tokio::spawn(elector.run(stop.clone()));
        Candidate {
            identity,
            leader,
            reads: counted,
            stop,
            task,
        }
    }

    /// Waits until it has read the Lease `n` more times from now: it has
    /// decided on all but the last of those reads.
    async fn wait_reads(&mut self, n: usize) {
        let target = *self.reads.borrow_and_update() + n;
        tokio::time::timeout(WAIT, self.reads.wait_for(|reads| *reads >= target))
            .await
            .unwrap_or_else(|_| panic!("{} did not read the Lease {n} times", self.identity))
            .unwrap();
    }

    fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    async fn wait_until_leader(&mut self) -> Instant {
        tokio::time::timeout(WAIT, self.leader.wait_for(|l| *l))
            .await
            .unwrap_or_else(|_| panic!("{} never became leader", self.identity))
            .unwrap();
        Instant::now()
    }
}

async fn holder(cluster: &TestCluster) -> Option<String> {
    cluster
        .api::<Lease>()
        .get_opt("nudge")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_candidates_leads_and_keeps_leading() {
    let cluster = TestCluster::start("lease-two-candidates").await;
    // A leader that cannot renew within its renew deadline steps down, as it
    // must: so that this test is about keeping the lead and not about a loaded
    // machine's latency, its renewals get 2.5 s (a renewal is a GET and a PUT).
    let steady = |identity| LeaseSettings {
        lease_duration: STEADY_LEASE_DURATION,
        renew_deadline: STEADY_LEASE_DURATION - Duration::from_millis(500),
        ..settings(identity)
    };
    let a = Candidate::start_with(&cluster, steady("replica-a"));
    let b = Candidate::start_with(&cluster, steady("replica-b"));
    let leader = wait_for("a leader", WAIT, || async {
        match (a.is_leader(), b.is_leader()) {
            (true, false) => Some("replica-a"),
            (false, true) => Some("replica-b"),
            (true, true) => panic!("two leaders"),
            (false, false) => None,
        }
    })
    .await;
    // Over several lease durations (a duration is what this test is about)
    // nobody else takes it and nobody lets go, while both keep reading it.
    let reads_before = [*a.reads.borrow(), *b.reads.borrow()];
    let until = Instant::now() + STEADY_LEASE_DURATION * 3;
    while Instant::now() < until {
        assert_eq!(
            (a.is_leader(), b.is_leader()),
            (leader == "replica-a", leader == "replica-b")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(holder(&cluster).await.as_deref(), Some(leader));
    for (candidate, before) in [(&a, reads_before[0]), (&b, reads_before[1])] {
        let reads = *candidate.reads.borrow() - before;
        assert!(
            reads >= 2,
            "{} read the Lease {reads} times",
            candidate.identity
        );
    }
    a.stop.cancel();
    b.stop.cancel();
    let _ = (a.task.await, b.task.await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_lease_is_acquired_by_the_other_within_a_retry_period() {
    let cluster = TestCluster::start("lease-release").await;
    let mut a = Candidate::start(&cluster, "replica-a");
    a.wait_until_leader().await;
    let mut b = Candidate::start(&cluster, "replica-b");
    // b has read the held Lease and decided (at least once) what to do about it.
    b.wait_reads(2).await;
    assert!(
        !b.is_leader(),
        "the follower must wait while the lease is held"
    );

    a.stop.cancel();
    a.task.await.unwrap();
    let released = Instant::now();
    assert!(!*a.leader.borrow(), "a stops leading before it releases");
    let after_release = holder(&cluster).await;
    assert!(
        matches!(after_release.as_deref(), None | Some("replica-b")),
        "the lease is released (or already taken by b): {after_release:?}"
    );

    let acquired = b.wait_until_leader().await;
    let waited = acquired - released;
    assert!(
        waited <= RETRY_PERIOD + SLACK,
        "took {waited:?}, more than a retry period"
    );
    assert_eq!(holder(&cluster).await.as_deref(), Some("replica-b"));
    b.stop.cancel();
    b.task.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_that_stops_renewing_is_replaced_after_the_lease_duration() {
    let cluster = TestCluster::start("lease-crash").await;
    let mut a = Candidate::start(&cluster, "replica-a");
    a.wait_until_leader().await;
    let mut b = Candidate::start(&cluster, "replica-b");
    // b has seen the live holder's record: its lease duration counts from there.
    b.wait_reads(1).await;

    // SIGKILL: the task disappears without releasing.
    a.task.abort();
    let killed = Instant::now();
    let acquired = b.wait_until_leader().await;
    let waited = acquired - killed;
    assert!(
        waited >= LEASE_DURATION - RETRY_PERIOD,
        "took over a live lease after {waited:?}"
    );
    assert!(
        waited <= LEASE_DURATION + RETRY_PERIOD + SLACK,
        "took {waited:?} to replace a dead holder"
    );
    assert_eq!(holder(&cluster).await.as_deref(), Some("replica-b"));
    b.stop.cancel();
    b.task.await.unwrap();
}

/// The sample `name` (with its labels) of `metrics`, 0 when not exported.
async fn sample_at(metrics: &MetricsAt, name: &str) -> f64 {
    let text = metrics.text().await.unwrap_or_default();
    sample(&text, name).unwrap_or(0.0)
}

/// Sum of the samples of one series (any labels) in `metrics`.
fn sum(metrics: &Metrics, series: &str) -> f64 {
    sample_sum(&metrics.encode().unwrap(), series)
}

fn fast_election(cluster: &TestCluster) -> nudge::config::Config {
    let mut config = cluster.nudge_config();
    config.leader_election.lease_duration = LEASE_DURATION;
    config.leader_election.renew_deadline = RENEW_DEADLINE;
    config.leader_election.retry_period = RETRY_PERIOD;
    config
}

fn start_nudge(cluster: &TestCluster, metrics: &Metrics) -> (CancellationToken, JoinHandle<()>) {
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(nudge::__private::runtime::run_with_metrics(
        fast_election(cluster),
        cluster.client(),
        shutdown.clone(),
        metrics.clone(),
    ));
    let task = tokio::spawn(async move {
        task.await
            .expect("nudge does not panic")
            .expect("nudge runs");
    });
    (shutdown, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_does_not_stamp_and_stamps_once_it_leads() {
    let cluster = TestCluster::start("lease-follower-stamps").await;
    // Another replica holds the lease.
    let mut other = Candidate::start(&cluster, "other-replica");
    other.wait_until_leader().await;

    cluster
        .auto_deployment("web", "app-config", &[("a", "1")])
        .await;
    let metrics = Metrics::new();
    let (shutdown, task) = start_nudge(&cluster, &metrics);
    let patches = cluster.patch_counter("Deployment", "web").await;

    wait_for("a stamp skipped as follower", WAIT, || async {
        (sum(&metrics, "nudge_stamps_total") > 0.0).then_some(())
    })
    .await;
    let text = metrics.encode().unwrap();
    assert!(
        text.contains(
            r#"nudge_stamps_total{kind="deployment",source="configmap",result="skipped_follower"}"#
        ),
        "{text}"
    );
    assert_eq!(sum(&metrics, "nudge_leader"), 0.0);
    // It has decided about web (the skip above) and holds nothing back.
    wait_idle(&metrics).await;
    assert_eq!(patches.count(&cluster).await, 0, "a follower never patches");
    assert!(
        !cluster
            .template_annotations("Deployment", "web")
            .await
            .contains_key(CONFIG_HASH)
    );

    // The leader goes away cleanly: this replica takes over and, with no new
    // change, stamps the workload it had kept pending.
    other.stop.cancel();
    other.task.await.unwrap();
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    assert_eq!(sum(&metrics, "nudge_leader"), 1.0);
    wait_idle(&metrics).await;
    let applied = r#"nudge_stamps_total{kind="deployment",source="configmap",result="applied"} 1"#;
    assert!(metrics.encode().unwrap().contains(applied));
    // Made now: while it followed, web was all it had to decide about (and the
    // sentinel's own stamps are counted beside web's).
    let sentinel = cluster.sentinel().await;
    sentinel.quiesce(&metrics).await;
    assert_eq!(patches.count(&cluster).await, 1);

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("nudge stops")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_stamp_each_change_once() {
    let cluster = TestCluster::start("lease-two-replicas").await;
    cluster
        .auto_deployment("web", "app-config", &[("a", "1")])
        .await;
    let (a, b) = (Metrics::new(), Metrics::new());
    let (stop_a, task_a) = start_nudge(&cluster, &a);
    let (stop_b, task_b) = start_nudge(&cluster, &b);
    let first = wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, None).await;
    wait_for("one leader", WAIT, || async {
        (sum(&a, "nudge_leader") + sum(&b, "nudge_leader") == 1.0).then_some(())
    })
    .await;

    let (leader, follower) = if sum(&a, "nudge_leader") == 1.0 {
        (&a, &b)
    } else {
        (&b, &a)
    };
    // The follower has fetched app-config, its only ConfigMap.
    let follower = MetricsAt::Registry(follower.clone());
    follower.wait_observations("configmap", 0.0).await;
    let fetched = follower.observations("configmap").await;

    let patches = cluster.patch_counter("Deployment", "web").await;
    cluster.put_configmap("app-config", &[("a", "2")]).await;
    wait_for_stamp(&cluster, "Deployment", "web", CONFIG_HASH, Some(&first)).await;
    // The follower has the change too, and the leader has finished (a sentinel
    // made now, so that the follower's count above was app-config's alone);
    // then the follower, which had the change before the leader's quiesce
    // began, has nothing outstanding either.
    follower.wait_observations("configmap", fetched).await;
    let sentinel = cluster.sentinel().await;
    sentinel.quiesce(leader).await;
    wait_idle(&follower).await;
    assert_eq!(
        sample_at(
            &follower,
            r#"nudge_stamps_total{kind="deployment",source="configmap",result="applied"}"#
        )
        .await,
        0.0,
        "the follower wrote nothing"
    );
    assert_eq!(patches.count(&cluster).await, 1, "one change, one PATCH");

    stop_a.cancel();
    stop_b.cancel();
    for task in [task_a, task_b] {
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("nudge stops")
            .unwrap();
    }
}
