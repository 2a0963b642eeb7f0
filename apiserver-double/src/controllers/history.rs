//! ControllerRevisions, the history StatefulSets and DaemonSets keep of
//! their pod templates (`pkg/controller/history/controller_history.go`,
//! `getPatch` of `pkg/controller/statefulset/stateful_set_utils.go` and
//! `pkg/controller/daemon/util/daemonset_util.go`).

use std::borrow::Borrow;
use std::cmp::Ordering;

use serde_json::{Value, json};

use super::client::{ClientError, Cluster, Kind};
use super::hash::{go_json, hash_controller_revision};
use super::object::{
    controller_of, controller_ref, int64_at, is_controlled_by, selected_by, with_label,
};
use crate::meta;

/// The label with a revision's hash (`history.ControllerRevisionHashLabel`).
pub(crate) const HASH_LABEL: &str = "controller.kubernetes.io/hash";
/// How often a create is retried under a new name after hash collisions
/// (the real loop is unbounded; a bound keeps a bad store from hanging the
/// controllers).
const MAX_COLLISIONS: usize = 100;

/// One ControllerRevision.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Revision {
    pub obj: Value,
}

impl Revision {
    pub fn name(&self) -> &str {
        meta::name(&self.obj)
    }

    /// `revision`.
    pub fn number(&self) -> i64 {
        int64_at(&self.obj, &["revision"]).unwrap_or(0)
    }

    /// `data` as the raw bytes the controllers compare.
    pub fn raw(&self) -> String {
        self.obj.get("data").map(go_json).unwrap_or_default()
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        meta::label(&self.obj, key)
    }

    fn created(&self) -> &str {
        meta::meta_str(&self.obj, "creationTimestamp")
    }
}

/// `getPatch`: the pod template of a StatefulSet or DaemonSet as a strategic
/// merge patch that replaces it, encoded as Go encodes it.
pub(crate) fn template_patch(owner: &Value) -> Value {
    let mut template = meta::get_path(owner, &["spec", "template"])
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    if let Some(t) = template.as_object_mut() {
        t.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// `ControllerRevisionName`: the prefix cut to 223 bytes, then the hash.
pub(crate) fn revision_name(prefix: &str, hash: &str) -> String {
    let mut end = prefix.len().min(223);
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{hash}", &prefix[..end])
}

/// `history.SortControllerRevisions`: by revision, then age, then name.
pub(crate) fn by_revision(a: &Revision, b: &Revision) -> Ordering {
    a.number()
        .cmp(&b.number())
        .then_with(|| a.created().cmp(b.created()))
        .then_with(|| a.name().cmp(b.name()))
}

/// `ListControllerRevisions`: the revisions of `owner`'s namespace its
/// selector selects that it controls or that nobody controls, sorted.
pub(crate) fn revisions_of(
    owner: &Value,
    in_namespace: impl IntoIterator<Item = impl Borrow<Value>>,
) -> Vec<Revision> {
    let uid = meta::uid(owner);
    let mut list: Vec<Revision> = in_namespace
        .into_iter()
        .filter(|r| selected_by(owner, r.borrow()))
        .filter(|r| controller_of(r.borrow()).is_none() || is_controlled_by(r.borrow(), uid))
        .map(|obj| Revision {
            obj: obj.borrow().clone(),
        })
        .collect();
    list.sort_by(by_revision);
    list
}

/// `NewControllerRevision` for a StatefulSet: the template's labels plus
/// the hash label, the owner's annotations, named by the hash of the data
/// and the collision count.
pub(crate) fn new_stateful_set_revision(
    set: &Value,
    revision: i64,
    collision_count: i64,
) -> Revision {
    let data = template_patch(set);
    let hash = hash_controller_revision(&go_json(&data), Some(collision_count));
    let labels = with_label(
        meta::get_path(set, &["spec", "template", "metadata", "labels"]),
        HASH_LABEL,
        &hash,
    );
    let mut obj = json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision_name(meta::name(set), &hash),
            "namespace": meta::namespace(set),
            "labels": labels,
            "ownerReferences": [controller_ref(set, "StatefulSet")]
        },
        "data": data,
        "revision": revision
    });
    if let Some(a) = meta::string_map(set, "annotations").filter(|a| !a.is_empty()) {
        obj["metadata"]["annotations"] = Value::Object(a.clone());
    }
    Revision { obj }
}

/// `FindEqualRevisions`: revisions with the same data.
pub(crate) fn equal_revisions<'a>(
    revisions: &'a [Revision],
    needle: &Revision,
) -> Vec<&'a Revision> {
    let raw = needle.raw();
    revisions.iter().filter(|r| r.raw() == raw).collect()
}

