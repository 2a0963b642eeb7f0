//! What `nudge explain` says about a workload's delivery settings (design
//! §5d): its mode, wave and window, the pending fingerprint of config not yet
//! stamped, the wave plan of the workloads sharing its inputs, and why it
//! waits. Pure, like the rest of `build_report`; the rules and their words
//! are [`crate::delivery`]'s, the ones the core decides with, judged here from
//! what the cluster says.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Serialize;

use super::{ExplainSettings, State, Verdict};
use crate::annotations::{AnnotationScheme, Approval, Dependencies};
use crate::delivery::{self, Followed, Neighbours, Progress, Standing};
use crate::model::{Workload, WorkloadId};
use crate::outcome::history::{self, Revision};
use crate::stamp::{self, Decision, FingerprintLookup};

/// One workload of a wave plan: the explained one, or one sharing an input
/// with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct WaveMember {
    /// `Kind/name`.
    pub workload: String,
    /// Its `<prefix>/wave`.
    pub wave: u32,
    /// `done` (in sync, rollout complete), `rolling_out`, `failed` (in sync,
    /// rollout failed), `not_stamped` (its newest config is not on it yet).
    pub state: &'static str,
    /// Whether it is the workload explained.
    pub this: bool,
}

/// A workload sharing an input with the explained one, as read.
#[derive(Debug)]
pub(crate) struct Neighbour {
    pub(crate) workload: Workload,
    pub(crate) deps: Dependencies,
}

/// A workload of the plan as the delivery rules judge it.
struct Judged<'a> {
    id: &'a WorkloadId,
    wave: u32,
    progress: Progress,
}

/// How `workload` stands for the waves after it ([`delivery::progress`]):
/// `rolls`, its decision's, says whether its newest config is on it; a
/// `<prefix>/rollout` marker whose revision its history does not record yet
/// is a rollout nudge follows.
fn progress_of(workload: &Workload, rolls: bool, scheme: &AnnotationScheme) -> Progress {
    let recorded = workload
        .annotations
        .get(&scheme.history())
        .map(String::as_str);
    // A marker whose revision is recorded already is stale: the core does not
    // follow it either.
    let marked = workload
        .annotations
        .get(&scheme.rollout())
        .is_some_and(|marker| {
            Revision::parse(marker).is_none_or(|r| !history::has_outcome(recorded, r.revision))
        });
    delivery::progress(&Standing {
        kind: &workload.id.kind,
        not_stamped: rolls,
        rollout: workload.rollout,
        followed: if marked {
            Followed::InProgress
        } else {
            Followed::No
        },
        last_failed: history::last_failed(recorded),
    })
}

/// Each neighbour as the rules judge it, from `observed`.
fn judge<'a>(
    neighbours: &'a [Neighbour],
    observed: &impl FingerprintLookup,
    settings: &ExplainSettings,
) -> Vec<Judged<'a>> {
    neighbours
        .iter()
        .map(|n| {
            let rolls = stamp::decide(
                &n.workload,
                &n.deps.stamps,
                observed,
                &BTreeMap::new(),
                settings.stamp_on_delete,
            )
            .rolls;
            Judged {
                id: &n.workload.id,
                wave: n.deps.delivery.wave,
                progress: progress_of(&n.workload, rolls, &settings.scheme),
            }
        })
        .collect()
}

/// The wave plan: `this` (the explained workload) and its neighbours, by
/// wave; empty without neighbours.
fn wave_plan(this: &Judged<'_>, neighbours: &[Judged<'_>]) -> Vec<WaveMember> {
    if neighbours.is_empty() {
        return Vec::new();
    }
    let member = |judged: &Judged<'_>, this: bool| WaveMember {
        workload: format!("{}/{}", judged.id.kind, judged.id.name),
        wave: judged.wave,
        state: judged.progress.as_str(),
        this,
    };
    let mut plan: Vec<WaveMember> = neighbours
        .iter()
        .map(|n| member(n, false))
        .chain([member(this, true)])
        .collect();
    plan.sort_by(|a, b| (a.wave, &a.workload).cmp(&(b.wave, &b.workload)));
    plan
}

/// How the workload takes config changes. Serialized as is by `-o json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DeliveryReport {
    /// `auto`, `notify` or `manual` (`<prefix>/mode`).
    pub mode: &'static str,
    /// `<prefix>/wave` (0 when unset).
    pub wave: u32,
    /// `<prefix>/approve`, when set and valid.
    pub approve: Option<String>,
    /// The maintenance window in force (the workload's, else `engine.window`).
    pub window: Option<String>,
    /// The next time the window opens, in its zone; `None` when it is open
    /// now or there is none.
    pub next_opening: Option<String>,
    /// The pending fingerprint of config not stamped yet: what
    /// `<prefix>/approve` takes.
    pub pending: Option<String>,
    /// Why the pending config waits, in the words of the Event the
    /// controller reports it with: its mode, an approval, an earlier wave
    /// (judged from the workloads sharing its inputs, as the controller does)
    /// or its window.
    pub held: Option<String>,
    /// The workloads sharing an input with it, by wave (empty when it shares
    /// none, or is in wave 0 and was not asked about).
    pub plan: Vec<WaveMember>,
}

