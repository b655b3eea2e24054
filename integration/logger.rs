//! The logging binary as containerd's runc v2 shim runs it: the `kubelet-rs` executable started
//! with the key/value argv the shim derives from the task's `binary://` URI (pairs in shuffled
//! order), an environment of only CONTAINER_ID and CONTAINER_NAMESPACE, the container's stdout
//! and stderr pipes on fds 3 and 4, and a readiness pipe on fd 5 that the shim waits on before
//! starting the container. Needs no containerd, so it always runs.

use std::fs;
use std::io::{self, PipeWriter, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kubelet_rs::logs::{logger_uri, parse_logger_uri, read_log_file, CriLogLine, LogStream};

const EXE: &str = env!("CARGO_BIN_EXE_kubelet-rs");
const DEADLINE: Duration = Duration::from_secs(20);

/// A copy of `fd` numbered 10 or above and close-on-exec, so that in the child `dup2` onto 3, 4
/// and 5 can neither clobber another source nor be a no-op that leaves close-on-exec set.
fn high_cloexec_dup(fd: RawFd) -> OwnedFd {
    // SAFETY: F_DUPFD_CLOEXEC creates a new descriptor that we then own.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
    assert!(dup >= 10, "F_DUPFD_CLOEXEC: {}", io::Error::last_os_error());
    // SAFETY: `dup` was just created and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(dup) }
}

struct RunningLogger {
    child: Child,
    stdout: PipeWriter,
    stderr: PipeWriter,
}

/// Starts the logger like the shim does and waits for its readiness signal.
fn start_logger(log_path: &Path, max_size: u64, max_files: u32) -> RunningLogger {
    let uri = logger_uri(Path::new(EXE), log_path, max_size, max_files);
    let (exe, argv) = parse_logger_uri(&uri).expect("our own URI parses");
    assert_eq!(exe, Path::new(EXE));
    // Go's map order is random; reverse the pairs so the logger cannot rely on ours.
    let mut pairs: Vec<&[String]> = argv[1..].chunks(2).collect();
    pairs.reverse();
    let args: Vec<&String> = pairs.into_iter().flatten().collect();

    let (out_r, out_w) = io::pipe().unwrap();
    let (err_r, err_w) = io::pipe().unwrap();
    let (mut ready_r, ready_w) = io::pipe().unwrap();
    let child_fds = [
        high_cloexec_dup(out_r.as_raw_fd()),
        high_cloexec_dup(err_r.as_raw_fd()),
        high_cloexec_dup(ready_w.as_raw_fd()),
    ];
    let sources: Vec<RawFd> = child_fds.iter().map(|fd| fd.as_raw_fd()).collect();
    drop((out_r, err_r, ready_w));

    let mut command = Command::new(&exe);
    command
        .args(args)
        .env_clear()
        .env("CONTAINER_ID", "logger-test")
        .env("CONTAINER_NAMESPACE", "kubelet-rs-test")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe dup2 calls run between fork and exec.
    unsafe {
        command.pre_exec(move || {
            for (target, source) in (3..).zip(&sources) {
                if libc::dup2(*source, target) == -1 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = command.spawn().expect("spawning the kubelet-rs binary");
    drop(child_fds);

    // The shim reads one byte or end-of-file; only the child holds the write end now.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        let _ = tx.send(ready_r.read(&mut byte));
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("reading the readiness pipe: {e}"),
        Err(_) => {
            let _ = child.kill();
            panic!("logger did not signal readiness on fd 5 within {DEADLINE:?}");
        }
    }
    RunningLogger {
        child,
        stdout: out_w,
        stderr: err_w,
    }
}

/// Waits for exit, killing the child at the deadline; returns its status and stderr.
fn wait_with_deadline(mut child: Child) -> (ExitStatus, String) {
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("logger still running {DEADLINE:?} after its input pipes closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut diagnostics = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut diagnostics);
    }
    (status, diagnostics)
}

fn write_or_explain(pipe: &mut PipeWriter, data: &[u8]) {
    pipe.write_all(data).unwrap_or_else(|e| {
        panic!(
            "writing to the logger failed ({e}); did it exit early? main must start with \
             `if kubelet_rs::logs::is_logger_invocation(&args) {{ exit(run_logger(&args)) }}`"
        )
    });
}

fn line(stream: LogStream, content: &str, complete: bool) -> (LogStream, String, bool) {
    (stream, content.to_owned(), complete)
}

fn simplify(lines: &[CriLogLine]) -> Vec<(LogStream, String, bool)> {
    lines
        .iter()
        .map(|l| {
            (
                l.stream,
                String::from_utf8(l.content.clone()).unwrap(),
                l.complete,
            )
        })
        .collect()
}

#[test]
fn logger_ignores_sigterm_and_writes_cri_records_until_eof() {
    let tmp = tempfile::tempdir().unwrap();
    let log_path = tmp.path().join("default_web_uid-1/app/0.log");
    let mut logger = start_logger(&log_path, 0, 5);
    assert!(
        log_path.is_file(),
        "log file must exist once the logger is ready"
    );

    let long = "x".repeat(20_000);
    write_or_explain(&mut logger.stdout, b"hello from stdout\n");
    write_or_explain(&mut logger.stderr, b"something on stderr\r\n");
    // The shim sends SIGTERM on task delete (after closing the pipes). Sending it while the
    // pipes are still open shows the logger ignores it and keeps going until end-of-file.
    // SAFETY: plain kill(2) of our own child.
    unsafe {
        libc::kill(logger.child.id() as libc::pid_t, libc::SIGTERM);
    }
    std::thread::sleep(Duration::from_millis(100));
    write_or_explain(&mut logger.stdout, format!("{long}\n").as_bytes());
    write_or_explain(&mut logger.stdout, b"no newline at the end");
    drop(logger.stdout);
    drop(logger.stderr);
    let (status, diagnostics) = wait_with_deadline(logger.child);
    assert_eq!(
        status.code(),
        Some(0),
        "logger exit {status:?} (signal {:?}); stderr: {diagnostics}",
        status.signal()
    );

    let raw = fs::read_to_string(&log_path).unwrap();
    for record in raw.lines() {
        let (time, rest) = record.split_once(' ').unwrap();
        assert!(time.ends_with('Z'), "{record:.80}");
        assert!(
            rest.starts_with("stdout ") || rest.starts_with("stderr "),
            "{record:.80}"
        );
    }
    // 20000 bytes: one 16 KiB partial chunk, then the rest as the full record.
    let stdout_records: Vec<&str> = raw
        .lines()
        .filter_map(|r| r.split_once(" stdout ").map(|(_, rest)| &rest[..1]))
        .collect();
    assert_eq!(stdout_records, ["F", "P", "F", "P"], "{raw:.300}");

    let parsed = read_log_file(&log_path).unwrap();
    assert_eq!(parsed.malformed, 0);
    let mut stdout = simplify(&parsed.lines);
    let stderr: Vec<_> = stdout
        .iter()
        .filter(|l| l.0 == LogStream::Stderr)
        .cloned()
        .collect();
    stdout.retain(|l| l.0 == LogStream::Stdout);
    assert_eq!(
        stdout,
        [
            line(LogStream::Stdout, "hello from stdout", true),
            line(LogStream::Stdout, &long, true),
            line(LogStream::Stdout, "no newline at the end", false),
        ]
    );
    assert_eq!(
        stderr,
        [line(LogStream::Stderr, "something on stderr", true)]
    );
}

fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
fn logger_rotates_by_bytes_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ns_pod_uid/c");
    let log_path = dir.join("1.log");
    let mut logger = start_logger(&log_path, 2_000, 4);
    let lines: Vec<String> = (0..300)
        .map(|i| format!("line {i:05} {}", "y".repeat(40)))
        .collect();
    for l in &lines {
        write_or_explain(&mut logger.stdout, format!("{l}\n").as_bytes());
    }
    drop(logger.stdout);
    drop(logger.stderr);
    let (status, diagnostics) = wait_with_deadline(logger.child);
    assert_eq!(status.code(), Some(0), "stderr: {diagnostics}");

    let files = log_files(&dir);
    assert_eq!(files.len(), 4, "{files:?}");
    assert_eq!(files[0], log_path);
    let mut kept = Vec::new();
    // Rotated files are named 1.log.<stamp>[.<n>]; oldest first, the current file last.
    let mut rotated = files[1..].to_vec();
    rotated.sort_by_key(|p| {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let rest = name.strip_prefix("1.log.").unwrap().to_owned();
        let (stamp, n) = rest.split_once('.').unwrap_or((&rest, "0"));
        (stamp.to_owned(), n.parse::<u64>().unwrap())
    });
    for path in rotated.iter().chain(std::iter::once(&log_path)) {
        let size = fs::metadata(path).unwrap().len();
        assert!(size < 2_000 + 100, "{} holds {size} bytes", path.display());
        kept.extend(
            read_log_file(path)
                .unwrap()
                .lines
                .into_iter()
                .map(|l| String::from_utf8(l.content).unwrap()),
        );
    }
    // The newest lines survive, contiguous and in order, up to the last one written.
    assert!(kept.len() > 60, "only {} lines kept", kept.len());
    let start = lines.len() - kept.len();
    assert_eq!(kept, lines[start..]);
}

#[test]
fn logger_without_its_descriptors_fails_instead_of_reading_stray_files() {
    let tmp = tempfile::tempdir().unwrap();
    let log_path = tmp.path().join("0.log");
    let uri = logger_uri(Path::new(EXE), &log_path, 0, 5);
    let (exe, argv) = parse_logger_uri(&uri).unwrap();
    let child = Command::new(exe)
        .args(&argv[1..])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, diagnostics) = wait_with_deadline(child);
    assert_eq!(status.code(), Some(2), "stderr: {diagnostics}");
    assert!(diagnostics.contains("fd 3"), "{diagnostics}");
    assert!(!log_path.exists());
}
