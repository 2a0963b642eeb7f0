//! The plot: steady and peak RSS and change→PATCH p99 against scale, from the
//! JSON files of earlier runs.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// One line of a plot panel: label, colour, (workloads, value) points, dashed.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>, bool);

/// The scales the plot shows, in order.
const PLOTTED: [&str; 3] = ["small", "large", "xl"];

/// Writes `svg`: steady and peak RSS, and change→PATCH p99, against scale, from the
/// `loadtest-<scale>.json` files in `dir` (those present), with the targets.
pub fn write_plot(dir: &Path, svg: &Path) -> Result<()> {
    struct Point {
        scale: &'static str,
        workloads: f64,
        steady: f64,
        peak: f64,
        p99: f64,
        targets: Option<(f64, f64, f64)>,
    }
    let mut points = Vec::new();
    for scale in PLOTTED {
        let Ok(text) = std::fs::read_to_string(dir.join(format!("loadtest-{scale}.json"))) else {
            continue;
        };
        let v: Value = serde_json::from_str(&text)?;
        let f = |p: &str| v.pointer(p).and_then(Value::as_f64).unwrap_or(f64::NAN);
        points.push(Point {
            scale,
            workloads: f("/cluster/workloads"),
            steady: f("/rss_mib/steady_after_idle"),
            peak: f("/rss_mib/peak"),
            p99: f("/latency_ms/p99"),
            targets: v.get("targets").filter(|t| t.is_object()).map(|_| {
                (
                    f("/targets/steady_rss_mib"),
                    f("/targets/peak_rss_mib"),
                    f("/targets/latency_p99_ms"),
                )
            }),
        });
    }
    if points.is_empty() {
        bail!("no loadtest-{{small,large,xl}}.json in {}", dir.display());
    }
    // Two panels, x = workloads on a log scale (1 … 20,000).
    let (w, h, pad) = (360.0, 260.0, 50.0);
    let x_of = |workloads: f64| pad + (workloads.max(1.0).log10() / 4.5) * (w - 1.5 * pad);
    let mut body = String::new();
    let mut panel = |dx: f64, title: &str, unit: &str, series: &[Series]| {
        let max = series
            .iter()
            .flat_map(|(_, _, v, _)| v.iter().map(|p| p.1))
            .filter(|v| v.is_finite())
            .fold(1.0_f64, f64::max)
            * 1.15;
        let y_of = |v: f64| h - pad - (v / max) * (h - 2.0 * pad);
        body.push_str(&format!(
            "<g transform=\"translate({dx},0)\">\n<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-weight=\"bold\">{title}</text>\n",
            w / 2.0
        ));
        body.push_str(&format!(
            "<line x1=\"{pad}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"black\"/><line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{0}\" stroke=\"black\"/>\n",
            h - pad,
            w - pad / 2.0
        ));
        for i in 0..=4 {
            let v = max * f64::from(i) / 4.0;
            body.push_str(&format!(
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"10\">{v:.0}</text>\n",
                pad - 4.0,
                y_of(v) + 3.0
            ));
        }
        body.push_str(&format!(
            "<text x=\"12\" y=\"{0}\" font-size=\"10\" transform=\"rotate(-90 12 {0})\" text-anchor=\"middle\">{unit}</text>\n",
            h / 2.0
        ));
        for p in &points {
            body.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{} ({})</text>\n",
                x_of(p.workloads),
                h - pad + 14.0,
                p.scale,
                p.workloads
            ));
        }
        for (i, (name, color, values, dashed)) in series.iter().enumerate() {
            let path: Vec<String> = values
                .iter()
                .filter(|(_, v)| v.is_finite())
                .map(|(x, v)| format!("{:.1},{:.1}", x_of(*x), y_of(*v)))
                .collect();
            let dash = if *dashed {
                " stroke-dasharray=\"4 3\""
            } else {
                ""
            };
            body.push_str(&format!(
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash}/>\n",
                path.join(" ")
            ));
            if !dashed {
                for p in &path {
                    let (x, y) = p.split_once(',').unwrap_or_default();
                    body.push_str(&format!(
                        "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{color}\"/>\n"
                    ));
                }
            }
            body.push_str(&format!(
                "<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"{color}\">{name}</text>\n",
                pad + 8.0,
                pad - 8.0 + 12.0 * i as f64
            ));
        }
        body.push_str("</g>\n");
    };
    let series = |f: fn(&Point) -> f64| -> Vec<(f64, f64)> {
        points.iter().map(|p| (p.workloads, f(p))).collect()
    };
    let target_series = |f: fn(&(f64, f64, f64)) -> f64| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter_map(|p| p.targets.as_ref().map(|t| (p.workloads, f(t))))
            .collect()
    };
    panel(
        0.0,
        "RSS against scale",
        "MiB",
        &[
            ("steady RSS", "#1f77b4", series(|p| p.steady), false),
            ("peak RSS", "#d62728", series(|p| p.peak), false),
            ("steady target", "#1f77b4", target_series(|t| t.0), true),
            ("peak target", "#d62728", target_series(|t| t.1), true),
        ],
    );
    panel(
        w,
        "change → PATCH p99 against scale",
        "ms",
        &[
            ("p99", "#2ca02c", series(|p| p.p99), false),
            ("target", "#2ca02c", target_series(|t| t.2), true),
        ],
    );
    let svg_text = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{body}<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">workloads (log scale); dashed: the issue's targets</text>\n</svg>\n",
        2.0 * w,
        w,
        h - 8.0
    );
    std::fs::write(svg, svg_text).with_context(|| format!("write {}", svg.display()))
}