impl DeliveryReport {
    /// One line for the table, or `None` when every setting is the default
    /// and nothing is pending.
    pub(crate) fn line(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.mode != "auto" {
            parts.push(format!("mode {}", self.mode));
        }
        if self.wave > 0 {
            parts.push(format!("wave {}", self.wave));
        }
        if let Some(window) = &self.window {
            parts.push(format!("window \"{window}\""));
        }
        if let Some(opening) = &self.next_opening {
            parts.push(format!("next opening {opening}"));
        }
        if let Some(approve) = &self.approve {
            parts.push(format!("approve {approve}"));
        }
        if let Some(pending) = &self.pending {
            parts.push(format!("pending {pending}"));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// The wave plan for the table, one line per workload.
    pub(crate) fn plan_lines(&self) -> Vec<String> {
        self.plan
            .iter()
            .map(|member| {
                let this = if member.this { " (this workload)" } else { "" };
                format!(
                    "wave {}  {}{this}  {}",
                    member.wave,
                    member.workload,
                    member.state.replace('_', " ")
                )
            })
            .collect()
    }
}

/// The delivery report of `workload`, whose `decision` is explained;
/// `pending_change`: some output's desired value differs from its stamped
/// one. Its hold, when its patch rolls, is [`delivery::gate`]'s: as the
/// leader would judge it now, every kind listed.
pub(super) fn delivery_report(
    (workload, deps, decision): (&Workload, &Dependencies, &Decision),
    pending_change: bool,
    neighbours: &[Neighbour],
    observed: &impl FingerprintLookup,
    settings: &ExplainSettings,
    now: Timestamp,
) -> DeliveryReport {
    let own = &deps.delivery;
    let window = own.window.resolve(settings.window.as_ref());
    let opens = window.map(|w| (w, w.next_opening(now)));
    let closed = opens.filter(|(_, at)| *at != Some(now));
    let pending = pending_change.then(|| decision.desired.pending_fingerprint());
    let judged = judge(neighbours, observed, settings);
    let this = Judged {
        id: &workload.id,
        wave: own.wave,
        progress: progress_of(workload, decision.rolls, &settings.scheme),
    };
    let ids: Vec<WorkloadId> = judged.iter().map(|j| j.id.clone()).collect();
    let find = |id: &WorkloadId| judged.iter().find(|j| j.id == id);
    let snapshot_hold = super::snapshot::snapshot_hold(workload, deps, decision, &settings.scheme);
    let held = pending
        .as_deref()
        .filter(|_| decision.rolls)
        .and_then(|pending| {
            if let Some(hold) = &snapshot_hold {
                return Some(hold.note(pending, &settings.scheme.approve()));
            }
            let neighbours = Neighbours {
                ids: &ids,
                wave: |id: &WorkloadId| find(id).map_or(0, |j| j.wave),
                progress: |id: &WorkloadId| find(id).map_or(Progress::Done, |j| j.progress),
            };
            let hold = delivery::gate(
                own,
                settings.window.as_ref(),
                pending,
                true,
                now,
                neighbours,
            )?;
            Some(hold.note(pending, &settings.scheme.approve()))
        });
    DeliveryReport {
        mode: own.mode.as_str(),
        wave: own.wave,
        approve: own.approve.as_ref().map(|a| match a {
            Approval::Latest => "latest".to_owned(),
            Approval::Fingerprint(f) => f.clone(),
        }),
        window: window.map(ToString::to_string),
        next_opening: closed.and_then(|(w, at)| Some(w.in_zone(at?).to_string())),
        pending,
        held,
        plan: wave_plan(&this, &judged),
    }
}

/// The workload's verdict when its own settings hold pending config: a wait
/// nudge means, not a controller falling behind. Its message is the hold's note
/// as the Event says it ("config … is pending approval: …"), which already
/// says it is held.
pub(super) fn held_verdict(report: &DeliveryReport, verdict: Verdict) -> Verdict {
    let waits = matches!(
        verdict.state,
        State::OutOfSync | State::WaitingForDebounce | State::WaitingForMinInterval
    );
    match (&report.held, &report.pending) {
        (Some(note), Some(_)) if waits => Verdict {
            state: State::Held,
            message: note.clone(),
        },
        _ => verdict,
    }
}
