//! Hand-written SVG charts for the HTML report: line charts (linear or log axes, including
//! the `1 - p` percentile axis of latency distributions) and grouped bar charts. No scripts,
//! no external references: each chart is one self-contained `<svg>` element.
//!
//! The scale code is separate and unit-tested: [`nice_ticks`] (1-2-5 steps), [`log_ticks`]
//! (decades with 2 and 5 in between), [`nines`] / [`percentile_ticks`] (the percentile axis:
//! 0% at 0, 90% at 1, 99% at 2, 99.9% at 3...), and [`Format`] (the display unit picked from
//! the data: µs/ms/s, B/KiB/MiB/GiB, msg/s, k msg/s...).

use std::fmt::Write as _;

/// Colours of series, in order (Okabe–Ito, readable by most colour-blind readers).
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#7F7F7F", "#000000",
];

/// Ticks of a linear axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Ticks {
    /// Axis start (a multiple of `step`, at most the data minimum).
    pub min: f64,
    /// Axis end (a multiple of `step`, at least the data maximum).
    pub max: f64,
    /// Distance between ticks: 1, 2 or 5 times a power of ten.
    pub step: f64,
    /// Tick values from `min` to `max`.
    pub values: Vec<f64>,
}

/// The "nice" number near `x` (1, 2, 5 or 10 times a power of ten): the nearest one when
/// `round`, else the smallest one not below `x` (Heckbert, Graphics Gems I).
pub fn nice_number(x: f64, round: bool) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return 1.0;
    }
    let exp = x.log10().floor();
    let base = 10f64.powf(exp);
    let f = x / base;
    let nice = if round {
        if f < 1.5 {
            1.0
        } else if f < 3.0 {
            2.0
        } else if f < 7.0 {
            5.0
        } else {
            10.0
        }
    } else if f <= 1.0 + 1e-9 {
        1.0
    } else if f <= 2.0 + 1e-9 {
        2.0
    } else if f <= 5.0 + 1e-9 {
        5.0
    } else {
        10.0
    };
    nice * base
}

/// About `target` ticks covering `[lo, hi]` with a 1-2-5 step. An empty or degenerate range
/// becomes a unit-wide one.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Ticks {
    let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() {
        (lo.min(hi), lo.max(hi))
    } else {
        (0.0, 1.0)
    };
    if hi - lo < 1e-12 * hi.abs().max(1e-300) || hi == lo {
        if hi == 0.0 {
            hi = 1.0;
        } else {
            let pad = hi.abs() * 0.5;
            hi += pad;
            if lo != 0.0 {
                lo -= pad;
            }
        }
    }
    let target = target.max(2) as f64;
    let step = nice_number((hi - lo) / (target - 1.0), true);
    let min = (lo / step + 1e-9).floor() * step;
    let max = (hi / step - 1e-9).ceil() * step;
    let n = ((max - min) / step).round() as usize;
    let values = (0..=n).map(|i| clean(min + i as f64 * step)).collect();
    Ticks {
        min: clean(min),
        max: clean(max),
        step,
        values,
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

/// Decimals needed to print multiples of `step` exactly (`0.25` → 2, `5` → 0).
pub fn decimals_for(step: f64) -> usize {
    for d in 0..=9 {
        let scaled = step * 10f64.powi(d);
        if (scaled - scaled.round()).abs() < 1e-6 * scaled.abs().max(1.0) {
            return d as usize;
        }
    }
    9
}

/// Ticks of a base-10 log axis covering `[lo, hi]` (both > 0): every decade, and 2 and 5
/// within when the range spans fewer than three decades. The axis bounds are whole decades.
pub fn log_ticks(lo: f64, hi: f64) -> (f64, f64, Vec<f64>) {
    let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1.0 };
    let hi = if hi.is_finite() && hi > lo {
        hi
    } else {
        lo * 10.0
    };
    let d0 = (lo.log10() + 1e-9).floor() as i32;
    let d1 = ((hi.log10() - 1e-9).ceil() as i32).max(d0 + 1);
    let mut ticks = Vec::new();
    let dense = d1 - d0 < 3;
    for d in d0..=d1 {
        let base = 10f64.powi(d);
        ticks.push(clean(base));
        if dense && d < d1 {
            ticks.push(clean(2.0 * base));
            ticks.push(clean(5.0 * base));
        }
    }
    (10f64.powi(d0), 10f64.powi(d1), ticks)
}

