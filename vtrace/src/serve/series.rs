//! The exporter's state: each series' total, kept from the increments of
//! the sources behind it (see crate::exposition), so that a counter never
//! goes backwards when a thread exits, a tid is reused or a thread changes
//! role. Bounded: a source not read again is forgotten, and a series whose
//! instance is gone (or that no source fed) is exported once more, then removed.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::exposition::{Family, INSTANCE, Kind, Labels, PID, Samples};

/// One exported series.
#[derive(Debug)]
pub struct Series {
    pub family: &'static Family,
    pub labels: Labels,
    pub value: f64,
    /// The read that last had a source for it.
    fed_at: u64,
}

#[derive(Debug, Default)]
pub struct SeriesSet {
    reads: u64,
    /// (family, source) -> its last cumulative value.
    sources: HashMap<(&'static str, String), f64>,
    /// (family name, labels) -> the series.
    series: BTreeMap<(String, Labels), Series>,
}

impl SeriesSet {
    /// Adds one read of every layer. `running`: the instances running now;
    /// a series labelled with another instance is kept one read more.
    pub fn add(&mut self, samples: Samples, running: &HashSet<String>) {
        self.reads += 1;
        // Each counter source's increment since the last read, and per
        // group the sum's: a source that fell (the tick split moved time
        // to a sibling state) adds nothing, and its siblings' rises are
        // scaled so that the group adds exactly what its sum grew by. A
        // lone source that fell is a new one (its map entry was recreated):
        // all of it is new. A group of sources (one thread's states) that
        // fell is the same thread, whose CPU moved back a little (a slice
        // an unreported switch had left with it went to the thread that
        // ran it): it adds nothing until it passes its last sum.
        let mut groups: HashMap<(&'static str, &str), (f64, f64, f64)> = HashMap::new();
        let mut rises = Vec::with_capacity(samples.readings.len());
        for s in &samples.readings {
            let before = match s.family.kind {
                Kind::Counter | Kind::Histogram => self
                    .sources
                    .get(&(s.family.name, s.source.clone()))
                    .copied()
                    .unwrap_or(0.0),
                Kind::Gauge => 0.0,
            };
            let g = groups.entry((s.family.name, s.group.as_str())).or_default();
            g.0 += s.value;
            g.1 += before;
            g.2 += (s.value - before).max(0.0);
            rises.push((before, (s.value - before).max(0.0)));
        }
        let mut sources = HashMap::with_capacity(self.sources.len());
        let mut added = Vec::with_capacity(samples.readings.len());
        for (s, &(before, rise)) in samples.readings.iter().zip(&rises) {
            let (now, before_sum, rising) = groups[&(s.family.name, s.group.as_str())];
            let grew = now - before_sum;
            let held = grew < 0.0 && s.group != s.source;
            added.push(match s.family.kind {
                Kind::Gauge => (s.value, s.value),
                _ if held => (0.0, before),
                _ if grew < 0.0 => (s.value, s.value),
                _ if rising == grew => (rise, s.value),
                _ if rising > 0.0 => (rise * grew / rising, s.value),
                _ => (0.0, s.value),
            });
        }
        for (s, (add, baseline)) in samples.readings.into_iter().zip(added) {
            if s.family.kind != Kind::Gauge {
                sources.insert((s.family.name, s.source), baseline);
            }
            let series = self
                .series
                .entry((s.family.full_name(), s.labels.clone()))
                .or_insert_with(|| Series {
                    family: s.family,
                    labels: s.labels,
                    value: 0.0,
                    fed_at: 0,
                });
            series.fed_at = self.reads;
            match s.family.kind {
                Kind::Gauge => series.value = add,
                Kind::Counter | Kind::Histogram => series.value += add,
            }
        }
        self.sources = sources;
        let reads = self.reads;
        self.series.retain(|_, s| {
            let instance = s.labels.iter().find(|(k, _)| *k == INSTANCE).map(|(_, v)| v.as_str());
            let running = instance.is_some_and(|i| running.contains(i));
            // A process's own series (--pid-labels) go with it.
            let per_process = s.labels.iter().any(|(k, _)| *k == PID);
            // Fed now or at the last read (so exported once more), or its instance runs.
            s.fed_at + 1 >= reads || (running && !per_process)
        });
    }

    pub fn iter(&self) -> impl Iterator<Item = &Series> {
        self.series.values()
    }

    pub fn len(&self) -> usize {
        self.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// Sources followed (threads' states, devices' hops).
    pub fn sources(&self) -> usize {
        self.sources.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::Unit;

    static CPU: Family = Family {
        name: "cpu",
        unit: Some(Unit::Seconds),
        kind: Kind::Counter,
        per_unit: 1.0,
        help: "",
    };

    fn read(set: &mut SeriesSet, samples: &[(&str, &str, &str, f64)], running: &[&str]) {
        let mut s = Samples::default();
        for (source, instance, role, v) in samples {
            s.push(
                &CPU,
                *source,
                vec![(INSTANCE, instance.to_string()), ("role", role.to_string())],
                *v,
            );
        }
        set.add(s, &running.iter().map(|r| r.to_string()).collect());
    }

    /// One read of thread t1's user and system seconds (a group), each
    /// state's series labelled role=state.
    fn read_thread(set: &mut SeriesSet, user: f64, system: f64) {
        let mut s = Samples::default();
        for (state, v) in [("user", user), ("system", system)] {
            s.push_grouped(&CPU, "t1", format!("t1/{state}"), vec![("role", state.to_string())], v);
        }
        set.add(s, &HashSet::new());
    }

    /// The tick split moved 1 s of a thread from user to system between two
    /// reads: user stays, system takes only what the thread's sum grew by.
    #[test]
    fn a_resplit_thread_adds_what_its_sum_grew_by_and_no_series_falls() {
        let mut set = SeriesSet::default();
        let role = |set: &SeriesSet, r: &str| set.iter().find(|s| s.labels[0].1 == r).unwrap().value;
        read_thread(&mut set, 5.0, 1.0);
        // 1 s more ran, and the split now puts 1 s less in user: 4 + 3 = 7.
        read_thread(&mut set, 4.0, 3.0);
        assert_eq!((role(&set, "user"), role(&set, "system")), (5.0, 2.0));
        read_thread(&mut set, 6.0, 3.0);
        assert_eq!((role(&set, "user"), role(&set, "system")), (7.0, 2.0));
    }

    /// A thread whose sum fell by 1 s (a slice moved to the thread that ran
    /// it) adds nothing until it passes its last sum; a lone source that
    /// fell was recreated, and all of it is new.
    #[test]
    fn a_thread_that_falls_back_is_held_and_a_lone_source_that_falls_is_new() {
        let mut set = SeriesSet::default();
        let total = |set: &SeriesSet| set.iter().map(|s| s.value).sum::<f64>();
        read_thread(&mut set, 5.0, 3.0);
        read_thread(&mut set, 4.0, 3.0);
        assert_eq!(total(&set), 8.0, "held");
        read_thread(&mut set, 5.5, 3.0);
        assert_eq!(total(&set), 8.5, "only what passed the last sum");

        let mut set = SeriesSet::default();
        read(&mut set, &[("dev", "none", "tap", 5.0)], &[]);
        read(&mut set, &[("dev", "none", "tap", 2.0)], &[]);
        assert_eq!(value(&set, "none", "tap"), Some(7.0));
    }

    fn value(set: &SeriesSet, instance: &str, role: &str) -> Option<f64> {
        set.iter()
            .find(|s| s.labels == vec![(INSTANCE, instance.to_string()), ("role", role.to_string())])
            .map(|s| s.value)
    }

    /// A thread that moves to another role takes only its later time there;
    /// a thread that exits keeps its total in its role while the instance
    /// runs; an instance that ends is exported once more, then removed.
    #[test]
    fn counters_never_fall_and_ended_instances_go_after_one_more_read() {
        let mut set = SeriesSet::default();
        read(
            &mut set,
            &[("t1", "vm:1", "other", 2.0), ("t2", "vm:1", "vcpu", 5.0)],
            &["vm:1"],
        );
        // t1 is found to be the VMM: its next 1 s go there, its first 2 s stay.
        read(
            &mut set,
            &[("t1", "vm:1", "vmm", 3.0), ("t2", "vm:1", "vcpu", 6.0)],
            &["vm:1"],
        );
        assert_eq!(value(&set, "vm:1", "other"), Some(2.0));
        assert_eq!(value(&set, "vm:1", "vmm"), Some(1.0));
        // t2 exited: the vcpu series keeps 6 s while vm:1 runs.
        read(&mut set, &[("t1", "vm:1", "vmm", 4.0)], &["vm:1"]);
        assert_eq!(value(&set, "vm:1", "vcpu"), Some(6.0));
        // vm:1 is gone; its series were fed at the last read: exported once more, then removed.
        read(&mut set, &[], &[]);
        assert_eq!(value(&set, "vm:1", "vmm"), Some(2.0));
        read(&mut set, &[], &[]);
        assert!(set.is_empty(), "{:?}", set.series.keys().collect::<Vec<_>>());
        assert_eq!(set.sources(), 0);
    }

    /// `--pid-labels`: a process that ends in a running instance has its
    /// series exported once more, then removed (the instance's would stay).
    #[test]
    fn a_process_series_goes_with_its_process_not_its_instance() {
        let mut set = SeriesSet::default();
        let read = |set: &mut SeriesSet, pids: &[&str]| {
            let mut s = Samples::new(true);
            for pid in pids {
                let mut labels = vec![(INSTANCE, "vm:1".to_string())];
                labels.extend(s.process_labels_for(pid.parse().unwrap(), || "sh".into()));
                s.push(&CPU, *pid, labels, 1.0);
            }
            set.add(s, &["vm:1".to_string()].into_iter().collect());
        };
        read(&mut set, &["10", "11"]);
        read(&mut set, &["10"]);
        assert_eq!(set.len(), 2, "11 is exported once more");
        read(&mut set, &["10"]);
        let left: Vec<&Labels> = set.iter().map(|s| &s.labels).collect();
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].contains(&(PID, "10".to_string())), "{left:?}");
    }
}
