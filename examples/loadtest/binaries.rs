//! The binaries a run starts: `nudge` and `apiserver-double`, built with this
//! example's profile unless given.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

/// `<target>` from this executable's path (`<target>/<profile>/examples/loadtest`,
/// or `<target>/<profile>/deps/<test>` when run as a test).
pub fn target_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    exe.parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .map(Path::to_owned)
        .context("cannot locate the target directory from the executable path")
}

/// Builds `bin` of `package` with this example's profile (a no-op when it is up
/// to date) and returns its path. Each binary is built on its own, as a user
/// would build it, so that the dependencies' features are those of its package
/// alone.
///
/// The environment `cargo run` gave this example is not passed on: build
/// scripts that watch variables cargo sets for a package (ring's watch
/// `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME`) would see them changed, and the
/// build here and the next `cargo run` would each rebuild those dependencies
/// and everything above them, about ten minutes of both cores per run.
pub fn build(target: &Path, package: &str, bin: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("cannot locate the profile directory")?;
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_owned(),
        Some(other) => other.to_owned(),
        None => bail!("cannot tell the build profile"),
    };
    let mut cargo = std::process::Command::new(env!("CARGO"));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            cargo.env_remove(name);
        }
    }
    let status = cargo
        .args(["build", "--quiet", "--package", package, "--bin", bin])
        .args(["--profile", &profile])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target)
        .status()
        .with_context(|| format!("run cargo build for the {bin} binary"))?;
    if !status.success() {
        bail!("cargo build --bin {bin} failed: {status}");
    }
    Ok(profile_dir.join(bin))
}

/// Whether `cargo run` sets the environment variable `name` for the program it
/// runs (the Cargo book's "Environment variables Cargo sets for crates").
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO"
                | "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}
