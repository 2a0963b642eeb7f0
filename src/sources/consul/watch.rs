//! The Consul source's run loop: follows the engine's interest, keeps the query plan
//! in step with the tracked keys, and turns answers into observations.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::ConsulSource;
use super::client::{ClientError, ConsulClient};
use super::plan::{OneOffRead, Plan, WatchTarget};
use super::query::{Answer, Origin, QueryLoop, Read};
use super::state::{Registry, Seen, TrackOutcome, UntrackOutcome};
use crate::errors::error_chain;
use crate::model::Name;
use crate::rate::{Backoff, debounced};
use crate::sources::Source as _;
use crate::sources::{Interest, SourceContext, SourceError, SourceUpdate};

/// How long the plan waits for more interest changes before regrouping, so that a
/// burst of `Track`s (start-up) is planned once instead of once per key: until
/// none came for `SETTLE`, and at most `MAX_SETTLE` after the first. Each
/// regrouping abandons the blocking queries of the groups it changes, which
/// Consul keeps serving until their `wait` ends; a start-up that regrouped at
/// every page of workloads listed (53 times at the benchmark's 10× scale)
/// abandoned hundreds, and left the new queries waiting for a slot.
const SETTLE: Duration = Duration::from_millis(50);
const MAX_SETTLE: Duration = Duration::from_secs(1);
/// Answers buffered between the query loops and the run loop.
const ANSWER_BUFFER: usize = 64;

/// Runs the source until shutdown (see [`crate::sources::Source::run`]).
pub(super) async fn run(source: Arc<ConsulSource>, ctx: SourceContext) -> Result<(), SourceError> {
    let (parts, health) = ctx.into_parts();
    source
        .client
        .record_into(health.sources().clone(), source.name().clone());
    let crate::sources::ContextParts {
        mut interest,
        updates,
        ready,
        shutdown,
        ..
    } = parts;
    // Consul being unreachable does not make nudge unready: the Kubernetes side
    // still works, and the last known fingerprints stay in force.
    ready.listed();
    let (answers_tx, mut answers_rx) = mpsc::channel(ANSWER_BUFFER);
    let mut watch = Watch {
        source: source.clone(),
        registry: Registry::default(),
        plan: Plan::default(),
        running: BTreeMap::new(),
        next_id: 0,
        answers: answers_tx,
        // The source's own tasks stop when it returns, shutdown or not.
        shutdown: shutdown.child_token(),
        pending_reads: BTreeSet::new(),
        read_alone: BTreeSet::new(),
        tasks: TaskTracker::new(),
    };
    let mut replan_at: Option<Instant> = None;
    // The first interest change not planned yet.
    let mut unplanned_since: Option<Instant> = None;
    let mut interest_open = true;
    tracing::info!(source = %source.name(), address = %source.address(), "Consul source started");
    'run: loop {
        let mut outgoing = Vec::new();
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            first = interest.recv(), if interest_open => {
                let Some(first) = first else {
                    interest_open = false;
                    continue;
                };
                let mut keys_changed = watch.apply_interest(first, &mut outgoing);
                while let Ok(more) = interest.try_recv() {
                    keys_changed |= watch.apply_interest(more, &mut outgoing);
                }
                if keys_changed {
                    let now = Instant::now();
                    let first = *unplanned_since.get_or_insert(now);
                    replan_at = Some(debounced(now, first, SETTLE, MAX_SETTLE));
                } else if replan_at.is_none() {
                    watch.read_pending();
                }
            }
            () = sleep_until(replan_at), if replan_at.is_some() => {
                replan_at = None;
                unplanned_since = None;
                watch.replan();
            }
            Some(answer) = answers_rx.recv() => watch.apply_answer(answer, &mut outgoing),
        }
        for update in outgoing {
            tokio::select! {
                sent = updates.send(update) => if sent.is_err() { break 'run },
                () = shutdown.cancelled() => break 'run,
            }
        }
    }
    watch.stop_all();
    watch.shutdown.cancel();
    watch.tasks.close();
    watch.tasks.wait().await;
    tracing::info!(source = %source.name(), "Consul source stopped");
    Ok(())
}