/// Position of percentile `p` (0–100, below 100) on the `1 - p` log axis: `-log10(1 - p/100)`
/// (50 → 0.30, 90 → 1, 99 → 2, 99.9 → 3).
pub fn nines(p: f64) -> f64 {
    let rest = (1.0 - p / 100.0).max(1e-12);
    -rest.log10()
}

/// The percentile at position `x` of the `1 - p` axis (the inverse of [`nines`]).
pub fn percentile_at(x: f64) -> f64 {
    100.0 * (1.0 - 10f64.powf(-x))
}

/// Label of the percentile at axis position `n` (a whole number): `0%`, `90%`, `99%`,
/// `99.9%`...
pub fn percentile_label(n: u32) -> String {
    match n {
        0 => "0%".into(),
        1 => "90%".into(),
        _ => format!("99.{}%", "9".repeat(n as usize - 2)).replace("99.%", "99%"),
    }
}

/// Ticks of the percentile axis up to position `max_x`: one per power of ten of `1 - p`,
/// plus 50% (`(position, label)`).
pub fn percentile_ticks(max_x: f64) -> Vec<(f64, String)> {
    let top = max_x.ceil().max(1.0) as u32;
    let mut t: Vec<(f64, String)> = (0..=top).map(|n| (n as f64, percentile_label(n))).collect();
    t.insert(1, (nines(50.0), "50%".into()));
    t
}

/// How values of an axis are shown: the unit is picked from the largest value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Microseconds, shown in µs, ms or s.
    Micros,
    /// Bytes, shown in B, KiB, MiB or GiB.
    Bytes,
    /// A rate per second, shown as msg/s, k msg/s or M msg/s (`unit` names the thing).
    Rate(&'static str),
    /// Percent.
    Percent,
    /// Seconds.
    Seconds,
    /// A ratio (×).
    Ratio,
    /// A plain number with a unit.
    Plain(&'static str),
}

impl Format {
    /// Divisor and unit name for data whose largest absolute value is `max`.
    pub fn unit(self, max: f64) -> (f64, String) {
        let max = max.abs();
        match self {
            Format::Micros => {
                if max >= 1e6 {
                    (1e6, "s".into())
                } else if max >= 1e3 {
                    (1e3, "ms".into())
                } else {
                    (1.0, "µs".into())
                }
            }
            Format::Bytes => {
                let k = 1024f64;
                if max >= k * k * k {
                    (k * k * k, "GiB".into())
                } else if max >= k * k {
                    (k * k, "MiB".into())
                } else if max >= k {
                    (k, "KiB".into())
                } else {
                    (1.0, "B".into())
                }
            }
            Format::Rate(what) => {
                if max >= 1e6 {
                    (1e6, format!("M {what}"))
                } else if max >= 1e4 {
                    (1e3, format!("k {what}"))
                } else {
                    (1.0, what.into())
                }
            }
            Format::Percent => (1.0, "%".into()),
            Format::Seconds => (1.0, "s".into()),
            Format::Ratio => (1.0, "×".into()),
            Format::Plain(u) => {
                if max >= 1e6 {
                    (1e6, format!("M {u}"))
                } else if max >= 1e4 {
                    (1e3, format!("k {u}"))
                } else {
                    (1.0, u.into())
                }
            }
        }
    }

    /// One value with its unit, three significant digits (for bar labels).
    pub fn value(self, v: f64) -> String {
        let (div, unit) = self.unit(v);
        let x = v / div;
        let text = if x.abs() >= 100.0 {
            format!("{x:.0}")
        } else if x.abs() >= 10.0 {
            format!("{x:.1}")
        } else {
            format!("{x:.2}")
        };
        match self {
            Format::Ratio => format!("×{text}"),
            Format::Percent => format!("{text}%"),
            _ => format!("{text} {unit}"),
        }
    }
}

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

/// One line of a [`LineChart`]: `(x, y)` points; `None` y values break the line.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend name.
    pub name: String,
    /// Stroke colour.
    pub color: String,
    /// Points in data units.
    pub points: Vec<(f64, Option<f64>)>,
    /// Dashed stroke.
    pub dashed: bool,
}

