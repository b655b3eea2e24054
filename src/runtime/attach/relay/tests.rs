use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use super::*;
use crate::logs::read_log_file;

/// Generous: the machine is loaded, and nothing here waits on a clock to pass.
const DEADLINE: Duration = Duration::from_secs(60);

struct Running {
    config: RelayConfig,
    done: mpsc::Receiver<Result<(), String>>,
    _tmp: tempfile::TempDir,
}

fn start(container: Container, queue_frames: usize) -> Running {
    let tmp = tempfile::tempdir().unwrap();
    let config = RelayConfig {
        dir: tmp.path().join("relay"),
        log_path: tmp.path().join("log/0.log"),
        rotation: RotationPolicy::DISABLED,
        container,
    };
    std::fs::create_dir_all(tmp.path().join("log")).unwrap();
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done) = mpsc::channel();
    let c = config.clone();
    std::thread::spawn(move || {
        let r = serve_with_queue(&c, queue_frames, |r| {
            ready_tx.send(r.map_err(|e| e.to_string())).unwrap();
        });
        let _ = done_tx.send(r.map_err(|e| e.to_string()));
    });
    ready_rx.recv_timeout(DEADLINE).unwrap().unwrap();
    Running {
        config,
        done,
        _tmp: tmp,
    }
}

/// The shim's side of the output FIFOs.
fn shim_output(r: &Running, name: &str) -> File {
    OpenOptions::new()
        .write(true)
        .open(r.config.fifo(name))
        .unwrap()
}