/// Keys that `current` assigns to a query that was already running (not in
/// `started`) and that `previous` assigned elsewhere or not at all.
fn joined_running_queries(
    previous: &Plan,
    current: &Plan,
    started: &BTreeSet<WatchTarget>,
) -> Vec<String> {
    current
        .assignments()
        .filter(|(key, target)| !started.contains(*target) && !previous.assigns(target, key))
        .map(|(key, _)| key.to_string())
        .collect()
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A running query loop.
struct Running {
    id: u64,
    stop: CancellationToken,
}

/// The run loop's state.
struct Watch {
    source: Arc<ConsulSource>,
    registry: Registry,
    plan: Plan,
    running: BTreeMap<WatchTarget, Running>,
    next_id: u64,
    answers: mpsc::Sender<Answer>,
    shutdown: CancellationToken,
    /// Keys already watched that gained an item needing its first observation.
    pending_reads: BTreeSet<String>,
    /// Keys with a read of their own in flight, so that each has one at a
    /// time (a refused read retries until it is answered).
    read_alone: BTreeSet<String>,
    /// Every task the source started: query loops, their requests, one-off reads.
    tasks: TaskTracker,
}

impl Watch {
    /// Applies one interest change; returns whether the set of keys changed.
    fn apply_interest(&mut self, interest: Interest, outgoing: &mut Vec<SourceUpdate>) -> bool {
        match interest {
            Interest::Track(tracked) => {
                if let Err(error) = self.source.check(&tracked) {
                    tracing::warn!(%error, tracked = %tracked, "cannot track this reference");
                    return false;
                }
                let key = tracked.reference.name.clone();
                match self.registry.track(tracked.clone()) {
                    TrackOutcome::NewKey => return true,
                    TrackOutcome::NewItem => {
                        self.pending_reads.insert(key.to_string());
                    }
                    TrackOutcome::Known(Some(observation)) => {
                        outgoing.push(SourceUpdate::new(tracked, observation))
                    }
                    TrackOutcome::Known(None) => {}
                }
                false
            }
            Interest::Untrack(tracked) => {
                matches!(self.registry.untrack(&tracked), UntrackOutcome::KeyGone)
            }
        }
    }

    /// Recomputes the plan; stops queries no longer in it and starts new ones.
    fn replan(&mut self) {
        let keys = self.registry.keys();
        let plan = Plan::new(&keys, self.source.settings.max_concurrent_queries);
        let stopped: Vec<WatchTarget> = self
            .running
            .keys()
            .filter(|t| !plan.0.contains_key(*t))
            .cloned()
            .collect();
        for target in &stopped {
            if let Some(running) = self.running.remove(target) {
                running.stop.cancel();
            }
        }
        let mut started = BTreeSet::new();
        for target in plan.0.keys() {
            if !self.running.contains_key(target) {
                self.start(target.clone());
                started.insert(target.clone());
            }
        }
        // A query that keeps running answers again only when something under it
        // changes: keys it gains are read once now, or a new key would wait for an
        // unrelated change (or the end of the wait) for its first observation.
        self.pending_reads
            .extend(joined_running_queries(&self.plan, &plan, &started));
        if !stopped.is_empty() || !started.is_empty() {
            tracing::debug!(
                source = %self.source.name(),
                keys = keys.len(),
                queries = plan.0.len(),
                started = started.len(),
                stopped = stopped.len(),
                "Consul query plan changed"
            );
        }
        self.plan = plan;
        // Keys whose query just started get their first observation from it.
        self.pending_reads
            .retain(|key| !started.iter().any(|target| self.plan.assigns(target, key)));
        self.read_pending();
    }

    fn start(&mut self, target: WatchTarget) {
        self.next_id += 1;
        let stop = self.shutdown.child_token();
        QueryLoop {
            id: self.next_id,
            target: target.clone(),
            client: self.source.client.clone(),
            limits: self.source.limits.clone(),
            settings: self.source.settings.clone(),
            answers: self.answers.clone(),
            stop: stop.clone(),
            shutdown: self.shutdown.clone(),
            tasks: self.tasks.clone(),
        }
        .spawn(self.source.name().as_str());
        self.running.insert(
            target,
            Running {
                id: self.next_id,
                stop,
            },
        );
    }

    /// Starts the one-off reads that observe every pending key (keys joining
    /// one running prefix query are read together, [`Plan::one_off_reads`]).
    fn read_pending(&mut self) {
        let pending: BTreeSet<String> = std::mem::take(&mut self.pending_reads)
            .into_iter()
            .filter(|key| self.registry.contains(key))
            .collect();
        for read in self.plan.one_off_reads(&pending) {
            self.spawn_one_off(read);
        }
    }

    fn spawn_one_off(&mut self, read: OneOffRead) {
        if let OneOffRead::Key(key) = &read
            && !self.read_alone.insert(key.clone())
        {
            return;
        }
        let span = match &read {
            OneOffRead::Key(key) => {
                tracing::debug_span!("consul_read", source = %self.source.name(), key = %key)
            }
            OneOffRead::Part { within, .. } => {
                tracing::debug_span!("consul_read", source = %self.source.name(), prefix = %within)
            }
        };
        let read = one_off_read(
            self.source.clone(),
            self.answers.clone(),
            self.shutdown.clone(),
            read,
        );
        self.tasks.spawn(read.instrument(span));
    }

    /// Turns an answer into the observations that changed.
    fn apply_answer(&mut self, answer: Answer, outgoing: &mut Vec<SourceUpdate>) {
        let Answer {
            origin,
            target,
            read,
            within,
            authoritative,
        } = answer;
        if let (Origin::OneOff, WatchTarget::Key(key)) = (origin, &target) {
            self.read_alone.remove(key);
        }
        let reports_for = |this: &Self, key: &str| match origin {
            Origin::OneOff => this.registry.contains(key),
            Origin::Query(id) => {
                this.running.get(&target).is_some_and(|r| r.id == id)
                    && this.plan.assigns(&target, key)
            }
        };
        // The keys this answer reports for, of its query's, that `missing` says
        // it did not see.
        let assigned_missing = |this: &Self, missing: &dyn Fn(&str) -> bool| -> Vec<Name> {
            this.plan
                .0
                .get(&target)
                .into_iter()
                .flatten()
                .filter(|key| missing(key.as_str()) && reports_for(this, key))
                .cloned()
                .collect()
        };
        let mut reread = Vec::new();
        let mut apply = |this: &mut Self, key: &str, seen: Seen<'_>| {
            let applied = this.registry.apply(key, seen, authoritative);
            outgoing.extend(applied.updates);
            if applied.reread {
                reread.push(key.to_owned());
            }
        };
        // Keys of the query that a prefix answer left out, as of its index.
        let mut left_out = Vec::new();
        match (&target, &read) {
            (WatchTarget::Key(key), Read::Key(read)) => {
                if reports_for(self, key) {
                    let seen = match (&read.value, read.modify_index) {
                        (Some(value), Some(modify_index)) => Seen::Present {
                            value,
                            modify_index,
                        },
                        _ => Seen::Absent { index: read.index },
                    };
                    apply(self, key, seen);
                }
            }
            (WatchTarget::Prefix(_), Read::Prefix(read)) => {
                let mut present = BTreeSet::new();
                for entry in &read.entries {
                    if reports_for(self, &entry.key) {
                        present.insert(entry.key.as_str());
                        let seen = Seen::Present {
                            value: &entry.value,
                            modify_index: entry.modify_index,
                        };
                        apply(self, &entry.key, seen);
                    }
                }
                let read_here = |key: &str| within.as_deref().is_none_or(|w| key.starts_with(w));
                let absent =
                    assigned_missing(self, &|key: &str| read_here(key) && !present.contains(key));
                left_out.extend(absent.into_iter().map(|key| (key, read.index)));
            }
            (WatchTarget::Prefix(_), Read::Keys(read)) => {
                let gone = assigned_missing(self, &|key: &str| {
                    read.keys.binary_search_by(|k| k.as_str().cmp(key)).is_err()
                });
                left_out.extend(gone.into_iter().map(|key| (key, read.index)));
            }
            _ => tracing::error!(query = %target, "answer does not match its query"),
        }
        // A key left out is gone once it was seen; before that, it is read
        // alone. Consul leaves what the token may not read out of recursive
        // reads and names (all of it: a 404), where a read of the key is
        // refused: a denial is an error, not an absent key.
        let mut unseen = Vec::new();
        for (key, index) in left_out {
            if self.registry.awaits_first(&key) {
                unseen.push(key);
            } else {
                apply(self, &key, Seen::Absent { index });
            }
        }
        for key in reread.into_iter().chain(unseen.iter().map(Name::to_string)) {
            self.spawn_one_off(OneOffRead::Key(key));
        }
    }

    fn stop_all(&mut self) {
        for (_, running) in std::mem::take(&mut self.running) {
            running.stop.cancel();
        }
    }
}

