//! Starting a container's relay from the agent, and giving it up when its task never starts.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::relay::{RelayConfig, STDERR_FIFO, STDIN_FIFO, STDOUT_FIFO};

/// How long a relay may take to get ready (make its FIFOs, open the log, listen).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The FIFO paths a task is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFifos {
    pub stdin: Option<PathBuf>,
    pub stdout: PathBuf,
    /// None with a terminal (it merges stderr into stdout).
    pub stderr: Option<PathBuf>,
    pub terminal: bool,
}

impl TaskFifos {
    pub fn of(config: &RelayConfig) -> Self {
        let c = config.container;
        TaskFifos {
            stdin: c.stdin.then(|| config.fifo(STDIN_FIFO)),
            stdout: config.fifo(STDOUT_FIFO),
            stderr: (!c.tty).then(|| config.fifo(STDERR_FIFO)),
            terminal: c.tty,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("starting the io relay {exe}: {source}")]
    Spawn {
        exe: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the io relay for {dir} failed: {message}")]
    Failed { dir: PathBuf, message: String },
    #[error("the io relay for {dir} was not ready within {secs}s")]
    Timeout { dir: PathBuf, secs: u64 },
}

/// Starts the relay (`exe` in relay mode) and returns once it is ready, i.e. once the task
/// may be created with [`TaskFifos::of`] `config`.
pub async fn start_relay(exe: &Path, config: &RelayConfig) -> Result<TaskFifos, SpawnError> {
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(config.to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let run = cmd.output();
    let out = tokio::time::timeout(READY_TIMEOUT, run)
        .await
        .map_err(|_| SpawnError::Timeout {
            dir: config.dir.clone(),
            secs: READY_TIMEOUT.as_secs(),
        })?
        .map_err(|source| SpawnError::Spawn {
            exe: exe.to_owned(),
            source,
        })?;
    if !out.status.success() {
        return Err(SpawnError::Failed {
            dir: config.dir.clone(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(TaskFifos::of(config))
}

/// Gives up a relay whose task was never started, or cleans up after a removed container:
/// removing its directory makes a relay that never saw output exit within a second.
pub async fn remove_relay_dir(dir: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
}
