//! A run's phases (start-up, initial stamps, idle, each kind of change,
//! restarts), each with its wall time and the CPU time nudge, the double and
//! the Consul agent spent in it, and what the double spent serving nudge.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use serde_json::{Value, json};

use super::double::Request;
use super::procfs::{clock_ticks, cpu_time};
use super::requests::{by_nudge, verb};

/// Reads the CPU time of the processes a run measures.
pub struct Meter {
    ticks: f64,
    double: u32,
    consul: Option<u32>,
}

/// The CPU time each process had used at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    pub at: Instant,
    pub wall: SystemTime,
    /// nudge's, zero before it is started.
    pub nudge: Duration,
    pub double: Duration,
    pub consul: Duration,
}

impl Meter {
    pub fn new(double: u32, consul: Option<u32>) -> Self {
        Self {
            ticks: clock_ticks(),
            double,
            consul,
        }
    }

    /// The CPU time of each process now; `nudge`: its pid, `None` before it runs.
    pub fn mark(&self, nudge: Option<u32>) -> Result<Mark> {
        let cpu = |pid: Option<u32>| pid.map_or(Ok(Duration::ZERO), |p| cpu_time(p, self.ticks));
        Ok(Mark {
            at: Instant::now(),
            wall: SystemTime::now(),
            nudge: cpu(nudge)?,
            double: cpu(Some(self.double))?,
            consul: cpu(self.consul)?,
        })
    }

    /// The resolution of the CPU times (a clock tick).
    pub fn resolution(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.ticks)
    }
}

/// One phase: from one mark to another.
#[derive(Debug, Clone)]
pub struct Phase {
    pub name: String,
    pub from: Mark,
    pub to: Mark,
}

/// What the double's request log says about a phase.
#[derive(Debug, Default)]
pub struct Served {
    /// nudge's requests by verb.
    pub nudge_requests: BTreeMap<&'static str, usize>,
    /// The double's service time of nudge's requests, and of all requests
    /// (with the benchmark's own writes).
    pub nudge_service: Duration,
    pub all_service: Duration,
}

impl Phase {
    pub fn new(name: impl Into<String>, from: Mark, to: Mark) -> Self {
        Self {
            name: name.into(),
            from,
            to,
        }
    }

    pub fn wall(&self) -> Duration {
        self.to.at.duration_since(self.from.at)
    }

    pub fn nudge_cpu(&self) -> Duration {
        self.to.nudge.saturating_sub(self.from.nudge)
    }

    pub fn double_cpu(&self) -> Duration {
        self.to.double.saturating_sub(self.from.double)
    }

    pub fn consul_cpu(&self) -> Duration {
        self.to.consul.saturating_sub(self.from.consul)
    }

    /// Whether a request arrived within the phase.
    pub fn contains(&self, r: &Request) -> bool {
        self.contains_time(r.received_at)
    }

    /// Whether `at` falls in this phase.
    pub fn contains_time(&self, at: SystemTime) -> bool {
        at >= self.from.wall && at < self.to.wall
    }

    /// The requests that arrived within the phase, summed up.
    pub fn served(&self, requests: &[Request]) -> Served {
        let mut served = Served::default();
        for r in requests.iter().filter(|r| self.contains(r)) {
            served.all_service += r.service;
            if by_nudge(r) {
                served.nudge_service += r.service;
                *served.nudge_requests.entry(verb(r)).or_default() += 1;
            }
        }
        served
    }

    pub fn json(&self, requests: &[Request]) -> Value {
        let served = self.served(requests);
        json!({
            "name": self.name,
            "wall_seconds": self.wall().as_secs_f64(),
            "cpu_seconds": {
                "nudge": self.nudge_cpu().as_secs_f64(),
                "double": self.double_cpu().as_secs_f64(),
                "consul": self.consul_cpu().as_secs_f64(),
            },
            "double_service_seconds": {
                "nudge_requests": served.nudge_service.as_secs_f64(),
                "all_requests": served.all_service.as_secs_f64(),
            },
            "nudge_requests": served.nudge_requests,
        })
    }
}
