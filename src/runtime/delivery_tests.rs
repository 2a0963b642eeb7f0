//! The engine and `nudge explain` judge delivery alike (design §5d): for
//! every hold the core applies, from the same workloads, content and time,
//! `explain` gives the verdict `held` with the note of the core's Event; where
//! the core writes, `explain` holds nothing. Here because the runtime is the
//! layer that composes both (they may not import each other).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::time::Instant;

use crate::annotations::{self, AnnotationScheme};
use crate::config::EngineConfig;
use crate::engine::{Core, CoreSettings, Effect, EngineMetrics, Input};
use crate::events::Reason;
use crate::explain::{ExplainSettings, Facts, InputState, Neighbour, State, build_report};
use crate::fingerprint::{Algorithm, Fingerprint, Observation};
use crate::model::{
    Reference, Rollout, RolloutFailure, Scope, SourceCatalog, SourceName, Tracked, Workload,
    WorkloadId, WorkloadKind,
};
use crate::sources::SourceUpdate;
use crate::targets::WorkloadEvent;
use crate::window::WallClock;

const CHECKSUM: &str = "nudge.dev/checksum-cfg";
const DEBOUNCE: Duration = Duration::from_secs(5);
/// A Friday noon.
const WALL: &str = "2026-11-27T12:00:00Z";
/// What ConfigMap `cfg` held, and holds now.
const BEFORE: &str = "sha256-0";
const NOW: &str = "sha256-1";
const FAILED_HISTORY: &str = r#"[{"revision":1,"stamp":[],"outcome":"failed","reason":"not complete within its progress deadline (10m)"}]"#;

/// A workload of `kind` reading ConfigMap `cfg`, stamped `stamped`, with these
/// annotations and this rollout status.
fn workload(
    kind: WorkloadKind,
    name: &str,
    stamped: &str,
    extra: &[(&str, &str)],
    rollout: Rollout,
) -> Workload {
    let mut annotations =
        BTreeMap::from([("nudge.dev/configmap-cfg".to_owned(), "cfg".to_owned())]);
    for (key, value) in extra {
        annotations.insert((*key).to_owned(), (*value).to_owned());
    }
    Workload {
        id: WorkloadId::new(kind, "shop", name),
        annotations,
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                annotations: Some(BTreeMap::from([(CHECKSUM.to_owned(), stamped.to_owned())])),
                ..ObjectMeta::default()
            }),
            spec: None,
        },
        rollout,
        ordered_pods: false,
        resource_version: None,
        uid: None,
        controller: None,
    }
}

/// The Deployment `web` explained, out of date, with these annotations.
fn web(extra: &[(&str, &str)]) -> Workload {
    workload(
        WorkloadKind::deployment(),
        "web",
        BEFORE,
        extra,
        Rollout::Complete,
    )
}

/// The Deployment `db` in wave 0, stamped `stamped`, with this status.
fn db(stamped: &str, extra: &[(&str, &str)], rollout: Rollout) -> Workload {
    let mut extra = extra.to_vec();
    extra.push(("nudge.dev/wave", "0"));
    workload(WorkloadKind::deployment(), "db", stamped, &extra, rollout)
}

fn catalog() -> SourceCatalog {
    SourceCatalog::new().with(SourceName::configmap(), Scope::Namespaced, |r| {
        annotations::check_object_name(r).map_err(str::to_owned)
    })
}

fn tracked() -> Tracked {
    Tracked::new(
        Reference::object(SourceName::configmap(), "shop", "cfg"),
        Algorithm::Native,
    )
}

fn clock(t0: Instant) -> WallClock {
    WallClock::anchored(t0, WALL.parse().expect("a timestamp"))
}

/// One case: the workload explained, the others sharing its ConfigMap,
/// whether every kind has been listed since the core started, and whether
/// `web` is held.
struct Case {
    name: &'static str,
    web: Workload,
    others: Vec<Workload>,
    listed: bool,
    held: bool,
}

fn held(name: &'static str, web: Workload, others: Vec<Workload>) -> Case {
    Case {
        name,
        web,
        others,
        listed: true,
        held: true,
    }
}

fn written(name: &'static str, web: Workload, others: Vec<Workload>) -> Case {
    Case {
        held: false,
        ..held(name, web, others)
    }
}

/// What the core did about `web` at its first dispatch: the note of its
/// `ConfigPending`/`ConfigWaiting` Event, or `None` when it wrote it.
fn engine_verdict(case: &Case, t0: Instant) -> Option<String> {
    let settings = CoreSettings {
        engine: EngineConfig {
            debounce: DEBOUNCE,
            stamps_per_second: 1000.0,
            burst: 1000,
            ..EngineConfig::default()
        },
        scheme: AnnotationScheme::default(),
        catalog: catalog(),
        namespace_selector: false,
        snapshot_kinds: Default::default(),
        leader: true,
        clock: clock(t0),
    };
    let mut core = Core::new(settings, Arc::default(), EngineMetrics::default()).expect("a core");
    if case.listed {
        core.handle(Input::Listed, t0);
    }
    for workload in case.others.iter().chain([&case.web]) {
        core.handle(Input::workload(WorkloadEvent::Apply(workload.clone())), t0);
    }
    for content in [BEFORE, NOW] {
        let observation = Observation::Present(Fingerprint::digest(content));
        core.handle(
            Input::Observation(SourceUpdate::new(tracked(), observation)),
            t0,
        );
    }
    let mut effects = core.handle(Input::Tick, t0 + DEBOUNCE);
    if !case.listed {
        assert!(
            effects.iter().all(|e| !about(e, &case.web.id)),
            "{}: nothing for a later wave before the listing: {effects:?}",
            case.name
        );
        core.handle(Input::Listed, t0 + DEBOUNCE);
        effects = core.handle(Input::Tick, t0 + DEBOUNCE * 2);
    }
    let held = effects.iter().find_map(|effect| match effect {
        Effect::Publish(notice)
            if notice.workload == case.web.id
                && matches!(notice.reason, Reason::ConfigPending | Reason::ConfigWaiting) =>
        {
            Some(notice.note.clone())
        }
        _ => None,
    });
    let wrote = effects
        .iter()
        .any(|effect| matches!(effect, Effect::Write(write) if write.patch.id == case.web.id));
    assert!(
        held.is_some() != wrote,
        "{}: held or written: {effects:?}",
        case.name
    );
    held
}

