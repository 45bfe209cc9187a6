//! The host's end of one guest's agent: connect, ask it to record, keep
//! exchanging clock readings while it does, mirror what it sends
//! (mirror.rs), ask it to stop, take its recording. It runs on threads of
//! its own, so a guest that is slow, silent or hostile costs the host's
//! recording nothing but that guest's part: every wait is bounded, and
//! every way it can end is kept as the link's state.

use std::{
    io::Read,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, mpsc},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::{
    mirror::Mirror,
    tables::{GuestClockRow, GuestLinkRow},
    transport::{GuestAddress, Stream},
    wire::{self, Frame, Message, WireError},
};
use crate::layers::cpu::monotonic_ns;

/// How often the clocks are exchanged; at the start and at the stop,
/// BURST exchanges BURST_EVERY apart.
const SYNC_EVERY: Duration = Duration::from_millis(200);
const BURST: u64 = 8;
const BURST_EVERY: Duration = Duration::from_millis(10);
/// The most exchanges kept per guest (an hour at SYNC_EVERY, 40 B each).
const MAX_EXCHANGES: usize = 18_000;

/// What the host asks of every agent.
#[derive(Clone, Debug)]
pub struct Ask {
    pub layers: Vec<String>,
    pub interval_ms: u64,
    pub checkpoint_ms: u64,
    /// `--events`: the guest follows packets too.
    pub events: bool,
    /// How long an agent may take to connect, and to attach its probes.
    pub connect: Duration,
    pub attach: Duration,
}

/// One link's state, shared with its threads.
#[derive(Default)]
struct State {
    row: GuestLinkRow,
    exchanges: Vec<GuestClockRow>,
    /// The agent's probes attached (or it said why not, or the link failed).
    settled: bool,
    /// Its recording came (or it said why there is none).
    done: bool,
}

pub struct Link {
    state: Arc<Mutex<State>>,
    stream: Arc<Mutex<Option<Stream>>>,
    stop: Option<mpsc::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
    settled: mpsc::Receiver<()>,
}

impl Link {
    /// Starts linking to the agent at `address` as guest `guest`, its files
    /// mirrored under `guests`/`guest`, the guest of process `vmm_pid` (0:
    /// not known); `start_mono` is the recording's start.
    pub fn start(guest: &str, vmm_pid: u32, address: GuestAddress, guests: PathBuf, ask: Ask, start_mono: u64) -> Link {
        let state = Arc::new(Mutex::new(State {
            row: GuestLinkRow {
                guest: guest.to_string(),
                address: address.to_string(),
                vmm_pid,
                state: "failed".into(),
                ..Default::default()
            },
            ..Default::default()
        }));
        let stream = Arc::new(Mutex::new(None));
        let (stop_tx, stop_rx) = mpsc::channel();
        let (settled_tx, settled_rx) = mpsc::channel();
        let guest = guest.to_string();
        let thread = {
            let (state, stream) = (state.clone(), stream.clone());
            std::thread::Builder::new()
                .name("vtrace-guest".into())
                .spawn(move || {
                    let fail = |state: &Arc<Mutex<State>>, why: String| {
                        let mut s = state.lock().unwrap();
                        if s.row.error.is_empty() {
                            s.row.error = why;
                        }
                        s.settled = true;
                    };
                    let conn = match address.connect(ask.connect) {
                        Ok(c) => c,
                        Err(e) => {
                            fail(&state, format!("no agent reached at {address}: {e}"));
                            let _ = settled_tx.send(());
                            return;
                        }
                    };
                    let reader = match conn.try_clone() {
                        Ok(r) => r,
                        Err(e) => {
                            fail(&state, format!("cannot read its connection: {e}"));
                            let _ = settled_tx.send(());
                            return;
                        }
                    };
                    *stream.lock().unwrap() = Some(conn);
                    let sent = send(
                        &stream,
                        &Message::Start {
                            layers: ask.layers.clone(),
                            interval_ms: ask.interval_ms,
                            checkpoint_ms: ask.checkpoint_ms,
                            events: ask.events,
                        },
                    );
                    if let Err(e) = sent {
                        fail(&state, format!("cannot ask it to record: {e}"));
                        let _ = settled_tx.send(());
                        return;
                    }
                    let receiving = {
                        let (state, settled_tx) = (state.clone(), settled_tx.clone());
                        std::thread::Builder::new()
                            .name("vtrace-guest-rx".into())
                            .spawn(move || receive(reader, &guest, &guests, &state, Some(settled_tx), start_mono))
                            .ok()
                    };
                    // Clock exchanges until the stop, a burst at each end
                    // (so that a short recording is bounded, and its drift
                    // seen, from both), then the stop itself.
                    let mut seq = 0;
                    let sync = |seq: &mut u64| {
                        *seq += 1;
                        send(
                            &stream,
                            &Message::Sync {
                                seq: *seq,
                                host_ns: monotonic_ns(),
                            },
                        )
                    };
                    loop {
                        let wait = if seq < BURST { BURST_EVERY } else { SYNC_EVERY };
                        if stop_rx.recv_timeout(wait) != Err(mpsc::RecvTimeoutError::Timeout) {
                            break;
                        }
                        if state.lock().unwrap().row.state == "recording" && sync(&mut seq).is_err() {
                            break;
                        }
                    }
                    if state.lock().unwrap().row.state == "recording" {
                        for _ in 0..BURST {
                            if sync(&mut seq).is_err() {
                                break;
                            }
                            std::thread::sleep(BURST_EVERY);
                        }
                    }
                    let _ = send(&stream, &Message::Stop);
                    if let Some(r) = receiving {
                        let _ = r.join();
                    }
                })
                .expect("start a guest link thread")
        };
        // Waits for the connection itself to settle.
        Link {
            state,
            stream,
            stop: Some(stop_tx),
            threads: vec![thread],
            settled: settled_rx,
        }
    }

