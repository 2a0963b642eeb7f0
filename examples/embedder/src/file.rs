//! The `file` source: files under a root directory, watched for changes.
//!
//! ```toml
//! [sources.file]
//! root = "/srv/config"      # or NUDGE_SOURCES__FILE__ROOT=/srv/config
//! ```
//!
//! A workload annotated `nudge.dev/file-cfg: app.conf` is rolled when the
//! content of `/srv/config/app.conf` changes. References are paths relative to
//! the root; one that leaves it (`..`, an absolute path, a symbolic link
//! pointing outside) is refused. A file that does not exist is
//! [`Observation::Absent`]; a root that cannot be read is an error (nudge then
//! keeps the last fingerprints and stamps nothing), never absent.
//!
//! Change notification comes from the `notify` crate (inotify on Linux): one
//! recursive watch of the root, shared by every tracked reference. An event
//! on a file, or on a directory above it, makes its stream read the file again;
//! nudge reports only changed fingerprints.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream;
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use nudge::source::{
    Observation, ObservationStream, ObserveContext, Source, SourceError, SourceName, Tracked,
    WatchSource, watch,
};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

/// `[sources.file]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct FileConfig {
    /// The directory references are relative to (required).
    pub root: PathBuf,
}

/// Files under `root`, fingerprinted by content.
#[derive(Debug)]
pub struct FileSource {
    name: SourceName,
    root: PathBuf,
    hub: Mutex<Option<Hub>>,
}

/// The one watch of the root, and where its events go.
struct Hub {
    _watcher: RecommendedWatcher,
    changes: broadcast::Sender<Change>,
    /// The watch no longer sees the root (it was removed, or notify failed):
    /// the next stream starts a new one.
    broken: Arc<AtomicBool>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("broken", &self.broken.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What the watch saw.
#[derive(Debug, Clone)]
enum Change {
    /// Something happened to these paths.
    Paths(Arc<[PathBuf]>),
    /// Events were lost: every file must be read again.
    Rescan,
}

impl FileSource {
    /// A source named `name` reading files under `root`.
    pub fn new(name: SourceName, root: impl Into<PathBuf>) -> Self {
        Self {
            name,
            root: root.into(),
            hub: Mutex::new(None),
        }
    }

    /// The `file` source `config` describes, for
    /// `Controller::with_configured_source("file", FileSource::from_config)`.
    /// The root must be set; whether it exists is checked when files are read
    /// (an unreadable root is an error then, and retried).
    pub fn from_config(config: FileConfig) -> Result<Arc<dyn Source>, String> {
        if config.root.as_os_str().is_empty() {
            return Err(
                "root is required: set [sources.file] root or NUDGE_SOURCES__FILE__ROOT".to_owned(),
            );
        }
        let name = SourceName::new("file").map_err(|e| e.to_string())?;
        Ok(watch(Self::new(name, config.root)))
    }

    /// A receiver of the root's changes, starting the watch when there is none
    /// or the last one broke.
    fn subscribe(&self) -> Result<broadcast::Receiver<Change>, SourceError> {
        let mut hub = self.hub.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(current) = hub.as_ref()
            && !current.broken.load(Ordering::Relaxed)
        {
            return Ok(current.changes.subscribe());
        }
        let (changes, receiver) = broadcast::channel(256);
        let broken = Arc::new(AtomicBool::new(false));
        let root = self.root.clone();
        let (tx, flag) = (changes.clone(), broken.clone());
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let change = match event {
                    Ok(event) if event.need_rescan() => Change::Rescan,
                    Ok(event) => {
                        if matches!(event.kind, EventKind::Remove(_)) && event.paths.contains(&root)
                        {
                            flag.store(true, Ordering::Relaxed);
                        }
                        Change::Paths(event.paths.into())
                    }
                    Err(_) => {
                        flag.store(true, Ordering::Relaxed);
                        Change::Rescan
                    }
                };
                // No receiver: nothing is tracked right now.
                let _ = tx.send(change);
            })
            .map_err(|e| SourceError::backend(&self.name, "cannot start watching files", e))?;
        watcher
            .watch(&self.root, RecursiveMode::Recursive)
            .map_err(|e| {
                SourceError::backend(
                    &self.name,
                    format!("cannot watch root {}", self.root.display()),
                    e,
                )
            })?;
        *hub = Some(Hub {
            _watcher: watcher,
            changes,
            broken,
        });
        Ok(receiver)
    }
}

#[nudge::async_trait]
impl WatchSource for FileSource {
    fn name(&self) -> &SourceName {
        &self.name
    }

