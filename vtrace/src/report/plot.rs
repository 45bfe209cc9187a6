//! Figures as inline SVG, drawn with plotters: one function per
//! [`FigureKind`], colours by series name so a state, role or platform looks
//! the same in every figure.

use plotters::{coord::ranged1d::SegmentValue, prelude::*};

use crate::report_model::{
    Figure, FigureKind, LineSeries as Line, RangedSeries, Series,
    palette::{STATE_COLORS, color_of},
};

const WIDTH: u32 = 860;
const FONT: &str = "sans-serif";

/// The figure as an `<svg>` element.
pub fn svg(figure: &Figure) -> String {
    let mut out = String::new();
    let drawn = match &figure.kind {
        FigureKind::StackedBars { categories, series } => stacked_bars(&mut out, figure, categories, series),
        FigureKind::Histogram {
            bucket_label,
            buckets,
            counts,
            marked_from,
        } => histogram(&mut out, figure, bucket_label, buckets, counts, marked_from.as_ref()),
        FigureKind::Lines { x_label, series } => lines(&mut out, figure, x_label, series),
        FigureKind::Bars { categories, series } => ranged_bars(&mut out, figure, categories, series),
    };
    match drawn {
        Ok(()) => out,
        // A figure that cannot be drawn says so in its place; the tables stay.
        Err(e) => format!("<p class=\"error\">{}: not drawn ({e})</p>", html_escape(&figure.title)),
    }
}

type Drawn = Result<(), Box<dyn std::error::Error>>;

/// An axis value: whole numbers without decimals, small ones with up to two.
fn tick(v: &f64) -> String {
    if v.abs() >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn max_or_one(v: f64) -> f64 {
    if v.is_finite() && v > 0.0 { v * 1.08 } else { 1.0 }
}

/// The value axis of horizontal bars: room on the right for the legend,
/// which no bar reaches.
fn bars_axis_max(v: f64) -> f64 {
    max_or_one(v) * 1.25
}

/// Horizontal bars are listed top down in the order given; plotters counts
/// segments bottom up. (Its integer ranges include their end: `0..n - 1`
/// is n segments; a range of one value draws nothing, so one row takes
/// `0..1`, the lower of two segments.)
fn top_down(n: usize, i: usize) -> usize {
    n - 1 - i.min(n - 1)
}

/// A white canvas of the report's width, and a chart on it titled as the
/// figure with room for the axis labels.
fn chart_on<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    f: &Figure,
    x_label_area: u32,
    y_label_area: u32,
) -> Result<ChartBuilder<'a, 'b, SVGBackend<'b>>, Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(&f.title, (FONT, 18))
        .margin(10)
        .x_label_area_size(x_label_area)
        .y_label_area_size(y_label_area);
    Ok(builder)
}

/// A legend entry's coloured square.
fn swatch(color: RGBColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
}

/// The figure height a legend of `entries` needs inside the plot area,
/// below the title and above the axis labels.
fn legend_height(entries: usize) -> u32 {
    90 + 20 * entries as u32
}

