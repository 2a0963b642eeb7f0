//! ConfigMaps: `data` as text, `binaryData` as bytes; fingerprints in the clear
//! (`sha256-…`).

use k8s_openapi::api::core::v1::ConfigMap;

use super::objects::ContentObject;
use crate::fingerprint::{ObjectData, ObjectKind};

impl ContentObject for ConfigMap {
    const KIND: ObjectKind = ObjectKind::ConfigMap;

    fn data(&self) -> ObjectData {
        ObjectData::from_config_map(self)
    }
}
