use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::fingerprint::{self, Fingerprint, ObjectData};
use crate::model::{Scope, WorkloadKind};

const NS: &str = "shop";
const NOW: &str = "2025-06-01T12:00:00Z";
const FLAGS_FP: &str = "sha256-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const FLAGS_OLD: &str = "sha256-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const DB_FP: &str = "hmac-sha256-cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

fn ts(text: &str) -> Timestamp {
    text.parse().expect("test timestamp")
}

fn mk_map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A Deployment `shop/web` with workload annotations `meta` and pod-template
/// annotations `template` (where stamps live).
fn mk_workload(meta: &[(&str, &str)], template: &[(&str, &str)]) -> Workload {
    Workload {
        id: WorkloadId::new(WorkloadKind::deployment(), NS, "web"),
        rollout: crate::model::Rollout::Unknown,
        ordered_pods: false,
        resource_version: None,
        uid: None,
        controller: None,
        annotations: mk_map(meta),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                annotations: Some(mk_map(template)),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
        },
    }
}

fn mk_catalog() -> SourceCatalog {
    let object_name = |r: &str| crate::annotations::check_object_name(r).map_err(str::to_owned);
    SourceCatalog::new()
        .with(SourceName::configmap(), Scope::Namespaced, object_name)
        .with(SourceName::secret(), Scope::Namespaced, object_name)
        .with(
            SourceName::consul(),
            Scope::External,
            crate::sources::consul::check_key,
        )
}

fn mk_settings() -> ExplainSettings {
    ExplainSettings {
        scheme: AnnotationScheme::default(),
        debounce: Duration::from_secs(5),
        max_delay: Duration::from_secs(60),
        min_interval: Duration::from_secs(30),
        stamp_on_delete: false,
        namespaces: Vec::new(),
        ignore_namespaces: Vec::new(),
        namespace_selector: String::new(),
        ignore_kinds: Vec::new(),
        window: None,
    }
}

/// Test inputs: observations and metadata by object name.
#[derive(Default)]
struct World {
    inputs: BTreeMap<String, InputState>,
    objects: BTreeMap<String, ObjectFacts>,
    settings: Option<ExplainSettings>,
    neighbours: Vec<super::Neighbour>,
    namespace_selected: Option<bool>,
}

impl World {
    fn present(mut self, name: &str, fingerprint: &str) -> Self {
        self.inputs.insert(
            name.into(),
            InputState::Observed(Observation::Present(Fingerprint::digest(fingerprint))),
        );
        self
    }

    fn absent(mut self, name: &str) -> Self {
        self.inputs
            .insert(name.into(), InputState::Observed(Observation::Absent));
        self
    }

    fn failed(mut self, name: &str, why: &str) -> Self {
        self.inputs
            .insert(name.into(), InputState::Failed(why.into()));
        self
    }

    fn written(mut self, name: &str, at: &str) -> Self {
        self.objects.insert(
            name.into(),
            ObjectFacts {
                last_write: Some(ts(at)),
                ignored: false,
            },
        );
        self
    }

    /// A workload sharing inputs with the explained one.
    fn neighbour(mut self, workload: Workload) -> Self {
        let deps =
            annotations::dependencies(&workload, &AnnotationScheme::default(), &mk_catalog());
        self.neighbours.push(super::Neighbour { workload, deps });
        self
    }

    fn settings(mut self, settings: ExplainSettings) -> Self {
        self.settings = Some(settings);
        self
    }

    /// Whether the workload's namespace matches `namespace_selector`.
    fn namespace_selected(mut self, selected: bool) -> Self {
        self.namespace_selected = Some(selected);
        self
    }

