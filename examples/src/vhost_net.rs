//! A minimal vhost-net user with known ground truth for vtrace's tun and
//! vhost tests: it creates a tap (IFF_VNET_HDR), writes W frames into it
//! with write(2) (tun_get_user), then hands the tap to the kernel's vhost-net
//! worker as a backend and has it move T frames from a TX virtqueue in this
//! process's memory into the tap and R frames the host sends to the tap
//! (AF_PACKET) into an RX virtqueue.
//!
//! `vhost-net [--tap NAME] [--write W] [--tx T] [--rx R] [--size BYTES]`
//! prints one JSON line: the frames each path moved (the used rings' own
//! counts), the tap's counters before and after, and the vhost worker's pid.
//! Needs /dev/vhost-net and /dev/net/tun (vhost_net and tun loaded).

mod args;

use args::Args;
use std::{
    fs,
    os::fd::RawFd,
    ptr,
    sync::atomic::{Ordering, fence},
    time::{Duration, Instant},
};

const IFF_TAP: i16 = 0x0002;
const IFF_NO_PI: i16 = 0x1000;
const IFF_VNET_HDR: i16 = 0x4000;
const TUNSETIFF: libc::c_ulong = 0x400454ca;

// _IO/_IOW(VHOST_VIRTIO = 0xAF, nr, size)
const VHOST_SET_OWNER: libc::c_ulong = 0xaf01;
const VHOST_SET_FEATURES: libc::c_ulong = 0x4008af00;
const VHOST_SET_MEM_TABLE: libc::c_ulong = 0x4008af03;
const VHOST_SET_VRING_NUM: libc::c_ulong = 0x4008af10;
const VHOST_SET_VRING_ADDR: libc::c_ulong = 0x4028af11;
const VHOST_SET_VRING_BASE: libc::c_ulong = 0x4008af12;
const VHOST_SET_VRING_KICK: libc::c_ulong = 0x4008af20;
const VHOST_SET_VRING_CALL: libc::c_ulong = 0x4008af21;
const VHOST_NET_SET_BACKEND: libc::c_ulong = 0x4008af30;

const RX_QUEUE: u32 = 0;
const TX_QUEUE: u32 = 1;
/// Descriptors per ring (a power of two).
const RING: usize = 256;
/// virtio_net_hdr without num_buffers: no features negotiated, so vhost adds
/// no header of its own and the tap's 10-byte vnet header is the guest's.
const VNET_HDR: usize = 10;
const SLOT: usize = 2048;
const VRING_DESC_F_WRITE: u16 = 2;
/// An ethertype no host protocol handles: frames into the tap end there.
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];

#[repr(C)]
struct Ifreq {
    name: [u8; 16],
    flags: i16,
    _pad: [u8; 22],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

/// One virtqueue in this process's memory: descriptor table, available and
/// used rings, and RING buffers of SLOT bytes.
struct Queue {
    desc: *mut Desc,
    avail: *mut u16,
    used: *mut u16,
    bufs: *mut u8,
    kick: RawFd,
    next_avail: u16,
}

impl Queue {
    fn new(region: *mut u8) -> (Queue, usize) {
        let desc = region as *mut Desc;
        let avail = unsafe { region.add(RING * 16) } as *mut u16;
        let used = unsafe { region.add(8192) } as *mut u16;
        let bufs = unsafe { region.add(16384) };
        let kick = unsafe { libc::eventfd(0, 0) };
        let q = Queue {
            desc,
            avail,
            used,
            bufs,
            kick,
            next_avail: 0,
        };
        (q, 16384 + RING * SLOT)
    }

    fn slot(&self, i: usize) -> *mut u8 {
        unsafe { self.bufs.add((i % RING) * SLOT) }
    }

    /// Makes the buffer of `i` available with `len` bytes (device-writable for RX).
    fn offer(&mut self, len: usize, writable: bool) {
        let i = self.next_avail as usize % RING;
        unsafe {
            *self.desc.add(i) = Desc {
                addr: self.slot(i) as u64,
                len: len as u32,
                flags: if writable { VRING_DESC_F_WRITE } else { 0 },
                next: 0,
            };
            ptr::write_volatile(self.avail.add(2 + i), i as u16);
            fence(Ordering::SeqCst);
            self.next_avail = self.next_avail.wrapping_add(1);
            ptr::write_volatile(self.avail.add(1), self.next_avail);
        }
    }