fn draw_legend<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> Drawn {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn stacked_bars(out: &mut String, f: &Figure, categories: &[String], series: &[Series]) -> Drawn {
    let n = categories.len().max(1);
    // Room for every bar, and for the legend inside the plot (a VM's two
    // path bars carry seven stages).
    let height = (90 + 28 * n as u32).max(legend_height(series.len()));
    let max = (0..categories.len())
        .map(|i| {
            series
                .iter()
                .map(|s| s.values.get(i).copied().unwrap_or(0.0))
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    let longest = categories.iter().map(|c| c.len()).max().unwrap_or(4) as u32;
    let root = SVGBackend::with_string(out, (WIDTH, height)).into_drawing_area();
    let mut chart = chart_on(&root, f, 36, (longest * 7 + 10).clamp(60, 360))?
        .build_cartesian_2d(0.0..bars_axis_max(max), (0..n.max(2) - 1).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc(&f.value_label)
        .x_label_formatter(&tick)
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            // One bar still spans two segments: only the one it is in is named.
            SegmentValue::CenterOf(i) if *i < n => categories.get(top_down(n, *i)).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()?;
    let mut start = vec![0.0; n];
    for s in series {
        let color = color_of(&s.name);
        let bars: Vec<_> = s
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| **v > 0.0)
            .map(|(i, v)| {
                let x0 = start[i];
                start[i] += v;
                let row = top_down(n, i);
                Rectangle::new(
                    [(x0, SegmentValue::Exact(row)), (x0 + v, SegmentValue::Exact(row + 1))],
                    color.filled(),
                )
            })
            .collect();
        chart.draw_series(bars)?.label(&s.name).legend(swatch(color));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}

fn histogram(
    out: &mut String,
    f: &Figure,
    bucket_label: &str,
    buckets: &[String],
    counts: &[f64],
    marked_from: Option<&(usize, String)>,
) -> Drawn {
    let n = buckets.len().max(1);
    let max = counts.iter().copied().fold(0.0, f64::max);
    let root = SVGBackend::with_string(out, (WIDTH, 320)).into_drawing_area();
    let mut chart =
        chart_on(&root, f, 40, 70)?.build_cartesian_2d((0..n.max(2) - 1).into_segmented(), 0.0..max_or_one(max))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(bucket_label)
        .y_desc(&f.value_label)
        .y_label_formatter(&tick)
        .x_labels(n)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => buckets.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()?;
    let split = marked_from.map_or(n, |(i, _)| *i);
    // Within: the first state's blue; beyond: the hardirq red.
    let (within, beyond) = (STATE_COLORS[0].1, STATE_COLORS[3].1);
    let bar = |i: usize, c: f64, color: RGBColor| {
        Rectangle::new(
            [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), c)],
            color.filled(),
        )
    };
    let (first, rest) = counts.split_at(split.min(counts.len()));
    chart
        .draw_series(first.iter().enumerate().map(|(i, c)| bar(i, *c, within)))?
        .label(if marked_from.is_some() {
            "within"
        } else {
            f.value_label.as_str()
        })
        .legend(swatch(within));
    if let Some((_, why)) = marked_from {
        chart
            .draw_series(rest.iter().enumerate().map(|(i, c)| bar(split + i, *c, beyond)))?
            .label(why)
            .legend(swatch(beyond));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}

fn lines(out: &mut String, f: &Figure, x_label: &str, series: &[Line]) -> Drawn {
    let points = || series.iter().flat_map(|s| s.points.iter());
    let x_max = points().map(|p| p.0).fold(0.0, f64::max);
    let y_max = points().map(|p| p.1).fold(0.0, f64::max);
    let root = SVGBackend::with_string(out, (WIDTH, 340)).into_drawing_area();
    let mut chart = chart_on(&root, f, 40, 70)?.build_cartesian_2d(0.0..max_or_one(x_max), 0.0..max_or_one(y_max))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(&f.value_label)
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .draw()?;
    for s in series {
        let color = color_of(&s.name);
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))?
            .label(&s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(2)));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}

/// Rows `category series`, grouped by category; each bar its value, its
/// whisker the range.
fn ranged_bars(out: &mut String, f: &Figure, categories: &[String], series: &[RangedSeries]) -> Drawn {
    let mut rows: Vec<(String, &str, (f64, f64, f64))> = Vec::new();
    for (i, c) in categories.iter().enumerate() {
        for s in series {
            if let Some(Some(v)) = s.values.get(i) {
                rows.push((format!("{c} {}", s.name), &s.name, *v));
            }
        }
    }
    let n = rows.len().max(1);
    let max = rows.iter().map(|r| r.2.0.max(r.2.2)).fold(0.0, f64::max);
    let longest = rows.iter().map(|r| r.0.len()).max().unwrap_or(4) as u32;
    let root = SVGBackend::with_string(out, (WIDTH, 90 + 24 * n as u32)).into_drawing_area();
    let mut chart = chart_on(&root, f, 36, (longest * 7 + 10).clamp(60, 360))?
        .build_cartesian_2d(0.0..bars_axis_max(max), (0..n.max(2) - 1).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc(&f.value_label)
        .x_label_formatter(&tick)
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) if *i < n => rows.get(top_down(n, *i)).map(|r| r.0.clone()).unwrap_or_default(),
            _ => String::new(),
        })
        .draw()?;
    for s in series {
        let color = color_of(&s.name);
        let mine = || {
            rows.iter()
                .enumerate()
                .filter(|(_, r)| r.1 == s.name)
                .map(|(i, r)| (top_down(n, i), r))
        };
        chart
            .draw_series(mine().map(|(i, r)| {
                Rectangle::new(
                    [(0.0, SegmentValue::Exact(i)), (r.2.0, SegmentValue::Exact(i + 1))],
                    color.filled(),
                )
            }))?
            .label(&s.name)
            .legend(swatch(color));
        chart.draw_series(mine().map(|(i, r)| {
            PathElement::new(
                vec![(r.2.1, SegmentValue::CenterOf(i)), (r.2.2, SegmentValue::CenterOf(i))],
                BLACK.stroke_width(2),
            )
        }))?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    root.present()?;
    Ok(())
}

