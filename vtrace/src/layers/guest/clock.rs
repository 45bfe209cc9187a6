//! One clock: a guest's CLOCK_MONOTONIC mapped onto the host's from the
//! agent's clock exchanges. Each exchange is the host's send time `t1`, the
//! guest's receipt time `g` and the host's receipt of the answer `t3`: the
//! guest read `g` at some host time inside [t1, t3], so the offset `g - t`
//! lies in [g - t3, g - t1]. A line `offset(t) = a + drift * (t - t0)`
//! through every such interval maps the guest onto the host; the intervals
//! bound `a` from both sides, and half the width of what they leave is the
//! mapping's error bound: as trace-cmd's PTP-like sync does, with the bound
//! stated rather than assumed.

use super::tables::GuestClockRow;

/// A guest clock's mapping onto the host's.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ClockMap {
    /// Exchanges the fit used.
    pub exchanges: usize,
    /// Host time the offset is given at (the first exchange's send), ns.
    pub t0_host_ns: u64,
    /// guest − host at `t0_host_ns`, ns.
    pub offset_ns: f64,
    /// How much faster the guest's clock runs, parts per million.
    pub drift_ppm: f64,
    /// The most any mapped time can be off, ns: half the width the
    /// exchanges leave the offset.
    pub bound_ns: f64,
    /// The fastest exchange's round trip, ns (no bound can be tighter than half of it).
    pub min_round_trip_ns: u64,
    /// Exchanges whose guest time, mapped, falls inside their host
    /// send-to-receive interval (all of them when the fit is consistent).
    pub causal: usize,
}

impl ClockMap {
    /// The host time of guest time `guest_ns`.
    pub fn to_host(&self, guest_ns: u64) -> f64 {
        // guest = host + a + d·(host − t0)  =>  host = (guest − a + d·t0) / (1 + d)
        let d = self.drift_ppm * 1e-6;
        (guest_ns as f64 - self.offset_ns + d * self.t0_host_ns as f64) / (1.0 + d)
    }

    /// Guest `guest`'s mapping, from its exchanges in `rec`; None without any.
    pub fn of(rec: &crate::recording::Recording, guest: &str) -> Option<ClockMap> {
        let exchanges: Vec<GuestClockRow> = rec
            .rows::<GuestClockRow>()
            .iter()
            .filter(|r| r.guest == guest)
            .cloned()
            .collect();
        ClockMap::fit(&exchanges)
    }

    /// Fits the mapping to `rows` (one guest's exchanges); None without any.
    pub fn fit(rows: &[GuestClockRow]) -> Option<ClockMap> {
        let rows: Vec<&GuestClockRow> = rows
            .iter()
            .filter(|r| r.host_recv_ns >= r.host_send_ns && r.guest_ns > 0)
            .collect();
        let first = rows.iter().map(|r| r.host_send_ns).min()?;
        // Each exchange as (host midpoint − t0, lower, upper) of the offset.
        let points: Vec<(f64, f64, f64)> = rows
            .iter()
            .map(|r| {
                let mid = (r.host_send_ns + r.host_recv_ns) as f64 / 2.0 - first as f64;
                let lo = r.guest_ns as f64 - r.host_recv_ns as f64;
                let hi = r.guest_ns as f64 - r.host_send_ns as f64;
                (mid, lo, hi)
            })
            .collect();
        let drift = drift_of(&points);
        // With that drift, the intercepts every exchange allows.
        let lower = points.iter().map(|(t, lo, _)| lo - drift * t).fold(f64::MIN, f64::max);
        let upper = points.iter().map(|(t, _, hi)| hi - drift * t).fold(f64::MAX, f64::min);
        let min_round_trip_ns = rows.iter().map(|r| r.host_recv_ns - r.host_send_ns).min().unwrap_or(0);
        let (offset_ns, bound_ns) = if lower <= upper {
            ((lower + upper) / 2.0, (upper - lower) / 2.0)
        } else {
            // No line through every interval (a clock stepped, or the
            // drift is off): the midpoint of the two, bounded by how far
            // apart they are, so that the bound covers every exchange.
            (
                (lower + upper) / 2.0,
                (lower - upper) / 2.0 + min_round_trip_ns as f64 / 2.0,
            )
        };
        let mut map = ClockMap {
            exchanges: rows.len(),
            t0_host_ns: first,
            offset_ns,
            drift_ppm: drift * 1e6,
            bound_ns,
            min_round_trip_ns,
            causal: 0,
        };
        map.causal = rows
            .iter()
            .filter(|r| {
                let host = map.to_host(r.guest_ns);
                host >= r.host_send_ns as f64 - 1.0 && host <= r.host_recv_ns as f64 + 1.0
            })
            .count();
        Some(map)
    }
}

