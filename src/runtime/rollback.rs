//! `nudge rollback <kind>/<name>` (design §5e): sets the workload's
//! `<prefix>/rollback-to` to a revision of its history whose snapshot is
//! kept (the newest completed one before the revision its template runs,
//! unless one is named), or removes it. The controller does the rest: it
//! points the pod template back at that revision's copies, records the
//! rollback as a revision of its own, follows its rollout, and holds the
//! sources' changes until the annotation is removed. Reads and writes only
//! the workload's own annotations.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::TargetConfig;
use crate::explain::ExplainError;
use crate::model::{Workload, WorkloadId};
use crate::outcome::history;
use crate::snapshot::{self, Snapshot};
use crate::targets::{Target, TargetError};

use super::Controller;

/// Why a workload could not be rolled back (or released).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum RollbackError {
    /// The workload could not be found or read, or its kind is unknown.
    #[error(transparent)]
    Workload(#[from] ExplainError),
    /// Its history keeps no restorable revision, or not the one asked for.
    #[error("{id}: {reason}")]
    NotRestorable {
        /// The workload.
        id: WorkloadId,
        /// Why, and which revisions could be restored.
        reason: String,
    },
    /// Its target keeps no history (a target registered in code that does
    /// not implement `Target::annotate`).
    #[error("{0}: its target keeps no history, so nudge cannot roll it back")]
    NoHistory(WorkloadId),
    /// The annotation could not be written.
    #[error("cannot write {id}'s rollback-to")]
    Write {
        /// The workload.
        id: WorkloadId,
        /// The API error, classified.
        #[source]
        source: TargetError,
    },
}

/// What `nudge rollback` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum RollbackTo {
    /// Hold the workload at this revision's snapshot; `None`: the newest
    /// completed revision before the one its template runs.
    Revision(Option<u32>),
    /// Remove `rollback-to`: the workload follows its sources again.
    Release,
}

impl Controller {
    /// `nudge rollback <kind>/<name> [--to-revision N]`: holds the workload at
    /// a revision's snapshot by setting its `<prefix>/rollback-to` (or, with
    /// [`RollbackTo::Release`], removes it). Returns the revision set (`None`
    /// when released). `kind` and `namespace` as [`Controller::explain`]
    /// takes them.
    pub(crate) async fn rollback(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        to: RollbackTo,
    ) -> Result<Option<u32>, RollbackError> {
        self.check().map_err(ExplainError::from)?;
        let target = self.target_of(kind).await?;
        let namespace = namespace.unwrap_or(self.client.default_namespace());
        let id = WorkloadId::new(target.kind().clone(), namespace, name);
        let workload = match target.get(&id).await {
            Ok(Some(workload)) => workload,
            Ok(None) => return Err(ExplainError::NotFound(id).into()),
            Err(source) => return Err(ExplainError::Workload { id, source }.into()),
        };
        let scheme = self.config.scheme();
        let revision = match to {
            RollbackTo::Release => None,
            RollbackTo::Revision(to) => Some(self.restorable(&workload, to)?),
        };
        let value = revision.map(|r| r.to_string());
        let annotations = BTreeMap::from([(scheme.rollback_to(), value)]);
        match target.annotate(&workload, &annotations).await {
            Ok(true) => Ok(revision),
            Ok(false) => Err(RollbackError::NoHistory(id)),
            Err(source) => Err(RollbackError::Write { id, source }),
        }
    }

    /// The revision of `workload`'s history to roll back to ([`snapshot::choose`]).
    fn restorable(&self, workload: &Workload, to: Option<u32>) -> Result<u32, RollbackError> {
        let scheme = self.config.scheme();
        let read = |key: String| workload.annotations.get(&key).cloned();
        let history = history::recorded_snapshots(
            read(scheme.history()).as_deref(),
            read(scheme.rollout()).as_deref(),
        );
        let template = crate::stamp::settled_snapshot(workload, &scheme.snapshots())
            .and_then(|value| Snapshot::parse(&value).ok())
            .unwrap_or_default();
        snapshot::choose(&history, &template, to).map_err(|error| RollbackError::NotRestorable {
            id: workload.id.clone(),
            reason: error.to_string(),
        })
    }

    /// The target of `kind`: a custom one, else a built-in or `[[targets]]` one.
    async fn target_of(&self, kind: &str) -> Result<Arc<dyn Target>, ExplainError> {
        if let Some(custom) = self
            .targets
            .iter()
            .find(|t| t.kind().as_str().eq_ignore_ascii_case(kind))
        {
            return Ok(custom.clone());
        }
        let resolved: TargetConfig = crate::explain::resolve_kind(kind, &self.config)
            .ok_or_else(|| ExplainError::UnknownKind(kind.to_owned()))?;
        let scheme = self.config.scheme();
        crate::explain::workload_target(&self.client, &self.config, &resolved, &scheme).await
    }
}
