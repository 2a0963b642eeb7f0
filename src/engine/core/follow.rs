//! Following the rollouts nudge starts, until they end (design §5c).
//!
//! A stamp that changes a pod template carries `<prefix>/rollout`: the config
//! revision it starts (number, the changes it carries and who made them, each
//! value before and after). From the write's result on, the core follows the
//! workload's own `status` ([`Rollout`]) until the rollout completes, fails
//! (the controller's verdict, or nudge's own deadline for kinds without one),
//! or is superseded (a newer stamp, or someone else's pod-template change).
//! Then the driver publishes the outcome and records it in `<prefix>/history`,
//! removing the marker ([`Effect::Conclude`]).
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

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use tokio::time::Instant;

use super::{Core, Effect};
use smol_str::SmolStr;

use crate::delivery::Followed;
use crate::model::{
    GENERATED_JOB_LABELS, Output, Reference, Rollout, RolloutFailure, StampSpec, Tracked, Workload,
    WorkloadId, WorkloadKind, is_job,
};
use crate::outcome::history::{self, Outcome, Revision};
use crate::outcome::{Conclusion, Supersession};

/// A rollout being followed: what judging, concluding and explaining it
/// need, not the revision itself. The revision (its changes, who made them,
/// the values before and after) stays in the workload's `<prefix>/rollout`
/// marker, where the driver reads it when it publishes and records the
/// outcome (`engine/driver/recording.rs`) or carries it into a newer marker
/// ([`Supersession`]). At the benchmark's large scale ~1,000 rollouts are in
/// flight: their revisions took 1.25 MB as structs, 0.63 MB as JSON.
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

impl Core {
    /// nudge's own progress deadline for workload `id`.
    fn deadline_window(&self, id: &WorkloadId) -> Duration {
        self.records
            .get(id)
            .and_then(|record| record.timing().progress_deadline)
            .unwrap_or(self.engine.progress_deadline)
    }

    /// nudge's own progress deadline for workload `id`, from `now`: none for
    /// kinds with their own, nor for a CronJob until its run is seen.
    fn deadline_for(&self, id: &WorkloadId, now: Instant) -> Option<Instant> {
        if id.kind.has_own_progress_deadline() || is_cron_job(&id.kind) {
            return None;
        }
        Some(crate::rate::saturating_add(now, self.deadline_window(id)))
    }

    /// nudge's stamp starting `revision` was written; `workload` is the
    /// workload as stored afterwards.
    pub(super) fn start_following(
        &mut self,
        id: &WorkloadId,
        revision: Revision,
        related: Option<Related>,
        workload: &Workload,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let sources = source_names(&revision);
        // Runs that ended before this stamp are not its run (a template that
        // came back to an earlier one has old Jobs of the same digest).
        if let Some(runs) = self.runs.get_mut(id) {
            runs.retain(|run| !matches!(run.rollout, Rollout::Complete | Rollout::Failed { .. }));
        }
        // Not judged on the write's own result: its status is from before the
        // new template (a status without observedGeneration could not say so).
        if self.follow(workload, revision, related, now) {
            if self.leader {
                let names: Vec<&str> = sources.iter().map(String::as_str).collect();
                self.metrics.rollout(&id.kind, &names, "started");
            }
            self.judge_runs(id, now, out);
        }
    }

