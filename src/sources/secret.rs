//! Secrets: values as bytes; native fingerprints are keyed with the installation
//! key (`hmac-sha256-…`), never plain hashes of secret content.

use k8s_openapi::api::core::v1::Secret;

use super::kube::ContentObject;
use crate::fingerprint::{ObjectData, ObjectKind};

impl ContentObject for Secret {
    const KIND: ObjectKind = ObjectKind::Secret;

    fn data(&self) -> ObjectData {
        ObjectData::from_secret(self)
    }
}
