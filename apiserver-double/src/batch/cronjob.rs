//! `batch/v1` CronJobs: `SetDefaults_CronJob` and `ValidateCronJob*`.

use serde_json::{Value, json};

use super::job::validate_job_spec;
use super::schedule::parse_standard;
use crate::meta;
use crate::strategy::{default_pod_template_at, set_default};
use crate::validation::Errors;

/// `SetDefaults_CronJob` plus the pod defaults inside the job template.
/// (`SetDefaults_Job` is not applied to the template: a stored CronJob's
/// `jobTemplate.spec` has no `backoffLimit` until a Job is made from it.)
pub(crate) fn default_cron_job(obj: &mut Value) {
    if let Some(spec) = meta::ensure_map(obj, &["spec"]) {
        set_default(spec, "concurrencyPolicy", json!("Allow"));
        set_default(spec, "suspend", json!(false));
        set_default(spec, "successfulJobsHistoryLimit", json!(3));
        set_default(spec, "failedJobsHistoryLimit", json!(1));
    }
    default_pod_template_at(obj, &["spec", "jobTemplate", "spec", "template"]);
}

/// `ValidateCronJobCreate` / `ValidateCronJobUpdate` (`old` for updates).
pub(crate) fn validate_cron_job(obj: &Value, old: Option<&Value>, errs: &mut Errors) {
    let name = meta::name(obj);
    let spec = |o: &'_ Value, f: &str| {
        meta::get_path(o, &["spec", f])
            .filter(|v| !v.is_null())
            .cloned()
    };
    let schedule = spec(obj, "schedule");
    match schedule.as_ref().and_then(Value::as_str).unwrap_or("") {
        "" => errs.required("spec.schedule", ""),
        s => {
            let old_schedule = old.and_then(|o| spec(o, "schedule"));
            let tz_allowed = old_schedule
                .as_ref()
                .and_then(Value::as_str)
                .is_some_and(|o| o.contains("TZ"));
            validate_schedule(s, tz_allowed, spec(obj, "timeZone").is_some(), errs);
        }
    }
    if let Some(v) = spec(obj, "startingDeadlineSeconds")
        && v.as_i64().is_none_or(|n| n < 0)
    {
        errs.invalid(
            "spec.startingDeadlineSeconds",
            &v,
            "must be greater than or equal to 0",
        );
    }
    let tz = spec(obj, "timeZone");
    if old.is_none_or(|o| spec(o, "timeZone") != tz) {
        validate_time_zone(tz.as_ref(), errs);
    }
    match spec(obj, "concurrencyPolicy")
        .as_ref()
        .and_then(Value::as_str)
        .unwrap_or("")
    {
        "Allow" | "Forbid" | "Replace" => {}
        "" => errs.required("spec.concurrencyPolicy", ""),
        other => errs.unsupported(
            "spec.concurrencyPolicy",
            &Value::from(other),
            &["Allow", "Forbid", "Replace"],
        ),
    }
    validate_job_template(obj, errs);
    for f in ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        if let Some(v) = spec(obj, f)
            && v.as_i64().is_none_or(|n| n < 0)
        {
            errs.invalid(
                format!("spec.{f}"),
                &v,
                "must be greater than or equal to 0",
            );
        }
    }
    if old.is_none() && name.len() > 52 {
        errs.invalid(
            "metadata.name",
            &Value::from(name),
            "must be no more than 52 characters",
        );
    }
}

fn validate_schedule(schedule: &str, tz_allowed: bool, has_time_zone: bool, errs: &mut Errors) {
    let v = Value::from(schedule);
    if let Err(e) = parse_standard(schedule) {
        errs.invalid("spec.schedule", &v, &e);
    }
    if schedule.contains("TZ") {
        if tz_allowed && has_time_zone {
            errs.invalid(
                "spec.schedule",
                &v,
                "cannot use both timeZone field and TZ or CRON_TZ in schedule",
            );
        } else if !tz_allowed {
            errs.invalid(
                "spec.schedule",
                &v,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            );
        }
    }
}

