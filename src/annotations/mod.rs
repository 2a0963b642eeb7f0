//! Every annotation scheme nudge understands, parsed into typed [`StampSpec`]s.
//!
//! - **Native** (design §2, prefix `nudge.dev`, configurable): `auto`, explicit
//!   `<source>-<slot>: <reference>`, `exclude`, `debounce`, `min-interval`, and
//!   the delivery settings `mode`, `approve`, `window`, `wave` (design §5d),
//!   and the snapshot settings `snapshot`, `rollback-to` (design §5e).
//! - **Wave** (design §4): `wave.pusher.com/update-on-config-change` plus
//!   `extra-configmaps` / `extra-secrets`.
//! - **k8s-consul-mutator**: `k8s-consul-mutator.io/key-<name>`, opt-out `skip`.
//! - **Reloader**: `reloader.stakater.com/auto`, `{configmap,secret,secretproviderclass}.reloader.stakater.com/{auto,reload}`.
//!
//! Annotations are read from the workload's own metadata and from its pod template;
//! the workload's metadata wins when both carry the same key. Every annotation is
//! parsed on its own: an invalid one becomes an [`AnnotationError`] and never stops
//! its valid siblings.
//!
//! The names nudge writes (`<prefix>/checksum-<slot>`, `<prefix>/config-hash`,
//! `<prefix>/last-updated`, `wave.pusher.com/config-hash`,
//! `k8s-consul-mutator.io/checksum-<name>` and `…/last-updated`) are reserved: they
//! never parse as references and never produce errors, so nudge can re-read a
//! workload it stamped. Under the native prefix every other unknown name is an
//! error; under the other tools' prefixes unknown names are left alone (they may
//! belong to features nudge does not emulate).
//!
//! `<prefix>/ignore` belongs on ConfigMaps and Secrets (see [`is_ignored`]); on a
//! workload it means nothing and is skipped silently.
//!
//! Choices worth knowing:
//! - One [`StampSpec`] per output. Inputs of the combined hashes are merged per
//!   object (keys union, optional only if every occurrence is), so Reloader's
//!   fallback and `<prefix>/auto` share one `<prefix>/config-hash`.
//! - `<prefix>/auto: "true"` and Wave's `update-on-config-change: "true"` always
//!   yield their spec, even with no inputs; an output with no inputs is not
//!   written (`stamp::desired`), and one already there is left as it is.
//! - References of a source that is not configured (ConfigMaps or Secrets
//!   turned off) are dropped from every spec: they track nothing.
//! - `<prefix>/exclude` narrows `<prefix>/auto` only, not Reloader's `auto`.
//! - Yes/no annotations of every scheme accept exactly `"true"` and `"false"`;
//!   anything else is reported and counts as `"false"`.
//! - Wave's extras are merged with discovered objects per (namespace, name).
//! - Two references that would write one output (same slot, or two Reloader
//!   objects with one env var name, or a native and a k8s-consul-mutator checksum
//!   under one key when the native prefix is `k8s-consul-mutator.io`) are reported
//!   on every annotation involved and none of them is used.
//!
//! Layout: `scheme` spells the native names, `error` holds [`AnnotationError`],
//! `parser` is the plumbing every scheme shares, one file per scheme (`native`,
//! `pusher_wave`, `mutator`, `reloader`) reads that scheme's annotations, `scheduling_gates` adds the
//! release specs, `stamps` merges contributions into one spec per output,
//! `grammar` checks values, and `go_regex` reads Reloader's `reload` list
//! entries as the Go regular expressions Reloader takes them for.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::model::{Reference, SourceCatalog, StampSpec, Tracked, Workload};

mod delivery;
mod error;
mod go_regex;
mod grammar;
mod mutator;
mod native;
mod parser;
mod pusher_wave;
mod reloader;
mod scheduling_gates;
mod scheme;
mod snapshot;
mod stamps;

