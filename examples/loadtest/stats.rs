//! Units and percentiles.

use std::time::Duration;

use serde_json::{Value, json};

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Values, sorted, with their percentiles.
#[derive(Debug, Clone, Default)]
pub struct Summary(Vec<f64>);

impl Summary {
    pub fn new(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        Self(values)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn p(&self, p: f64) -> f64 {
        percentile(&self.0, p)
    }

    pub fn max(&self) -> f64 {
        self.0.last().copied().unwrap_or(f64::NAN)
    }

    pub fn total(&self) -> f64 {
        self.0.iter().sum()
    }

    /// `p50 / p99`, one decimal.
    pub fn p50_p99(&self) -> String {
        format!("{:.1} / {:.1}", self.p(50.0), self.p(99.0))
    }

    pub fn json(&self) -> Value {
        json!({
            "count": self.len(),
            "p50": self.p(50.0), "p95": self.p(95.0), "p99": self.p(99.0),
            "max": self.max(),
        })
    }
}