fn validate_time_zone(tz: Option<&Value>, errs: &mut Errors) {
    let Some(v) = tz else { return };
    let zone = v.as_str().unwrap_or("");
    if zone.is_empty() {
        errs.invalid(
            "spec.timeZone",
            v,
            "timeZone must be nil or non-empty string",
        );
        return;
    }
    let part_ok = |p: &str| {
        p != "."
            && p != ".."
            && !p.starts_with('-')
            && !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-+".contains(&b))
    };
    if !zone.split('/').all(part_ok) {
        errs.invalid("spec.timeZone", v, &format!("unknown time zone {zone}"));
        return;
    }
    if zone.eq_ignore_ascii_case("Local") {
        errs.invalid(
            "spec.timeZone",
            v,
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        );
    }
    if !super::time_zone_exists(zone) {
        errs.invalid("spec.timeZone", v, &format!("unknown time zone {zone}"));
    }
}

/// `ValidateJobTemplateSpec`: the Job spec checks, and no selector of its own.
fn validate_job_template(obj: &Value, errs: &mut Errors) {
    validate_job_spec(obj, &["spec", "jobTemplate", "spec"], errs);
    let template_spec =
        |f: &str| meta::get_path(obj, &["spec", "jobTemplate", "spec", f]).filter(|v| !v.is_null());
    if let Some(sel) = template_spec("selector") {
        errs.invalid(
            "spec.jobTemplate.spec.selector",
            sel,
            "`selector` will be auto-generated",
        );
    }
    if template_spec("manualSelector") == Some(&json!(true)) {
        errs.unsupported(
            "spec.jobTemplate.spec.manualSelector",
            &json!(true),
            &["nil", "false"],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(schedule: &str) -> Value {
        json!({"metadata": {"name": "c"}, "spec": {"schedule": schedule, "jobTemplate": {"spec": {
            "template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "busybox"}]}}}}}})
    }

    fn messages(obj: &Value) -> Vec<String> {
        let mut e = Errors::default();
        validate_cron_job(obj, None, &mut e);
        e.summaries()
    }

    #[test]
    fn defaults() {
        let mut c = cron("* * * * *");
        default_cron_job(&mut c);
        assert_eq!(c["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(c["spec"]["successfulJobsHistoryLimit"], 3);
        assert_eq!(c["spec"]["failedJobsHistoryLimit"], 1);
        assert_eq!(c["spec"]["suspend"], false);
        assert!(
            c["spec"]["jobTemplate"]["spec"]
                .get("backoffLimit")
                .is_none()
        );
        assert_eq!(
            c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["dnsPolicy"],
            "ClusterFirst"
        );
        assert!(messages(&c).is_empty(), "{:?}", messages(&c));
    }

    #[test]
    fn schedules_and_templates_are_checked() {
        let mut c = cron("61 * * * *");
        default_cron_job(&mut c);
        assert_eq!(
            messages(&c),
            [
                "spec.schedule: Invalid value: \"61 * * * *\": end of range (61) above maximum (59): 61"
            ]
        );
        let mut c = cron("TZ=UTC 0 0 * * *");
        default_cron_job(&mut c);
        assert_eq!(
            messages(&c),
            [
                "spec.schedule: Invalid value: \"TZ=UTC 0 0 * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
            ]
        );
        let mut c = cron("");
        c["spec"]["jobTemplate"]["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
        c["spec"]["jobTemplate"]["spec"]["template"]["spec"]
            .as_object_mut()
            .unwrap()
            .remove("restartPolicy");
        default_cron_job(&mut c);
        assert_eq!(
            messages(&c),
            [
                "spec.schedule: Required value",
                "spec.jobTemplate.spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
                "spec.jobTemplate.spec.selector: Invalid value: {\"matchLabels\":{\"a\":\"b\"}}: `selector` will be auto-generated"
            ]
        );
    }
}