    /// Waits, at most `ask.attach`, for the agent to have attached its
    /// probes (or failed); a guest that takes longer is recorded from when it does.
    pub fn wait_attached(&self, limit: Duration) {
        if !self.state.lock().unwrap().settled {
            let _ = self.settled.recv_timeout(limit);
        }
        let mut s = self.state.lock().unwrap();
        if !s.settled && s.row.error.is_empty() {
            s.row.error = format!(
                "its probes were not attached after {} s: recorded from when they were",
                limit.as_secs()
            );
        }
    }

    /// Asks the agent to stop (it then sends its recording).
    pub fn stop(&mut self) {
        self.stop.take();
    }

    /// Waits, at most `limit`, for the agent's recording; then ends the link.
    pub fn finish(&mut self, limit: Duration) {
        self.stop();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline
            && !self.state.lock().unwrap().done
            && !self.threads.iter().all(|t| t.is_finished())
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        {
            let mut s = self.state.lock().unwrap();
            if !s.done && s.row.error.is_empty() {
                s.row.error = format!("its recording had not come {} s after the stop", limit.as_secs());
            }
        }
        if let Some(s) = self.stream.lock().unwrap().as_ref() {
            s.shutdown();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Its row and its exchanges as they stand.
    pub fn rows(&self) -> (GuestLinkRow, Vec<GuestClockRow>) {
        let s = self.state.lock().unwrap();
        (s.row.clone(), s.exchanges.clone())
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.finish(Duration::ZERO);
        }
    }
}

fn send(stream: &Arc<Mutex<Option<Stream>>>, m: &Message) -> std::io::Result<()> {
    match stream.lock().unwrap().as_mut() {
        Some(s) => wire::send(s, m),
        None => Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "not connected")),
    }
}

