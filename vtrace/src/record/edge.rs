//! The window's edges: every layer reads its counters back to back, between
//! two reads of the network devices' own counters. A packet that moved
//! meanwhile (a device's counters differ) could be in one layer's window and
//! not in another's, or in the device's and not the probes' (a frame a guest
//! sent between the net layer's read and the tun layer's); so the layers read
//! again, until a pass saw no packet move and every layer's own reading was
//! steady (nothing moved between its reads of two maps).

use crate::{Result, layers::Collector, platforms::netdev::DeviceCounterReader};

/// Passes before the readings are kept as they are (a busy host's devices
/// may never be still for one).
const TRIES: u32 = 5;

/// Runs `read` on every collector, again while a device's counters moved
/// during a pass or a layer's reading was unsteady. A note when no pass was
/// still.
pub(super) fn read_edge(
    collectors: &mut [Box<dyn Collector>],
    which: &str,
    mut read: impl FnMut(&mut dyn Collector) -> Result<()>,
) -> Result<Option<String>> {
    let devices = DeviceCounterReader::new(&[]);
    let mut before = devices.read();
    let mut why = "";
    for _ in 0..TRIES {
        for c in collectors.iter_mut() {
            read(c.as_mut())?;
        }
        let after = devices.read();
        let devices_moved = after != before;
        before = after;
        why = match collectors.iter().find_map(|c| c.unsteady()) {
            Some(what) => what,
            None if devices_moved => {
                "the network devices' counters moved while the layers read theirs: a packet there may be in a \
                 device's count and not in the probes'"
            }
            None => return Ok(None),
        };
    }
    Ok(Some(format!("at the window's {which}, after {TRIES} tries: {why}")))
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;

    use super::*;
    use crate::{
        layers::{Emit, LayerOutput},
        recording::Overhead,
    };

    struct Reader;

    impl Collector for Reader {
        fn emit(&self, _: &Emit, _: &mut LayerOutput, _: &mut Overhead) -> Result<()> {
            Ok(())
        }
    }

    /// Passes and note when the first `sends` passes send a datagram over
    /// the loopback device.
    fn read_with(sends: u32) -> (u32, Option<String>) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = socket.local_addr().unwrap();
        let mut collectors: Vec<Box<dyn Collector>> = vec![Box::new(Reader)];
        let mut reads = 0;
        let note = read_edge(&mut collectors, "start", |_| {
            reads += 1;
            if reads <= sends {
                socket.send_to(b"moved", to).unwrap();
            }
            Ok(())
        })
        .unwrap();
        (reads, note)
    }

    /// The two tests share the loopback device: one at a time.
    static LOOPBACK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// (Another device may move too on a busy host: then more passes.)
    #[test]
    fn a_packet_sent_during_the_reads_has_them_taken_again() {
        let _one = LOOPBACK.lock().unwrap();
        let (reads, _) = read_with(2);
        assert!(reads >= 3, "{reads} passes");
    }

    #[test]
    fn a_device_never_still_leaves_a_note_after_the_last_try() {
        let _one = LOOPBACK.lock().unwrap();
        let (reads, note) = read_with(u32::MAX);
        assert_eq!(reads, TRIES);
        assert!(note.is_some_and(|n| n.contains("window's start")));
    }

    /// A layer whose first `held` readings are unsteady.
    struct Holding {
        readings: std::rc::Rc<std::cell::Cell<u32>>,
        held: u32,
    }

    impl Collector for Holding {
        fn unsteady(&self) -> Option<&'static str> {
            (self.readings.get() <= self.held).then_some("a frame between stages")
        }
        fn emit(&self, _: &Emit, _: &mut LayerOutput, _: &mut Overhead) -> Result<()> {
            Ok(())
        }
    }

    /// Passes and note when a layer's first `held` readings are unsteady.
    fn read_unsteady(held: u32) -> (u32, Option<String>) {
        let readings = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut collectors: Vec<Box<dyn Collector>> = vec![Box::new(Holding {
            readings: readings.clone(),
            held,
        })];
        let note = read_edge(&mut collectors, "end", |_| {
            readings.set(readings.get() + 1);
            Ok(())
        })
        .unwrap();
        (readings.get(), note)
    }

    #[test]
    fn an_unsteady_reading_has_the_layers_read_again() {
        let _one = LOOPBACK.lock().unwrap();
        let (reads, note) = read_unsteady(2);
        // (a device that moved meanwhile may add passes)
        assert!(reads >= 3, "{reads} passes");
        assert!(note.is_none() || reads == TRIES, "{note:?}");
    }

    #[test]
    fn a_layer_never_steady_is_named_in_the_note() {
        let _one = LOOPBACK.lock().unwrap();
        let (reads, note) = read_unsteady(u32::MAX);
        assert_eq!(reads, TRIES);
        let note = note.unwrap();
        assert!(
            note.contains("window's end") && note.contains("a frame between stages"),
            "{note}"
        );
    }
}
