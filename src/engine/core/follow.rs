//! Following the rollouts nudge starts, until they end (design §5c).
//!
//! A stamp that changes a pod template carries `<prefix>/rollout`: the config
//! revision it starts (number, the changes it carries and who made them, each
//! value before and after). From the write's result on, the core follows the
//! workload's own `status` ([`Rollout`]) until the rollout completes, fails
//! (the controller's verdict, or nudge's own deadline for kinds without one),
//! or is superseded (a newer stamp, or someone else's pod-template change).
//! Then the driver publishes the outcome and records it in `<prefix>/history`,
//! removing the marker (`Effect::Conclude`).
//!
//! [`Following`] owns this state and decides; what ends comes back to the
//! core as [`Ended`], which the leader counts and concludes.
//!
//! A CronJob's rollout is its next run: the first Job it controls whose pod
//! template is the stamped one (matched by digest, not by timing) ends it by
//! its own conditions ([`Run`]). A Job's rollout is the recreated Job's own
//! conditions. Neither has a deadline of its own, so nudge's applies; a
//! CronJob's counts from its run's first sight (its next scheduled run may be
//! hours away).
//!
//! Every replica follows (from the marker on the workload events it sees); only
//! the leader concludes aloud. A new leader concludes again what it saw end
//! while the marker is still on the workload: the old leader may have died
//! between publishing and recording, so at most one outcome is published twice
//! per failover, and none is lost.

