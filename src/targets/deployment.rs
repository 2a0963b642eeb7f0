//! `apps/v1` Deployment.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::PodTemplateSpec;

use super::PodTemplated;
use crate::model::WorkloadKind;

impl PodTemplated for Deployment {
    const KIND: WorkloadKind = WorkloadKind::Deployment;

    fn pod_template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|spec| &spec.template)
    }
}
