//! Reloader: `reloader.stakater.com/auto`, `{configmap,secret}.reloader.stakater.com/{auto,reload}`,
//! `search` / `match`, the exclude lists, `pause-period` and `rollout-strategy`;
//! each tracked object lands on Reloader's env var, its annotations-strategy
//! state, or nudge's `config-hash` (on an Argo Rollout under the `restart`
//! strategy: on metadata, restarting the pods through `spec.restartAt`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Container;
use regex::Regex;

use super::AnnotationError;
use super::go_regex;
use super::grammar::{check_object_name, excerpt, invalid_item, parse_go_duration, split_list};
use super::parser::{Annotations, Parser};
use super::stamps::Contribution;
use crate::discovery;
use crate::fingerprint::{self, Algorithm, ObjectKind};
use crate::model::{
    Combine, Gate, Origin, Output, PodSpecRule, Reference, SourceName, Tracked, Workload,
    WorkloadKind,
};

/// Reloader: `"true"` tracks every ConfigMap and Secret the pod template uses.
pub const RELOADER_AUTO: &str = "reloader.stakater.com/auto";
/// Reloader: `"true"` tracks every ConfigMap the pod template uses.
pub const RELOADER_CONFIGMAP_AUTO: &str = "configmap.reloader.stakater.com/auto";
/// Reloader: `"true"` tracks every Secret the pod template uses.
pub const RELOADER_SECRET_AUTO: &str = "secret.reloader.stakater.com/auto";
/// Reloader: comma list of ConfigMap names to track.
pub const RELOADER_CONFIGMAP_RELOAD: &str = "configmap.reloader.stakater.com/reload";
/// Reloader: comma list of Secret names to track.
pub const RELOADER_SECRET_RELOAD: &str = "secret.reloader.stakater.com/reload";
/// Reloader 2: `"true"` tracks every SecretProviderClass the pod template's
/// `csi` volumes mount (needs the Secrets Store CSI preset).
pub const RELOADER_SPC_AUTO: &str = "secretproviderclass.reloader.stakater.com/auto";
/// Reloader 2: comma list of SecretProviderClass names to track.
pub const RELOADER_SPC_RELOAD: &str = "secretproviderclass.reloader.stakater.com/reload";
/// Reloader 2: on the workload's own metadata, SecretProviderClasses never to
/// reload for.
pub const RELOADER_SPC_EXCLUDE: &str = "secretproviderclasses.exclude.reloader.stakater.com/reload";
/// Reloader: `"true"` on a ConfigMap or Secret makes its changes stamp nothing.
pub const RELOADER_IGNORE: &str = "reloader.stakater.com/ignore";
/// Reloader: on the workload, `"true"` tracks only referenced objects that carry
/// [`RELOADER_MATCH`].
pub const RELOADER_SEARCH: &str = "reloader.stakater.com/search";
/// Reloader: on a ConfigMap or Secret, `"true"` lets `search` workloads follow it.
pub const RELOADER_MATCH: &str = "reloader.stakater.com/match";
/// Reloader: on the workload's own metadata, ConfigMaps never to reload for.
pub const RELOADER_CONFIGMAPS_EXCLUDE: &str = "configmaps.exclude.reloader.stakater.com/reload";
/// Reloader: on the workload's own metadata, Secrets never to reload for.
pub const RELOADER_SECRETS_EXCLUDE: &str = "secrets.exclude.reloader.stakater.com/reload";
/// Reloader: a Go duration; Reloader pauses the Deployment that long after a
/// change. nudge waits that long (debounce and ceiling) and rolls once.
pub const RELOADER_PAUSE_PERIOD: &str = "deployment.reloader.stakater.com/pause-period";
/// Reloader: on an Argo Rollout's own metadata, `restart` restarts its pods by
/// setting `spec.restartAt` instead of changing its pod template.
pub const RELOADER_ROLLOUT_STRATEGY: &str = "reloader.stakater.com/rollout-strategy";
/// Reloader's annotations strategy: the pod-template annotation it writes.
pub const RELOADER_LAST_RELOADED_FROM: &str = "reloader.stakater.com/last-reloaded-from";