/// `nextRevision`: one more than the last revision, 1 for the first.
pub(crate) fn next_revision(sorted: &[Revision]) -> i64 {
    sorted.last().map_or(1, |r| r.number().saturating_add(1))
}

/// `CreateControllerRevision`: a name taken by other data is a collision,
/// counted, and the next name tried; a name taken by the same data is that
/// revision.
pub(crate) fn create_revision<C: Cluster>(
    cluster: &mut C,
    owner: &Value,
    revision: &Revision,
    collision_count: &mut i64,
) -> Result<Revision, ClientError> {
    let raw = revision.raw();
    for _ in 0..MAX_COLLISIONS {
        let hash = hash_controller_revision(&raw, Some(*collision_count));
        let mut candidate = revision.obj.clone();
        meta::set_meta(
            &mut candidate,
            "name",
            revision_name(meta::name(owner), &hash),
        );
        match cluster.create(Kind::ControllerRevision, candidate) {
            Err(ClientError::AlreadyExists) => {
                let name = revision_name(meta::name(owner), &hash);
                let existing = cluster
                    .get(Kind::ControllerRevision, meta::namespace(owner), &name)
                    .map(|obj| Revision { obj })
                    .ok_or(ClientError::NotFound)?;
                if existing.raw() == raw {
                    return Ok(existing);
                }
                *collision_count = collision_count.saturating_add(1);
            }
            other => return other.map(|obj| Revision { obj }),
        }
    }
    Err(ClientError::AlreadyExists)
}

/// `UpdateControllerRevision`: a new revision number (a rollback to this
/// template), retried on conflicts from a fresh read.
pub(crate) fn renumber_revision<C: Cluster>(
    cluster: &mut C,
    revision: &Revision,
    number: i64,
) -> Result<Revision, ClientError> {
    let mut clone = revision.clone();
    for attempt in 0..4 {
        if clone.number() == number {
            return Ok(clone);
        }
        clone.obj["revision"] = json!(number);
        match cluster.update(Kind::ControllerRevision, clone.obj.clone()) {
            Ok(obj) => return Ok(Revision { obj }),
            Err(e) if attempt == 3 => return Err(e),
            Err(_) => {
                let fresh = cluster.get(
                    Kind::ControllerRevision,
                    meta::namespace(&clone.obj),
                    clone.name(),
                );
                if let Some(obj) = fresh {
                    clone = Revision { obj };
                }
            }
        }
    }
    Ok(clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::fake::FakeCluster;

    fn set() -> Value {
        json!({"metadata": {"name": "test", "namespace": "default", "uid": "s1"},
            "spec": {"selector": {"matchLabels": {"app": "foo"}}, "template": {
                "metadata": {"annotations": {"test": "value"}, "labels": {"app": "foo"}},
                "spec": {"containers": [{"image": "test", "imagePullPolicy": "Always", "name": "test",
                    "resources": {}, "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"}],
                    "dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
                    "schedulerName": "default-scheduler", "securityContext": {},
                    "terminationGracePeriodSeconds": 30}}}})
    }

    /// `pkg/controller/statefulset/testdata/compatibility_revision_1.34.0.json`.
    #[test]
    fn stateful_set_revisions_are_named_and_labelled_as_kube_controller_manager_does() {
        let r = new_stateful_set_revision(&set(), 2, 0);
        assert_eq!(r.name(), "test-776999688b");
        assert_eq!(r.label(HASH_LABEL), Some("776999688b"));
        assert_eq!(r.label("app"), Some("foo"));
        assert_eq!(r.obj["data"]["spec"]["template"]["$patch"], "replace");
        assert_eq!(r.number(), 2);
    }

    #[test]
    fn a_collision_tries_the_next_name_and_counts_it() {
        let mut cluster = FakeCluster::default();
        let r = new_stateful_set_revision(&set(), 1, 0);
        let mut squatter = r.obj.clone();
        squatter["data"] = json!({"other": true});
        cluster.seed(Kind::ControllerRevision, squatter);
        let mut collisions = 0;
        let created = create_revision(&mut cluster, &set(), &r, &mut collisions).unwrap();
        assert_eq!(collisions, 1);
        assert_ne!(created.name(), r.name());
        // The same data under the name: that revision, no new collision.
        let again = create_revision(&mut cluster, &set(), &r, &mut collisions).unwrap();
        assert_eq!((again.name(), collisions), (created.name(), 1));
    }

    #[test]
    fn long_owner_names_are_cut_for_the_hash() {
        let name = revision_name(&"a".repeat(300), "h");
        assert_eq!(name.len(), 225);
    }
}
