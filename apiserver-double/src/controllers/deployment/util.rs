//! The Deployment and ReplicaSet helpers of `pkg/controller/deployment/util/
//! deployment_util.go` and `pkg/controller/controller_utils.go` the control
//! loop uses: revisions and annotations, fenceposts, counts, the sort orders,
//! and the completion / progress / timeout tests.

use std::cmp::Ordering;
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use super::status::{Condition, DeploymentStatus, PROGRESSING};
use crate::controllers::object::{
    annotation, annotations_mut, generation, int_at, int_or_percent, int_or_zero, is_deleting,
    observed_generation, semantic_eq_ignoring, str_at,
};
use crate::ids;
use crate::meta;

/// The revision of a ReplicaSet in its Deployment's rollout sequence.
pub(crate) const REVISION: &str = "deployment.kubernetes.io/revision";
/// Revisions a ReplicaSet served before it was rolled back to.
pub(crate) const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
/// The Deployment's replicas when the ReplicaSet was last scaled.
pub(crate) const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
/// The Deployment's replicas plus surge when the ReplicaSet was last scaled.
pub(crate) const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// The label (and selector) that tells a Deployment's ReplicaSets apart.
pub(crate) const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// `maxRevHistoryLengthInChars` of `sync.go`.
pub(crate) const MAX_REV_HISTORY_CHARS: usize = 2000;
/// `math.MaxInt32`: a progress deadline or history limit that means "none".
const UNLIMITED: i64 = i32::MAX as i64;

/// Annotations a Deployment does not copy to its ReplicaSets (`annotationsToSkip`).
const ANNOTATIONS_TO_SKIP: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

/// A ReplicaSet as the Deployment controller reads it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReplicaSet {
    /// The object as read (or as it will be written).
    pub obj: Value,
}

impl ReplicaSet {
    pub fn name(&self) -> &str {
        meta::name(&self.obj)
    }

    pub fn uid(&self) -> &str {
        meta::uid(&self.obj)
    }

    /// `*spec.replicas` (the apiserver defaults it to 1).
    pub fn replicas(&self) -> i64 {
        int_at(&self.obj, &["spec", "replicas"]).unwrap_or(1)
    }

    pub fn set_replicas(&mut self, n: i64) {
        if let Some(spec) = meta::ensure_map(&mut self.obj, &["spec"]) {
            spec.insert("replicas".into(), Value::from(n));
        }
    }

    pub fn status_replicas(&self) -> i64 {
        int_or_zero(&self.obj, &["status", "replicas"])
    }

    pub fn ready_replicas(&self) -> i64 {
        int_or_zero(&self.obj, &["status", "readyReplicas"])
    }

    pub fn available_replicas(&self) -> i64 {
        int_or_zero(&self.obj, &["status", "availableReplicas"])
    }

    pub fn observed_generation(&self) -> i64 {
        observed_generation(&self.obj)
    }

    pub fn generation(&self) -> i64 {
        generation(&self.obj)
    }

    pub fn created(&self) -> &str {
        meta::meta_str(&self.obj, "creationTimestamp")
    }

    pub fn is_deleting(&self) -> bool {
        is_deleting(&self.obj)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        annotation(&self.obj, key)
    }

    /// `Revision`: the revision annotation; missing is 0, unparsable an error.
    pub fn revision(&self) -> Result<i64, ()> {
        self.annotation(REVISION)
            .map_or(Ok(0), |v| v.parse().map_err(|_| ()))
    }

    /// `spec.template`.
    pub fn template(&self) -> Option<&Value> {
        meta::get_path(&self.obj, &["spec", "template"])
    }

    /// The ReplicaSet's `status.conditions`.
    pub fn conditions(&self) -> &[Value] {
        meta::get_path(&self.obj, &["status", "conditions"])
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
}

/// A Deployment as the controller works on it: the object as read, with the
/// status and annotations it changes in memory before writing them.
#[derive(Debug, Clone)]
pub(crate) struct Deployment {
    pub obj: Value,
    pub status: DeploymentStatus,
}

impl Deployment {
    pub fn new(obj: Value) -> Self {
        let status = DeploymentStatus::from_object(&obj);
        Self { obj, status }
    }

    pub fn name(&self) -> &str {
        meta::name(&self.obj)
    }

    pub fn namespace(&self) -> &str {
        meta::namespace(&self.obj)
    }

    pub fn uid(&self) -> &str {
        meta::uid(&self.obj)
    }

    pub fn generation(&self) -> i64 {
        generation(&self.obj)
    }

