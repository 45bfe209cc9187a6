//! How the host reaches a guest's agent, and how the agent waits for it:
//! vsock (QEMU's vhost-vsock device, Kata's sandbox), Firecracker's vsock
//! as the Unix socket on its host end (`CONNECT <port>`), or TCP to an
//! address the user names. Every kind becomes one [`Stream`] (a socket's
//! file descriptor), so the link above it is written once.

use std::{
    fs::File,
    io::{Read, Write},
    net::{TcpListener, TcpStream, ToSocketAddrs},
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::net::UnixStream,
    },
    path::PathBuf,
    time::Duration,
};

/// The agent's port unless one is named: beside Kata's agent (1024).
pub const DEFAULT_PORT: u32 = 1025;

/// Where a guest's agent is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestAddress {
    /// `cid:N[:port]`: a vsock context id (QEMU's `guest-cid=`).
    Vsock { cid: u32, port: u32 },
    /// `uds:PATH[:port]`: a hybrid vsock's host end (Firecracker's `uds_path`).
    Uds { path: PathBuf, port: u32 },
    /// `tcp:HOST:PORT`: the fallback, to an address the user names.
    Tcp(String),
}

impl std::fmt::Display for GuestAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GuestAddress::Vsock { cid, port } => write!(f, "cid:{cid}:{port}"),
            GuestAddress::Uds { path, port } => write!(f, "uds:{}:{port}", path.display()),
            GuestAddress::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

impl GuestAddress {
    /// `cid:N[:port]`, `uds:PATH[:port]` or `tcp:HOST[:port]`.
    pub fn parse(s: &str) -> Result<GuestAddress, String> {
        let bad = |why: &str| format!("--guest {s:?}: {why} (cid:N[:PORT], uds:PATH[:PORT], tcp:HOST[:PORT] or auto)");
        let port_of = |p: &str| p.parse::<u32>().map_err(|_| bad(&format!("{p:?} is not a port")));
        if let Some(rest) = s.strip_prefix("cid:") {
            let (cid, port) = match rest.split_once(':') {
                Some((c, p)) => (c, port_of(p)?),
                None => (rest, DEFAULT_PORT),
            };
            let cid = cid
                .parse::<u32>()
                .map_err(|_| bad(&format!("{cid:?} is not a context id")))?;
            if cid < 3 {
                return Err(bad(
                    "context ids 0 to 2 are the hypervisor's and the host's, not a guest's",
                ));
            }
            return Ok(GuestAddress::Vsock { cid, port });
        }
        if let Some(rest) = s.strip_prefix("uds:") {
            let (path, port) = match rest.rsplit_once(':') {
                Some((p, port)) if port.parse::<u32>().is_ok() => (p, port_of(port)?),
                _ => (rest, DEFAULT_PORT),
            };
            if path.is_empty() {
                return Err(bad("no path"));
            }
            return Ok(GuestAddress::Uds {
                path: path.into(),
                port,
            });
        }
        if let Some(rest) = s.strip_prefix("tcp:") {
            let has_port = match rest.rsplit_once(':') {
                Some((host, port)) => port.parse::<u16>().is_ok() && (!host.contains(':') || host.ends_with(']')),
                None => false,
            };
            if rest.is_empty() {
                return Err(bad("no address"));
            }
            return Ok(GuestAddress::Tcp(if has_port {
                rest.to_string()
            } else {
                format!("{rest}:{DEFAULT_PORT}")
            }));
        }
        Err(bad("unknown kind"))
    }

