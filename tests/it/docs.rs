//! The user documentation (README.md, the guide in `docs/`, CHANGELOG.md) as
//! people read it and copy from it:
//!
//! - every relative link and `#anchor` resolves (GitHub's heading slugs);
//! - every TOML snippet is a configuration `nudge check-config` accepts
//!   (```` ```toml,custom ```` with embedders' sections registered as
//!   placeholders; ```` ```toml,cargo ```` a Cargo manifest naming nudge as it
//!   can be depended on); every YAML snippet parses, manifests into their
//!   Kubernetes types (```` ```yaml,fragment ```` for patches), Helm values
//!   (```` ```yaml,helm-values ````) also render the chart and carry a valid
//!   `config`; every JSON snippet parses;
//! - every page with Rust snippets is compiled as doc tests (`src/lib.rs`
//!   includes it), and names its dependencies in its Cargo manifest snippet;
//! - the configuration reference lists exactly the keys of
//!   `config.example.toml`;
//! - the README stays one screen of commands long, every guide page is in the
//!   book's `SUMMARY.md`, and no user page reads as a development log.
//!
//! Plain file reads and parsing, except the Helm values, which `helm template`
//! renders (through `manifests`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nudge::figment::Figment;
use nudge::figment::providers::{Format, Serialized, Toml};
use nudge::source::{
    Observation, ObserveContext, PollSource, SourceError, SourceName, Tracked, poll,
};
use nudge::target::{KubeTarget, Target, TargetSettings, TemplatePath, WorkloadKind};
use nudge::{Config, Controller};
use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
use serde_json::Value as Json;

use super::manifests;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One Markdown page, its path relative to the repository's root.
struct Page {
    path: PathBuf,
    text: String,
}

impl Page {
    fn read(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let text = std::fs::read_to_string(root().join(&path))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self { path, text }
    }

    /// `path:line` of a byte offset, for messages.
    fn at(&self, offset: usize) -> String {
        let line = self.text[..offset].lines().count().max(1);
        format!("{}:{line}", self.path.display())
    }

    fn events(&self) -> impl Iterator<Item = (Event<'_>, std::ops::Range<usize>)> {
        Parser::new_ext(&self.text, Options::ENABLE_TABLES).into_offset_iter()
    }

    /// The fenced code blocks, in order.
    fn code_blocks(&self) -> Vec<CodeBlock> {
        let mut blocks = Vec::new();
        let mut open: Option<CodeBlock> = None;
        for (event, range) in self.events() {
            match event {
                Event::Start(Tag::CodeBlock(kind)) => {
                    let info = match kind {
                        CodeBlockKind::Fenced(info) => info.to_string(),
                        CodeBlockKind::Indented => String::new(),
                    };
                    let mut words = info
                        .split(|c: char| c == ',' || c.is_whitespace())
                        .filter(|word| !word.is_empty())
                        .map(str::to_owned);
                    open = Some(CodeBlock {
                        at: self.at(range.start),
                        lang: words.next().unwrap_or_default(),
                        attributes: words.collect(),
                        text: String::new(),
                    });
                }
                Event::Text(text) => {
                    if let Some(block) = open.as_mut() {
                        block.text.push_str(&text);
                    }
                }
                Event::End(TagEnd::CodeBlock) => blocks.extend(open.take()),
                _ => {}
            }
        }
        blocks
    }

    /// Every link and image destination, with where it is.
    fn links(&self) -> Vec<(String, String)> {
        self.events()
            .filter_map(|(event, range)| match event {
                Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                    Some((dest_url.to_string(), self.at(range.start)))
                }
                _ => None,
            })
            .collect()
    }

    /// The anchors of its headings, as GitHub makes them.
    fn anchors(&self) -> BTreeSet<String> {
        let mut slugger = Slugger::default();
        let mut heading: Option<String> = None;
        let mut anchors = BTreeSet::new();
        for (event, _) in self.events() {
            match event {
                Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
                Event::Text(text) | Event::Code(text) => {
                    if let Some(heading) = heading.as_mut() {
                        heading.push_str(&text);
                    }
                }
                Event::End(TagEnd::Heading(_)) => {
                    if let Some(text) = heading.take() {
                        anchors.insert(slugger.slug(&text));
                    }
                }
                _ => {}
            }
        }
        anchors
    }
}

/// A fenced code block: ```` ```lang,attribute ````.
struct CodeBlock {
    at: String,
    lang: String,
    attributes: Vec<String>,
    text: String,
}

impl CodeBlock {
    fn has(&self, attribute: &str) -> bool {
        self.attributes.iter().any(|a| a == attribute)
    }