    /// The report for `workload`, matching inputs and objects by reference name.
    fn report(&self, workload: &Workload) -> Report {
        let settings = self.settings.clone().unwrap_or_else(mk_settings);
        let deps = annotations::dependencies(workload, &settings.scheme, &mk_catalog());
        let inputs: BTreeMap<Tracked, InputState> = deps
            .tracked()
            .filter_map(|t| {
                Some((
                    t.clone(),
                    self.inputs.get(t.reference.name.as_str())?.clone(),
                ))
            })
            .collect();
        let objects: BTreeMap<ObjectRef, ObjectFacts> = deps
            .tracked()
            .filter_map(|t| {
                let object = ObjectRef::of(&t.reference)?;
                let facts = *self.objects.get(t.reference.name.as_str())?;
                Some((object, facts))
            })
            .collect();
        build_report(&Facts {
            workload,
            deps: &deps,
            inputs: &inputs,
            objects: &objects,
            settings: &settings,
            now: ts(NOW),
            neighbours: &self.neighbours,
            namespace_selected: self.namespace_selected,
            copies: &Default::default(),
        })
    }
}

fn flags_workload(stamped: &str) -> Workload {
    mk_workload(
        &[("nudge.dev/configmap-flags", "flags")],
        &[("nudge.dev/checksum-flags", stamped)],
    )
}

#[test]
fn stamped_value_equal_to_desired_is_in_sync() {
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:00:00Z")
        .report(&flags_workload(FLAGS_FP));
    assert_eq!(report.verdict.state, State::InSync);
    assert_eq!(report.verdict.message, "in sync");
    let output = &report.outputs[0];
    assert_eq!(output.output, "nudge.dev/checksum-flags");
    assert_eq!(output.desired.as_deref(), Some(FLAGS_FP));
    assert_eq!(output.stamped.as_deref(), Some(FLAGS_FP));
    let reference = &output.references[0];
    assert_eq!(reference.reference, "configmap/flags");
    assert_eq!(reference.from, vec!["nudge.dev/configmap-flags".to_owned()]);
    assert_eq!(
        reference.last_write.as_deref(),
        Some("2025-06-01T11:00:00Z")
    );
}

#[test]
fn change_younger_than_debounce_is_waiting_for_debounce() {
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:59:58Z")
        .report(&flags_workload(FLAGS_OLD));
    assert_eq!(report.verdict.state, State::WaitingForDebounce);
    assert_eq!(
        report.verdict.message,
        "waiting for debounce (changed 2s ago, debounce 5s)"
    );
}

#[test]
fn change_older_than_debounce_means_nudge_is_late() {
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:57:00Z")
        .report(&flags_workload(FLAGS_OLD));
    assert_eq!(report.verdict.state, State::OutOfSync);
    assert_eq!(
        report.verdict.message,
        "out of sync: nudge should have stamped by now — is it running and leader? (changed 3m ago)"
    );
}

#[test]
fn debounce_allows_clock_slack() {
    // Written 6 s ago with a 5 s debounce: within the slack for second-granular
    // managedFields times and clock skew.
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:59:54Z")
        .report(&flags_workload(FLAGS_OLD));
    assert_eq!(report.verdict.state, State::WaitingForDebounce);
}

#[test]
fn workload_debounce_override_wins_over_config() {
    let workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/debounce", "10m"),
        ],
        &[("nudge.dev/checksum-flags", FLAGS_OLD)],
    );
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:57:00Z")
        .report(&workload);
    assert_eq!(
        report.verdict.message,
        "waiting for debounce (changed 3m ago, debounce 10m)"
    );
    assert_eq!(report.timing.debounce, "10m");
}

#[test]
fn recent_stamp_is_waiting_for_min_interval() {
    let workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/last-updated", "2025-06-01T11:59:50Z"),
        ],
        &[("nudge.dev/checksum-flags", FLAGS_OLD)],
    );
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:59:00Z")
        .report(&workload);
    assert_eq!(report.verdict.state, State::WaitingForMinInterval);
    assert_eq!(
        report.verdict.message,
        "waiting for min-interval (last stamped 10s ago, min-interval 30s)"
    );
}