/// The drift: the slope of the offset's midpoints over the fastest half of
/// the exchanges (the slow ones' midpoints wander with their round trips);
/// 0 with under four exchanges or under a second of them.
fn drift_of(points: &[(f64, f64, f64)]) -> f64 {
    let mut by_width: Vec<&(f64, f64, f64)> = points.iter().collect();
    by_width.sort_by(|a, b| (a.2 - a.1).total_cmp(&(b.2 - b.1)));
    let fast = &by_width[..by_width.len().div_ceil(2)];
    let span = fast.iter().map(|p| p.0).fold(f64::MIN, f64::max) - fast.iter().map(|p| p.0).fold(f64::MAX, f64::min);
    if fast.len() < 4 || span < 1e9 {
        return 0.0;
    }
    let n = fast.len() as f64;
    let mean_t = fast.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_o = fast.iter().map(|p| (p.1 + p.2) / 2.0).sum::<f64>() / n;
    let cov: f64 = fast.iter().map(|p| (p.0 - mean_t) * ((p.1 + p.2) / 2.0 - mean_o)).sum();
    let var: f64 = fast.iter().map(|p| (p.0 - mean_t).powi(2)).sum();
    if var > 0.0 { cov / var } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(seq: u64, t1: u64, rtt: u64, at: f64, offset: f64, drift: f64) -> GuestClockRow {
        // The guest reads its clock `at` of the way through the round trip.
        let host = t1 as f64 + rtt as f64 * at;
        GuestClockRow {
            guest: "g".into(),
            seq,
            host_send_ns: t1,
            guest_ns: (host + offset + drift * (host - 1e9)) as u64,
            host_recv_ns: t1 + rtt,
        }
    }

    #[test]
    fn a_known_offset_and_drift_are_found_within_the_stated_bound() {
        let (offset, drift) = (5_000_000_000.0, 20e-6);
        let rows: Vec<GuestClockRow> = (0..40)
            .map(|i| {
                let rtt = 40_000 + (i * 7919 % 13) * 10_000;
                let at = (i * 31 % 10) as f64 / 10.0;
                exchange(i, 1_000_000_000 + i * 250_000_000, rtt, at, offset, drift)
            })
            .collect();
        let map = ClockMap::fit(&rows).unwrap();
        assert_eq!(map.causal, rows.len());
        assert!((map.drift_ppm - 20.0).abs() < 5.0, "{map:?}");
        assert!(map.bound_ns <= map.min_round_trip_ns as f64 / 2.0 + 1.0, "{map:?}");
        // Every true time is within the bound of its mapping.
        for r in &rows {
            let truth = (r.host_send_ns + r.host_recv_ns) as f64 / 2.0;
            assert!(
                (map.to_host(r.guest_ns) - truth).abs() <= map.bound_ns + r.host_recv_ns as f64 - r.host_send_ns as f64
            );
        }
    }

    #[test]
    fn one_clock_maps_to_itself() {
        let rows: Vec<GuestClockRow> = (0..10)
            .map(|i| exchange(i, 1_000 + i * 1_000_000, 30_000, 0.5, 0.0, 0.0))
            .collect();
        let map = ClockMap::fit(&rows).unwrap();
        assert!(
            map.offset_ns.abs() <= map.bound_ns && map.bound_ns <= 15_000.0,
            "{map:?}"
        );
        assert!(ClockMap::fit(&[]).is_none());
    }
}