    /// Fails on an attribute this test does not know (a typo would skip a check).
    fn only(&self, known: &[&str]) {
        for attribute in &self.attributes {
            assert!(
                known.contains(&attribute.as_str()),
                "{}: unknown attribute {attribute:?} of a {} block (known: {known:?})",
                self.at,
                self.lang
            );
        }
    }
}

/// GitHub's heading anchors: lowercase; letters, digits, `-` and `_` kept,
/// spaces made `-`, everything else dropped; a repeated anchor gets `-1`,
/// `-2`, … (mdBook makes the same ones).
#[derive(Default)]
struct Slugger {
    seen: BTreeMap<String, usize>,
}

impl Slugger {
    fn slug(&mut self, heading: &str) -> String {
        let base: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let count = self.seen.entry(base.clone()).or_insert(0);
        let slug = match *count {
            0 => base,
            n => format!("{base}-{n}"),
        };
        *count += 1;
        slug
    }
}

/// README.md, CHANGELOG.md and every page under `docs/`.
fn every_page() -> Vec<Page> {
    let mut pages = vec![Page::read("README.md"), Page::read("CHANGELOG.md")];
    let mut guide: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| path.strip_prefix(root()).unwrap().to_owned())
        .collect();
    guide.sort();
    pages.extend(guide.into_iter().map(Page::read));
    pages
}

/// The pages written for users: all but the design of record, which cites the
/// history it decided on.
fn user_pages() -> Vec<Page> {
    every_page()
        .into_iter()
        .filter(|page| page.path != Path::new("docs/design.md"))
        .collect()
}

/// The guide's pages: `docs/*.md` but the design of record.
fn guide_pages() -> Vec<Page> {
    user_pages()
        .into_iter()
        .filter(|page| page.path.starts_with("docs"))
        .collect()
}