    fn kick(&self) {
        let one = 1u64;
        unsafe { libc::write(self.kick, &one as *const u64 as *const _, 8) };
    }

    fn used_idx(&self) -> u16 {
        fence(Ordering::SeqCst);
        unsafe { ptr::read_volatile(self.used.add(1)) }
    }

    /// Waits until the device used `n` buffers in all (at most 20 s).
    fn wait_used(&self, n: u16) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.used_idx() != n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.used_idx()
    }
}

fn check(what: &str, rc: libc::c_int) {
    if rc < 0 {
        panic!("{what}: {}", std::io::Error::last_os_error());
    }
}

fn ioctl<T>(fd: RawFd, what: &str, request: libc::c_ulong, arg: &T) {
    check(what, unsafe { libc::ioctl(fd, request, arg as *const T) });
}

fn counter(tap: &str, name: &str) -> u64 {
    fs::read_to_string(format!("/sys/class/net/{tap}/statistics/{name}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn counters(tap: &str) -> String {
    let c = |n| counter(tap, n);
    format!(
        r#"{{"rx_packets":{},"rx_bytes":{},"tx_packets":{},"tx_bytes":{}}}"#,
        c("rx_packets"),
        c("rx_bytes"),
        c("tx_packets"),
        c("tx_bytes")
    )
}

/// A vnet header (all zero: no offloads) and an Ethernet broadcast frame of `size` bytes.
fn frame(buf: *mut u8, size: usize, seq: u32) {
    let mut f = vec![0u8; VNET_HDR + size];
    f[VNET_HDR..VNET_HDR + 6].fill(0xff);
    f[VNET_HDR + 6..VNET_HDR + 12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[VNET_HDR + 12..VNET_HDR + 14].copy_from_slice(&ETHERTYPE);
    f[VNET_HDR + 14..VNET_HDR + 18].copy_from_slice(&seq.to_be_bytes());
    unsafe { ptr::copy_nonoverlapping(f.as_ptr(), buf, f.len()) };
}

fn main() {
    let args = Args::from_env();
    let tap = args.value("--tap").unwrap_or_else(|| "vtg0".into());
    let (writes, tx, rx): (u64, u64, u64) = (args.num("--write", 100), args.num("--tx", 300), args.num("--rx", 200));
    let size: usize = args.num("--size", 256);
    assert!((60..=1514).contains(&size), "--size: 60..=1514 bytes");
    assert!(tx < 65536 && rx <= RING as u64, "--tx below 65536, --rx at most {RING}");

    // The tap, with IPv6 off so the host sends nothing of its own into it.
    let tun = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR) };
    check("open /dev/net/tun", tun);
    let mut ifr = Ifreq {
        name: [0; 16],
        flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
        _pad: [0; 22],
    };
    ifr.name[..tap.len()].copy_from_slice(tap.as_bytes());
    ioctl(tun, "TUNSETIFF", TUNSETIFF, &ifr);
    let _ = fs::write(format!("/proc/sys/net/ipv6/conf/{tap}/disable_ipv6"), "1");
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    ifr.flags = (libc::IFF_UP | libc::IFF_RUNNING) as i16;
    ioctl(sock, "SIOCSIFFLAGS", libc::SIOCSIFFLAGS, &ifr);
    let ifindex = fs::read_to_string(format!("/sys/class/net/{tap}/ifindex"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .expect("tap ifindex");
    let before = counters(&tap);

    // 1. write(2): one tun_get_user per frame.
    let mut buf = vec![0u8; VNET_HDR + size];
    for i in 0..writes {
        frame(buf.as_mut_ptr(), size, i as u32);
        let n = unsafe { libc::write(tun, buf.as_ptr() as *const _, buf.len()) };
        assert_eq!(
            n as usize,
            buf.len(),
            "write to the tap: {}",
            std::io::Error::last_os_error()
        );
    }

    // 2. vhost-net: owner, memory (identity: "guest" addresses are ours), rings, backend.
    let len = 2 * (16384 + RING * SLOT);
    let region = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    } as *mut u8;
    assert!(region as isize != -1, "mmap failed");
    let vhost = unsafe { libc::open(c"/dev/vhost-net".as_ptr(), libc::O_RDWR) };
    check("open /dev/vhost-net", vhost);
    check("VHOST_SET_OWNER", unsafe { libc::ioctl(vhost, VHOST_SET_OWNER, 0) });
    ioctl(vhost, "VHOST_SET_FEATURES", VHOST_SET_FEATURES, &0u64);
    #[repr(C)]
    struct Memory {
        nregions: u32,
        padding: u32,
        guest_phys_addr: u64,
        memory_size: u64,
        userspace_addr: u64,
        flags_padding: u64,
    }
    let mem = Memory {
        nregions: 1,
        padding: 0,
        guest_phys_addr: region as u64,
        memory_size: len as u64,
        userspace_addr: region as u64,
        flags_padding: 0,
    };
    ioctl(vhost, "VHOST_SET_MEM_TABLE", VHOST_SET_MEM_TABLE, &mem);
    let (mut rxq, used_len) = Queue::new(region);
    let (mut txq, _) = Queue::new(unsafe { region.add(used_len) });
    let call = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK) };
    for (index, q) in [(RX_QUEUE, &rxq), (TX_QUEUE, &txq)] {
        ioctl(vhost, "VHOST_SET_VRING_NUM", VHOST_SET_VRING_NUM, &[index, RING as u32]);
        ioctl(vhost, "VHOST_SET_VRING_BASE", VHOST_SET_VRING_BASE, &[index, 0]);
        #[repr(C)]
        struct Addr {
            index: u32,
            flags: u32,
            desc: u64,
            used: u64,
            avail: u64,
            log: u64,
        }
        let addr = Addr {
            index,
            flags: 0,
            desc: q.desc as u64,
            used: q.used as u64,
            avail: q.avail as u64,
            log: 0,
        };
        ioctl(vhost, "VHOST_SET_VRING_ADDR", VHOST_SET_VRING_ADDR, &addr);
        ioctl(
            vhost,
            "VHOST_SET_VRING_KICK",
            VHOST_SET_VRING_KICK,
            &[index as i32, q.kick],
        );
        ioctl(
            vhost,
            "VHOST_SET_VRING_CALL",
            VHOST_SET_VRING_CALL,
            &[index as i32, call],
        );
    }
    // RX buffers first, so nothing the backend takes from the tap waits.
    for _ in 0..rx {
        rxq.offer(SLOT, true);
    }
    for index in [RX_QUEUE, TX_QUEUE] {
        ioctl(
            vhost,
            "VHOST_NET_SET_BACKEND",
            VHOST_NET_SET_BACKEND,
            &[index as i32, tun],
        );
    }
    rxq.kick();
    let worker = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .find(|e| {
            fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == format!("vhost-{}", std::process::id()))
        })
        .and_then(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()));

    // TX: frames in chunks of at most a ring, one kick per chunk.
    let mut sent: u64 = 0;
    while sent < tx {
        let chunk = (tx - sent).min(RING as u64);
        for k in 0..chunk {
            let i = txq.next_avail as usize;
            frame(txq.slot(i), size, (sent + k) as u32);
            txq.offer(VNET_HDR + size, false);
        }
        txq.kick();
        sent += chunk;
        txq.wait_used(sent as u16);
    }
    let tx_used = txq.used_idx();

    // RX: the host sends R frames to the tap; vhost writes them into our buffers.
    let packet = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    check("socket(AF_PACKET)", packet);
    let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    to.sll_family = libc::AF_PACKET as u16;
    to.sll_ifindex = ifindex;
    to.sll_halen = 6;
    for i in 0..rx {
        frame(buf.as_mut_ptr(), size, i as u32);
        let f = &buf[VNET_HDR..];
        let n = unsafe {
            libc::sendto(
                packet,
                f.as_ptr() as *const _,
                f.len(),
                0,
                &to as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(
            n as usize,
            f.len(),
            "send to the tap: {}",
            std::io::Error::last_os_error()
        );
    }
    let rx_used = rxq.wait_used(rx as u16);
    let after = counters(&tap);
    println!(
        r#"{{"pid":{},"tap":"{tap}","ifindex":{ifindex},"vhost_worker":{},"size":{size},"written":{writes},"tx_offered":{tx},"tx_used":{tx_used},"rx_sent":{rx},"rx_used":{rx_used},"before":{before},"after":{after}}}"#,
        std::process::id(),
        worker.map_or("null".into(), |w| w.to_string()),
    );
}
