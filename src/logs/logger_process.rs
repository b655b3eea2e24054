//! The logging binary: how the agent asks containerd to start it, and what it does once started.
//!
//! containerd 1.6's runc v2 shim (`pkg/process/io.go` `NewBinaryIO`, `io_util.go`
//! `NewBinaryCmd`; `runtime/v2/runc/platform.go` for TTYs) handles a task whose stdout is
//! `binary:///path?query` like this:
//! - it runs the URI's path with, as arguments, each query key followed by that key's first
//!   value, in Go map order, which is random, so arguments come as unordered key/value pairs;
//! - the environment holds only `CONTAINER_ID` and `CONTAINER_NAMESPACE`; stdin, stdout and
//!   stderr are `/dev/null`;
//! - fd 3 is the read end of the container's stdout pipe, fd 4 of its stderr pipe, fd 5 the
//!   write end of a readiness pipe: the shim blocks, with no timeout, until it can read one
//!   byte or end-of-file from it, and only then starts the container;
//! - on task delete the shim closes its ends of the output pipes, sends SIGTERM, and SIGKILLs
//!   the logger if it has not exited 12 seconds later. With a TTY the shim neither signals nor
//!   waits; stderr is unused and its write end is closed only when Go garbage-collects it.
//!
//! So the logger ignores SIGTERM and exits when both streams reach end-of-file, which happens
//! right after the pipes close: output still buffered in the pipes is written, not lost.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::cri_writer::{copy_stream, RecordWriter, DEFAULT_MAX_LINE_BYTES};
use super::rotation::{RotatingLogFile, RotationPolicy};
use super::LogStream;

/// Query key that marks an invocation as the logger; its value is the argument format version.
pub const LOGGER_MARKER_KEY: &str = "kubelet-rs-cri-logger";
const ARGS_VERSION: &str = "1";
const KEY_LOG_PATH: &str = "log-path";
const KEY_MAX_SIZE: &str = "max-size";
const KEY_MAX_FILES: &str = "max-files";

const STDOUT_FD: RawFd = 3;
const STDERR_FD: RawFd = 4;
const READY_FD: RawFd = 5;

/// What the logger was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggerConfig {
    pub log_path: PathBuf,
    pub rotation: RotationPolicy,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoggerArgsError {
    #[error("logger arguments must be key/value pairs after the program name, got {0} values")]
    OddArguments(usize),
    #[error("logger argument {LOGGER_MARKER_KEY} is missing")]
    NotLoggerInvocation,
    #[error("logger argument {LOGGER_MARKER_KEY} is {0:?}; this binary understands version {ARGS_VERSION}")]
    UnsupportedVersion(String),
    #[error("logger argument {0} is missing")]
    Missing(&'static str),
    #[error("logger argument {key} is {value:?}, expected {expected}")]
    Invalid {
        key: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("logger URI {uri:?} is malformed: {reason}")]
    BadUri { uri: String, reason: &'static str },
}

/// Bytes that need no escaping anywhere in a URI (RFC 3986 "unreserved").
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Escapes everything but unreserved bytes (and `/` in paths). Spaces become `%20`, never `+`,
/// so the text reads the same to Go's path and query decoders.
fn percent_encode(bytes: &[u8], keep_slash: bool, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if is_unreserved(b) || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 0xf)] as char);
        }
    }
}

/// Decodes `%XX` (and `+` as a space in queries, as Go's `url.QueryUnescape` does).
fn percent_decode(text: &str, plus_is_space: bool) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

/// The task stdout/stderr URI that makes containerd's shim run `exe` as this logger, writing
/// to `log_path` rotated at `max_size` bytes (0: never) keeping `max_files` files.
///
/// `exe` must be absolute (the shim runs it from the bundle directory); pass the agent's own
/// executable. Non-UTF-8 paths are encoded faithfully, but the logger reads its arguments as
/// `String`s, so keep paths UTF-8.
pub fn logger_uri(exe: &Path, log_path: &Path, max_size: u64, max_files: u32) -> String {
    let mut uri = String::from("binary://");
    percent_encode(exe.as_os_str().as_bytes(), true, &mut uri);
    let max_size = max_size.to_string();
    let max_files = max_files.to_string();
    let pairs: [(&str, &[u8]); 4] = [
        (LOGGER_MARKER_KEY, ARGS_VERSION.as_bytes()),
        (KEY_LOG_PATH, log_path.as_os_str().as_bytes()),
        (KEY_MAX_SIZE, max_size.as_bytes()),
        (KEY_MAX_FILES, max_files.as_bytes()),
    ];
    for (i, (key, value)) in pairs.iter().enumerate() {
        uri.push(if i == 0 { '?' } else { '&' });
        percent_encode(key.as_bytes(), false, &mut uri);
        uri.push('=');
        percent_encode(value, false, &mut uri);
    }
    uri
}

