//! Holds: the pod scheduling gate and Wave's `scheduling-disabled`, each released
//! once every required input of every stamp exists.

use std::collections::BTreeSet;

use super::AnnotationError;
use super::parser::Parser;
use crate::model::{
    Combine, Input, Output, RELOADER_PAUSED_AT, StampSpec, Tracked, WAVE_SCHEDULING_DISABLED,
};

impl Parser<'_> {
    /// Adds the release specs: the scheduling gate (opted in, or a Wave workload
    /// not opted out) and Wave's `scheduling-disabled` on a migrated workload,
    /// each released once every required input of every stamp exists.
    pub(super) fn scheduling_gates(&mut self) {
        let required = self.required_inputs();
        let mut holds = Vec::new();
        if self.wants_gate(!required.is_empty()) {
            let gate = Output::SchedulingGate(self.scheme.awaiting_config_gate());
            holds.push(release(gate, &required));
        }
        if self
            .workload
            .annotations
            .contains_key(WAVE_SCHEDULING_DISABLED)
        {
            holds.push(release(Output::WaveSchedulingDisabled, &required));
        }
        if self.reloader_left_paused() {
            // Waits for no config: only for the workload's debounce, which
            // Reloader's pause-period sets (design §4).
            holds.push(release(Output::ReloaderPause, &BTreeSet::new()));
        }
        self.deps.stamps.extend(holds);
    }

    /// Whether Reloader paused this Deployment (its `paused-at` is there; only
    /// Reloader writes it, and only with `spec.paused: true`, which the write
    /// checks on the object as read).
    fn reloader_left_paused(&self) -> bool {
        self.workload.id.kind == crate::model::WorkloadKind::deployment()
            && self.workload.annotations.contains_key(RELOADER_PAUSED_AT)
    }

    /// Every input of every stamp that is not optional.
    fn required_inputs(&self) -> BTreeSet<Tracked> {
        self.deps
            .stamps
            .iter()
            .flat_map(|spec| &spec.inputs)
            .filter(|input| !input.optional)
            .map(|input| input.tracked.clone())
            .collect()
    }

    /// Whether the workload gets the scheduling gate; an explicit opt-in that
    /// cannot be honoured is reported.
    fn wants_gate(&mut self, anything_required: bool) -> bool {
        // Nothing required, nothing to wait for: no gate. A Job's pod template is
        // immutable, so a gate could never be lifted from it.
        let mutable_template = !self.workload.id.kind.has_immutable_template();
        let wanted = self.gate_choice.unwrap_or(self.pusher_wave);
        if wanted && self.workload.ordered_pods {
            // kube's StatefulSet controller waits for a Pending pod-0 forever
            // (kubernetes#67250), so lifting the gate would not start it.
            if self.gate_choice == Some(true) {
                self.deps.errors.push(AnnotationError::Unsupported {
                    key: self.scheme.scheduling_gate(),
                    value: "true".to_owned(),
                    instead: "a StatefulSet with podManagementPolicy OrderedReady is not gated: \
                              its controller would wait for a held pod-0 forever; its pods start \
                              once the config exists",
                });
            }
            return false;
        }
        wanted && anything_required && mutable_template
    }
}

/// A spec that releases `output` once every `required` input exists.
fn release(output: Output, required: &BTreeSet<Tracked>) -> StampSpec {
    StampSpec {
        output,
        combine: Combine::Release,
        inputs: required
            .iter()
            .map(|tracked| Input {
                tracked: tracked.clone(),
                optional: false,
            })
            .collect(),
        origins: Vec::new(),
    }
}
