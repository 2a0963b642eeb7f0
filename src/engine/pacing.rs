//! Pacing of stamps (design §5): a global [`TokenBucket`] protects the cluster from a
//! config source that rewrites itself in a loop, and [`MinInterval`] keeps a workload
//! from being re-stamped before its previous rollout had time to progress.
//!
//! Pure and synchronous: callers pass the current time.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::saturating_add;
use crate::model::WorkloadId;

/// Why pacing parameters were rejected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
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

/// When each workload was last stamped, for the per-workload minimum interval
/// between two stamps.
#[derive(Debug)]
pub struct MinInterval<K = WorkloadId> {
    last_stamp: HashMap<K, Instant>,
}

impl<K> Default for MinInterval<K> {
    fn default() -> Self {
        Self {
            last_stamp: HashMap::new(),
        }
    }
}

impl<K: Eq + Hash> MinInterval<K> {
    /// Nothing recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// The earliest time `key` may be stamped again given `interval`, or `None` when
    /// it has no recorded stamp (it may be stamped at any time).
    pub fn ready_at(&self, key: &K, interval: Duration) -> Option<Instant> {
        self.last_stamp
            .get(key)
            .map(|at| saturating_add(*at, interval))
    }

    /// Records that a stamp of `key` was written at `now`.
    pub fn record(&mut self, key: K, now: Instant) {
        self.last_stamp.insert(key, now);
    }

    /// Forgets `key` (the workload was deleted); returns whether it was known.
    pub fn forget(&mut self, key: &K) -> bool {
        self.last_stamp.remove(key).is_some()
    }

    /// Number of workloads with a recorded stamp.
    pub fn len(&self) -> usize {
        self.last_stamp.len()
    }

    /// Whether no stamp is recorded.
    pub fn is_empty(&self) -> bool {
        self.last_stamp.is_empty()
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
    fn min_interval_counts_from_the_recorded_stamp() {
        let t0 = Instant::now();
        let mut pacing = MinInterval::<&str>::new();
        assert_eq!(pacing.ready_at(&"web", ms(30_000)), None);
        pacing.record("web", t0);
        assert_eq!(pacing.ready_at(&"web", ms(30_000)), Some(t0 + ms(30_000)));
        assert_eq!(pacing.ready_at(&"web", ms(10_000)), Some(t0 + ms(10_000)));
        pacing.record("web", t0 + ms(5_000));
        assert_eq!(pacing.ready_at(&"web", ms(30_000)), Some(t0 + ms(35_000)));
        assert!(pacing.forget(&"web"));
        assert_eq!(pacing.ready_at(&"web", ms(30_000)), None);
    }
}