#[test]
fn missing_required_secret_is_missing_config_and_outranks_the_rest() {
    let workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/secret-db", "db"),
        ],
        &[("nudge.dev/checksum-flags", FLAGS_FP)],
    );
    let report = World::default()
        .present("flags", FLAGS_FP)
        .absent("db")
        .report(&workload);
    assert_eq!(report.verdict.state, State::MissingConfig);
    assert_eq!(report.verdict.message, "MissingConfig: secret db not found");
    let db = report
        .outputs
        .iter()
        .find(|o| o.output == "nudge.dev/checksum-db")
        .expect("db output");
    assert_eq!(db.desired, None);
    assert_eq!(db.references[0].state, ReferenceState::Absent);
}

#[test]
fn unreachable_source_is_unknown_with_its_error() {
    let workload = mk_workload(
        &[("nudge.dev/consul-cfg", "app/config")],
        &[("nudge.dev/checksum-cfg", FLAGS_OLD)],
    );
    let report = World::default()
        .failed("app/config", "consul unreachable (connection refused)")
        .report(&workload);
    assert_eq!(report.verdict.state, State::Unknown);
    assert_eq!(
        report.verdict.message,
        "unknown: consul unreachable (connection refused)"
    );
    assert_eq!(
        report.outputs[0].references[0].state,
        ReferenceState::Unknown
    );
}

#[test]
fn consul_change_cannot_be_dated() {
    let workload = mk_workload(
        &[("nudge.dev/consul-cfg", "app/config")],
        &[("nudge.dev/checksum-cfg", FLAGS_OLD)],
    );
    let report = World::default()
        .present("app/config", FLAGS_FP)
        .report(&workload);
    assert_eq!(report.verdict.state, State::OutOfSync);
    assert_eq!(
        report.verdict.message,
        "out of sync (consul change time unknown)"
    );
}

#[test]
fn never_stamped_output_counts_as_out_of_sync() {
    let workload = mk_workload(&[("nudge.dev/configmap-flags", "flags")], &[]);
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:00:00Z")
        .report(&workload);
    assert_eq!(report.verdict.state, State::OutOfSync);
    assert_eq!(report.outputs[0].stamped, None);
}

#[test]
fn invalid_annotation_is_reported_when_the_rest_is_in_sync() {
    let workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/bogus", "x"),
        ],
        &[("nudge.dev/checksum-flags", FLAGS_FP)],
    );
    let report = World::default()
        .present("flags", FLAGS_FP)
        .report(&workload);
    assert_eq!(report.verdict.state, State::InvalidAnnotation);
    assert!(
        report
            .verdict
            .message
            .starts_with("InvalidAnnotation: annotation nudge.dev/bogus:"),
        "{}",
        report.verdict.message
    );
    assert_eq!(report.annotation_errors[0].annotation, "nudge.dev/bogus");
    assert_eq!(report.outputs[0].verdict.state, State::InSync);
}

#[test]
fn workload_without_annotations_is_not_tracked() {
    let report = World::default().report(&mk_workload(&[], &[]));
    assert_eq!(report.verdict.state, State::NotTracked);
    assert!(report.outputs.is_empty());
}

#[test]
fn workload_outside_the_configured_namespaces_is_not_managed() {
    let mut settings = mk_settings();
    settings.namespaces = vec!["other".into()];
    let report = World::default()
        .present("flags", FLAGS_FP)
        .settings(settings)
        .report(&flags_workload(FLAGS_FP));
    assert_eq!(report.verdict.state, State::NotManaged);
}

