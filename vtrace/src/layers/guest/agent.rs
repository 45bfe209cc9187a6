//! `vtrace agent`, inside a guest: wait for the host, record what it asks
//! (the guest's own layers, through the same recorder as `vtrace record`),
//! answer its clock exchanges at once, send the recording's journal as it
//! grows and the finished recording when the host says stop. One host at a
//! time; a host that goes away ends that recording and the agent waits for
//! the next. Its memory is the recording's and one frame.

use std::{
    collections::HashMap,
    fs,
    io::Read,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use super::{
    transport::{Listener, Stream},
    wire::{self, Chunk, Frame, Message, Target},
};
use crate::layers::cpu::monotonic_ns;

/// What the host asked for.
#[derive(Clone, Debug)]
pub struct Asked {
    pub layers: Vec<String>,
    /// `--events`, as the host recorded.
    pub events: bool,
    pub interval: Duration,
    pub checkpoint: Duration,
}

/// A recording the agent runs for the host.
pub trait GuestRecording: Send {
    /// The directory it is staged in (its journal grows there).
    fn staging(&self) -> PathBuf;
    /// Stops it; where the finished recording is.
    fn stop(self: Box<Self>) -> Result<PathBuf, String>;
}

/// Starts a recording as asked (its probes attached when it returns).
pub type Start<'a> = &'a dyn Fn(&Asked) -> Result<Box<dyn GuestRecording>, String>;

/// How long a connected host may take to say what to record.
const START_WAIT: Duration = Duration::from_secs(30);

/// Serves hosts one after the other (`once`: only the first); each
/// connection's outcome is told on stderr.
pub fn serve(listener: &Listener, start: Start, once: bool) -> std::io::Result<()> {
    loop {
        let (stream, peer) = listener.accept()?;
        match serve_one(stream, start) {
            Ok(what) => eprintln!("vtrace agent: {peer}: {what}"),
            Err(e) => eprintln!("vtrace agent: {peer}: {e}"),
        }
        if once {
            return Ok(());
        }
    }
}

fn hello() -> Message {
    let read = |p: &str| fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    Message::Hello {
        vtrace_version: env!("CARGO_PKG_VERSION").into(),
        hostname: read("/proc/sys/kernel/hostname"),
        kernel: read("/proc/sys/kernel/osrelease"),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        mono_ns: monotonic_ns(),
    }
}

fn serve_one(mut stream: Stream, start: Start) -> Result<String, String> {
    stream.set_read_timeout(Some(START_WAIT)).map_err(|e| e.to_string())?;
    let asked = match wire::read_frame(&mut stream).map_err(|e| e.to_string())? {
        Frame::Message(Message::Start {
            layers,
            interval_ms,
            checkpoint_ms,
            events,
        }) => Asked {
            layers,
            events,
            interval: Duration::from_millis(interval_ms.clamp(100, 60_000)),
            checkpoint: Duration::from_millis(checkpoint_ms.min(3_600_000)),
        },
        other => {
            let got: String = format!("{other:?}").chars().take(200).collect();
            return Err(format!("expected Start, got {got}"));
        }
    };
    stream.set_read_timeout(None).map_err(|e| e.to_string())?;
    let writer = Arc::new(Mutex::new(stream.try_clone().map_err(|e| e.to_string())?));
    let say = |m: &Message| wire::send(&mut *writer.lock().unwrap(), m).map_err(|e| e.to_string());
    say(&hello())?;
    let recording = match start(&asked) {
        Ok(r) => r,
        Err(e) => {
            say(&Message::Attached {
                mono_ns: monotonic_ns(),
                error: Some(e.clone()),
            })?;
            return Err(format!("could not record: {e}"));
        }
    };
    say(&Message::Attached {
        mono_ns: monotonic_ns(),
        error: None,
    })?;
    // The journal, sent as it grows, until the stop.
    let stopping = Arc::new(AtomicBool::new(false));
    let journal = {
        let (writer, stopping, staging) = (writer.clone(), stopping.clone(), recording.staging());
        let every = (asked.interval / 2).max(Duration::from_millis(200));
        std::thread::Builder::new()
            .name("vtrace-journal".into())
            .spawn(move || {
                let mut sent = HashMap::new();
                while !stopping.load(Ordering::Relaxed) {
                    if send_journal(&staging, &mut sent, &writer).is_err() {
                        return;
                    }
                    std::thread::sleep(every);
                }
            })
            .map_err(|e| e.to_string())?
    };
    // Clock exchanges answered at once, until the stop or the host is gone.
    let stopped = loop {
        match wire::read_frame(&mut stream) {
            Ok(Frame::Message(Message::Sync { seq, host_ns })) => {
                let guest_ns = monotonic_ns();
                if say(&Message::SyncReply { seq, host_ns, guest_ns }).is_err() {
                    break false;
                }
            }
            Ok(Frame::Message(Message::Stop)) => break true,
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    stopping.store(true, Ordering::Relaxed);
    let _ = journal.join();
    let finished = recording.stop();
    if !stopped {
        if let Ok(path) = finished {
            let _ = fs::remove_dir_all(path);
        }
        return Err("the host went away before asking to stop: its recording was dropped".into());
    }
    let path = match finished {
        Ok(p) => p,
        Err(e) => {
            say(&Message::Done {
                files: 0,
                bytes: 0,
                error: Some(e.clone()),
            })?;
            return Err(format!("the recording failed: {e}"));
        }
    };
    let sent = send_recording(&path, &writer);
    let _ = fs::remove_dir_all(&path);
    let (files, bytes) = sent.map_err(|e| format!("sending the recording: {e}"))?;
    say(&Message::Done {
        files,
        bytes,
        error: None,
    })?;
    Ok(format!("recorded and sent ({files} files, {bytes} bytes)"))
}

/// Sends what changed in `staging`/journal since the last call: a file
/// replaced (a new inode) from its start, one that grew from where it was.
fn send_journal(staging: &Path, sent: &mut HashMap<String, (u64, u64)>, writer: &Mutex<Stream>) -> std::io::Result<()> {
    let Ok(entries) = fs::read_dir(staging.join("journal")) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let wire_name = format!("journal/{name}");
        if wire::check_name(&wire_name).is_err() || name.ends_with(".tmp") {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let (inode, from) = match sent.get(&name) {
            Some(&(inode, len)) if inode == meta.ino() && len <= meta.len() => (inode, len),
            _ => (meta.ino(), 0),
        };
        if from == meta.len() && sent.contains_key(&name) {
            continue;
        }
        let written = send_file(&entry.path(), Target::Journal, &wire_name, from, writer)?;
        sent.insert(name, (inode, from + written));
    }
    Ok(())
}

/// Sends `path` from `from` on as chunks; the bytes sent.
fn send_file(path: &Path, target: Target, name: &str, from: u64, writer: &Mutex<Stream>) -> std::io::Result<u64> {
    let mut f = fs::File::open(path)?;
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(from))?;
    let mut offset = from;
    let mut buf = vec![0u8; wire::chunk_capacity(name)];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 && offset > from {
            break;
        }
        let chunk = Chunk {
            target,
            name: name.to_string(),
            offset,
            data: buf[..n].to_vec(),
        };
        {
            let mut w = writer.lock().unwrap();
            std::io::Write::write_all(&mut *w, &wire::encode_chunk(&chunk))?;
        }
        offset += n as u64;
        if n == 0 {
            break;
        }
    }
    Ok(offset - from)
}

/// Sends every file of the finished recording; (files, bytes).
fn send_recording(dir: &Path, writer: &Mutex<Stream>) -> std::io::Result<(u64, u64)> {
    let (mut files, mut bytes) = (0, 0);
    let mut entries: Vec<_> = fs::read_dir(dir)?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.metadata()?.is_file() || wire::check_name(&name).is_err() {
            continue;
        }
        bytes += send_file(&entry.path(), Target::Final, &name, 0, writer)?;
        files += 1;
    }
    Ok((files, bytes))
}