use std::collections::{BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use smol_str::SmolStr;
use tokio::time::Instant;

use crate::annotations::AnnotationScheme;
use crate::delivery::Followed;
use crate::model::{
    GENERATED_JOB_LABELS, Reference, Rollout, RolloutFailure, StampSpec, Tracked, Workload,
    WorkloadId, WorkloadKind, is_job,
};
use crate::outcome::Conclusion;
use crate::outcome::history::{self, Outcome, Revision};
use crate::window::WallClock;

/// A rollout being followed: what judging, concluding and explaining it
/// need, and its revision (its changes, who made them, the values before and
/// after) as the JSON text of the workload's `<prefix>/rollout` marker last
/// seen, so that a stamp superseding it carries it into its own marker
/// (`outcome::Supersession`) without reading the workload first. Text, not
/// structs: at the benchmark's large scale ~1,000 rollouts are in flight,
/// and their revisions took 1.25 MB as structs, 0.63 MB as JSON.
#[derive(Debug)]
pub(super) struct Follow {
    /// The number of the revision it rolls out.
    number: u32,
    /// The sources of the changes it carries, for its metrics (a source name
    /// is kept inline: no allocation).
    sources: Box<[SmolStr]>,
    /// The first reference it carries, when known (the Event's related object).
    related: Option<Related>,
    started: Instant,
    /// nudge's own progress deadline (kinds without one of their own).
    deadline: Option<Instant>,
    /// A digest of the pod template as nudge's write left it (resumed from
    /// the marker: as first seen then).
    template: u64,
    /// How it ended, once it has (the revision's number, outcome, reason,
    /// time and duration); kept until the marker leaves the workload.
    ended: Option<Box<Revision>>,
    /// The workload's marker naming this revision, as last seen; `None` once
    /// someone removed it or replaced it (its changes are then not known).
    marker: Option<Box<str>>,
}

impl Follow {
    /// Whether it has not ended yet.
    pub(super) fn in_progress(&self) -> bool {
        self.ended.is_none()
    }

    /// Whether it ended failed (an earlier wave halts the later ones, §5d).
    pub(super) fn failed(&self) -> bool {
        self.outcome() == Some(Outcome::Failed)
    }

    /// What the delivery rules read of the rollout `follow`, if any.
    pub(super) fn followed(follow: Option<&Self>) -> Followed {
        match follow {
            None => Followed::No,
            Some(follow) if follow.in_progress() => Followed::InProgress,
            Some(follow) => Followed::Ended {
                failed: follow.failed(),
            },
        }
    }

    /// How it ended, once it has.
    fn outcome(&self) -> Option<Outcome> {
        self.ended.as_ref().and_then(|r| r.outcome)
    }
}

/// The first reference a rollout carries (its Event's related object): the
/// graph's shared copy while the workload tracks it (8 bytes where a
/// [`Reference`] takes 104: ~1 MB at xl's 10,000 rollouts in flight), its own
/// copy otherwise.
#[derive(Debug, Clone)]
pub(super) enum Related {
    /// The tracked item the workload's stamp specs name.
    Tracked(Tracked),
    /// A reference the specs no longer name.
    Own(Box<Reference>),
}

impl Related {
    /// `reference`, shared with the tracked item of `specs` that names it
    /// when there is one.
    pub(super) fn of(reference: &Reference, specs: &[StampSpec]) -> Self {
        specs
            .iter()
            .flat_map(|spec| &spec.inputs)
            .find(|input| input.tracked.reference == *reference)
            .map_or_else(
                || Self::Own(Box::new(reference.clone())),
                |input| Self::Tracked(input.tracked.clone()),
            )
    }

    /// The reference.
    fn reference(&self) -> &Reference {
        match self {
            Self::Tracked(tracked) => &tracked.reference,
            Self::Own(reference) => reference,
        }
    }
}

/// Runs of one CronJob kept while they may decide its rollout: as many as its
/// default `successfulJobsHistoryLimit` plus one.
const RUNS_KEPT: usize = 4;

/// A Job a CronJob controls, as last seen: what decides the CronJob's rollout
/// when its template is the stamped one.
#[derive(Debug)]
pub(super) struct Run {
    /// The Job's name.
    job: String,
    /// The digest of its pod template (less what the API server adds).
    template: u64,
    /// Its conditions.
    rollout: Rollout,
}

/// Whether `kind` is `batch/v1` CronJob: its rollout is judged by its runs.
fn is_cron_job(kind: &WorkloadKind) -> bool {
    kind.group() == "batch" && kind.as_str() == "CronJob"
}

/// A digest of the pod template: tells nudge's write from someone else's, and
/// a CronJob's run of the stamped template from other runs. A Job's is taken
/// without the labels the API server adds to it, so that it equals the digest
/// of the job template it was made from.
fn template_digest(workload: &Workload) -> u64 {
    let mut hasher = DefaultHasher::new();
    let bytes = if is_job(&workload.id.kind) {
        let mut template = workload.template.clone();
        if let Some(meta) = template.metadata.as_mut() {
            if let Some(labels) = meta.labels.as_mut() {
                for label in GENERATED_JOB_LABELS {
                    labels.remove(label);
                }
            }
            if meta.labels.as_ref().is_some_and(|l| l.is_empty()) {
                meta.labels = None;
            }
        }
        if template
            .metadata
            .as_ref()
            .is_some_and(|m| *m == Default::default())
        {
            template.metadata = None;
        }
        serde_json::to_vec(&template)
    } else {
        serde_json::to_vec(&workload.template)
    };
    bytes.unwrap_or_default().hash(&mut hasher);
    hasher.finish()
}

/// What the core knows of a workload's config revisions, kept in its record
/// whether or not a rollout is followed: the next stamp's number, and
/// whether the newest recorded revision failed (design §5d).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Revisions {
    /// The newest revision number known (history or marker).
    newest: u32,
    /// Whether the newest revision in its `<prefix>/history` failed: with no
    /// rollout followed, a kind judged by nudge's own deadline still reads as
    /// failed for the waves after it.
    last_failed: bool,
}

impl Revisions {
    /// The number of the revision the next rolling stamp starts.
    pub(super) fn next(&self) -> u32 {
        self.newest + 1
    }

    pub(super) fn last_failed(&self) -> bool {
        self.last_failed
    }

    fn saw(&mut self, number: u32) {
        self.newest = self.newest.max(number);
    }
}

/// A rollout that ended: the conclusion for the leader to publish and record,
/// and what its metrics count.
#[derive(Debug)]
pub(super) struct Ended {
    pub(super) conclusion: Conclusion,
    pub(super) outcome: Outcome,
    /// The sources of the changes it carried.
    pub(super) sources: Box<[SmolStr]>,
    pub(super) took: Duration,
}

