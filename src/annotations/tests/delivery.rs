//! The delivery annotations (design §5d): `mode`, `approve`, `window`, `wave`.

use super::*;

#[test]
fn delivery_settings_parse_beside_references() {
    let deps = parse(&mk_annotated(&[
        ("nudge.dev/configmap-cfg", "app"),
        ("nudge.dev/mode", "manual"),
        ("nudge.dev/approve", "sha256-0123456789ABcdef"),
        ("nudge.dev/window", "Sat-Sun 00:00-24:00 Europe/Berlin"),
        ("nudge.dev/wave", "2"),
    ]));
    assert!(deps.errors.is_empty(), "{:?}", deps.errors);
    assert_eq!(deps.stamps.len(), 1);
    let delivery = &deps.delivery;
    assert_eq!(delivery.mode, Mode::Manual);
    assert_eq!(
        delivery.approve,
        Some(Approval::Fingerprint("sha256-0123456789ab".into())),
        "compared by its first 12 hex digits, in lower case"
    );
    assert_eq!(delivery.wave, 2);
    assert!(matches!(&delivery.window, WindowChoice::Window(w) if w.zone() == "Europe/Berlin"));
    assert!(!delivery.invalid);
}

#[test]
fn no_delivery_annotation_is_the_default() {
    let deps = parse(&mk_annotated(&[("nudge.dev/configmap-cfg", "app")]));
    assert!(deps.delivery.is_default());
    let deps = parse(&mk_annotated(&[
        ("nudge.dev/configmap-cfg", "app"),
        ("nudge.dev/window", "always"),
        ("nudge.dev/approve", "latest"),
    ]));
    assert_eq!(deps.delivery.window, WindowChoice::Always);
    assert_eq!(deps.delivery.approve, Some(Approval::Latest));
}

#[test]
fn malformed_delivery_values_name_their_annotation_and_hold() {
    for (key, value, category) in [
        ("nudge.dev/mode", "Manual", "bad_value"),
        ("nudge.dev/approve", "yes", "bad_value"),
        ("nudge.dev/approve", "sha256-12345", "bad_value"),
        ("nudge.dev/approve", "sha256-zzzzzzzzzzzz", "bad_value"),
        ("nudge.dev/wave", "-1", "bad_value"),
        ("nudge.dev/wave", "1001", "bad_value"),
        (
            "nudge.dev/window",
            "Mon 10:00-11:00 Mars/Olympus",
            "bad_window",
        ),
        ("nudge.dev/window", "weekends", "bad_window"),
    ] {
        let deps = parse(&mk_annotated(&[
            ("nudge.dev/configmap-cfg", "app"),
            (key, value),
        ]));
        assert_eq!(categories(&deps), [(key, category)], "{key}: {value}");
        assert!(deps.delivery.invalid, "{key}: {value} fails closed");
        assert!(deps.errors[0].to_string().contains(key));
        assert_eq!(deps.stamps.len(), 1, "the reference still works");
    }
}
