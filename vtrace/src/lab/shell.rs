//! `vtrace lab exec` into a lab Linux VM: its /init runs `vtrace lab
//! guest-shell` (the vtrace binary its agent runs) on vsock port
//! [`SHELL_PORT`], and the host connects to it as it does to the agent
//! (QEMU's vhost-vsock by context id, Firecracker's hybrid vsock by its
//! Unix socket). vsock reaches only the host, and only the lab's VMs run
//! it: a VM a user brings has no such channel.
//!
//! The protocol: the host sends the command, a JSON array of strings (the
//! program, then its arguments) on one line of at most [`MAX_REQUEST`]
//! bytes; the guest runs it (no shell; stdin empty) and answers with
//! frames of one kind byte and a little-endian u32 length, then that many
//! bytes: [`STDOUT`] and [`STDERR`] as the command writes them, then one
//! [`EXIT`] whose 4 bytes are its exit status (128 + the signal that
//! killed it), or [`FAILED`] with why it could not start.

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use crate::{
    Result,
    error::Error,
    layers::guest::transport::{GuestAddress, Listen, Listener, Stream},
};

/// The port beside the agent's (1025).
pub const SHELL_PORT: u32 = 1026;
/// The longest command line a request may carry.
pub const MAX_REQUEST: usize = 64 * 1024;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const EXIT: u8 = 3;
pub const FAILED: u8 = 4;
/// How long the host tries to reach a shell that is not listening yet.
const CONNECT_WAIT: Duration = Duration::from_secs(30);
/// The longest frame either side sends or takes.
const MAX_FRAME: u32 = 1 << 20;

fn shell_error(platform: &str, why: impl Into<String>) -> Error {
    Error::LabShell {
        platform: platform.into(),
        reason: why.into(),
    }
}

fn frame(to: &Mutex<Stream>, kind: u8, bytes: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; 5];
    head[0] = kind;
    head[1..].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
    let mut s = to.lock().unwrap_or_else(|e| e.into_inner());
    s.write_all(&head)?;
    s.write_all(bytes)
}

/// Inside the VM: serves each connection's command, one thread each, until
/// the listener fails.
pub fn serve(listen: &Listen) -> Result<()> {
    let listener = listen
        .bind()
        .map_err(|e| shell_error("this", format!("listen on {listen:?}: {e}")))?;
    serve_on(&listener)
}

fn serve_on(listener: &Listener) -> Result<()> {
    loop {
        let (stream, _) = listener
            .accept()
            .map_err(|e| shell_error("this", format!("accept: {e}")))?;
        std::thread::spawn(move || {
            let _ = answer(stream);
        });
    }
}

/// One connection: its command run, its output and exit status sent.
fn answer(stream: Stream) -> std::io::Result<()> {
    let mut request = Vec::new();
    BufReader::new(stream.try_clone()?)
        .take(MAX_REQUEST as u64 + 1)
        .read_until(b'\n', &mut request)?;
    let out = Arc::new(Mutex::new(stream));
    let argv: Vec<String> = match serde_json::from_slice(&request) {
        Ok(argv) if request.len() <= MAX_REQUEST => argv,
        Ok(_) => return frame(&out, FAILED, b"the command is longer than the request's limit"),
        Err(e) => {
            return frame(
                &out,
                FAILED,
                format!("not a command (a JSON array of strings): {e}").as_bytes(),
            );
        }
    };
    let Some((program, args)) = argv.split_first() else {
        return frame(&out, FAILED, b"an empty command");
    };
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return frame(&out, FAILED, format!("run {program}: {e}").as_bytes()),
    };
    let forward = |from: Option<Box<dyn Read + Send>>, kind: u8| {
        let out = out.clone();
        std::thread::spawn(move || {
            let Some(mut from) = from else { return };
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 || frame(&out, kind, &buf[..n]).is_err() {
                    break;
                }
            }
        })
    };
    let stdout = forward(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>), STDOUT);
    let stderr = forward(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>), STDERR);
    let status = child.wait()?;
    let _ = (stdout.join(), stderr.join());
    let code = status
        .code()
        .unwrap_or(128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0));
    frame(&out, EXIT, &code.to_le_bytes())
}

/// On the host: runs `argv` in `platform`'s VM at `addr`, its output
/// copied to ours as it comes; its exit status.
pub fn run(platform: &str, addr: &GuestAddress, argv: &[String]) -> Result<i32> {
    run_into(platform, addr, argv, &mut std::io::stdout(), &mut std::io::stderr())
}