/// Reads the agent's frames until its recording came, the stream broke a
/// rule, or the connection ended; each outcome is the link's state.
fn receive(
    mut reader: impl Read,
    guest: &str,
    guests: &Path,
    state: &Arc<Mutex<State>>,
    settled: Option<mpsc::Sender<()>>,
    start_mono: u64,
) {
    let tell = || {
        if let Some(tx) = &settled {
            let _ = tx.send(());
        }
    };
    let since_start = |mono: u64| mono.saturating_sub(start_mono);
    let end = |state: &Arc<Mutex<State>>, st: &str, why: String| {
        let mut s = state.lock().unwrap();
        s.row.state = st.to_string();
        if s.row.error.is_empty() {
            s.row.error = why;
        }
        s.settled = true;
    };
    let mut mirror = match Mirror::new(guests, guest) {
        Ok(m) => m,
        Err(e) => {
            end(
                state,
                "failed",
                format!("cannot keep its files under {}: {e}", guests.display()),
            );
            tell();
            return;
        }
    };
    loop {
        let frame = wire::read_frame(&mut reader);
        let now = monotonic_ns();
        let mut s = state.lock().unwrap();
        s.row.last_heard_ns = since_start(now);
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                let recording = s.row.state == "recording";
                drop(s);
                match e {
                    WireError::Closed | WireError::Io(_) if recording => end(
                        state,
                        "silent",
                        format!("the agent went silent ({e}): its journal holds what it sent until then"),
                    ),
                    WireError::Closed | WireError::Io(_) => {
                        end(state, "failed", format!("the agent's connection ended: {e}"))
                    }
                    _ => end(state, "refused", format!("its stream was refused: {e}")),
                }
                tell();
                return;
            }
        };
        match frame {
            Frame::Message(Message::Hello {
                hostname, kernel, cpus, ..
            }) => {
                s.row.hostname = hostname.chars().take(256).collect();
                s.row.kernel = kernel.chars().take(256).collect();
                s.row.cpus = cpus.min(4096);
            }
            Frame::Message(Message::Attached { error: None, .. }) => {
                s.row.state = "recording".into();
                s.row.attached_ns = since_start(now);
                s.settled = true;
                tell();
            }
            Frame::Message(Message::Attached { error: Some(e), .. }) => {
                drop(s);
                end(state, "failed", format!("the agent could not record: {}", clip(&e)));
                tell();
                return;
            }
            Frame::Message(Message::SyncReply { seq, host_ns, guest_ns }) => {
                if s.exchanges.len() < MAX_EXCHANGES && host_ns <= now {
                    s.exchanges.push(GuestClockRow {
                        guest: guest.to_string(),
                        seq,
                        host_send_ns: host_ns,
                        guest_ns,
                        host_recv_ns: now,
                    });
                }
            }
            Frame::Message(Message::Done { error: Some(e), .. }) => {
                s.done = true;
                drop(s);
                end(state, "failed", format!("the agent sent no recording: {}", clip(&e)));
                return;
            }
            Frame::Message(Message::Done { .. }) => {
                let finished = mirror.finish();
                s.row.files = mirror.files() as u64;
                s.row.bytes = mirror.bytes;
                s.done = true;
                match finished {
                    Ok(()) => {
                        s.row.state = "complete".into();
                        s.row.error.clear();
                    }
                    Err(e) => {
                        drop(s);
                        end(state, "refused", format!("its recording was refused: {e}"));
                    }
                }
                return;
            }
            Frame::Chunk(c) => {
                let applied = mirror.apply(&c);
                s.row.files = mirror.files() as u64;
                s.row.bytes = mirror.bytes;
                if let Err(e) = applied {
                    drop(s);
                    end(state, "refused", format!("its stream was refused: {e}"));
                    tell();
                    return;
                }
            }
            Frame::Message(other) => {
                drop(s);
                end(
                    state,
                    "refused",
                    format!(
                        "its stream was refused: an agent does not send {}",
                        clip(&format!("{other:?}"))
                    ),
                );
                tell();
                return;
            }
        }
    }
}

/// What the host makes of an agent's stream `from` (as if it came over a
/// link): the link's row, the guest's files under `guests`/`guest`. For
/// tests and the fuzzer: the same reading as a live link's.
pub fn replay(from: impl Read, guests: &Path, guest: &str) -> GuestLinkRow {
    let state = Arc::new(Mutex::new(State::default()));
    state.lock().unwrap().row.guest = guest.to_string();
    receive(from, guest, guests, &state, None, 0);
    state.lock().unwrap().row.clone()
}

/// A guest's words, at most 300 characters.
fn clip(s: &str) -> String {
    s.chars().take(300).collect()
}
