//! The delivery annotations (design §5d): `<prefix>/mode`, `<prefix>/approve`,
//! `<prefix>/window` and `<prefix>/wave`, parsed into [`Delivery`]. They decide
//! when a rolling stamp may be written, never what it writes.

use super::AnnotationError;
use super::grammar::excerpt;
use super::parser::Parser;
use crate::window::Window;

/// The most waves a workload may name: orders, not a schedule.
pub const MAX_WAVE: u32 = 1000;

/// How a workload takes its config changes. The default (no annotation):
/// stamp as soon as debounce and pacing allow, in wave 0.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delivery {
    /// `<prefix>/mode`.
    pub mode: Mode,
    /// `<prefix>/approve`, when set and valid.
    pub approve: Option<Approval>,
    /// `<prefix>/window`.
    pub window: WindowChoice,
    /// `<prefix>/wave` (0 when unset).
    pub wave: u32,
    /// A delivery annotation did not parse: rolling changes are held until it
    /// is fixed (fail closed; the error is reported with the others).
    pub invalid: bool,
}

impl Delivery {
    /// Whether anything differs from the default: most workloads keep none.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// `<prefix>/mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Stamp (the default).
    #[default]
    Auto,
    /// Only report that config changed; never stamp a rolling change.
    Notify,
    /// Report, and stamp what `<prefix>/approve` approves.
    Manual,
}

impl Mode {
    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Notify => "notify",
            Self::Manual => "manual",
        }
    }
}

/// `<prefix>/approve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    /// Whatever is pending, while the annotation says so.
    Latest,
    /// Exactly this pending fingerprint (`sha256-` and 12 hex digits; a longer
    /// value is compared by its first 12).
    Fingerprint(String),
}

impl Approval {
    /// Whether it lets the config whose pending fingerprint is `pending` through.
    pub fn approves(&self, pending: &str) -> bool {
        match self {
            Self::Latest => true,
            Self::Fingerprint(approved) => approved == pending,
        }
    }
}

/// `<prefix>/window`.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum WindowChoice {
    /// Unset: `engine.window` applies.
    #[default]
    Default,
    /// `always`: no window, whatever `engine.window` says.
    Always,
    /// The workload's own window.
    Window(Box<Window>),
}

impl WindowChoice {
    /// The window in force, given the engine's default.
    pub fn resolve<'a>(&'a self, default: Option<&'a Window>) -> Option<&'a Window> {
        match self {
            Self::Default => default,
            Self::Always => None,
            Self::Window(window) => Some(window),
        }
    }
}

/// The short form of a pending fingerprint: `sha256-` and 12 hex digits.
const SHORT: usize = "sha256-".len() + 12;

impl Parser<'_> {
    /// Reads one delivery annotation into `deps.delivery`; an invalid value is
    /// an error and marks the delivery invalid.
    pub(super) fn delivery(&mut self, key: &str, name: &str, value: &str) {
        let delivery = &mut self.deps.delivery;
        let parsed = match name {
            super::scheme::MODE => parse_mode(key, value).map(|mode| delivery.mode = mode),
            super::scheme::APPROVE => {
                parse_approval(key, value).map(|approve| delivery.approve = Some(approve))
            }
            super::scheme::WINDOW => {
                parse_window(key, value).map(|window| delivery.window = window)
            }
            _ => parse_wave(key, value).map(|wave| delivery.wave = wave),
        };
        if let Err(error) = parsed {
            self.deps.delivery.invalid = true;
            self.deps.errors.push(error);
        }
    }
}

fn parse_mode(key: &str, value: &str) -> Result<Mode, AnnotationError> {
    match value {
        "auto" => Ok(Mode::Auto),
        "notify" => Ok(Mode::Notify),
        "manual" => Ok(Mode::Manual),
        _ => Err(invalid(key, value, "auto, notify or manual")),
    }
}

fn parse_approval(key: &str, value: &str) -> Result<Approval, AnnotationError> {
    if value == "latest" {
        return Ok(Approval::Latest);
    }
    let hex = value.strip_prefix("sha256-").unwrap_or("");
    if hex.len() < 12 || hex.len() > 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(invalid(
            key,
            value,
            "latest, or a pending fingerprint (sha256- and at least 12 hex digits)",
        ));
    }
    Ok(Approval::Fingerprint(value[..SHORT].to_ascii_lowercase()))
}

fn parse_window(key: &str, value: &str) -> Result<WindowChoice, AnnotationError> {
    if value == "always" {
        return Ok(WindowChoice::Always);
    }
    value
        .parse()
        .map(|window| WindowChoice::Window(Box::new(window)))
        .map_err(|error| AnnotationError::InvalidWindow {
            key: key.to_owned(),
            value: excerpt(value),
            error,
        })
}

fn parse_wave(key: &str, value: &str) -> Result<u32, AnnotationError> {
    value
        .parse::<u32>()
        .ok()
        .filter(|wave| *wave <= MAX_WAVE)
        .ok_or_else(|| invalid(key, value, "a whole number from 0 to 1000"))
}

fn invalid(key: &str, value: &str, expected: &'static str) -> AnnotationError {
    AnnotationError::InvalidValue {
        key: key.to_owned(),
        value: excerpt(value),
        expected,
    }
}