#[test]
fn a_workload_nudge_would_stamp_but_its_configuration_excludes_says_why() {
    let in_sync = || World::default().present("flags", FLAGS_FP);
    let verdict = |world: World| world.report(&flags_workload(FLAGS_OLD)).verdict;

    let mut settings = mk_settings();
    settings.ignore_namespaces = vec!["kube-system".into(), NS.into()];
    let ignored = verdict(in_sync().settings(settings));
    assert_eq!(ignored.state, State::NotManaged);
    assert_eq!(
        ignored.message,
        "not managed: namespace shop is ignored (kubernetes.ignore_namespaces)"
    );

    let mut settings = mk_settings();
    settings.namespace_selector = "team in (a,b)".into();
    let unselected = verdict(
        in_sync()
            .settings(settings.clone())
            .namespace_selected(false),
    );
    assert_eq!(
        unselected.message,
        "not managed: namespace shop does not match kubernetes.namespace_selector (team in (a,b))"
    );
    let selected = verdict(in_sync().settings(settings).namespace_selected(true));
    assert_eq!(selected.state, State::OutOfSync);

    let mut settings = mk_settings();
    settings.ignore_kinds = vec!["deployments".into()];
    let turned_off = verdict(in_sync().settings(settings));
    assert_eq!(
        turned_off.message,
        "not managed: Deployment is turned off (kubernetes.ignore_kinds)"
    );
}

#[test]
fn a_workload_that_opts_out_is_not_managed_and_says_by_what() {
    for (key, value) in [
        ("nudge.dev/auto", "false"),
        ("reloader.stakater.com/auto", "false"),
        ("k8s-consul-mutator.io/skip", "true"),
    ] {
        let report = World::default().report(&mk_workload(&[(key, value)], &[]));
        assert_eq!(report.verdict.state, State::NotManaged, "{key}");
        assert_eq!(
            report.verdict.message,
            format!("not managed: opted out by {key}: {value:?}")
        );
    }
}

#[test]
fn an_auto_workload_referencing_no_config_has_nothing_to_stamp() {
    let report = World::default().report(&mk_workload(&[("nudge.dev/auto", "true")], &[]));
    assert_eq!(report.verdict.state, State::InSync);
    assert_eq!(
        report.verdict.message,
        "nothing to stamp: it references no config"
    );
}

#[test]
fn several_outputs_not_in_sync_are_counted_in_the_verdict() {
    let workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/secret-db", "db"),
        ],
        &[],
    );
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:59:59Z")
        .present("db", DB_FP)
        .written("db", "2025-06-01T11:00:00Z")
        .report(&workload);
    assert_eq!(report.verdict.state, State::OutOfSync);
    assert!(
        report.verdict.message.ends_with("(and 1 more output)"),
        "{}",
        report.verdict.message
    );
}

#[test]
fn json_shape_is_stable() {
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:00:00Z")
        .report(&flags_workload(FLAGS_FP));
    let json = serde_json::to_value(&report).expect("serializes");
    assert_eq!(
        json,
        serde_json::json!({
            "workload": { "kind": "Deployment", "namespace": "shop", "name": "web" },
            "verdict": { "state": "in_sync", "message": "in sync" },
            "outputs": [{
                "output": "nudge.dev/checksum-flags",
                "output_kind": "annotation",
                "desired": FLAGS_FP,
                "stamped": FLAGS_FP,
                "verdict": { "state": "in_sync", "message": "in sync" },
                "references": [{
                    "reference": "configmap/flags",
                    "source": "configmap",
                    "from": ["nudge.dev/configmap-flags"],
                    "optional": false,
                    "algorithm": "Native",
                    "state": "present",
                    "fingerprint": FLAGS_FP,
                    "error": null,
                    "last_write": "2025-06-01T11:00:00Z",
                    "ignored": false,
                }],
            }],
            "annotation_errors": [],
            "rollout": null,
            "history": [],
            "delivery": {
                "mode": "auto",
                "wave": 0,
                "approve": null,
                "window": null,
                "next_opening": null,
                "pending": null,
                "held": null,
                "plan": [],
            },
            "timing": {
                "now": NOW,
                "debounce": "5s",
                "max_delay": "1m",
                "min_interval": "30s",
                "last_stamped": null,
            },
        })
    );
}

