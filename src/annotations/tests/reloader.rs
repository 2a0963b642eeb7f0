//! Reloader.

use super::*;
use crate::model::Gate;

#[test]
fn reloader_updates_env_var_the_template_already_carries() {
    let pod = mk_pod(
        vec![mk_cm_volume("app-config", &["only"])],
        vec![mk_container(
            "app",
            &[],
            vec![mk_env_value("STAKATER_APP_CONFIG_CONFIGMAP", "abc")],
        )],
        vec![],
    );
    let deps = parse(&mk_workload(
        &[("reloader.stakater.com/auto", "true")],
        &[],
        pod,
    ));
    assert!(deps.errors.is_empty());
    let spec = stamp(&deps, "STAKATER_APP_CONFIG_CONFIGMAP");
    assert_eq!(
        spec.output,
        Output::ContainerEnv("STAKATER_APP_CONFIG_CONFIGMAP".into())
    );
    assert_eq!(spec.combine, Combine::Single);
    assert_eq!(inputs(spec), vec!["configmap/shop/app-config (reloader)"]);
    assert_eq!(deps.stamps.len(), 1);
}

#[test]
fn reloader_env_var_keeps_the_hash_reloader_wrote_in_it() {
    let with_value = |value: &str| {
        let pod = mk_pod(
            vec![mk_cm_volume("app-config", &[])],
            vec![mk_container(
                "app",
                &[],
                vec![mk_env_value("STAKATER_APP_CONFIG_CONFIGMAP", value)],
            )],
            vec![],
        );
        let deps = parse(&mk_workload(
            &[("reloader.stakater.com/auto", "true")],
            &[],
            pod,
        ));
        inputs(stamp(&deps, "STAKATER_APP_CONFIG_CONFIGMAP"))
    };
    // Reloader releases: SHA-1; its SHA-512/256 builds: 64 hex digits.
    assert_eq!(
        with_value("3c9a892aeaedc759abc3df9884a37b8be5680382"),
        vec!["configmap/shop/app-config (reloader)"]
    );
    assert_eq!(
        with_value("fd9e71a362056bfa864d9859e12978f893d330ce8cbf09218b25d015770ad91f"),
        vec!["configmap/shop/app-config (reloader-sha512/256)"]
    );
    assert_eq!(
        with_value("FD9E71A362056BFA864D9859E12978F893D330CE8CBF09218B25D015770AD91F"),
        vec!["configmap/shop/app-config (reloader)"]
    );
}

#[test]
fn reloader_env_var_in_init_container_counts() {
    let pod = mk_pod(
        vec![],
        vec![mk_container("app", &["db"], vec![])],
        vec![mk_container(
            "init",
            &[],
            vec![mk_env_value("STAKATER_DB_SECRET", "x")],
        )],
    );
    let deps = parse(&mk_workload(
        &[("secret.reloader.stakater.com/reload", "db")],
        &[],
        pod,
    ));
    assert_eq!(
        inputs(stamp(&deps, "STAKATER_DB_SECRET")),
        vec!["secret/shop/db (reloader)"]
    );
}

#[test]
fn reloader_without_env_var_falls_back_to_config_hash_merged_with_auto() {
    let pod = mk_pod(
        vec![mk_cm_volume("app", &["a.yaml"])],
        vec![mk_container("app", &["db"], vec![])],
        vec![],
    );
    let workload = mk_workload(
        &[
            ("reloader.stakater.com/auto", "true"),
            ("nudge.dev/auto", "true"),
        ],
        &[],
        pod,
    );
    let deps = parse(&workload);
    assert_eq!(deps.stamps.len(), 1);
    let spec = stamp(&deps, "nudge.dev/config-hash");
    assert_eq!(spec.combine, Combine::NativeHash);
    assert_eq!(
        inputs(spec),
        vec!["configmap/shop/app (native)", "secret/shop/db (native)"]
    );
}

#[test]
fn reloader_kind_specific_auto_only_tracks_that_kind() {
    let pod = mk_pod(
        vec![mk_cm_volume("app", &[])],
        vec![mk_container("app", &["db"], vec![])],
        vec![],
    );
    let deps = parse(&mk_workload(
        &[("configmap.reloader.stakater.com/auto", "true")],
        &[],
        pod.clone(),
    ));
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        vec!["configmap/shop/app (native)"]
    );
    let deps = parse(&mk_workload(
        &[("secret.reloader.stakater.com/auto", "true")],
        &[],
        pod,
    ));
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        vec!["secret/shop/db (native)"]
    );
}

