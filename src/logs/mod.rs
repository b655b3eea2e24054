//! Container logs in the CRI format, written by a logging binary that containerd's shim runs.
//!
//! The agent never sits in the log path: a task's stdout/stderr are set to a `binary://` URI
//! ([`logger_uri`]) naming the agent's own executable (in a container, a copy the host can
//! see: [`logger_binary`]). containerd's runc v2 shim starts that executable itself (the
//! process then runs [`run_logger`]), hands it the container's output pipes, and keeps it
//! alive for the task's lifetime, so logs keep flowing while the agent restarts or upgrades.
//!
//! The pieces:
//! - [`paths`]: where upstream kubelet puts log files and their `/var/log/containers` symlinks.
//! - [`timestamp`]: Go's `time.RFC3339Nano` as containerd prints it.
//! - [`cri_writer`]: turns a byte stream into `<time> <stream> <P|F> <content>` records.
//! - [`rotation`]: the log file sink, rotated by bytes written.
//! - [`logger_process`]: the URI, the argv the shim builds from it, and the logger's `main`.
//! - [`logger_binary`]: which file the shim executes: the agent's own, or a copy the host can
//!   see when the agent runs in a container.
//! - [`cri_reader`]: parses records back and joins partial chunks into lines.

pub mod cri_reader;
pub mod cri_writer;
pub mod logger_binary;
pub mod logger_process;
pub mod paths;
pub mod rotation;
pub mod timestamp;

pub use cri_reader::{
    parse_cri_line, parse_log_bytes, read_log_file, CriLogLine, CriLogParseError, CriLogReadError,
    CriLogRecord, LogFileLines,
};
pub use cri_writer::{copy_stream, CopyStats, LogSink, RecordWriter, DEFAULT_MAX_LINE_BYTES};
pub use logger_binary::{logger_executable, LoggerBinaryError};
pub use logger_process::{
    is_logger_invocation, logger_uri, parse_logger_args, parse_logger_uri, run_logger,
    LoggerArgsError, LoggerConfig, LOGGER_MARKER_KEY,
};
pub use paths::{container_log_path, container_log_symlink, pod_log_dir};
pub use rotation::{remove_log_files, LogFileError, RotatingLogFile, RotationPolicy};
pub use timestamp::format_rfc3339_nano;

/// Which of the container's output streams a record came from; spelled as the CRI spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogStream {
    Stdout,
    Stderr,
}

impl LogStream {
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

impl std::fmt::Display for LogStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