/// Reads a key or a part of a prefix query once, retrying until it is read or
/// the source shuts down, and hands the answer on. Many of these can wait at
/// once for one of the source's few one-off permits (keys joining running
/// queries that are too sparse to read together), so what waits is kept
/// small: the request and the hand-over are boxed only once they run (with
/// them inline a waiting task took 1.8 KB).
async fn one_off_read(
    source: Arc<ConsulSource>,
    answers: mpsc::Sender<Answer>,
    shutdown: CancellationToken,
    one_off: OneOffRead,
) {
    // Boxed on the first failure: thousands of these wait at once.
    let mut backoff: Option<Box<Backoff>> = None;
    loop {
        let result = tokio::select! {
            result = async {
                let _permit = source.limits.one_off.acquire().await.ok()?;
                Some(Box::pin(read_once(&source.client, &one_off)).await)
            } => result,
            () = shutdown.cancelled() => None,
        };
        let Some(result) = result else { return };
        match result {
            Ok(read) => {
                // A part's answer reports for the keys of its query there.
                let (target, within) = match one_off {
                    OneOffRead::Key(key) => (WatchTarget::Key(key), None),
                    OneOffRead::Part { query, within } => (query, Some(within)),
                };
                let answer = Answer {
                    origin: Origin::OneOff,
                    target,
                    read,
                    within,
                    authoritative: false,
                };
                let _ = Box::pin(answers.send(answer)).await;
                return;
            }
            Err(error) => {
                // The keys' query keeps watching; this only delays their
                // first observation.
                let delay = backoff
                    .get_or_insert_with(|| {
                        let max = source.settings.max_retry_interval;
                        Box::new(Backoff::new(super::query::FIRST_RETRY, max))
                    })
                    .next_delay();
                tracing::warn!(error = %error_chain(&error), category = error.category(), retry_in = ?delay, "Consul read failed");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        }
    }
}

/// Reads a key, or a part of a prefix query recursively.
async fn read_once(client: &ConsulClient, one_off: &OneOffRead) -> Result<Read, ClientError> {
    match one_off {
        OneOffRead::Key(key) => client.get_key(key, None).await.map(Read::Key),
        OneOffRead::Part { within, .. } => client.get_prefix(within, None).await.map(Read::Prefix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::{Algorithm, Observation, native_value};
    use crate::model::{Reference, SourceName, Tracked};
    use crate::sources::consul::client::{ClientSettings, KeyRead, KeysRead, KvEntry, PrefixRead};
    use crate::sources::consul::{ConsulSource, WatchSettings};

    fn item(key: &str, algorithm: Algorithm) -> Tracked {
        Tracked::new(Reference::key(SourceName::consul(), key), algorithm)
    }

    /// The updates in `out`, as each key and its observation; `out` is left empty.
    fn drain_reported(out: &mut Vec<SourceUpdate>) -> Vec<(String, Observation)> {
        out.drain(..)
            .map(|u| (u.tracked.reference.name.to_string(), u.observation))
            .collect()
    }

    fn watch(max: usize) -> Watch {
        let source = ConsulSource::new(
            SourceName::consul(),
            &ClientSettings::default(),
            WatchSettings {
                max_concurrent_queries: max,
                ..WatchSettings::default()
            },
        )
        .unwrap();
        let (answers, _) = mpsc::channel(1);
        Watch {
            source: Arc::new(source),
            registry: Registry::default(),
            plan: Plan::default(),
            running: BTreeMap::new(),
            next_id: 0,
            answers,
            shutdown: CancellationToken::new(),
            pending_reads: BTreeSet::new(),
            read_alone: BTreeSet::new(),
            tasks: TaskTracker::new(),
        }
    }

    /// Many one-off reads can wait for a permit at once: each must stay small
    /// while it waits (the request and the hand-over are boxed): 640 bytes in
    /// a test build, against 1,696 with them inline.
    #[test]
    fn a_waiting_one_off_read_is_small() {
        let w = watch(1);
        let key = OneOffRead::Key("p/a".to_owned());
        let read = one_off_read(w.source, w.answers, w.shutdown, key);
        let size = std::mem::size_of_val(&read);
        assert!(size <= 768, "a one-off read's future takes {size} bytes");
    }

    #[tokio::test]
    async fn a_prefix_answer_reports_changed_keys_and_reads_unseen_missing_ones_alone() {
        let mut w = watch(1);
        let mut out = Vec::new();
        for key in ["p/a", "p/b", "p/c"] {
            assert!(w.apply_interest(Interest::Track(item(key, Algorithm::Native)), &mut out));
        }
        w.replan();
        let (target, running) = w.running.iter().next().unwrap();
        assert_eq!(target, &WatchTarget::Prefix("p/".to_owned()));
        let id = running.id;
        w.shutdown.cancel();
        let entry = |key: &str, value: &[u8], modify_index| KvEntry {
            key: key.to_owned(),
            value: value.to_vec(),
            modify_index,
        };
        let answer = |entries| Answer {
            origin: Origin::Query(id),
            target: WatchTarget::Prefix("p/".to_owned()),
            read: Read::Prefix(PrefixRead { entries, index: 9 }),
            within: None,
            authoritative: false,
        };
        let tasks = w.tasks.len();
        w.apply_answer(
            answer(vec![
                entry("p/a", b"1", 3),
                entry("p/b", b"2", 4),
                entry("p/zz", b"x", 5),
            ]),
            &mut out,
        );
        let reported = drain_reported(&mut out);
        assert_eq!(
            reported,
            [
                ("p/a".to_owned(), Observation::Present(native_value(b"1"))),
                ("p/b".to_owned(), Observation::Present(native_value(b"2"))),
            ]
        );
        // p/c, never seen, is read alone: a token that may not read it
        // would leave it out just the same.
        assert_eq!(w.tasks.len(), tasks + 1);
        w.apply_answer(
            answer(vec![entry("p/a", b"1", 3), entry("p/b", b"3", 8)]),
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out.remove(0).tracked.reference.name, "p/b");
        assert_eq!(w.tasks.len(), tasks + 1, "one read of p/c at a time");
        let alone = Answer {
            origin: Origin::OneOff,
            target: WatchTarget::Key("p/c".to_owned()),
            read: Read::Key(KeyRead {
                value: None,
                modify_index: None,
                index: 9,
            }),
            within: None,
            authoritative: false,
        };
        w.apply_answer(alone, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].tracked.reference.name, "p/c");
        assert_eq!(out[0].observation, Observation::Absent);
    }

    #[tokio::test]
    async fn a_narrowed_answer_judges_only_its_part_and_names_tell_what_is_gone() {
        let mut w = watch(1);
        let mut out = Vec::new();
        for key in ["p/a1", "p/a2", "p/b1"] {
            w.apply_interest(Interest::Track(item(key, Algorithm::Native)), &mut out);
        }
        w.replan();
        let id = w.running.values().next().unwrap().id;
        w.shutdown.cancel();
        let target = WatchTarget::Prefix("p/".to_owned());
        let full = |entries: &[(&str, u64)], index| PrefixRead {
            entries: entries
                .iter()
                .map(|(key, modify_index)| KvEntry {
                    key: (*key).to_owned(),
                    value: format!("{key}@{modify_index}").into_bytes(),
                    modify_index: *modify_index,
                })
                .collect(),
            index,
        };
        let answer = |read, within: Option<&str>| Answer {
            origin: Origin::Query(id),
            target: target.clone(),
            read,
            within: within.map(str::to_owned),
            authoritative: false,
        };
        let first = full(&[("p/a1", 2), ("p/a2", 3), ("p/b1", 4)], 4);
        w.apply_answer(answer(Read::Prefix(first), None), &mut out);
        assert_eq!(out.drain(..).count(), 3);

        // A read of p/a only: p/b1, not in it, is not taken for gone.
        let part = full(&[("p/a1", 7), ("p/a2", 3)], 7);
        w.apply_answer(answer(Read::Prefix(part), Some("p/a")), &mut out);
        let names: Vec<String> = out
            .drain(..)
            .map(|u| u.tracked.reference.name.to_string())
            .collect();
        assert_eq!(names, ["p/a1"]);

        // The names under p/ without p/a2: it is gone.
        let keys = KeysRead {
            keys: vec!["p/a1".to_owned(), "p/b1".to_owned(), "p/c".to_owned()],
            index: 9,
        };
        w.apply_answer(answer(Read::Keys(keys), None), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].tracked.reference.name, "p/a2");
        assert_eq!(out[0].observation, Observation::Absent);
    }

    #[tokio::test]
    async fn a_part_read_once_reports_within_it_and_reads_unseen_missing_keys_alone() {
        let mut w = watch(1);
        let mut out = Vec::new();
        for key in ["p/a1", "p/a2", "p/b1", "p/a3"] {
            w.apply_interest(Interest::Track(item(key, Algorithm::Native)), &mut out);
        }
        w.replan();
        w.shutdown.cancel();
        let query = WatchTarget::Prefix("p/".to_owned());
        let id = w.running[&query].id;
        let entry = |key: &str, modify_index| KvEntry {
            key: key.to_owned(),
            value: format!("{key}@{modify_index}").into_bytes(),
            modify_index,
        };
        // The query's first read saw p/a1, p/a2 and p/b1; p/a3, left out, is
        // read alone.
        w.apply_answer(
            Answer {
                origin: Origin::Query(id),
                target: query.clone(),
                read: Read::Prefix(PrefixRead {
                    entries: vec![entry("p/a1", 2), entry("p/a2", 3), entry("p/b1", 4)],
                    index: 4,
                }),
                within: None,
                authoritative: false,
            },
            &mut out,
        );
        assert_eq!(out.drain(..).count(), 3);
        // p/a4 and p/a5 join the running query, and a read of the part p/a
        // answers for them.
        for key in ["p/a4", "p/a5"] {
            w.apply_interest(Interest::Track(item(key, Algorithm::Native)), &mut out);
        }
        w.replan();
        let tasks = w.tasks.len();
        let answer = Answer {
            origin: Origin::OneOff,
            target: query,
            read: Read::Prefix(PrefixRead {
                entries: vec![entry("p/a1", 2), entry("p/a3", 6), entry("p/a4", 7)],
                index: 7,
            }),
            within: Some("p/a".to_owned()),
            authoritative: false,
        };
        w.apply_answer(answer, &mut out);
        let reported = drain_reported(&mut out);
        // p/a1 unchanged; p/a2, seen before, is gone; p/b1 is outside the
        // part; p/a5, never seen, is not taken for absent but read alone
        // (a token may not read it).
        assert_eq!(
            reported,
            [
                (
                    "p/a3".to_owned(),
                    Observation::Present(native_value(b"p/a3@6"))
                ),
                (
                    "p/a4".to_owned(),
                    Observation::Present(native_value(b"p/a4@7"))
                ),
                ("p/a2".to_owned(), Observation::Absent),
            ]
        );
        assert_eq!(w.tasks.len(), tasks + 1, "one read of p/a5 alone");
    }

    #[test]
    fn keys_joining_a_running_query_are_read_once() {
        let prefix = WatchTarget::Prefix("p/".to_owned());
        let fresh = WatchTarget::Prefix("q/".to_owned());
        let assign = |pairs: &[(&str, &WatchTarget)]| {
            let mut plan = Plan::default();
            for (key, target) in pairs {
                plan.0
                    .entry((*target).clone())
                    .or_default()
                    .push((*key).into());
            }
            plan
        };
        let previous = assign(&[("p/a", &prefix), ("q/a", &WatchTarget::Key("q/a".into()))]);
        let current = assign(&[
            ("p/a", &prefix),
            ("p/b", &prefix),
            ("q/a", &fresh),
            ("q/b", &fresh),
        ]);
        let started = BTreeSet::from([fresh.clone()]);
        let mut joined = joined_running_queries(&previous, &current, &started);
        joined.sort();
        // p/b joins the running p/ query; q/* get their first answer from the new query.
        assert_eq!(joined, ["p/b"]);
    }

    #[tokio::test]
    async fn answers_from_stopped_queries_are_ignored() {
        let mut w = watch(4);
        let mut out = Vec::new();
        w.apply_interest(Interest::Track(item("k", Algorithm::Native)), &mut out);
        w.replan();
        w.shutdown.cancel();
        let stale = Answer {
            origin: Origin::Query(999),
            target: WatchTarget::Key("k".to_owned()),
            read: Read::Key(KeyRead {
                value: Some(b"v".to_vec()),
                modify_index: Some(2),
                index: 2,
            }),
            within: None,
            authoritative: false,
        };
        w.apply_answer(stale, &mut out);
        assert!(out.is_empty());
    }
}
