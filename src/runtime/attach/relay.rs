//! The io relay: a small detached process, one per container with `stdin` or `tty`, that owns
//! the container's FIFO stdio for the container's whole life.
//!
//! containerd 1.6's shim drops stdin for `binary://` IO, and a FIFO's stdin must be held
//! open by a writer from before the task starts until the container is done (the shim
//! closes the container's stdin when the last writer goes). The agent cannot be that writer:
//! it restarts. So the agent starts this relay (its own executable in relay mode, in its own
//! session) before creating the task. The relay
//! - holds the stdin FIFO open (`O_RDWR`, which never blocks) from before the shim opens
//!   it, and copies sessions' input in. The shim keeps a write end of its own until CloseIO,
//!   so ending the container's stdin (stdinOnce) takes both: this relay letting go and the
//!   session's CloseIO through containerd ([`super::client`]);
//! - reads the stdout and stderr FIFOs and writes the CRI log with the logger's own writer
//!   and rotation ([`crate::logs::copy_stream`]), so there is one log format and one rotation;
//! - fans the output out to every attach session connected to its unix socket. Each session
//!   has a bounded queue: a session that falls behind is disconnected, never waited for, so
//!   neither the log nor the other sessions nor the container ever block on it;
//! - exits once the container's output ends (the shim closes the FIFOs' write ends).
//!
//! Threads and blocking calls only, as the logger: it runs once per interactive container.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use super::protocol::{self, Container, Frame, Wants};
use crate::logs::DEFAULT_MAX_LINE_BYTES;
use crate::logs::{copy_stream, LogStream, RecordWriter, RotatingLogFile, RotationPolicy};

/// First argument of a relay invocation; the second is the argument format version.
pub const RELAY_MARKER: &str = "kubelet-rs-attach-relay";
const ARGS_VERSION: &str = "1";

pub const STDIN_FIFO: &str = "stdin";
pub const STDOUT_FIFO: &str = "stdout";
pub const STDERR_FIFO: &str = "stderr";
pub const SOCKET: &str = "attach.sock";

/// Output chunks queued per session before it counts as too slow and is disconnected: with
/// 32 KiB reads, up to 2 MiB, far more than a reader that keeps up ever holds.
pub const SESSION_QUEUE_FRAMES: usize = 64;

/// How often a relay whose output is silent checks whether it was abandoned (its FIFOs
/// removed because the task was never started or the container was removed).
const ABANDON_CHECK_MS: i32 = 1000;

/// What one relay serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// The container's private directory: the FIFOs and the socket.
    pub dir: PathBuf,
    pub log_path: PathBuf,
    pub rotation: RotationPolicy,
    pub container: Container,
}

impl RelayConfig {
    pub fn fifo(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join(SOCKET)
    }