pub fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{LineSeries, Series};
    use crate::report_model::palette::{BOUNDARY_PART_COLORS, PLATFORM_COLORS, ROLE_COLORS, STAGE_COLORS};

    fn figure(kind: FigureKind) -> Figure {
        Figure {
            title: "t".into(),
            value_label: "v".into(),
            kind,
        }
    }

    #[test]
    fn every_kind_draws_its_series_with_their_names() {
        let bars = svg(&figure(FigureKind::StackedBars {
            categories: vec!["host/app".into(), "kata/vmm".into()],
            series: vec![
                Series {
                    name: "user".into(),
                    values: vec![1.0, 2.0],
                },
                Series {
                    name: "system".into(),
                    values: vec![0.5, 0.0],
                },
            ],
        }));
        assert!(bars.starts_with("<svg") && bars.contains("kata/vmm") && bars.contains(">\nsystem\n<"));
        assert!(bars.contains("#4C72B0"), "user in its colour");
        let hist = svg(&figure(FigureKind::Histogram {
            bucket_label: "bytes".into(),
            buckets: vec!["<=64".into(), "<=1514".into(), "<=65536".into()],
            counts: vec![10.0, 5.0, 2.0],
            marked_from: Some((2, "larger than a full frame".into())),
        }));
        assert!(hist.contains("&lt;=1514") && hist.contains("larger than a full frame"));
        assert!(hist.contains("#C44E52"), "the marked buckets drawn apart");
        let lines = svg(&figure(FigureKind::Lines {
            x_label: "s".into(),
            series: vec![LineSeries {
                name: "vhost".into(),
                points: vec![(1.0, 0.5), (2.0, 0.7)],
            }],
        }));
        assert!(lines.contains(">\nvhost\n<") && lines.contains("<polyline"));
        let bars = svg(&figure(FigureKind::Bars {
            categories: vec!["64".into(), "16384".into()],
            series: vec![crate::report::model::RangedSeries {
                name: "runc".into(),
                values: vec![Some((10.0, 9.0, 11.0)), None],
            }],
        }));
        assert!(
            bars.contains("64 runc") && !bars.contains("16384 runc") && bars.contains("<polyline"),
            "{bars}"
        );
    }

    #[test]
    fn roles_and_states_keep_distinct_colours() {
        let mut seen: Vec<RGBColor> = STATE_COLORS[..5].iter().map(|(_, c)| *c).collect();
        for (role, c) in ROLE_COLORS.iter().filter(|(r, _)| *r != "idle") {
            assert!(!seen.contains(c), "{role} shares a colour");
            seen.push(*c);
        }
        assert_eq!(color_of("kata/vmm"), color_of("vmm"));
        assert_eq!(color_of("eth0"), color_of("eth0"));
    }

    #[test]
    fn platforms_keep_distinct_colours() {
        let mut seen: Vec<RGBColor> = Vec::new();
        for (platform, _) in PLATFORM_COLORS {
            let c = color_of(platform);
            assert!(!seen.contains(&c), "{platform} shares a colour");
            seen.push(c);
        }
        let known = crate::platforms::profiles(None).unwrap();
        for p in &known {
            assert!(
                PLATFORM_COLORS.iter().any(|(name, _)| *name == p.name),
                "{} has a colour",
                p.name
            );
        }
    }

    #[test]
    fn every_path_stage_has_its_own_colour() {
        let mut seen: Vec<RGBColor> = Vec::new();
        // The stages, then the boundary's parts that are no stage.
        let parts = crate::views::boundary::GUEST_PARTS;
        let names = vtrace_common::path_stage::NAMES.into_iter().chain(
            parts
                .into_iter()
                .filter(|p| !vtrace_common::path_stage::NAMES.contains(p)),
        );
        for stage in names {
            let c = color_of(stage);
            assert!(!seen.contains(&c), "{stage} shares a colour");
            assert!(
                STAGE_COLORS
                    .iter()
                    .chain(&BOUNDARY_PART_COLORS)
                    .any(|(s, _)| *s == stage),
                "{stage} has a colour"
            );
            seen.push(c);
        }
    }

    #[test]
    fn a_stacked_bar_figure_is_tall_enough_for_its_legend() {
        let series: Vec<Series> = vtrace_common::path_stage::NAMES
            .iter()
            .map(|s| Series {
                name: s.to_string(),
                values: vec![1.0, 2.0],
            })
            .collect();
        let out = svg(&figure(FigureKind::StackedBars {
            categories: vec!["a rx".into(), "a tx".into()],
            series,
        }));
        let height: u32 = out
            .split("height=\"")
            .nth(1)
            .and_then(|h| h.split('"').next())
            .and_then(|h| h.parse().ok())
            .unwrap();
        assert!(height >= legend_height(7), "{height}");
    }

    /// One bar spans two of the axis's segments; its name is drawn once.
    #[test]
    fn a_single_bar_is_named_once() {
        let out = svg(&figure(FigureKind::StackedBars {
            categories: vec!["only-vm".into()],
            series: vec![Series {
                name: "user".into(),
                values: vec![3.0],
            }],
        }));
        assert_eq!(out.matches("only-vm").count(), 1, "{out}");
    }
}
