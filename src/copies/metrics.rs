//! The snapshot metrics (registered under `nudge_snapshot_`): copies kept and
//! their bytes (`copies{kind}`, `bytes{kind}`, gauges the copy watch keeps),
//! and what nudge did to copies (`operations_total{kind,operation}`).

use std::fmt;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::fingerprint::ObjectKind;

/// What nudge did to one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Created for a stamp.
    Created,
    /// Found already made (a restart, a failover, a retry): used as it is.
    Reused,
    /// Found orphaned (its workload deleted with `--cascade=orphan`) and
    /// given the workload as its owner.
    Adopted,
    /// Deleted: no revision kept names it.
    Deleted,
    /// Could not be made, checked or deleted.
    Failed,
}

impl Operation {
    /// Every operation, in a stable order.
    pub const ALL: [Operation; 5] = [
        Self::Created,
        Self::Reused,
        Self::Adopted,
        Self::Deleted,
        Self::Failed,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Reused => "reused",
            Self::Adopted => "adopted",
            Self::Deleted => "deleted",
            Self::Failed => "failed",
        }
    }
}

impl EncodeLabelValue for Operation {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OperationLabels {
    kind: &'static str,
    operation: Operation,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The snapshot metrics. Shared (`Arc`) by the copier and the copy watch.
#[derive(Debug, Default)]
pub struct CopyMetrics {
    operations: Family<OperationLabels, Counter>,
    copies: Family<KindLabels, Gauge>,
    bytes: Family<KindLabels, Gauge>,
}

impl CopyMetrics {
    /// Metrics registered into `registry` (give it the `snapshot`
    /// sub-registry), every series exposed at zero.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        for kind in [ObjectKind::ConfigMap, ObjectKind::Secret] {
            let kind = kind.as_str();
            for operation in Operation::ALL {
                drop(
                    metrics
                        .operations
                        .get_or_create(&OperationLabels { kind, operation }),
                );
            }
            drop(metrics.copies.get_or_create(&KindLabels { kind }));
            drop(metrics.bytes.get_or_create(&KindLabels { kind }));
        }
        registry.register(
            "operations",
            "Snapshot copies created, reused, adopted, deleted, or that failed, by kind",
            metrics.operations.clone(),
        );
        registry.register(
            "copies",
            "Snapshot copies that exist, by kind",
            metrics.copies.clone(),
        );
        registry.register(
            "bytes",
            "Bytes of content the snapshot copies that exist hold, by kind",
            metrics.bytes.clone(),
        );
        metrics
    }

    /// Counts one operation on a copy of `kind`.
    pub fn record(&self, kind: ObjectKind, operation: Operation) {
        let kind = kind.as_str();
        self.operations
            .get_or_create(&OperationLabels { kind, operation })
            .inc();
    }

    /// Operations of `operation` on copies of `kind` so far.
    pub fn operations(&self, kind: ObjectKind, operation: Operation) -> u64 {
        let kind = kind.as_str();
        self.operations
            .get_or_create(&OperationLabels { kind, operation })
            .get()
    }

    /// Sets the copies of `kind` that exist, and their bytes.
    pub fn set_kept(&self, kind: ObjectKind, copies: u64, bytes: u64) {
        let kind = kind.as_str();
        let labels = KindLabels { kind };
        self.copies
            .get_or_create(&labels)
            .set(i64::try_from(copies).unwrap_or(i64::MAX));
        self.bytes
            .get_or_create(&labels)
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// The copies of `kind` that exist, and their bytes, as last set.
    pub fn kept(&self, kind: ObjectKind) -> (u64, u64) {
        let labels = KindLabels {
            kind: kind.as_str(),
        };
        let read = |gauge: &Gauge| u64::try_from(gauge.get()).unwrap_or(0);
        (
            read(&self.copies.get_or_create(&labels)),
            read(&self.bytes.get_or_create(&labels)),
        )
    }
}