    /// A reference must stay below the root: nudge refuses any other with one
    /// `InvalidAnnotation` Event on the workload, before anything is read.
    fn check_reference(&self, reference: &str) -> Result<(), String> {
        relative_path(&self.name, reference)
            .map(drop)
            .map_err(|error| match error {
                SourceError::InvalidReference { reason, .. } => reason,
                other => other.to_string(),
            })
    }

    /// The file's current observation, then one after every event on it or a
    /// directory above it. The receiver is taken before the first read, so no
    /// change between the two is missed.
    fn watch(&self, tracked: &Tracked, cx: &ObserveContext) -> ObservationStream {
        let reference = tracked.reference().name().to_owned();
        let name = self.name.clone();
        // Refused up front (`check_reference`); kept for a caller that did not.
        if let Err(error) = relative_path(&name, &reference) {
            return stream::once(async move { Err(error) }).boxed();
        }
        let changes = match self.subscribe() {
            Ok(changes) => changes,
            Err(error) => return stream::once(async move { Err(error) }).boxed(),
        };
        let state = Stream {
            target: self.root.join(&reference),
            root: self.root.clone(),
            reference,
            name,
            cx: cx.clone(),
            changes,
            first: true,
        };
        stream::unfold(state, |mut state| async move {
            if !state.first && !state.next_change().await {
                return None;
            }
            state.first = false;
            let observation = read(&state.name, &state.root, &state.reference, &state.cx).await;
            Some((observation, state))
        })
        .boxed()
    }

    /// Reads the file now, without starting a watch (`nudge explain`, the
    /// admission webhook).
    async fn observe(
        &self,
        tracked: &Tracked,
        cx: &ObserveContext,
    ) -> Result<Observation, SourceError> {
        read(&self.name, &self.root, tracked.reference().name(), cx).await
    }
}

/// One reference's stream state.
struct Stream {
    name: SourceName,
    root: PathBuf,
    reference: String,
    /// `root` joined with the reference, as notify reports its paths.
    target: PathBuf,
    cx: ObserveContext,
    changes: broadcast::Receiver<Change>,
    first: bool,
}

impl Stream {
    /// Waits for an event that may have changed the file (taking every event
    /// already queued with it); `false` when the watch is gone.
    async fn next_change(&mut self) -> bool {
        let mut relevant = false;
        loop {
            let next = if relevant {
                match self.changes.try_recv() {
                    Ok(change) => Ok(change),
                    Err(broadcast::error::TryRecvError::Empty) => return true,
                    Err(broadcast::error::TryRecvError::Lagged(_)) => Ok(Change::Rescan),
                    Err(broadcast::error::TryRecvError::Closed) => return true,
                }
            } else {
                match self.changes.recv().await {
                    Ok(change) => Ok(change),
                    Err(broadcast::error::RecvError::Lagged(_)) => Ok(Change::Rescan),
                    Err(broadcast::error::RecvError::Closed) => Err(()),
                }
            };
            match next {
                Ok(Change::Rescan) => relevant = true,
                Ok(Change::Paths(paths)) => {
                    relevant |= paths.iter().any(|path| self.target.starts_with(path));
                }
                Err(()) => return false,
            }
        }
    }
}

/// The reference as a path below the root: relative, without `..`.
fn relative_path<'a>(name: &SourceName, reference: &'a str) -> Result<&'a Path, SourceError> {
    let path = Path::new(reference);
    let invalid = |reason: &str| SourceError::invalid_reference(name, reference, reason);
    if reference.is_empty() {
        return Err(invalid("a file path must not be empty"));
    }
    if !path.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(invalid(
            "a file path must be relative to the root, without '.' or '..'",
        ));
    }
    Ok(path)
}

/// The observation of `reference` under `root`.
async fn read(
    name: &SourceName,
    root: &Path,
    reference: &str,
    cx: &ObserveContext,
) -> Result<Observation, SourceError> {
    let relative = relative_path(name, reference)?;
    let unreadable_root = |e: io::Error| {
        SourceError::backend(name, format!("root {} is unreadable", root.display()), e)
    };
    // The root must be a readable directory before a missing file means absent.
    let _listing = tokio::fs::read_dir(root).await.map_err(unreadable_root)?;
    let root = tokio::fs::canonicalize(root)
        .await
        .map_err(unreadable_root)?;
    let real = match tokio::fs::canonicalize(root.join(relative)).await {
        Ok(real) => real,
        Err(e) if is_absent(&e) => return Ok(Observation::Absent),
        Err(e) => {
            return Err(SourceError::backend(
                name,
                format!("cannot resolve {reference}"),
                e,
            ));
        }
    };
    if !real.starts_with(&root) {
        return Err(SourceError::invalid_reference(
            name,
            reference,
            "a symbolic link leads outside the root",
        ));
    }
    match tokio::fs::read(&real).await {
        Ok(content) => Ok(Observation::Present(cx.fingerprint(&content))),
        Err(e) if is_absent(&e) => Ok(Observation::Absent),
        Err(e) => Err(SourceError::backend(
            name,
            format!("cannot read {reference}"),
            e,
        )),
    }
}

