//! Properties of the core over random interleavings of watch events, content
//! changes, time, write outcomes, restarts and leadership changes, for three
//! adopted workloads (Reloader's `auto` without a `STAKATER_*` env var,
//! Reloader's annotations strategy, a CronJob) and a native Deployment.
//!
//! The oracle. The sources hold content A, B or C; each change makes a new
//! *version*. A process *observes* a version when its sources report it; its
//! *first sight* is the first watch event it handles, and its sources report
//! the content right after. A process that first sees the workload with an
//! output still to adopt takes that content as its *baseline*: adopting the
//! baseline rolls nothing, and any other content is a change that must reach
//! the pod template. Content that changed while no process watched (before a
//! first sight, with no adoption written) is part of the baseline: the
//! documented window, which a restart reopens when the adoption was not
//! written yet. After the sequence, the run is driven to quiescence (leader,
//! writes in flight applied, a watch event as a relist delivers, then ten
//! minutes with every write applied), and then:
//!
//! (a) the workload carries the latest content L: a native one on its pod
//!     template; an adopted one on its metadata, with its pod template either
//!     untouched or carrying L, and every adoption (a write that takes the
//!     workload over without touching its pod template) carrying the baseline
//!     of the process that wrote it, every first write that rolls it
//!     carrying content other than that baseline. Together: content that
//!     differs from the baseline reaches the pod template.
//! (b) without a change observed by a process after its first sight, no write
//!     changes an adopted workload's pod template;
//! (c) the contents written to the pod template, by version, are a
//!     subsequence of the versions observed, in order;
//! (d) the final state is stable: another tick, watch event and ten minutes
//!     write nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::harness::{
    CHECKSUM, CONFIG_HASH, Harness, LAST_RELOADED_FROM, RELOADER_STATE, WriteEnd, cron_job,
    native_deployment, reloader_annotations_strategy, reloader_auto,
};
use crate::model::Workload;

const CONTENTS: [&str; 3] = ["A", "B", "C"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ReloaderAuto,
    ReloaderAnnotations,
    CronJob,
    Native,
}

impl Kind {
    const ALL: [Self; 4] = [
        Self::ReloaderAuto,
        Self::ReloaderAnnotations,
        Self::CronJob,
        Self::Native,
    ];

    fn make(self) -> Workload {
        match self {
            Self::ReloaderAuto => reloader_auto(),
            Self::ReloaderAnnotations => reloader_annotations_strategy(),
            Self::CronJob => cron_job(),
            Self::Native => native_deployment(),
        }
    }

    /// The pod-template annotation a change of content rewrites.
    fn template_key(self) -> &'static str {
        match self {
            Self::ReloaderAuto => CONFIG_HASH,
            Self::ReloaderAnnotations => LAST_RELOADED_FROM,
            Self::CronJob | Self::Native => CHECKSUM,
        }
    }

    /// The metadata annotation an adoption writes; `None`: nothing to adopt.
    fn adopted_key(self) -> Option<&'static str> {
        match self {
            Self::ReloaderAuto => Some(CONFIG_HASH),
            Self::ReloaderAnnotations => Some(RELOADER_STATE),
            Self::CronJob => Some(CHECKSUM),
            Self::Native => None,
        }
    }

    /// Whether `workload` has its output still to adopt (as
    /// [`crate::stamp::adopting`] decides for these outputs).
    fn adopting(self, workload: &Workload) -> bool {
        let Some(key) = self.adopted_key() else {
            return false;
        };
        // Reloader's state is on metadata only; an adopted output may be on either.
        let not_on_template =
            self == Self::ReloaderAnnotations || !workload.template_annotations().contains_key(key);
        not_on_template && !workload.annotations.contains_key(key)
    }
}

/// What each content looks like on the workload, from runs of the harness
/// with no race in them.
struct Reference {
    /// Per content: what adopting it writes on metadata.
    adopted: [Option<String>; 3],
    /// Per content: what it writes on the pod template when it rolls.
    rolled: [String; 3],
}

impl Reference {
    fn of(kind: Kind) -> Self {
        let adopted = std::array::from_fn(|i| {
            let key = kind.adopted_key()?;
            let mut h = Harness::new(kind.make());
            h.see();
            h.content(CONTENTS[i]);
            h.settle();
            assert_eq!(h.rollouts(), 0, "adopting {kind:?} rolls nothing");
            Some(h.metadata(key).expect("adopted").to_owned())
        });
        let rolled = std::array::from_fn(|i| {
            let mut h = Harness::new(kind.make());
            h.see();
            if kind.adopted_key().is_some() {
                h.content(CONTENTS[(i + 1) % 3]);
                h.settle();
            }
            h.content(CONTENTS[i]);
            h.settle();
            assert_eq!(h.rollouts(), 1, "{kind:?} rolls once");
            if let Some(key) = kind.adopted_key() {
                assert_eq!(
                    h.metadata(key),
                    adopted[i].as_deref(),
                    "a roll leaves on metadata what adoption would"
                );
            }
            h.template(kind.template_key())
                .expect("on the template")
                .to_owned()
        });
        Self { adopted, rolled }
    }