    /// `*spec.replicas` (the apiserver defaults it to 1).
    pub fn replicas(&self) -> i64 {
        int_at(&self.obj, &["spec", "replicas"]).unwrap_or(1)
    }

    pub fn paused(&self) -> bool {
        meta::get_path(&self.obj, &["spec", "paused"]) == Some(&Value::Bool(true))
    }

    pub fn min_ready_seconds(&self) -> i64 {
        int_or_zero(&self.obj, &["spec", "minReadySeconds"])
    }

    pub fn strategy(&self) -> &str {
        str_at(&self.obj, &["spec", "strategy", "type"])
    }

    pub fn is_rolling_update(&self) -> bool {
        self.strategy() == "RollingUpdate"
    }

    /// `spec.progressDeadlineSeconds` unless absent or "no deadline"
    /// (`HasProgressDeadline`).
    pub fn progress_deadline(&self) -> Option<i64> {
        int_at(&self.obj, &["spec", "progressDeadlineSeconds"]).filter(|s| *s != UNLIMITED)
    }

    /// `spec.revisionHistoryLimit` unless absent or unlimited
    /// (`HasRevisionHistoryLimit`).
    pub fn revision_history_limit(&self) -> Option<i64> {
        int_at(&self.obj, &["spec", "revisionHistoryLimit"]).filter(|l| *l != UNLIMITED)
    }

    pub fn template(&self) -> Value {
        meta::get_path(&self.obj, &["spec", "template"])
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        annotation(&self.obj, key)
    }

    /// `metadata.annotations`.
    pub fn annotations(&self) -> Map<String, Value> {
        meta::string_map(&self.obj, "annotations")
            .cloned()
            .unwrap_or_default()
    }

    /// `SetDeploymentRevision`: whether the revision annotation changed.
    pub fn set_revision(&mut self, revision: &str) -> bool {
        if self.annotation(REVISION) == Some(revision) {
            return false;
        }
        if let Some(a) = annotations_mut(&mut self.obj) {
            a.insert(REVISION.into(), Value::from(revision));
        }
        true
    }

    /// The object to send with `UpdateStatus`: as read, with the in-memory
    /// status and annotations.
    pub fn to_status_update(&self) -> Value {
        let mut obj = self.obj.clone();
        if let Some(o) = obj.as_object_mut() {
            o.insert("status".into(), self.status.to_json());
        }
        obj
    }

    fn rolling_param(&self, name: &str) -> Option<&Value> {
        meta::get_path(&self.obj, &["spec", "strategy", "rollingUpdate", name])
    }

    /// `ResolveFenceposts` of the rolling update parameters; an error
    /// resolves both to 0, as the callers ignore it ("caught by validation").
    fn fenceposts(&self) -> (i64, i64) {
        let desired = self.replicas();
        let surge = int_or_percent(self.rolling_param("maxSurge"), desired, true);
        let unavailable = int_or_percent(self.rolling_param("maxUnavailable"), desired, false);
        match (surge, unavailable) {
            (Ok(0), Ok(0)) => (0, 1),
            (Ok(s), Ok(u)) => (s, u),
            _ => (0, 0),
        }
    }

    /// `MaxUnavailable`.
    pub fn max_unavailable(&self) -> i64 {
        if !self.is_rolling_update() || self.replicas() == 0 {
            return 0;
        }
        self.fenceposts().1.min(self.replicas())
    }

    /// `MaxSurge`.
    pub fn max_surge(&self) -> i64 {
        if !self.is_rolling_update() {
            return 0;
        }
        self.fenceposts().0
    }
}

/// `MaxRevision`: the highest parsable revision.
pub(crate) fn max_revision(rss: &[ReplicaSet]) -> i64 {
    rss.iter()
        .filter_map(|rs| rs.revision().ok())
        .max()
        .unwrap_or(0)
        .max(0)
}

/// `copyDeploymentAnnotationsToReplicaSet`: whether the ReplicaSet changed.
fn copy_deployment_annotations(d: &Deployment, rs: &mut ReplicaSet) -> bool {
    let Some(target) = annotations_mut(&mut rs.obj) else {
        return false;
    };
    let mut changed = false;
    for (k, v) in d.annotations() {
        if ANNOTATIONS_TO_SKIP.contains(&k.as_str()) || target.get(&k) == Some(&v) {
            continue;
        }
        target.insert(k, v);
        changed = true;
    }
    changed
}

/// `SetNewReplicaSetAnnotations`: copies the Deployment's annotations,
/// raises the revision (keeping the ones it served before in the history
/// annotation) and, for a ReplicaSet about to be created, records the
/// replica counts. Whether the ReplicaSet changed.
pub(crate) fn set_new_replica_set_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: i64,
    exists: bool,
) -> bool {
    let mut changed = copy_deployment_annotations(d, rs);
    let old_revision = rs.annotation(REVISION).map(str::to_string);
    let old = match old_revision.as_deref() {
        None | Some("") => 0,
        Some(v) => match v.parse::<i64>() {
            Ok(n) => n,
            Err(_) => return false,
        },
    };
    let Some(a) = annotations_mut(&mut rs.obj) else {
        return changed;
    };
    if old < new_revision {
        a.insert(REVISION.into(), Value::from(new_revision.to_string()));
        changed = true;
        if let Some(old_revision) = &old_revision {
            append_revision_history(a, old_revision);
        }
    }
    if !exists && set_replicas_annotations(rs, d.replicas(), d.replicas() + d.max_surge()) {
        changed = true;
    }
    changed
}