/// A line chart.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Title (also the SVG `<title>`).
    pub title: String,
    /// X axis name (without unit for [`Scale::Percentile`]).
    pub x_label: String,
    /// X axis kind.
    pub x_scale: Scale,
    /// X values format (unit in the axis name).
    pub x_format: Format,
    /// Y axis name (the unit is appended).
    pub y_label: String,
    /// Y axis kind.
    pub y_scale: Scale,
    /// Y values format.
    pub y_format: Format,
    /// The lines.
    pub series: Vec<Series>,
    /// Width in px.
    pub width: f64,
    /// Height in px.
    pub height: f64,
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

impl LineChart {
    /// True when no series has two points to join.
    pub fn is_empty(&self) -> bool {
        self.series
            .iter()
            .all(|s| s.points.iter().filter(|p| p.1.is_some()).count() < 2)
    }

    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
        let (w, h) = (self.width, self.height);
        let (pw, ph) = (w - ML - MR, h - MT - MB);
        let xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().filter(|p| p.1.is_some()).map(|p| p.0))
            .collect();
        let ys: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().filter_map(|p| p.1))
            .filter(|v| self.y_scale != Scale::Log || *v > 0.0)
            .collect();
        let xm = axis(&xs, self.x_scale, self.x_format, 8);
        let ym = axis(&ys, self.y_scale, self.y_format, 6);
        let px = |v: f64| ML + xm.frac(v) * pw;
        let py = |v: f64| MT + ph - ym.frac(v) * ph;
        let mut o = String::new();
        svg_open(&mut o, "line-chart", &self.title, w, h);
        // Grid and ticks.
        for (v, label) in &ym.ticks {
            let y = py(*v);
            let _ = write!(
                o,
                r##"<line class="grid" x1="{ML:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e3e3e3"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end" fill="#444">{}</text>"##,
                ML + pw,
                ML - 6.0,
                y + 4.0,
                esc(label)
            );
        }
        for (v, label) in &xm.ticks {
            let x = px(*v);
            let _ = write!(
                o,
                r##"<line class="grid" x1="{x:.1}" y1="{MT:.1}" x2="{x:.1}" y2="{:.1}" stroke="#efefef"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#444">{}</text>"##,
                MT + ph,
                MT + ph + 16.0,
                esc(label)
            );
        }
        let _ = write!(
            o,
            r##"<line class="axis" x1="{ML:.1}" y1="{MT:.1}" x2="{ML:.1}" y2="{b:.1}" stroke="#555"/><line class="axis" x1="{ML:.1}" y1="{b:.1}" x2="{r:.1}" y2="{b:.1}" stroke="#555"/>"##,
            b = MT + ph,
            r = ML + pw
        );
        let _ = write!(
            o,
            r##"<text class="axis-title" x="{:.1}" y="{:.1}" text-anchor="middle" fill="#222">{}</text>"##,
            ML + pw / 2.0,
            h - 8.0,
            esc(&axis_title(&self.x_label, &xm, self.x_format))
        );
        let _ = write!(
            o,
            r##"<text class="axis-title" transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle" fill="#222">{}</text>"##,
            MT + ph / 2.0,
            esc(&axis_title(&self.y_label, &ym, self.y_format))
        );
        // Lines.
        for s in &self.series {
            let mut d = String::new();
            let mut pen = false;
            let mut n = 0usize;
            for &(x, y) in &s.points {
                match y {
                    Some(y) if self.y_scale != Scale::Log || y > 0.0 => {
                        let _ = write!(
                            d,
                            "{}{:.1} {:.1} ",
                            if pen { 'L' } else { 'M' },
                            px(x),
                            py(y)
                        );
                        pen = true;
                        n += 1;
                    }
                    _ => pen = false,
                }
            }
            if n == 0 {
                continue;
            }
            let _ = write!(
                o,
                r#"<path class="series" data-series="{}" data-points="{n}" d="{}" fill="none" stroke="{}" stroke-width="2" stroke-linejoin="round"{}/>"#,
                esc(&s.name),
                d.trim_end(),
                s.color,
                if s.dashed {
                    r#" stroke-dasharray="6 4""#
                } else {
                    ""
                }
            );
            if n <= 40 {
                for &(x, y) in &s.points {
                    if let Some(y) = y.filter(|y| self.y_scale != Scale::Log || *y > 0.0) {
                        let _ = write!(
                            o,
                            r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"/>"#,
                            px(x),
                            py(y),
                            s.color
                        );
                    }
                }
            }
        }
        let items: Vec<(&str, &str, bool, bool)> = self
            .series
            .iter()
            .map(|s| (s.name.as_str(), s.color.as_str(), s.dashed, false))
            .collect();
        legend(&mut o, &items, ML, 40.0, pw);
        o.push_str("</svg>");
        o
    }
}