/// The file positively does not exist (a path component is missing or is not
/// a directory).
fn is_absent(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nudge::source::Algorithm;
    use nudge::testing::harness;

    use super::*;

    fn source(root: &Path) -> FileSource {
        FileSource::new(SourceName::new("file").unwrap(), root)
    }

    fn tracked(path: &str) -> Tracked {
        nudge::testing::tracked(
            SourceName::new("file").unwrap(),
            None,
            path,
            Algorithm::Native,
        )
    }

    fn cx() -> ObserveContext {
        nudge::testing::observe_context()
    }

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn content_is_fingerprinted_and_a_missing_file_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let (source, cx) = (source(dir.path()), cx());
        let app = tracked("app.conf");
        assert_eq!(
            source.observe(&app, &cx).await.unwrap(),
            Observation::Absent
        );
        std::fs::write(dir.path().join("app.conf"), "a=1").unwrap();
        let first = source.observe(&app, &cx).await.unwrap();
        assert_eq!(first, Observation::Present(cx.fingerprint(b"a=1")));
        std::fs::write(dir.path().join("app.conf"), "a=2").unwrap();
        assert_ne!(source.observe(&app, &cx).await.unwrap(), first);
        // A missing directory on the way is absent too.
        let nested = tracked("sub/app.conf");
        assert_eq!(
            source.observe(&nested, &cx).await.unwrap(),
            Observation::Absent
        );
    }

    #[tokio::test]
    async fn an_unreadable_root_is_an_error_not_absent() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        std::fs::write(&file, "x").unwrap();
        for root in [dir.path().join("missing"), file] {
            let result = source(&root).observe(&tracked("app.conf"), &cx()).await;
            assert!(
                matches!(result, Err(SourceError::Backend { .. })),
                "{root:?}: {result:?}"
            );
        }
    }

    #[tokio::test]
    async fn references_that_leave_the_root_are_refused() {
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(outer.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outer.path().join("secret"), root.join("link")).unwrap();
        let source = source(&root);
        for reference in [
            "../secret",
            "a/../../secret",
            "/etc/passwd",
            "./x",
            "",
            "link",
        ] {
            let result = source.observe(&tracked(reference), &cx()).await;
            assert!(
                matches!(result, Err(SourceError::InvalidReference { .. })),
                "{reference:?}: {result:?}"
            );
        }
    }

    /// The source as nudge runs it: the current content at once, then each
    /// change (an in-place write, a rename over the file, a delete).
    #[tokio::test]
    async fn run_reports_the_file_at_once_then_each_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.conf");
        std::fs::write(&path, "v1").unwrap();
        let cx = cx();
        let (ctx, mut engine) = harness(SourceName::new("file").unwrap(), cx.clone(), 8);
        let task = tokio::spawn(watch(source(dir.path())).run(ctx));
        engine.track(tracked("app.conf"));
        let mut next = async || {
            tokio::time::timeout(WAIT, engine.next_update())
                .await
                .expect("an update within the timeout")
                .expect("the source is running")
                .observation
        };
        assert_eq!(next().await, Observation::Present(cx.fingerprint(b"v1")));
        std::fs::write(&path, "v2").unwrap();
        // An in-place write truncates the file first: on a busy machine the
        // source may read (and report) it empty on the way to "v2".
        let mut seen = next().await;
        if seen == Observation::Present(cx.fingerprint(b"")) {
            seen = next().await;
        }
        assert_eq!(seen, Observation::Present(cx.fingerprint(b"v2")));
        // As editors and config management write: a new file renamed over it.
        std::fs::write(dir.path().join(".app.conf.tmp"), "v3").unwrap();
        std::fs::rename(dir.path().join(".app.conf.tmp"), &path).unwrap();
        assert_eq!(next().await, Observation::Present(cx.fingerprint(b"v3")));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(next().await, Observation::Absent);
        assert!(engine.is_ready());
        engine.shutdown();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("the source stops on shutdown")
            .unwrap()
            .unwrap();
    }
}