/// Appends a revision to the history annotation, dropping the oldest ones
/// beyond [`MAX_REV_HISTORY_CHARS`].
fn append_revision_history(a: &mut Map<String, Value>, old_revision: &str) {
    let history = a
        .get(REVISION_HISTORY)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let olds: Vec<&str> = history.split(',').collect();
    if olds[0].is_empty() {
        a.insert(REVISION_HISTORY.into(), Value::from(old_revision));
        return;
    }
    let mut total = history.len() + old_revision.len() + 1;
    let mut start = 0;
    while total > MAX_REV_HISTORY_CHARS && start < olds.len() {
        total -= olds[start].len() + 1;
        start += 1;
    }
    if total <= MAX_REV_HISTORY_CHARS {
        let mut kept = olds[start..].to_vec();
        kept.push(old_revision);
        a.insert(REVISION_HISTORY.into(), Value::from(kept.join(",")));
    }
}

/// `SetReplicasAnnotations`: whether the ReplicaSet changed.
pub(crate) fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i64, max: i64) -> bool {
    let Some(a) = annotations_mut(&mut rs.obj) else {
        return false;
    };
    let mut changed = false;
    for (k, v) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let v = v.to_string();
        if a.get(k).and_then(Value::as_str) != Some(v.as_str()) {
            a.insert(k.into(), Value::from(v));
            changed = true;
        }
    }
    changed
}

/// `ReplicasAnnotationsNeedUpdate`.
pub(crate) fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i64, max: i64) -> bool {
    rs.annotation(DESIRED_REPLICAS) != Some(desired.to_string().as_str())
        || rs.annotation(MAX_REPLICAS) != Some(max.to_string().as_str())
}

/// An integer annotation (`getIntFromAnnotation`).
fn int_annotation(rs: &ReplicaSet, key: &str) -> Option<i64> {
    rs.annotation(key)?.parse().ok()
}

/// `GetDesiredReplicasAnnotation`.
pub(crate) fn desired_replicas_annotation(rs: &ReplicaSet) -> Option<i64> {
    int_annotation(rs, DESIRED_REPLICAS)
}

/// `EqualIgnoreHash`: the pod templates are semantically equal once the
/// pod-template-hash label is removed from both.
pub(crate) fn equal_ignore_hash(a: &Value, b: &Value) -> bool {
    semantic_eq_ignoring(Some(a), Some(b), &["metadata", "labels", POD_TEMPLATE_HASH])
}

/// `ReplicaSetsByCreationTimestamp`: older first, then by name.
pub(crate) fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    a.created()
        .cmp(b.created())
        .then_with(|| a.name().cmp(b.name()))
}

/// `ReplicaSetsBySizeOlder`: larger first, older first among equals.
pub(crate) fn by_size_older(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    b.replicas()
        .cmp(&a.replicas())
        .then_with(|| by_creation(a, b))
}

/// `ReplicaSetsBySizeNewer`: larger first, newer first among equals.
pub(crate) fn by_size_newer(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    b.replicas()
        .cmp(&a.replicas())
        .then_with(|| by_creation(b, a))
}

/// `ReplicaSetsByRevision`: by revision, by creation where unparsable or equal.
pub(crate) fn by_revision(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    match (a.revision(), b.revision()) {
        (Ok(x), Ok(y)) if x != y => x.cmp(&y),
        _ => by_creation(a, b),
    }
}