    /// Connects, giving up after `timeout`.
    pub fn connect(&self, timeout: Duration) -> std::io::Result<Stream> {
        match self {
            GuestAddress::Tcp(a) => {
                let addr = a.to_socket_addrs()?.next().ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, format!("{a} resolves to nothing"))
                })?;
                let s = TcpStream::connect_timeout(&addr, timeout)?;
                s.set_nodelay(true)?;
                Ok(Stream(File::from(OwnedFd::from(s))))
            }
            GuestAddress::Vsock { cid, port } => vsock_connect(*cid, *port, timeout),
            GuestAddress::Uds { path, port } => {
                let mut s = UnixStream::connect(path)?;
                s.set_read_timeout(Some(timeout))?;
                s.write_all(format!("CONNECT {port}\n").as_bytes())?;
                // Firecracker answers "OK <host port>\n", byte by byte read
                // so that nothing after it is taken from the stream.
                let mut line = Vec::new();
                let mut byte = [0u8; 1];
                while line.len() < 64 && s.read(&mut byte)? == 1 && byte[0] != b'\n' {
                    line.push(byte[0]);
                }
                if !line.starts_with(b"OK ") {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        format!(
                            "{} answered {:?} to CONNECT {port} (no agent listening on that port?)",
                            path.display(),
                            String::from_utf8_lossy(&line)
                        ),
                    ));
                }
                s.set_read_timeout(None)?;
                Ok(Stream(File::from(OwnedFd::from(s))))
            }
        }
    }
}

/// A connected socket of any kind.
pub struct Stream(File);

impl Stream {
    pub fn try_clone(&self) -> std::io::Result<Stream> {
        self.0.try_clone().map(Stream)
    }