/// One entry of a Reloader `reload` list, read as Reloader reads it: Go's
/// `regexp.Compile("^" + entry + "$")` matched against object names. An entry
/// Go cannot compile matches only the name it spells (Reloader 2's fallback;
/// Reloader 1 skips it, which matches the same objects since no object name can
/// hold what makes a pattern invalid).
struct ReloadEntry<'e> {
    text: &'e str,
    matcher: EntryMatcher,
    /// Why Go refuses the entry, reported as an invalid list item.
    error: Option<&'static str>,
}

enum EntryMatcher {
    /// Lower-case letters, digits and `-` only: the pattern is the name itself.
    Literal,
    Pattern(Regex),
}

impl<'e> ReloadEntry<'e> {
    fn new(text: &'e str) -> Self {
        let literal = text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if literal {
            return Self {
                text,
                matcher: EntryMatcher::Literal,
                error: None,
            };
        }
        match go_regex::compile(&format!("^{text}$")) {
            Ok(regex) => Self {
                text,
                matcher: EntryMatcher::Pattern(regex),
                error: None,
            },
            Err(error) => Self {
                text,
                matcher: EntryMatcher::Literal,
                error: Some(error.reloader_reason()),
            },
        }
    }

    fn matches(&self, name: &str) -> bool {
        match &self.matcher {
            EntryMatcher::Literal => self.text == name,
            EntryMatcher::Pattern(regex) => regex.is_match(name),
        }
    }
}

/// How Reloader makes a workload's pods pick up a change
/// (`reloader.stakater.com/rollout-strategy`, read as Reloader's
/// `ToArgoRolloutStrategy` reads it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RolloutStrategy {
    /// Through the pod template (the default).
    Rollout,
    /// An Argo Rollout's `spec.restartAt`: no pod-template change.
    Restart,
}

/// Whether `kind` restarts its pods by `spec.restartAt` (Argo Rollouts), the
/// only kind Reloader's `restart` strategy applies to.
fn restarts_at(kind: &WorkloadKind) -> bool {
    kind.group() == "argoproj.io" && kind.as_str() == "Rollout"
}

/// What a Reloader annotation selects: a ConfigMap or Secret, or a
/// SecretProviderClass (Reloader 2), whose mounts the source named here
/// follows (the Secrets Store CSI preset).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum ReloaderKind {
    Object(ObjectKind),
    SecretProviderClass(SourceName),
}

/// The pod-spec rule of the Secrets Store CSI preset, which Reloader 2's
/// `secretproviderclass` annotations need.
fn csi_rule() -> PodSpecRule {
    PodSpecRule::csi_volume("secrets-store.csi.k8s.io", "secretProviderClass")
}

/// One object Reloader annotations ask to track.
struct ReloaderObject {
    kind: ReloaderKind,
    name: String,
    optional: bool,
    origins: Vec<Origin>,
    annotation: &'static str,
    gate: Gate,
}

impl<'a> Parser<'a> {
    pub(super) fn reloader(&mut self, annotations: &Annotations<'_>) {
        self.reloader_pause_period(annotations);
        let strategy = self.reloader_rollout_strategy();
        let excluded = self.reloader_excluded();
        let mut objects = self.reloader_auto(annotations);
        objects.extend(self.reloader_lists(annotations));
        objects.extend(self.reloader_search(annotations));
        objects.extend(self.reloader_csi(annotations));
        objects.retain(|o| !excluded.contains(&(o.kind.clone(), o.name.clone())));
        let env_vars = self.env_var_names();
        for object in objects {
            let contribution = self.reloader_contribution(object, &env_vars, strategy);
            self.stamps.add(contribution);
        }
    }

