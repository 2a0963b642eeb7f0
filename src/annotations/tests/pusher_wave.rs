//! Wave.

use super::*;
use crate::model::KeySelection;

#[test]
fn wave_uses_its_own_discovery_rules_and_extras() {
    let workload = mk_workload(
        &[
            ("wave.pusher.com/update-on-config-change", "true"),
            ("wave.pusher.com/extra-configmaps", "flags, other-ns/shared"),
            ("wave.pusher.com/extra-secrets", "api-key,Bad Name"),
        ],
        &[],
        mk_auto_pod(),
    );
    let deps = parse(&workload);
    let spec = stamp(&deps, "wave.pusher.com/config-hash");
    assert_eq!(spec.combine, Combine::Wave);
    assert_eq!(
        inputs(spec),
        vec![
            "configmap/other-ns/shared (wave)",
            "configmap/shop/app (wave)",
            "configmap/shop/flags (wave)",
            "secret/shop/api-key (wave)",
            "secret/shop/db (wave)",
            "secret/shop/tls (wave) optional",
        ]
    );
    assert_eq!(
        categories(&deps),
        vec![("wave.pusher.com/extra-secrets", "bad_list_item")]
    );
}

#[test]
fn wave_disabled_reads_no_extras() {
    let deps = parse(&mk_annotated(&[
        ("wave.pusher.com/update-on-config-change", "false"),
        ("wave.pusher.com/extra-configmaps", "flags"),
    ]));
    assert_eq!(deps, Dependencies::default());
}

#[test]
fn wave_extra_merges_with_discovered_keys() {
    let workload = mk_workload(
        &[
            ("wave.pusher.com/update-on-config-change", "true"),
            ("wave.pusher.com/extra-configmaps", "flags"),
        ],
        &[],
        mk_pod(
            vec![],
            vec![mk_container(
                "app",
                &[],
                vec![mk_env_cm_key("M", "flags", "mode")],
            )],
            vec![],
        ),
    );
    let spec = stamp(&parse(&workload), "wave.pusher.com/config-hash").clone();
    assert_eq!(spec.inputs.len(), 1);
    assert_eq!(spec.inputs[0].tracked.reference.keys, KeySelection::All);
    assert_eq!(spec.origins.len(), 2);
}