/// Decodes a URI made by [`logger_uri`] the way the shim does, returning the executable and the
/// argv it would run (program name first, then the pairs). Lets the agent learn a running
/// task's log path from containerd after a restart.
pub fn parse_logger_uri(uri: &str) -> Result<(PathBuf, Vec<String>), LoggerArgsError> {
    let bad = |reason| LoggerArgsError::BadUri {
        uri: uri.to_owned(),
        reason,
    };
    let rest = uri
        .strip_prefix("binary://")
        .ok_or_else(|| bad("scheme is not binary://"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if !path.starts_with('/') {
        return Err(bad("executable path is not absolute"));
    }
    let exe = PathBuf::from(OsString::from_vec(
        percent_decode(path, false).ok_or_else(|| bad("bad %-escape in path"))?,
    ));
    let mut argv = vec![exe.to_string_lossy().into_owned()];
    let mut seen = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |text| {
            percent_decode(text, true)
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| bad("bad %-escape or non-UTF-8 text in query"))
        };
        let (key, value) = (decode(key)?, decode(value)?);
        // Go's url.Values.Get semantics: the first value of a repeated key wins.
        if !seen.contains(&key) {
            seen.push(key.clone());
            argv.push(key);
            argv.push(value);
        }
    }
    Ok((exe, argv))
}

/// Key/value pairs after the program name, or `None` if the count is odd.
fn arg_pairs(args: &[String]) -> Option<impl Iterator<Item = (&str, &str)>> {
    let rest = args.get(1..).unwrap_or_default();
    if rest.len() % 2 != 0 {
        return None;
    }
    Some(
        rest.chunks_exact(2)
            .map(|pair| (pair[0].as_str(), pair[1].as_str())),
    )
}

/// Whether this process was started as the logger (argv as `std::env::args` gives it).
pub fn is_logger_invocation(args: &[String]) -> bool {
    arg_pairs(args).is_some_and(|mut pairs| pairs.any(|(key, _)| key == LOGGER_MARKER_KEY))
}

/// Reads the logger's key/value arguments, in whatever order the shim produced them. Unknown
/// keys are ignored so a URI written by a newer agent still works with an older binary.
pub fn parse_logger_args(args: &[String]) -> Result<LoggerConfig, LoggerArgsError> {
    let pairs =
        arg_pairs(args).ok_or(LoggerArgsError::OddArguments(args.len().saturating_sub(1)))?;
    let (mut version, mut log_path, mut max_size, mut max_files) = (None, None, None, None);
    for (key, value) in pairs {
        let slot = match key {
            LOGGER_MARKER_KEY => &mut version,
            KEY_LOG_PATH => &mut log_path,
            KEY_MAX_SIZE => &mut max_size,
            KEY_MAX_FILES => &mut max_files,
            _ => continue,
        };
        slot.get_or_insert(value);
    }
    match version {
        None => return Err(LoggerArgsError::NotLoggerInvocation),
        Some(v) if v != ARGS_VERSION => {
            return Err(LoggerArgsError::UnsupportedVersion(v.to_owned()))
        }
        Some(_) => {}
    }
    let log_path = log_path.ok_or(LoggerArgsError::Missing(KEY_LOG_PATH))?;
    if !log_path.starts_with('/') {
        return Err(LoggerArgsError::Invalid {
            key: KEY_LOG_PATH,
            value: log_path.to_owned(),
            expected: "an absolute path",
        });
    }
    let max_size = max_size.ok_or(LoggerArgsError::Missing(KEY_MAX_SIZE))?;
    let max_size = match (max_size.parse::<u64>(), max_size.parse::<i64>()) {
        (Ok(n), _) => n,
        // The kubelet's negative containerLogMaxSize means "never rotate".
        (Err(_), Ok(n)) if n < 0 => 0,
        _ => {
            return Err(LoggerArgsError::Invalid {
                key: KEY_MAX_SIZE,
                value: max_size.to_owned(),
                expected: "a byte count",
            })
        }
    };
    let max_files = max_files.ok_or(LoggerArgsError::Missing(KEY_MAX_FILES))?;
    let max_files = max_files
        .parse::<u32>()
        .map_err(|_| LoggerArgsError::Invalid {
            key: KEY_MAX_FILES,
            value: max_files.to_owned(),
            expected: "a file count",
        })?;
    Ok(LoggerConfig {
        log_path: PathBuf::from(log_path),
        rotation: RotationPolicy {
            max_size,
            max_files,
        },
    })
}

/// Takes ownership of an inherited descriptor if it is open.
fn inherited_fd(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: F_GETFD only queries the descriptor table.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return None;
    }
    // SAFETY: fds 3-5 are handed to this process by the shim for the logger's sole use, and
    // run_logger runs before anything in the process opens a file, so nothing else owns them.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Go's `os.Pipe` files are non-blocking until `Fd()` is called, which `exec` does for the
