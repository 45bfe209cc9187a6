//! Prometheus series as the layers describe them (`Layer::metrics`, from
//! the tables they emit) and `vtrace serve` exports them: each sample is a
//! cumulative reading of one *source* (a thread, a device's hop), added to
//! the series its labels name. The exporter (serve/series.rs) keeps each
//! series' total from the sources' increments, so a series never goes
//! backwards when a thread exits or moves to another role.

/// What a family's samples are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Grows: exported as `<name>_total`.
    Counter,
    /// A value as of now, e.g. 1 for an info series.
    Gauge,
    /// Counts per bucket (label `le`, the bucket's upper bound in base
    /// units) and their sum (`le` = [`SUM`]): exported as `_bucket`
    /// (cumulative), `_sum` and `_count`. Each part grows like a counter.
    Histogram,
}

/// The `le` of a histogram's sum part.
pub const SUM: &str = "sum";

/// The base unit a family's name ends with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Bytes,
}

/// One metric: `vtrace_<name>[_<unit>][_total]`.
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub unit: Option<Unit>,
    pub kind: Kind,
    /// The samples' values per base unit: 1e9 for seconds read in ns.
    /// Series add the values as read (whole numbers add exactly) and are
    /// divided by it as they are exported.
    pub per_unit: f64,
    pub help: &'static str,
}

impl Family {
    /// The name as exported, without `_total`.
    pub fn full_name(&self) -> String {
        match self.unit {
            Some(Unit::Seconds) => format!("vtrace_{}_seconds", self.name),
            Some(Unit::Bytes) => format!("vtrace_{}_bytes", self.name),
            None => format!("vtrace_{}", self.name),
        }
    }
}

/// The label naming a platform instance (e.g. `runc:1234`). Not
/// `instance`: Prometheus gives every scraped series an `instance` label
/// of its own (the target, i.e. the host), and a fleet needs both.
pub const INSTANCE: &str = "platform_instance";

/// The label naming a process (`vtrace serve --pid-labels`): its series
/// go with it, not with its instance.
pub const PID: &str = "pid";

/// Label names and values, in the family's order.
pub type Labels = Vec<(&'static str, String)>;

/// One reading.
#[derive(Debug)]
pub struct Sample {
    pub family: &'static Family,
    /// What the value was read from (a counter's per-source increments are
    /// what its series adds up); unique within the family.
    pub source: String,
    /// Sources whose sum alone counts (one thread's states: the tick split
    /// may move time from user to system between reads); a group that
    /// falls is held until it passes its last sum, a lone source that falls
    /// starts anew (serve::series). Each source is its own group unless
    /// [`Samples::push_grouped`] says.
    pub group: String,
    pub labels: Labels,
    pub value: f64,
}

/// Readings from one read of every layer.
#[derive(Debug, Default)]
pub struct Samples {
    pub readings: Vec<Sample>,
    /// `vtrace serve --pid-labels`: per-process series (a thread's CPU time,
    /// its run-queue delay) are labelled with their process too.
    pub process_labels: bool,
}

impl Samples {
    pub fn new(process_labels: bool) -> Self {
        Samples {
            readings: Vec::new(),
            process_labels,
        }
    }

    /// The labels naming process `pid` (`name`: its main thread's, asked
    /// for only then) where asked for ([`Samples::process_labels`]), else
    /// none: one series per process is more than a fleet's Prometheus wants
    /// by default.
    pub fn process_labels_for(&self, pid: u32, name: impl FnOnce() -> String) -> Labels {
        if self.process_labels {
            vec![(PID, pid.to_string()), ("process", or(&name(), "unknown"))]
        } else {
            Vec::new()
        }
    }

    pub fn push(&mut self, family: &'static Family, source: impl Into<String>, labels: Labels, value: f64) {
        let source = source.into();
        self.readings.push(Sample {
            family,
            group: source.clone(),
            source,
            labels,
            value,
        });
    }

    /// One bucket of a histogram series: `count` values up to `le` (base units).
    pub fn bucket(&mut self, family: &'static Family, source: &str, mut labels: Labels, le: f64, count: u64) {
        labels.push(("le", format!("{le}")));
        self.push(family, format!("{source}/{le}"), labels, count as f64);
    }

    /// The sum of a histogram series' values (in the family's sample units).
    pub fn bucket_sum(&mut self, family: &'static Family, source: &str, mut labels: Labels, sum: f64) {
        labels.push(("le", SUM.to_string()));
        self.push(family, format!("{source}/{SUM}"), labels, sum);
    }

    /// A reading of `source` in `group`: see [`Sample::group`].
    pub fn push_grouped(
        &mut self,
        family: &'static Family,
        group: &str,
        source: impl Into<String>,
        labels: Labels,
        value: f64,
    ) {
        self.readings.push(Sample {
            family,
            group: group.to_string(),
            source: source.into(),
            labels,
            value,
        });
    }
}

/// The bucket bound (seconds) a time histogram's bucket ending at
/// `hi_ns` is exported under: the next power of two of ns from 1.024 µs to
/// 1.07 s, then +Inf. The same few bounds for every series (the in-kernel
/// histograms are finer), and every value of the bucket is below it.
pub fn time_bound(hi_ns: u64) -> f64 {
    match hi_ns.max(1).next_power_of_two().max(1 << 10) {
        b if b > 1 << 30 => f64::INFINITY,
        b => b as f64 / 1e9,
    }
}

/// Counts per (source, bound), summed: several fine buckets fall in one bound.
#[derive(Default)]
pub struct Buckets(std::collections::BTreeMap<(String, u64), (Labels, u64)>);

impl Buckets {
    pub fn add(&mut self, source: String, labels: &Labels, bound: f64, count: u64) {
        let entry = self
            .0
            .entry((source, bound.to_bits()))
            .or_insert_with(|| (labels.clone(), 0));
        entry.1 += count;
    }

    pub fn push_into(self, family: &'static Family, out: &mut Samples) {
        for ((source, bound), (labels, count)) in self.0 {
            out.bucket(family, &source, labels, f64::from_bits(bound), count);
        }
    }
}

/// A label value that says "none" rather than being empty (Prometheus
/// drops an empty label, and sums would then mix it with the others).
pub fn or(value: &str, none: &str) -> String {
    if value.is_empty() {
        none.to_string()
    } else {
        value.to_string()
    }
}
