//! The typed report: what each layer (and the recording itself) has to say,
//! as sections of tables, text lines, figures, metrics and JSON fields. The
//! text, JSON, CSV and HTML renderers render any section the same way, so a
//! new layer adds its section in its own `summary.rs` without touching them.

pub mod palette;

use serde::Serialize;
use serde_json::Value;

/// One part of a report.
#[derive(Debug, Default)]
pub struct Section {
    /// Stable name (the layer's, or `run`, `probes`, `overhead`).
    pub id: &'static str,
    /// Heading where a renderer shows one (HTML).
    pub title: &'static str,
    /// What the text report shows, in order.
    pub blocks: Vec<Block>,
    /// Fields of the JSON report, under their documented names
    /// (docs/recording-schema.md, "Report JSON").
    pub json: Vec<(&'static str, Value)>,
    /// Headline figures with their unit and dimensions, for machines
    /// (JSON `metrics`; `compare` and `explain` work on these).
    pub metrics: Vec<Metric>,
}

impl Section {
    pub fn new(id: &'static str, title: &'static str) -> Self {
        Section {
            id,
            title,
            ..Default::default()
        }
    }

    /// A figure, drawn where the format can (HTML); nothing in text.
    pub fn figure(&mut self, figure: Figure) {
        self.blocks.push(Block::Figure(figure));
    }

    pub fn lines(&mut self, lines: impl IntoIterator<Item = String>) {
        self.blocks.push(Block::Lines(lines.into_iter().collect()));
    }

    pub fn picture(&mut self, svg: String) {
        self.blocks.push(Block::Picture(svg));
    }

    pub fn table(&mut self, table: Table) {
        self.blocks.push(Block::Table(table));
    }

    pub fn json(&mut self, key: &'static str, value: impl Serialize) {
        self.json
            .push((key, serde_json::to_value(value).expect("report values serialize")));
    }

    pub fn metric(&mut self, key: &str, value: f64, unit: &'static str, dims: &[(&str, &str)]) {
        self.metrics.push(Metric {
            key: key.to_string(),
            value,
            unit,
            dims: dims.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            per_op: None,
        });
    }
}

#[derive(Debug)]
pub enum Block {
    Table(Table),
    /// Lines as they are ("" for a blank line).
    Lines(Vec<String>),
    Figure(Figure),
    /// An SVG drawn elsewhere (the flamegraph), shown as it is where a
    /// format can (HTML): it must hold no script.
    Picture(String),
}

/// A plot, described by what it shows; `report/plot.rs` draws it. Series
/// are coloured by name (`plot::color_of`), so a state, role or platform
/// has the same colour in every figure.
#[derive(Clone, Debug)]
pub struct Figure {
    pub title: String,
    /// What the values are, with their unit: "CPU time (s)".
    pub value_label: String,
    pub kind: FigureKind,
}

#[derive(Clone, Debug)]
pub enum FigureKind {
    /// A horizontal bar per category, the series stacked along it.
    StackedBars {
        categories: Vec<String>,
        series: Vec<Series>,
    },
    /// Counts per bucket; buckets after `marked_from` are drawn apart and
    /// the legend says why (e.g. larger than a full frame).
    Histogram {
        bucket_label: String,
        buckets: Vec<String>,
        counts: Vec<f64>,
        marked_from: Option<(usize, String)>,
    },
    /// A line per series over a numeric x axis.
    Lines { x_label: String, series: Vec<LineSeries> },
    /// A horizontal bar per category and series (grouped by category),
    /// with a whisker over each value's range (e.g. min..max of repetitions).
    Bars {
        categories: Vec<String>,
        series: Vec<RangedSeries>,
    },
}

impl FigureKind {
    /// A latency histogram from power-of-two buckets (`b` holds
    /// `[2^b, 2^(b+1))` ns): every bucket from the first to the last drawn,
    /// each labelled by its upper bound; None when empty.
    pub fn latency_log2(buckets: &std::collections::BTreeMap<u32, u64>) -> Option<FigureKind> {
        let (&first, &last) = (buckets.keys().next()?, buckets.keys().next_back()?);
        Some(FigureKind::Histogram {
            bucket_label: "latency, power-of-two buckets".into(),
            buckets: (first..=last)
                .map(|b| format!("<{}", duration(1u64 << (b + 1))))
                .collect(),
            counts: (first..=last)
                .map(|b| buckets.get(&b).copied().unwrap_or(0) as f64)
                .collect(),
            marked_from: None,
        })
    }
}

/// The power-of-two bucket of `ns` (0 and 1 in bucket 0).
pub fn log2_bucket(ns: u64) -> u32 {
    vtrace_common::log2_index(ns) as u32
}

/// 2048 ns as "2.0us": a time in its natural unit.
pub fn duration(ns: u64) -> String {
    match ns {
        ns if ns < 1_000 => format!("{ns}ns"),
        ns if ns < 1_000_000 => format!("{:.1}us", ns as f64 / 1e3),
        ns if ns < 1_000_000_000 => format!("{:.1}ms", ns as f64 / 1e6),
        ns => format!("{:.1}s", ns as f64 / 1e9),
    }
}

/// Values of one series, one per category, each with its range (`None`:
/// no bar for that category).
#[derive(Clone, Debug)]
pub struct RangedSeries {
    pub name: String,
    pub values: Vec<Option<(f64, f64, f64)>>,
}

/// Values of one series, one per category.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub values: Vec<f64>,
}

