//! The native scheme (design §2, prefix `nudge.dev`, configurable): `auto`,
//! explicit `<source>-<slot>: <reference>`, `exclude`, `debounce`,
//! `min-interval`, `run-on-change` and `scheduling-gate`; the delivery
//! annotations (`mode`, `approve`, `window`, `wave`) are read in `delivery`,
//! the snapshot ones (`snapshot`, `rollback-to`) in `snapshot`.

use super::AnnotationError;
use super::grammar::{
    check_name_len, check_object_name, excerpt, invalid_item, invalid_reference, parse_bool,
    parse_duration, parse_exclude_item, split_list,
};
use super::parser::Annotations;
use super::parser::Parser;
use super::scheme::{APPROVE, MODE, ROLLBACK_TO, SNAPSHOT, SNAPSHOTS, WAVE, WINDOW};
use super::scheme::{
    AUTO, CHECKSUM_PREFIX, CONFIG_HASH, DEBOUNCE, EXCLUDE, HISTORY, IGNORE, LAST_UPDATED,
    MAX_SLOT_LEN, MIN_INTERVAL, PROGRESS_DEADLINE, RELOADER_STATE, ROLLOUT, RUN_ON_CHANGE,
    SCHEDULING_GATE,
};
use super::stamps::Contribution;
use crate::discovery;
use crate::fingerprint::Algorithm;
use crate::model::{
    Combine, Origin, Output, PodSpecRule, Reference, Scope, Slot, SourceName, Tracked,
};