    /// The argv (after the program name) that starts this relay.
    pub fn to_args(&self) -> Vec<String> {
        let flag = |b: bool| if b { "1" } else { "0" }.to_string();
        vec![
            RELAY_MARKER.into(),
            ARGS_VERSION.into(),
            self.dir.display().to_string(),
            self.log_path.display().to_string(),
            self.rotation.max_size.to_string(),
            self.rotation.max_files.to_string(),
            flag(self.container.stdin),
            flag(self.container.tty),
            flag(self.container.stdin_once),
        ]
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayArgsError {
    #[error("relay arguments: expected {RELAY_MARKER} {ARGS_VERSION} <dir> <log-path> <max-size> <max-files> <stdin> <tty> <stdin-once>, got {0:?}")]
    Malformed(Vec<String>),
}

/// Whether this process was started as an io relay (argv as `std::env::args` gives it).
pub fn is_relay_invocation(args: &[String]) -> bool {
    args.get(1).map(String::as_str) == Some(RELAY_MARKER)
}

pub fn parse_relay_args(args: &[String]) -> Result<RelayConfig, RelayArgsError> {
    let bad = || RelayArgsError::Malformed(args.to_vec());
    let [_, marker, version, dir, log, size, files, stdin, tty, once] = args else {
        return Err(bad());
    };
    let flag = |v: &str| match v {
        "1" => Ok(true),
        "0" => Ok(false),
        _ => Err(bad()),
    };
    if marker != RELAY_MARKER
        || version != ARGS_VERSION
        || !dir.starts_with('/')
        || !log.starts_with('/')
    {
        return Err(bad());
    }
    Ok(RelayConfig {
        dir: dir.into(),
        log_path: log.into(),
        rotation: RotationPolicy {
            max_size: size.parse().map_err(|_| bad())?,
            max_files: files.parse().map_err(|_| bad())?,
        },
        container: Container {
            stdin: flag(stdin)?,
            tty: flag(tty)?,
            stdin_once: flag(once)?,
        },
    })
}

/// Why a relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("creating {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("opening {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Log(#[from] crate::logs::LogFileError),
}

struct SessionOut {
    id: u64,
    wants: Wants,
    queue: SyncSender<Frame>,
    /// A handle on the session's socket, to cut off a session that fell behind even while
    /// its writer thread is blocked on the socket.
    socket: UnixStream,
}

/// What the output copiers and the sessions share.
struct Hub {
    container: Container,
    sessions: Mutex<Vec<SessionOut>>,
    /// The stdin FIFO's write end; `None` once closed (stdinOnce) or when there is none.
    stdin: Mutex<Option<File>>,
    ended: AtomicBool,
    next_id: AtomicU64,
    queue_frames: usize,
}

impl Hub {
    fn broadcast(&self, kind: u8, data: &[u8]) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|s| {
            let wanted = match kind {
                protocol::STDOUT => s.wants.stdout,
                _ => s.wants.stderr,
            };
            if !wanted {
                return true;
            }
            match s.queue.try_send(Frame::new(kind, data)) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) => {
                    // Too slow: cut it off rather than hold up the log and the others.
                    let _ = s.socket.shutdown(std::net::Shutdown::Both);
                    false
                }
                Err(TrySendError::Disconnected(_)) => false,
            }
        });
    }

    /// The output ended: every session's queue is closed, so its writer sends END.
    fn end(&self) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        self.ended.store(true, Ordering::SeqCst);
        sessions.clear();
    }

    fn remove(&self, id: u64) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|s| s.id != id);
    }

    fn write_stdin(&self, data: &[u8]) {
        let mut stdin = self.stdin.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = stdin.as_mut() {
            if f.write_all(data).is_err() {
                // Nobody reads it any more (the shim closed its end): input has nowhere to go.
                *stdin = None;
            }
        }
    }

    fn close_stdin(&self) {
        if self.container.stdin_once && !self.container.tty {
            self.stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
    }
}

/// An output FIFO, read so that a silent container and an abandoned relay can be told apart:
/// opened non-blocking (so the relay is ready before the shim opens the write end), then
/// polled. Linux reports POLLHUP on a FIFO only after a writer has come and gone, so a poll
/// that fires followed by a read of 0 is the real end of the output.
struct FifoOutput<'h> {
    file: File,
    path: PathBuf,
    hub: &'h Hub,
    kind: u8,
}

