//! Durations in configuration: read as humantime reads them (`30s`, `1h 30m`,
//! `365d`), printed as a person would write them, in days at most, so that
//! `nudge check-config` shows `365d` for a year rather than humantime's
//! `11months 30days 3h 50m 24s`, and what it prints reads back to the same
//! value. jiff's friendly printer writes the units humantime parses.

use std::time::Duration;

use jiff::fmt::friendly::{Designator, SpanPrinter};
use jiff::{Span, SpanRound, Unit};
use serde::{Deserializer, Serializer};

/// `duration` as a person writes it: whole days, hours, minutes, seconds and
/// fractions, largest first (`365d`, `1h 30m`, `500ms`, `0s`).
pub(crate) fn human(duration: Duration) -> String {
    let printer = SpanPrinter::new().designator(Designator::HumanTime);
    let balanced = Span::try_from(duration)
        .and_then(|span| span.round(SpanRound::new().largest(Unit::Day).days_are_24_hours()));
    match balanced {
        Ok(span) => printer.span_to_string(&span),
        // Beyond what a span holds (thousands of years): humantime's own.
        Err(_) => humantime::format_duration(duration).to_string(),
    }
}

/// For `#[serde(with = "duration")]`.
pub(crate) fn serialize<S: Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&human(*duration))
}

/// For `#[serde(with = "duration")]`.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    humantime_serde::deserialize(deserializer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_people_write_them() {
        let cases = [
            (Duration::from_secs(365 * 86_400), "365d"),
            (Duration::from_secs(5), "5s"),
            (Duration::from_secs(90 * 60), "1h 30m"),
            (Duration::from_secs(86_400 + 1), "1d 1s"),
            (Duration::from_millis(1500), "1s 500ms"),
            (Duration::ZERO, "0s"),
        ];
        for (duration, text) in cases {
            assert_eq!(human(duration), text);
        }
    }

    #[test]
    fn what_is_printed_reads_back_to_the_same_duration() {
        for duration in [
            Duration::from_secs(365 * 86_400),
            Duration::from_secs(30 * 86_400 + 7),
            Duration::from_micros(1_000_001),
            Duration::from_nanos(3),
            Duration::from_secs(600),
        ] {
            let text = human(duration);
            assert_eq!(humantime::parse_duration(&text), Ok(duration), "{text}");
        }
    }
}
