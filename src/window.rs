//! Maintenance windows (design §5d): weekly spans in a named IANA time zone,
//! `Mon-Fri 22:00-06:00, Sat-Sun 00:00-24:00 Europe/Berlin`.
//!
//! Pure: every question takes the time it is asked at. The engine core asks
//! with [`WallClock`], which maps its monotonic instants to wall time, so tests
//! drive windows with tokio's paused clock.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::time::Instant;

/// Minutes in a day: the latest end a span may have (`24:00`).
const DAY_MINUTES: u16 = 24 * 60;
/// The longest value echoed back in an error.
const ECHOED: usize = 40;

/// When rolling stamps may be written: weekly spans in one time zone. Written
/// and read as its text form (see the module docs).
#[derive(Clone)]
pub struct Window {
    spans: Vec<Span>,
    zone: TimeZone,
    /// The text it was parsed from, for messages and serialization.
    text: String,
}

/// One weekly span: on these days, from `start` to `end` (minutes since
/// midnight; an `end` at or before `start` ends on the next day).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    /// Bit `i`: Monday + i.
    days: u8,
    start: u16,
    end: u16,
}

/// Why a window's text does not parse. Each variant shows the offending part.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WindowError {
    /// Nothing but a zone, or nothing at all.
    #[error(
        "expected weekly spans and a time zone, e.g. \"Mon-Fri 22:00-06:00, Sat-Sun 00:00-24:00 Europe/Berlin\""
    )]
    Empty,
    /// The last word is not an IANA time zone name this build knows.
    #[error("unknown time zone {0:?} (expected an IANA name such as Europe/Berlin or UTC)")]
    UnknownZone(String),
    /// A span is not `<days> <HH:MM>-<HH:MM>`.
    #[error("invalid span {0:?}: expected <days> <HH:MM>-<HH:MM>, e.g. \"Mon-Fri 22:00-06:00\"")]
    InvalidSpan(String),
    /// A day is not `Mon` … `Sun` (or a range of them, or `daily`).
    #[error("invalid days {0:?}: expected Mon … Sun, a range such as Mon-Fri, or daily")]
    InvalidDays(String),
    /// A time is not `HH:MM` between `00:00` and `24:00`.
    #[error("invalid time {0:?}: expected HH:MM from 00:00 to 24:00")]
    InvalidTime(String),
}

// === impl Window ===

impl Window {
    /// Whether `at` falls inside one of the spans.
    pub(crate) fn contains(&self, at: Timestamp) -> bool {
        self.occurrences(at)
            .any(|(start, end)| start <= at && at < end)
    }

    /// `at` itself when the window is open then, else the next time it opens.
    /// `None` only when no span opens within the next week (the time zone's
    /// rules skip every start, which no real zone does).
    pub(crate) fn next_opening(&self, at: Timestamp) -> Option<Timestamp> {
        if self.contains(at) {
            return Some(at);
        }
        self.occurrences(at)
            .map(|(start, _)| start)
            .filter(|start| *start > at)
            .min()
    }

    /// `at` in the window's zone, e.g. `2026-11-30T22:00:00+01:00[Europe/Berlin]`.
    pub(crate) fn in_zone(&self, at: Timestamp) -> jiff::Zoned {
        at.to_zoned(self.zone.clone())
    }

    /// The time zone's name.
    pub(crate) fn zone(&self) -> &str {
        self.zone.iana_name().unwrap_or("UTC")
    }

    /// Every span occurrence starting from the day before `at` to a week
    /// after it, in the window's zone, as `[start, end)`.
    fn occurrences(&self, at: Timestamp) -> impl Iterator<Item = (Timestamp, Timestamp)> + '_ {
        let today = at.to_zoned(self.zone.clone()).date();
        let first = today.yesterday().unwrap_or(today);
        (0..=8_i64)
            .filter_map(move |offset| first.checked_add(jiff::Span::new().days(offset)).ok())
            .flat_map(move |date| {
                self.spans
                    .iter()
                    .filter(move |span| span.on(date.weekday()))
                    .filter_map(move |span| self.occurrence(span, date))
            })
    }

    fn occurrence(&self, span: &Span, date: Date) -> Option<(Timestamp, Timestamp)> {
        let start = self.instant(date, span.start)?;
        let end_date = if span.end <= span.start {
            date.tomorrow().ok()?
        } else {
            date
        };
        let end = self.instant(end_date, span.end)?;
        Some((start, end))
    }

    /// `minutes` after midnight on `date` in the window's zone; a time a DST
    /// gap skips resolves forward, a repeated one to its first occurrence.
    fn instant(&self, date: Date, minutes: u16) -> Option<Timestamp> {
        let (date, minutes) = if minutes == DAY_MINUTES {
            (date.tomorrow().ok()?, 0)
        } else {
            (date, minutes)
        };
        let hour = i8::try_from(minutes / 60).ok()?;
        let minute = i8::try_from(minutes % 60).ok()?;
        let civil = date.at(hour, minute, 0, 0);
        self.zone.to_ambiguous_timestamp(civil).compatible().ok()
    }
}