impl Read for FifoOutput<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut pfd = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let ready = unsafe { libc::poll(&mut pfd, 1, ABANDON_CHECK_MS) };
            if ready < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if ready == 0 {
                if !self.path.exists() {
                    return Ok(0);
                }
                continue;
            }
            match self.file.read(buf) {
                Ok(n) => {
                    if n > 0 {
                        self.hub.broadcast(self.kind, &buf[..n]);
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

fn make_fifo(path: &Path) -> Result<(), RelayError> {
    match nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => Ok(()),
        Err(e) => Err(RelayError::Create {
            path: path.to_owned(),
            source: e.into(),
        }),
    }
}

fn open(path: &Path, opts: &OpenOptions) -> Result<File, RelayError> {
    opts.open(path).map_err(|source| RelayError::Open {
        path: path.to_owned(),
        source,
    })
}

/// Serves one container until its output ends. `ready` is called once: with `Ok` when the
/// FIFOs exist and are held, the log file is open and the socket listens (the task may be
/// created from then on), or with the error that stopped the relay before that.
pub fn serve(
    config: &RelayConfig,
    ready: impl FnOnce(Result<(), &RelayError>),
) -> Result<(), RelayError> {
    serve_with_queue(config, SESSION_QUEUE_FRAMES, ready)
}

fn serve_with_queue(
    config: &RelayConfig,
    queue_frames: usize,
    ready: impl FnOnce(Result<(), &RelayError>),
) -> Result<(), RelayError> {
    let started = setup(config, queue_frames);
    let (hub, outputs, listener, writer) = match started {
        Ok(s) => {
            ready(Ok(()));
            s
        }
        Err(e) => {
            ready(Err(&e));
            return Err(e);
        }
    };
    let hub = Arc::new(hub);
    {
        let hub = hub.clone();
        std::thread::spawn(move || accept_loop(listener, hub));
    }
    std::thread::scope(|scope| {
        for (kind, stream, file, path) in outputs {
            let (hub, writer) = (&*hub, &writer);
            scope.spawn(move || {
                let reader = FifoOutput {
                    file,
                    path,
                    hub,
                    kind,
                };
                let _ = copy_stream(reader, stream, DEFAULT_MAX_LINE_BYTES, writer);
            });
        }
    });
    hub.end();
    // Stdin is done too: the container's output only ends when it exits.
    hub.stdin.lock().unwrap_or_else(|e| e.into_inner()).take();
    let _ = fs::remove_dir_all(&config.dir);
    Ok(())
}

type Outputs = Vec<(u8, LogStream, File, PathBuf)>;

fn setup(
    config: &RelayConfig,
    queue_frames: usize,
) -> Result<(Hub, Outputs, UnixListener, RecordWriter<RotatingLogFile>), RelayError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&config.dir)
        .map_err(|source| RelayError::Create {
            path: config.dir.clone(),
            source,
        })?;
    let c = config.container;
    let mut outputs = Vec::new();
    let mut read_nb = OpenOptions::new();
    read_nb.read(true).custom_flags(libc::O_NONBLOCK);
    let mut names = vec![(protocol::STDOUT, LogStream::Stdout, STDOUT_FIFO)];
    if !c.tty {
        names.push((protocol::STDERR, LogStream::Stderr, STDERR_FIFO));
    }
    for (kind, stream, name) in names {
        let path = config.fifo(name);
        make_fifo(&path)?;
        outputs.push((kind, stream, open(&path, &read_nb)?, path));
    }
    let stdin = if c.stdin {
        let path = config.fifo(STDIN_FIFO);
        make_fifo(&path)?;
        // Read and write: opening never blocks, and the write end is held from now on.
        Some(open(&path, OpenOptions::new().read(true).write(true))?)
    } else {
        None
    };
    let log = RotatingLogFile::open(&config.log_path, config.rotation)?;
    let socket = config.socket();
    let _ = fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).map_err(|source| RelayError::Create {
        path: socket.clone(),
        source,
    })?;
    let hub = Hub {
        container: c,
        sessions: Mutex::new(Vec::new()),
        stdin: Mutex::new(stdin),
        ended: AtomicBool::new(false),
        next_id: AtomicU64::new(0),
        queue_frames,
    };
    Ok((hub, outputs, listener, RecordWriter::new(log)))
}

fn accept_loop(listener: UnixListener, hub: Arc<Hub>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let hub = hub.clone();
        std::thread::spawn(move || session(conn, hub));
    }
}

