//! Rate limiting and retry pacing shared by the engine and the sources: the
//! [`TokenBucket`] (stamp pacing, Consul query loops) and [`Backoff`] (every
//! retry: stamps, content fetches, restarted sources). Pure and synchronous:
//! callers pass the current time.

use std::time::Duration;

use tokio::time::Instant;

/// How far in the future an instant is placed when `at + duration` does not fit.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// `at + duration`, clamped instead of panicking when a configured duration is
/// absurdly large.
pub(crate) fn saturating_add(at: Instant, duration: Duration) -> Instant {
    at.checked_add(duration)
        .or_else(|| at.checked_add(FAR_FUTURE))
        .unwrap_or(at)
}

/// When something changed at `now`, first at `first`, is due: once `window`
/// has passed without another change, and at most `ceiling` after the first
/// (debounce with a ceiling, design §5).
pub(crate) fn debounced(
    now: Instant,
    first: Instant,
    window: Duration,
    ceiling: Duration,
) -> Instant {
    saturating_add(now, window).min(saturating_add(first, ceiling))
}

/// Why pacing parameters were rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PacingError {
    /// The rate is zero, negative, not a number, or so small that the time between
    /// two tokens does not fit a [`Duration`].
    #[error("stamp rate must be a positive, finite number per second, got {0}")]
    InvalidRate(f64),
    /// The burst is zero, so no stamp could ever be taken.
    #[error("stamp burst must be at least 1")]
    ZeroBurst,
}

/// A token bucket of `burst` tokens refilled at `rate` tokens per second. It starts
/// full. Time is kept in whole nanoseconds (GCRA), so refills are exact.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Time between two tokens.
    period: Duration,
    /// `burst * period`: how far ahead of now the bucket may be spent.
    tolerance: Duration,
    /// When the bucket would be full again if nothing more were taken; `None` or a
    /// time in the past means full now.
    full_at: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `rate` tokens per second.
    pub fn new(rate: f64, burst: u32) -> Result<Self, PacingError> {
        let period = (rate.is_finite() && rate > 0.0)
            .then(|| Duration::try_from_secs_f64(rate.recip()).ok())
            .flatten()
            .ok_or(PacingError::InvalidRate(rate))?;
        Self::with_period(period, burst).map_err(|error| match error {
            PacingError::InvalidRate(_) => PacingError::InvalidRate(rate),
            other => other,
        })
    }

    /// A full bucket of `burst` tokens refilled with one token every `period`.
    pub fn with_period(period: Duration, burst: u32) -> Result<Self, PacingError> {
        if burst == 0 {
            return Err(PacingError::ZeroBurst);
        }
        let invalid = || PacingError::InvalidRate(period.as_secs_f64().recip());
        if period.is_zero() {
            return Err(invalid());
        }
        let tolerance = period.checked_mul(burst).ok_or_else(invalid)?;
        Ok(Self {
            period,
            tolerance,
            full_at: None,
        })
    }

    /// Takes a token, or returns the earliest time one will be available.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Instant> {
        let available = self.available_at(now);
        if available > now {
            return Err(available);
        }
        self.full_at = Some(saturating_add(self.full_at(now), self.period));
        Ok(())
    }

    /// The earliest time at or after `now` when a token can be taken.
    pub fn available_at(&self, now: Instant) -> Instant {
        let full_after_take = saturating_add(self.full_at(now), self.period);
        full_after_take
            .checked_sub(self.tolerance)
            .map_or(now, |at| at.max(now))
    }

    fn full_at(&self, now: Instant) -> Instant {
        self.full_at.map_or(now, |at| at.max(now))
    }
}

/// Delays between retries: exponential from `first` (doubling), with random jitter
/// so that many retries do not fall into step, and never above `cap`.
/// [`backon`]'s exponential backoff, without an attempt limit.
#[derive(Debug)]
pub struct Backoff {
    delays: backon::ExponentialBackoff,
    cap: Duration,
}

impl Backoff {
    /// Delays starting at `first`, at most `cap`.
    pub fn new(first: Duration, cap: Duration) -> Self {
        Self::build(first, cap, None)
    }