#[test]
fn github_slugs_follow_githubs_rule() {
    let mut slugger = Slugger::default();
    let cases = [
        (
            "Troubleshooting with nudge explain",
            "troubleshooting-with-nudge-explain",
        ),
        ("What nudge.dev/auto finds", "what-nudgedevauto-finds"),
        ("[sources.consul]", "sourcesconsul"),
        (
            "5d. Progressive delivery: holds, windows and waves",
            "5d-progressive-delivery-holds-windows-and-waves",
        ),
        ("Wave's `config-hash` (old)", "waves-config-hash-old"),
        ("snake_case and kebab-case", "snake_case-and-kebab-case"),
        ("Notes", "notes"),
        ("Notes", "notes-1"),
        ("Notes", "notes-2"),
    ];
    for (heading, slug) in cases {
        assert_eq!(slugger.slug(heading), slug, "heading {heading:?}");
    }
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let pages = every_page();
    let anchors: BTreeMap<&Path, BTreeSet<String>> = pages
        .iter()
        .map(|page| (page.path.as_path(), page.anchors()))
        .collect();
    let mut broken = Vec::new();
    for page in &pages {
        for (link, at) in page.links() {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match link.split_once('#') {
                Some((path, fragment)) => (path, Some(fragment)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                page.path.clone()
            } else {
                normalize(&page.path.parent().unwrap().join(path))
            };
            if target.starts_with("..") || !root().join(&target).exists() {
                broken.push(format!(
                    "{at}: {link}: no {} in the repository",
                    target.display()
                ));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            match anchors.get(target.as_path()) {
                Some(known) if known.contains(fragment) => {}
                Some(_) => broken.push(format!("{at}: {link}: no heading #{fragment}")),
                None => broken.push(format!(
                    "{at}: {link}: an anchor into a file that is not a page"
                )),
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `path` with `.` and `..` resolved lexically (`..` beyond the start kept).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir if out.file_name().is_some_and(|name| name != "..") => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[test]
fn readme_is_one_screen_with_the_two_set_up_commands() {
    let readme = Page::read("README.md");
    let lines = readme.text.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines; keep it to 250");
    let commands: Vec<String> = readme
        .code_blocks()
        .into_iter()
        .filter(|block| block.lang == "sh")
        .flat_map(|block| block.text.lines().map(str::to_owned).collect::<Vec<_>>())
        .collect();
    for command in ["cargo run --release -- run", "./scripts/test"] {
        assert!(
            commands
                .iter()
                .any(|line| line.starts_with(&format!("{command} "))),
            "README.md lost the set-up command `{command}`"
        );
    }
}

#[test]
fn user_documentation_carries_no_development_history() {
    let commit_like = regex::Regex::new(r"[A-Za-z0-9_-]+").unwrap();
    let issue = regex::Regex::new(r"(?i)\b(issue|pull request|PR)\s*#?\d+|\w#\d+\b").unwrap();
    let log_words = [
        "this round",
        "previous round",
        "round before",
        "previous main",
    ];
    let mut found = Vec::new();
    for page in user_pages() {
        for (number, line) in page.text.lines().enumerate() {
            let at = format!("{}:{}", page.path.display(), number + 1);
            for word in commit_like.find_iter(line).map(|m| m.as_str()) {
                let hex = (7..=40).contains(&word.len())
                    && word.chars().all(|c| c.is_ascii_hexdigit())
                    && word.chars().any(|c| c.is_ascii_digit())
                    && word.chars().any(|c| c.is_ascii_alphabetic());
                if hex {
                    found.push(format!("{at}: commit-like {word:?}"));
                }
            }
            if let Some(m) = issue.find(line) {
                found.push(format!("{at}: issue reference {:?}", m.as_str()));
            }
            let lower = line.to_lowercase();
            for words in log_words.iter().filter(|words| lower.contains(*words)) {
                found.push(format!("{at}: development log {words:?}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "history belongs in git:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_code_block_says_its_language() {
    let known = ["rust", "toml", "yaml", "json", "sh", "console", "text"];
    for page in user_pages() {
        for block in page.code_blocks() {
            assert!(
                known.contains(&block.lang.as_str()),
                "{}: code block language {:?} is not one of {known:?} (rustdoc compiles \
                 unlabelled blocks of included pages as Rust)",
                block.at,
                block.lang
            );
        }
    }
}

/// A source that is never read: stands in for an embedder's own under its
/// configuration key, so that the section is accepted as that embedder's
/// binary accepts it.
struct Placeholder(SourceName);

#[nudge::async_trait]
impl PollSource for Placeholder {
    fn name(&self) -> &SourceName {
        &self.0
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(3600)
    }

    async fn observe(&self, _: &Tracked, _: &ObserveContext) -> Result<Observation, SourceError> {
        Ok(Observation::Absent)
    }
}

type Section = BTreeMap<String, Json>;

/// Sections of embedders' sources and targets in `config`: keys of
/// `[sources]` and `[targets]` that are not nudge's own.
fn custom_sections(config: &Json) -> (Vec<String>, Vec<String>) {
    let keys = |table: &str, own: &[&str]| -> Vec<String> {
        config[table]
            .as_object()
            .map(|sections| {
                sections
                    .keys()
                    .filter(|key| !own.contains(&key.as_str()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    (
        keys("sources", &["consul", "kubernetes"]),
        keys("targets", &["kinds"]),
    )
}

/// Checks `settings` as `nudge check-config` does, with embedders' sections
/// registered as placeholders when `custom`; `Err` is its message.
async fn check_config(settings: Figment, custom: bool) -> Result<(), String> {
    let values: Json = settings.extract().map_err(|e| e.to_string())?;
    let figment = Figment::from(Serialized::defaults(Config::default())).merge(settings);
    let mut controller = Controller::from_figment(figment, nudge::testing::offline_client())
        .map_err(|e| e.to_string())?;
    if custom {
        let (sources, targets) = custom_sections(&values);
        for key in sources {
            let name = SourceName::new(key.as_str()).map_err(|e| e.to_string())?;
            controller = controller.with_configured_source(&key, move |_: Section| {
                Ok::<_, String>(poll(Placeholder(name)))
            });
        }
        for key in targets {
            let client = controller.client().clone();
            let settings = TargetSettings::from_config(controller.config());
            let template = TemplatePath::parse("spec.template").unwrap();
            let kind = WorkloadKind::new("example.com", "v1", key.clone(), template);
            controller = controller.with_configured_target(&key, move |_: Section| {
                let target: Arc<dyn Target> =
                    Arc::new(KubeTarget::new(client, kind, "placeholders", settings));
                Ok::<_, String>(target)
            });
        }
    }
    controller.check().map_err(|e| e.to_string())
}

#[tokio::test]
async fn toml_snippets_are_configurations_check_config_accepts() {
    let mut problems = Vec::new();
    for page in user_pages() {
        for block in page.code_blocks().into_iter().filter(|b| b.lang == "toml") {
            block.only(&["custom", "cargo"]);
            if block.has("cargo") {
                check_cargo_manifest(&block);
                continue;
            }
            let settings = Figment::from(Toml::string(&block.text));
            if let Err(problem) = check_config(settings, block.has("custom")).await {
                problems.push(format!("{}: {problem}\n{}", block.at, block.text));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "invalid configuration snippets:\n{}",
        problems.join("\n")
    );
}

/// A Cargo manifest snippet: valid TOML, and nudge as it can be depended on
/// today: by path or git (it is not on crates.io), under the package's name.
fn check_cargo_manifest(block: &CodeBlock) {
    let manifest: toml::Table = toml::from_str(&block.text)
        .unwrap_or_else(|e| panic!("{}: not a Cargo manifest: {e}", block.at));
    let nudge = &manifest["dependencies"]["nudge"];
    assert!(
        nudge.get("path").or(nudge.get("git")).is_some(),
        "{}: nudge is not on crates.io: depend on it by path or git",
        block.at
    );
    let ours: toml::Table =
        toml::from_str(&std::fs::read_to_string(root().join("Cargo.toml")).unwrap()).unwrap();
    let package = ours["package"]["name"].as_str().unwrap();
    let named = nudge
        .get("package")
        .and_then(|p| p.as_str())
        .unwrap_or("nudge");
    assert_eq!(
        named, package,
        "{}: nudge's package is {package:?}",
        block.at
    );
}

#[test]
fn rust_snippets_compile_as_doc_tests_with_the_dependencies_shown() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let external =
        regex::Regex::new(r#"(?:^|[^\w:])([a-z_][a-z0-9_]*)::|with = "([a-z_]+)"#).unwrap();
    let std_crates = ["std", "core", "alloc", "nudge", "crate", "self", "super"];
    for page in user_pages() {
        let blocks = page.code_blocks();
        let rust: Vec<&CodeBlock> = blocks.iter().filter(|b| b.lang == "rust").collect();
        if rust.is_empty() {
            continue;
        }
        let file = page.path.file_name().unwrap().to_str().unwrap();
        assert!(
            lib.contains(&format!("include_str!(\"../docs/{file}\")")),
            "{}: its Rust snippets must run as doc tests: include it into src/lib.rs",
            page.path.display()
        );
        let cargo = blocks
            .iter()
            .find(|b| b.lang == "toml" && b.has("cargo"))
            .unwrap_or_else(|| {
                panic!(
                    "{}: Rust snippets without the Cargo manifest they need",
                    page.path.display()
                )
            });
        let manifest: toml::Table = toml::from_str(&cargo.text).unwrap();
        let dependencies: BTreeSet<String> = manifest["dependencies"]
            .as_table()
            .unwrap()
            .keys()
            .map(|name| name.replace('-', "_"))
            .collect();
        for block in rust {
            block.only(&["no_run"]);
            for captures in external.captures_iter(&block.text) {
                let name = captures.get(1).or(captures.get(2)).unwrap().as_str();
                assert!(
                    std_crates.contains(&name) || dependencies.contains(name),
                    "{}: uses the crate {name}, which the Cargo manifest at {} does not list",
                    block.at,
                    cargo.at
                );
            }
        }
    }
}

#[test]
fn yaml_and_json_snippets_parse_manifests_into_their_kinds() {
    for page in user_pages() {
        for block in page.code_blocks() {
            match block.lang.as_str() {
                "json" => {
                    block.only(&[]);
                    if let Err(e) = serde_json::from_str::<Json>(&block.text) {
                        panic!("{}: invalid JSON: {e}", block.at);
                    }
                }
                "yaml" => check_yaml(&block),
                _ => {}
            }
        }
    }
}

fn check_yaml(block: &CodeBlock) {
    block.only(&["fragment", "helm-values"]);
    for doc in manifests::documents(&block.text, &block.at) {
        let json = serde_json::to_value(&doc).unwrap();
        if !block.has("fragment") {
            check_manifest(&json, &block.at);
        }
    }
}

/// A document with `apiVersion` and `kind` of a built-in kind must be one,
/// every field in its place; other documents (custom resources, annotations
/// shown alone) only parse.
fn check_manifest(doc: &Json, at: &str) {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
    let kind = (
        doc["apiVersion"].as_str().unwrap_or_default(),
        doc["kind"].as_str().unwrap_or_default(),
    );
    match kind {
        ("v1", "ConfigMap") => parses::<ConfigMap>(doc, at),
        ("v1", "Secret") => parses::<Secret>(doc, at),
        ("v1", "Namespace") => parses::<Namespace>(doc, at),
        ("apps/v1", "Deployment") => parses::<Deployment>(doc, at),
        ("apps/v1", "StatefulSet") => parses::<StatefulSet>(doc, at),
        ("apps/v1", "DaemonSet") => parses::<DaemonSet>(doc, at),
        ("batch/v1", "CronJob") => parses::<CronJob>(doc, at),
        ("batch/v1", "Job") => parses::<Job>(doc, at),
        _ => {}
    }
}

fn parses<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Json, at: &str) {
    manifests::typed::<T>(doc, at);
}

#[tokio::test]
async fn helm_values_snippets_render_an_install_nudge_accepts() {
    for page in user_pages() {
        for block in page
            .code_blocks()
            .into_iter()
            .filter(|b| b.lang == "yaml" && b.has("helm-values"))
        {
            let install = manifests::render_chart(&block.text);
            let config = manifests::effective_config_text(&install);
            if let Err(problem) = check_config(Figment::from(Toml::string(&config)), false).await {
                panic!(
                    "{}: the install's configuration is invalid: {problem}\n{config}",
                    block.at
                );
            }
        }
    }
}

#[test]
fn configuration_reference_lists_exactly_the_keys_of_config_example() {
    let example = std::fs::read_to_string(root().join("config.example.toml")).unwrap();
    let example = example_keys(&example);
    let documented = reference_keys(&Page::read("docs/configuration.md"));
    let missing: Vec<&String> = example.difference(&documented).collect();
    let extra: Vec<&String> = documented.difference(&example).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/configuration.md and config.example.toml differ:\n  \
         in config.example.toml only: {missing:?}\n  in docs/configuration.md only: {extra:?}"
    );
}

/// Every key `config.example.toml` shows, set or commented out, as the
/// reference names it: `[[targets]]` (and `[[targets.kinds]]`) entries' keys as
/// `targets[].<key>`, a named `[sources.kubernetes.<name>]` entry's as
/// `sources.kubernetes.<name>.<key>`, a Consul instance as
/// `sources.consul.instances.<name>`. Sections of embedders' own sources and
/// targets (`[sources.file]`) are examples, not keys.
fn example_keys(text: &str) -> BTreeSet<String> {
    let header = regex::Regex::new(r"^(#\s*)?\[(\[)?([A-Za-z0-9_.-]+)\]").unwrap();
    let key = regex::Regex::new(r"^(?:#\s*)?([a-z_]+)\s*=").unwrap();
    let mut keys = BTreeSet::new();
    let mut section = Some(String::new());
    for line in text.lines() {
        if let Some(captures) = header.captures(line) {
            section = reference_section(&captures[3], captures.get(2).is_some());
            continue;
        }
        let (Some(captures), Some(section)) = (key.captures(line), section.as_ref()) else {
            continue;
        };
        let key = &captures[1];
        keys.insert(match section.as_str() {
            "" => key.to_owned(),
            "sources.consul.instances.<name>" => section.clone(),
            section => format!("{section}.{key}"),
        });
    }
    keys
}

/// How the reference names a section of `config.example.toml`; `None` for an
/// embedder's.
fn reference_section(path: &str, array: bool) -> Option<String> {
    let parts: Vec<&str> = path.split('.').collect();
    match parts.as_slice() {
        ["targets"] | ["targets", "kinds"] if array => Some("targets[]".to_owned()),
        ["sources", "kubernetes", _, rest @ ..] => Some(
            ["sources", "kubernetes", "<name>"]
                .iter()
                .chain(rest)
                .copied()
                .collect::<Vec<_>>()
                .join("."),
        ),
        ["sources", "consul", "instances", _] => Some("sources.consul.instances.<name>".to_owned()),
        ["sources", own, ..] if !["configmap", "secret", "consul", "kubernetes"].contains(own) => {
            None
        }
        ["targets", ..] => None,
        _ => Some(path.to_owned()),
    }
}

/// The keys in the first column of the reference's tables.
fn reference_keys(page: &Page) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let (mut in_head, mut column) = (false, 0);
    for (event, _) in page.events() {
        match event {
            Event::Start(Tag::TableHead) => in_head = true,
            Event::End(TagEnd::TableHead) => in_head = false,
            Event::Start(Tag::TableRow) => column = 0,
            Event::Start(Tag::TableCell) => column += 1,
            Event::Code(code) if !in_head && column == 1 => {
                keys.insert(code.to_string());
            }
            _ => {}
        }
    }
    keys
}

#[test]
fn every_guide_page_is_in_the_books_summary() {
    let summary = Page::read("docs/SUMMARY.md");
    let listed: BTreeSet<PathBuf> = summary
        .links()
        .into_iter()
        .map(|(link, _)| Path::new("docs").join(link))
        .collect();
    for page in every_page()
        .into_iter()
        .filter(|page| page.path.starts_with("docs"))
    {
        if page.path == Path::new("docs/SUMMARY.md") {
            continue;
        }
        assert!(
            listed.contains(&page.path),
            "{} is not in docs/SUMMARY.md, so the book leaves it out",
            page.path.display()
        );
    }
    assert!(!guide_pages().is_empty());
}