/// The rollouts the core follows (see the module docs): each workload's, the
/// deadlines nudge keeps for them and the runs of CronJobs. Its own state,
/// decided here; the core counts and concludes what ends ([`Ended`]).
pub(super) struct Following {
    /// The rollout followed per workload, from its stamp (or its marker)
    /// until the marker leaves the workload.
    follows: HashMap<WorkloadId, Box<Follow>>,
    /// nudge's own progress deadlines of the rollouts it follows.
    deadlines: BTreeSet<(Instant, WorkloadId)>,
    /// The latest runs (Jobs) of CronJobs, per CronJob.
    runs: HashMap<WorkloadId, Vec<Run>>,
    /// `<prefix>/rollout`, `<prefix>/history` and `<prefix>/`.
    rollout_key: String,
    history_key: String,
    prefix: String,
    /// Wall-clock time of the instants it is handed (an outcome's `ended`).
    clock: WallClock,
}

impl Following {
    pub(super) fn new(scheme: &AnnotationScheme, clock: WallClock) -> Self {
        Self {
            follows: HashMap::new(),
            deadlines: BTreeSet::new(),
            runs: HashMap::new(),
            rollout_key: scheme.rollout(),
            history_key: scheme.history(),
            prefix: scheme.key(""),
            clock,
        }
    }

    /// What the delivery rules read of the rollout followed on `id`.
    pub(super) fn followed(&self, id: &WorkloadId) -> Followed {
        Follow::followed(self.follows.get(id).map(Box::as_ref))
    }

    /// nudge's stamp of `workload` (as stored afterwards) starting `revision`
    /// was written; `window`: its progress deadline. Not judged on the
    /// write's own result, whose status is from before the new template (a
    /// status without observedGeneration could not say so); a CronJob's run
    /// already seen may end it.
    pub(super) fn start(
        &mut self,
        workload: &Workload,
        revisions: &mut Revisions,
        (revision, related): (Revision, Option<Related>),
        window: Duration,
        now: Instant,
    ) -> Option<Ended> {
        let id = &workload.id;
        // Runs that ended before this stamp are not its run (a template that
        // came back to an earlier one has old Jobs of the same digest).
        if let Some(runs) = self.runs.get_mut(id) {
            runs.retain(|run| !matches!(run.rollout, Rollout::Complete | Rollout::Failed { .. }));
        }
        self.follow(workload, revisions, revision, related, window, now);
        self.judge_runs(id, window, now)
    }

    /// `workload`'s marker when it names revision `number`.
    fn marker_of(&self, workload: &Workload, number: u32) -> Option<Box<str>> {
        let marker = workload.annotations.get(&self.rollout_key)?;
        let names = Revision::parse(marker).is_some_and(|m| m.revision == number);
        names.then(|| marker.as_str().into())
    }

    /// `workload` reduced to what recording an outcome reads of it: its
    /// resourceVersion (the write is guarded by it), marker and history.
    fn as_recorded(&self, workload: &Workload) -> Box<Workload> {
        let kept = [&self.rollout_key, &self.history_key];
        Box::new(Workload {
            id: workload.id.clone(),
            annotations: workload
                .annotations
                .iter()
                .filter(|(key, _)| kept.contains(key))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            template: Default::default(),
            rollout: workload.rollout,
            ordered_pods: workload.ordered_pods,
            resource_version: workload.resource_version.clone(),
            uid: workload.uid.clone(),
            controller: None,
        })
    }