    fn adopted_content(&self, value: Option<&str>) -> Option<usize> {
        self.adopted.iter().position(|a| a.as_deref() == value)
    }

    fn rolled_content(&self, value: &str) -> Option<usize> {
        self.rolled.iter().position(|r| r == value)
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// A watch event of the workload as stored; with `watch_events`, the
    /// oldest event not delivered yet, else the workload as stored.
    See,
    /// With `watch_events`: the workload's controller updates its status (a
    /// new version, one more watch event).
    StatusUpdate,
    /// The sources' content becomes this one.
    Content(usize),
    /// Time passes (the core ticks at every wake-up).
    Advance(Duration),
    /// The oldest write in flight ends.
    Finish(WriteEnd),
    /// A new process; its predecessor's write in flight reached the server or not.
    Restart {
        in_flight_applied: bool,
    },
    Leader(bool),
}

fn op(watch_events: bool) -> impl Strategy<Value = Op> {
    let ms = Duration::from_millis;
    let delays = vec![
        ms(100),
        ms(1_000),
        ms(2_000),
        ms(4_900),
        ms(5_000),
        ms(5_100),
        ms(10_000),
        ms(29_000),
        ms(30_000),
        ms(31_000),
        ms(59_000),
        ms(60_000),
        ms(61_000),
        ms(120_000),
    ];
    prop_oneof![
        2 => Just(Op::See),
        3 => (0..CONTENTS.len()).prop_map(Op::Content),
        4 => prop::sample::select(delays).prop_map(Op::Advance),
        3 => Just(Op::Finish(WriteEnd::Applied)),
        1 => Just(Op::Finish(WriteEnd::Retry)),
        1 => Just(Op::Finish(WriteEnd::Failed)),
        1 => any::<bool>().prop_map(|in_flight_applied| Op::Restart { in_flight_applied }),
        1 => any::<bool>().prop_map(Op::Leader),
        if watch_events { 2 } else { 0 } => Just(Op::StatusUpdate),
    ]
}

/// What the sequence did, as the oracle needs it.
#[derive(Debug, Default)]
struct Model {
    /// The content of each version; the last is current.
    versions: Vec<usize>,
    /// The versions reported to a process, in order.
    observed: Vec<usize>,
    /// Per process: its baseline, when it first saw the workload still to adopt.
    baseline: BTreeMap<u32, usize>,
    /// Per process: the content last reported to it.
    last_report: BTreeMap<u32, usize>,
    /// Whether a process observed a change after its first sight.
    changed_after_sight: bool,
    /// Reports taken into account so far.
    reports_seen: usize,
}

impl Model {
    fn new() -> Self {
        Self {
            versions: vec![0],
            ..Self::default()
        }
    }

    fn latest(&self) -> usize {
        self.versions[self.versions.len() - 1]
    }

    fn change(&mut self, content: usize) {
        if content != self.latest() {
            self.versions.push(content);
        }
    }