    /// `pause-period`: nudge's debounce and ceiling.
    fn reloader_pause_period(&mut self, annotations: &Annotations<'_>) {
        if let Some(value) = annotations.get(RELOADER_PAUSE_PERIOD) {
            match parse_go_duration(RELOADER_PAUSE_PERIOD, value) {
                // Reloader pauses the Deployment for the period after the first
                // change and resumes it with whatever changed meanwhile: one
                // rollout at the end of the period.
                Ok(period) if self.deps.debounce.is_none() => {
                    self.deps.debounce = Some(period);
                    self.deps.max_delay = Some(period);
                }
                Ok(_) => {}
                Err(error) => self.deps.errors.push(error),
            }
        }
    }

    /// `rollout-strategy`, from the workload's own metadata as Reloader reads
    /// it. `restart` means something on an Argo Rollout only; elsewhere it is
    /// reported (Reloader ignores it there) and the template is used.
    fn reloader_rollout_strategy(&mut self) -> RolloutStrategy {
        let key = RELOADER_ROLLOUT_STRATEGY;
        match self.workload.annotations.get(key).map(String::as_str) {
            None | Some("rollout") => RolloutStrategy::Rollout,
            Some("restart") if restarts_at(&self.workload.id.kind) => RolloutStrategy::Restart,
            Some("restart") => {
                self.deps.errors.push(AnnotationError::Unsupported {
                    key: key.to_owned(),
                    value: "restart".to_owned(),
                    instead: "only an Argo Rollout restarts without a pod-template change (spec.restartAt); nudge rolls this workload through its pod template, as the default \"rollout\" strategy does",
                });
                RolloutStrategy::Rollout
            }
            Some(other) => {
                self.deps.errors.push(AnnotationError::InvalidValue {
                    key: key.to_owned(),
                    value: excerpt(other),
                    expected: "\"rollout\" or \"restart\"",
                });
                RolloutStrategy::Rollout
            }
        }
    }

    /// Objects the exclude lists drop from every Reloader mode. Read from the
    /// workload's own metadata only, as Reloader does.
    fn reloader_excluded(&mut self) -> BTreeSet<(ReloaderKind, String)> {
        let mut lists = vec![
            (
                RELOADER_CONFIGMAPS_EXCLUDE,
                ReloaderKind::Object(ObjectKind::ConfigMap),
            ),
            (
                RELOADER_SECRETS_EXCLUDE,
                ReloaderKind::Object(ObjectKind::Secret),
            ),
        ];
        if let Some(source) = self.csi_source() {
            let kind = ReloaderKind::SecretProviderClass(source);
            lists.push((RELOADER_SPC_EXCLUDE, kind));
        }
        let mut excluded = BTreeSet::new();
        for (key, kind) in lists {
            let Some(value) = self.workload.annotations.get(key) else {
                continue;
            };
            for item in split_list(value) {
                match check_object_name(item) {
                    Ok(()) => {
                        excluded.insert((kind.clone(), item.to_owned()));
                    }
                    Err(reason) => self.deps.errors.push(invalid_item(key, item, reason)),
                }
            }
        }
        excluded
    }

    /// `configmap.reloader.stakater.com/reload` and `secret.…/reload`. Reloader
    /// reads each entry as a Go regular expression anchored at both ends
    /// ([`ReloadEntry`]). An entry that is an object name tracks that object;
    /// every entry also tracks the objects of its kind the pod spec references
    /// whose names it matches.
    fn reloader_lists(&mut self, annotations: &Annotations<'_>) -> Vec<ReloaderObject> {
        let lists = [
            (RELOADER_CONFIGMAP_RELOAD, ObjectKind::ConfigMap),
            (RELOADER_SECRET_RELOAD, ObjectKind::Secret),
        ];
        let mut objects = Vec::new();
        for (key, kind) in lists {
            let Some(value) = annotations.get(key) else {
                continue;
            };
            let referenced: Vec<_> = self
                .discover(discovery::native)
                .into_iter()
                .filter(|found| found.kind == kind)
                .collect();
            for item in split_list(value) {
                let entry = ReloadEntry::new(item);
                if let Some(error) = entry.error {
                    self.deps.errors.push(invalid_item(key, item, error));
                }
                let named = check_object_name(item)
                    .is_ok()
                    .then(|| (item.to_owned(), false));
                let matched = referenced
                    .iter()
                    .filter(|found| found.name != item && entry.matches(&found.name))
                    .map(|found| (found.name.clone(), found.optional));
                for (name, optional) in named.into_iter().chain(matched) {
                    objects.push(ReloaderObject {
                        kind: ReloaderKind::Object(kind),
                        name,
                        optional,
                        origins: vec![Origin::Annotation(key.to_owned())],
                        annotation: key,
                        gate: Gate::Always,
                    });
                }
            }
        }
        objects
    }

