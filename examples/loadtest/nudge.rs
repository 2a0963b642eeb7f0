//! The `nudge run` process under measurement.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// The `nudge run` process.
pub struct Nudge {
    child: tokio::process::Child,
    pub pid: u32,
    admin: u16,
    started: Instant,
}

impl Nudge {
    pub fn spawn(binary: &Path, env: &[(String, String)], log: &Path) -> Result<Self> {
        let admin = free_port()?;
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("open {}", log.display()))?;
        let started = Instant::now();
        let child = tokio::process::Command::new(binary)
            .arg("run")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("NUDGE_ADMIN__BIND", format!("127.0.0.1:{admin}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("run {}", binary.display()))?;
        let pid = child.id().context("nudge exited at once")?;
        Ok(Self {
            child,
            pid,
            admin,
            started,
        })
    }

    /// Polls `/ready` every 10 ms; the time from spawn to the first 200.
    pub async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        within: Duration,
    ) -> Result<Duration> {
        let url = format!("http://127.0.0.1:{}/ready", self.admin);
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("nudge exited before it was ready: {status}");
            }
            if let Ok(r) = http.get(&url).send().await
                && r.status().is_success()
            {
                return Ok(self.started.elapsed());
            }
            if Instant::now() > deadline {
                bail!("nudge not ready within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn memory(&self) -> Result<(u64, u64)> {
        super::procfs::memory(self.pid)
    }

    /// Fails when nudge (or the wrapper given as `--nudge`) has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            Some(status) => bail!("nudge exited during the run: {status}"),
            None => Ok(()),
        }
    }

    /// SIGTERM, then a clean exit within 10 s.
    pub async fn stop(mut self) -> Result<()> {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .context("nudge did not exit within 10 s of SIGTERM")??;
        if !status.success() {
            bail!("nudge exited with {status}");
        }
        Ok(())
    }
}

pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}
