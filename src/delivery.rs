//! The delivery rules (design §5d): whether a rolling stamp may go out now,
//! and the words that say why not. Holds (`<prefix>/mode`, `<prefix>/approve`,
//! an invalid delivery annotation), maintenance windows and waves.
//!
//! Pure and written once: the engine core decides with [`gate`] and
//! [`progress`] from what it keeps, and `nudge explain` reports with the same
//! two functions from what it reads in the cluster, so the two cannot
//! disagree about a hold or its message ([`Hold::note`]). The rules take the
//! workload's [`Delivery`] settings (parsed with its other annotations), its
//! pending fingerprint (`stamp::DesiredStamp::pending_fingerprint`), the wall-clock
//! time and how each earlier-wave workload sharing an input stands.
//!
//! Layer 1: it imports the contracts (`annotations`, `window`, `outcome`,
//! `model`), never the engine or `explain`.

use jiff::Timestamp;

use crate::annotations::{Approval, Delivery, Mode};
use crate::model::{Reference, Rollout, WorkloadId, WorkloadKind};
use crate::outcome::history;
use crate::window::Window;

/// The earlier-wave workloads a wave hold waits behind, each as it stood (not
/// [`Progress::Done`]), in [`WorkloadId`] order: what `nudge_wave_rollouts`
/// counts.
pub type Behind = Vec<(WorkloadId, Progress)>;

/// Why a workload's rolling stamp waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// A delivery annotation does not parse (fail closed).
    Invalid,
    /// `mode: notify`: never stamped.
    Notify,
    /// `mode: manual` without an approval of the pending config; `stale`:
    /// the fingerprint an approval names instead.
    Manual {
        /// The fingerprint `<prefix>/approve` names, when it is not the pending one.
        stale: Option<String>,
    },
    /// Not every target has delivered its initial listing since this process
    /// started (leading or not): an earlier wave sharing an input may not be
    /// known yet, so no wave after the first is judged.
    Listing,
    /// An earlier wave sharing an input has not completed.
    Wave {
        /// The first earlier-wave workload not done.
        waiting: WorkloadId,
        /// Its wave.
        wave: u32,
        /// Every earlier-wave workload not done.
        behind: Behind,
    },
    /// An earlier wave sharing an input failed its rollout.
    Halted {
        /// The first earlier-wave workload whose rollout failed.
        failed: WorkloadId,
        /// Its wave.
        wave: u32,
        /// Every earlier-wave workload not done.
        behind: Behind,
    },
    /// `<prefix>/rollback-to` holds the pod template at a revision's
    /// snapshot (design §5e): the sources' changes wait until it is removed.
    /// `kept: false`: the history keeps no snapshot of that revision, and
    /// nothing rolls until the annotation names one it keeps.
    Rollback {
        /// The revision named.
        revision: u32,
        /// Whether the history keeps its snapshot.
        kept: bool,
    },
    /// Someone else rolled the pod template back to an earlier revision's
    /// snapshot (`kubectl rollout undo`), and nothing changed at the sources
    /// since nudge last stamped: nudge leaves it there until one does.
    RolledBack {
        /// The revision the template is at.
        revision: u32,
    },
    /// Outside the maintenance window; `opens` at the next opening.
    Window {
        /// The window in force.
        window: Box<Window>,
        /// Its next opening; `None`: none within a week.
        opens: Option<Timestamp>,
    },
}