/// `FindNewReplicaSet`: the oldest ReplicaSet whose template is the
/// Deployment's.
pub(crate) fn find_new_replica_set(d: &Deployment, rss: &[ReplicaSet]) -> Option<ReplicaSet> {
    let template = d.template();
    let mut sorted: Vec<&ReplicaSet> = rss.iter().collect();
    sorted.sort_by(|a, b| by_creation(a, b));
    sorted
        .into_iter()
        .find(|rs| {
            rs.template()
                .is_some_and(|t| equal_ignore_hash(t, &template))
        })
        .cloned()
}

/// `FindOldReplicaSets` (the second list: every old ReplicaSet).
pub(crate) fn find_old_replica_sets(d: &Deployment, rss: &[ReplicaSet]) -> Vec<ReplicaSet> {
    let new_uid = find_new_replica_set(d, rss).map(|rs| rs.uid().to_string());
    rss.iter()
        .filter(|rs| Some(rs.uid()) != new_uid.as_deref())
        .cloned()
        .collect()
}

/// `FilterActiveReplicaSets`: those with replicas.
pub(crate) fn active(rss: &[ReplicaSet]) -> Vec<ReplicaSet> {
    rss.iter().filter(|rs| rs.replicas() > 0).cloned().collect()
}

/// `GetReplicaCountForReplicaSets`: the sum of `spec.replicas`.
pub(crate) fn replica_count(rss: &[ReplicaSet]) -> i64 {
    rss.iter().map(ReplicaSet::replicas).sum()
}

/// `GetActualReplicaCountForReplicaSets`: the sum of `status.replicas`.
pub(crate) fn actual_replica_count(rss: &[ReplicaSet]) -> i64 {
    rss.iter().map(ReplicaSet::status_replicas).sum()
}

/// `GetReadyReplicaCountForReplicaSets`.
pub(crate) fn ready_replica_count(rss: &[ReplicaSet]) -> i64 {
    rss.iter().map(ReplicaSet::ready_replicas).sum()
}

/// `GetAvailableReplicaCountForReplicaSets`.
pub(crate) fn available_replica_count(rss: &[ReplicaSet]) -> i64 {
    rss.iter().map(ReplicaSet::available_replicas).sum()
}

/// `FindActiveOrLatest`: the only active ReplicaSet, or the newest when none
/// is active; `None` when several are active.
pub(crate) fn find_active_or_latest(
    new_rs: Option<&ReplicaSet>,
    old_rss: &[ReplicaSet],
) -> Option<ReplicaSet> {
    if new_rs.is_none() && old_rss.is_empty() {
        return None;
    }
    let mut olds = old_rss.to_vec();
    olds.sort_by(|a, b| by_creation(b, a));
    let mut all = olds.clone();
    all.extend(new_rs.cloned());
    let all_active = active(&all);
    match all_active.len() {
        0 => new_rs.cloned().or_else(|| olds.first().cloned()),
        1 => all_active.into_iter().next(),
        _ => None,
    }
}

/// `NewRSNewReplicas`: the size the new ReplicaSet may have now.
pub(crate) fn new_rs_new_replicas(
    d: &Deployment,
    all_rss: &[ReplicaSet],
    new_rs: &ReplicaSet,
) -> Result<i64, String> {
    match d.strategy() {
        "RollingUpdate" => {
            let surge = int_or_percent(
                meta::get_path(&d.obj, &["spec", "strategy", "rollingUpdate", "maxSurge"]),
                d.replicas(),
                true,
            )?;
            let current = replica_count(all_rss);
            let max_total = d.replicas() + surge;
            if current >= max_total {
                return Ok(new_rs.replicas());
            }
            let scale_up = (max_total - current).min(d.replicas() - new_rs.replicas());
            Ok(new_rs.replicas() + scale_up)
        }
        "Recreate" => Ok(d.replicas()),
        other => Err(format!("deployment type {other} isn't supported")),
    }
}

/// `IsSaturated`: the new ReplicaSet holds and serves all the replicas.
pub(crate) fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else { return false };
    desired_replicas_annotation(rs) == Some(d.replicas())
        && rs.replicas() == d.replicas()
        && rs.available_replicas() == d.replicas()
}