impl Parser<'_> {
    pub(super) fn native(&mut self, annotations: &Annotations<'_>) {
        let prefix = format!("{}/", self.scheme.prefix);
        let mut auto_key = None;
        for (&key, &value) in annotations {
            let Some(name) = key.strip_prefix(&prefix) else {
                continue;
            };
            let result = self.native_entry(key, name, value);
            if matches!(result, Ok(Some(true))) {
                auto_key = Some(key);
            }
            self.report(result.map(drop));
        }
        if let Some(key) = auto_key {
            self.auto(key);
        }
    }

    /// Parses one `<prefix>/<name>` annotation; `Ok(Some(on))` for `auto`.
    fn native_entry(
        &mut self,
        key: &str,
        name: &str,
        value: &str,
    ) -> Result<Option<bool>, AnnotationError> {
        check_name_len(key, name)?;
        match name {
            AUTO => return parse_bool(key, value).map(Some),
            EXCLUDE => self.exclude(key, value),
            DEBOUNCE => self.deps.debounce = Some(parse_duration(key, value)?),
            MIN_INTERVAL => self.deps.min_interval = Some(parse_duration(key, value)?),
            PROGRESS_DEADLINE => {
                self.deps.progress_deadline = Some(parse_duration(key, value)?);
            }
            // Read by the CronJob target; checked here so a typo is reported.
            RUN_ON_CHANGE => {
                parse_bool(key, value)?;
            }
            SCHEDULING_GATE => self.gate_choice = Some(parse_bool(key, value)?),
            MODE | APPROVE | WINDOW | WAVE => self.delivery(key, name, value),
            SNAPSHOT | ROLLBACK_TO => self.snapshot_annotation(key, name, value)?,
            // Written by nudge.
            IGNORE | CONFIG_HASH | LAST_UPDATED | RELOADER_STATE | ROLLOUT | HISTORY
            | SNAPSHOTS => {}
            _ if name.starts_with(CHECKSUM_PREFIX) => {}
            _ => self.explicit(key, name, value)?,
        }
        Ok(None)
    }

    /// `<prefix>/<source>-<slot>: <reference>`.
    fn explicit(&mut self, key: &str, name: &str, value: &str) -> Result<(), AnnotationError> {
        let Some((source, slot)) = name.split_once('-') else {
            return Err(AnnotationError::UnknownAnnotation {
                key: key.to_owned(),
            });
        };
        let (source, scope) = self.configured(key, source)?;
        let slot = Slot::new(slot, MAX_SLOT_LEN).map_err(|error| AnnotationError::InvalidSlot {
            key: key.to_owned(),
            error,
        })?;
        // A namespaced reference is an object name (what the scope means); beyond
        // that, the reference is whatever its source accepts.
        if scope == Scope::Namespaced {
            check_object_name(value).map_err(|reason| invalid_reference(key, value, reason))?;
        }
        self.check_reference(key, &source, value)?;
        let has_rule = self.catalog.rules().any(|(name, _)| *name == source);
        let reference = match scope {
            Scope::Namespaced => Reference::object(source, self.namespace(), value),
            Scope::External => Reference::key(source, value),
        };
        // A source with a pod-spec rule reports what the pods mount: its first
        // value is what they already run with, adopted (see `auto_by_rules`).
        let key_name = self.scheme.checksum(&slot);
        let output = if has_rule {
            Output::Adopted(key_name)
        } else {
            Output::PodTemplateAnnotation(key_name)
        };
        self.stamps.add(Contribution {
            output,
            combine: Combine::Single,
            annotation: key.to_owned(),
            tracked: Tracked::new(reference, Algorithm::Native),
            optional: false,
            origins: vec![Origin::Annotation(key.to_owned())],
        });
        Ok(())
    }

    /// The configured source called `source`, and its scope.
    fn configured(&self, key: &str, source: &str) -> Result<(SourceName, Scope), AnnotationError> {
        SourceName::new(source)
            .ok()
            .and_then(|name| self.catalog.scope(&name).map(|scope| (name, scope)))
            .ok_or_else(|| AnnotationError::UnknownSource {
                key: key.to_owned(),
                source_name: excerpt(source),
            })
    }

    /// `<prefix>/exclude: configmap/x,secret/y`.
    fn exclude(&mut self, key: &str, value: &str) {
        for item in split_list(value) {
            match parse_exclude_item(item) {
                Ok((kind, name)) => {
                    let reference = self.object(kind, None, name);
                    self.deps.excluded.insert(reference);
                }
                Err(reason) => self.deps.errors.push(invalid_item(key, item, reason)),
            }
        }
    }

    /// `<prefix>/auto: "true"`: every discovered object not excluded.
    fn auto(&mut self, key: &str) {
        let output = Output::PodTemplateAnnotation(self.scheme.config_hash());
        self.stamps.declare(&output, Combine::NativeHash, key);
        for found in self.discover(discovery::native) {
            let whole = self.object(found.kind, None, &found.name);
            if self.deps.excluded.contains(&whole) {
                continue;
            }
            self.stamps.add(Contribution {
                output: output.clone(),
                combine: Combine::NativeHash,
                annotation: key.to_owned(),
                tracked: Tracked::new(whole.with_keys(found.keys), Algorithm::Native),
                optional: found.optional,
                origins: found.origins.into_iter().map(Origin::Discovered).collect(),
            });
        }
        self.auto_by_rules(key);
    }

    /// The objects of every source with a pod-spec rule (design §5b), one
    /// output per source, `<prefix>/checksum-<source>`: adopted at first
    /// sight, since what such a source reports first (what a pod mounted) is
    /// the config the pods already run with; written on the template, which
    /// rolls the pods, when it changes.
    fn auto_by_rules(&mut self, key: &str) {
        let rules: Vec<(SourceName, PodSpecRule)> = self
            .catalog
            .rules()
            .map(|(source, rule)| (source.clone(), rule.clone()))
            .collect();
        for (source, rule) in rules {
            let found = self.discover_by_rule(&rule);
            if found.is_empty() {
                continue;
            }
            let slot = match Slot::new(source.as_str(), MAX_SLOT_LEN) {
                Ok(slot) => slot,
                Err(error) => {
                    let key = key.to_owned();
                    self.deps
                        .errors
                        .push(AnnotationError::InvalidSlot { key, error });
                    continue;
                }
            };
            let output = Output::Adopted(self.scheme.checksum(&slot));
            for object in found {
                if let Err(reason) = check_object_name(&object.name) {
                    let error = invalid_reference(key, &object.name, reason);
                    self.deps.errors.push(error);
                    continue;
                }
                let reference = Reference::object(source.clone(), self.namespace(), &object.name);
                self.stamps.add(Contribution {
                    output: output.clone(),
                    combine: Combine::NativeHash,
                    annotation: key.to_owned(),
                    tracked: Tracked::new(reference, Algorithm::Native),
                    optional: false,
                    origins: object.origins.into_iter().map(Origin::Discovered).collect(),
                });
            }
        }
    }
}
