//! One histogram type for every latency and size histogram the layers keep
//! (in-kernel log2 buckets, KVM's eight-per-power-of-two buckets, size
//! buckets), with one quantile function.

use std::collections::BTreeMap;

/// Counts per bucket `[lo, hi)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    buckets: BTreeMap<(u64, u64), u64>,
}

impl Histogram {
    /// From an in-kernel log2 histogram: bucket `i` holds `[2^i, 2^(i+1))`
    /// (bucket 0 also holds 0).
    pub fn from_log2(counts: &[u64]) -> Self {
        let mut h = Histogram::default();
        for (i, &c) in counts.iter().enumerate() {
            let lo = if i == 0 { 0 } else { 1u64 << i };
            h.add(lo, 1u64 << (i + 1), c);
        }
        h
    }

    /// From bucket upper bounds (inclusive, ascending) and their counts, as
    /// size histograms are stored (`le`).
    pub fn from_upper_bounds(rows: impl IntoIterator<Item = (u64, u64)>) -> Self {
        let mut h = Histogram::default();
        let mut lo = 0;
        let mut rows: Vec<(u64, u64)> = rows.into_iter().collect();
        rows.sort_unstable();
        for (le, c) in rows {
            h.add(lo, le.saturating_add(1), c);
            lo = le.saturating_add(1);
        }
        h
    }

    /// Adds `count` to bucket `[lo, hi)`.
    pub fn add(&mut self, lo: u64, hi: u64, count: u64) {
        if count > 0 {
            *self.buckets.entry((lo, hi.max(lo + 1))).or_default() += count;
        }
    }

    pub fn count(&self) -> u64 {
        self.buckets.values().sum()
    }

    /// Narrows the buckets to the exact extremes seen, so quantiles and the
    /// spread stay within them.
    pub fn clamp(self, min: u64, max: u64) -> Self {
        let mut h = Histogram::default();
        for ((lo, hi), c) in self.buckets {
            let lo = lo.clamp(min, max);
            h.add(lo, hi.min(max + 1).max(lo + 1), c);
        }
        h
    }

    /// The value below which a share `q` of the counts lie, reading each
    /// bucket as values spread evenly over `[lo, hi)`; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let count = self.count();
        if count == 0 {
            return 0;
        }
        let target = (q * count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (&(lo, hi), &c) in &self.buckets {
            if seen + c >= target {
                let frac = (target - seen) as f64 / c as f64;
                return lo + ((hi - lo) as f64 * frac) as u64;
            }
            seen += c;
        }
        self.buckets.keys().next_back().map_or(0, |k| k.1)
    }

    /// The upper bound (inclusive) of the bucket holding quantile `q`, for
    /// histograms whose buckets are read as bounds (size histograms:
    /// "at most this many bytes"); 0 when empty.
    pub fn bucket_bound(&self, q: f64) -> u64 {
        let target = (q * self.count() as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (&(_, hi), &c) in &self.buckets {
            seen += c;
            if seen >= target {
                return hi - 1;
            }
        }
        0
    }

    /// Standard deviation around `mean`, each bucket at its middle.
    pub fn stddev(&self, mean: f64) -> u64 {
        let count = self.count();
        if count < 2 {
            return 0;
        }
        let var: f64 = self
            .buckets
            .iter()
            .map(|(&(lo, hi), &c)| c as f64 * ((lo + hi) as f64 / 2.0 - mean).powi(2))
            .sum::<f64>()
            / count as f64;
        var.sqrt() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_known_data() {
        // 90 values spread over [0, 10), 10 over [100, 200).
        let mut h = Histogram::default();
        h.add(0, 10, 90);
        h.add(100, 200, 10);
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile(0.5), 5);
        assert_eq!(h.quantile(0.9), 10);
        assert_eq!(h.quantile(0.95), 150);
        assert_eq!(h.quantile(0.99), 190);
        assert_eq!(h.quantile(1.0), 200);
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }

    #[test]
    fn spread_of_known_data() {
        // Half at 10 (bucket [5, 15)), half at 30 ([25, 35)): mean 20, stddev 10.
        let mut h = Histogram::default();
        h.add(5, 15, 50);
        h.add(25, 35, 50);
        assert_eq!(h.stddev(20.0), 10);
    }

    #[test]
    fn log2_buckets() {
        // 3 in [0, 2), 1 in [1024, 2048).
        let mut counts = [0u64; 20];
        counts[0] = 3;
        counts[10] = 1;
        let h = Histogram::from_log2(&counts);
        assert_eq!(h.count(), 4);
        assert!(h.quantile(0.5) < 2);
        assert!((1024..=2048).contains(&h.quantile(1.0)));
    }

    #[test]
    fn clamped_to_extremes() {
        let mut h = Histogram::default();
        h.add(1024, 2048, 4);
        let h = h.clamp(1500, 1600);
        assert!((1500..=1601).contains(&h.quantile(0.01)));
        assert!((1500..=1601).contains(&h.quantile(1.0)));
    }

    #[test]
    fn bucket_bounds() {
        let h = Histogram::from_upper_bounds([(64, 2), (128, 0), (1514, 8), (4096, 0)]);
        assert_eq!(h.bucket_bound(0.1), 64);
        assert_eq!(h.bucket_bound(0.2), 64);
        assert_eq!(h.bucket_bound(0.5), 1514);
        assert_eq!(h.bucket_bound(1.0), 1514);
        assert_eq!(Histogram::default().bucket_bound(0.5), 0);
    }

    #[test]
    fn upper_bounds() {
        let h = Histogram::from_upper_bounds([(64, 2), (128, 0), (1514, 8)]);
        assert_eq!(h.count(), 10);
        assert!(h.quantile(0.1) <= 64);
        assert!((129..=1515).contains(&h.quantile(0.9)));
    }
}
