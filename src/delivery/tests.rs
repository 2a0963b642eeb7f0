//! The delivery rules on their own: explicit settings, times and neighbours.

use super::*;
use crate::annotations::WindowChoice;
use crate::model::RolloutFailure;

fn now() -> Timestamp {
    // A Friday noon.
    "2026-11-27T12:00:00Z".parse().unwrap()
}

fn id(name: &str) -> WorkloadId {
    WorkloadId::new(WorkloadKind::deployment(), "ns", name)
}

fn delivery(f: impl FnOnce(&mut Delivery)) -> Delivery {
    let mut delivery = Delivery::default();
    f(&mut delivery);
    delivery
}

/// The gate with no neighbours, every kind listed.
fn alone(delivery: &Delivery, window: Option<&Window>, pending: &str) -> Option<Hold> {
    let neighbours = Neighbours {
        ids: &[],
        wave: |_: &WorkloadId| 0,
        progress: |_: &WorkloadId| Progress::Failed,
    };
    gate(delivery, window, pending, true, now(), neighbours)
}

#[test]
fn default_delivery_is_always_open() {
    assert_eq!(alone(&Delivery::default(), None, "sha256-x"), None);
}

#[test]
fn manual_opens_for_the_approved_fingerprint_only() {
    let approve = |approval: Option<Approval>| {
        delivery(|d| {
            d.mode = Mode::Manual;
            d.approve = approval;
        })
    };
    let pending = "sha256-aaaaaaaaaaaa";
    assert_eq!(
        alone(&approve(None), None, pending),
        Some(Hold::Manual { stale: None })
    );
    let stale = approve(Some(Approval::Fingerprint("sha256-bbbbbbbbbbbb".into())));
    assert_eq!(
        alone(&stale, None, pending),
        Some(Hold::Manual {
            stale: Some("sha256-bbbbbbbbbbbb".into())
        })
    );
    let exact = approve(Some(Approval::Fingerprint(pending.into())));
    assert_eq!(alone(&exact, None, pending), None);
    assert_eq!(alone(&approve(Some(Approval::Latest)), None, pending), None);
}

#[test]
fn an_invalid_annotation_holds_before_anything_else() {
    let invalid = delivery(|d| {
        d.invalid = true;
        d.mode = Mode::Notify;
    });
    let held = alone(&invalid, None, "f");
    assert_eq!(held, Some(Hold::Invalid));
    assert!(held.is_some_and(|h| h.needs_someone() && h.reason() == "invalid"));
}

#[test]
fn a_failed_earlier_wave_halts_before_a_waiting_one_holds() {
    let (first, second, third) = (id("first"), id("second"), id("third"));
    let all = [third.clone(), first.clone(), second.clone()];
    let wave = |other: &WorkloadId| match other.name.as_str() {
        "second" => 1,
        "third" => 2,
        _ => 0,
    };
    let judge = |own: u32, waiting: &WorkloadId, failed: Option<&WorkloadId>| {
        let progress = |other: &WorkloadId| {
            if Some(other) == failed {
                Progress::Failed
            } else if other == waiting {
                Progress::RollingOut
            } else {
                Progress::Done
            }
        };
        let settings = delivery(|d| d.wave = own);
        let neighbours = Neighbours {
            ids: &all,
            wave,
            progress,
        };
        gate(&settings, None, "f", true, now(), neighbours)
    };
    assert_eq!(
        judge(2, &second, None),
        Some(Hold::Wave {
            waiting: second.clone(),
            wave: 1,
            behind: vec![(second.clone(), Progress::RollingOut)],
        })
    );
    assert_eq!(
        judge(2, &second, Some(&first)),
        Some(Hold::Halted {
            failed: first.clone(),
            wave: 0,
            behind: vec![
                (first.clone(), Progress::Failed),
                (second.clone(), Progress::RollingOut)
            ],
        }),
        "in workload order, whatever order the neighbours come in"
    );
    // A later wave never holds an earlier one.
    assert_eq!(judge(1, &third, None), None);
    assert_eq!(judge(0, &second, None), None);
}

