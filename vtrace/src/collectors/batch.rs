//! Whole maps read in a few system calls (BPF_MAP_LOOKUP_BATCH, Linux 5.6:
//! older than the ring buffer vtrace needs), where aya's reads take one
//! call per array index and two per hash entry. The CPU layer reads its
//! 1024 per-CPU thread slots and every thread's entry at each interval;
//! in a TCG guest, where a system call costs tens of microseconds, those
//! calls were most of the recorder's own CPU.

use std::{
    io,
    marker::PhantomData,
    os::fd::{AsFd, AsRawFd, OwnedFd},
};

use aya::{
    Ebpf, Pod,
    maps::{Map, MapData},
};

use crate::{Error, Result};

/// `union bpf_attr`'s part for the batch commands.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// A map of the loaded object read whole: keys `K`, values `V` (per CPU,
/// each rounded up to 8 bytes, for the per-CPU types).
pub struct BatchReader<K, V> {
    fd: OwnedFd,
    max_entries: u32,
    /// Values per key: the possible CPUs of a per-CPU map, else 1.
    copies: usize,
    _kv: PhantomData<(K, V)>,
}

impl<K: Pod, V: Pod> BatchReader<K, V> {
    /// A reader of map `name` (its own descriptor: the map itself can still
    /// be taken out of the object).
    pub fn of(ebpf: &Ebpf, name: &str) -> Result<Self> {
        let map = ebpf
            .map(name)
            .ok_or_else(|| Error::Ebpf(format!("map {name} missing from the eBPF object")))?;
        let (data, per_cpu): (&MapData, bool) = match map {
            Map::Array(d) | Map::HashMap(d) | Map::LruHashMap(d) => (d, false),
            Map::PerCpuArray(d) | Map::PerCpuHashMap(d) | Map::PerCpuLruHashMap(d) => (d, true),
            _ => return Err(Error::Ebpf(format!("map {name}: not an array or hash map"))),
        };
        let info = data.info().map_err(|e| Error::Ebpf(format!("map {name}: {e}")))?;
        if info.key_size() as usize != size_of::<K>() || info.value_size() as usize != size_of::<V>() {
            return Err(Error::Ebpf(format!(
                "map {name}: key or value size differs from its type's"
            )));
        }
        let copies = if per_cpu {
            aya::util::nr_cpus().map_err(|(what, e)| Error::Ebpf(format!("{what}: {e}")))?
        } else {
            1
        };
        let fd = data
            .fd()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::Ebpf(format!("map {name}: duplicate its descriptor: {e}")))?;
        Ok(BatchReader {
            fd,
            max_entries: info.max_entries(),
            copies,
            _kv: PhantomData,
        })
    }

    /// Every entry: its key and its values (one per CPU of a per-CPU map),
    /// [`CHUNK`] entries a call.
    pub fn read(&self) -> Result<Vec<(K, Vec<V>)>> {
        let stride = if self.copies > 1 {
            size_of::<V>().next_multiple_of(8)
        } else {
            size_of::<V>()
        };
        let (key_size, value_size) = (size_of::<K>(), stride * self.copies);
        let chunk = CHUNK.min(self.max_entries as usize);
        let mut keys = vec![0u8; key_size * chunk];
        let mut values = vec![0u8; value_size * chunk];
        let mut out = Vec::new();
        // Where to go on from: an index (arrays), a bucket (hashes).
        let (mut from, mut next) = (0u64, 0u64);
        let mut first = true;
        loop {
            let mut attr = BatchAttr {
                in_batch: if first { 0 } else { &from as *const u64 as u64 },
                out_batch: &mut next as *mut u64 as u64,
                keys: keys.as_mut_ptr() as u64,
                values: values.as_mut_ptr() as u64,
                count: chunk as u32,
                map_fd: self.fd.as_raw_fd() as u32,
                ..Default::default()
            };
            // SAFETY: the buffers hold `count` keys and values and live
            // across the call.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_bpf,
                    aya_obj::generated::bpf_cmd::BPF_MAP_LOOKUP_BATCH as libc::c_long,
                    &mut attr as *mut BatchAttr,
                    size_of::<BatchAttr>(),
                )
            };
            let error = (rc < 0).then(io::Error::last_os_error);
            for i in 0..(attr.count as usize).min(chunk) {
                // SAFETY: K and V are Pod, read from the bytes the kernel
                // wrote for entry i.
                let key = unsafe { std::ptr::read_unaligned(keys[i * key_size..].as_ptr() as *const K) };
                let at = i * value_size;
                let v = (0..self.copies)
                    .map(|c| unsafe { std::ptr::read_unaligned(values[at + c * stride..].as_ptr() as *const V) })
                    .collect();
                out.push((key, v));
            }
            match error {
                // ENOENT: the map's end was reached.
                Some(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(out),
                Some(e) => return Err(Error::Ebpf(format!("BPF_MAP_LOOKUP_BATCH: {e}"))),
                None => {}
            }
            from = next;
            first = false;
        }
    }
}

impl<V: Pod> BatchReader<u32, V> {
    /// A per-CPU array read whole, by CPU: each CPU's values in index order.
    pub fn per_cpu(&self) -> Result<Vec<Vec<V>>> {
        let mut by_cpu: Vec<Vec<V>> = (0..self.copies)
            .map(|_| Vec::with_capacity(self.max_entries as usize))
            .collect();
        for (_, values) in self.read()? {
            for (cpu, v) in values.into_iter().enumerate() {
                by_cpu[cpu].push(v);
            }
        }
        Ok(by_cpu)
    }
}

/// Entries a read asks for at once: its buffers stay small (a hash map of
/// 32768 threads would need 5 MiB at once), its calls few.
const CHUNK: usize = 256;