    /// Reads give up after `t` (None: never).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        let tv = t.map_or(libc::timeval { tv_sec: 0, tv_usec: 0 }, |t| libc::timeval {
            tv_sec: t.as_secs() as libc::time_t,
            tv_usec: t.subsec_micros().max(if t.is_zero() { 0 } else { 1 }) as libc::suseconds_t,
        });
        setsockopt(&self.0, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)
    }

    /// Ends both directions: a reader blocked on it returns.
    pub fn shutdown(&self) {
        unsafe { libc::shutdown(self.0.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn setsockopt<T>(fd: &impl AsRawFd, level: i32, name: i32, value: &T) -> std::io::Result<()> {
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn vsock_socket() -> std::io::Result<File> {
    let fd = unsafe { libc::socket(libc::AF_VSOCK, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(
            e.kind(),
            format!("no vsock here ({e}): load vmw_vsock_virtio_transport in a guest, vhost_vsock on a host"),
        ));
    }
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn vsock_addr(cid: u32, port: u32) -> libc::sockaddr_vm {
    let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
    addr.svm_family = libc::AF_VSOCK as libc::sa_family_t;
    addr.svm_cid = cid;
    addr.svm_port = port;
    addr
}

fn vsock_connect(cid: u32, port: u32, timeout: Duration) -> std::io::Result<Stream> {
    let sock = vsock_socket()?;
    // SO_VM_SOCKETS_CONNECT_TIMEOUT (option 6 of level AF_VSOCK), a timeval.
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    let _ = setsockopt(&sock, libc::AF_VSOCK, 6, &tv);
    let addr = vsock_addr(cid, port);
    let rc = unsafe {
        libc::connect(
            sock.as_raw_fd(),
            &addr as *const libc::sockaddr_vm as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Stream(sock))
}

/// Where the agent waits for the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// vsock, any of this guest's context ids (vsock reaches only the host).
    Vsock { port: u32 },
    /// TCP on one address the user named.
    Tcp(String),
}

impl Listen {
    /// `vsock[:PORT]` or `tcp:ADDR:PORT`. An unspecified TCP address (all
    /// interfaces) is refused unless `any` is set: the agent answers
    /// whoever reaches it.
    pub fn parse(s: &str, any: bool) -> Result<Listen, String> {
        if s == "vsock" {
            return Ok(Listen::Vsock { port: DEFAULT_PORT });
        }
        if let Some(port) = s.strip_prefix("vsock:") {
            return port
                .parse()
                .map(|port| Listen::Vsock { port })
                .map_err(|_| format!("--listen {s:?}: {port:?} is not a port"));
        }
        if let Some(addr) = s.strip_prefix("tcp:") {
            let resolved = addr
                .to_socket_addrs()
                .map_err(|e| format!("--listen {s:?}: {e} (tcp:ADDR:PORT)"))?
                .next()
                .ok_or_else(|| format!("--listen {s:?}: resolves to nothing"))?;
            if resolved.ip().is_unspecified() && !any {
                return Err(format!(
                    "--listen {s:?} listens on every interface: name one address, or add --listen-any to mean it"
                ));
            }
            return Ok(Listen::Tcp(addr.to_string()));
        }
        Err(format!("--listen {s:?}: vsock[:PORT] or tcp:ADDR:PORT"))
    }

    pub fn bind(&self) -> std::io::Result<Listener> {
        match self {
            Listen::Tcp(a) => TcpListener::bind(a.as_str()).map(Listener::Tcp),
            Listen::Vsock { port } => {
                let sock = vsock_socket()?;
                let addr = vsock_addr(libc::VMADDR_CID_ANY, *port);
                let rc = unsafe {
                    libc::bind(
                        sock.as_raw_fd(),
                        &addr as *const libc::sockaddr_vm as *const libc::sockaddr,
                        std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t,
                    )
                };
                if rc != 0 || unsafe { libc::listen(sock.as_raw_fd(), 4) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(Listener::Vsock(sock))
            }
        }
    }
}

/// A bound listener of either kind.
pub enum Listener {
    Tcp(TcpListener),
    Vsock(File),
}

impl Listener {
    /// The next host's connection, and who it is.
    pub fn accept(&self) -> std::io::Result<(Stream, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                s.set_nodelay(true)?;
                Ok((Stream(File::from(OwnedFd::from(s))), peer.to_string()))
            }
            Listener::Vsock(l) => {
                let mut addr: libc::sockaddr_vm = unsafe { std::mem::zeroed() };
                let mut len = std::mem::size_of::<libc::sockaddr_vm>() as libc::socklen_t;
                let fd = unsafe {
                    libc::accept4(
                        l.as_raw_fd(),
                        &mut addr as *mut libc::sockaddr_vm as *mut libc::sockaddr,
                        &mut len,
                        libc::SOCK_CLOEXEC,
                    )
                };
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok((
                    Stream(unsafe { File::from_raw_fd(fd) }),
                    format!("cid:{}:{}", addr.svm_cid, addr.svm_port),
                ))
            }
        }
    }

    /// Where it listens.
    pub fn local(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| format!("tcp:{a}")).unwrap_or_default(),
            Listener::Vsock(_) => "vsock".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_with_their_default_port() {
        assert_eq!(
            GuestAddress::parse("cid:3").unwrap(),
            GuestAddress::Vsock { cid: 3, port: 1025 }
        );
        assert_eq!(
            GuestAddress::parse("cid:7:99").unwrap(),
            GuestAddress::Vsock { cid: 7, port: 99 }
        );
        assert_eq!(
            GuestAddress::parse("uds:/run/fc/v.sock:52").unwrap(),
            GuestAddress::Uds {
                path: "/run/fc/v.sock".into(),
                port: 52
            }
        );
        assert_eq!(
            GuestAddress::parse("uds:/run/v.sock").unwrap(),
            GuestAddress::Uds {
                path: "/run/v.sock".into(),
                port: 1025
            }
        );
        assert_eq!(
            GuestAddress::parse("tcp:10.0.0.2").unwrap(),
            GuestAddress::Tcp("10.0.0.2:1025".into())
        );
        assert_eq!(
            GuestAddress::parse("tcp:10.0.0.2:80").unwrap(),
            GuestAddress::Tcp("10.0.0.2:80".into())
        );
        for bad in ["cid:2", "cid:x", "uds:", "tcp:", "ftp:x", "cid:3:port"] {
            assert!(GuestAddress::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_agent_never_listens_everywhere_unless_told() {
        assert!(
            Listen::parse("tcp:0.0.0.0:1025", false)
                .unwrap_err()
                .contains("--listen-any")
        );
        assert!(Listen::parse("tcp:0.0.0.0:1025", true).is_ok());
        assert_eq!(
            Listen::parse("tcp:127.0.0.1:9", false).unwrap(),
            Listen::Tcp("127.0.0.1:9".into())
        );
        assert_eq!(Listen::parse("vsock", false).unwrap(), Listen::Vsock { port: 1025 });
    }
}
