//! One clock: a guest's CLOCK_MONOTONIC mapped onto the host's from the
//! agent's clock exchanges. Each exchange is the host's send time `t1`, the
//! guest's receipt time `g` and the host's receipt of the answer `t3`: the
//! guest read `g` at some host time inside [t1, t3], so the offset `g - t`
//! lies in [g - t3, g - t1]. A line `offset(t) = a + drift * (t - t0)`
//! through every such interval maps the guest onto the host; the intervals
//! bound `a` from both sides, and half the width of what they leave is the
//! mapping's error bound: as trace-cmd's PTP-like sync does, with the bound
//! stated rather than assumed. The drift is the one that leaves that window
//! widest; other observations (kicks and interrupts paired across the
//! boundary, views/boundary.rs) join the exchanges as one-sided bounds, so
//! that the drift is fitted to all of them at once.

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
        ClockMap::fit(&exchanges_of(rec, guest))
    }

    /// Fits the mapping to `rows` (one guest's exchanges); None without any.
    pub fn fit(rows: &[GuestClockRow]) -> Option<ClockMap> {
        Self::fit_with(rows, &[]).map(|f| f.map)
    }

    /// Fits the mapping to `rows` and to `more`, bounds on the offset that
    /// other observations give (a kick and an interrupt paired across the
    /// boundary); None without any exchange.
    pub fn fit_with(rows: &[GuestClockRow], more: &[OffsetBound]) -> Option<Fit> {
        let rows: Vec<&GuestClockRow> = rows
            .iter()
            .filter(|r| r.host_recv_ns >= r.host_send_ns && r.guest_ns > 0)
            .collect();
        let first = rows.iter().map(|r| r.host_send_ns).min()?;
        // The guest read its clock at some host time inside [send, recv]:
        // the offset then lay in [g − recv, g − send], said at the midpoint.
        let bounds: Vec<OffsetBound> = rows
            .iter()
            .map(|r| OffsetBound {
                host_ns: (r.host_send_ns + r.host_recv_ns) as f64 / 2.0,
                lo: r.guest_ns as f64 - r.host_recv_ns as f64,
                hi: r.guest_ns as f64 - r.host_send_ns as f64,
            })
            .chain(more.iter().copied())
            .map(|b| OffsetBound {
                host_ns: b.host_ns - first as f64,
                ..b
            })
            .collect();
        let line = widest_line(&bounds);
        let min_round_trip_ns = rows.iter().map(|r| r.host_recv_ns - r.host_send_ns).min().unwrap_or(0);
        let gap_ns = (line.lo - line.hi).max(0.0);
        let (offset_ns, bound_ns) = if gap_ns == 0.0 {
            ((line.lo + line.hi) / 2.0, (line.hi - line.lo) / 2.0)
        } else {
            // No line through every interval (a clock stepped, or a bound
            // is wrong): the line nearest to all, bounded by how far apart
            // they are, so that the bound covers every one.
            ((line.lo + line.hi) / 2.0, gap_ns / 2.0 + min_round_trip_ns as f64 / 2.0)
        };
        let mut map = ClockMap {
            exchanges: rows.len(),
            t0_host_ns: first,
            offset_ns,
            drift_ppm: line.drift * 1e6,
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
        Some(Fit { map, gap_ns })
    }
}

/// Guest `guest`'s clock exchanges in `rec`.
pub fn exchanges_of(rec: &crate::recording::Recording, guest: &str) -> Vec<GuestClockRow> {
    rec.rows::<GuestClockRow>()
        .iter()
        .filter(|r| r.guest == guest)
        .cloned()
        .collect()
}

/// A mapping and how far its bounds were from leaving any line.
#[derive(Clone, Debug)]
pub struct Fit {
    pub map: ClockMap,
    /// 0 when one line passes every bound; else the least by which the
    /// nearest line misses one, ns.
    pub gap_ns: f64,
}

/// What one observation says of the offset (guest − host) at host time
/// `host_ns`: it lies in [lo, hi]. A one-sided observation leaves the other
/// side infinite.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OffsetBound {
    pub host_ns: f64,
    pub lo: f64,
    pub hi: f64,
}

/// A line `offset(t) = a + drift·t` and the window `[lo, hi]` the bounds
/// leave `a`; `lo > hi` when no line passes every bound.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Line {
    drift: f64,
    lo: f64,
    hi: f64,
}

/// No clock a kernel keeps runs further off than this (1000 ppm).
const MAX_DRIFT: f64 = 1e-3;

/// The line through `bounds` (times relative to t0) that leaves the offset
/// its widest window: where several drifts leave it equally wide (the
/// narrowest bound alone limits it), the middle one. The window's width is
/// concave in the drift (the least of lines less the greatest of lines), so
/// its maximum is found by ternary search and its plateau's ends by
/// bisection. Drift 0 with under four bounds or under a second of them,
/// and where only one side is bounded: nothing then says more.
fn widest_line(bounds: &[OffsetBound]) -> Line {
    let window = |d: f64| Line {
        drift: d,
        lo: bounds
            .iter()
            .map(|b| b.lo - d * b.host_ns)
            .fold(f64::NEG_INFINITY, f64::max),
        hi: bounds
            .iter()
            .map(|b| b.hi - d * b.host_ns)
            .fold(f64::INFINITY, f64::min),
    };
    let width = |d: f64| {
        let w = window(d);
        w.hi - w.lo
    };
    let times = || bounds.iter().map(|b| b.host_ns);
    let span = times().fold(f64::MIN, f64::max) - times().fold(f64::MAX, f64::min);
    let flat = window(0.0);
    if bounds.len() < 4 || span < 1e9 || !flat.lo.is_finite() || !flat.hi.is_finite() {
        return flat;
    }
    let (mut a, mut b) = (-MAX_DRIFT, MAX_DRIFT);
    // 60 thirds and 40 halvings narrow 2000 ppm below 10⁻⁶ ppm.
    for _ in 0..60 {
        let (m1, m2) = (a + (b - a) / 3.0, b - (b - a) / 3.0);
        if width(m1) < width(m2) {
            a = m1;
        } else {
            b = m2;
        }
    }
    let best = (a + b) / 2.0;
    // Within a nanosecond of the widest counts as as wide.
    let widest = width(best) - 1.0;
    let edge = |mut inside: f64, mut outside: f64| {
        if width(outside) >= widest {
            return outside;
        }
        for _ in 0..40 {
            let mid = (inside + outside) / 2.0;
            if width(mid) >= widest {
                inside = mid;
            } else {
                outside = mid;
            }
        }
        inside
    };
    window((edge(best, -MAX_DRIFT) + edge(best, MAX_DRIFT)) / 2.0)
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

    /// One fast exchange (10 µs) amid slow ones (1 ms) over 10 s: the fast
    /// one alone limits the window for any drift within ±99 ppm; the fit
    /// takes the middle of those, not whichever one a search ends on.
    #[test]
    fn where_one_exchange_alone_limits_the_window_the_drift_is_the_middle_of_those_it_allows() {
        let rows: Vec<GuestClockRow> = (0..41)
            .map(|i| {
                let rtt = if i == 20 { 10_000 } else { 1_000_000 };
                exchange(i, 1_000_000_000 + i * 250_000_000, rtt, 0.5, 7_000.0, 0.0)
            })
            .collect();
        let map = ClockMap::fit(&rows).unwrap();
        assert!(map.drift_ppm.abs() < 0.5, "{map:?}");
        assert_eq!(map.causal, rows.len());
        assert!((map.bound_ns - 5_000.0).abs() < 1.0, "{map:?}");
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
