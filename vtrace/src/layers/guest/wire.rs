//! The agent's wire format, both directions, over any byte stream (vsock,
//! a Unix socket, TCP). Every frame is `VTRG`, a version byte, a kind byte
//! and a little-endian u32 length, then that many bytes: a JSON
//! [`Message`] or a [`Chunk`] of a file. The host reads a guest it does not
//! trust: every length is bounded before anything is allocated, every name
//! is checked, and a frame that breaks a rule ends that guest's link with
//! an error that says which rule, never the recording.

use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

/// The frame's first four bytes.
pub const MAGIC: [u8; 4] = *b"VTRG";
/// Bumped on any change to a frame or a message.
pub const WIRE_VERSION: u8 = 1;
/// The largest frame either side sends or accepts (a chunk of a file is at
/// most this less its header).
pub const MAX_FRAME: usize = 1 << 20;
/// The longest file name in a [`Chunk`] (`journal/threads.lines`).
pub const MAX_NAME: usize = 96;

const KIND_MESSAGE: u8 = 1;
const KIND_CHUNK: u8 = 2;
const HEADER: usize = 10;

/// Control messages, as JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Host -> agent, first: what to record.
    Start {
        layers: Vec<String>,
        /// Interval of the CPU layer's lines and of the journal's mirror (ms).
        interval_ms: u64,
        /// Every table's checkpoint in the journal (ms).
        checkpoint_ms: u64,
        /// `record --events`: the guest follows packets too (the path
        /// layer's, joined to the host's per packet).
        #[serde(default)]
        events: bool,
    },
    /// Agent -> host, answering Start: who the guest is.
    Hello {
        vtrace_version: String,
        hostname: String,
        kernel: String,
        cpus: u32,
        /// The guest's CLOCK_MONOTONIC when it answered.
        mono_ns: u64,
    },
    /// Agent -> host: its probes are attached (or why not: `error`).
    Attached {
        mono_ns: u64,
        #[serde(default)]
        error: Option<String>,
    },
    /// Host -> agent: a clock exchange; `host_ns` is the host's
    /// CLOCK_MONOTONIC just before sending.
    Sync { seq: u64, host_ns: u64 },
    /// Agent -> host: the exchange answered, `guest_ns` read on receipt.
    SyncReply { seq: u64, host_ns: u64, guest_ns: u64 },
    /// Host -> agent: stop recording and send the recording.
    Stop,
    /// Agent -> host: the finished recording was sent (its files and bytes),
    /// or why there is none.
    Done {
        files: u64,
        bytes: u64,
        #[serde(default)]
        error: Option<String>,
    },
}

/// Where a chunk's bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The recording in progress (its journal): mirrored as it grows.
    Journal,
    /// The finished recording, sent after Stop.
    Final,
}

/// Part of a file: `data` written at `offset` (0 starts the file anew).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub target: Target,
    /// A relative path of at most two parts, each `[A-Za-z0-9_.-]`, none
    /// starting with a dot ([`check_name`]).
    pub name: String,
    pub offset: u64,
    pub data: Vec<u8>,
}

/// One frame read.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    Message(Message),
    Chunk(Chunk),
}

/// What is wrong with a stream, in words for the report.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the connection closed")]
    Closed,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a vtrace agent's stream (its frame starts {0:02x?}, not \"VTRG\")")]
    BadMagic([u8; 4]),
    #[error(
        "wire version {found}, this vtrace speaks {WIRE_VERSION} (run the same vtrace in the guest and on the host)"
    )]
    Version { found: u8 },
    #[error("a frame of {0} bytes, over the limit of {MAX_FRAME}")]
    TooLong(u64),
    #[error("a frame of unknown kind {0}")]
    UnknownKind(u8),
    #[error("a message that is not valid: {0}")]
    BadMessage(String),
    #[error("a file chunk that is not valid: {0}")]
    BadChunk(String),
}

/// Reads one frame; `Closed` at a clean end between frames.
pub fn read_frame(r: &mut impl Read) -> Result<Frame, WireError> {
    let mut header = [0u8; HEADER];
    let mut got = 0;
    while got < HEADER {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Err(WireError::Closed),
            Ok(0) => {
                return Err(WireError::Io(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the stream ended inside a frame's header ({got} of {HEADER} bytes)"),
                )));
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let magic = [header[0], header[1], header[2], header[3]];
    if magic != MAGIC {
        return Err(WireError::BadMagic(magic));
    }
    if header[4] != WIRE_VERSION {
        return Err(WireError::Version { found: header[4] });
    }
    let kind = header[5];
    let len = u32::from_le_bytes([header[6], header[7], header[8], header[9]]) as usize;
    if len > MAX_FRAME {
        return Err(WireError::TooLong(len as u64));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            WireError::Io(std::io::Error::new(
                e.kind(),
                format!("the stream ended inside a frame of {len} bytes"),
            ))
        } else {
            e.into()
        }
    })?;
    decode(kind, &body)
}

