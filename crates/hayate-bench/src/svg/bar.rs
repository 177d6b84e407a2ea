//! Grouped bar charts.

use super::{axis, axis_title, esc, legend, svg_open, Format, Scale, MB, ML, MR, MT};
use std::fmt::Write as _;

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