/// `GetProportion`: the replicas to add to (or remove from) one ReplicaSet
/// in a proportional scaling.
pub(crate) fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i64, added: i64) -> i64 {
    if rs.replicas() == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = replica_set_fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

/// `getReplicaSetFraction`.
fn replica_set_fraction(rs: &ReplicaSet, d: &Deployment) -> i64 {
    if d.replicas() == 0 {
        return -rs.replicas();
    }
    let deployment_replicas = d.replicas() + d.max_surge();
    let annotated = int_annotation(rs, MAX_REPLICAS).unwrap_or(d.status.replicas);
    if annotated == 0 {
        // Go would divide by zero here; nothing sensible to add.
        return 0;
    }
    let size = (rs.replicas() * deployment_replicas) as f64 / annotated as f64;
    size.round() as i64 - rs.replicas()
}

/// `DeploymentComplete`.
pub(crate) fn deployment_complete(d: &Deployment, status: &DeploymentStatus) -> bool {
    status.updated_replicas == d.replicas()
        && status.replicas == d.replicas()
        && status.available_replicas == d.replicas()
        && status.observed_generation >= d.generation()
}

/// `DeploymentProgressing`: pods were added to the new ReplicaSet, became
/// ready or available, or old ones went away.
pub(crate) fn deployment_progressing(d: &Deployment, new: &DeploymentStatus) -> bool {
    let old = &d.status;
    let old_old = old.replicas - old.updated_replicas;
    let new_old = new.replicas - new.updated_replicas;
    new.updated_replicas > old.updated_replicas
        || new_old < old_old
        || new.ready_replicas > old.ready_replicas
        || new.available_replicas > old.available_replicas
}

/// When the Progressing condition's last update plus the deadline passes
/// (`None` without a deadline or a readable update time).
pub(crate) fn progress_deadline_at(d: &Deployment, condition: &Condition) -> Option<SystemTime> {
    let deadline = u64::try_from(d.progress_deadline()?).ok()?;
    let from = ids::parse_rfc3339(condition.last_update.as_deref()?)?;
    from.checked_add(Duration::from_secs(deadline))
}

/// `DeploymentTimedOut`.
pub(crate) fn deployment_timed_out(
    d: &Deployment,
    new: &DeploymentStatus,
    now: SystemTime,
) -> bool {
    if d.progress_deadline().is_none() {
        return false;
    }
    let Some(condition) = new.condition(PROGRESSING) else {
        return false;
    };
    match condition.reason.as_str() {
        NEW_RS_AVAILABLE => false,
        TIMED_OUT => true,
        _ => progress_deadline_at(d, condition).is_some_and(|at| at < now),
    }
}

/// Progressing reason: the new ReplicaSet was updated (`ReplicaSetUpdatedReason`).
pub(crate) const RS_UPDATED: &str = "ReplicaSetUpdated";
/// Progressing reason: creating the new ReplicaSet failed (`FailedRSCreateReason`).
pub(crate) const FAILED_RS_CREATE: &str = "ReplicaSetCreateError";
/// Progressing reason: a new ReplicaSet was created (`NewReplicaSetReason`).
pub(crate) const NEW_RS_CREATED: &str = "NewReplicaSetCreated";
/// Progressing reason: an existing new ReplicaSet was found (`FoundNewRSReason`).
pub(crate) const FOUND_NEW_RS: &str = "FoundNewReplicaSet";
/// Progressing reason: the rollout completed (`NewRSAvailableReason`).
pub(crate) const NEW_RS_AVAILABLE: &str = "NewReplicaSetAvailable";
/// Progressing reason: no progress within the deadline (`TimedOutReason`).
pub(crate) const TIMED_OUT: &str = "ProgressDeadlineExceeded";
/// Progressing reason: paused (`PausedDeployReason`).
pub(crate) const PAUSED: &str = "DeploymentPaused";
/// Progressing reason: resumed (`ResumedDeployReason`).
pub(crate) const RESUMED: &str = "DeploymentResumed";
/// Available reason: enough replicas available (`MinimumReplicasAvailable`).
pub(crate) const MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
/// Available reason: too few replicas available (`MinimumReplicasUnavailable`).
pub(crate) const MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i64, surge: Value, unavailable: Value) -> Deployment {
        Deployment::new(json!({
            "metadata": {"name": "d", "uid": "u", "generation": 1},
            "spec": {"replicas": replicas, "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}}
        }))
    }

    fn rs(name: &str, created: &str, replicas: i64, revision: Option<&str>) -> ReplicaSet {
        let mut obj = json!({"metadata": {"name": name, "uid": name, "creationTimestamp": created},
            "spec": {"replicas": replicas}});
        if let Some(r) = revision {
            obj["metadata"]["annotations"] = json!({REVISION: r});
        }
        ReplicaSet { obj }
    }

    #[test]
    fn fenceposts_resolve_like_kube_controller_manager() {
        let d = deployment(1, json!("25%"), json!("25%"));
        assert_eq!((d.max_surge(), d.max_unavailable()), (1, 0));
        let d = deployment(4, json!("25%"), json!("25%"));
        assert_eq!((d.max_surge(), d.max_unavailable()), (1, 1));
        // Both resolve to zero: one may be unavailable.
        let d = deployment(2, json!(0), json!("10%"));
        assert_eq!((d.max_surge(), d.max_unavailable()), (0, 1));
        let d = deployment(0, json!("25%"), json!("25%"));
        assert_eq!(d.max_unavailable(), 0);
    }

    #[test]
    fn a_new_replica_set_grows_within_the_surge() {
        let d = deployment(1, json!("25%"), json!("25%"));
        let new = rs("n", "t2", 0, None);
        assert_eq!(
            new_rs_new_replicas(&d, std::slice::from_ref(&new), &new),
            Ok(1)
        );
        let old = rs("o", "t1", 1, Some("1"));
        assert_eq!(
            new_rs_new_replicas(&d, &[old.clone(), new.clone()], &new),
            Ok(1)
        );
        let d4 = deployment(4, json!("25%"), json!("25%"));
        let old4 = rs("o", "t1", 4, Some("1"));
        assert_eq!(new_rs_new_replicas(&d4, &[old4, new.clone()], &new), Ok(1));
    }

    #[test]
    fn rollbacks_keep_the_revisions_served_before() {
        let d = deployment(1, json!(1), json!(0));
        let mut old = rs("o", "t1", 0, Some("1"));
        assert!(set_new_replica_set_annotations(&d, &mut old, 3, true));
        assert_eq!(old.annotation(REVISION), Some("3"));
        assert_eq!(old.annotation(REVISION_HISTORY), Some("1"));
        assert!(!set_new_replica_set_annotations(&d, &mut old, 3, true));
    }

    #[test]
    fn new_replica_sets_get_the_annotations_of_their_deployment() {
        let mut d = deployment(2, json!(1), json!(0));
        d.obj["metadata"]["annotations"] = json!({"team": "a", REVISION: "7",
            "kubectl.kubernetes.io/last-applied-configuration": "{}"});
        let mut new = rs("n", "t1", 0, None);
        assert!(set_new_replica_set_annotations(&d, &mut new, 1, false));
        assert_eq!(
            new.obj["metadata"]["annotations"],
            json!({"team": "a", REVISION: "1", DESIRED_REPLICAS: "2", MAX_REPLICAS: "3"})
        );
    }

    #[test]
    fn sort_orders_break_ties_by_age_then_name() {
        let mut list = [
            rs("b", "t1", 1, None),
            rs("a", "t1", 1, None),
            rs("c", "t0", 2, None),
        ];
        list.sort_by(by_size_older);
        let names: Vec<&str> = list.iter().map(ReplicaSet::name).collect();
        assert_eq!(names, ["c", "a", "b"]);
        list.sort_by(by_size_newer);
        let names: Vec<&str> = list.iter().map(ReplicaSet::name).collect();
        assert_eq!(names, ["c", "b", "a"]);
        let mut revs = [
            rs("x", "t0", 0, Some("3")),
            rs("y", "t1", 0, Some("2")),
            rs("z", "t2", 0, Some("bad")),
        ];
        revs.sort_by(by_revision);
        let names: Vec<&str> = revs.iter().map(ReplicaSet::name).collect();
        assert_eq!(names, ["y", "x", "z"]);
    }

    #[test]
    fn the_deadline_counts_from_the_last_update_of_progressing() {
        let mut d = deployment(1, json!(1), json!(0));
        d.obj["spec"]["progressDeadlineSeconds"] = json!(2);
        let at = |s: &str| ids::parse_rfc3339(s).unwrap();
        let mut status = DeploymentStatus::default();
        status.set_condition(Condition::new(
            PROGRESSING,
            "True",
            RS_UPDATED,
            String::new(),
            "2026-01-01T00:00:10Z",
        ));
        assert!(!deployment_timed_out(
            &d,
            &status,
            at("2026-01-01T00:00:12Z")
        ));
        assert!(deployment_timed_out(
            &d,
            &status,
            at("2026-01-01T00:00:13Z")
        ));
        d.obj["spec"]["progressDeadlineSeconds"] = json!(i32::MAX);
        assert!(!deployment_timed_out(
            &d,
            &status,
            at("2030-01-01T00:00:00Z")
        ));
    }
}
