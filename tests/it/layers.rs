//! The shape of `src/` (lib.rs "Layers", design §1a), read from the source so
//! that a new `use` or a long function that breaks it fails here:
//!
//! - each top-level module imports only modules of lower layers (contracts may
//!   use each other), adapters never import one another, and the import graph
//!   of top-level modules has no cycles;
//! - within a module tree (the files of `engine`, of `sources`, …) the
//!   submodules import one another without cycles either;
//! - no function in [`SHORT_FUNCTIONS`] is longer than [`MAX_FUNCTION_LINES`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of the library and its layer.
const LAYERS: &[(&str, u8)] = &[
    ("model", 0),
    ("small", 0),
    ("errors", 0),
    ("fingerprint", 1),
    ("rate", 1),
    ("health", 1),
    ("config", 1),
    ("telemetry", 1),
    ("scope", 1),
    ("discovery", 1),
    ("annotations", 1),
    ("stamp", 1),
    ("snapshot", 1),
    ("window", 1),
    ("outcome", 1),
    ("delivery", 1),
    ("sources", 2),
    ("targets", 2),
    ("webhook", 2),
    ("events", 2),
    ("copies", 2),
    ("engine", 3),
    ("runtime", 4),
    ("explain", 3),
    ("cli", 5),
];

/// Files of the binary, not the library: they use `nudge::…`, never `crate::…`.
const BINARY: &[&str] = &["main"];

/// The module trees where decisions live: no function in them (tests left
/// out) may be longer than [`MAX_FUNCTION_LINES`].
const SHORT_FUNCTIONS: &[&str] = &["engine", "stamp", "runtime"];

/// The most lines a function may span, from its `fn` to its closing brace.
const MAX_FUNCTION_LINES: usize = 80;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// One source file of the library: its module path (`src/engine/core.rs` →
/// `engine::core`, `src/engine/mod.rs` → `engine`) and its code, comments and
/// literals blanked out.
struct SourceFile {
    module: String,
    code: String,
}

impl SourceFile {
    /// The top-level module it belongs to.
    fn tree(&self) -> &str {
        top(&self.module)
    }
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

fn module_of(path: &Path) -> String {
    let relative = path.strip_prefix(src()).expect("under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// Every file of the library (not `lib.rs`, not the binary's).
fn sources() -> Vec<SourceFile> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| SourceFile {
            module: module_of(&path),
            code: code_only(&std::fs::read_to_string(&path).expect("read source")),
        })
        .filter(|file| file.module != "lib" && !BINARY.contains(&file.module.as_str()))
        .collect()
}

/// `text` with comments and the contents of string and character literals
/// replaced by spaces (line breaks kept, so lines still count).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        let skip = match rest {
            ['/', '/', ..] => rest.iter().position(|c| *c == '\n').unwrap_or(rest.len()),
            ['/', '*', ..] => block_comment_len(rest),
            ['r', '#' | '"', ..] if !ident_before(&chars, i) => raw_string_len(rest),
            ['b', 'r', '#' | '"', ..] if !ident_before(&chars, i) => 1 + raw_string_len(&rest[1..]),
            ['"', ..] => string_len(rest),
            ['\'', '\\', ..] => char_len(rest),
            ['\'', _, '\'', ..] => 3,
            _ => 0,
        };
        if skip == 0 {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        for c in &chars[i..i + skip] {
            out.push(if *c == '\n' { '\n' } else { ' ' });
        }
        i += skip;
    }
    out
}

fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn ident_before(chars: &[char], at: usize) -> bool {
    at > 0 && ident_char(chars[at - 1])
}

/// The length of the (nested) block comment `rest` starts with.
fn block_comment_len(rest: &[char]) -> usize {
    let (mut depth, mut i) = (0, 0);
    while i < rest.len() {
        match &rest[i..] {
            ['/', '*', ..] => (depth, i) = (depth + 1, i + 2),
            ['*', '/', ..] => (depth, i) = (depth - 1, i + 2),
            _ => i += 1,
        }
        if depth == 0 {
            return i;
        }
    }
    rest.len()
}