    /// A workload event: its history read into `revisions`, then following
    /// resumed from its marker, or the rollout followed judged by its status.
    /// `written`: the revision nudge's last write left; `window`: its
    /// progress deadline.
    pub(super) fn on_workload(
        &mut self,
        workload: &Workload,
        revisions: &mut Revisions,
        written: u64,
        window: Duration,
        now: Instant,
    ) -> Option<Ended> {
        let recorded = workload
            .annotations
            .get(&self.history_key)
            .map(String::as_str);
        revisions.saw(history::last_revision(recorded));
        revisions.last_failed = history::last_failed(recorded);
        let marker = workload.annotations.get(&self.rollout_key);
        let id = &workload.id;
        match self.follows.get(id) {
            Some(follow) if follow.ended.is_some() => {
                // Ended: kept until its marker is gone (recorded), so that a
                // new leader can conclude it aloud again.
                let ours = marker
                    .and_then(|m| Revision::parse(m))
                    .is_some_and(|m| m.revision == follow.number);
                if !ours {
                    self.forget_follow(id);
                }
                None
            }
            Some(follow) => {
                // The echo of nudge's own write (or older) still shows the
                // status from before it.
                let fresh = workload.revision().is_none_or(|r| r > written);
                if !fresh {
                    return None;
                }
                let superseded = follow.template != template_digest(workload);
                let marker = self.marker_of(workload, follow.number);
                if let Some(follow) = self.follows.get_mut(id) {
                    follow.marker = marker;
                }
                if superseded {
                    let reason = "the pod template was changed by someone else".to_owned();
                    return self.end(id, (Outcome::Superseded, Some(reason)), now, Some(workload));
                }
                self.judge(workload, now)
            }
            None => {
                let revision = self.unrecorded(workload, marker?, recorded)?;
                self.resume(workload, revisions, revision, window, now)
            }
        }
    }

    /// The revision `marker` names, unless `recorded` (the history) has its
    /// outcome already.
    fn unrecorded(
        &self,
        workload: &Workload,
        marker: &str,
        recorded: Option<&str>,
    ) -> Option<Revision> {
        let Some(revision) = Revision::parse(marker) else {
            tracing::warn!(workload = %workload.id, "unreadable rollout annotation; not followed");
            return None;
        };
        (!history::has_outcome(recorded, revision.revision)).then_some(revision)
    }

    /// Follows a rollout another process started (a restart, a failover).
    fn resume(
        &mut self,
        workload: &Workload,
        revisions: &mut Revisions,
        revision: Revision,
        window: Duration,
        now: Instant,
    ) -> Option<Ended> {
        tracing::info!(workload = %workload.id, revision = revision.revision, "following the rollout in flight");
        self.follow(workload, revisions, revision, None, window, now);
        self.judge(workload, now)
            .or_else(|| self.judge_runs(&workload.id, window, now))
    }

    /// A Job event: a Job a CronJob controls is one of its runs. Kept (a few
    /// per CronJob) while nudge may follow that CronJob (`tracked`: the core
    /// has its record), and judged against its rollout in flight; `window`:
    /// a CronJob's progress deadline.
    pub(super) fn on_job(
        &mut self,
        job: &Workload,
        tracked: impl Fn(&WorkloadId) -> bool,
        window: impl Fn(&WorkloadId) -> Duration,
        now: Instant,
    ) -> Option<Ended> {
        let id = cron_job_of(job)?;
        // Memory follows what nudge stamps: a run is kept for a CronJob nudge
        // tracks, or (its CronJob not listed yet, after a restart) a run of a
        // template nudge stamped.
        let stamped = job
            .template_annotations()
            .keys()
            .any(|key| key.starts_with(&self.prefix));
        if !tracked(&id) && !stamped {
            return None;
        }
        let run = Run {
            job: job.id.name.to_string(),
            template: template_digest(job),
            rollout: job.rollout,
        };
        let runs = self.runs.entry(id.clone()).or_default();
        runs.retain(|r| r.job != run.job);
        runs.push(run);
        let excess = runs.len().saturating_sub(RUNS_KEPT);
        runs.drain(..excess);
        let window = window(&id);
        self.judge_runs(&id, window, now)
    }