#[test]
fn table_has_a_row_per_reference_and_ends_with_the_verdict() {
    let workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/secret-db", "db"),
        ],
        &[("nudge.dev/checksum-flags", FLAGS_FP)],
    );
    let table = World::default()
        .present("flags", FLAGS_FP)
        .absent("db")
        .report(&workload)
        .to_table();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], "Deployment shop/web");
    assert!(lines[1].starts_with("OUTPUT"), "{table}");
    assert!(lines[1].contains("DESIRED vs STAMPED"), "{table}");
    assert!(table.contains("= sha256-aaaaaaaa…"), "{table}");
    assert!(table.contains("secret/db"), "{table}");
    assert_eq!(
        lines.last().copied(),
        Some("verdict: MissingConfig: secret db not found")
    );
}

#[test]
fn secret_content_never_appears_in_wave_reports() {
    let secret = Secret {
        data: Some(BTreeMap::from([(
            "password".to_owned(),
            k8s_openapi::ByteString(b"hunter2".to_vec()),
        )])),
        ..Secret::default()
    };
    let fragment = fingerprint::wave_fragment(&ObjectData::from_secret(&secret));
    let workload = mk_workload(
        &[
            ("wave.pusher.com/update-on-config-change", "true"),
            ("wave.pusher.com/extra-secrets", "db"),
        ],
        &[],
    );
    let mut world = World::default();
    world.inputs.insert(
        "db".into(),
        InputState::Observed(Observation::Present(Fingerprint::Wave(fragment))),
    );
    let report = world.report(&workload);
    let json = serde_json::to_string(&report).expect("serializes");
    let table = report.to_table();
    for text in [&json, &table] {
        assert!(!text.contains("hunter2"), "{text}");
        // base64 of "hunter2"
        assert!(!text.contains("aHVudGVyMg"), "{text}");
    }
    assert!(json.contains("wave-fragment("), "{json}");
}

#[test]
fn short_fingerprints_keep_their_prefix() {
    assert_eq!(short(FLAGS_FP), "sha256-aaaaaaaa…");
    assert_eq!(short(DB_FP), "hmac-sha256-cccccccc…");
    assert_eq!(short("absent"), "absent");
    assert_eq!(short("wave-fragment(12 bytes)"), "wave-fragment(12 bytes)");
}

#[test]
fn the_rollout_in_flight_and_the_history_are_shown() {
    let failed = r#"[{"revision":3,"changed":[{"ref":"configmap/shop/flags","by":"kubectl-edit"}],"stamp":[{"key":"nudge.dev/checksum-flags","before":"sha256-bbbbbbbbbbbb…","after":"sha256-aaaaaaaaaaaa…"}],"outcome":"failed","reason":"ProgressDeadlineExceeded","ended":"2025-06-01T11:50:00Z","seconds":600}]"#;
    let in_flight = r#"{"revision":4,"changed":[{"ref":"configmap/shop/flags","by":"helm","version":"812"}],"stamp":[{"key":"nudge.dev/checksum-flags","before":"sha256-aaaaaaaaaaaa…","after":"sha256-cccccccccccc…"}]}"#;
    let workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/history", failed),
            ("nudge.dev/rollout", in_flight),
        ],
        &[("nudge.dev/checksum-flags", FLAGS_FP)],
    );
    let report = World::default()
        .present("flags", FLAGS_FP)
        .report(&workload);
    assert_eq!(
        report.verdict.state,
        State::InSync,
        "nudge's own annotations are not errors"
    );
    assert_eq!(report.rollout.as_ref().map(|r| r.revision), Some(4));
    let table = report.to_table();
    assert!(
        table.contains(
            "rollout in progress: config revision 4: configmap/shop/flags (by helm, version 812) \
             changed; nudge.dev/checksum-flags sha256-aaaaaaaaaaaa… → sha256-cccccccccccc…"
        ),
        "{table}"
    );
    assert!(
        table.contains(
            "last outcome: config revision 3: failed after 10m (ProgressDeadlineExceeded), \
             ended 2025-06-01T11:50:00Z"
        ),
        "{table}"
    );
    let history = report.history_table();
    assert!(
        history.starts_with("config history (newest first):"),
        "{history}"
    );
    assert!(
        history.contains("changed: configmap/shop/flags (by kubectl-edit)"),
        "{history}"
    );
}