/// The length of the string literal `rest` starts with (at its `"`).
fn string_len(rest: &[char]) -> usize {
    let mut i = 1;
    while i < rest.len() {
        match rest[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    rest.len()
}

/// The length of the raw string literal `rest` starts with (at its `r`).
fn raw_string_len(rest: &[char]) -> usize {
    let hashes = rest[1..].iter().take_while(|c| **c == '#').count();
    if rest.get(1 + hashes) != Some(&'"') {
        return 0;
    }
    let mut i = 2 + hashes;
    while i < rest.len() {
        if rest[i] == '"'
            && rest[i + 1..]
                .iter()
                .take(hashes)
                .filter(|c| **c == '#')
                .count()
                == hashes
        {
            return i + 1 + hashes;
        }
        i += 1;
    }
    rest.len()
}

/// The length of the escaped character literal `rest` starts with.
fn char_len(rest: &[char]) -> usize {
    rest[2..]
        .iter()
        .position(|c| *c == '\'')
        .map_or(rest.len(), |end| end + 3)
}

// === imports ===

/// The child modules `code` declares in files of their own (`mod name;`).
fn declared_children(code: &str) -> BTreeSet<String> {
    declarations(code).map(|(name, _)| name).collect()
}

/// Each `mod name;` of `code`, and whether it is `#[cfg(test)]`.
fn declarations(code: &str) -> impl Iterator<Item = (String, bool)> + '_ {
    let lines: Vec<&str> = code.lines().collect();
    (0..lines.len()).filter_map(move |at| {
        let line = lines[at].trim();
        let line = line.strip_prefix("pub ").unwrap_or(line);
        let line = ["pub(crate) ", "pub(super) "]
            .iter()
            .find_map(|vis| line.strip_prefix(vis))
            .unwrap_or(line);
        let name = line.strip_prefix("mod ")?.strip_suffix(';')?.trim();
        let test = at > 0 && lines[at - 1].trim() == "#[cfg(test)]";
        Some((name.to_owned(), test))
    })
}

/// Every path `code` names that starts with `crate`, `super`, `self` or one of
/// `children`, as its segments; `use a::{b, c::d}` names `a::b` and `a::c::d`.
fn paths(code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !ident_char(chars[i]) || ident_before(&chars, i) || (i > 0 && chars[i - 1] == ':') {
            i += 1;
            continue;
        }
        let start = i;
        let word = read_ident(&chars, &mut i);
        let anchored =
            ["crate", "super", "self"].contains(&word.as_str()) || children.contains(&word);
        if anchored && chars[i..].starts_with(&[':', ':']) {
            i = start;
            read_path(&chars, &mut i, Vec::new(), &mut found);
        }
    }
    found
}

fn read_ident(chars: &[char], i: &mut usize) -> String {
    let start = *i;
    while *i < chars.len() && ident_char(chars[*i]) {
        *i += 1;
    }
    chars[start..*i].iter().collect()
}

/// Reads the path at `i` after `prefix`, a `{…}` group of paths included.
fn read_path(chars: &[char], i: &mut usize, mut prefix: Vec<String>, found: &mut Vec<Vec<String>>) {
    loop {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1;
        }
        if chars.get(*i) == Some(&'{') {
            *i += 1;
            read_group(chars, i, &prefix, found);
            return;
        }
        let segment = read_ident(chars, i);
        if segment.is_empty() {
            break;
        }
        prefix.push(segment);
        if !chars[*i..].starts_with(&[':', ':']) {
            break;
        }
        *i += 2;
    }
    found.push(prefix);
}

/// Reads the paths of a `{…}` group (after its `{`), each after `prefix`.
fn read_group(chars: &[char], i: &mut usize, prefix: &[String], found: &mut Vec<Vec<String>>) {
    while *i < chars.len() {
        match chars[*i] {
            '}' => {
                *i += 1;
                return;
            }
            ',' => *i += 1,
            c if c.is_whitespace() => *i += 1,
            c if ident_char(c) => {
                read_path(chars, i, prefix.to_vec(), found);
                // `as name` and `*` are not modules.
                while *i < chars.len() && !matches!(chars[*i], ',' | '}') {
                    *i += 1;
                }
            }
            _ => *i += 1,
        }
    }
}

/// The file module `path`, named in file module `from` (which declares
/// `children`), is in: the longest of `modules` it starts with.
fn resolve(
    from: &str,
    children: &BTreeSet<String>,
    path: &[String],
    modules: &BTreeSet<String>,
) -> Option<String> {
    let mut base: Vec<&str> = from.split("::").collect();
    let rest = match path.first()?.as_str() {
        "crate" => {
            base.clear();
            &path[1..]
        }
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            base.truncate(base.len().saturating_sub(ups));
            &path[ups..]
        }
        "self" => &path[1..],
        child if children.contains(child) => path,
        _ => return None,
    };
    let full: Vec<&str> = base
        .into_iter()
        .chain(rest.iter().map(String::as_str))
        .filter(|s| *s != "self")
        .collect();
    (1..=full.len())
        .rev()
        .map(|len| full[..len].join("::"))
        .find(|candidate| modules.contains(candidate))
}