#[test]
fn until_every_kind_is_listed_only_later_waves_wait_and_quietly() {
    let neighbours = || Neighbours {
        ids: &[],
        wave: |_: &WorkloadId| 0,
        progress: |_: &WorkloadId| Progress::Done,
    };
    let later = delivery(|d| d.wave = 1);
    let held = gate(&later, None, "f", false, now(), neighbours());
    assert_eq!(held, Some(Hold::Listing));
    assert_eq!(held.as_ref().map(Hold::reason), Some("wave"));
    assert!(!held.is_some_and(|h| h.announced()), "no Event");
    let first = Delivery::default();
    assert_eq!(gate(&first, None, "f", false, now(), neighbours()), None);
    assert_eq!(gate(&later, None, "f", true, now(), neighbours()), None);
}

#[test]
fn the_engine_window_applies_unless_the_workload_opts_out() {
    let window: Window = "Mon-Fri 22:00-06:00 UTC".parse().unwrap();
    let held = alone(&Delivery::default(), Some(&window), "f");
    let Some(Hold::Window { opens, .. }) = &held else {
        panic!("{held:?}");
    };
    assert_eq!(*opens, Some("2026-11-27T22:00:00Z".parse().unwrap()));
    assert_eq!(
        held.map(|h| h.note("sha256-aaaaaaaaaaaa", "nudge.dev/approve")),
        Some(
            "config sha256-aaaaaaaaaaaa waits for the maintenance window \
             \"Mon-Fri 22:00-06:00 UTC\": opens 2026-11-27T22:00:00+00:00[UTC]"
                .to_owned()
        )
    );
    let always = delivery(|d| d.window = WindowChoice::Always);
    assert_eq!(alone(&always, Some(&window), "f"), None);
    let open: Window = "Fri 11:00-13:00 UTC".parse().unwrap();
    assert_eq!(alone(&Delivery::default(), Some(&open), "f"), None);
}

fn standing(kind: &WorkloadKind, rollout: Rollout, followed: Followed) -> Standing<'_> {
    Standing {
        kind,
        not_stamped: false,
        rollout,
        followed,
        last_failed: false,
    }
}

#[test]
fn progress_reads_the_status_then_the_rollout_followed() {
    let deployment = WorkloadKind::deployment();
    let failed = Rollout::Failed {
        reason: RolloutFailure::ProgressDeadlineExceeded,
    };
    let cases = [
        (Rollout::Complete, Followed::No, Progress::Done),
        (Rollout::Unknown, Followed::No, Progress::Done),
        (Rollout::InProgress, Followed::No, Progress::RollingOut),
        (failed, Followed::No, Progress::Failed),
        (
            Rollout::Complete,
            Followed::InProgress,
            Progress::RollingOut,
        ),
        (
            Rollout::InProgress,
            Followed::Ended { failed: true },
            Progress::Failed,
        ),
        (
            Rollout::Complete,
            Followed::Ended { failed: false },
            Progress::Done,
        ),
    ];
    for (rollout, followed, expected) in cases {
        let judged = progress(&standing(&deployment, rollout, followed));
        assert_eq!(judged, expected, "{rollout:?} {followed:?}");
    }
    let not_stamped = Standing {
        not_stamped: true,
        ..standing(&deployment, failed, Followed::No)
    };
    assert_eq!(progress(&not_stamped), Progress::NotStamped);
}

#[test]
fn a_recorded_failure_counts_only_for_kinds_judged_by_nudges_deadline() {
    let recorded = |kind: &WorkloadKind, rollout, followed| {
        progress(&Standing {
            last_failed: true,
            ..standing(kind, rollout, followed)
        })
    };
    let stateful_set = WorkloadKind::stateful_set();
    assert_eq!(
        recorded(&stateful_set, Rollout::InProgress, Followed::No),
        Progress::Failed
    );
    assert_eq!(
        recorded(&stateful_set, Rollout::Complete, Followed::No),
        Progress::Done,
        "recovered since"
    );
    assert_eq!(
        recorded(&stateful_set, Rollout::InProgress, Followed::InProgress),
        Progress::RollingOut,
        "a newer rollout is not the failed one"
    );
    assert_eq!(
        recorded(
            &WorkloadKind::deployment(),
            Rollout::InProgress,
            Followed::No
        ),
        Progress::RollingOut,
        "a Deployment's status says so itself"
    );
}