    /// Takes in what the sources reported since last time. Called after each
    /// step: a process's first report follows its first sight at once, with
    /// no write applied in between.
    fn observe(&mut self, h: &Harness, kind: Kind) {
        let version = self.versions.len() - 1;
        for (epoch, content) in &h.reports[self.reports_seen..] {
            let content = CONTENTS.iter().position(|c| c == content).unwrap();
            assert_eq!(content, self.latest(), "the sources report what they hold");
            if self.observed.last() != Some(&version) {
                self.observed.push(version);
            }
            match self.last_report.insert(*epoch, content) {
                Some(before) => self.changed_after_sight |= before != content,
                None => {
                    if kind.adopting(&h.workload) {
                        self.baseline.insert(*epoch, content);
                    }
                }
            }
        }
        self.reports_seen = h.reports.len();
    }
}

fn run(
    kind: Kind,
    ops: &[Op],
    reference: &Reference,
    watch_events: bool,
) -> Result<(), TestCaseError> {
    let mut h = Harness::new(kind.make());
    h.hold_writes = true;
    // The sources hold A from the start; nothing tracks it yet.
    h.source = Some(CONTENTS[0].to_owned());
    let mut model = Model::new();
    for op in ops {
        match op {
            Op::See => {
                if !(watch_events && h.deliver()) {
                    h.see();
                }
            }
            Op::StatusUpdate => h.status_update(),
            Op::Content(content) => {
                model.change(*content);
                h.content(CONTENTS[*content]);
            }
            Op::Advance(by) => h.advance(*by),
            Op::Finish(end) => {
                h.finish(*end);
            }
            Op::Restart { in_flight_applied } => h.restart(*in_flight_applied),
            Op::Leader(leader) => h.lead(*leader),
        }
        model.observe(&h, kind);
    }

    // Quiescence: leading, writes in flight applied, a watch event (a write
    // refused for good waits for the next event), then every delay passed.
    h.hold_writes = false;
    if !h.leader {
        h.lead(true);
    }
    while h.finish(WriteEnd::Applied) {}
    while watch_events && h.deliver() {}
    h.see();
    model.observe(&h, kind);
    h.settle();
    prop_assert_eq!(h.core.writes_in_flight(), 0);

    let latest = model.latest();
    let template_key = kind.template_key();
    let template = h.template(template_key).map(str::to_owned);
    let original = kind
        .make()
        .template_annotations()
        .get(template_key)
        .cloned();

    // (a) The latest content is on the workload.
    match kind.adopted_key() {
        None => prop_assert_eq!(
            template.as_deref(),
            Some(reference.rolled[latest].as_str()),
            "(a) the pod template carries the latest content {}",
            CONTENTS[latest]
        ),
        Some(key) => {
            prop_assert_eq!(
                h.metadata(key),
                reference.adopted[latest].as_deref(),
                "(a) the metadata carries the latest content {}",
                CONTENTS[latest]
            );
            prop_assert!(
                template == original || template.as_deref() == Some(&reference.rolled[latest]),
                "(a) the pod template is untouched or carries the latest content {}: {:?}",
                CONTENTS[latest],
                template
            );
            for write in &h.writes {
                if !kind.adopting(&write.before) || kind.adopting(&write.after) {
                    continue;
                }
                let content =
                    reference.adopted_content(write.after.annotations.get(key).map(String::as_str));
                let baseline = model.baseline.get(&write.epoch).copied();
                prop_assert!(
                    baseline.is_some(),
                    "(a) process {} took over a workload it never saw still to adopt",
                    write.epoch
                );
                if write.rolls {
                    prop_assert_ne!(
                        content,
                        baseline,
                        "(a) process {} rolled its baseline instead of adopting it",
                        write.epoch
                    );
                } else {
                    prop_assert_eq!(
                        content,
                        baseline,
                        "(a) process {} adopted other content than it first saw",
                        write.epoch
                    );
                }
            }
        }
    }

    // (b) Without a change, an adopted workload's pod template is not written.
    if kind.adopted_key().is_some() && !model.changed_after_sight {
        prop_assert_eq!(
            h.rollouts(),
            0,
            "(b) no change after first sight, yet the pod template was written"
        );
    }

    // (c) The pod template never goes back to older content.
    let mut at = 0;
    for write in &h.writes {
        let before = write.before.template_annotations().get(template_key);
        let Some(after) = write.after.template_annotations().get(template_key) else {
            continue;
        };
        if before == Some(after) {
            continue;
        }
        let content = reference.rolled_content(after);
        prop_assert!(
            content.is_some(),
            "(c) unknown value on the pod template: {}",
            after
        );
        let found = model.observed[at..]
            .iter()
            .position(|v| Some(model.versions[*v]) == content);
        let Some(found) = found else {
            return Err(TestCaseError::fail(format!(
                "(c) {} written to the pod template after newer content (versions {:?}, observed {:?})",
                CONTENTS[content.unwrap_or(0)],
                model.versions,
                model.observed
            )));
        };
        at += found;
    }

    // (d) Stable: nothing more to write.
    let writes = h.writes.len();
    h.input(crate::engine::core::Input::Tick);
    h.see();
    h.settle();
    prop_assert_eq!(h.writes.len(), writes, "(d) written again after quiescence");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        // Failures are kept as deterministic tests, not regression files.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_core_converges_on_the_latest_content_without_spurious_rollouts(
        kind in prop::sample::select(Kind::ALL.to_vec()),
        ops in prop::collection::vec(op(false), 0..40),
    ) {
        let reference = Reference::of(kind);
        run(kind, &ops, &reference, false)?;
    }

    /// The same, with the watch delivering every version of the workload in
    /// order, late: a version from before a write may reach the core after
    /// the write's result (the driver handles finished writes first).
    #[test]
    fn the_same_holds_when_watch_events_arrive_after_the_write_results(
        kind in prop::sample::select(Kind::ALL.to_vec()),
        ops in prop::collection::vec(op(true), 0..40),
    ) {
        let reference = Reference::of(kind);
        run(kind, &ops, &reference, true)?;
    }
}