#[test]
fn reloader_reload_lists_are_required_and_validated() {
    let deps = parse(&mk_annotated(&[
        ("configmap.reloader.stakater.com/reload", "a, b,"),
        ("secret.reloader.stakater.com/reload", "s,app-config["),
    ]));
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        vec![
            "configmap/shop/a (native)",
            "configmap/shop/b (native)",
            "secret/shop/s (native)"
        ]
    );
    assert_eq!(
        categories(&deps),
        vec![("secret.reloader.stakater.com/reload", "bad_list_item")]
    );
}

/// A pod referencing the ConfigMaps `app-config-v2`, `my-web`, `x-app` and
/// `app-config`, and the Secret `db`.
fn mk_pattern_pod(env: Vec<EnvVar>) -> PodSpec {
    mk_pod(
        ["app-config-v2", "my-web", "x-app", "app-config"]
            .iter()
            .map(|name| mk_cm_volume(name, &[]))
            .collect(),
        vec![mk_container("app", &["db"], env)],
        vec![],
    )
}

#[test]
fn reloader_reload_entries_are_go_patterns_over_the_referenced_objects() {
    let deps = parse(&mk_workload(
        &[("configmap.reloader.stakater.com/reload", "app-config-.*")],
        &[],
        mk_pattern_pod(vec![mk_env_value(
            "STAKATER_APP_CONFIG_V2_CONFIGMAP",
            "da39a3ee5e6b4b0d3255bfef95601890afd80709",
        )]),
    ));
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    assert_eq!(
        inputs(stamp(&deps, "STAKATER_APP_CONFIG_V2_CONFIGMAP")),
        vec!["configmap/shop/app-config-v2 (reloader)"]
    );
    assert_eq!(deps.stamps.len(), 1);
}

#[test]
fn reloader_reload_entries_are_anchored_as_reloader_anchors_them() {
    // `^app|web$`: starts with `app`, or ends with `web`.
    let deps = parse(&mk_workload(
        &[("configmap.reloader.stakater.com/reload", "app|web")],
        &[],
        mk_pattern_pod(vec![]),
    ));
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        vec![
            "configmap/shop/app-config (native)",
            "configmap/shop/app-config-v2 (native)",
            "configmap/shop/my-web (native)",
        ]
    );
}

#[test]
fn reloader_reload_entry_naming_an_object_tracks_it_and_what_it_matches() {
    // `.` is a pattern too: `app.config` also matches the referenced `app-config`;
    // the named `app.config` is tracked (required) though nothing references it.
    let deps = parse(&mk_workload(
        &[("configmap.reloader.stakater.com/reload", "app.config")],
        &[],
        mk_pattern_pod(vec![]),
    ));
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        vec![
            "configmap/shop/app-config (native)",
            "configmap/shop/app.config (native)",
        ]
    );
}

#[test]
fn reloader_reload_entry_go_cannot_compile_is_reported_and_matches_nothing() {
    let deps = parse(&mk_workload(
        &[(
            "configmap.reloader.stakater.com/reload",
            "app-config[, (?x)app.*, my-web",
        )],
        &[],
        mk_pattern_pod(vec![]),
    ));
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        vec!["configmap/shop/my-web (native)"]
    );
    assert_eq!(
        categories(&deps),
        vec![
            ("configmap.reloader.stakater.com/reload", "bad_list_item"),
            ("configmap.reloader.stakater.com/reload", "bad_list_item"),
        ]
    );
    assert!(deps.errors[0].to_string().contains("missing closing ]"));
}

#[test]
fn reloader_exclude_lists_are_names_not_patterns() {
    // Reloader compares exclude entries with `==`: a pattern excludes nothing.
    let deps = parse(&mk_workload(
        &[
            ("configmap.reloader.stakater.com/reload", "app-config.*"),
            ("configmaps.exclude.reloader.stakater.com/reload", "app-.*"),
        ],
        &[],
        mk_pattern_pod(vec![]),
    ));
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        vec![
            "configmap/shop/app-config (native)",
            "configmap/shop/app-config-v2 (native)",
        ]
    );
    assert_eq!(
        categories(&deps),
        vec![(
            "configmaps.exclude.reloader.stakater.com/reload",
            "bad_list_item"
        )]
    );
}

#[test]
fn reloader_objects_sharing_an_env_var_are_reported() {
    let pod = mk_pod(
        vec![],
        vec![mk_container(
            "app",
            &[],
            vec![mk_env_value("STAKATER_A_B_CONFIGMAP", "x")],
        )],
        vec![],
    );
    let workload = mk_workload(
        &[("configmap.reloader.stakater.com/reload", "a-b,a.b")],
        &[],
        pod,
    );
    let deps = parse(&workload);
    assert!(deps.stamps.is_empty());
    assert_eq!(
        categories(&deps),
        vec![("configmap.reloader.stakater.com/reload", "duplicate_slot")]
    );
}

