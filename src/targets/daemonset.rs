//! `apps/v1` DaemonSet.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::PodTemplated;
use crate::model::WorkloadKind;

impl PodTemplated for DaemonSet {
    const KIND: WorkloadKind = WorkloadKind::DaemonSet;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|spec| &spec.template)
    }
}
