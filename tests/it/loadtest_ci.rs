//! The benchmark's CI scale (`examples/loadtest --scale ci`) against the `nudge`
//! and `apiserver-double` binaries of this build, checking counts only, never
//! timings: no LIST per change, exactly one PATCH per dependent workload per
//! change, no PATCH after a restart (also with many more unreferenced Secrets).

#[path = "../../examples/loadtest/main.rs"]
#[allow(dead_code)]
mod loadtest;

use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_scale_counts_hold() {
    let out = std::env::temp_dir().join(format!("nudge-loadtest-ci-{}.json", std::process::id()));
    let nudge = Path::new(env!("CARGO_BIN_EXE_nudge"));
    // The double's binary is another package's: cargo builds it beside nudge's for
    // the double's own tests (`cargo nextest run --workspace`, scripts/test).
    let double = nudge.with_file_name("apiserver-double");
    assert!(
        double.exists(),
        "{} is missing: build it with `cargo build -p apiserver-double` (or run the workspace's tests)",
        double.display()
    );
    let report = loadtest::run(loadtest::Options {
        scale: loadtest::Scale::ci(),
        nudge: Some(nudge.into()),
        double: Some(double),
        out: Some(out.clone()),
        log: None,
        verbose: true,
        nudge_env: Vec::new(),
        ready_within: loadtest::READY_WITHIN,
    })
    .await
    .expect("the CI load test runs");
    eprint!("{}", report.table);
    let _ = std::fs::remove_file(&out);
    // nudge's and the double's logs stay behind only when a check fails.
    if report.count_failures.is_empty() {
        let _ = std::fs::remove_file(out.with_extension("nudge.log"));
        let _ = std::fs::remove_file(out.with_extension("double.log"));
    }
    assert!(
        report.count_failures.is_empty(),
        "count checks failed: {:#?}",
        report.count_failures
    );
}