/// Whether `ancestor` encloses `module` (`engine` encloses `engine::core`).
fn encloses(ancestor: &str, module: &str) -> bool {
    module.len() > ancestor.len()
        && module.starts_with(ancestor)
        && module[ancestor.len()..].starts_with("::")
}

/// File module → the file modules it imports. A module's use of what encloses
/// it (a child naming its parent's items) is not an import: Rust nests it
/// there, and the parent's use of its children is the direction that counts.
fn file_graph(files: &[SourceFile]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = files.iter().map(|f| f.module.clone()).collect();
    files
        .iter()
        .map(|file| {
            let children = declared_children(&file.code);
            let imports = paths(&file.code, &children)
                .iter()
                .filter_map(|path| resolve(&file.module, &children, path, &modules))
                .filter(|target| *target != file.module && !encloses(target, &file.module))
                .collect();
            (file.module.clone(), imports)
        })
        .collect()
}

/// Top-level module → the top-level modules it imports.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let layers: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let files = sources();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        assert!(
            layers.contains_key(file.tree()),
            "src/{} has no layer in tests/it/layers.rs: add it to LAYERS (and lib.rs docs)",
            file.tree()
        );
        graph.entry(file.tree().to_owned()).or_default();
    }
    for (module, imports) in file_graph(&files) {
        let entry = graph.entry(top(&module).to_owned()).or_default();
        entry.extend(
            imports
                .iter()
                .map(|import| top(import).to_owned())
                .filter(|import| import != top(&module)),
        );
    }
    graph
}

/// A cycle of `graph`, as the modules along it, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search; a module met again while on the stack closes a cycle.
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|m| m == module) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(module.to_owned());
            return Some(cycle);
        }
        if done.contains(module) {
            return None;
        }
        stack.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(module, graph, &mut Vec::new(), &mut done))
}

