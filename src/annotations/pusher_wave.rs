//! Wave (design §4): `wave.pusher.com/update-on-config-change` plus
//! `extra-configmaps` / `extra-secrets`, hashed into `wave.pusher.com/config-hash`.

use super::grammar::{invalid_item, parse_namespaced_name, split_list};
use super::parser::{Annotations, Parser};
use super::stamps::Contribution;
use crate::discovery;
use crate::fingerprint::{Algorithm, ObjectKind};
use crate::model::{Combine, Origin, Output, Reference, Tracked};

/// Wave: `"true"` makes the workload Wave-managed.
pub const WAVE_UPDATE_ON_CONFIG_CHANGE: &str = "wave.pusher.com/update-on-config-change";
/// Wave: comma list of extra ConfigMaps (`name` or `namespace/name`).
pub const WAVE_EXTRA_CONFIGMAPS: &str = "wave.pusher.com/extra-configmaps";
/// Wave: comma list of extra Secrets (`name` or `namespace/name`).
pub const WAVE_EXTRA_SECRETS: &str = "wave.pusher.com/extra-secrets";
/// Wave: the pod-template annotation nudge writes in Wave's format.
pub const WAVE_CONFIG_HASH: &str = "wave.pusher.com/config-hash";

impl Parser<'_> {
    pub(super) fn pusher_wave(&mut self, annotations: &Annotations<'_>) {
        if !self.flag(annotations, WAVE_UPDATE_ON_CONFIG_CHANGE) {
            return;
        }
        self.pusher_wave = true;
        let output = Output::PodTemplateAnnotation(WAVE_CONFIG_HASH.to_owned());
        self.stamps
            .declare(&output, Combine::Wave, WAVE_UPDATE_ON_CONFIG_CHANGE);
        for found in self.discover(discovery::wave) {
            let reference = self
                .object(found.kind, None, &found.name)
                .with_keys(found.keys);
            self.stamps.add(wave_input(
                &output,
                WAVE_UPDATE_ON_CONFIG_CHANGE,
                reference,
                found.optional,
                found.origins.into_iter().map(Origin::Discovered).collect(),
            ));
        }
        let extras = [
            (WAVE_EXTRA_CONFIGMAPS, ObjectKind::ConfigMap),
            (WAVE_EXTRA_SECRETS, ObjectKind::Secret),
        ];
        for (key, kind) in extras {
            let Some(value) = annotations.get(key) else {
                continue;
            };
            for item in split_list(value) {
                match parse_namespaced_name(item) {
                    Ok((namespace, name)) => {
                        let reference = self.object(kind, namespace, name);
                        let origins = vec![Origin::Annotation(key.to_owned())];
                        self.stamps
                            .add(wave_input(&output, key, reference, false, origins));
                    }
                    Err(reason) => self.deps.errors.push(invalid_item(key, item, reason)),
                }
            }
        }
    }
}

fn wave_input(
    output: &Output,
    key: &str,
    reference: Reference,
    optional: bool,
    origins: Vec<Origin>,
) -> Contribution {
    Contribution {
        output: output.clone(),
        combine: Combine::Wave,
        annotation: key.to_owned(),
        tracked: Tracked::new(reference, Algorithm::Wave),
        optional,
        origins,
    }
}