#[test]
fn manual_mode_shows_the_pending_fingerprint_to_approve() {
    let workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/mode", "manual"),
        ],
        &[("nudge.dev/checksum-flags", "sha256-old")],
    );
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:00:00Z")
        .report(&workload);
    assert_eq!(report.verdict.state, State::Held);
    assert_eq!(
        report.outputs[0].verdict, report.verdict,
        "the held output says so too"
    );
    let pending = report.delivery.pending.clone().expect("pending");
    assert!(
        pending.starts_with("sha256-") && pending.len() == 19,
        "{pending}"
    );
    assert_eq!(
        report.verdict.message,
        format!(
            "config {pending} is pending approval: set nudge.dev/approve: {pending} (or latest)"
        )
    );
    assert_eq!(report.delivery.mode, "manual");
    assert!(
        report
            .to_table()
            .contains(&format!("delivery: mode manual, pending {pending}"))
    );
}

#[test]
fn an_approval_of_the_pending_config_is_not_a_hold() {
    let stale = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/mode", "manual"),
            ("nudge.dev/approve", "sha256-0123456789ab"),
        ],
        &[("nudge.dev/checksum-flags", "sha256-old")],
    );
    let world = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:00:00Z");
    let report = world.report(&stale);
    assert_eq!(report.verdict.state, State::Held);
    assert!(
        report
            .verdict
            .message
            .contains("approves sha256-0123456789ab, which is not the pending config"),
        "{}",
        report.verdict.message
    );
    let pending = report.delivery.pending.expect("pending");
    let approved = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/mode", "manual"),
            ("nudge.dev/approve", &pending),
        ],
        &[("nudge.dev/checksum-flags", "sha256-old")],
    );
    assert_eq!(world.report(&approved).verdict.state, State::OutOfSync);
}

#[test]
fn a_closed_window_shows_its_next_opening() {
    let workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/window", "Mon-Fri 22:00-06:00 UTC"),
        ],
        &[("nudge.dev/checksum-flags", "sha256-old")],
    );
    // NOW is a Sunday noon.
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:00:00Z")
        .report(&workload);
    assert_eq!(report.verdict.state, State::Held);
    assert_eq!(
        report.delivery.next_opening.as_deref(),
        Some("2025-06-02T22:00:00+00:00[UTC]")
    );
    assert!(
        report
            .verdict
            .message
            .contains("waits for the maintenance window \"Mon-Fri 22:00-06:00 UTC\": opens 2025-06-02T22:00:00+00:00[UTC]")
    );
}

#[test]
fn an_in_sync_workload_in_notify_mode_has_nothing_pending() {
    let workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/mode", "notify"),
        ],
        &[("nudge.dev/checksum-flags", FLAGS_FP)],
    );
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:00:00Z")
        .report(&workload);
    assert_eq!(report.verdict.state, State::InSync);
    assert_eq!(report.delivery.pending, None);
    assert_eq!(report.delivery.held, None);
}

/// `name` in `wave`, reading ConfigMap `flags`, stamped `stamped`, with `rollout`.
fn in_wave(name: &str, wave: &str, stamped: &str, rollout: crate::model::Rollout) -> Workload {
    let mut workload = mk_workload(
        &[
            ("nudge.dev/configmap-flags", "flags"),
            ("nudge.dev/wave", wave),
        ],
        &[("nudge.dev/checksum-flags", stamped)],
    );
    workload.id = WorkloadId::new(WorkloadKind::deployment(), NS, name);
    workload.rollout = rollout;
    workload
}

