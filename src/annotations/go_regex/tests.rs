use serde::Deserialize;

use super::*;

const VECTORS_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/reloader-regex-vectors.json"
);

#[derive(Deserialize)]
struct Vectors {
    vectors: Vec<Vector>,
}

#[derive(Deserialize)]
struct Vector {
    entry: String,
    name: String,
    compiles: bool,
    matches: bool,
}

/// What Reloader does with `entry` and `name`: whether Go compiles
/// `^entry$`, and whether it matches.
fn reloader_reading(entry: &str, name: &str) -> (bool, bool) {
    match compile(&format!("^{entry}$")) {
        Ok(regex) => (true, regex.is_match(name)),
        Err(_) => (false, false),
    }
}

#[test]
fn entries_compile_and_match_as_go_compiles_and_matches_them() {
    let text = std::fs::read_to_string(VECTORS_PATH).expect("the vectors file");
    let vectors: Vectors = serde_json::from_str(&text).expect("valid vectors");
    assert!(vectors.vectors.len() > 200);
    let wrong: Vec<String> = vectors
        .vectors
        .iter()
        .filter(|v| reloader_reading(&v.entry, &v.name) != (v.compiles, v.matches))
        .map(|v| {
            let ours = reloader_reading(&v.entry, &v.name);
            format!(
                "{:?} on {:?}: Go (compiles, matches) = {:?}, here {ours:?} via {:?}",
                v.entry,
                v.name,
                (v.compiles, v.matches),
                translate(&format!("^{}$", v.entry))
            )
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn errors_carry_gos_messages() {
    let cases = [
        ("app-config[", GoRegexError::MissingBracket),
        ("a**", GoRegexError::InvalidRepeatOp),
        ("*a", GoRegexError::MissingRepeatArgument),
        ("a{1001}", GoRegexError::InvalidRepeatSize),
        ("(?=a)", GoRegexError::InvalidPerlOp),
        ("(?P<a-b>x)", GoRegexError::InvalidNamedCapture),
        ("\\1", GoRegexError::InvalidEscape),
        ("[z-a]", GoRegexError::InvalidCharRange),
        ("a\\", GoRegexError::TrailingBackslash),
        ("(a", GoRegexError::MissingParen),
        ("a)", GoRegexError::UnexpectedParen),
    ];
    for (pattern, error) in cases {
        assert_eq!(translate(pattern), Err(error), "{pattern:?}");
    }
    assert_eq!(
        GoRegexError::MissingBracket.to_string(),
        "missing closing ]"
    );
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    let deep = format!("{}a{}", "(".repeat(100_000), ")".repeat(100_000));
    assert_eq!(compile(&deep).err(), Some(GoRegexError::TooLarge));
    let unclosed = "(".repeat(100_000);
    assert_eq!(translate(&unclosed), Err(GoRegexError::MissingParen));
}

#[test]
fn classes_are_spelled_out_so_set_operators_stay_characters() {
    assert_eq!(
        translate("[a&&b]").as_deref(),
        Ok(r"[\x{61}\x{26}\x{26}\x{62}]")
    );
    assert_eq!(translate(r"\d").as_deref(), Ok("[0-9]"));
}
