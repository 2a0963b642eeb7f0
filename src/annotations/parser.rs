//! The plumbing every scheme shares: [`Parser`] carries the workload, the scheme,
//! the source catalog and what has been read so far; the per-scheme files add
//! their own `impl Parser` blocks.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;

use super::grammar::{excerpt, invalid_reference, parse_bool};
use super::stamps::Stamps;
use super::{AnnotationError, AnnotationScheme, Dependencies};
use crate::discovery::{Discovered, DiscoveredObject};
use crate::fingerprint::ObjectKind;
use crate::model::{Combine, Output, PodSpecRule, Reference, SourceCatalog, SourceName, Workload};
use crate::snapshot::TemplateSnapshot;

pub(super) struct Parser<'a> {
    pub(super) workload: &'a Workload,
    pub(super) scheme: &'a AnnotationScheme,
    pub(super) catalog: &'a SourceCatalog,
    pub(super) stamps: Stamps,
    pub(super) deps: Dependencies,
    /// `<prefix>/scheduling-gate`, when set and valid.
    pub(super) gate_choice: Option<bool>,
    /// Whether Wave manages the workload.
    pub(super) pusher_wave: bool,
    /// The snapshot annotations, decided on in `finish`.
    pub(super) snapshot: SnapshotAnnotations,
    /// The template's snapshot, when it names copies (design §5e): discovery
    /// counts each copy as the object it copies.
    pub(super) copies: Option<TemplateSnapshot>,
}

pub(super) type Annotations<'a> = BTreeMap<&'a str, &'a str>;

/// The snapshot annotations as read (`snapshot.rs`), before `finish` decides.
#[derive(Debug, Default)]
pub(super) struct SnapshotAnnotations {
    /// `<prefix>/snapshot`: its key and value, when set and valid.
    pub(super) asked: Option<(String, bool)>,
    /// `<prefix>/rollback-to`: its key and revision, when set and valid.
    pub(super) rollback_to: Option<(String, u32)>,
}

impl<'a> Parser<'a> {
    /// A parser with nothing read yet.
    pub(super) fn new(
        workload: &'a Workload,
        scheme: &'a AnnotationScheme,
        catalog: &'a SourceCatalog,
    ) -> Self {
        Self {
            workload,
            scheme,
            catalog,
            stamps: Stamps::default(),
            deps: Dependencies::default(),
            gate_choice: None,
            pusher_wave: false,
            snapshot: SnapshotAnnotations::default(),
            copies: workload
                .template_annotations()
                .contains_key(&scheme.snapshots())
                .then(|| {
                    TemplateSnapshot::read(&workload.id, &workload.template, &scheme.snapshots())
                }),
        }
    }

    pub(super) fn finish(mut self) -> Dependencies {
        self.deps.stamps = std::mem::take(&mut self.stamps).build(&mut self.deps.errors);
        self.drop_unconfigured();
        self.scheduling_gates();
        self.snapshot_choice();
        if self.workload.id.kind.adopts_first_stamp() {
            // A CronJob runs, a Job is recreated, when its template changes: the
            // first stamp is adopted into metadata, never written there.
            for spec in &mut self.deps.stamps {
                if let Output::PodTemplateAnnotation(key) = &spec.output {
                    spec.output = Output::Adopted(key.clone());
                }
            }
        }
        // Last: adoption changes outputs, and with them their order.
        self.deps.stamps.sort_by(|a, b| a.output.cmp(&b.output));
        self.deps
    }

    /// References of sources that are not configured (ConfigMaps or Secrets
    /// turned off, `[sources.configmap]`) track nothing: discovery and the
    /// other tools' schemes found them, and they roll nothing. A single-value
    /// output left without its input goes; a hash keeps its spec (and with no
    /// input left, is not written: `stamp::desired`). An annotation naming such a
    /// source was reported already.
    fn drop_unconfigured(&mut self) {
        let catalog = self.catalog;
        let configured = |reference: &Reference| catalog.scope(&reference.source).is_some();
        for spec in &mut self.deps.stamps {
            spec.inputs
                .retain(|input| configured(&input.tracked.reference));
            spec.origins.retain(|(reference, _)| configured(reference));
        }
        self.deps
            .stamps
            .retain(|spec| !(spec.inputs.is_empty() && spec.combine == Combine::Single));
    }

    pub(super) fn report(&mut self, result: Result<(), AnnotationError>) {
        if let Err(error) = result {
            self.deps.errors.push(error);
        }
    }

    /// `value` as a reference of `source`, by that source's own check (the
    /// catalog's; a source that is not configured was reported already). The
    /// source's message is the reason, cut to its start like any value.
    pub(super) fn check_reference(
        &self,
        key: &str,
        source: &SourceName,
        value: &str,
    ) -> Result<(), AnnotationError> {
        match self.catalog.check(source, value) {
            Some(Err(reason)) => Err(invalid_reference(key, value, excerpt(&reason))),
            Some(Ok(())) | None => Ok(()),
        }
    }

    pub(super) fn namespace(&self) -> &str {
        &self.workload.id.namespace
    }

    /// What `rules` find in the pod template, each snapshot copy counted as
    /// the object it copies.
    pub(super) fn discover(&self, rules: fn(&PodSpec) -> Vec<Discovered>) -> Vec<Discovered> {
        let found = self
            .workload
            .template
            .spec
            .as_ref()
            .map(rules)
            .unwrap_or_default();
        match &self.copies {
            Some(copies) => copies.map_back(found),
            None => found,
        }
    }

    /// The objects a source's pod-spec rule finds in the pod template.
    pub(super) fn discover_by_rule(&self, rule: &PodSpecRule) -> Vec<DiscoveredObject> {
        let spec = self.workload.template.spec.as_ref();
        spec.map(|spec| crate::discovery::by_rule(spec, rule))
            .unwrap_or_default()
    }

    pub(super) fn object(
        &self,
        kind: ObjectKind,
        namespace: Option<&str>,
        name: &str,
    ) -> Reference {
        let namespace = namespace.unwrap_or(self.namespace());
        Reference::object(kind.source(), namespace, name)
    }

    /// Reads a yes/no annotation; invalid values are reported and count as no.
    pub(super) fn flag(&mut self, annotations: &Annotations<'_>, key: &str) -> bool {
        let Some(value) = annotations.get(key) else {
            return false;
        };
        match parse_bool(key, value) {
            Ok(on) => on,
            Err(error) => {
                self.deps.errors.push(error);
                false
            }
        }
    }
}