impl Hold {
    /// The `reason` label of `nudge_held_workloads`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Notify => "notify",
            Self::Manual { .. } => "manual",
            Self::Listing | Self::Wave { .. } => "wave",
            Self::Halted { .. } => "halted",
            Self::Window { .. } => "window",
            Self::Rollback { .. } | Self::RolledBack { .. } => "rollback",
        }
    }

    /// Whether someone must act to release it (`ConfigPending`), rather than
    /// time or an earlier wave (`ConfigWaiting`).
    pub fn needs_someone(&self) -> bool {
        matches!(
            self,
            Self::Invalid | Self::Notify | Self::Manual { .. } | Self::Rollback { .. }
        )
    }

    /// Whether it is worth an Event: not a wait for the initial listing,
    /// which normally ends within a second of a start and would otherwise
    /// put one Event on every later-wave workload at every restart. It is
    /// logged and counted (`nudge_held_workloads{reason="wave"}`), and `/ready`
    /// names the watch that has not listed.
    pub fn announced(&self) -> bool {
        !matches!(self, Self::Listing)
    }

    /// Whether an earlier wave holds it (judged again when one moves).
    pub fn by_wave(&self) -> bool {
        matches!(self, Self::Wave { .. } | Self::Halted { .. })
    }

    /// Which config waits (`pending`), and for what: the note of the
    /// `ConfigPending` or `ConfigWaiting` Event and of `nudge explain`'s
    /// verdict. `approve_key` is `<prefix>/approve`.
    pub fn note(&self, pending: &str, approve_key: &str) -> String {
        match self {
            Self::Invalid => format!(
                "config {pending} is held: a delivery annotation is invalid (see the InvalidAnnotation Event)"
            ),
            Self::Notify => {
                format!(
                    "config {pending} is pending: mode notify, nudge does not roll this workload"
                )
            }
            Self::Manual { stale: None } => format!(
                "config {pending} is pending approval: set {approve_key}: {pending} (or latest)"
            ),
            Self::Manual {
                stale: Some(approved),
            } => format!(
                "config {pending} is pending approval: {approve_key} approves {approved}, which is not the pending config"
            ),
            Self::Listing => format!(
                "config {pending} waits for the earlier waves: not every workload kind has been listed yet"
            ),
            Self::Wave { waiting, wave, .. } => format!(
                "config {pending} waits for wave {wave}: {waiting} has not completed its rollout"
            ),
            Self::Halted { failed, wave, .. } => format!(
                "config {pending} is held: wave {wave} halted, the rollout of {failed} failed; a newer change releases it"
            ),
            Self::Rollback {
                revision,
                kept: true,
            } => format!(
                "config {pending} is held: rollback-to holds the pod template at revision {revision}'s snapshot; remove the annotation to take the pending config"
            ),
            Self::Rollback {
                revision,
                kept: false,
            } => format!(
                "config {pending} is held: rollback-to names revision {revision}, whose snapshot the history does not keep; nothing rolls until it names a kept revision or is removed"
            ),
            Self::RolledBack { revision } => format!(
                "config {pending} waits: the pod template was rolled back to revision {revision}'s snapshot (kubectl rollout undo or alike); nudge stamps again when a source changes"
            ),
            Self::Window { window, opens } => {
                let opens = opens.map_or_else(
                    || "no opening within a week".to_owned(),
                    |at| format!("opens {}", window.in_zone(at)),
                );
                format!("config {pending} waits for the maintenance window \"{window}\": {opens}")
            }
        }
    }
}

/// The note of a `WavesHalted` Event on a workload whose rollout of config
/// `fingerprint`, in wave `wave`, failed: the references whose change it
/// carried (`changed`) and the later-wave workloads it holds, each with its
/// wave (`held`).
pub fn halt_note(
    fingerprint: &str,
    wave: u32,
    changed: &[Reference],
    held: &[(WorkloadId, u32)],
) -> String {
    let changed = if changed.is_empty() {
        "config".to_owned()
    } else {
        let refs: Vec<String> = changed.iter().map(ToString::to_string).collect();
        refs.join(", ")
    };
    let held: Vec<String> = held
        .iter()
        .map(|(id, wave)| format!("{id} (wave {wave})"))
        .collect();
    format!(
        "the rollout of config {fingerprint} (wave {wave}) failed; {changed} changed; held: {}",
        held.join(", ")
    )
}

/// How an earlier-wave workload stands for the waves after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// In sync and its rollout complete (or a kind without rollout status).
    Done,
    /// Its newest config is not on it yet: a change to roll, a write in
    /// flight, or held itself.
    NotStamped,
    /// Stamped, and its rollout is still in progress.
    RollingOut,
    /// In sync, and its rollout failed.
    Failed,
}

impl Progress {
    /// `done`, `not_stamped`, `rolling_out`, `failed` (`nudge explain`'s plan).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::NotStamped => "not_stamped",
            Self::RollingOut => "rolling_out",
            Self::Failed => "failed",
        }
    }
}

/// Whether nudge follows a rollout of the workload: the core knows it from
/// what it follows, `nudge explain` from a `<prefix>/rollout` marker whose
/// revision the history does not record yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Followed {
    /// No rollout of it is followed.
    No,
    /// One is in progress.
    InProgress,
    /// One ended and its outcome is not recorded yet; `failed`: it failed.
    Ended {
        /// Whether it ended failed.
        failed: bool,
    },
}

/// What [`progress`] judges an earlier-wave workload by.
#[derive(Debug, Clone, Copy)]
pub struct Standing<'a> {
    /// Its kind (a Deployment's own status says whether it failed).
    pub kind: &'a WorkloadKind,
    /// Its newest config is not on it yet (see [`Progress::NotStamped`]).
    pub not_stamped: bool,
    /// Its status.
    pub rollout: Rollout,
    /// The rollout nudge follows on it.
    pub followed: Followed,
    /// The newest revision in its `<prefix>/history` failed.
    pub last_failed: bool,
}

