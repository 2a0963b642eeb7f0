//! The admission handler on arbitrary bytes: every body gets an answer (a 400
//! without a uid, `allowed` otherwise), never an internal error.
#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use nudge::__private::webhook::Admission;
use nudge_fuzz::admission;

static HANDLER: LazyLock<Arc<Admission>> = LazyLock::new(|| admission::handler("nudge.dev", false));

fuzz_target!(|data: &[u8]| {
    let answer = admission::review(&HANDLER, data);
    let uid = serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|v| {
            v.pointer("/request/uid")
                .and_then(|u| u.as_str())
                .map(str::to_owned)
        });
    admission::check(&answer, uid.as_deref().filter(|u| !u.is_empty()));
});