    /// `reloader.stakater.com/search: "true"`: referenced objects, counted only
    /// while they carry `reloader.stakater.com/match: "true"`.
    fn reloader_search(&mut self, annotations: &Annotations<'_>) -> Vec<ReloaderObject> {
        if !self.flag(annotations, RELOADER_SEARCH) {
            return Vec::new();
        }
        self.referenced(RELOADER_SEARCH, Gate::ReloaderMatch, |_| true)
    }

    /// Objects selected by the Reloader `auto` annotations, or by
    /// `--auto-reload-all` (the scheme's `reloader_auto_all`) on a workload that
    /// sets none of them and that no other scheme manages. Values are read as Go's
    /// `strconv.ParseBool` does, as Reloader reads them.
    fn reloader_auto(&mut self, annotations: &Annotations<'_>) -> Vec<ReloaderObject> {
        let all = self.go_flag(annotations, RELOADER_AUTO);
        let configmaps = self.go_flag(annotations, RELOADER_CONFIGMAP_AUTO);
        let secrets = self.go_flag(annotations, RELOADER_SECRET_AUTO);
        let unset = |key: &str| annotations.get(key).is_none_or(|v| v.is_empty());
        let by_default = self.scheme.reloader_auto_all && self.stamps.is_empty();
        let default_for = |typed: &str| unset(RELOADER_AUTO) && unset(typed) && by_default;
        let configmaps_by_default = default_for(RELOADER_CONFIGMAP_AUTO);
        let secrets_by_default = default_for(RELOADER_SECRET_AUTO);
        let enabled_by = move |kind| match kind {
            _ if all => Some(RELOADER_AUTO),
            ObjectKind::ConfigMap if configmaps || configmaps_by_default => {
                Some(RELOADER_CONFIGMAP_AUTO)
            }
            ObjectKind::Secret if secrets || secrets_by_default => Some(RELOADER_SECRET_AUTO),
            _ => None,
        };
        if [ObjectKind::ConfigMap, ObjectKind::Secret]
            .iter()
            .all(|kind| enabled_by(*kind).is_none())
        {
            return Vec::new();
        }
        self.discover(discovery::native)
            .into_iter()
            .filter_map(|found| {
                Some(ReloaderObject {
                    annotation: enabled_by(found.kind)?,
                    kind: ReloaderKind::Object(found.kind),
                    name: found.name,
                    optional: found.optional,
                    origins: found.origins.into_iter().map(Origin::Discovered).collect(),
                    gate: Gate::Always,
                })
            })
            .collect()
    }

    /// The source of the Secrets Store CSI preset, if one is configured.
    fn csi_source(&self) -> Option<SourceName> {
        let rule = csi_rule();
        let mut sources = self.catalog.rules().filter(|(_, r)| **r == rule);
        sources.next().map(|(name, _)| name.clone())
    }