    /// Like [`new`](Self::new), with a fixed jitter seed (reproducible tests).
    #[cfg(test)]
    pub fn seeded(first: Duration, cap: Duration, seed: u64) -> Self {
        Self::build(first, cap, Some(seed))
    }

    fn build(first: Duration, cap: Duration, seed: Option<u64>) -> Self {
        use backon::BackoffBuilder as _;
        let builder = backon::ExponentialBuilder::new()
            .with_min_delay(first)
            .with_max_delay(cap)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        let builder = match seed {
            Some(seed) => builder.with_jitter_seed(seed),
            None => builder,
        };
        Self {
            delays: builder.build(),
            cap,
        }
    }

    /// The delay before the next retry.
    pub fn next_delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(self.cap).min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn mk_bucket(rate: f64, burst: u32) -> TokenBucket {
        TokenBucket::new(rate, burst).expect("valid bucket")
    }

    /// Takes tokens at `now` until the bucket refuses (at most 10,000); returns how
    /// many.
    fn drain(bucket: &mut TokenBucket, now: Instant) -> usize {
        (0..10_000)
            .take_while(|_| bucket.try_take(now).is_ok())
            .count()
    }

    #[test]
    fn bucket_starts_full_and_refills_at_rate() {
        let t0 = Instant::now();
        let mut bucket = mk_bucket(5.0, 50);
        assert_eq!(drain(&mut bucket, t0), 50);
        assert_eq!(bucket.try_take(t0), Err(t0 + ms(200)));
        assert_eq!(drain(&mut bucket, t0 + ms(199)), 0);
        assert_eq!(drain(&mut bucket, t0 + ms(200)), 1);
        assert_eq!(drain(&mut bucket, t0 + ms(1200)), 5);
    }

    #[test]
    fn idle_bucket_refills_to_burst_and_no_more() {
        let t0 = Instant::now();
        let mut bucket = mk_bucket(5.0, 3);
        assert_eq!(drain(&mut bucket, t0), 3);
        assert_eq!(drain(&mut bucket, t0 + Duration::from_secs(3600)), 3);
    }

    #[test]
    fn fractional_rate_spaces_tokens() {
        let t0 = Instant::now();
        let mut bucket = mk_bucket(0.5, 1);
        assert!(bucket.try_take(t0).is_ok());
        assert_eq!(bucket.try_take(t0 + ms(1)), Err(t0 + ms(2000)));
        assert!(bucket.try_take(t0 + ms(2000)).is_ok());
    }

    #[test]
    fn invalid_parameters_are_rejected() {
        assert_eq!(
            TokenBucket::new(5.0, 0).unwrap_err(),
            PacingError::ZeroBurst
        );
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300] {
            assert!(
                matches!(TokenBucket::new(rate, 1), Err(PacingError::InvalidRate(_))),
                "rate {rate}"
            );
        }
    }

    #[test]
    fn bucket_by_period_spaces_tokens_by_that_period() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::with_period(ms(1000), 3).expect("valid bucket");
        assert_eq!(drain(&mut bucket, t0), 3);
        assert_eq!(bucket.try_take(t0 + ms(10)), Err(t0 + ms(1000)));
        assert_eq!(drain(&mut bucket, t0 + ms(2000)), 2);
        assert!(matches!(
            TokenBucket::with_period(Duration::ZERO, 1),
            Err(PacingError::InvalidRate(_))
        ));
        assert_eq!(
            TokenBucket::with_period(ms(1), 0).unwrap_err(),
            PacingError::ZeroBurst
        );
    }

    #[test]
    fn backoff_grows_with_jitter_and_stays_under_the_cap() {
        let mut backoff = Backoff::seeded(ms(500), Duration::from_secs(60), 7);
        let delays: Vec<Duration> = (0..12).map(|_| backoff.next_delay()).collect();
        assert!(delays[0] >= ms(500) && delays[0] < ms(1000), "{delays:?}");
        assert!(delays[3] >= ms(4000), "{delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(60)),
            "{delays:?}"
        );
        assert_eq!(delays[11], Duration::from_secs(60));
        let mut other = Backoff::seeded(ms(500), Duration::from_secs(60), 8);
        let other: Vec<Duration> = (0..3).map(|_| other.next_delay()).collect();
        assert_ne!(other, delays[..3], "jitter differs between retries");
    }
}
