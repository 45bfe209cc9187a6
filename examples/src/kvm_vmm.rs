//! A minimal real VMM with known ground truth for vtrace's KVM tests: one
//! vCPU in 16-bit real mode performs exactly N port writes, M MMIO writes and
//! K halts, each of which exits to this user space, which sleeps a known time
//! per exit before it calls KVM_RUN again.
//!
//! `kvm-vmm [--pio N] [--mmio M] [--halts K] [--sleep-us S] [--linger-ms L]`
//! prints one JSON line: the vCPU thread, the exits it handled and its own
//! measure of the time between KVM_RUN returning and the next KVM_RUN.

mod args;

use args::Args;
use std::time::{Duration, Instant};

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::{Kvm, VcpuExit};

const CODE_GPA: u64 = 0x1000;
const MEM_SIZE: usize = 0x4000;
/// Outside the only memory slot: writes there exit as MMIO.
const MMIO_GPA: u16 = 0x8000;
const PIO_PORT: u8 = 0x10;

/// Three counted loops (CX = count, so each count must be 1..=65535).
fn guest_code(pio: u16, mmio: u16, halts: u16) -> Vec<u8> {
    let mut c = Vec::new();
    c.push(0xb9); // mov cx, pio
    c.extend(pio.to_le_bytes());
    c.extend([0xe6, PIO_PORT]); // out PIO_PORT, al
    c.extend([0xe2, 0xfc]); // loop -4
    c.push(0xb9); // mov cx, mmio
    c.extend(mmio.to_le_bytes());
    c.push(0xa2); // mov [MMIO_GPA], al
    c.extend(MMIO_GPA.to_le_bytes());
    c.extend([0xe2, 0xfb]); // loop -5
    c.push(0xb9); // mov cx, halts
    c.extend(halts.to_le_bytes());
    c.push(0xf4); // hlt
    c.extend([0xe2, 0xfd]); // loop -3
    c.push(0xf4); // never reached: the VMM stops at the K-th halt
    c
}

/// KVM's own statistics of this vCPU (binary stats, `KVM_GET_STATS_FD`, which
/// only the VMM's own process may ask for): name -> value of every counter.
fn kvm_stats(vcpu: &kvm_ioctls::VcpuFd) -> Vec<(String, u64)> {
    use std::os::{
        fd::{AsRawFd, FromRawFd},
        unix::fs::FileExt,
    };
    const KVM_GET_STATS_FD: libc::c_ulong = 0xaece; // _IO(KVMIO, 0xce)
    let fd = unsafe { libc::ioctl(vcpu.as_raw_fd(), KVM_GET_STATS_FD, 0) };
    if fd < 0 {
        return Vec::new();
    }
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let word = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    // struct kvm_stats_header { flags, name_size, num_desc, id_offset, desc_offset, data_offset }
    let mut h = [0u8; 24];
    if file.read_exact_at(&mut h, 0).is_err() {
        return Vec::new();
    }
    let (name_size, num_desc, desc_offset, data_offset) = (word(&h, 4), word(&h, 8), word(&h, 16), word(&h, 20));
    // struct kvm_stats_desc { flags: u32, exponent: s16, size: u16, offset: u32, bucket_size: u32, name[name_size] }
    let desc_len = 16 + name_size as usize;
    let mut descs = vec![0u8; desc_len * num_desc as usize];
    if file.read_exact_at(&mut descs, desc_offset as u64).is_err() {
        return Vec::new();
    }
    descs
        .chunks_exact(desc_len)
        .filter(|d| u16::from_ne_bytes([d[6], d[7]]) == 1)
        .filter_map(|d| {
            let name = String::from_utf8_lossy(&d[16..]).trim_end_matches('\0').to_string();
            let mut v = [0u8; 8];
            file.read_exact_at(&mut v, data_offset as u64 + word(d, 8) as u64)
                .ok()?;
            Some((name, u64::from_ne_bytes(v)))
        })
        .collect()
}

