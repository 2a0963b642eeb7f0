//! What `nudge explain` says about a workload's delivery settings (design
//! §5d): its mode, wave and window, the pending fingerprint of config not yet
//! stamped, and why it waits. Pure, like the rest of `build_report`.

use jiff::Timestamp;
use serde::Serialize;

use super::{State, Verdict};
use crate::annotations::{Approval, Dependencies, Mode};
use crate::stamp::DesiredStamp;
use crate::window::Window;

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
    /// Why the pending config waits, when the workload's own settings hold it
    /// (an earlier wave is the controller's to judge: it sees every workload).
    pub held: Option<String>,
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
}

/// The delivery report; `pending_change`: some output's desired value differs
/// from its stamped one.
pub(super) fn delivery_report(
    deps: &Dependencies,
    desired: &DesiredStamp,
    pending_change: bool,
    default_window: Option<&Window>,
    approve_key: &str,
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
