//! A guest's recording as its agent sends it, kept under the host's
//! recording in `guests/<guest>/`: first its journal as it grows (so an
//! agent that goes quiet leaves what it sent readable, as a killed vtrace's
//! journal is), then, after the stop, the finished recording, which
//! replaces the journal once it has all come. What a guest may write is
//! bounded: names (wire::check_name), files, bytes.

use std::{
    collections::HashMap,
    fs::{self, OpenOptions},
    io::Write,
    path::{Path, PathBuf},
};

use super::wire::{Chunk, Target};

/// The most files and bytes one guest may send (its journal and its
/// recording together): far above a recording without per-event tables.
pub const MAX_FILES: usize = 256;
pub const MAX_BYTES: u64 = 256 << 20;

pub struct Mirror {
    /// `guests/<guest>`: the journal, then the recording.
    root: PathBuf,
    /// `guests/.<guest>.final`: the recording while it comes.
    incoming: PathBuf,
    /// Length of every file written, by target and name.
    lengths: HashMap<(u8, String), u64>,
    pub bytes: u64,
}

impl Mirror {
    pub fn new(guests: &Path, guest: &str) -> std::io::Result<Mirror> {
        let root = guests.join(guest);
        let incoming = guests.join(format!(".{guest}.final"));
        fs::create_dir_all(root.join("journal"))?;
        let _ = fs::remove_dir_all(&incoming);
        Ok(Mirror {
            root,
            incoming,
            lengths: HashMap::new(),
            bytes: 0,
        })
    }

    pub fn files(&self) -> usize {
        self.lengths.len()
    }

    /// Writes one chunk; Err: the rule it broke (the link ends there).
    pub fn apply(&mut self, c: &Chunk) -> Result<(), String> {
        let (dir, tag) = match c.target {
            Target::Journal => {
                if !c.name.starts_with("journal/") {
                    return Err(format!("a journal chunk for {:?}, outside journal/", c.name));
                }
                (&self.root, 0)
            }
            Target::Final => (&self.incoming, 1),
        };
        let key = (tag, c.name.clone());
        let known = self.lengths.get(&key).copied();
        if known.is_none() && self.lengths.len() >= MAX_FILES {
            return Err(format!("more than {MAX_FILES} files"));
        }
        let held = known.unwrap_or(0);
        if c.offset != 0 && c.offset != held {
            return Err(format!(
                "a chunk of {} at offset {}, where it holds {held} bytes",
                c.name, c.offset
            ));
        }
        self.bytes += c.data.len() as u64;
        if self.bytes > MAX_BYTES {
            return Err(format!("more than {} MiB", MAX_BYTES >> 20));
        }
        let path = dir.join(&c.name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        let mut f = OpenOptions::new()
            .create(true)
            .write(true)
            .append(c.offset != 0)
            .truncate(c.offset == 0)
            .open(&path)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        f.write_all(&c.data)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        self.lengths.insert(key, c.offset + c.data.len() as u64);
        Ok(())
    }

    /// The recording came whole: it replaces the journal.
    pub fn finish(&mut self) -> Result<(), String> {
        if !self.incoming.join("meta.json").is_file() {
            return Err("its recording came without meta.json".into());
        }
        let name = self.root.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let old = self.root.with_file_name(format!(".{name}.old"));
        fs::rename(&self.root, &old).map_err(|e| format!("cannot move its journal aside: {e}"))?;
        fs::rename(&self.incoming, &self.root).map_err(|e| format!("cannot put its recording in place: {e}"))?;
        let _ = fs::remove_dir_all(old);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(target: Target, name: &str, offset: u64, data: &[u8]) -> Chunk {
        Chunk {
            target,
            name: name.into(),
            offset,
            data: data.to_vec(),
        }
    }

    #[test]
    fn appends_follow_the_file_and_the_recording_replaces_the_journal() {
        let dir = std::env::temp_dir().join(format!("vtrace-mirror-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut m = Mirror::new(&dir, "g").unwrap();
        m.apply(&chunk(Target::Journal, "journal/a.lines", 0, b"one\n"))
            .unwrap();
        m.apply(&chunk(Target::Journal, "journal/a.lines", 4, b"two\n"))
            .unwrap();
        assert!(m.apply(&chunk(Target::Journal, "journal/a.lines", 3, b"x")).is_err());
        assert!(m.apply(&chunk(Target::Journal, "meta.json", 0, b"{}")).is_err());
        assert_eq!(fs::read(dir.join("g/journal/a.lines")).unwrap(), b"one\ntwo\n");
        assert!(m.finish().is_err(), "no meta.json yet");
        m.apply(&chunk(Target::Final, "meta.json", 0, b"{}")).unwrap();
        m.finish().unwrap();
        assert!(dir.join("g/meta.json").is_file() && !dir.join("g/journal").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