fn main() {
    let args = Args::from_env();
    let count = |name: &str, default: u64| -> u16 {
        let v = args.num(name, default);
        assert!((1..=65535).contains(&v), "{name} must be 1..=65535");
        v as u16
    };
    let (pio, mmio, halts) = (count("--pio", 50), count("--mmio", 30), count("--halts", 20));
    let sleep = Duration::from_micros(args.num("--sleep-us", 1000));
    let linger = Duration::from_millis(args.num("--linger-ms", 0));

    let kvm = Kvm::new().expect("open /dev/kvm");
    let vm = kvm.create_vm().expect("KVM_CREATE_VM");
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            MEM_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_ANONYMOUS | libc::MAP_SHARED | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(mem, libc::MAP_FAILED, "mmap guest memory");
    let code = guest_code(pio, mmio, halts);
    unsafe {
        std::ptr::copy_nonoverlapping(code.as_ptr(), mem as *mut u8, code.len());
        vm.set_user_memory_region(kvm_userspace_memory_region {
            slot: 0,
            guest_phys_addr: CODE_GPA,
            memory_size: MEM_SIZE as u64,
            userspace_addr: mem as u64,
            flags: 0,
        })
        .expect("KVM_SET_USER_MEMORY_REGION");
    }
    let vcpu = vm.create_vcpu(0).expect("KVM_CREATE_VCPU");
    let mut sregs = vcpu.get_sregs().expect("KVM_GET_SREGS");
    sregs.cs.base = 0;
    sregs.cs.selector = 0;
    sregs.ds.base = 0;
    sregs.ds.selector = 0;
    vcpu.set_sregs(&sregs).expect("KVM_SET_SREGS");
    let mut regs = vcpu.get_regs().expect("KVM_GET_REGS");
    regs.rip = CODE_GPA;
    regs.rflags = 2;
    vcpu.set_regs(&regs).expect("KVM_SET_REGS");

    // The vCPU runs in its own thread, as in real VMMs, named like QEMU's.
    let worker = std::thread::Builder::new()
        .name("vcpu0".into())
        .spawn(move || {
            let mut vcpu = vcpu;
            let tid = unsafe { libc::gettid() };
            let (mut seen_pio, mut seen_mmio, mut seen_hlt, mut other) = (0u64, 0u64, 0u64, Vec::new());
            let (mut handled, mut handling_ns) = (0u64, 0u128);
            let mut returned: Option<Instant> = None;
            loop {
                if let Some(t) = returned.take() {
                    handled += 1;
                    handling_ns += t.elapsed().as_nanos();
                }
                let exit = vcpu.run().expect("KVM_RUN");
                let now = Instant::now();
                match exit {
                    VcpuExit::IoOut(port, _) if port == PIO_PORT as u16 => seen_pio += 1,
                    VcpuExit::MmioWrite(addr, _) if addr == MMIO_GPA as u64 => seen_mmio += 1,
                    VcpuExit::Hlt => seen_hlt += 1,
                    e => other.push(format!("{e:?}")),
                }
                if other.len() > 10 {
                    break;
                }
                std::thread::sleep(sleep);
                if seen_hlt == halts as u64 {
                    break;
                }
                returned = Some(now);
            }
            let stats: Vec<String> = kvm_stats(&vcpu)
                .into_iter()
                .filter(|(name, _)| ["exits", "io_exits", "mmio_exits", "halt_exits"].contains(&name.as_str()))
                .map(|(name, v)| format!("\"{name}\":{v}"))
                .collect();
            format!(
                "{{\"pid\":{},\"vcpu_tid\":{tid},\"pio\":{seen_pio},\"mmio\":{seen_mmio},\"hlt\":{seen_hlt},\
                 \"other\":{other:?},\"handled\":{handled},\"handling_ns_mean\":{},\"kvm_stats\":{{{}}}}}",
                std::process::id(),
                handling_ns / handled.max(1) as u128,
                stats.join(",")
            )
        })
        .expect("spawn the vCPU thread");
    let report = worker.join().expect("vCPU thread");
    println!("{report}");
    // Keeps the VM (and KVM's own statistics for it) alive a little longer.
    std::thread::sleep(linger);
}