#[test]
fn every_module_imports_only_lower_layers_and_adapters_never_each_other() {
    let layers: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (module, imports) in graph() {
        let own = layers[module.as_str()];
        for import in imports {
            let Some(theirs) = layers.get(import.as_str()).copied() else {
                continue;
            };
            let allowed = theirs < own || (own <= 1 && theirs <= own);
            if !allowed {
                wrong.push(format!(
                    "{module} (layer {own}) imports {import} (layer {theirs})"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
}

#[test]
fn the_import_graph_has_no_cycles() {
    if let Some(cycle) = cycle(&graph()) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn no_module_tree_has_an_import_cycle_between_its_submodules() {
    let within: BTreeMap<String, BTreeSet<String>> = file_graph(&sources())
        .into_iter()
        .map(|(module, imports)| {
            let tree = top(&module).to_owned();
            let imports = imports.into_iter().filter(|i| top(i) == tree).collect();
            (module, imports)
        })
        .collect();
    if let Some(cycle) = cycle(&within) {
        panic!(
            "import cycle within src/{}: {}",
            top(&cycle[0]),
            cycle.join(" → ")
        );
    }
}

#[test]
fn sources_targets_and_the_webhook_never_import_the_runtime() {
    for (module, imports) in graph() {
        if ["sources", "targets", "webhook"].contains(&module.as_str()) {
            assert!(
                !imports.contains("runtime") && !imports.contains("engine"),
                "{module} imports {imports:?}"
            );
        }
    }
}

#[test]
fn the_scanner_sees_imports_and_skips_comments_and_literals() {
    let files = [
        (
            "engine::core",
            "mod follow;\nuse crate::model::X;\n// crate::runtime in a comment\nlet a = crate::stamp::diff(\"crate::webhook\"); /* crate::cli */\nuse super::{graph::Graph, queue};\nfollow::start(); self::plan::gate();\n",
        ),
        (
            "engine::core::follow",
            "use super::Core; use super::super::metrics::M;",
        ),
    ];
    let modules: BTreeSet<String> = [
        "model",
        "stamp",
        "runtime",
        "webhook",
        "cli",
        "engine",
        "engine::core",
        "engine::core::follow",
        "engine::core::plan",
        "engine::graph",
        "engine::queue",
        "engine::metrics",
    ]
    .map(str::to_owned)
    .into();
    let imports = |(module, text): (&str, &str)| -> BTreeSet<String> {
        let code = code_only(text);
        let children = declared_children(&code);
        paths(&code, &children)
            .iter()
            .filter_map(|path| resolve(module, &children, path, &modules))
            .filter(|target| target != module && !encloses(target, module))
            .collect()
    };
    assert_eq!(
        imports(files[0]),
        [
            "engine::core::follow",
            "engine::core::plan",
            "engine::graph",
            "engine::queue",
            "model",
            "stamp",
        ]
        .map(str::to_owned)
        .into()
    );
    assert_eq!(
        imports(files[1]),
        ["engine::metrics".to_owned()].into(),
        "a child naming its parent imports nothing"
    );
}

// === function lengths ===

/// Each function of `code` outside `#[cfg(test)]` items: its name, the line
/// of its `fn` (from 1) and how many lines it spans to its closing brace.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let line_at = |at: usize| chars[..at].iter().filter(|c| **c == '\n').count() + 1;
    let test_attribute: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i..].starts_with(&test_attribute) {
            i = item_end(&chars, i);
            continue;
        }
        if !chars[i..].starts_with(&['f', 'n', ' ']) || ident_before(&chars, i) {
            i += 1;
            continue;
        }
        let mut at = i + 3;
        let name = read_ident(&chars, &mut at);
        let open = signature_end(&chars, at);
        if name.is_empty() || chars.get(open) != Some(&'{') {
            i = at;
            continue;
        }
        let close = block_end(&chars, open);
        found.push((name, line_at(i), line_at(close) - line_at(i) + 1));
        i += 3;
    }
    found
}

/// The index of the `{` opening the body of the item whose signature starts
/// at `at`, or of the `;` ending it: the first outside parentheses and
/// brackets (`[u8; 4]` is a type).
fn signature_end(chars: &[char], at: usize) -> usize {
    let mut depth = 0usize;
    for (offset, c) in chars[at..].iter().enumerate() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            '{' | ';' if depth == 0 => return at + offset,
            _ => {}
        }
    }
    chars.len()
}

/// Where the item starting at `at` ends: after its `;`, or its `{…}` block.
fn item_end(chars: &[char], at: usize) -> usize {
    let end = signature_end(chars, at);
    match chars.get(end) {
        Some('{') => block_end(chars, end) + 1,
        _ => end + 1,
    }
}

/// The index of the brace closing the block opened at `open`.
fn block_end(chars: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (offset, c) in chars[open..].iter().enumerate() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + offset;
                }
            }
            _ => {}
        }
    }
    chars.len() - 1
}

/// The file modules declared `#[cfg(test)] mod …;`: tests, not code.
fn test_modules(files: &[SourceFile]) -> BTreeSet<String> {
    files
        .iter()
        .flat_map(|file| {
            declarations(&file.code)
                .filter(|(_, test)| *test)
                .map(|(name, _)| format!("{}::{name}", file.module))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn no_function_where_decisions_live_is_longer_than_80_lines() {
    let files = sources();
    let tests = test_modules(&files);
    let mut long = Vec::new();
    for file in &files {
        let is_test = tests
            .iter()
            .any(|t| *t == file.module || encloses(t, &file.module));
        if !SHORT_FUNCTIONS.contains(&file.tree()) || is_test {
            continue;
        }
        for (name, line, lines) in functions(&file.code) {
            if lines > MAX_FUNCTION_LINES {
                long.push(format!(
                    "{} {name} (line {line}): {lines} lines",
                    file.module
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (split them where their decisions are):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_function_scanner_counts_from_fn_to_its_closing_brace_and_skips_tests() {
    let text = "fn short() {\n    let s = \"}\";\n}\n\ntrait T {\n    fn declared(&self) -> [u8; 2];\n}\n\npub(crate) fn longer(x: u8) -> u8 {\n    let c = '}';\n    // }\n    x\n}\n\n#[cfg(test)]\nmod tests {\n    fn in_a_test() {}\n}\n";
    assert_eq!(
        functions(&code_only(text)),
        [("short".to_owned(), 1, 3), ("longer".to_owned(), 9, 5)]
    );
}