    /// Judges the rollout of CronJob `id` by its runs of the stamped template:
    /// the first that ended ends it; one still running starts nudge's deadline
    /// (`window` from now).
    fn judge_runs(&mut self, id: &WorkloadId, window: Duration, now: Instant) -> Option<Ended> {
        let follow = self.follows.get(id).filter(|f| f.in_progress())?;
        let ours = self
            .runs
            .get(id)
            .into_iter()
            .flatten()
            .filter(|run| run.template == follow.template);
        let mut running = false;
        let mut ended = None;
        for run in ours {
            match run.rollout {
                Rollout::Complete => {
                    ended = Some((Outcome::Complete, format!("ran as Job {}", run.job)));
                    break;
                }
                Rollout::Failed { .. } => {
                    ended = Some((Outcome::Failed, format!("Job {} failed", run.job)));
                    break;
                }
                _ => running = true,
            }
        }
        let starts_deadline = running && follow.deadline.is_none();
        if let Some((outcome, reason)) = ended {
            return self.end(id, (outcome, Some(reason)), now, None);
        }
        if starts_deadline {
            let at = crate::rate::saturating_add(now, window);
            self.deadlines.insert((at, id.clone()));
            if let Some(follow) = self.follows.get_mut(id) {
                follow.deadline = Some(at);
            }
        }
        None
    }

    /// Follows `revision` on `workload` from `now`, in place of any rollout
    /// followed before.
    fn follow(
        &mut self,
        workload: &Workload,
        revisions: &mut Revisions,
        revision: Revision,
        related: Option<Related>,
        window: Duration,
        now: Instant,
    ) {
        let id = &workload.id;
        revisions.saw(revision.revision);
        let follow = Follow {
            number: revision.revision,
            sources: source_names(&revision).iter().map(SmolStr::new).collect(),
            related,
            started: now,
            deadline: deadline_for(&id.kind, window, now),
            template: template_digest(workload),
            ended: None,
            marker: self.marker_of(workload, revision.revision),
        };
        self.forget_follow(id);
        if let Some(at) = follow.deadline {
            self.deadlines.insert((at, id.clone()));
        }
        self.follows.insert(id.clone(), Box::new(follow));
    }

    /// A newer stamp of `id`, starting revision `next`, is on its way: the
    /// rollout followed so far is superseded (and no longer followed), with
    /// its marker as last seen (what the stamp carries); `None` when none is
    /// in progress.
    pub(super) fn supersede(
        &mut self,
        id: &WorkloadId,
        next: u32,
        now: Instant,
    ) -> Option<(Ended, Option<String>)> {
        let reason = format!("superseded by config revision {next}");
        let ended = self.end(id, (Outcome::Superseded, Some(reason)), now, None)?;
        let marker = self.follows.get_mut(id).and_then(|f| f.marker.take());
        self.forget_follow(id);
        Some((ended, marker.map(String::from)))
    }

    /// Ends the rollout followed on `workload` when its status says it has.
    fn judge(&mut self, workload: &Workload, now: Instant) -> Option<Ended> {
        let ended = match workload.rollout {
            Rollout::Complete => (Outcome::Complete, None),
            Rollout::Failed { reason } => {
                let reason = match reason {
                    RolloutFailure::JobFailed => "the Job failed".to_owned(),
                    other => other.as_str().to_owned(),
                };
                (Outcome::Failed, Some(reason))
            }
            _ => return None,
        };
        self.end(&workload.id, ended, now, Some(workload))
    }

