//! Mutating admission: the step between defaulting and validation where the
//! apiserver calls mutating webhooks.
//!
//! The double calls no webhooks yet; this is where a caller of the
//! `MutatingWebhookConfiguration`s in the store plugs in (it gets the
//! operation, the defaulted object and, on updates, the old object, and may
//! change the object or fail the request).

use serde_json::Value;

use crate::resources::ResourceType;
use crate::server::State;
use crate::status::ApiResult;

/// The admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdmissionOperation {
    /// CREATE (POST, or apply/PUT creating the object).
    Create,
    /// UPDATE (PUT, PATCH, apply).
    Update,
}

/// Runs mutating admission on an object about to be written.
pub(crate) fn mutate(
    _state: &State,
    _rt: &ResourceType,
    _op: AdmissionOperation,
    _obj: &mut Value,
    _old: Option<&Value>,
) -> ApiResult<()> {
    Ok(())
}
