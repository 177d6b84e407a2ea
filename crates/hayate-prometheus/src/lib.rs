//! The Prometheus exposition glue shared by the broker's `/metrics` (`hayate-http`) and
//! `hayate bench --metrics-listen` (`hayate-bench`, which must not depend on the broker's
//! crates): metric families written with `prometheus-client` from values read at scrape time
//! (constant counters, gauges and histograms, nothing registered or updated between scrapes),
//! and the HTTP answer carrying a registry's text.
//!
//! Names are given without the suffixes `prometheus-client` adds: the unit (`_seconds`,
//! `_bytes`) when one is passed, and `_total` on counters.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt;

/// Labels of one sample of a family: `(name, value)` pairs.
pub type Labels = Vec<(&'static str, String)>;

/// One label.
pub fn label(name: &'static str, value: &str) -> Labels {
    vec![(name, value.to_string())]
}

/// A histogram's figures at one moment: what a Prometheus histogram shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramFigures {
    /// `(upper bound, observations in this bucket)` per bucket, not cumulative, in
    /// increasing order; the last bound is `f64::INFINITY`.
    pub buckets: Vec<(f64, u64)>,
    /// The sum of the observations.
    pub sum: f64,
}

impl HistogramFigures {
    /// Observations.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|(_, n)| n).sum()
    }

    /// Figures from per-bucket counts (not cumulative) against their finite upper `bounds`:
    /// one count per bound, then the count above the last bound. Missing counts are 0.
    pub fn from_counts(bounds: &[f64], counts: &[u64], sum: f64) -> HistogramFigures {
        let bounds = bounds.iter().copied().chain([f64::INFINITY]);
        HistogramFigures {
            buckets: bounds
                .zip(counts.iter().copied().chain(std::iter::repeat(0)))
                .collect(),
            sum,
        }
    }
}

/// Writes metric families, each with its HELP and TYPE lines and its samples.
pub struct Families<'a, 'b> {
    encoder: &'a mut DescriptorEncoder<'b>,
}

impl<'a, 'b> Families<'a, 'b> {
    /// Writes into a collector's encoder.
    pub fn new(encoder: &'a mut DescriptorEncoder<'b>) -> Families<'a, 'b> {
        Families { encoder }
    }

    /// A counter without labels (`NAME[_UNIT]_total`).
    pub fn counter(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        value: u64,
    ) -> fmt::Result {
        let encoder =
            self.encoder
                .encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
        ConstCounter::new(value).encode(encoder)
    }

    /// A counter of a fractional quantity (seconds) without labels.
    pub fn counter_f64(&mut self, name: &str, help: &str, unit: Unit, value: f64) -> fmt::Result {
        let encoder =
            self.encoder
                .encode_descriptor(name, help, Some(&unit), MetricType::Counter)?;
        ConstCounter::new(value).encode(encoder)
    }

    /// A gauge without labels.
    pub fn gauge<N>(&mut self, name: &str, help: &str, unit: Option<Unit>, value: N) -> fmt::Result
    where
        ConstGauge<N>: EncodeMetric,
    {
        let encoder =
            self.encoder
                .encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
        ConstGauge::new(value).encode(encoder)
    }

    /// A histogram without labels, in seconds (`NAME_seconds_bucket`, `_sum`, `_count`).
    pub fn histogram(&mut self, name: &str, help: &str, figures: &HistogramFigures) -> fmt::Result {
        let unit = Unit::Seconds;
        let mut encoder =
            self.encoder
                .encode_descriptor(name, help, Some(&unit), MetricType::Histogram)?;
        encoder.encode_histogram::<NoLabelSet>(figures.sum, figures.count(), &figures.buckets, None)
    }

    /// A counter or gauge family with one sample per label set; nothing without samples.
    pub fn family(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        samples: &[(Labels, u64)],
    ) -> fmt::Result {
        if samples.is_empty() {
            return Ok(());
        }
        let mut encoder = self.encoder.encode_descriptor(name, help, None, kind)?;
        for (labels, value) in samples {
            let sample = encoder.encode_family(labels)?;
            match kind {
                MetricType::Counter => ConstCounter::new(*value).encode(sample)?,
                _ => ConstGauge::new(*value).encode(sample)?,
            }
        }
        Ok(())
    }
}

/// The HTTP answer to a scrape: the registry in the text format (0.0.4), or 500 (logged) when
/// it cannot be encoded.
pub fn text_response(registry: &Registry) -> Response {
    let mut text = String::with_capacity(16 * 1024);
    match prometheus_client::encoding::prometheus_text::encode(&mut text, registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        Err(error) => {
            tracing::error!(%error, "metrics_encoding_failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::collector::Collector;

    #[derive(Debug)]
    struct Fixed;

    impl Collector for Fixed {
        fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
            let mut out = Families::new(&mut encoder);
            out.counter("t_events", "Events.", None, 3)?;
            out.gauge("t_memory", "Memory.", Some(Unit::Bytes), 7u64)?;
            out.family(
                "t_by_kind",
                "By kind.",
                MetricType::Counter,
                &[(label("kind", "a"), 1), (label("kind", "b"), 2)],
            )?;
            out.family("t_empty", "Nothing.", MetricType::Gauge, &[])?;
            let figures = HistogramFigures::from_counts(&[0.001, 0.01], &[2, 1, 1], 0.5);
            out.histogram("t_wait", "Waits.", &figures)
        }
    }

    #[test]
    fn families_are_written_with_units_and_suffixes() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        for line in [
            "t_events_total 3",
            "t_memory_bytes 7",
            "t_by_kind_total{kind=\"a\"} 1",
            "t_by_kind_total{kind=\"b\"} 2",
            "t_wait_seconds_bucket{le=\"0.001\"} 2",
            "t_wait_seconds_bucket{le=\"0.01\"} 3",
            "t_wait_seconds_bucket{le=\"+Inf\"} 4",
            "t_wait_seconds_count 4",
            "t_wait_seconds_sum 0.5",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(!text.contains("t_empty"), "{text}");
    }
}