    /// Rollouts past nudge's own deadline fail; `window`: each one's deadline
    /// (for the reason).
    pub(super) fn expire(
        &mut self,
        now: Instant,
        window: impl Fn(&WorkloadId) -> Duration,
    ) -> Vec<Ended> {
        let mut ended = Vec::new();
        while let Some((at, id)) = self.deadlines.first().cloned() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            let due = self
                .follows
                .get(&id)
                .is_some_and(|f| f.in_progress() && f.deadline == Some(at));
            if due {
                let reason = format!(
                    "not complete within its progress deadline ({})",
                    humantime::format_duration(round_seconds(window(&id)))
                );
                ended.extend(self.end(&id, (Outcome::Failed, Some(reason)), now, None));
            }
        }
        ended
    }

    /// When nudge's next own deadline falls.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Forgets `id`'s rollout and runs (deleted, or no longer tracked).
    pub(super) fn forget(&mut self, id: &WorkloadId) {
        self.forget_follow(id);
        self.runs.remove(id);
    }

    fn forget_follow(&mut self, id: &WorkloadId) {
        let Some(follow) = self.follows.remove(id) else {
            return;
        };
        if let Some(at) = follow.deadline {
            self.deadlines.remove(&(at, id.clone()));
        }
        // After a burst of rollouts, give the room back.
        let capacity = self.follows.capacity();
        if capacity > 64 && self.follows.len() * 4 < capacity {
            self.follows.shrink_to(self.follows.len() * 2);
        }
    }

    /// Marks the rollout of `id` ended (`outcome`, for `reason`); how it ended
    /// (without its changes and values: they are in the marker), `None` when
    /// none was in progress. `stored`: the workload event that ended it, which
    /// recording reads instead of the workload.
    fn end(
        &mut self,
        id: &WorkloadId,
        (outcome, reason): (Outcome, Option<String>),
        now: Instant,
        stored: Option<&Workload>,
    ) -> Option<Ended> {
        let stored = stored.map(|workload| self.as_recorded(workload));
        let follow = self.follows.get_mut(id).filter(|f| f.ended.is_none())?;
        let took = now.saturating_duration_since(follow.started);
        let revision = Revision {
            revision: follow.number,
            changed: Vec::new(),
            stamp: Vec::new(),
            outcome: Some(outcome),
            reason,
            // When the core saw it end, not when the history write goes out:
            // a later wave may be stamped before that write on a busy cluster.
            ended: Some(self.clock.at(now).to_string()),
            seconds: Some(took.as_secs()),
            superseded: Vec::new(),
            snapshot: Default::default(),
        };
        follow.ended = Some(Box::new(revision.clone()));
        if let Some(at) = follow.deadline.take() {
            self.deadlines.remove(&(at, id.clone()));
        }
        tracing::info!(workload = %id, revision = revision.revision, outcome = outcome.as_str(), took = ?took, "rollout ended");
        Some(Ended {
            conclusion: Conclusion {
                workload: id.clone(),
                revision,
                related: follow.related.as_ref().map(|r| r.reference().clone()),
                stored,
            },
            outcome,
            sources: follow.sources.clone(),
            took,
        })
    }

    /// What ended while another replica led and is still marked in flight on
    /// the workload: a new leader concludes it aloud again.
    pub(super) fn ended_unrecorded(&self) -> impl Iterator<Item = Conclusion> + '_ {
        self.follows.iter().filter_map(|(id, follow)| {
            let ended = follow.ended.as_deref()?;
            Some(Conclusion {
                workload: id.clone(),
                revision: ended.clone(),
                related: follow.related.as_ref().map(|r| r.reference().clone()),
                stored: None,
            })
        })
    }
}

/// The CronJob controlling `job`, when it is a Job one controls.
fn cron_job_of(job: &Workload) -> Option<WorkloadId> {
    if !is_job(&job.id.kind) {
        return None;
    }
    let owner = job
        .controller
        .as_ref()
        .filter(|owner| owner.kind == "CronJob" && owner.api_version == "batch/v1")?;
    Some(WorkloadId::new(
        crate::targets::cron_job_kind(),
        job.id.namespace.clone(),
        owner.name.clone(),
    ))
}

/// nudge's own progress deadline for a rollout of `kind` from `now`: none for
/// kinds with their own, nor for a CronJob until its run is seen.
fn deadline_for(kind: &WorkloadKind, window: Duration, now: Instant) -> Option<Instant> {
    if kind.has_own_progress_deadline() || is_cron_job(kind) {
        return None;
    }
    Some(crate::rate::saturating_add(now, window))
}

/// The distinct sources of the changes `revision` carries, sorted (a
/// reference prints as `<source>/…`).
pub(super) fn source_names(revision: &Revision) -> Vec<String> {
    let names: BTreeSet<String> = revision
        .changed
        .iter()
        .filter_map(|c| {
            c.reference
                .split_once('/')
                .map(|(source, _)| source.to_owned())
        })
        .collect();
    names.into_iter().collect()
}

fn round_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}
