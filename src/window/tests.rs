use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use super::{WallClock, Window, WindowError};

fn window(text: &str) -> Window {
    text.parse().unwrap()
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

#[test]
fn weekday_evening_span_crosses_midnight() {
    let w = window("Mon-Fri 22:00-06:00 Europe/Berlin");
    // 2026-11-27 is a Friday; Berlin is UTC+1 in November.
    assert!(w.contains(at("2026-11-27T21:00:00Z")), "Fri 22:00 Berlin");
    assert!(w.contains(at("2026-11-28T04:59:59Z")), "Sat 05:59 Berlin");
    assert!(!w.contains(at("2026-11-28T05:00:00Z")), "Sat 06:00 Berlin");
    assert!(!w.contains(at("2026-11-27T20:59:59Z")), "Fri 21:59 Berlin");
    // Saturday evening is not a Mon-Fri start.
    assert!(!w.contains(at("2026-11-28T21:30:00Z")));
}

#[test]
fn next_opening_is_now_inside_and_the_next_start_outside() {
    let w = window("Mon-Fri 22:00-06:00 Europe/Berlin");
    let inside = at("2026-11-27T22:00:00Z");
    assert_eq!(w.next_opening(inside), Some(inside));
    // Saturday noon: the next start is Monday 22:00 Berlin.
    assert_eq!(
        w.next_opening(at("2026-11-28T12:00:00Z")),
        Some(at("2026-11-30T21:00:00Z"))
    );
}

#[test]
fn several_spans_and_a_whole_day() {
    let w = window("Mon-Fri 22:00-06:00, Sat-Sun 00:00-24:00 UTC");
    assert!(w.contains(at("2026-11-28T12:00:00Z")), "Saturday noon");
    assert!(w.contains(at("2026-11-29T23:59:59Z")), "Sunday night");
    assert!(!w.contains(at("2026-11-30T12:00:00Z")), "Monday noon");
    assert_eq!(
        w.next_opening(at("2026-11-30T12:00:00Z")),
        Some(at("2026-11-30T22:00:00Z"))
    );
}

#[test]
fn a_range_wraps_over_the_weekend() {
    let w = window("Fri-Mon 09:00-10:00 UTC");
    for day in ["2026-11-27", "2026-11-28", "2026-11-29", "2026-11-30"] {
        assert!(w.contains(at(&format!("{day}T09:30:00Z"))), "{day}");
    }
    assert!(!w.contains(at("2026-12-01T09:30:00Z")), "Tuesday");
}

#[test]
fn daylight_saving_moves_the_opening_with_the_zone() {
    let w = window("daily 02:30-03:30 Europe/Berlin");
    // 2026-03-29: Berlin skips 02:00-03:00; the start resolves forward to 03:30
    // CEST (01:30 UTC), the end is 03:30 CEST too: no opening that day.
    let before = at("2026-03-28T23:00:00Z");
    let next = w.next_opening(before).unwrap();
    assert_eq!(next, at("2026-03-29T01:30:00Z"));
    // In summer 02:30 CEST is 00:30 UTC.
    assert!(w.contains(at("2026-07-01T00:45:00Z")));
}

#[test]
fn parse_errors_name_the_part() {
    let err = |text: &str| text.parse::<Window>().unwrap_err();
    assert_eq!(err(""), WindowError::Empty);
    assert_eq!(err("Europe/Berlin"), WindowError::Empty);
    assert_eq!(
        err("Mon 10:00-11:00 Mars/Olympus"),
        WindowError::UnknownZone("Mars/Olympus".into())
    );
    assert_eq!(
        err("Mon-Fry 10:00-11:00 UTC"),
        WindowError::InvalidDays("Mon-Fry".into())
    );
    assert_eq!(
        err("Mon 25:00-11:00 UTC"),
        WindowError::InvalidTime("25:00".into())
    );
    assert_eq!(
        err("Mon 10:60-11:00 UTC"),
        WindowError::InvalidTime("10:60".into())
    );
    assert_eq!(
        err("Mon 1:00-11:00 UTC"),
        WindowError::InvalidTime("1:00".into())
    );
    assert_eq!(
        err("Mon 24:00-11:00 UTC"),
        WindowError::InvalidTime("24:00".into())
    );
    assert_eq!(
        err("Mon10:00 UTC"),
        WindowError::InvalidSpan("Mon10:00".into())
    );
    assert_eq!(
        err("Mon 10:00 UTC"),
        WindowError::InvalidSpan("Mon 10:00".into())
    );
}

#[test]
fn round_trips_through_its_text() {
    let w = window("Sat-Sun 00:00-24:00 UTC");
    assert_eq!(w.to_string(), "Sat-Sun 00:00-24:00 UTC");
    let json = serde_json::to_string(&w).unwrap();
    assert_eq!(serde_json::from_str::<Window>(&json).unwrap(), w);
    assert_eq!(w.zone(), "UTC");
}

#[tokio::test(start_paused = true)]
async fn wall_clock_follows_the_paused_clock() {
    let anchor = at("2026-11-27T21:59:00Z");
    let start = Instant::now();
    let clock = WallClock::anchored(start, anchor);
    tokio::time::advance(Duration::from_secs(90)).await;
    assert_eq!(clock.at(Instant::now()), at("2026-11-27T22:00:30Z"));
    let opening = clock.instant(at("2026-11-27T23:00:00Z"), Instant::now());
    assert_eq!(opening - Instant::now(), Duration::from_secs(3570));
    // A time already past maps to now.
    assert_eq!(clock.instant(anchor, Instant::now()), Instant::now());
}