#[test]
fn reloader_garbage_auto_value_is_reported() {
    let deps = parse(&mk_annotated(&[("reloader.stakater.com/auto", "yes")]));
    assert!(deps.stamps.is_empty());
    assert_eq!(
        categories(&deps),
        vec![("reloader.stakater.com/auto", "bad_bool")]
    );
}

#[test]
fn reloader_auto_values_read_as_go_parse_bool() {
    for value in ["1", "t", "T", "TRUE", "true", "True"] {
        let deps = parse(&mk_workload(
            &[("reloader.stakater.com/auto", value)],
            &[],
            mk_reloader_pod(),
        ));
        assert!(deps.errors.is_empty(), "{value}: {:?}", deps.errors);
        assert_eq!(
            inputs(stamp(&deps, "nudge.dev/config-hash")).len(),
            3,
            "{value}"
        );
    }
}

#[test]
fn reloader_exclude_lists_drop_objects_from_every_mode() {
    let deps = parse(&mk_workload(
        &[
            ("reloader.stakater.com/auto", "true"),
            (
                "configmaps.exclude.reloader.stakater.com/reload",
                " flags , other",
            ),
            ("secrets.exclude.reloader.stakater.com/reload", "db"),
        ],
        &[],
        mk_reloader_pod(),
    ));
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        vec!["configmap/shop/app (native)"]
    );
    // On the pod template they are not Reloader's exclude lists.
    let deps = parse(&mk_workload(
        &[("reloader.stakater.com/auto", "true")],
        &[("secrets.exclude.reloader.stakater.com/reload", "db")],
        mk_reloader_pod(),
    ));
    assert_eq!(inputs(stamp(&deps, "nudge.dev/config-hash")).len(), 3);
}

#[test]
fn auto_reload_all_makes_unannotated_workloads_auto_unless_they_opt_out() {
    let scheme = AnnotationScheme::default().with_reloader_auto_all(true);
    let plain = mk_workload(&[], &[], mk_reloader_pod());
    let deps = dependencies(&plain, &scheme, &mk_catalog());
    let spec = stamp(&deps, "nudge.dev/config-hash");
    assert_eq!(spec.output, Output::Adopted("nudge.dev/config-hash".into()));
    assert_eq!(inputs(spec).len(), 3);

    let opted_out = mk_workload(
        &[("reloader.stakater.com/auto", "false")],
        &[],
        mk_reloader_pod(),
    );
    assert!(
        dependencies(&opted_out, &scheme, &mk_catalog())
            .stamps
            .is_empty()
    );
    // A typed annotation set to false opts that kind out only.
    let secrets_out = mk_workload(
        &[("secret.reloader.stakater.com/auto", "false")],
        &[],
        mk_reloader_pod(),
    );
    let deps = dependencies(&secrets_out, &scheme, &mk_catalog());
    assert_eq!(
        inputs(stamp(&deps, "nudge.dev/config-hash")),
        vec![
            "configmap/shop/app (native)",
            "configmap/shop/flags (native)"
        ]
    );
    // Workloads another scheme manages are left to it.
    let wave = mk_workload(
        &[("wave.pusher.com/update-on-config-change", "true")],
        &[],
        mk_reloader_pod(),
    );
    let deps = dependencies(&wave, &scheme, &mk_catalog());
    assert!(
        deps.stamps
            .iter()
            .all(|s| s.output.key() != "nudge.dev/config-hash")
    );
    // Without the setting nothing happens.
    assert!(parse(&plain).stamps.is_empty());
}

#[test]
fn reloader_search_tracks_referenced_objects_gated_by_match() {
    let deps = parse(&mk_workload(
        &[("reloader.stakater.com/search", "true")],
        &[],
        mk_reloader_pod(),
    ));
    let spec = stamp(&deps, "nudge.dev/config-hash");
    assert_eq!(
        inputs(spec),
        vec![
            "configmap/shop/app (native) while matched",
            "configmap/shop/flags (native) while matched",
            "secret/shop/db (native) while matched",
        ]
    );
    assert!(
        spec.inputs
            .iter()
            .all(|i| i.tracked.gate == Gate::ReloaderMatch)
    );
}

