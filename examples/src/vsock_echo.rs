//! vsock-echo: vsock connections of known count and size over the loopback
//! transport (context id 1, module vsock_loopback), the ground truth of the
//! vsock layer's test.
//!
//! Usage: vsock-echo [--connections N] [--bytes B] [--port P]
//!
//! A server thread listens on port P (default 999: below the ephemeral
//! ports, which are drawn above 1023); N clients, one after the other,
//! connect, send B bytes, read the B echoed back and close. Prints one JSON
//! object: connections made, bytes sent each way.

mod args;

use args::Args;
use std::{io, mem, thread};

/// `struct sockaddr_vm` (linux/vm_sockets.h).
#[repr(C)]
struct SockaddrVm {
    family: libc::sa_family_t,
    reserved1: u16,
    port: u32,
    cid: u32,
    flags: u8,
    zero: [u8; 3],
}

const VMADDR_CID_LOCAL: u32 = 1;

fn addr(port: u32) -> SockaddrVm {
    SockaddrVm {
        family: libc::AF_VSOCK as libc::sa_family_t,
        reserved1: 0,
        port,
        cid: VMADDR_CID_LOCAL,
        flags: 0,
        zero: [0; 3],
    }
}

fn check(r: libc::c_int, what: &str) -> libc::c_int {
    if r < 0 {
        panic!("{what}: {}", io::Error::last_os_error());
    }
    r
}

fn stream() -> libc::c_int {
    check(
        unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0) },
        "socket(AF_VSOCK) (is vsock_loopback loaded?)",
    )
}

fn send_all(fd: libc::c_int, mut buf: &[u8]) {
    while !buf.is_empty() {
        let n = check(
            unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) } as libc::c_int,
            "write",
        );
        buf = &buf[n as usize..];
    }
}

fn recv_exact(fd: libc::c_int, buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        let n = check(
            unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) } as libc::c_int,
            "read",
        );
        assert!(n > 0, "the peer closed after {got} of {} bytes", buf.len());
        got += n as usize;
    }
}

fn main() {
    let args = Args::from_env();
    let connections: u64 = args.num("--connections", 10);
    let bytes: usize = args.num("--bytes", 4096);
    let port: u32 = args.num("--port", 999);

    let listener = stream();
    let a = addr(port);
    let len = mem::size_of::<SockaddrVm>() as libc::socklen_t;
    check(
        unsafe { libc::bind(listener, (&a as *const SockaddrVm).cast(), len) },
        "bind",
    );
    check(unsafe { libc::listen(listener, 16) }, "listen");
    let server = thread::spawn(move || {
        let mut buf = vec![0u8; bytes];
        for _ in 0..connections {
            let fd = check(
                unsafe { libc::accept(listener, std::ptr::null_mut(), std::ptr::null_mut()) },
                "accept",
            );
            recv_exact(fd, &mut buf);
            send_all(fd, &buf);
            // Wait for the client's close before closing: one orderly end each.
            let mut end = [0u8; 1];
            unsafe { libc::read(fd, end.as_mut_ptr().cast(), 1) };
            unsafe { libc::close(fd) };
        }
    });
    let data = vec![0x5au8; bytes];
    let mut back = vec![0u8; bytes];
    for _ in 0..connections {
        let fd = stream();
        check(
            unsafe { libc::connect(fd, (&a as *const SockaddrVm).cast(), len) },
            "connect",
        );
        send_all(fd, &data);
        recv_exact(fd, &mut back);
        assert_eq!(back, data);
        unsafe { libc::close(fd) };
    }
    server.join().unwrap();
    unsafe { libc::close(listener) };
    println!(
        "{{\"connections\": {connections}, \"bytes_each_way\": {}, \"port\": {port}}}",
        connections * bytes as u64
    );
}
