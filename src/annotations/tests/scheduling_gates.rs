//! Holds: the scheduling gate and Wave's scheduler swap.

use super::*;

#[test]
fn wave_workloads_are_gated_on_every_required_input() {
    let wave = [("wave.pusher.com/update-on-config-change", "true")];
    let deps = parse(&mk_workload(&wave, &[], mk_auto_pod()));
    let gate = stamp(&deps, "nudge.dev/awaiting-config");
    assert_eq!(gate.combine, Combine::Release);
    let hash = stamp(&deps, "wave.pusher.com/config-hash");
    let required: Vec<String> = hash
        .inputs
        .iter()
        .filter(|i| !i.optional)
        .map(|i| i.tracked.to_string())
        .collect();
    assert!(!required.is_empty());
    assert_eq!(inputs(gate), required, "optional inputs never hold pods");
    assert!(deps.errors.is_empty());

    let opted_out = [wave[0], ("nudge.dev/scheduling-gate", "false")];
    let deps = parse(&mk_workload(&opted_out, &[], mk_auto_pod()));
    assert_eq!(
        outputs(&deps),
        vec!["annotation wave.pusher.com/config-hash"]
    );
}

#[test]
fn native_workloads_are_gated_only_when_they_opt_in() {
    let auto = [("nudge.dev/auto", "true")];
    let deps = parse(&mk_workload(&auto, &[], mk_auto_pod()));
    assert!(deps.stamps.iter().all(|s| s.combine != Combine::Release));

    let opted_in = [auto[0], ("nudge.dev/scheduling-gate", "true")];
    let deps = parse(&mk_workload(&opted_in, &[], mk_auto_pod()));
    assert!(!stamp(&deps, "nudge.dev/awaiting-config").inputs.is_empty());

    let garbage = [auto[0], ("nudge.dev/scheduling-gate", "yes please")];
    let deps = parse(&mk_workload(&garbage, &[], mk_auto_pod()));
    assert_eq!(
        categories(&deps),
        vec![("nudge.dev/scheduling-gate", "bad_bool")]
    );
    assert!(deps.stamps.iter().all(|s| s.combine != Combine::Release));
}

#[test]
fn nothing_required_means_no_gate() {
    let opted_in = [
        ("nudge.dev/auto", "true"),
        ("nudge.dev/scheduling-gate", "true"),
    ];
    let pod = mk_pod(vec![mk_secret_volume("tls", true)], vec![], vec![]);
    let deps = parse(&mk_workload(&opted_in, &[], pod));
    assert_eq!(outputs(&deps), vec!["annotation nudge.dev/config-hash"]);
}

#[test]
fn ordered_statefulsets_and_jobs_are_never_gated() {
    let wave = [("wave.pusher.com/update-on-config-change", "true")];
    let mut sts = mk_workload(&wave, &[], mk_auto_pod());
    sts.id = WorkloadId::new(WorkloadKind::stateful_set(), NS, "db");
    sts.ordered_pods = true;
    let deps = parse(&sts);
    assert!(deps.stamps.iter().all(|s| s.combine != Combine::Release));
    assert!(deps.errors.is_empty(), "Wave's default is silent");

    let explicit = [
        ("nudge.dev/auto", "true"),
        ("nudge.dev/scheduling-gate", "true"),
    ];
    let mut sts = mk_workload(&explicit, &[], mk_auto_pod());
    sts.ordered_pods = true;
    let deps = parse(&sts);
    assert_eq!(
        categories(&deps),
        vec![("nudge.dev/scheduling-gate", "unsupported")]
    );
    assert!(deps.errors[0].to_string().contains("OrderedReady"));

    let mut job = mk_workload(&explicit, &[], mk_auto_pod());
    job.id = WorkloadId::new(
        WorkloadKind::new("batch", "v1", "Job", TemplatePath::spec_template())
            .with_immutable_template(),
        NS,
        "once",
    );
    let deps = parse(&job);
    assert!(deps.stamps.iter().all(|s| s.combine != Combine::Release));
}

#[test]
fn waves_scheduling_disabled_is_released_with_the_wave_inputs() {
    let held = [
        ("wave.pusher.com/update-on-config-change", "true"),
        ("wave.pusher.com/scheduling-disabled", "default-scheduler"),
        ("nudge.dev/scheduling-gate", "false"),
    ];
    let deps = parse(&mk_workload(&held, &[], mk_auto_pod()));
    let restore = deps
        .stamps
        .iter()
        .find(|s| s.output == Output::WaveSchedulingDisabled)
        .expect("restore spec");
    assert_eq!(restore.combine, Combine::Release);
    assert!(!restore.inputs.is_empty());
    assert!(deps.errors.is_empty());
    // On the pod template it is not Wave's: nothing to restore.
    let deps = parse(&mk_workload(&[], &held[1..2], mk_auto_pod()));
    assert!(deps.stamps.is_empty());
}