#[test]
fn reloader_pause_period_is_the_debounce_and_its_ceiling() {
    for (value, secs) in [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
    ] {
        let deps = parse(&mk_annotated(&[(
            "deployment.reloader.stakater.com/pause-period",
            value,
        )]));
        assert!(deps.errors.is_empty(), "{value}: {:?}", deps.errors);
        assert_eq!(
            deps.debounce,
            Some(Duration::from_secs_f64(secs)),
            "{value}"
        );
        assert_eq!(deps.max_delay, deps.debounce);
    }
    let deps = parse(&mk_annotated(&[(
        "deployment.reloader.stakater.com/pause-period",
        "soon",
    )]));
    assert_eq!(
        categories(&deps),
        vec![(
            "deployment.reloader.stakater.com/pause-period",
            "bad_duration"
        )]
    );
}

#[test]
fn reloader_rollout_strategy_restart_on_a_deployment_is_answered_with_what_nudge_does_instead() {
    let deps = parse(&mk_annotated(&[(
        "reloader.stakater.com/rollout-strategy",
        "restart",
    )]));
    assert_eq!(
        categories(&deps),
        vec![("reloader.stakater.com/rollout-strategy", "unsupported")]
    );
    assert!(
        deps.errors[0].to_string().contains("pod template"),
        "{}",
        deps.errors[0]
    );
    let deps = parse(&mk_annotated(&[(
        "reloader.stakater.com/rollout-strategy",
        "rollout",
    )]));
    assert!(deps.errors.is_empty());
    let deps = parse(&mk_annotated(&[(
        "reloader.stakater.com/rollout-strategy",
        "blue",
    )]));
    assert_eq!(
        categories(&deps),
        vec![("reloader.stakater.com/rollout-strategy", "bad_value")]
    );
}

/// A Rollout (`argoproj.io`) with these annotations, mounting ConfigMap
/// `app-config` and Secret `creds`, its container carrying Reloader's env var
/// for `app-config`.
fn mk_argo_rollout(meta: &[(&str, &str)], template: &[(&str, &str)]) -> Workload {
    let pod = mk_pod(
        vec![
            mk_cm_volume("app-config", &[]),
            mk_secret_volume("creds", false),
        ],
        vec![mk_container(
            "app",
            &[],
            vec![mk_env_value("STAKATER_APP_CONFIG_CONFIGMAP", "abc")],
        )],
        vec![],
    );
    let mut workload = mk_workload(meta, template, pod);
    let kind = WorkloadKind::new(
        "argoproj.io",
        "v1alpha1",
        "Rollout",
        TemplatePath::parse("spec.template").unwrap(),
    );
    workload.id = WorkloadId::new(kind, NS, "web");
    workload
}

#[test]
fn reloader_restart_strategy_on_an_argo_rollout_keeps_one_fingerprint_on_metadata() {
    let deps = parse(&mk_argo_rollout(
        &[
            ("reloader.stakater.com/auto", "true"),
            ("reloader.stakater.com/rollout-strategy", "restart"),
        ],
        &[],
    ));
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    assert_eq!(deps.stamps.len(), 1, "{:?}", deps.stamps);
    let spec = &deps.stamps[0];
    // Reloader never writes the template under this strategy: not its env
    // var either.
    assert_eq!(
        spec.output,
        Output::RestartAt("nudge.dev/config-hash".into())
    );
    assert_eq!(spec.combine, Combine::NativeHash);
    assert_eq!(
        inputs(spec),
        vec![
            "configmap/shop/app-config (native)",
            "secret/shop/creds (native)"
        ]
    );
}

#[test]
fn reloader_restart_strategy_is_read_from_the_rollouts_own_metadata_only() {
    let deps = parse(&mk_argo_rollout(
        &[("reloader.stakater.com/auto", "true")],
        &[("reloader.stakater.com/rollout-strategy", "restart")],
    ));
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    assert!(
        deps.stamps
            .iter()
            .all(|spec| !matches!(spec.output, Output::RestartAt(_))),
        "{:?}",
        deps.stamps
    );
}

#[test]
fn reloader_restart_strategy_beside_native_auto_is_a_clash() {
    let deps = parse(&mk_argo_rollout(
        &[
            ("nudge.dev/auto", "true"),
            ("reloader.stakater.com/auto", "true"),
            ("reloader.stakater.com/rollout-strategy", "restart"),
        ],
        &[],
    ));
    assert!(deps.stamps.is_empty(), "{:?}", deps.stamps);
    assert_eq!(
        categories(&deps),
        vec![
            ("nudge.dev/auto", "duplicate_slot"),
            ("reloader.stakater.com/auto", "duplicate_slot"),
        ]
    );
}