/// Whether `effect` writes or reports workload `id`.
fn about(effect: &Effect, id: &WorkloadId) -> bool {
    match effect {
        Effect::Write(write) => write.patch.id == *id,
        Effect::Publish(notice) => notice.workload == *id,
        _ => false,
    }
}

/// `nudge explain deployment/web` at the same wall-clock time, from the same
/// content.
fn explain_verdict(case: &Case, t0: Instant) -> crate::explain::Verdict {
    let (scheme, catalog) = (AnnotationScheme::default(), catalog());
    let deps = annotations::dependencies(&case.web, &scheme, &catalog);
    let observed = Observation::Present(Fingerprint::digest(NOW));
    let inputs = BTreeMap::from([(tracked(), InputState::Observed(observed))]);
    let neighbours: Vec<Neighbour> = case
        .others
        .iter()
        .map(|other| Neighbour {
            deps: annotations::dependencies(other, &scheme, &catalog),
            workload: other.clone(),
        })
        .collect();
    let settings = ExplainSettings {
        scheme,
        debounce: DEBOUNCE,
        max_delay: EngineConfig::default().max_delay,
        min_interval: EngineConfig::default().min_interval,
        stamp_on_delete: false,
        namespaces: Vec::new(),
        ignore_namespaces: Vec::new(),
        namespace_selector: String::new(),
        ignore_kinds: Vec::new(),
        window: None,
    };
    let report = build_report(&Facts {
        workload: &case.web,
        deps: &deps,
        inputs: &inputs,
        objects: &BTreeMap::new(),
        settings: &settings,
        now: clock(t0).at(t0 + DEBOUNCE),
        neighbours: &neighbours,
        namespace_selected: None,
        copies: &Default::default(),
    });
    report.verdict
}

#[test]
fn explain_holds_exactly_what_the_engine_holds_and_says_it_in_the_same_words() {
    let failed = Rollout::Failed {
        reason: RolloutFailure::ProgressDeadlineExceeded,
    };
    let wave = [("nudge.dev/wave", "1")];
    // A StatefulSet still rolling out after nudge's deadline failed it.
    let recorded = workload(
        WorkloadKind::stateful_set(),
        "db",
        NOW,
        &[
            ("nudge.dev/wave", "0"),
            ("nudge.dev/history", FAILED_HISTORY),
        ],
        Rollout::InProgress,
    );
    let cases = [
        held("mode notify", web(&[("nudge.dev/mode", "notify")]), vec![]),
        held("mode manual", web(&[("nudge.dev/mode", "manual")]), vec![]),
        held(
            "a stale approval",
            web(&[
                ("nudge.dev/mode", "manual"),
                ("nudge.dev/approve", "sha256-0123456789ab"),
            ]),
            vec![],
        ),
        written(
            "approved",
            web(&[
                ("nudge.dev/mode", "manual"),
                ("nudge.dev/approve", "latest"),
            ]),
            vec![],
        ),
        held(
            "an invalid mode",
            web(&[("nudge.dev/mode", "sometimes")]),
            vec![],
        ),
        held(
            "a closed window",
            web(&[("nudge.dev/window", "Mon 00:00-01:00 UTC")]),
            vec![],
        ),
        written(
            "an open window",
            web(&[("nudge.dev/window", "Fri 11:00-13:00 UTC")]),
            vec![],
        ),
        held(
            "an earlier wave not stamped",
            web(&wave),
            vec![db(BEFORE, &[], Rollout::Complete)],
        ),
        held(
            "an earlier wave held itself",
            web(&wave),
            vec![db(
                BEFORE,
                &[("nudge.dev/mode", "notify")],
                Rollout::Complete,
            )],
        ),
        held(
            "an earlier wave rolling out",
            web(&wave),
            vec![db(NOW, &[], Rollout::InProgress)],
        ),
        held(
            "an earlier wave failed",
            web(&wave),
            vec![db(NOW, &[], failed)],
        ),
        held(
            "an earlier wave's recorded failure",
            web(&wave),
            vec![recorded],
        ),
        written(
            "an earlier wave done",
            web(&wave),
            vec![db(NOW, &[], Rollout::Complete)],
        ),
        Case {
            listed: false,
            ..written(
                "a later wave after a restart, once every kind is listed",
                web(&wave),
                vec![db(NOW, &[], Rollout::Complete)],
            )
        },
    ];
    let t0 = Instant::now();
    for case in &cases {
        let explained = explain_verdict(case, t0);
        let engine = engine_verdict(case, t0);
        assert_eq!(engine.is_some(), case.held, "{}: {engine:?}", case.name);
        match engine {
            Some(note) => {
                assert_eq!(explained.state, State::Held, "{}: {explained:?}", case.name);
                assert_eq!(explained.message, note, "{}", case.name);
            }
            None => assert_ne!(explained.state, State::Held, "{}: {explained:?}", case.name),
        }
    }
}