/// shim's `ExtraFiles`; clearing `O_NONBLOCK` again costs nothing and keeps a future change
/// there from turning an empty pipe into a read error that would stop the logger.
fn ensure_blocking(fd: &OwnedFd) {
    let raw = fd.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL only change status flags of a descriptor we own.
    unsafe {
        let flags = libc::fcntl(raw, libc::F_GETFL);
        if flags != -1 && flags & libc::O_NONBLOCK != 0 {
            libc::fcntl(raw, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}

fn report(context: &str, message: &dyn std::fmt::Display) {
    // Under the shim stderr is /dev/null; this helps when the logger is run by hand or in tests.
    let id = std::env::var("CONTAINER_ID").unwrap_or_default();
    let ns = std::env::var("CONTAINER_NAMESPACE").unwrap_or_default();
    eprintln!("kubelet-rs logger (container {ns}/{id}): {context}: {message}");
}

/// The logger's `main`: call it first thing in `main`, before anything opens a file, since it
/// takes over the inherited fds 3, 4 and 5. Returns the process exit code: 0 once both streams
/// ended, 1 when the log file cannot be opened or a stream fails, 2 for bad arguments or missing
/// descriptors.
///
/// Uses threads and blocking reads only: one logger runs per container, so it must stay small.
pub fn run_logger(args: &[String]) -> i32 {
    let config = match parse_logger_args(args) {
        Ok(c) => c,
        Err(e) => {
            report("bad arguments", &e);
            return 2;
        }
    };
    // Claim 3, 4 and 5 before opening the log file, which could otherwise land on one of them.
    let (Some(stdout), Some(stderr)) = (inherited_fd(STDOUT_FD), inherited_fd(STDERR_FD)) else {
        report(
            "missing descriptors",
            &"fd 3 (stdout) and fd 4 (stderr) must be open",
        );
        return 2;
    };
    ensure_blocking(&stdout);
    ensure_blocking(&stderr);
    let ready = inherited_fd(READY_FD);
    // The shim closes the output pipes before its SIGTERM, so draining to end-of-file is both
    // quick and the only way not to lose the container's last words.
    // SAFETY: installing SIG_IGN runs no handler code.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    let log_file = match RotatingLogFile::open(&config.log_path, config.rotation) {
        Ok(f) => f,
        Err(e) => {
            report("cannot open log file", &e);
            return 1;
        }
    };
    // Closing the readiness pipe lets the shim start the container, which it does only now
    // that the container's output has a file to go to.
    drop(ready);

    let writer = RecordWriter::new(log_file);
    let (out_result, err_result) = std::thread::scope(|scope| {
        let err_copy = scope.spawn(|| {
            copy_stream(
                File::from(stderr),
                LogStream::Stderr,
                DEFAULT_MAX_LINE_BYTES,
                &writer,
            )
        });
        let out_result = copy_stream(
            File::from(stdout),
            LogStream::Stdout,
            DEFAULT_MAX_LINE_BYTES,
            &writer,
        );
        let err_result = err_copy
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("stderr copier panicked")));
        (out_result, err_result)
    });
    let mut code = 0;
    for (stream, result) in [("stdout", out_result), ("stderr", err_result)] {
        match result {
            Ok(stats) if stats.write_errors > 0 => report(
                &format!("writing {stream} to {}", config.log_path.display()),
                &format!(
                    "{} of {} records lost ({:?})",
                    stats.write_errors, stats.records, stats.first_write_error
                ),
            ),
            Ok(_) => {}
            Err(e) => {
                report(&format!("reading {stream}"), &e);
                code = 1;
            }
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    const PAIRS: [[&str; 2]; 4] = [
        [LOGGER_MARKER_KEY, "1"],
        ["log-path", "/var/log/pods/ns_p_u/c/0.log"],
        ["max-size", "10485760"],
        ["max-files", "5"],
    ];

    fn permutations(items: &[[&'static str; 2]]) -> Vec<Vec<[&'static str; 2]>> {
        if items.len() <= 1 {
            return vec![items.to_vec()];
        }
        let mut out = Vec::new();
        for i in 0..items.len() {
            let mut rest = items.to_vec();
            let first = rest.remove(i);
            for mut tail in permutations(&rest) {
                tail.insert(0, first);
                out.push(tail);
            }
        }
        out
    }

    #[test]
    fn args_parse_the_same_in_every_order() {
        let expected = LoggerConfig {
            log_path: PathBuf::from("/var/log/pods/ns_p_u/c/0.log"),
            rotation: RotationPolicy {
                max_size: 10_485_760,
                max_files: 5,
            },
        };
        let orders = permutations(&PAIRS);
        assert_eq!(orders.len(), 24);
        for order in orders {
            let mut args = vec!["/usr/bin/kubelet-rs".to_string()];
            args.extend(order.iter().flatten().map(|s| s.to_string()));
            assert!(is_logger_invocation(&args), "{args:?}");
            assert_eq!(parse_logger_args(&args).unwrap(), expected, "{args:?}");
        }
    }

    #[test]
    fn ordinary_command_lines_are_not_the_logger() {
        assert!(!is_logger_invocation(&argv(&["kubelet-rs"])));
        assert!(!is_logger_invocation(&argv(&[
            "kubelet-rs",
            "--config",
            "/etc/kubelet.yaml"
        ])));
        // The marker as a value, or with an odd argument count, does not count.
        assert!(!is_logger_invocation(&argv(&[
            "kubelet-rs",
            "--flag",
            LOGGER_MARKER_KEY
        ])));
        assert!(!is_logger_invocation(&argv(&[
            "kubelet-rs",
            LOGGER_MARKER_KEY,
            "1",
            "stray"
        ])));
    }

    #[test]
    fn bad_arguments_name_the_key_at_fault() {
        let base = ["/exe", LOGGER_MARKER_KEY, "1", "log-path", "/l/0.log"];
        let with = |extra: &[&str]| {
            let mut a = argv(&base);
            a.extend(extra.iter().map(|s| s.to_string()));
            parse_logger_args(&a)
        };
        assert_eq!(
            with(&["max-files", "5"]),
            Err(LoggerArgsError::Missing("max-size"))
        );
        let err = with(&["max-size", "10Mi", "max-files", "5"]).unwrap_err();
        assert!(err.to_string().contains("max-size"), "{err}");
        assert!(err.to_string().contains("10Mi"), "{err}");
        assert_eq!(
            parse_logger_args(&argv(&["/exe", LOGGER_MARKER_KEY, "2"])),
            Err(LoggerArgsError::UnsupportedVersion("2".into()))
        );
        assert!(matches!(
            parse_logger_args(&argv(&[
                "/exe",
                LOGGER_MARKER_KEY,
                "1",
                "log-path",
                "relative.log",
                "max-size",
                "1",
                "max-files",
                "1"
            ])),
            Err(LoggerArgsError::Invalid {
                key: "log-path",
                ..
            })
        ));
    }

    #[test]
    fn negative_max_size_disables_rotation_and_unknown_keys_are_ignored() {
        let args = argv(&[
            "/exe",
            "future-option",
            "x",
            "max-size",
            "-1",
            LOGGER_MARKER_KEY,
            "1",
            "max-files",
            "5",
            "log-path",
            "/l/0.log",
        ]);
        let config = parse_logger_args(&args).unwrap();
        assert_eq!(config.rotation.max_size, 0);
        assert!(!config.rotation.is_enabled());
    }

    #[test]
    fn uri_escapes_paths_and_roundtrips_through_the_shim_decoding() {
        let exe = Path::new("/opt/kubelet rs/bin/kubelet-rs");
        let log = Path::new("/var/log/pods/ns_name_uid/c+1/0.log&x=y?%z é");
        let uri = logger_uri(exe, log, 10 * 1024 * 1024, 5);
        assert!(
            uri.starts_with("binary:///opt/kubelet%20rs/bin/kubelet-rs?"),
            "{uri}"
        );
        assert!(!uri.contains(' ') && !uri.contains('+'), "{uri}");
        assert_eq!(uri.matches('?').count(), 1, "{uri}");
        assert_eq!(uri.matches('&').count(), 3, "{uri}");
        assert!(uri.is_ascii());

        let (parsed_exe, args) = parse_logger_uri(&uri).unwrap();
        assert_eq!(parsed_exe, exe);
        assert!(is_logger_invocation(&args));
        let config = parse_logger_args(&args).unwrap();
        assert_eq!(config.log_path, log);
        assert_eq!(
            config.rotation,
            RotationPolicy {
                max_size: 10 * 1024 * 1024,
                max_files: 5
            }
        );
    }

    #[test]
    fn uri_decoding_follows_go_query_rules() {
        let (_, args) =
            parse_logger_uri("binary:///bin/x?a=one+two&b=%2Fp&a=ignored&empty=").unwrap();
        assert_eq!(
            args,
            argv(&["/bin/x", "a", "one two", "b", "/p", "empty", ""])
        );
        assert!(parse_logger_uri("file:///bin/x").is_err());
        assert!(parse_logger_uri("binary://bin/x").is_err());
        assert!(parse_logger_uri("binary:///bin/x?a=%zz").is_err());
    }

    #[test]
    fn run_logger_rejects_bad_arguments_without_touching_descriptors() {
        assert_eq!(run_logger(&argv(&["/exe", LOGGER_MARKER_KEY, "9"])), 2);
        assert_eq!(run_logger(&argv(&["/exe", "odd"])), 2);
    }
}
