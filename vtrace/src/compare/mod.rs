//! Recordings side by side (`vtrace compare`) and the difference in cost
//! per operation decomposed (`vtrace explain`, `explain.rs`). Both work on
//! the reports' metrics (`report::model::Metric`), so every layer's
//! headline figures take part without this module knowing the layer.
//!
//! A subject is one recording, or a bench cell: a directory of recordings
//! of the same configuration (its repetitions), whose metrics are averaged.

pub mod explain;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::{
    Error, Result,
    recording::{self, Recording},
    report::{
        self,
        model::{Section, Table, amount, col, left},
    },
    workload::ops::Operations,
};

/// What a metric is of, with the platform left out (subjects on different
/// platforms compare role by role): `(key, [(dimension, value)])`.
pub type MetricId = (String, Vec<(String, String)>);

/// A metric of a subject: its mean over the subject's recordings, and per
/// operation (the sum over its recordings over their work) when all say it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Value {
    pub unit: &'static str,
    pub value: f64,
    pub per_op: Option<f64>,
}

/// One recording, or the repetitions of one bench cell.
#[derive(Debug, Serialize)]
pub struct Subject {
    /// The path as given.
    pub name: String,
    pub platform: String,
    pub recordings: usize,
    /// Work done per recording (mean), when every recording knows it.
    pub ops: Option<Operations>,
    #[serde(skip)]
    pub metrics: BTreeMap<MetricId, Value>,
    /// Metric keys in the order the report shows them (CPU first).
    #[serde(skip)]
    pub keys: Vec<String>,
}

impl Subject {
    /// Reads a recording, or every recording directly under a directory.
    pub fn load(path: &Path) -> Result<Subject> {
        let paths = recordings_in(path)?;
        let recs = paths
            .iter()
            .map(|p| crate::layers::read(p))
            .collect::<Result<Vec<_>>>()?;
        Ok(Subject::of(path.display().to_string(), &recs))
    }

    pub fn of(name: String, recs: &[Recording]) -> Subject {
        let n = recs.len().max(1) as f64;
        let mut sums: BTreeMap<MetricId, (&'static str, f64)> = BTreeMap::new();
        let mut keys: Vec<String> = Vec::new();
        let all_ops: Option<Vec<&Operations>> = recs.iter().map(|r| r.ops()).collect();
        let total_ops: f64 = all_ops.iter().flatten().map(|o| o.count).sum();
        for rec in recs {
            // Each guest's own path stages (`record --guest`) beside the
            // host's, so that `explain` ranks both sides' together.
            let guest_stages = rec
                .guests
                .iter()
                .filter_map(|g| g.recording.as_ref().ok())
                .flat_map(|g| report::sections(g, usize::MAX))
                .filter(|s| s.id == "path")
                .flat_map(|s| s.metrics)
                .filter(|m| {
                    ["path_sum_ns", "path_events"].contains(&m.key.as_str())
                        && m.dims.get("dir").is_some_and(|d| d.starts_with("guest"))
                });
            let host = report::sections(rec, usize::MAX).into_iter().flat_map(|s| s.metrics);
            for m in &host.chain(guest_stages).collect::<Vec<_>>() {
                if !keys.contains(&m.key) {
                    keys.push(m.key.clone());
                }
                let dims = m.dims.iter().filter(|(k, _)| *k != "platform");
                let id = (m.key.clone(), dims.map(|(k, v)| (k.clone(), v.clone())).collect());
                sums.entry(id).or_insert((m.unit, 0.0)).1 += m.value;
            }
        }
        let metrics = sums
            .into_iter()
            .map(|(id, (unit, sum))| {
                let per_op = (all_ops.is_some() && total_ops > 0.0 && unit != "fraction").then(|| sum / total_ops);
                (
                    id,
                    Value {
                        unit,
                        value: sum / n,
                        per_op,
                    },
                )
            })
            .collect();
        let ops = all_ops.filter(|o| !o.is_empty()).map(|o| Operations {
            count: total_ops / n,
            unit: o[0].unit.clone(),
            source: o[0].source.clone(),
            per_second: o.iter().map(|x| x.per_second).sum::<Option<f64>>().map(|s| s / n),
            failed: None,
        });
        let mut platforms: Vec<&str> = recs.iter().map(|r| r.meta.selectors.platform.as_str()).collect();
        platforms.dedup();
        Subject {
            name,
            platform: platforms.join(","),
            recordings: recs.len(),
            ops,
            metrics,
            keys,
        }
    }

    /// The value compared: per operation when `per_op`, else per recording.
    pub fn get(&self, id: &MetricId, per_op: bool) -> f64 {
        self.metrics
            .get(id)
            .map_or(0.0, |v| if per_op { v.per_op.unwrap_or(0.0) } else { v.value })
    }

    /// The work unit, when every subject has one.
    pub fn common_unit<'a>(subjects: impl IntoIterator<Item = &'a Subject>) -> Option<String> {
        let units: Vec<&str> = subjects
            .into_iter()
            .map(|s| s.ops.as_ref().map(|o| o.unit.as_str()))
            .collect::<Option<_>>()?;
        (!units.is_empty() && units.windows(2).all(|w| w[0] == w[1])).then(|| units[0].to_string())
    }
}