    /// Reloader 2's SecretProviderClass annotations: `reloader.stakater.com/auto`
    /// and `secretproviderclass.reloader.stakater.com/auto` select every class
    /// the pod spec's Secrets Store `csi` volumes mount (Reloader with
    /// `--enable-csi-integration`); `…/reload` lists names and Go patterns as
    /// the ConfigMap and Secret lists do. They need the CSI preset; without
    /// it, an annotation asking for classes is reported.
    fn reloader_csi(&mut self, annotations: &Annotations<'_>) -> Vec<ReloaderObject> {
        let typed = self.go_flag(annotations, RELOADER_SPC_AUTO);
        let unset = |key: &str| annotations.get(key).is_none_or(|v| v.is_empty());
        // `--auto-reload-all` covers classes too, on a workload no other
        // scheme manages.
        let by_default = self.scheme.reloader_auto_all
            && unset(RELOADER_AUTO)
            && unset(RELOADER_SPC_AUTO)
            && self.stamps.is_empty();
        let all = self.go_flag_quiet(annotations, RELOADER_AUTO) || by_default;
        let list = annotations.get(RELOADER_SPC_RELOAD).copied();
        let Some(source) = self.csi_source() else {
            for (key, asked) in [
                (RELOADER_SPC_AUTO, typed),
                (RELOADER_SPC_RELOAD, list.is_some()),
            ] {
                if asked {
                    self.deps.errors.push(AnnotationError::Unsupported {
                        key: key.to_owned(),
                        value: excerpt(annotations.get(key).copied().unwrap_or_default()),
                        instead: "nothing: SecretProviderClasses need the Secrets Store CSI preset ([sources.kubernetes.<name>] preset = \"secrets-store-csi\")",
                    });
                }
            }
            return Vec::new();
        };
        let mounted = self.discover_by_rule(&csi_rule());
        let kind = ReloaderKind::SecretProviderClass(source);
        let mut objects = Vec::new();
        let auto_by = if typed {
            Some(RELOADER_SPC_AUTO)
        } else if all {
            Some(RELOADER_AUTO)
        } else {
            None
        };
        if let Some(annotation) = auto_by {
            for found in &mounted {
                objects.push(ReloaderObject {
                    kind: kind.clone(),
                    name: found.name.clone(),
                    optional: false,
                    origins: found
                        .origins
                        .iter()
                        .cloned()
                        .map(Origin::Discovered)
                        .collect(),
                    annotation,
                    gate: Gate::Always,
                });
            }
        }
        let Some(value) = list else {
            return objects;
        };
        let key = RELOADER_SPC_RELOAD;
        for item in split_list(value) {
            let entry = ReloadEntry::new(item);
            if let Some(error) = entry.error {
                self.deps.errors.push(invalid_item(key, item, error));
            }
            let named = check_object_name(item).is_ok().then(|| item.to_owned());
            let matched = mounted
                .iter()
                .filter(|found| found.name != item && entry.matches(&found.name))
                .map(|found| found.name.clone());
            for name in named.into_iter().chain(matched) {
                objects.push(ReloaderObject {
                    kind: kind.clone(),
                    name,
                    optional: false,
                    origins: vec![Origin::Annotation(key.to_owned())],
                    annotation: key,
                    gate: Gate::Always,
                });
            }
        }
        objects
    }

    /// [`Self::go_flag`] for a key another Reloader mode reads and reports.
    fn go_flag_quiet(&self, annotations: &Annotations<'_>, key: &str) -> bool {
        annotations
            .get(key)
            .is_some_and(|v| matches!(*v, "1" | "t" | "T" | "TRUE" | "true" | "True"))
    }

    /// Every object the pod spec references that `select` keeps, for `annotation`.
    fn referenced(
        &self,
        annotation: &'static str,
        gate: Gate,
        select: impl Fn(ObjectKind) -> bool,
    ) -> Vec<ReloaderObject> {
        self.discover(discovery::native)
            .into_iter()
            .filter(|found| select(found.kind))
            .map(|found| ReloaderObject {
                annotation,
                kind: ReloaderKind::Object(found.kind),
                name: found.name,
                optional: found.optional,
                origins: found.origins.into_iter().map(Origin::Discovered).collect(),
                gate,
            })
            .collect()
    }

    /// A yes/no annotation of Reloader's, read as Go's `strconv.ParseBool`;
    /// anything else is reported and counts as no.
    fn go_flag(&mut self, annotations: &Annotations<'_>, key: &str) -> bool {
        let Some(value) = annotations.get(key) else {
            return false;
        };
        match *value {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" | "" => false,
            other => {
                self.deps.errors.push(AnnotationError::InvalidBool {
                    key: key.to_owned(),
                    value: excerpt(other),
                });
                false
            }
        }
    }