/// One attach session: HELLO in, WELCOME out, then output out and input in.
fn session(conn: UnixStream, hub: Arc<Hub>) {
    let mut reader = conn;
    let wants = match protocol::read_frame(&mut reader) {
        Ok(Some(f)) if f.kind == protocol::HELLO && f.payload.len() == 1 => {
            Wants::from_byte(f.payload[0])
        }
        _ => return,
    };
    let (Ok(writer), Ok(cut)) = (reader.try_clone(), reader.try_clone()) else {
        return;
    };
    let (queue, rx) = sync_channel(hub.queue_frames);
    let welcome = Frame::new(protocol::WELCOME, vec![hub.container.to_byte()]);
    if queue.try_send(welcome).is_err() {
        return;
    }
    let id = hub.next_id.fetch_add(1, Ordering::Relaxed);
    {
        let mut sessions = hub.sessions.lock().unwrap_or_else(|e| e.into_inner());
        // A session that arrives after the end gets WELCOME and END at once.
        if !hub.ended.load(Ordering::SeqCst) {
            sessions.push(SessionOut {
                id,
                wants,
                queue,
                socket: cut,
            });
        }
    }
    {
        let hub = hub.clone();
        std::thread::spawn(move || session_writer(writer, rx, &hub));
    }
    let mut stdin_open = wants.stdin && hub.container.stdin;
    loop {
        match protocol::read_frame(&mut reader) {
            Ok(Some(f)) if f.kind == protocol::STDIN => {
                if stdin_open {
                    hub.write_stdin(&f.payload);
                }
            }
            Ok(Some(f)) if f.kind == protocol::CLOSE_STDIN => {
                if stdin_open {
                    stdin_open = false;
                    hub.close_stdin();
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    hub.remove(id);
}

fn session_writer(mut conn: UnixStream, rx: Receiver<Frame>, hub: &Hub) {
    for frame in rx.iter() {
        if protocol::write_frame(&mut conn, frame.kind, &frame.payload).is_err() {
            return;
        }
    }
    // The queue closes when the output ended, the session left, or it was cut off; only
    // the first earns an END.
    if hub.ended.load(Ordering::SeqCst) {
        let _ = protocol::write_frame(&mut conn, protocol::END, b"");
    }
    let _ = conn.shutdown(std::net::Shutdown::Write);
}

/// The relay's `main`: call it first thing in `main`, while the process has one thread (it
/// forks). The process that the agent started exits 0 once the relay is ready, or 1 with the
/// reason on stderr; the relay itself goes on in a new session, detached from the agent, so
/// it outlives agent restarts.
pub fn run_relay(args: &[String]) -> i32 {
    let config = match parse_relay_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kubelet-rs relay: {e}");
            return 2;
        }
    };
    let (mut ready_r, ready_w) = match io::pipe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("kubelet-rs relay: readiness pipe: {e}");
            return 1;
        }
    };
    // SAFETY: the process is single-threaded here (the caller's contract), so the child
    // may run ordinary Rust code.
    match unsafe { libc::fork() } {
        -1 => {
            eprintln!("kubelet-rs relay: fork: {}", io::Error::last_os_error());
            1
        }
        0 => {
            drop(ready_r);
            detach();
            let mut ready_w = Some(ready_w);
            let result = serve(&config, |r| {
                if let Some(mut w) = ready_w.take() {
                    let msg = match r {
                        Ok(()) => "ok".to_string(),
                        Err(e) => e.to_string(),
                    };
                    let _ = w.write_all(msg.as_bytes());
                }
            });
            i32::from(result.is_err())
        }
        _ => {
            drop(ready_w);
            let mut msg = String::new();
            let _ = ready_r.read_to_string(&mut msg);
            match msg.as_str() {
                "ok" => 0,
                "" => {
                    eprintln!("kubelet-rs relay: exited before it was ready");
                    1
                }
                e => {
                    eprintln!("kubelet-rs relay: {e}");
                    1
                }
            }
        }
    }
}

/// A new session (no controlling terminal, out of the agent's process group, so a signal
/// to the agent's group spares it) and stdio on /dev/null (the agent waits for the stderr
/// it handed over to close).
fn detach() {
    // SAFETY: setsid and dup2 only change this process's session and descriptor table.
    unsafe {
        libc::setsid();
    }
    if let Ok(null) = OpenOptions::new().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: as above.
            unsafe {
                libc::dup2(null.as_raw_fd(), fd);
            }
        }
    }
}

#[cfg(test)]
mod tests;