pub use delivery::{Approval, Delivery, MAX_WAVE, Mode, WindowChoice};
pub use error::AnnotationError;
pub use grammar::check_object_name;
pub use mutator::{MUTATOR_LAST_UPDATED, MUTATOR_PREFIX, MUTATOR_SKIP, mutator_checksum};
pub use pusher_wave::{
    WAVE_CONFIG_HASH, WAVE_EXTRA_CONFIGMAPS, WAVE_EXTRA_SECRETS, WAVE_UPDATE_ON_CONFIG_CHANGE,
};
pub use reloader::{
    RELOADER_AUTO, RELOADER_CONFIGMAP_AUTO, RELOADER_CONFIGMAP_RELOAD, RELOADER_CONFIGMAPS_EXCLUDE,
    RELOADER_IGNORE, RELOADER_LAST_RELOADED_FROM, RELOADER_MATCH, RELOADER_PAUSE_PERIOD,
    RELOADER_ROLLOUT_STRATEGY, RELOADER_SEARCH, RELOADER_SECRET_AUTO, RELOADER_SECRET_RELOAD,
    RELOADER_SECRETS_EXCLUDE, RELOADER_SPC_AUTO, RELOADER_SPC_EXCLUDE, RELOADER_SPC_RELOAD,
};
pub use scheme::{AnnotationScheme, DEFAULT_PREFIX, MAX_SLOT_LEN, is_ignored};
pub use snapshot::SnapshotChoice;

use parser::Parser;

/// Everything a workload's annotations ask for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dependencies {
    /// One spec per output, sorted by output.
    pub stamps: Vec<StampSpec>,
    /// Every invalid annotation, each naming its key.
    pub errors: Vec<AnnotationError>,
    /// `<prefix>/debounce`, when set and valid.
    pub debounce: Option<Duration>,
    /// `<prefix>/min-interval`, when set and valid.
    pub min_interval: Option<Duration>,
    /// The ceiling of the debounce window, when the workload sets one (Reloader's
    /// `pause-period`).
    pub max_delay: Option<Duration>,
    /// `<prefix>/progress-deadline`, when set and valid.
    pub progress_deadline: Option<Duration>,
    /// Objects `<prefix>/exclude` drops from `auto` discovery (whole-object
    /// references in the workload's namespace).
    pub excluded: BTreeSet<Reference>,
    /// When rolling stamps may be written (design §5d).
    pub delivery: Delivery,
    /// Whether the workload takes snapshots, and the revision it is held at
    /// (design §5e).
    pub snapshot: SnapshotChoice,
}

impl Dependencies {
    /// Every tracked input of every stamp.
    pub fn tracked(&self) -> impl Iterator<Item = &Tracked> {
        self.stamps
            .iter()
            .flat_map(|s| s.inputs.iter().map(|i| &i.tracked))
    }
}

/// Parses every annotation scheme on `workload` into stamp specs.
pub fn dependencies(
    workload: &Workload,
    scheme: &AnnotationScheme,
    catalog: &SourceCatalog,
) -> Dependencies {
    let annotations = merged_annotations(workload);
    let mut parser = Parser::new(workload, scheme, catalog);
    parser.native(&annotations);
    parser.pusher_wave(&annotations);
    parser.mutator(&annotations);
    parser.reloader(&annotations);
    parser.finish()
}

/// The annotation by which `workload` opts out of a scheme, as `key: "value"`
/// for people: `<prefix>/auto: "false"`, Reloader's `auto: "false"` (any of its
/// three), Wave's `update-on-config-change: "false"`, or k8s-consul-mutator's
/// `skip` (any value). For `nudge explain`, when nothing manages the workload.
pub fn opted_out_by(workload: &Workload, scheme: &AnnotationScheme) -> Option<String> {
    let annotations = merged_annotations(workload);
    let native_auto = scheme.key(scheme::AUTO);
    let off = [
        native_auto.as_str(),
        RELOADER_AUTO,
        RELOADER_CONFIGMAP_AUTO,
        RELOADER_SECRET_AUTO,
        WAVE_UPDATE_ON_CONFIG_CHANGE,
    ];
    let said_false = off.into_iter().find(|key| {
        annotations
            .get(key)
            .is_some_and(|v| v.eq_ignore_ascii_case("false"))
    });
    let key = said_false.or_else(|| {
        annotations
            .contains_key(MUTATOR_SKIP)
            .then_some(MUTATOR_SKIP)
    })?;
    Some(format!(
        "{key}: {:?}",
        annotations.get(key).copied().unwrap_or_default()
    ))
}

/// Pod-template annotations overlaid with the workload's own (which win).
fn merged_annotations(workload: &Workload) -> BTreeMap<&str, &str> {
    let template = workload.template_annotations().iter();
    template
        .chain(&workload.annotations)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[cfg(test)]
mod tests;