/// The container's stdin as the shim reads it, on a thread that reports each read (and
/// `None` at EOF).
fn container_stdin(r: &Running) -> mpsc::Receiver<Option<Vec<u8>>> {
    let mut f = File::open(r.config.fifo(STDIN_FIFO)).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match f.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(n) => {
                    if tx.send(Some(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

fn attach(r: &Running, wants: Wants) -> (UnixStream, Container) {
    let mut s = UnixStream::connect(r.config.socket()).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    protocol::write_frame(&mut s, protocol::HELLO, &[wants.to_byte()]).unwrap();
    let welcome = protocol::read_frame(&mut s).unwrap().unwrap();
    assert_eq!(welcome.kind, protocol::WELCOME);
    (s, Container::from_byte(welcome.payload[0]))
}

const ALL: Wants = Wants {
    stdin: true,
    stdout: true,
    stderr: true,
};

/// Reads frames until END or the end of the connection: (stdout, stderr, saw END).
fn drain(s: &mut UnixStream) -> (Vec<u8>, Vec<u8>, bool) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        match protocol::read_frame(s) {
            Ok(Some(f)) if f.kind == protocol::STDOUT => out.extend(f.payload),
            Ok(Some(f)) if f.kind == protocol::STDERR => err.extend(f.payload),
            Ok(Some(f)) if f.kind == protocol::END => return (out, err, true),
            Ok(Some(f)) => panic!("unexpected frame {f:?}"),
            Ok(None) | Err(_) => return (out, err, false),
        }
    }
}

/// Reads from `s` until `want` bytes of one stream arrived.
fn read_stream(s: &mut UnixStream, kind: u8, want: usize) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < want {
        let f = protocol::read_frame(s)
            .unwrap()
            .expect("connection ended early");
        if f.kind == kind {
            got.extend(f.payload);
        }
    }
    got
}

fn recv(rx: &mpsc::Receiver<Option<Vec<u8>>>) -> Option<Vec<u8>> {
    rx.recv_timeout(DEADLINE)
        .expect("container stdin reader stuck")
}

#[test]
fn output_goes_to_the_log_and_every_session_and_input_to_the_container() {
    let r = start(
        Container {
            stdin: true,
            tty: false,
            stdin_once: false,
        },
        SESSION_QUEUE_FRAMES,
    );
    let mut out = shim_output(&r, STDOUT_FIFO);
    let mut err = shim_output(&r, STDERR_FIFO);
    let stdin = container_stdin(&r);
    let (mut a, seen) = attach(&r, ALL);
    assert_eq!(
        seen,
        Container {
            stdin: true,
            tty: false,
            stdin_once: false
        }
    );
    let (mut b, _) = attach(
        &r,
        Wants {
            stdin: false,
            stdout: true,
            stderr: false,
        },
    );

    protocol::write_frame(&mut a, protocol::STDIN, b"one\n").unwrap();
    assert_eq!(recv(&stdin), Some(b"one\n".to_vec()));
    out.write_all(b"got:one\n").unwrap();
    assert_eq!(read_stream(&mut a, protocol::STDOUT, 8), b"got:one\n");
    assert_eq!(read_stream(&mut b, protocol::STDOUT, 8), b"got:one\n");
    err.write_all(b"oops\n").unwrap();
    assert_eq!(read_stream(&mut a, protocol::STDERR, 5), b"oops\n");

    // A session that leaves changes nothing for the container or the others.
    protocol::write_frame(&mut a, protocol::CLOSE_STDIN, b"").unwrap();
    drop(a);
    out.write_all(b"two\n").unwrap();
    assert_eq!(read_stream(&mut b, protocol::STDOUT, 4), b"two\n");

    drop((out, err));
    let (rest_out, rest_err, ended) = drain(&mut b);
    assert!(ended, "the session hears the end of the output");
    assert!(rest_out.is_empty() && rest_err.is_empty());
    r.done.recv_timeout(DEADLINE).unwrap().unwrap();
    assert_eq!(recv(&stdin), None, "the relay let go of stdin at the end");
    assert!(!r.config.dir.exists(), "the relay removed its directory");

    // Per stream, not across them: stdout and stderr are two FIFOs copied by two threads,
    // and a copier hands a chunk to the sessions before it writes the chunk's log line, so
    // "oops" (written once a session had "got:one") can reach the log first on a loaded
    // machine, as with containerd's own two copiers.
    let log = read_log_file(&r.config.log_path).unwrap();
    let stream = |want: LogStream| -> Vec<&[u8]> {
        log.lines
            .iter()
            .filter(|l| l.stream == want)
            .map(|l| l.content.as_slice())
            .collect()
    };
    assert_eq!(stream(LogStream::Stdout), [&b"got:one"[..], b"two"]);
    assert_eq!(stream(LogStream::Stderr), [&b"oops"[..]]);
    assert_eq!(log.lines.len(), 3);
}

#[test]
fn a_slow_session_is_cut_off_without_holding_up_the_log_or_the_others() {
    let r = start(Container::default(), 4);
    let mut out = shim_output(&r, STDOUT_FIFO);
    let err = shim_output(&r, STDERR_FIFO);
    let (mut slow, _) = attach(&r, ALL);
    let (mut fast, _) = attach(&r, ALL);

    // Far more than the slow session's queue and socket buffers hold. The fast session reads
    // each batch before the next is written, and a batch is no more lines than the session
    // queue holds frames (4), so the fast session never falls behind even when its writer
    // thread is not scheduled at all during a batch (a starved test process on a loaded
    // machine cut it off with batches of 16), while the slow one never reads at all.
    let line = [b"x".repeat(1023), b"\n".to_vec()].concat();
    let (lines, batch) = (8 * 1024, 4);
    let mut fast_out = Vec::new();
    for _ in 0..lines / batch {
        for _ in 0..batch {
            out.write_all(&line).unwrap();
        }
        fast_out.extend(read_stream(&mut fast, protocol::STDOUT, batch * line.len()));
    }
    drop((out, err));
    r.done.recv_timeout(DEADLINE).unwrap().unwrap();

    let (rest, _, fast_ended) = drain(&mut fast);
    fast_out.extend(rest);
    assert!(fast_ended);
    assert_eq!(fast_out.len(), line.len() * lines);
    let (slow_out, _, slow_ended) = drain(&mut slow);
    assert!(
        !slow_ended,
        "the slow session was cut off, not served to the end"
    );
    assert!(slow_out.len() < fast_out.len());

    let log = read_log_file(&r.config.log_path).unwrap();
    assert_eq!(log.lines.len(), lines);
    assert!(log.lines.iter().all(|l| l.content.len() == 1023));
}

#[test]
fn stdin_once_closes_the_container_stdin_when_the_first_session_ends_its_input() {
    let r = start(
        Container {
            stdin: true,
            tty: false,
            stdin_once: true,
        },
        SESSION_QUEUE_FRAMES,
    );
    let (out, err) = (shim_output(&r, STDOUT_FIFO), shim_output(&r, STDERR_FIFO));
    let stdin = container_stdin(&r);
    let (mut a, _) = attach(&r, ALL);
    protocol::write_frame(&mut a, protocol::STDIN, b"a\n").unwrap();
    protocol::write_frame(&mut a, protocol::CLOSE_STDIN, b"").unwrap();
    assert_eq!(recv(&stdin), Some(b"a\n".to_vec()));
    assert_eq!(recv(&stdin), None, "the container sees EOF");
    drop((out, err));
    r.done.recv_timeout(DEADLINE).unwrap().unwrap();
}

#[test]
fn without_stdin_once_or_with_a_tty_closing_input_only_detaches_that_session() {
    // stdinOnce with a tty: the terminal stays open for the next session.
    {
        let tty = true;
        let r = start(
            Container {
                stdin: true,
                tty,
                stdin_once: true,
            },
            SESSION_QUEUE_FRAMES,
        );
        let out = shim_output(&r, STDOUT_FIFO);
        assert_eq!(r.config.fifo(STDERR_FIFO).exists(), !tty);
        let err = (!tty).then(|| shim_output(&r, STDERR_FIFO));
        let stdin = container_stdin(&r);
        let (mut a, _) = attach(&r, ALL);
        protocol::write_frame(&mut a, protocol::STDIN, b"a\n").unwrap();
        protocol::write_frame(&mut a, protocol::CLOSE_STDIN, b"").unwrap();
        // Input after the session closed its stdin is not the container's any more.
        protocol::write_frame(&mut a, protocol::STDIN, b"ignored\n").unwrap();
        assert_eq!(recv(&stdin), Some(b"a\n".to_vec()));
        let (mut b, _) = attach(&r, ALL);
        protocol::write_frame(&mut b, protocol::STDIN, b"b\n").unwrap();
        assert_eq!(recv(&stdin), Some(b"b\n".to_vec()));
        drop((out, err));
        r.done.recv_timeout(DEADLINE).unwrap().unwrap();
    }
    // The same without stdinOnce: stdin stays open for the next session.
    let r = start(
        Container {
            stdin: true,
            tty: false,
            stdin_once: false,
        },
        SESSION_QUEUE_FRAMES,
    );
    let (out, err) = (shim_output(&r, STDOUT_FIFO), shim_output(&r, STDERR_FIFO));
    let stdin = container_stdin(&r);
    let (mut a, _) = attach(&r, ALL);
    protocol::write_frame(&mut a, protocol::CLOSE_STDIN, b"").unwrap();
    let (mut b, _) = attach(&r, ALL);
    protocol::write_frame(&mut b, protocol::STDIN, b"b\n").unwrap();
    assert_eq!(recv(&stdin), Some(b"b\n".to_vec()));
    drop((out, err));
    r.done.recv_timeout(DEADLINE).unwrap().unwrap();
}

#[test]
fn a_relay_whose_task_never_started_exits_when_its_directory_is_removed() {
    let r = start(
        Container {
            stdin: true,
            tty: true,
            stdin_once: false,
        },
        SESSION_QUEUE_FRAMES,
    );
    std::fs::remove_dir_all(&r.config.dir).unwrap();
    r.done.recv_timeout(DEADLINE).unwrap().unwrap();
}

#[test]
fn args_round_trip_and_other_command_lines_are_not_the_relay() {
    let config = RelayConfig {
        dir: "/run/kubelet-rs/attach/abc".into(),
        log_path: "/var/log/pods/ns_p_u/c/0.log".into(),
        rotation: RotationPolicy {
            max_size: 10 << 20,
            max_files: 5,
        },
        container: Container {
            stdin: true,
            tty: false,
            stdin_once: true,
        },
    };
    let mut args = vec!["/usr/bin/kubelet-rs".to_string()];
    args.extend(config.to_args());
    assert!(is_relay_invocation(&args));
    assert_eq!(parse_relay_args(&args).unwrap(), config);
    args.pop();
    assert!(parse_relay_args(&args).is_err());
    assert!(!is_relay_invocation(&[
        "kubelet-rs".into(),
        "--config".into()
    ]));
    assert_eq!(run_relay(&["x".into(), RELAY_MARKER.into(), "9".into()]), 2);
}
