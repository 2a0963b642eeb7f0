//! README's "Extending nudge" shows this crate's code: every `rust` block of
//! that section must appear in `src/` (whitespace aside), so an edit on either
//! side fails here instead of leaving the README wrong.

use std::path::Path;

fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_rust_snippet_of_extending_nudge_is_this_crates_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../../README.md")).unwrap();
    let section = readme
        .split("## Extending nudge")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README has an \"Extending nudge\" section");
    let mut sources = String::new();
    for entry in std::fs::read_dir(root.join("src")).unwrap() {
        let path = entry.unwrap().path();
        sources.push_str(&std::fs::read_to_string(path).unwrap());
        sources.push('\n');
    }
    let sources = squeeze(&sources);
    let snippets: Vec<&str> = section
        .split("```rust\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap())
        .collect();
    assert!(snippets.len() >= 5, "the section shows the crate's code");
    for snippet in snippets {
        assert!(
            sources.contains(&squeeze(snippet)),
            "README snippet not found in examples/embedder/src:\n{snippet}"
        );
    }
}
