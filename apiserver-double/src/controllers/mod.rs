//! What kube-controller-manager does for `apps/v1` workloads in a cluster
//! without nodes, run as one task beside the API: the Deployment,
//! ReplicaSet, StatefulSet and DaemonSet controllers.
//!
//! Like the real controllers they watch the store (an informer without
//! lag), queue keys, and act asynchronously: a client's write is answered
//! first, the controllers' reactions follow as separate writes, each with
//! its own resourceVersion and watch event, after `Config::controller_latency`
//! per step (informer delivery). Status goes through `/status` with a
//! `managedFields` entry `kube-controller-manager`, `Update`, subresource
//! `status`, as `tests/transcripts/admission_review.json` shows; ReplicaSets
//! and ControllerRevisions are created and updated by the same manager.
//! Pods are not served: the ReplicaSet and StatefulSet controllers keep the
//! pods they would have made (never scheduled, never ready) and report them
//! in their status as a real cluster without nodes does.
//!
//! Each controller module cites the Kubernetes source it follows. Known
//! departures: no Events, no adoption or release of objects by selector,
//! no rate limiter token bucket, no periodic resync.

pub(crate) mod client;
mod daemonset;
mod deployment;
#[cfg(test)]
pub(crate) mod fake;
mod hash;
mod history;
mod object;
mod queue;
mod replicaset;
mod statefulset;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::task::JoinHandle;
use tracing::Instrument;

use self::client::{Cluster, StoreCluster};
use self::queue::WorkQueue;
use self::replicaset::PodCounts;
use self::statefulset::StatefulPods;
use crate::meta;
use crate::resources::{CONTROLLER_REVISIONS, DAEMONSETS, DEPLOYMENTS, REPLICASETS, STATEFULSETS};
use crate::server::State;
use crate::store::{Event, EventKind};

/// What the work queue does with a key after a successful sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Requeue {
    /// Nothing until the next event.
    Done,
    /// Again after this long (`AddAfter`).
    After(Duration),
    /// Again once the informers would report what the sync changed outside
    /// the served objects (pods made or deleted): after the controller latency.
    Observe,
}

/// A key of the work queue: which controller and which object
/// (`namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Deployment(String),
    ReplicaSet(String),
    StatefulSet(String),
    DaemonSet(String),
}

/// `maxRetries` of the controllers: a key that failed this often is dropped
/// until its next event.
const MAX_RETRIES: u32 = 15;
/// Keys synced between two yields to the runtime.
const SYNCS_PER_YIELD: usize = 64;

/// Starts the controllers on the double's state; they stop when the
/// double shuts down.
pub(crate) fn spawn(state: Arc<State>) -> JoinHandle<()> {
    tokio::spawn(run(state).instrument(tracing::info_span!("kube-controller-manager")))
}