#[derive(Clone, Debug)]
pub struct LineSeries {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A column: its header, width, alignment, and the spaces before it.
#[derive(Clone, Debug)]
pub struct Column {
    pub name: std::borrow::Cow<'static, str>,
    pub width: usize,
    pub align: Align,
    pub gap: usize,
}

/// `col("pid", 8)`: right-aligned (numbers); `left("comm", 16)`: text.
pub fn col(name: impl Into<std::borrow::Cow<'static, str>>, width: usize) -> Column {
    Column {
        name: name.into(),
        width,
        align: Align::Right,
        gap: 0,
    }
}

pub fn left(name: impl Into<std::borrow::Cow<'static, str>>, width: usize) -> Column {
    Column {
        name: name.into(),
        width,
        align: Align::Left,
        gap: 0,
    }
}

impl Column {
    /// With `n` spaces before it.
    pub fn gap(mut self, n: usize) -> Self {
        self.gap = n;
        self
    }
}

/// A table of preformatted cells.
#[derive(Debug, Default)]
pub struct Table {
    /// Printed after a blank line, above the header; None: no title, no blank line.
    pub title: Option<String>,
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: impl Into<String>, columns: Vec<Column>) -> Self {
        Table {
            title: Some(title.into()),
            columns,
            rows: Vec::new(),
        }
    }

    pub fn untitled(columns: Vec<Column>) -> Self {
        Table {
            title: None,
            columns,
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.columns.len(), "a cell per column");
        self.rows.push(cells);
    }
}

/// A figure with its unit and what it is of (platform, role, state, device, ...).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Metric {
    pub key: String,
    pub value: f64,
    pub unit: &'static str,
    pub dims: std::collections::BTreeMap<String, String>,
    /// `value` per operation of the workload, when its work is known
    /// (`Recording::ops`); a fraction has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_op: Option<f64>,
}

/// `secs(ns)`: seconds with three decimals, as every text table shows time.
pub fn secs(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e9)
}

/// `pct(part, of)`: a percentage with one decimal, `-` of nothing.
pub fn pct(ns: u64, of: u64) -> String {
    if of == 0 {
        "-".into()
    } else {
        format!("{:.1}%", ns as f64 * 100.0 / of as f64)
    }
}

/// Microseconds with two decimals.
pub fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e3)
}

/// An amount that may be small (per operation): whole numbers from 100 on,
/// two decimals from 1, four below.
pub fn amount(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}
