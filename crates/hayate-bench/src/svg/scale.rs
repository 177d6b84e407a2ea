//! Axis scales: 1-2-5 linear ticks, log ticks, the percentile axis and value formats.

use super::clean;

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