async fn run(state: Arc<State>) {
    let mut events = state.store.subscribe();
    let mut shutdown = state.shutdown.clone();
    let mut controllers = Controllers::new(state.config.controller_latency);
    controllers.resync(&state);
    let mut synced = 0usize;
    while !*shutdown.borrow() {
        // Events first, between any two syncs: the controllers' own writes
        // must not pile up until the receiver lags.
        controllers.drain(&mut events, &state);
        if let Some(key) = controllers.queue.pop_due(Instant::now()) {
            controllers.sync(&state, key);
            synced += 1;
            if synced.is_multiple_of(SYNCS_PER_YIELD) {
                tokio::task::yield_now().await;
            }
            continue;
        }
        let next = controllers.queue.next_due();
        tokio::select! {
            event = events.recv() => controllers.receive(event, &state),
            () = sleep_until(next) => {}
            _ = shutdown.changed() => {}
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The controllers' state: the queue and the pods they keep.
struct Controllers {
    queue: WorkQueue<Key>,
    latency: Duration,
    replica_set_pods: PodCounts,
    stateful_set_pods: StatefulPods,
}

impl Controllers {
    fn new(latency: Duration) -> Self {
        Self {
            queue: WorkQueue::default(),
            latency,
            replica_set_pods: PodCounts::new(),
            stateful_set_pods: StatefulPods::new(),
        }
    }

    /// Queues every workload now (at start, and after missed events).
    fn resync(&mut self, state: &State) {
        let now = Instant::now();
        for (storage, key) in [
            (DEPLOYMENTS, Key::Deployment as fn(String) -> Key),
            (REPLICASETS, Key::ReplicaSet),
            (STATEFULSETS, Key::StatefulSet),
            (DAEMONSETS, Key::DaemonSet),
        ] {
            for obj in state.store.list(storage, "") {
                let store_key = meta::store_key(Some(meta::namespace(&obj)), meta::name(&obj));
                self.queue.add_at(key(store_key), now);
            }
        }
    }

    /// The event handlers: which keys a change concerns.
    fn observe(&mut self, event: &Event) {
        let at = Instant::now() + self.latency;
        let deleted = event.kind == EventKind::Deleted;
        match event.resource {
            DEPLOYMENTS if !deleted => self.queue.add_at(Key::Deployment(event.key.clone()), at),
            REPLICASETS => {
                if deleted {
                    self.replica_set_pods.remove(meta::uid(&event.object));
                } else {
                    self.queue.add_at(Key::ReplicaSet(event.key.clone()), at);
                }
                self.queue_owners(event, "Deployment", Key::Deployment, at);
            }
            STATEFULSETS if deleted => {
                self.stateful_set_pods.remove(meta::uid(&event.object));
            }
            STATEFULSETS => self.queue.add_at(Key::StatefulSet(event.key.clone()), at),
            DAEMONSETS if !deleted => self.queue.add_at(Key::DaemonSet(event.key.clone()), at),
            CONTROLLER_REVISIONS => self.queue_owners(event, "DaemonSet", Key::DaemonSet, at),
            _ => {}
        }
    }

    /// Queues the controller (of `kind`) of the object before and after the change.
    fn queue_owners(&mut self, event: &Event, kind: &str, key: fn(String) -> Key, at: Instant) {
        let namespace = meta::namespace(&event.object);
        let objects = std::iter::once(event.object.as_ref()).chain(event.prev.as_deref());
        for owner in objects.filter_map(|o| object::controller_name(o, kind)) {
            self.queue
                .add_at(key(meta::store_key(Some(namespace), owner)), at);
        }
    }

    /// Observes every event already received, without waiting.
    fn drain(&mut self, events: &mut broadcast::Receiver<Arc<Event>>, state: &State) {
        loop {
            match events.try_recv() {
                Ok(event) => self.observe(&event),
                Err(TryRecvError::Lagged(missed)) => self.lagged(missed, state),
                Err(TryRecvError::Empty | TryRecvError::Closed) => return,
            }
        }
    }

    /// Observes one awaited event.
    fn receive(&mut self, event: Result<Arc<Event>, RecvError>, state: &State) {
        match event {
            Ok(event) => self.observe(&event),
            Err(RecvError::Lagged(missed)) => self.lagged(missed, state),
            // The store lives as long as the state: never closed while running.
            Err(RecvError::Closed) => {}
        }
    }

    /// Events were missed: every workload is looked at again.
    fn lagged(&mut self, missed: u64, state: &State) {
        tracing::debug!(missed, "events missed: resyncing every workload");
        self.resync(state);
    }

    /// One sync of one key, and its requeue.
    fn sync(&mut self, state: &State, key: Key) {
        let mut cluster = StoreCluster::new(state);
        let result = match &key {
            Key::Deployment(k) => self.sync_deployment(state, &mut cluster, k),
            Key::ReplicaSet(k) => match state.store.get(REPLICASETS, k) {
                Some(rs) => replicaset::sync_replica_set(
                    &mut cluster,
                    (*rs).clone(),
                    &mut self.replica_set_pods,
                ),
                None => Ok(Requeue::Done),
            },
            Key::StatefulSet(k) => match state.store.get(STATEFULSETS, k) {
                Some(set) => {
                    let revisions = history::revisions_of(
                        &set,
                        in_namespace(state, CONTROLLER_REVISIONS, &set),
                    );
                    statefulset::sync_stateful_set(
                        &mut cluster,
                        (*set).clone(),
                        revisions,
                        &mut self.stateful_set_pods,
                    )
                }
                None => Ok(Requeue::Done),
            },
            Key::DaemonSet(k) => match state.store.get(DAEMONSETS, k) {
                Some(ds) => {
                    let histories = daemonset::owned_revisions(
                        &ds,
                        in_namespace(state, CONTROLLER_REVISIONS, &ds),
                    );
                    daemonset::sync_daemon_set(&mut cluster, (*ds).clone(), histories)
                }
                None => Ok(Requeue::Done),
            },
        };
        let now = Instant::now();
        match result {
            Ok(requeue) => {
                self.queue.forget(&key);
                match requeue {
                    Requeue::Done => {}
                    Requeue::After(after) => self.queue.add_at(key, now + after),
                    Requeue::Observe => self.queue.add_at(key, now + self.latency),
                }
            }
            Err(error) if self.queue.failures(&key) < MAX_RETRIES => {
                tracing::debug!(?key, %error, "sync failed, retrying");
                self.queue.add_rate_limited(key, now);
            }
            Err(error) => {
                tracing::warn!(?key, %error, "sync failed too often, dropped until the next change");
                self.queue.forget(&key);
            }
        }
    }

    fn sync_deployment(
        &self,
        state: &State,
        cluster: &mut impl Cluster,
        key: &str,
    ) -> Result<Requeue, client::ClientError> {
        let Some(d) = state.store.get(DEPLOYMENTS, key) else {
            return Ok(Requeue::Done);
        };
        let owned = deployment::owned_replica_sets(&d, in_namespace(state, REPLICASETS, &d));
        deployment::sync_deployment(
            cluster,
            SystemTime::now(),
            (*d).clone(),
            &owned,
            &self.replica_set_pods,
        )
    }
}

/// The objects of a store slot in the namespace of `owner`, shared with the
/// store: a sync copies only those its owner selects (copying every one per
/// sync took 7 % of the double's CPU in the benchmark's 10× initial stamps).
fn in_namespace(state: &State, storage: usize, owner: &Value) -> Vec<Arc<Value>> {
    state
        .store
        .list(storage, &format!("{}/", meta::namespace(owner)))
}
