//! The `batch/v1` kinds: Jobs, CronJobs and their schedules.

pub(crate) mod cronjob;
pub(crate) mod job;
pub(crate) mod schedule;

/// Whether `time.LoadLocation` would know a zone: `UTC`, or an IANA name
/// with a file under `/usr/share/zoneinfo` (the apiserver embeds the tz
/// database; without the files here only `UTC` is known, the stricter answer).
pub(crate) fn time_zone_exists(zone: &str) -> bool {
    if zone.is_empty() || zone == "UTC" {
        return true;
    }
    if zone.split('/').any(|p| p == ".." || p.is_empty()) {
        return false;
    }
    std::path::Path::new("/usr/share/zoneinfo")
        .join(zone)
        .is_file()
}
