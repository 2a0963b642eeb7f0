use std::collections::HashSet;

use tokio::time::{sleep, timeout};

use super::*;
use crate::model::WorkloadKind;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Debounce 5 s, max delay 60 s, 5 stamps/s with a burst of 50, min interval 30 s.
fn mk_config() -> EngineConfig {
    EngineConfig {
        debounce: secs(5),
        max_delay: secs(60),
        stamps_per_second: 5.0,
        burst: 50,
        min_interval: secs(30),
        stamp_on_delete: false,
    }
}

fn mk_id(name: &str) -> WorkloadId {
    WorkloadId::new(WorkloadKind::Deployment, "ns", name)
}

fn mk_scheduler() -> (Scheduler, mpsc::Receiver<WorkloadId>, Instant) {
    let (scheduler, due, _task) = Scheduler::spawn(&mk_config()).expect("valid config");
    (scheduler, due, Instant::now())
}

/// The next emitted workload and when it came, relative to `start`.
async fn next(due: &mut mpsc::Receiver<WorkloadId>, start: Instant) -> (WorkloadId, Duration) {
    let id = due.recv().await.expect("scheduler is running");
    (id, start.elapsed())
}

async fn assert_silent(due: &mut mpsc::Receiver<WorkloadId>, for_: Duration) {
    if let Ok(emitted) = timeout(for_, due.recv()).await {
        panic!("expected no emission, got {emitted:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn two_changes_inside_the_debounce_window_give_one_emission() {
    let (scheduler, mut due, start) = mk_scheduler();
    scheduler.touch(mk_id("web"), None, None);
    sleep(secs(3)).await;
    scheduler.touch(mk_id("web"), None, None);
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(8)));
    assert_silent(&mut due, secs(120)).await;
}

#[tokio::test(start_paused = true)]
async fn reference_changing_every_second_is_still_emitted_by_max_delay() {
    let (scheduler, mut due, start) = mk_scheduler();
    let toucher = scheduler.clone();
    tokio::spawn(async move {
        for _ in 0..90 {
            toucher.touch(mk_id("web"), None, None);
            sleep(secs(1)).await;
        }
    });
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(60)));
}

#[tokio::test(start_paused = true)]
async fn burst_of_1000_due_workloads_is_released_at_the_configured_rate() {
    let (scheduler, mut due, start) = mk_scheduler();
    for n in 0..1000 {
        scheduler.touch(mk_id(&format!("w{n}")), None, None);
    }
    let mut seen = HashSet::new();
    let mut times = Vec::new();
    while times.len() < 1000 {
        let (id, at) = next(&mut due, start).await;
        assert!(seen.insert(id.clone()), "{id} emitted twice");
        times.push(at);
    }
    let emitted_by = |at: Duration| times.iter().filter(|t| **t <= at).count();
    // Due at 5 s: the burst of 50 at once, then one every 200 ms.
    assert_eq!(emitted_by(ms(4_900)), 0);
    assert_eq!(emitted_by(ms(5_000)), 50);
    assert_eq!(emitted_by(ms(5_100)), 50);
    assert_eq!(emitted_by(ms(6_100)), 55);
    assert_eq!(emitted_by(ms(7_100)), 60);
    assert_eq!(emitted_by(ms(15_100)), 100);
    assert_eq!(emitted_by(ms(194_900)), 999);
    assert_eq!(emitted_by(ms(195_000)), 1000);
    assert_silent(&mut due, secs(60)).await;
}

#[tokio::test(start_paused = true)]
async fn per_workload_min_interval_delays_a_restamp() {
    let (scheduler, mut due, start) = mk_scheduler();
    scheduler.touch(mk_id("web"), None, None);
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(5)));
    scheduler.stamped(mk_id("web"));
    sleep(secs(1)).await;
    scheduler.touch(mk_id("web"), None, None);
    // Debounced at 11 s, but the stamp written at 5 s holds it until 35 s.
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(35)));
}

#[tokio::test(start_paused = true)]
async fn emission_without_a_written_stamp_does_not_delay_the_next() {
    let (scheduler, mut due, start) = mk_scheduler();
    scheduler.touch(mk_id("web"), None, None);
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(5)));
    // No-op diff: the consumer reports nothing.
    sleep(secs(1)).await;
    scheduler.touch(mk_id("web"), None, None);
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(11)));
}

#[tokio::test(start_paused = true)]
async fn per_workload_overrides_replace_the_defaults() {
    let (scheduler, mut due, start) = mk_scheduler();
    let touch = || scheduler.touch(mk_id("web"), Some(secs(1)), Some(secs(10)));
    touch();
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(1)));
    scheduler.stamped(mk_id("web"));
    sleep(secs(1)).await;
    touch();
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(11)));
}