#[test]
fn a_halted_wave_plan_names_the_failed_workload() {
    use crate::model::{Rollout, RolloutFailure};
    let failed = Rollout::Failed {
        reason: RolloutFailure::ProgressDeadlineExceeded,
    };
    let report = World::default()
        .present("flags", FLAGS_FP)
        .written("flags", "2025-06-01T11:00:00Z")
        .neighbour(in_wave("canary", "0", FLAGS_FP, failed))
        .neighbour(in_wave("eu", "2", "sha256-old", Rollout::Complete))
        .report(&in_wave("web", "1", "sha256-old", Rollout::Complete));
    assert_eq!(report.verdict.state, State::Held);
    assert!(
        report.verdict.message.ends_with(&format!(
            "wave 0 halted, the rollout of Deployment/{NS}/canary failed; a newer change releases it"
        )),
        "{}",
        report.verdict.message
    );
    let states: Vec<(u32, &str, &str, bool)> = report
        .delivery
        .plan
        .iter()
        .map(|m| (m.wave, m.workload.as_str(), m.state, m.this))
        .collect();
    assert_eq!(
        states,
        [
            (0, "Deployment/canary", "failed", false),
            (1, "Deployment/web", "not_stamped", true),
            (2, "Deployment/eu", "not_stamped", false),
        ]
    );
    let table = report.to_table();
    assert!(
        table.contains("  wave 1  Deployment/web (this workload)  not stamped"),
        "{table}"
    );
}

#[test]
fn a_wave_waits_while_an_earlier_one_rolls_out_and_not_once_it_is_done() {
    use crate::model::Rollout;
    let world = || {
        World::default()
            .present("flags", FLAGS_FP)
            .written("flags", "2025-06-01T11:00:00Z")
    };
    let web = in_wave("web", "1", "sha256-old", Rollout::Complete);
    let rolling = world()
        .neighbour(in_wave("canary", "0", FLAGS_FP, Rollout::InProgress))
        .report(&web);
    assert!(
        rolling.verdict.message.ends_with(&format!(
            "waits for wave 0: Deployment/{NS}/canary has not completed its rollout"
        )),
        "{}",
        rolling.verdict.message
    );
    let done = world()
        .neighbour(in_wave("canary", "0", FLAGS_FP, Rollout::Complete))
        .report(&web);
    assert_eq!(
        done.verdict.state,
        State::OutOfSync,
        "{}",
        done.verdict.message
    );
}

#[test]
fn a_recorded_failure_of_a_kind_judged_by_nudges_deadline_halts_as_the_core_does() {
    use crate::model::Rollout;
    let failed = r#"[{"revision":1,"stamp":[],"outcome":"failed","reason":"not complete within its progress deadline (1m)"}]"#;
    let db = |kind: WorkloadKind, rollout| {
        let mut db = in_wave("db", "0", FLAGS_FP, rollout);
        db.id = WorkloadId::new(kind, NS, "db");
        db.annotations
            .insert("nudge.dev/history".into(), failed.into());
        db
    };
    let web = in_wave("web", "1", "sha256-old", Rollout::Complete);
    let report = |neighbour: Workload| {
        World::default()
            .present("flags", FLAGS_FP)
            .written("flags", "2025-06-01T11:00:00Z")
            .neighbour(neighbour)
            .report(&web)
    };
    // A StatefulSet still rolling after nudge's deadline failed it: failed.
    let halted = report(db(WorkloadKind::stateful_set(), Rollout::InProgress));
    assert!(
        halted.verdict.message.ends_with(&format!(
            "wave 0 halted, the rollout of StatefulSet/{NS}/db failed; a newer change releases it"
        )),
        "{}",
        halted.verdict.message
    );
    // Once its status completes, it is done.
    let done = report(db(WorkloadKind::stateful_set(), Rollout::Complete));
    assert_eq!(
        done.verdict.state,
        State::OutOfSync,
        "{}",
        done.verdict.message
    );
    // A Deployment's own status says whether it failed.
    let deployment = report(db(WorkloadKind::deployment(), Rollout::InProgress));
    assert!(
        deployment.verdict.message.ends_with(&format!(
            "waits for wave 0: Deployment/{NS}/db has not completed its rollout"
        )),
        "{}",
        deployment.verdict.message
    );
    // A newer rollout in flight (its marker) is not the failed one.
    let mut rolling = db(WorkloadKind::stateful_set(), Rollout::InProgress);
    rolling.annotations.insert(
        "nudge.dev/rollout".into(),
        r#"{"revision":2,"stamp":[]}"#.into(),
    );
    let rolling = report(rolling);
    assert!(
        rolling.verdict.message.ends_with(&format!(
            "waits for wave 0: StatefulSet/{NS}/db has not completed its rollout"
        )),
        "{}",
        rolling.verdict.message
    );
}