/// A frame's body, by its kind.
pub fn decode(kind: u8, body: &[u8]) -> Result<Frame, WireError> {
    match kind {
        KIND_MESSAGE => serde_json::from_slice(body)
            .map(Frame::Message)
            .map_err(|e| WireError::BadMessage(e.to_string())),
        KIND_CHUNK => decode_chunk(body).map(Frame::Chunk),
        other => Err(WireError::UnknownKind(other)),
    }
}

fn decode_chunk(body: &[u8]) -> Result<Chunk, WireError> {
    let bad = |why: &str| WireError::BadChunk(why.to_string());
    let (&target, rest) = body.split_first().ok_or_else(|| bad("empty"))?;
    let target = match target {
        0 => Target::Journal,
        1 => Target::Final,
        t => return Err(bad(&format!("unknown target {t}"))),
    };
    let (&name_len, rest) = rest.split_first().ok_or_else(|| bad("no name"))?;
    let name_len = name_len as usize;
    if rest.len() < name_len + 8 {
        return Err(bad("shorter than its name and offset"));
    }
    let name = std::str::from_utf8(&rest[..name_len]).map_err(|_| bad("its name is not UTF-8"))?;
    check_name(name).map_err(|why| bad(&why))?;
    let offset = u64::from_le_bytes(rest[name_len..name_len + 8].try_into().expect("8 bytes"));
    Ok(Chunk {
        target,
        name: name.to_string(),
        offset,
        data: rest[name_len + 8..].to_vec(),
    })
}

/// A chunk's file name: relative, at most two parts (a file of the
/// recording, or one of its journal), each of `[A-Za-z0-9_.-]`, not
/// starting with a dot, at most [`MAX_NAME`] bytes in all.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!("a file name of {} bytes (1 to {MAX_NAME})", name.len()));
    }
    let parts: Vec<&str> = name.split('/').collect();
    if parts.len() > 2 {
        return Err(format!("file name {name:?} has more than two parts"));
    }
    for part in parts {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
        if part.is_empty() || part.starts_with('.') || !part.chars().all(allowed) {
            return Err(format!(
                "file name {name:?}: each part is [A-Za-z0-9_.-], not empty and not starting with a dot"
            ));
        }
    }
    Ok(())
}

fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(&MAGIC);
    out.push(WIRE_VERSION);
    out.push(kind);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// A message as one frame's bytes.
pub fn encode_message(m: &Message) -> Vec<u8> {
    frame(KIND_MESSAGE, &serde_json::to_vec(m).expect("messages serialize"))
}

/// A chunk as one frame's bytes; `data` must leave the frame within [`MAX_FRAME`].
pub fn encode_chunk(c: &Chunk) -> Vec<u8> {
    let mut body = Vec::with_capacity(2 + c.name.len() + 8 + c.data.len());
    body.push(match c.target {
        Target::Journal => 0,
        Target::Final => 1,
    });
    body.push(c.name.len() as u8);
    body.extend_from_slice(c.name.as_bytes());
    body.extend_from_slice(&c.offset.to_le_bytes());
    body.extend_from_slice(&c.data);
    frame(KIND_CHUNK, &body)
}

/// The most data one chunk of `name` carries.
pub fn chunk_capacity(name: &str) -> usize {
    MAX_FRAME - 2 - name.len() - 8
}

/// Writes one message.
pub fn send(w: &mut impl Write, m: &Message) -> std::io::Result<()> {
    w.write_all(&encode_message(m))?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_read_back_as_written() {
        let m = Message::SyncReply {
            seq: 7,
            host_ns: 11,
            guest_ns: 13,
        };
        let c = Chunk {
            target: Target::Journal,
            name: "journal/threads.lines".into(),
            offset: 4096,
            data: b"abc".to_vec(),
        };
        let mut bytes = encode_message(&m);
        bytes.extend(encode_chunk(&c));
        let mut r = &bytes[..];
        assert_eq!(read_frame(&mut r).unwrap(), Frame::Message(m));
        assert_eq!(read_frame(&mut r).unwrap(), Frame::Chunk(c));
        assert!(matches!(read_frame(&mut r), Err(WireError::Closed)));
    }

    #[test]
    fn hostile_frames_are_refused_before_any_allocation() {
        let mut huge = encode_message(&Message::Stop);
        huge[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(read_frame(&mut &huge[..]), Err(WireError::TooLong(_))));
        let mut version = encode_message(&Message::Stop);
        version[4] = 9;
        assert!(matches!(
            read_frame(&mut &version[..]),
            Err(WireError::Version { found: 9 })
        ));
        assert!(matches!(
            read_frame(&mut &b"GET / HTTP/1.1\r\n"[..]),
            Err(WireError::BadMagic(_))
        ));
        let torn = encode_message(&Message::Stop);
        assert!(matches!(
            read_frame(&mut &torn[..torn.len() - 1]),
            Err(WireError::Io(_))
        ));
    }

    #[test]
    fn file_names_stay_inside_the_guests_directory() {
        for bad in [
            "../meta.json",
            "/etc/passwd",
            "a/b/c",
            ".hidden",
            "journal/..",
            "",
            "a//b",
            "x\0y",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?} passed");
        }
        for good in ["meta.json", "journal/threads.lines", "net_sizes.parquet"] {
            assert!(check_name(good).is_ok(), "{good:?} refused");
        }
    }
}
