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
