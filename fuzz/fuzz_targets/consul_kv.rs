//! Consul KV answers, single key, recursive and names only (`?keys`), as the
//! client decodes them: arbitrary status, `X-Consul-Index` text and body, plus
//! well-formed listings with arbitrary keys, values and indexes.
//!
//! Beyond "no panic": a 200 or 404 with a numeric index is never a missing-index
//! error, any other status is a status error, a single-key read has a value
//! exactly when it has a `ModifyIndex` and only for the key asked, and a
//! well-formed listing decodes to exactly its entries (and a list of its keys to
//! exactly its names).
#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use nudge::__private::sources::consul::kv::{
    ClientError, parse_key_response, parse_keys_response, parse_prefix_response,
};
use serde_json::json;

#[derive(Arbitrary, Debug)]
struct Entry {
    key: String,
    value: Option<Vec<u8>>,
    modify_index: u64,
    create_index: u64,
    flags: u64,
}

fn status(u: &mut Unstructured<'_>) -> Result<u16> {
    if u.ratio(1, 4)? {
        return u.arbitrary();
    }
    Ok(*u.choose(&[200, 200, 200, 404, 403, 429, 500])?)
}

fn index(u: &mut Unstructured<'_>) -> Result<Option<String>> {
    Ok(match u.int_in_range(0..=4)? {
        0 => None,
        1 => Some(String::arbitrary(u)?),
        2 => Some(format!(" {} ", u.arbitrary::<u64>()?)),
        _ => Some(u.arbitrary::<u64>()?.to_string()),
    })
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let key = nudge_fuzz::pick(u, &["app/config", "app/", "", "a b"])?;
    let status = status(u)?;
    let index = index(u)?;
    let well_formed = u.arbitrary::<bool>()?;
    let (body, entries) = if well_formed {
        let mut entries: Vec<Entry> = u.arbitrary()?;
        if u.arbitrary()? {
            entries.push(Entry {
                key: key.clone(),
                value: u.arbitrary()?,
                modify_index: u.arbitrary()?,
                create_index: 1,
                flags: 0,
            });
        }
        let listing: Vec<_> = entries
            .iter()
            .map(|e| {
                json!({
                    "Key": e.key,
                    "Value": e.value.as_ref().map(|v| base64::engine::general_purpose::STANDARD.encode(v)),
                    "ModifyIndex": e.modify_index,
                    "CreateIndex": e.create_index,
                    "LockIndex": 0,
                    "Flags": e.flags,
                })
            })
            .collect();
        (serde_json::to_vec(&listing).unwrap(), Some(entries))
    } else {
        (u.arbitrary::<Vec<u8>>()?, None)
    };
    let numeric_index = index.as_deref().and_then(|i| i.trim().parse::<u64>().ok());

    let single = parse_key_response(&key, status, index.as_deref(), &body);
    let recursive = parse_prefix_response(status, index.as_deref(), &body);
    let names: Option<Vec<String>> = entries
        .as_ref()
        .map(|entries| entries.iter().map(|e| e.key.clone()).collect());
    let names_body = match &names {
        Some(names) => serde_json::to_vec(names).unwrap(),
        None => body.clone(),
    };
    let keys = parse_keys_response(status, index.as_deref(), &names_body);
    for result in [
        single.as_ref().err(),
        recursive.as_ref().err(),
        keys.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    {
        let _ = (result.to_string(), result.category());
        match result {
            ClientError::MissingIndex => assert!(numeric_index.is_none(), "{result}"),
            ClientError::Status { status: s, .. } => {
                assert_eq!(*s, status);
                assert!(status != 200 && status != 404, "{result}");
            }
            _ => assert_eq!(status, 200, "{result}"),
        }
    }
    if let Ok(read) = &single {
        assert_eq!(Some(read.index), numeric_index);
        assert_eq!(
            read.value.is_some(),
            read.modify_index.is_some(),
            "{read:?}"
        );
        if status == 404 {
            assert_eq!(read.value, None);
        }
    }
    if let Ok(read) = &recursive {
        assert_eq!(Some(read.index), numeric_index);
        if status == 404 {
            assert!(read.entries.is_empty());
        }
    }
    if let Ok(read) = &keys {
        assert_eq!(Some(read.index), numeric_index);
        if status == 404 {
            assert!(read.keys.is_empty());
        }
    }
    if let Some(names) = names
        && numeric_index.is_some()
        && status == 200
    {
        assert_eq!(
            keys.expect("a well-formed list of keys decodes").keys,
            names
        );
    }
    if let Some(entries) = entries
        && numeric_index.is_some()
        && status == 200
    {
        let read = recursive.expect("a well-formed listing decodes");
        assert_eq!(read.entries.len(), entries.len());
        for (got, sent) in read.entries.iter().zip(&entries) {
            assert_eq!(got.key, sent.key);
            assert_eq!(got.value, sent.value.clone().unwrap_or_default());
            assert_eq!(got.modify_index, sent.modify_index);
        }
        let single = single.expect("a well-formed listing decodes");
        let first = entries.iter().find(|e| e.key == key);
        assert_eq!(
            single.value,
            first.map(|e| e.value.clone().unwrap_or_default())
        );
        assert_eq!(single.modify_index, first.map(|e| e.modify_index));
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
