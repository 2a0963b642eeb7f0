//! The module layering of `src/` (lib.rs "Layers"): each top-level module imports
//! only modules of lower layers (contracts may use each other), adapters never
//! import one another, and the import graph has no cycles. Read from the source,
//! so a new `use crate::…` that breaks the shape fails here.

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

/// The top-level module a file belongs to (`src/engine/core.rs` → `engine`).
fn module_of(path: &Path) -> String {
    let relative = path.strip_prefix(src()).expect("under src");
    let first = relative.components().next().expect("non-empty");
    Path::new(first.as_os_str())
        .file_stem()
        .expect("a name")
        .to_string_lossy()
        .into_owned()
}

/// The top-level modules a file names with `crate::<module>`, comments left out.
fn imports(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let tail = &rest[at + "crate::".len()..];
            let name: String = tail
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert(name);
            }
            rest = tail;
        }
    }
    found
}

/// Module → the modules it imports (itself and lib-level items left out).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let layers: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let module = module_of(&file);
        if module == "lib" || BINARY.contains(&module.as_str()) {
            continue;
        }
        assert!(
            layers.contains_key(module.as_str()),
            "src/{module} has no layer in tests/it/layers.rs: add it to LAYERS (and lib.rs docs)"
        );
        let text = std::fs::read_to_string(&file).expect("read source");
        let entry = graph.entry(module.clone()).or_default();
        for import in imports(&text) {
            if import != module && layers.contains_key(import.as_str()) {
                entry.insert(import);
            }
        }
    }
    graph
}

#[test]
fn every_module_imports_only_lower_layers_and_adapters_never_each_other() {
    let layers: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (module, imports) in graph() {
        let own = layers[module.as_str()];
        for import in imports {
            let theirs = layers[import.as_str()];
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
    let graph = graph();
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
    for module in graph.keys() {
        if let Some(cycle) = visit(module, &graph, &mut Vec::new(), &mut done) {
            panic!("import cycle: {}", cycle.join(" → "));
        }
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
fn the_scanner_sees_imports_and_skips_comments() {
    let text = "use crate::model::X;\n// crate::runtime in a comment\nlet a = crate::stamp::diff; // crate::engine\n";
    assert_eq!(
        imports(text),
        BTreeSet::from(["model".to_owned(), "stamp".to_owned()])
    );
}
