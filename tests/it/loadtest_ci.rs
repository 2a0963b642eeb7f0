//! The benchmark's CI scale (`examples/loadtest.rs --scale ci`) against the `nudge`
//! binary of this build, checking counts only, never timings: no LIST per change, exactly one
//! PATCH per dependent workload per change, no PATCH after a restart (also with
//! many more unreferenced Secrets).

#[path = "../../examples/loadtest.rs"]
#[allow(dead_code)]
mod loadtest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_scale_counts_hold() {
    let out = std::env::temp_dir().join(format!("nudge-loadtest-ci-{}.json", std::process::id()));
    let report = loadtest::run(loadtest::Options {
        scale: loadtest::Scale::ci(),
        nudge: Some(env!("CARGO_BIN_EXE_nudge").into()),
        out: Some(out.clone()),
        log: None,
        verbose: true,
        nudge_env: Vec::new(),
        ready_within: std::time::Duration::from_secs(120),
    })
    .await
    .expect("the CI load test runs");
    eprint!("{}", report.table);
    let _ = std::fs::remove_file(&out);
    // nudge's log stays behind only when a check fails.
    if report.count_failures.is_empty() {
        let _ = std::fs::remove_file(out.with_extension("nudge.log"));
    }
    assert!(
        report.count_failures.is_empty(),
        "count checks failed: {:#?}",
        report.count_failures
    );
}
