//! What `nudge explain` says about a workload's delivery settings (design
//! §5d): its mode, wave and window, the pending fingerprint of config not yet
//! stamped, the wave plan of the workloads sharing its inputs, and why it
//! waits. Pure, like the rest of `build_report`; the rules are the core's
//! (`engine/core/plan.rs`), judged from what the cluster says.

use jiff::Timestamp;
use serde::Serialize;

use super::{State, Verdict};
use crate::annotations::{AnnotationScheme, Approval, Dependencies, Mode};
use crate::model::{Rollout, Workload};
use crate::stamp::history::{self, Revision};
use crate::stamp::{self, DesiredStamp, FingerprintLookup};
use crate::window::Window;

/// One workload of a wave plan: the explained one, or one sharing an input
/// with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaveMember {
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

/// How `workload` stands for the waves after it, by the core's rules.
fn wave_state(
    workload: &Workload,
    deps: &Dependencies,
    observed: &impl FingerprintLookup,
    stamp_on_delete: bool,
    scheme: &AnnotationScheme,
) -> &'static str {
    let desired = stamp::desired(&deps.stamps, observed, stamp_on_delete);
    let pending = stamp::diff_since(workload, &deps.stamps, &desired, &Default::default())
        .is_some_and(|patch| stamp::changes_pod_template(workload, &patch));
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
    let recorded_failure = history::recorded_failure(
        &workload.id.kind,
        workload.rollout,
        history::last_failed(recorded),
        marked,
    );
    match workload.rollout {
        _ if pending => "not_stamped",
        Rollout::Failed { .. } => "failed",
        _ if recorded_failure => "failed",
        Rollout::InProgress => "rolling_out",
        _ if marked => "rolling_out",
        Rollout::Complete | Rollout::Unknown => "done",
    }
}

/// The wave plan around `workload` (itself and its neighbours, by wave) and,
/// when an earlier wave holds it, why.
pub(super) fn wave_plan(
    workload: &Workload,
    deps: &Dependencies,
    neighbours: &[Neighbour],
    observed: &impl FingerprintLookup,
    (stamp_on_delete, scheme): (bool, &AnnotationScheme),
) -> (Vec<WaveMember>, Option<String>) {
    if neighbours.is_empty() {
        return (Vec::new(), None);
    }
    let member = |w: &Workload, d: &Dependencies, this: bool| WaveMember {
        workload: format!("{}/{}", w.id.kind, w.id.name),
        wave: d.delivery.wave,
        state: wave_state(w, d, observed, stamp_on_delete, scheme),
        this,
    };
    let mut plan: Vec<WaveMember> = neighbours
        .iter()
        .map(|n| member(&n.workload, &n.deps, false))
        .chain([member(workload, deps, true)])
        .collect();
    plan.sort_by(|a, b| (a.wave, &a.workload).cmp(&(b.wave, &b.workload)));
    let wave = deps.delivery.wave;
    let earlier = || plan.iter().filter(|m| m.wave < wave);
    let held = if let Some(failed) = earlier().find(|m| m.state == "failed") {
        Some(format!(
            "wave {} halted: the rollout of {} failed; a newer change releases it",
            failed.wave, failed.workload
        ))
    } else {
        earlier().find(|m| m.state != "done").map(|waiting| {
            format!(
                "waits for wave {}: {} is {}",
                waiting.wave,
                waiting.workload,
                waiting.state.replace('_', " ")
            )
        })
    };
    (plan, held)
}

/// How the workload takes config changes. Serialized as is by `-o json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryReport {
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
    /// Why the pending config waits: its mode, an approval, an earlier wave
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
    pub fn line(&self) -> Option<String> {
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
    pub fn plan_lines(&self) -> Vec<String> {
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

/// The delivery report; `pending_change`: some output's desired value differs
/// from its stamped one.
pub(super) fn delivery_report(
    deps: &Dependencies,
    desired: &DesiredStamp,
    pending_change: bool,
    (plan, wave_hold): (Vec<WaveMember>, Option<String>),
    (default_window, approve_key): (Option<&Window>, &str),
    now: Timestamp,
) -> DeliveryReport {
    let delivery = &deps.delivery;
    let window = delivery.window.resolve(default_window);
    let opening = window.and_then(|w| w.next_opening(now).map(|at| (w, at)));
    let closed = opening.filter(|(_, at)| *at != now);
    let pending = pending_change.then(|| desired.pending_fingerprint());
    let held = pending.as_deref().and_then(|pending| {
        if delivery.invalid {
            return Some("a delivery annotation is invalid".to_owned());
        }
        match (delivery.mode, &delivery.approve) {
            (Mode::Notify, _) => {
                return Some("mode notify: nudge reports, never stamps".to_owned());
            }
            (Mode::Manual, Some(approval)) if approval.approves(pending) => {}
            (Mode::Manual, Some(Approval::Fingerprint(approved))) => {
                return Some(format!(
                    "{approve_key} approves {approved}, not the pending {pending}"
                ));
            }
            (Mode::Manual, _) => {
                return Some(format!(
                    "waiting for approval: set {approve_key}: {pending}"
                ));
            }
            (Mode::Auto, _) => {}
        }
        if wave_hold.is_some() {
            return wave_hold.clone();
        }
        closed.map(|(w, at)| format!("outside the maintenance window; opens {}", w.in_zone(at)))
    });
    DeliveryReport {
        mode: delivery.mode.as_str(),
        wave: delivery.wave,
        approve: delivery.approve.as_ref().map(|a| match a {
            Approval::Latest => "latest".to_owned(),
            Approval::Fingerprint(f) => f.clone(),
        }),
        window: window.map(ToString::to_string),
        next_opening: closed.map(|(w, at)| w.in_zone(at).to_string()),
        pending,
        held,
        plan,
    }
}

/// The workload's verdict when its own settings hold pending config: a wait
/// nudge means, not a controller falling behind.
pub(super) fn held_verdict(report: &DeliveryReport, verdict: Verdict) -> Verdict {
    let waits = matches!(
        verdict.state,
        State::OutOfSync | State::WaitingForDebounce | State::WaitingForMinInterval
    );
    match (&report.held, &report.pending) {
        (Some(why), Some(pending)) if waits => Verdict {
            state: State::Held,
            message: format!("held: config {pending} is pending; {why}"),
        },
        _ => verdict,
    }
}
