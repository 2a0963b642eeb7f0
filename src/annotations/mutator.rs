//! k8s-consul-mutator: `k8s-consul-mutator.io/key-<name>: <consul key>`, opt-out
//! `k8s-consul-mutator.io/skip`; written as `k8s-consul-mutator.io/checksum-<name>`.

use super::AnnotationError;
use super::grammar::check_name_len;
use super::parser::{Annotations, Parser};
use super::scheme::{CHECKSUM_PREFIX, MAX_SLOT_LEN};
pub use super::scheme::{MUTATOR_LAST_UPDATED, MUTATOR_PREFIX};
use super::stamps::Contribution;
use crate::fingerprint::Algorithm;
use crate::model::{Combine, Origin, Output, Reference, Slot, SourceName, Tracked};

/// k8s-consul-mutator: present (any value) opts the workload out.
pub const MUTATOR_SKIP: &str = "k8s-consul-mutator.io/skip";
const MUTATOR_KEY_PREFIX: &str = "key-";

/// `k8s-consul-mutator.io/checksum-<name>`, written for `k8s-consul-mutator.io/key-<name>`.
pub fn mutator_checksum(name: &Slot) -> String {
    format!("{MUTATOR_PREFIX}{CHECKSUM_PREFIX}{name}")
}

impl Parser<'_> {
    pub(super) fn mutator(&mut self, annotations: &Annotations<'_>) {
        if annotations.contains_key(MUTATOR_SKIP) {
            return;
        }
        for (&key, &value) in annotations {
            let Some(name) = key.strip_prefix(MUTATOR_PREFIX) else {
                continue;
            };
            if let Some(slot) = name.strip_prefix(MUTATOR_KEY_PREFIX) {
                let result = self.mutator_key(key, name, slot, value);
                self.report(result);
            }
        }
    }

    /// `k8s-consul-mutator.io/key-<slot>: <consul key>`.
    fn mutator_key(
        &mut self,
        key: &str,
        name: &str,
        slot: &str,
        value: &str,
    ) -> Result<(), AnnotationError> {
        check_name_len(key, name)?;
        let slot = Slot::new(slot, MAX_SLOT_LEN).map_err(|error| AnnotationError::InvalidSlot {
            key: key.to_owned(),
            error,
        })?;
        let consul = SourceName::consul();
        if self.catalog.scope(&consul).is_none() {
            return Err(AnnotationError::UnknownSource {
                key: key.to_owned(),
                source_name: consul.to_string(),
            });
        }
        self.check_reference(key, &consul, value)?;
        self.stamps.add(Contribution {
            output: Output::PodTemplateAndWorkloadAnnotation(mutator_checksum(&slot)),
            combine: Combine::Single,
            annotation: key.to_owned(),
            tracked: Tracked::new(Reference::key(consul, value), Algorithm::Md5),
            optional: false,
            origins: vec![Origin::Annotation(key.to_owned())],
        });
        Ok(())
    }
}