/// How a workload stands for the waves after it. Failed is its status, or the
/// end of the rollout nudge followed, or (kinds judged by nudge's own
/// deadline) the record of that end ([`history::recorded_failure`]).
pub fn progress(standing: &Standing<'_>) -> Progress {
    if standing.not_stamped {
        return Progress::NotStamped;
    }
    let followed = standing.followed;
    let recorded_failure = || {
        history::recorded_failure(
            standing.kind,
            standing.rollout,
            standing.last_failed,
            followed != Followed::No,
        )
    };
    match standing.rollout {
        Rollout::Failed { .. } => Progress::Failed,
        _ if followed == (Followed::Ended { failed: true }) => Progress::Failed,
        // Ended failed and recorded (nudge's own deadline): still failed.
        _ if recorded_failure() => Progress::Failed,
        Rollout::InProgress => Progress::RollingOut,
        _ if followed == Followed::InProgress => Progress::RollingOut,
        Rollout::Complete | Rollout::Unknown => Progress::Done,
    }
}

/// The workloads sharing an input with the one judged, as [`gate`] reads
/// them: each one's wave, and (asked only of earlier waves) its progress.
pub struct Neighbours<'a, W, P> {
    /// The other workloads sharing an input.
    pub ids: &'a [WorkloadId],
    /// The wave of one of them.
    pub wave: W,
    /// How one of them stands.
    pub progress: P,
}

/// Whether a rolling stamp of a workload with `delivery` settings may go out
/// at wall-clock time `at`; `None` when it may. `pending`: its pending
/// fingerprint; `default_window`: `engine.window`; `listed`: every workload
/// kind has been listed (see [`Hold::Listing`]). The order is the rule: its
/// mode, the listing, the earlier waves, its window.
pub fn gate<W, P>(
    delivery: &Delivery,
    default_window: Option<&Window>,
    pending: &str,
    listed: bool,
    at: Timestamp,
    neighbours: Neighbours<'_, W, P>,
) -> Option<Hold>
where
    W: Fn(&WorkloadId) -> u32,
    P: Fn(&WorkloadId) -> Progress,
{
    if let Some(hold) = mode_hold(delivery, pending) {
        return Some(hold);
    }
    if delivery.wave > 0 && !listed {
        return Some(Hold::Listing);
    }
    if delivery.wave > 0
        && let Some(hold) = wave_hold(delivery.wave, neighbours)
    {
        return Some(hold);
    }
    window_hold(delivery.window.resolve(default_window)?, at)
}

/// The hold `mode` (and an invalid annotation) puts on `pending`, if any.
fn mode_hold(delivery: &Delivery, pending: &str) -> Option<Hold> {
    if delivery.invalid {
        return Some(Hold::Invalid);
    }
    match (delivery.mode, &delivery.approve) {
        (Mode::Auto, _) => None,
        (Mode::Notify, _) => Some(Hold::Notify),
        (Mode::Manual, Some(approval)) if approval.approves(pending) => None,
        (Mode::Manual, Some(Approval::Fingerprint(approved))) => Some(Hold::Manual {
            stale: Some(approved.clone()),
        }),
        (Mode::Manual, _) => Some(Hold::Manual { stale: None }),
    }
}

/// A failed earlier wave halts; else one not done holds. The workload named
/// is the first in [`WorkloadId`] order.
fn wave_hold<W, P>(wave: u32, neighbours: Neighbours<'_, W, P>) -> Option<Hold>
where
    W: Fn(&WorkloadId) -> u32,
    P: Fn(&WorkloadId) -> Progress,
{
    let Neighbours {
        ids,
        wave: wave_of,
        progress,
    } = neighbours;
    let mut behind: Behind = ids
        .iter()
        .filter(|other| wave_of(other) < wave)
        .map(|other| (other.clone(), progress(other)))
        .filter(|(_, p)| *p != Progress::Done)
        .collect();
    behind.sort_by(|a, b| a.0.cmp(&b.0));
    let failed = behind.iter().find(|(_, p)| *p == Progress::Failed);
    if let Some((failed, _)) = failed {
        return Some(Hold::Halted {
            failed: failed.clone(),
            wave: wave_of(failed),
            behind,
        });
    }
    let (waiting, _) = behind.first()?;
    Some(Hold::Wave {
        waiting: waiting.clone(),
        wave: wave_of(waiting),
        behind,
    })
}

/// The hold of `window` at `at`: none while it is open.
fn window_hold(window: &Window, at: Timestamp) -> Option<Hold> {
    let opens = window.next_opening(at);
    (opens != Some(at)).then(|| Hold::Window {
        window: Box::new(window.clone()),
        opens,
    })
}

#[cfg(test)]
mod tests;
