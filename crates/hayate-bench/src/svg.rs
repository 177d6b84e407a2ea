//! Hand-written SVG charts for the HTML report: line charts (linear or log axes, including
//! the `1 - p` percentile axis of latency distributions) and grouped bar charts. No scripts,
//! no external references: each chart is one self-contained `<svg>` element.
//!
//! The scale code is separate and unit-tested: [`nice_ticks`] (1-2-5 steps), [`log_ticks`]
//! (decades with 2 and 5 in between), [`nines`] / [`percentile_ticks`] (the percentile axis:
//! 0% at 0, 90% at 1, 99% at 2, 99.9% at 3...), and [`Format`] (the display unit picked from
//! the data: µs/ms/s, B/KiB/MiB/GiB, msg/s, k msg/s...).

mod bar;
mod line;
mod scale;
#[cfg(test)]
mod tests;

pub use bar::{BarChart, BarSeries};
pub use line::{LineChart, Series};
pub use scale::{
    decimals_for, log_ticks, nice_number, nice_ticks, nines, percentile_at, percentile_label,
    percentile_ticks, Format, Ticks,
};

use std::fmt::Write as _;

/// Colours of series, in order (Okabe–Ito, readable by most colour-blind readers).
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#7F7F7F", "#000000",
];

/// Escapes text for HTML and SVG (`&`, `<`, `>`, quotes).
pub fn esc(text: &str) -> String {
    let mut o = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Kind of an axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scale {
    /// Linear, from 0 (or the data minimum when negative).
    Linear,
    /// Base-10 logarithmic (positive values only).
    Log,
    /// The percentile axis: data are [`nines`] positions, labelled as percentiles.
    Percentile,
}

const ML: f64 = 72.0;
const MR: f64 = 20.0;
const MT: f64 = 52.0;
const MB: f64 = 46.0;

struct Mapped {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Vec<(f64, String)>,
    unit: String,
}

impl Mapped {
    fn frac(&self, v: f64) -> f64 {
        let (v, lo, hi) = if self.log {
            (v.max(self.lo).log10(), self.lo.log10(), self.hi.log10())
        } else {
            (v, self.lo, self.hi)
        };
        if hi > lo {
            (v - lo) / (hi - lo)
        } else {
            0.0
        }
    }
}

fn axis(values: &[f64], scale: Scale, format: Format, target: usize) -> Mapped {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let (max, min) = if finite.is_empty() {
        (1.0, 0.0)
    } else {
        (max, min)
    };
    match scale {
        Scale::Percentile => {
            let hi = max.max(1.0).ceil();
            let ticks = percentile_ticks(hi)
                .into_iter()
                .filter(|(x, _)| *x <= hi + 1e-9)
                .collect();
            Mapped {
                lo: 0.0,
                hi,
                log: false,
                ticks,
                unit: String::new(),
            }
        }
        Scale::Log => {
            let (div, unit) = format.unit(max);
            let pos_min = finite
                .iter()
                .copied()
                .filter(|v| *v > 0.0)
                .fold(f64::INFINITY, f64::min);
            let (lo, hi, t) = log_ticks(pos_min / div, max / div);
            let ticks = t.into_iter().map(|v| (v * div, tick_text(v))).collect();
            Mapped {
                lo: lo * div,
                hi: hi * div,
                log: true,
                ticks,
                unit,
            }
        }
        Scale::Linear => {
            let (div, unit) = format.unit(max.abs().max(min.abs()));
            let t = nice_ticks(min.min(0.0) / div, max / div, target);
            let d = decimals_for(t.step);
            let ticks = t
                .values
                .iter()
                .map(|&v| (v * div, format!("{v:.d$}")))
                .collect();
            Mapped {
                lo: t.min * div,
                hi: t.max * div,
                log: false,
                ticks,
                unit,
            }
        }
    }
}

/// Rounds away binary noise (`0.30000000000000004` → `0.3`).
fn clean(v: f64) -> f64 {
    if v == 0.0 {
        return 0.0;
    }
    let digits = 12 - v.abs().log10().ceil() as i32;
    let f = 10f64.powi(digits.clamp(-300, 300));
    (v * f).round() / f
}

fn tick_text(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{}", clean(v))
    }
}

fn axis_title(label: &str, m: &Mapped, format: Format) -> String {
    if m.unit.is_empty() || matches!(format, Format::Ratio) {
        label.to_string()
    } else {
        format!("{label} ({})", m.unit)
    }
}

fn svg_open(o: &mut String, class: &str, title: &str, w: f64, h: f64) {
    let _ = write!(
        o,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="chart {class}" viewBox="0 0 {w:.0} {h:.0}" width="{w:.0}" height="{h:.0}" role="img" font-family="system-ui, sans-serif" font-size="12"><title>{t}</title><rect x="0" y="0" width="{w:.0}" height="{h:.0}" fill="#ffffff"/><text class="chart-title" x="{x:.1}" y="20" text-anchor="middle" font-size="15" font-weight="600" fill="#222">{t}</text>"##,
        t = esc(title),
        x = w / 2.0
    );
}

fn legend(o: &mut String, items: &[(&str, &str, bool, bool)], x0: f64, y: f64, width: f64) {
    // (name, colour, dashed, as a box)
    let mut x = x0;
    let mut y = y;
    for (name, color, dashed, boxed) in items {
        let w = 30.0 + 7.0 * name.chars().count() as f64;
        if x + w > x0 + width && x > x0 {
            x = x0;
            y += 16.0;
        }
        if *boxed {
            let _ = write!(
                o,
                r#"<rect x="{:.1}" y="{:.1}" width="14" height="10" fill="{color}"/>"#,
                x,
                y - 9.0
            );
        } else {
            let _ = write!(
                o,
                r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="2.5"{}/>"#,
                x,
                y - 4.0,
                x + 18.0,
                y - 4.0,
                if *dashed {
                    r#" stroke-dasharray="5 3""#
                } else {
                    ""
                }
            );
        }
        let _ = write!(
            o,
            r##"<text class="legend" x="{:.1}" y="{:.1}" fill="#333">{}</text>"##,
            x + 22.0,
            y,
            esc(name)
        );
        x += w;
    }
}