    /// A Job event: a Job a CronJob controls is one of its runs. Kept (a few
    /// per CronJob) while nudge may follow that CronJob, and judged against
    /// its rollout in flight.
    pub(super) fn follow_run(&mut self, job: &Workload, now: Instant, out: &mut Vec<Effect>) {
        if !is_job(&job.id.kind) {
            return;
        }
        let Some(owner) = job
            .controller
            .as_ref()
            .filter(|owner| owner.kind == "CronJob" && owner.api_version == "batch/v1")
        else {
            return;
        };
        let id = WorkloadId::new(
            crate::targets::cron_job_kind(),
            job.id.namespace.clone(),
            owner.name.clone(),
        );
        // Memory follows what nudge stamps: a run is kept for a CronJob nudge
        // tracks, or (its CronJob not listed yet, after a restart) a run of a
        // template nudge stamped.
        let prefix = self.scheme.key("");
        let stamped = job
            .template_annotations()
            .keys()
            .any(|key| key.starts_with(&prefix));
        if !self.records.contains_key(&id) && !stamped {
            return;
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
        self.judge_runs(&id, now, out);
    }

    /// Forgets the runs of CronJob `id` (deleted, or no longer tracked).
    pub(super) fn forget_runs(&mut self, id: &WorkloadId) {
        self.runs.remove(id);
    }

    /// Judges the rollout of CronJob `id` by its runs of the stamped template:
    /// the first that ended ends it; one still running starts nudge's deadline.
    fn judge_runs(&mut self, id: &WorkloadId, now: Instant, out: &mut Vec<Effect>) {
        let Some(follow) = self
            .records
            .get(id)
            .and_then(|r| r.follow.as_deref())
            .filter(|f| f.in_progress())
        else {
            return;
        };
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
                }
                Rollout::Failed { .. } => {
                    ended = Some((Outcome::Failed, format!("Job {} failed", run.job)));
                }
                _ => running = true,
            }
            if ended.is_some() {
                break;
            }
        }
        if let Some((outcome, reason)) = ended {
            self.end(id, outcome, Some(reason), now, out);
        } else if running && follow.deadline.is_none() {
            let at = crate::rate::saturating_add(now, self.deadline_window(id));
            self.deadlines.insert((at, id.clone()));
            if let Some(follow) = self
                .records
                .get_mut(id)
                .and_then(|r| r.follow.as_deref_mut())
            {
                follow.deadline = Some(at);
            }
        }
    }

    /// Follows `revision` on `workload` from `now`; `false` when the workload
    /// has no record.
    fn follow(
        &mut self,
        workload: &Workload,
        revision: Revision,
        related: Option<Related>,
        now: Instant,
    ) -> bool {
        let id = &workload.id;
        let Some(record) = self.records.get_mut(id) else {
            return false;
        };
        record.revision = record.revision.max(revision.revision);
        let follow = Follow {
            number: revision.revision,
            sources: source_names(&revision).iter().map(SmolStr::new).collect(),
            related,
            started: now,
            deadline: self.deadline_for(id, now),
            template: template_digest(workload),
            ended: None,
        };
        self.set_follow(id, follow);
        true
    }

    /// A newer stamp of `id`, starting revision `next`, is on its way: the
    /// rollout followed so far is superseded. The driver publishes its Event
    /// and carries it in `next`'s marker (with any it superseded in turn), so
    /// a change while a rollout is in flight costs no extra write; `None`
    /// when none is in progress.
    pub(super) fn supersede(
        &mut self,
        id: &WorkloadId,
        next: u32,
        now: Instant,
    ) -> Option<Supersession> {
        let reason = format!("superseded by config revision {next}");
        let ended = self.finish(id, Outcome::Superseded, Some(reason), now)?;
        let related = self.related_of(id);
        self.drop_follow(id);
        Some(Supersession {
            conclusion: Conclusion {
                workload: id.clone(),
                revision: ended,
                related,
            },
            marker: Output::WorkloadAnnotation(self.scheme.rollout()),
            limit: self.engine.history_limit,
        })
    }

    /// A workload event: resume following from its marker, or judge the
    /// rollout followed by its status.
    pub(super) fn follow_workload(
        &mut self,
        workload: &Workload,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let id = &workload.id;
        let marker = workload.annotations.get(&self.scheme.rollout());
        let Some(record) = self.records.get_mut(id) else {
            return;
        };
        let recorded = workload
            .annotations
            .get(&self.scheme.history())
            .map(String::as_str);
        record.revision = record.revision.max(history::last_revision(recorded));
        record.last_failed = history::last_failed(recorded);
        match (&record.follow, marker) {
            (Some(follow), marker) if follow.ended.is_some() => {
                // Ended: kept until its marker is gone (recorded), so that a
                // new leader can conclude it aloud again.
                let ours = marker
                    .and_then(|m| Revision::parse(m))
                    .is_some_and(|m| m.revision == follow.number);
                if !ours {
                    self.drop_follow(id);
                }
            }
            (Some(follow), _) => {
                // The echo of nudge's own write (or older) still shows the
                // status from before it.
                let fresh = workload.revision().is_none_or(|r| r > record.written);
                if !fresh {
                    return;
                }
                if follow.template != template_digest(workload) {
                    let reason = "the pod template was changed by someone else".to_owned();
                    self.end(id, Outcome::Superseded, Some(reason), now, out);
                } else {
                    self.judge(id, workload.rollout, now, out);
                }
            }
            (None, Some(marker)) => {
                let Some(revision) = Revision::parse(marker) else {
                    tracing::warn!(workload = %id, "unreadable rollout annotation; not followed");
                    return;
                };
                if history::has_outcome(
                    workload
                        .annotations
                        .get(&self.scheme.history())
                        .map(String::as_str),
                    revision.revision,
                ) {
                    return;
                }
                self.resume(workload, revision, now, out);
            }
            (None, None) => {}
        }
    }

    /// Follows a rollout another process started (a restart, a failover).
    fn resume(
        &mut self,
        workload: &Workload,
        revision: Revision,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        tracing::info!(workload = %workload.id, revision = revision.revision, "following the rollout in flight");
        if self.follow(workload, revision, None, now) {
            self.judge(&workload.id, workload.rollout, now, out);
            self.judge_runs(&workload.id, now, out);
        }
    }

    /// Ends the rollout of `id` when its status says it has.
    fn judge(&mut self, id: &WorkloadId, rollout: Rollout, now: Instant, out: &mut Vec<Effect>) {
        match rollout {
            Rollout::Complete => self.end(id, Outcome::Complete, None, now, out),
            Rollout::Failed { reason } => {
                let reason = match reason {
                    RolloutFailure::JobFailed => "the Job failed".to_owned(),
                    other => other.as_str().to_owned(),
                };
                self.end(id, Outcome::Failed, Some(reason), now, out);
            }
            _ => {}
        }
    }

    /// Rollouts past nudge's own deadline fail.
    pub(super) fn expire_deadlines(&mut self, now: Instant, out: &mut Vec<Effect>) {
        while let Some((at, id)) = self.deadlines.first().cloned() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            let due = self
                .records
                .get(&id)
                .and_then(|r| r.follow.as_deref())
                .is_some_and(|f| f.in_progress() && f.deadline == Some(at));
            if due {
                let window = self.deadline_window(&id);
                let reason = format!(
                    "not complete within its progress deadline ({})",
                    humantime::format_duration(round_seconds(window))
                );
                self.end(&id, Outcome::Failed, Some(reason), now, out);
            }
        }
    }

    /// When nudge's next own deadline falls.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    fn set_follow(&mut self, id: &WorkloadId, follow: Follow) {
        self.drop_follow(id);
        if let Some(at) = follow.deadline {
            self.deadlines.insert((at, id.clone()));
        }
        if let Some(record) = self.records.get_mut(id) {
            record.follow = Some(Box::new(follow));
        }
    }

    /// The first reference of the rollout `id` follows (its Events' related
    /// object).
    fn related_of(&self, id: &WorkloadId) -> Option<Reference> {
        self.records
            .get(id)
            .and_then(|r| r.follow.as_deref())
            .and_then(|f| f.related.as_ref())
            .map(|r| r.reference().clone())
    }

    pub(super) fn drop_follow(&mut self, id: &WorkloadId) {
        let Some(follow) = self.records.get_mut(id).and_then(|r| r.follow.take()) else {
            return;
        };
        if let Some(at) = follow.deadline {
            self.deadlines.remove(&(at, id.clone()));
        }
    }

    /// The rollout of `id` ended: count it, and have the leader publish and
    /// record it.
    fn end(
        &mut self,
        id: &WorkloadId,
        outcome: Outcome,
        reason: Option<String>,
        now: Instant,
        out: &mut Vec<Effect>,
    ) {
        let Some(revision) = self.finish(id, outcome, reason, now) else {
            return;
        };
        if self.leader {
            let related = self.related_of(id);
            out.push(Effect::Conclude(Box::new(Conclusion {
                workload: id.clone(),
                revision,
                related,
            })));
        }
    }

    /// Marks the rollout of `id` ended (`outcome`) and counts it; the revision
    /// as ended (without its changes and values: they are in the marker),
    /// `None` when none was in progress.
    fn finish(
        &mut self,
        id: &WorkloadId,
        outcome: Outcome,
        reason: Option<String>,
        now: Instant,
    ) -> Option<Revision> {
        let follow = self
            .records
            .get_mut(id)
            .and_then(|r| r.follow.as_deref_mut())
            .filter(|f| f.ended.is_none())?;
        let took = now.saturating_duration_since(follow.started);
        let revision = Revision {
            revision: follow.number,
            changed: Vec::new(),
            stamp: Vec::new(),
            outcome: Some(outcome),
            reason,
            // When the core saw it end, not when the history write goes out:
            // a later wave may be stamped before that write on a busy cluster.
            ended: Some(self.plans.wall_time(now).to_string()),
            seconds: Some(took.as_secs()),
            superseded: Vec::new(),
        };
        follow.ended = Some(Box::new(revision.clone()));
        if let Some(at) = follow.deadline.take() {
            self.deadlines.remove(&(at, id.clone()));
        }
        tracing::info!(workload = %id, revision = revision.revision, outcome = outcome.as_str(), took = ?took, "rollout ended");
        if self.leader {
            let names: Vec<&str> = follow.sources.iter().map(SmolStr::as_str).collect();
            self.metrics.rollout(&id.kind, &names, outcome.as_str());
            self.metrics.rollout_ended(&id.kind, outcome.as_str(), took);
        }
        Some(revision)
    }

    /// This replica became leader: what it saw end while another led, and is
    /// still marked in flight on the workload, is concluded aloud again.
    pub(super) fn conclude_again(&mut self, out: &mut Vec<Effect>) {
        for (id, record) in &self.records {
            let Some(follow) = record.follow.as_deref() else {
                continue;
            };
            if let Some(ended) = &follow.ended {
                out.push(Effect::Conclude(Box::new(Conclusion {
                    workload: id.clone(),
                    revision: Revision::clone(ended),
                    related: follow.related.as_ref().map(|r| r.reference().clone()),
                })));
            }
        }
    }
}

/// The distinct sources of the changes `revision` carries, sorted (a
/// reference prints as `<source>/…`).
fn source_names(revision: &Revision) -> Vec<String> {
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