/// One group member of a [`BarChart`] (a target).
#[derive(Debug, Clone)]
pub struct BarSeries {
    /// Legend name.
    pub name: String,
    /// Fill colour.
    pub color: String,
    /// Bar height per category (`None`: no bar).
    pub values: Vec<Option<f64>>,
    /// Individual values per category, drawn as dots on the bar (the runs behind a median).
    pub dots: Vec<Vec<f64>>,
}

/// A grouped bar chart: categories along x, one bar per series in each.
#[derive(Debug, Clone)]
pub struct BarChart {
    /// Title.
    pub title: String,
    /// Category names.
    pub categories: Vec<String>,
    /// The series.
    pub series: Vec<BarSeries>,
    /// Y axis name (unit appended).
    pub y_label: String,
    /// Values format.
    pub format: Format,
    /// A horizontal reference line (1.0 for ratios).
    pub reference: Option<f64>,
    /// Width in px.
    pub width: f64,
    /// Height in px.
    pub height: f64,
}

impl BarChart {
    /// True when there is no bar.
    pub fn is_empty(&self) -> bool {
        self.series
            .iter()
            .all(|s| s.values.iter().all(Option::is_none))
    }

    /// The chart as an `<svg>` element.
    pub fn render(&self) -> String {
        let (w, h) = (self.width, self.height);
        let (pw, ph) = (w - ML - MR, h - MT - MB);
        let mut all: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| {
                s.values
                    .iter()
                    .flatten()
                    .copied()
                    .chain(s.dots.iter().flatten().copied())
            })
            .collect();
        all.extend(self.reference);
        let ym = axis(&all, Scale::Linear, self.format, 6);
        let py = |v: f64| MT + ph - ym.frac(v) * ph;
        let mut o = String::new();
        svg_open(&mut o, "bar-chart", &self.title, w, h);
        for (v, label) in &ym.ticks {
            let y = py(*v);
            let _ = write!(
                o,
                r##"<line class="grid" x1="{ML:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e3e3e3"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end" fill="#444">{}</text>"##,
                ML + pw,
                ML - 6.0,
                y + 4.0,
                esc(label)
            );
        }
        let base = py(ym.lo.max(0.0));
        let ncat = self.categories.len().max(1) as f64;
        let nser = self.series.len().max(1) as f64;
        let group_w = pw / ncat;
        let bar_w = (group_w * 0.8 / nser).min(60.0);
        for (ci, cat) in self.categories.iter().enumerate() {
            let gx = ML + ci as f64 * group_w + (group_w - bar_w * nser) / 2.0;
            for (si, s) in self.series.iter().enumerate() {
                let x = gx + si as f64 * bar_w;
                if let Some(v) = s.values.get(ci).copied().flatten() {
                    let y = py(v);
                    let (top, height) = if y <= base {
                        (y, base - y)
                    } else {
                        (base, y - base)
                    };
                    let _ = write!(
                        o,
                        r#"<rect class="bar" data-series="{}" data-category="{}" x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                        esc(&s.name),
                        esc(cat),
                        x + 1.0,
                        top,
                        (bar_w - 2.0).max(1.0),
                        height.max(0.5),
                        s.color,
                        esc(&s.name),
                        esc(&self.format.value(v))
                    );
                    let _ = write!(
                        o,
                        r##"<text class="bar-label" x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="#222">{}</text>"##,
                        x + bar_w / 2.0,
                        top - 4.0,
                        esc(&self.format.value(v))
                    );
                }
                for d in s.dots.get(ci).into_iter().flatten() {
                    let _ = write!(
                        o,
                        r##"<circle class="run" cx="{:.1}" cy="{:.1}" r="2.5" fill="#fff" stroke="#222"/>"##,
                        x + bar_w / 2.0,
                        py(*d)
                    );
                }
            }
            let _ = write!(
                o,
                r##"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle" fill="#333">{}</text>"##,
                ML + (ci as f64 + 0.5) * group_w,
                MT + ph + 16.0,
                esc(cat)
            );
        }
        if let Some(r) = self.reference {
            let y = py(r);
            let _ = write!(
                o,
                r##"<line class="reference" x1="{ML:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#222" stroke-dasharray="4 3"/>"##,
                ML + pw
            );
        }
        let _ = write!(
            o,
            r##"<line class="axis" x1="{ML:.1}" y1="{MT:.1}" x2="{ML:.1}" y2="{b:.1}" stroke="#555"/><line class="axis" x1="{ML:.1}" y1="{base:.1}" x2="{r:.1}" y2="{base:.1}" stroke="#555"/>"##,
            b = MT + ph,
            r = ML + pw
        );
        let _ = write!(
            o,
            r##"<text class="axis-title" transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle" fill="#222">{}</text>"##,
            MT + ph / 2.0,
            esc(&axis_title(&self.y_label, &ym, self.format))
        );
        let items: Vec<(&str, &str, bool, bool)> = self
            .series
            .iter()
            .map(|s| (s.name.as_str(), s.color.as_str(), false, true))
            .collect();
        legend(&mut o, &items, ML, 40.0, pw);
        o.push_str("</svg>");
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_numbers_and_ticks() {
        assert_eq!(nice_number(0.73, true), 1.0);
        assert_eq!(nice_number(0.43, true), 0.5);
        assert_eq!(nice_number(0.73, false), 1.0);
        assert_eq!(nice_number(1730.0, true), 2000.0);
        assert_eq!(nice_number(3.2, false), 5.0);
        let t = nice_ticks(0.0, 97.0, 6);
        assert_eq!(t.step, 20.0);
        assert_eq!(t.values, vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        let t = nice_ticks(0.0, 0.93, 5);
        assert_eq!(t.step, 0.2);
        assert_eq!(t.values, vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        let t = nice_ticks(12_345.0, 67_890.0, 6);
        assert_eq!(t.step, 10_000.0);
        assert_eq!(t.min, 10_000.0);
        assert_eq!(t.max, 70_000.0);
        let t = nice_ticks(-3.0, 7.0, 6);
        assert_eq!(t.values.first(), Some(&-4.0));
        assert_eq!(t.values.last(), Some(&8.0));
        // Degenerate ranges still give an axis.
        let t = nice_ticks(0.0, 0.0, 5);
        assert_eq!((t.min, t.max), (0.0, 1.0));
        let t = nice_ticks(5.0, 5.0, 5);
        assert!(t.min <= 5.0 && t.max > 5.0 && t.values.len() >= 2, "{t:?}");
        let t = nice_ticks(f64::NAN, 1.0, 5);
        assert_eq!((t.min, t.max), (0.0, 1.0));
        // Every tick is a multiple of the step, ticks cover the data.
        for (lo, hi) in [(0.0, 1.0), (0.0, 3.3), (0.1, 0.17), (0.0, 123_456_789.0)] {
            let t = nice_ticks(lo, hi, 6);
            assert!(t.min <= lo && t.max >= hi, "{lo} {hi} {t:?}");
            assert!((2..=12).contains(&t.values.len()), "{lo} {hi} {t:?}");
            for v in &t.values {
                let k = v / t.step;
                assert!((k - k.round()).abs() < 1e-6, "{v} {t:?}");
            }
        }
        assert_eq!(decimals_for(0.2), 1);
        assert_eq!(decimals_for(0.05), 2);
        assert_eq!(decimals_for(500.0), 0);
    }

    #[test]
    fn log_axes() {
        let (lo, hi, t) = log_ticks(37.0, 52_000.0);
        assert_eq!((lo, hi), (10.0, 100_000.0));
        assert_eq!(t, vec![10.0, 100.0, 1000.0, 10_000.0, 100_000.0]);
        let (lo, hi, t) = log_ticks(0.3, 4.0);
        assert_eq!((lo, hi), (0.1, 10.0));
        assert_eq!(t, vec![0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0]);
        let (lo, hi, _) = log_ticks(100.0, 100.0);
        assert_eq!((lo, hi), (100.0, 1000.0));
        // The percentile axis.
        assert!((nines(90.0) - 1.0).abs() < 1e-9);
        assert!((nines(99.9) - 3.0).abs() < 1e-9);
        assert!((nines(99.99) - 4.0).abs() < 1e-9);
        assert!((nines(50.0) - std::f64::consts::LOG10_2).abs() < 1e-12);
        assert_eq!(nines(0.0), 0.0);
        assert!(nines(100.0).is_finite());
        assert!((percentile_at(2.0) - 99.0).abs() < 1e-9);
        assert!((percentile_at(nines(99.95)) - 99.95).abs() < 1e-9);
        let labels: Vec<String> = percentile_ticks(4.0).into_iter().map(|t| t.1).collect();
        assert_eq!(labels, vec!["0%", "50%", "90%", "99%", "99.9%", "99.99%"]);
        assert_eq!(percentile_label(6), "99.9999%");
    }

    #[test]
    fn units() {
        assert_eq!(Format::Micros.unit(500.0), (1.0, "µs".to_string()));
        assert_eq!(Format::Micros.unit(25_000.0), (1e3, "ms".to_string()));
        assert_eq!(Format::Micros.unit(2e6), (1e6, "s".to_string()));
        assert_eq!(Format::Bytes.unit(3.0 * 1024.0 * 1024.0).1, "MiB");
        assert_eq!(Format::Rate("msg/s").unit(250_000.0).1, "k msg/s");
        assert_eq!(Format::Micros.value(1500.0), "1.50 ms");
        assert_eq!(Format::Ratio.value(1.234), "×1.23");
        assert_eq!(esc("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }

    #[test]
    fn charts_render() {
        let chart = LineChart {
            title: "Latency <over> time".into(),
            x_label: "time".into(),
            x_scale: Scale::Linear,
            x_format: Format::Seconds,
            y_label: "latency".into(),
            y_scale: Scale::Linear,
            y_format: Format::Micros,
            series: vec![Series {
                name: "p99".into(),
                color: PALETTE[0].into(),
                points: vec![
                    (1.0, Some(1200.0)),
                    (2.0, None),
                    (3.0, Some(1500.0)),
                    (4.0, Some(900.0)),
                ],
                dashed: false,
            }],
            width: 600.0,
            height: 300.0,
        };
        assert!(!chart.is_empty());
        let svg = chart.render();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("Latency &lt;over&gt; time"));
        assert!(svg.contains("latency (ms)"));
        // The gap splits the line: M x y M x y L x y.
        assert!(svg.contains(r#"data-points="3""#), "{svg}");
        let d = svg
            .split(" d=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert_eq!(d.matches('L').count(), 1, "{d}");
        let bars = BarChart {
            title: "p99".into(),
            categories: vec!["p99 latency".into()],
            series: vec![
                BarSeries {
                    name: "a".into(),
                    color: PALETTE[0].into(),
                    values: vec![Some(100.0)],
                    dots: vec![vec![90.0, 110.0]],
                },
                BarSeries {
                    name: "b".into(),
                    color: PALETTE[1].into(),
                    values: vec![None],
                    dots: vec![vec![]],
                },
            ],
            y_label: "latency".into(),
            format: Format::Micros,
            reference: None,
            width: 400.0,
            height: 260.0,
        };
        let svg = bars.render();
        assert_eq!(svg.matches(r#"class="bar""#).count(), 1);
        assert_eq!(svg.matches(r#"class="run""#).count(), 2);
    }
}