// === neighbours: which kinds, which places ===

#[test]
fn the_wave_plan_lists_every_kind_nudge_stamps_once() {
    use super::neighbours::{KindToList, kinds_to_list};
    let mut config = Config::default();
    let gadget = TargetConfig {
        group: "example.com".into(),
        version: "v1".into(),
        kind: "Gadget".into(),
        template: "spec.template".into(),
    };
    // A [[targets]] entry naming a built-in kind again is not listed twice.
    let again = TargetConfig {
        group: "apps".into(),
        version: "v1".into(),
        kind: "StatefulSet".into(),
        template: "spec.template".into(),
    };
    config.targets.kinds = vec![gadget.clone(), again];
    let names = |kinds: Vec<KindToList>| -> Vec<String> {
        kinds
            .into_iter()
            .map(|kind| match kind {
                KindToList::Builtin(kind, plural) => format!("{}/{plural}", kind.group()),
                KindToList::Discovered(entry) => format!("{}/{}", entry.group, entry.kind),
            })
            .collect()
    };
    assert_eq!(
        names(kinds_to_list(&config, &[])),
        [
            "apps/deployments",
            "apps/statefulsets",
            "apps/daemonsets",
            "batch/cronjobs",
            "batch/jobs",
            "argoproj.io/Rollout",
            "example.com/Gadget",
        ]
    );
    // An embedder's target takes its kind over (it is read through it).
    let custom = WorkloadKind::new("apps", "v1", "Deployment", TemplatePath::spec_template());
    assert!(!names(kinds_to_list(&config, &[&custom])).contains(&"apps/deployments".to_owned()));
}

#[test]
fn a_plan_of_namespaced_inputs_is_looked_for_in_their_namespace_only() {
    use super::neighbours::{Reach, places, reach};
    let configmap = Tracked::new(
        Reference::object(SourceName::configmap(), NS, "flags"),
        Algorithm::Native,
    );
    let tracked = BTreeSet::from([configmap.clone()]);
    assert_eq!(
        reach(&tracked),
        Reach::Namespaces(BTreeSet::from([NS.to_owned()]))
    );
    let everywhere = NamespaceScope::default();
    assert_eq!(
        places(&reach(&tracked), &everywhere),
        [(Some(NS.to_owned()), None)]
    );
    // Outside the configured namespaces nudge stamps nothing.
    let elsewhere = NamespaceScope {
        namespaces: vec!["other".into()],
        ignore: Vec::new(),
    };
    assert_eq!(places(&reach(&tracked), &elsewhere), []);
}

#[test]
fn a_plan_with_a_cluster_wide_input_is_looked_for_in_every_watched_namespace() {
    use super::neighbours::{Reach, places, reach};
    let consul = Tracked::new(
        Reference::key(SourceName::consul(), "app/db/url"),
        Algorithm::Native,
    );
    let configmap = Tracked::new(
        Reference::object(SourceName::configmap(), NS, "flags"),
        Algorithm::Native,
    );
    let tracked = BTreeSet::from([configmap, consul]);
    assert_eq!(reach(&tracked), Reach::Everywhere);
    let all = NamespaceScope {
        namespaces: Vec::new(),
        ignore: vec!["kube-system".into()],
    };
    assert_eq!(
        places(&Reach::Everywhere, &all),
        [(None, Some("metadata.namespace!=kube-system".to_owned()))]
    );
    let some = NamespaceScope {
        namespaces: vec!["a".into(), "b".into()],
        ignore: Vec::new(),
    };
    assert_eq!(
        places(&Reach::Everywhere, &some),
        [(Some("a".to_owned()), None), (Some("b".to_owned()), None)]
    );
}
