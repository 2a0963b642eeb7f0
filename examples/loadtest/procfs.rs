//! What `/proc` says about a process: memory, CPU time, TCP connections.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result};

/// `(VmRSS, VmHWM)` of `pid` in bytes.
pub fn memory(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("{name} missing from /proc/{pid}/status"))?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .context("malformed /proc status line")?
            .parse()?;
        Ok(kib * 1024)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// User + system CPU time of `pid`.
pub fn cpu_time(pid: u32, ticks_per_second: f64) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let utime: f64 = fields.get(11).context("no utime")?.parse()?;
    let stime: f64 = fields.get(12).context("no stime")?.parse()?;
    Ok(Duration::from_secs_f64((utime + stime) / ticks_per_second))
}

pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Socket inodes held by `pid`.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let mut inodes = HashSet::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return inodes;
    };
    for entry in dir.flatten() {
        if let Ok(target) = std::fs::read_link(entry.path())
            && let Some(inode) = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse().ok())
        {
            inodes.insert(inode);
        }
    }
    inodes
}

/// Established TCP connections from `pid` to `port`.
pub fn connections_of(pid: u32, port: u16) -> u64 {
    const ESTABLISHED: &str = "01";
    let inodes = socket_inodes(pid);
    let mut count = 0;
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(table) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in table.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if *state == ESTABLISHED
                && remote_port == Some(port)
                && inode.parse().is_ok_and(|i: u64| inodes.contains(&i))
            {
                count += 1;
            }
        }
    }
    count
}

/// Samples nudge's connections to Consul every 20 ms on a thread; keeps the peak.
pub struct ConnectionSampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ConnectionSampler {
    pub fn start(pid: u32, port: u16) -> Self {
        let peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (peak, stop) = (peak.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(connections_of(pid, port), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Self {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    pub fn finish(mut self) -> u64 {
        self.stop_thread();
        self.peak.load(Ordering::Relaxed)
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ConnectionSampler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}
