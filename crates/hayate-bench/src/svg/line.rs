//! Line charts.

use super::{axis, axis_title, esc, legend, svg_open, Format, Scale, MB, ML, MR, MT};
use std::fmt::Write as _;

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