impl FromStr for Window {
    type Err = WindowError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let (spans, zone) = text
            .rsplit_once(char::is_whitespace)
            .ok_or(WindowError::Empty)?;
        let zone = TimeZone::get(zone).map_err(|_| WindowError::UnknownZone(echo(zone)))?;
        let spans = spans
            .split(',')
            .map(str::trim)
            .filter(|span| !span.is_empty())
            .map(Span::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if spans.is_empty() {
            return Err(WindowError::Empty);
        }
        Ok(Self {
            spans,
            zone,
            text: text.to_owned(),
        })
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Window").field(&self.text).finish()
    }
}

impl PartialEq for Window {
    fn eq(&self, other: &Self) -> bool {
        self.spans == other.spans && self.zone() == other.zone()
    }
}

impl Eq for Window {}

impl Serialize for Window {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Window {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// `engine.window`: an empty string means no window (always open).
pub(crate) mod optional {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Window;

    pub(crate) fn serialize<S: Serializer>(
        window: &Option<Window>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(window.as_ref().map_or("", |w| w.text.as_str()))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Window>, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        text.parse().map(Some).map_err(serde::de::Error::custom)
    }
}

// === impl Span ===

impl Span {
    /// `<days> <HH:MM>-<HH:MM>`.
    fn parse(text: &str) -> Result<Self, WindowError> {
        let invalid = || WindowError::InvalidSpan(echo(text));
        let (days, times) = text.split_once(char::is_whitespace).ok_or_else(invalid)?;
        let (start, end) = times.trim().split_once('-').ok_or_else(invalid)?;
        let start = parse_time(start)?;
        let end = parse_time(end)?;
        if start == DAY_MINUTES {
            return Err(WindowError::InvalidTime(echo("24:00")));
        }
        Ok(Self {
            days: parse_days(days)?,
            start,
            end,
        })
    }

    fn on(&self, day: Weekday) -> bool {
        let bit = day.to_monday_zero_offset();
        self.days & (1 << bit) != 0
    }
}

/// `Mon`, a range `Mon-Fri` (`Fri-Mon` wraps over the weekend), or `daily`.
fn parse_days(text: &str) -> Result<u8, WindowError> {
    let invalid = || WindowError::InvalidDays(echo(text));
    if text.eq_ignore_ascii_case("daily") {
        return Ok(0x7f);
    }
    let (first, last) = text.split_once('-').unwrap_or((text, text));
    let first = weekday(first).ok_or_else(invalid)?;
    let last = weekday(last).ok_or_else(invalid)?;
    let mut days = 0_u8;
    let mut day = first;
    loop {
        days |= 1 << day;
        if day == last {
            return Ok(days);
        }
        day = (day + 1) % 7;
    }
}

/// Monday = 0 … Sunday = 6.
fn weekday(text: &str) -> Option<u8> {
    const NAMES: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    let lower = text.trim().to_ascii_lowercase();
    NAMES
        .iter()
        .position(|name| *name == lower)
        .and_then(|i| u8::try_from(i).ok())
}

/// `HH:MM` as minutes since midnight, `24:00` included.
fn parse_time(text: &str) -> Result<u16, WindowError> {
    let invalid = || WindowError::InvalidTime(echo(text));
    let (hours, minutes) = text.trim().split_once(':').ok_or_else(invalid)?;
    let two_digits = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
    if !two_digits(hours) || !two_digits(minutes) {
        return Err(invalid());
    }
    let hours: u16 = hours.parse().map_err(|_| invalid())?;
    let minutes: u16 = minutes.parse().map_err(|_| invalid())?;
    let total = hours * 60 + minutes;
    if minutes >= 60 || total > DAY_MINUTES {
        return Err(invalid());
    }
    Ok(total)
}

fn echo(text: &str) -> String {
    text.chars().take(ECHOED).collect()
}

// === WallClock ===

/// Maps the engine's monotonic instants to wall-clock time, from one anchor.
/// The core reads no clock; the driver anchors this at start-up, tests anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    instant: Instant,
    timestamp: Timestamp,
}

impl WallClock {
    /// `instant` is `timestamp` on the wall clock.
    pub fn anchored(instant: Instant, timestamp: Timestamp) -> Self {
        Self { instant, timestamp }
    }

    /// Anchored now, on this machine's clocks.
    pub fn system() -> Self {
        Self::anchored(Instant::now(), Timestamp::now())
    }

    /// The wall-clock time of `instant`.
    pub fn at(&self, instant: Instant) -> Timestamp {
        let offset = if instant >= self.instant {
            signed(instant.duration_since(self.instant))
        } else {
            -signed(self.instant.duration_since(instant))
        };
        self.timestamp.checked_add(offset).unwrap_or(self.timestamp)
    }

    /// The instant of wall-clock time `at` (never before `now`).
    pub fn instant(&self, at: Timestamp, now: Instant) -> Instant {
        let wall_now = self.at(now);
        let ahead = at.duration_since(wall_now);
        let ahead = Duration::try_from(ahead).unwrap_or(Duration::ZERO);
        crate::rate::saturating_add(now, ahead)
    }
}

fn signed(duration: Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
}

#[cfg(test)]
mod tests;