#[tokio::test(start_paused = true)]
async fn touches_while_held_by_pacing_merge_into_one_emission() {
    let (scheduler, mut due, start) = mk_scheduler();
    scheduler.touch(mk_id("web"), None, None);
    assert_eq!(next(&mut due, start).await.1, secs(5));
    scheduler.stamped(mk_id("web"));
    sleep(secs(1)).await;
    scheduler.touch(mk_id("web"), None, None);
    sleep(secs(14)).await;
    scheduler.touch(mk_id("web"), None, None);
    sleep(secs(10)).await;
    scheduler.touch(mk_id("web"), None, None);
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(35)));
    assert_silent(&mut due, secs(120)).await;
}

#[tokio::test(start_paused = true)]
async fn workload_held_by_min_interval_does_not_hold_up_others() {
    let (scheduler, mut due, start) = mk_scheduler();
    scheduler.touch(mk_id("web"), None, None);
    next(&mut due, start).await;
    scheduler.stamped(mk_id("web"));
    sleep(secs(1)).await;
    scheduler.touch(mk_id("web"), None, None);
    scheduler.touch(mk_id("api"), None, None);
    assert_eq!(next(&mut due, start).await, (mk_id("api"), secs(11)));
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(35)));
}

#[tokio::test(start_paused = true)]
async fn forgotten_workload_is_not_emitted_and_loses_its_pacing() {
    let (scheduler, mut due, start) = mk_scheduler();
    scheduler.touch(mk_id("web"), None, None);
    sleep(secs(1)).await;
    scheduler.forget(mk_id("web"));
    assert_silent(&mut due, secs(100)).await;

    scheduler.touch(mk_id("web"), None, None);
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(106)));
    scheduler.stamped(mk_id("web"));
    scheduler.forget(mk_id("web"));
    scheduler.touch(mk_id("web"), None, None);
    assert_eq!(next(&mut due, start).await, (mk_id("web"), secs(111)));
}

#[tokio::test(start_paused = true)]
async fn queue_depth_counts_pending_workloads() {
    let (scheduler, mut due, start) = mk_scheduler();
    for name in ["a", "b", "c"] {
        scheduler.touch(mk_id(name), None, None);
    }
    sleep(secs(1)).await;
    assert_eq!(scheduler.queue_depth(), 3);
    for _ in 0..3 {
        next(&mut due, start).await;
    }
    sleep(ms(1)).await;
    assert_eq!(scheduler.queue_depth(), 0);
}

#[tokio::test(start_paused = true)]
async fn stalled_consumer_gets_the_channel_then_the_rate() {
    let config = EngineConfig {
        burst: 2,
        ..mk_config()
    };
    let (scheduler, mut due, _task) = Scheduler::spawn(&config).expect("valid config");
    let start = Instant::now();
    for n in 0..10 {
        scheduler.touch(mk_id(&format!("w{n}")), None, None);
    }
    // Nobody reads for a minute: tokens must not be spent on ids that cannot be sent.
    sleep(secs(60)).await;
    let mut times = Vec::new();
    for _ in 0..10 {
        times.push(next(&mut due, start).await.1);
    }
    // Two were waiting in the channel; then the refilled burst of 2, then 5/s.
    let at_60 = times.iter().filter(|t| **t == secs(60)).count();
    assert_eq!(at_60, 4, "{times:?}");
    assert_eq!(times[9], secs(60) + ms(1_200));
}

#[tokio::test(start_paused = true)]
async fn slow_consumer_receives_every_workload() {
    let config = EngineConfig {
        burst: 2,
        ..mk_config()
    };
    let (scheduler, mut due, _task) = Scheduler::spawn(&config).expect("valid config");
    let start = Instant::now();
    for n in 0..10 {
        scheduler.touch(mk_id(&format!("w{n}")), None, None);
    }
    let mut times = Vec::new();
    for _ in 0..10 {
        sleep(secs(10)).await;
        times.push(next(&mut due, start).await.1);
    }
    let expected: Vec<Duration> = (1..=10).map(|n| secs(10 * n)).collect();
    assert_eq!(times, expected);
}

#[tokio::test(start_paused = true)]
async fn task_ends_when_every_handle_is_dropped() {
    let (scheduler, due, task) = Scheduler::spawn(&mk_config()).expect("valid config");
    drop(scheduler);
    timeout(secs(1), task)
        .await
        .expect("task ended")
        .expect("no panic");
    drop(due);
}