/// A recording itself, or the recordings (`*.vtrace`) directly under `path`, sorted.
pub fn recordings_in(path: &Path) -> Result<Vec<PathBuf>> {
    if path.join(recording::META).is_file() || !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(crate::error::io(format!("list {}", path.display())))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "vtrace") && p.join(recording::META).is_file())
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(Error::NotARecording {
            path: path.to_path_buf(),
            reason: "neither a recording (no meta.json) nor a directory of recordings".into(),
        });
    }
    Ok(found)
}

/// `+1.23 (+4.5%)`: the difference of `b` from `a`.
pub fn delta(a: f64, b: f64) -> String {
    let d = b - a;
    if a == 0.0 {
        signed(d)
    } else {
        format!("{} ({:+.1}%)", signed(d), d * 100.0 / a)
    }
}

fn signed(v: f64) -> String {
    let s = amount(v.abs());
    if v < 0.0 { format!("-{s}") } else { format!("+{s}") }
}

/// `vtrace compare`: each subject's work, then every metric side by side
/// (per operation when every subject knows its work), the largest
/// differences from the first subject first.
pub fn compare(subjects: &[Subject], top: usize) -> Vec<Section> {
    let per_op = Subject::common_unit(subjects);
    let mut head = Section::new("subjects", "Compared");
    let mut t = Table::new(
        "Subjects",
        vec![
            left("", 3),
            left("recording", 40),
            left("platform", 10),
            col("runs", 5),
            col("work", 20).gap(2),
            col("ops/s", 12),
        ],
    );
    for (i, s) in subjects.iter().enumerate() {
        t.row(vec![
            letter(i),
            s.name.clone(),
            s.platform.clone(),
            s.recordings.to_string(),
            s.ops
                .as_ref()
                .map_or("-".into(), |o| format!("{:.0} {}", o.count, o.units())),
            s.ops
                .as_ref()
                .and_then(|o| o.per_second)
                .map_or("-".into(), |r| format!("{r:.0}")),
        ]);
    }
    head.table(t);
    head.lines([match &per_op {
        Some(unit) => format!("\nEvery figure per {unit} (the work each recording did); differences against A."),
        None => "\nFigures per recording: not every recording knows its work (record or report with --ops N).".into(),
    }]);
    head.json("subjects", subjects);
    let mut sections = vec![head];

    let mut keys: Vec<&String> = Vec::new();
    for key in subjects.iter().flat_map(|s| &s.keys) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut rows_json = Vec::new();
    let mut body = Section::new("compare", "Side by side");
    for key in keys {
        let mut ids: Vec<&MetricId> = subjects
            .iter()
            .flat_map(|s| s.metrics.keys())
            .filter(|(k, _)| k == key)
            .collect();
        ids.sort();
        ids.dedup();
        let spread = |id: &MetricId| {
            let a = subjects[0].get(id, per_op.is_some());
            subjects
                .iter()
                .map(|s| (s.get(id, per_op.is_some()) - a).abs())
                .fold(0.0, f64::max)
        };
        ids.retain(|id| subjects.iter().any(|s| s.get(id, per_op.is_some()) != 0.0));
        ids.sort_by(|a, b| spread(b).total_cmp(&spread(a)));
        if ids.is_empty() {
            continue;
        }
        let unit = subjects
            .iter()
            .find_map(|s| s.metrics.get(ids[0]))
            .map_or("", |v| v.unit);
        let what = match &per_op {
            Some(u) => format!("{unit}/{u}"),
            None => unit.to_string(),
        };
        let mut columns = vec![left("of", 36)];
        for i in 0..subjects.len() {
            columns.push(col(letter(i), 14));
        }
        for i in 1..subjects.len() {
            columns.push(col(format!("{} - A", letter(i)), 22));
        }
        let mut t = Table::new(format!("{key} ({what})"), columns);
        for id in ids.iter().take(top) {
            let values: Vec<f64> = subjects.iter().map(|s| s.get(id, per_op.is_some())).collect();
            let mut cells = vec![dims_text(id)];
            cells.extend(values.iter().map(|v| amount(*v)));
            cells.extend(values[1..].iter().map(|v| delta(values[0], *v)));
            t.row(cells);
        }
        for id in &ids {
            rows_json.push(serde_json::json!({
                "key": id.0,
                "dims": id.1.iter().cloned().collect::<BTreeMap<_, _>>(),
                "unit": unit,
                "per_op": per_op.is_some(),
                "values": subjects.iter().map(|s| s.get(id, per_op.is_some())).collect::<Vec<_>>(),
            }));
        }
        body.table(t);
    }
    body.json("per_op_unit", &per_op);
    body.json("rows", rows_json);
    sections.push(body);
    sections
}

/// A, B, C, ...
pub fn letter(i: usize) -> String {
    char::from(b'A' + (i % 26) as u8).to_string()
}

/// `role=app state=user`.
pub fn dims_text(id: &MetricId) -> String {
    if id.1.is_empty() {
        return "total".into();
    }
    id.1.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}