fn run_into(
    platform: &str,
    addr: &GuestAddress,
    argv: &[String],
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<i32> {
    let shell_error = |why: String| shell_error(platform, why);
    // Its /init starts the shell as the VM comes up: `lab up` returns once
    // the VM's servers answer, maybe before the shell listens.
    let deadline = std::time::Instant::now() + CONNECT_WAIT;
    let mut stream = loop {
        match addr.connect(Duration::from_secs(10)) {
            Ok(s) => break s,
            Err(_) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => {
                return Err(shell_error(format!(
                    "reach {addr}: {e} (the lab's Linux VMs serve it from their /init, with their agent: \
                     not where VTRACE_LAB_AGENT=0)"
                )));
            }
        }
    };
    let mut request = serde_json::to_vec(argv).expect("strings serialize");
    request.push(b'\n');
    if request.len() > MAX_REQUEST {
        return Err(shell_error(format!(
            "the command is {} bytes: at most {MAX_REQUEST}",
            request.len()
        )));
    }
    let io = |e: std::io::Error| shell_error(format!("{addr}: {e}"));
    stream.write_all(&request).map_err(io)?;
    loop {
        let mut head = [0u8; 5];
        stream
            .read_exact(&mut head)
            .map_err(|e| shell_error(format!("{addr}: the command's end never came ({e}): the VM went away?")))?;
        let len = u32::from_le_bytes(head[1..].try_into().expect("four bytes"));
        if len > MAX_FRAME {
            return Err(shell_error(format!(
                "{addr}: a frame of {len} bytes (at most {MAX_FRAME})"
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        stream.read_exact(&mut bytes).map_err(io)?;
        match head[0] {
            STDOUT => stdout.write_all(&bytes).and_then(|_| stdout.flush()).map_err(io)?,
            STDERR => stderr.write_all(&bytes).map_err(io)?,
            EXIT if len == 4 => return Ok(i32::from_le_bytes(bytes.try_into().expect("four bytes"))),
            FAILED => {
                return Err(shell_error(format!("{addr}: {}", String::from_utf8_lossy(&bytes))));
            }
            kind => return Err(shell_error(format!("{addr}: a frame of unknown kind {kind}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell served on loopback TCP (the VMs' is vsock): its address.
    fn shell() -> GuestAddress {
        let listener = Listen::Tcp("127.0.0.1:0".into()).bind().unwrap();
        let addr = listener.local().strip_prefix("tcp:").unwrap().to_string();
        std::thread::spawn(move || serve_on(&listener));
        GuestAddress::Tcp(addr)
    }

    fn run_here(addr: &GuestAddress, argv: &[&str]) -> (Result<i32>, String, String) {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let rc = run_into("vm", addr, &argv, &mut out, &mut err);
        (rc, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
    }

    #[test]
    fn a_commands_output_and_exit_status_come_back_apart() {
        let addr = shell();
        let (rc, out, err) = run_here(&addr, &["sh", "-c", "echo out; echo err >&2; echo more; exit 3"]);
        assert_eq!((rc.unwrap(), out.as_str(), err.as_str()), (3, "out\nmore\n", "err\n"));
        // A command killed by a signal: 128 + its number, as a shell says.
        let (rc, ..) = run_here(&addr, &["sh", "-c", "kill -9 $$"]);
        assert_eq!(rc.unwrap(), 137);
    }

    #[test]
    fn a_command_that_cannot_run_or_a_bad_request_is_named() {
        let addr = shell();
        let (rc, ..) = run_here(&addr, &["/no/such/program"]);
        let why = rc.unwrap_err().to_string();
        assert!(why.contains("run /no/such/program"), "{why}");
        // Not a JSON array of strings: a FAILED frame, and the shell goes on.
        let mut raw = addr.connect(Duration::from_secs(5)).unwrap();
        raw.write_all(b"rm -rf /\n").unwrap();
        let mut head = [0u8; 5];
        raw.read_exact(&mut head).unwrap();
        assert_eq!(head[0], FAILED);
        let (rc, out, _) = run_here(&addr, &["echo", "still here"]);
        assert_eq!((rc.unwrap(), out.as_str()), (0, "still here\n"));
        // Longer than a request may be: refused before it is sent.
        let long = "x".repeat(MAX_REQUEST);
        let (rc, ..) = run_here(&addr, &["echo", &long]);
        assert!(rc.unwrap_err().to_string().contains("at most"));
    }
}