    /// Under the `restart` strategy, nudge's `config-hash` on metadata with a
    /// restart when it changes; otherwise Reloader's env var when the pod
    /// template already carries it, nudge's `config-hash` if not.
    fn reloader_contribution(
        &self,
        object: ReloaderObject,
        env_vars: &BTreeSet<&str>,
        strategy: RolloutStrategy,
    ) -> Contribution {
        let (var, reference) = match &object.kind {
            ReloaderKind::Object(kind) => (
                fingerprint::reloader_env_var(*kind, &object.name),
                self.object(*kind, None, &object.name),
            ),
            ReloaderKind::SecretProviderClass(source) => (
                fingerprint::reloader_csi_env_var(&object.name),
                Reference::object(source.clone(), self.namespace(), &object.name),
            ),
        };
        // Reloader's annotations-strategy document is emulated for ConfigMaps
        // and Secrets only; a SecretProviderClass there is adopted below.
        let csi = matches!(object.kind, ReloaderKind::SecretProviderClass(_));
        let annotations_strategy = self
            .workload
            .template_annotations()
            .contains_key(RELOADER_LAST_RELOADED_FROM);
        let (output, combine, algorithm) = if strategy == RolloutStrategy::Restart {
            // Reloader never writes the template under this strategy: one
            // fingerprint over every object, kept on metadata and adopted
            // at first sight (so migrating restarts nothing).
            let output = Output::RestartAt(self.scheme.config_hash());
            (output, Combine::NativeHash, Algorithm::Native)
        } else if env_vars.contains(var.as_str()) {
            let algorithm = self.reloader_env_hash(&var);
            (Output::ContainerEnv(var), Combine::Single, algorithm)
        } else if annotations_strategy && !csi {
            // Reloader's annotations strategy: adopted without a rollout, later
            // changes written in its format.
            let output = Output::ReloaderSource(self.scheme.reloader_state());
            (output, Combine::ReloaderSource, Algorithm::Reloader)
        } else {
            // Reloader had nothing on the pod template for this object yet:
            // adopted without a rollout, written on the template at its first
            // change (when Reloader would have added its env var).
            let output = Output::Adopted(self.scheme.config_hash());
            (output, Combine::NativeHash, Algorithm::Native)
        };
        Contribution {
            output,
            combine,
            annotation: object.annotation.to_owned(),
            tracked: Tracked::new(reference, algorithm).gated(object.gate),
            optional: object.optional,
            origins: object.origins,
        }
    }

    /// The hash Reloader wrote into `var`: SHA-512/256 when a container holds
    /// it in that shape (Reloader's SHA-512/256 builds), SHA-1 otherwise. nudge
    /// keeps writing the same one, so migrating from either restarts nothing.
    fn reloader_env_hash(&self, var: &str) -> Algorithm {
        let sha512 = self
            .containers()
            .flat_map(|c| c.env.iter().flatten())
            .filter(|env| env.name == var)
            .any(|env| {
                env.value
                    .as_deref()
                    .is_some_and(fingerprint::is_reloader_sha512_256)
            });
        if sha512 {
            Algorithm::ReloaderSha512
        } else {
            Algorithm::Reloader
        }
    }

    /// Every container and initContainer of the pod template.
    fn containers(&self) -> impl Iterator<Item = &'a Container> {
        let workload: &'a Workload = self.workload;
        let spec = workload.template.spec.as_ref();
        let containers = spec.into_iter().flat_map(|s| s.containers.iter());
        let init = spec
            .into_iter()
            .flat_map(|s| s.init_containers.iter().flatten());
        containers.chain(init)
    }

    /// Names of the env vars of every container and initContainer.
    fn env_var_names(&self) -> BTreeSet<&'a str> {
        self.containers()
            .flat_map(|c| c.env.iter().flatten())
            .map(|env| env.name.as_str())
            .collect()
    }
}
