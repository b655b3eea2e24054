//! Running a command inside a running container and collecting its output (the CRI's
//! ExecSync): what exec probes and exec lifecycle hooks need.
//!
//! The sequence mirrors containerd's own CRI plugin: the exec process takes the container's
//! OCI process (env, cwd, user, capabilities) with only its args replaced, its stdout and
//! stderr go to FIFOs the agent reads, and a process that outlives its timeout is killed
//! with SIGKILL so it cannot pile up in a container that a probe keeps poking.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use containerd_client::services::v1::{
    DeleteProcessRequest, ExecProcessRequest, GetContainerRequest, KillRequest, StartRequest,
    WaitRequest,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use prost_types::Any;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::client::{call, CALL_TIMEOUT};
use super::{Containerd, Result, RuntimeError};

/// Bytes kept of each of stdout and stderr; the rest is read and dropped so the process
/// never blocks on a full pipe. Upstream's exec probe keeps 10 KiB of output too.
pub const MAX_EXEC_OUTPUT: usize = 10 * 1024;

/// Where the FIFOs of running execs live; one sub-directory per exec.
pub const EXEC_FIFO_DIR: &str = "/run/kubelet-rs/exec";

/// The `op` of the `RuntimeError::Timeout` that `exec_sync` returns when the command itself
/// ran out of time (as opposed to containerd not answering).
pub const EXEC_TIMEOUT_OP: &str = "exec: command timed out;";

const PROCESS_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/Process";

/// How long output may keep arriving after the process exited: a background child that
/// inherited stdout would otherwise hold the call open forever.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// How long a SIGKILLed exec process gets to be reported dead.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// How a command run in a container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    pub exit_code: i32,
    /// At most `MAX_EXEC_OUTPUT` bytes.
    pub stdout: Vec<u8>,
    /// At most `MAX_EXEC_OUTPUT` bytes.
    pub stderr: Vec<u8>,
}

/// Why a command could not be run to completion in a container.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The command ran longer than its timeout and was killed. Upstream counts this as a
    /// probe failure.
    #[error("command timed out after {0:?}")]
    TimedOut(Duration),
    /// The command could not be run (container gone, binary missing, runtime error).
    /// Upstream discards such probe attempts instead of counting them.
    #[error("{0}")]
    Failed(String),
}

/// Runs a command in a container and waits for it (the CRI's ExecSync).
pub trait ExecRunner: Send + Sync + 'static {
    fn exec(
        &self,
        container_id: String,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<ExecResult, ExecError>>;
}

impl ExecRunner for Containerd {
    fn exec(
        &self,
        container_id: String,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<ExecResult, ExecError>> {
        let containerd = self.clone();
        async move {
            containerd
                .exec_sync(&container_id, cmd, timeout)
                .await
                .map_err(|e| {
                    if e.is_exec_timeout() {
                        ExecError::TimedOut(timeout)
                    } else {
                        ExecError::Failed(e.to_string())
                    }
                })
        }
        .boxed()
    }
}

impl RuntimeError {
    /// True when `exec_sync` gave up on a command that ran longer than its timeout.
    pub fn is_exec_timeout(&self) -> bool {
        matches!(self, RuntimeError::Timeout { op, .. } if *op == EXEC_TIMEOUT_OP)
    }
}

impl Containerd {
    /// Runs `cmd` in the running container `container_id` and waits for it, at most
    /// `timeout` (then the process is SIGKILLed and `is_exec_timeout()` holds for the error).
    /// A command that cannot be started (e.g. a binary missing from the image) is a
    /// `RuntimeError::Spec` naming the command.
    pub async fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecResult> {
        let object = format!("{container_id} {cmd:?}");
        if cmd.is_empty() {
            return Err(RuntimeError::Spec {
                container: container_id.to_string(),
                field: "exec command".into(),
                reason: "the command is empty".into(),
            });
        }
        let process = self.exec_process_spec(container_id, &cmd).await?;
        let exec_id = format!("exec-{}", hex::encode(rand::random::<[u8; 8]>()));
        let fifos = FifoDir::create(Path::new(EXEC_FIFO_DIR), &exec_id).map_err(|e| {
            RuntimeError::Spec {
                container: container_id.to_string(),
                field: format!("exec FIFOs in {EXEC_FIFO_DIR}"),
                reason: e.to_string(),
            }
        })?;
        // Read ends first: the shim opens the write ends while starting the process and
        // would block (or fail) without a reader.
        let stdout = fifos.receiver("stdout")?;
        let stderr = fifos.receiver("stderr")?;

        call(
            "exec",
            object.clone(),
            CALL_TIMEOUT,
            self.client().tasks().exec(self.req(ExecProcessRequest {
                container_id: container_id.to_string(),
                stdin: String::new(),
                stdout: fifos.path("stdout").display().to_string(),
                stderr: fifos.path("stderr").display().to_string(),
                terminal: false,
                spec: Some(Any {
                    type_url: PROCESS_TYPE_URL.into(),
                    value: process,
                }),
                exec_id: exec_id.clone(),
            })),
        )
        .await?;

        let result = self
            .run_exec(
                container_id,
                &exec_id,
                &object,
                &cmd,
                (stdout, stderr),
                timeout,
            )
            .await;

        let deleted = call(
            "delete exec process",
            object.clone(),
            CALL_TIMEOUT,
            self.client()
                .tasks()
                .delete_process(self.req(DeleteProcessRequest {
                    container_id: container_id.to_string(),
                    exec_id: exec_id.clone(),
                })),
        )
        .await;
        match deleted {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => warn!(container_id, exec_id, error = %e, "cannot delete exec process"),
        }
        drop(fifos);
        result
    }

    /// The container's OCI process with `cmd` as its args, as JSON. Kept as JSON so fields
    /// this agent does not model pass through untouched.
    async fn exec_process_spec(&self, container_id: &str, cmd: &[String]) -> Result<Vec<u8>> {
        let container = call(
            "get container",
            container_id,
            CALL_TIMEOUT,
            self.client()
                .containers()
                .get(self.req(GetContainerRequest {
                    id: container_id.to_string(),
                })),
        )
        .await?
        .container;
        let bad = |reason: String| RuntimeError::Spec {
            container: container_id.to_string(),
            field: "spec.process".into(),
            reason,
        };
        let spec = container
            .and_then(|c| c.spec)
            .ok_or_else(|| bad("the container record has no OCI spec".into()))?;
        let mut spec: serde_json::Value =
            serde_json::from_slice(&spec.value).map_err(|e| bad(e.to_string()))?;
        let mut process = spec
            .get_mut("process")
            .map(serde_json::Value::take)
            .filter(serde_json::Value::is_object)
            .ok_or_else(|| bad("the OCI spec has no process".into()))?;
        process["args"] = serde_json::json!(cmd);
        process["terminal"] = serde_json::Value::Bool(false);
        serde_json::to_vec(&process).map_err(|e| bad(e.to_string()))
    }

    async fn run_exec(
        &self,
        container_id: &str,
        exec_id: &str,
        object: &str,
        cmd: &[String],
        (stdout, stderr): (pipe::Receiver, pipe::Receiver),
        timeout: Duration,
    ) -> Result<ExecResult> {
        // Wait before start, so the exit cannot slip by unobserved.
        let mut wait = {
            let mut tasks = self.client().tasks();
            let req = self.req(WaitRequest {
                container_id: container_id.to_string(),
                exec_id: exec_id.to_string(),
            });
            tokio::spawn(async move { tasks.wait(req).await })
        };
        let started = call(
            "start exec",
            object.to_string(),
            CALL_TIMEOUT,
            self.client().tasks().start(self.req(StartRequest {
                container_id: container_id.to_string(),
                exec_id: exec_id.to_string(),
            })),
        )
        .await;
        if let Err(e) = started {
            wait.abort();
            return Err(start_error(container_id, cmd, e));
        }
        // Only now: before the shim opened its write ends, a read would see end-of-file.
        let (stop_tx, stop_rx) = watch::channel(false);
        let out = tokio::spawn(read_capped(stdout, stop_rx.clone()));
        let err = tokio::spawn(read_capped(stderr, stop_rx));

        let exit = match tokio::time::timeout(timeout, &mut wait).await {
            Ok(joined) => joined,
            Err(_) => {
                debug!(
                    container_id,
                    exec_id,
                    ?timeout,
                    "exec timed out, killing it"
                );
                self.kill_exec(container_id, exec_id, object).await;
                if tokio::time::timeout(KILL_WAIT, &mut wait).await.is_err() {
                    wait.abort();
                    warn!(
                        container_id,
                        exec_id, "exec process still not dead after SIGKILL"
                    );
                }
                let _ = stop_tx.send(true);
                let _ = out.await;
                let _ = err.await;
                return Err(RuntimeError::Timeout {
                    op: EXEC_TIMEOUT_OP,
                    object: object.to_string(),
                    secs: timeout.as_secs().max(1),
                });
            }
        };
        let exit = match exit {
            Ok(Ok(r)) => Ok(r.into_inner().exit_status as i32),
            Ok(Err(status)) => Err(RuntimeError::Call {
                op: "wait exec",
                object: object.to_string(),
                status: Box::new(status),
            }),
            Err(join) => Err(RuntimeError::Spec {
                container: container_id.to_string(),
                field: "exec wait".into(),
                reason: join.to_string(),
            }),
        };
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(OUTPUT_DRAIN).await;
            let _ = stop_tx.send(true);
        });
        let stdout = joined_output(out).await;
        let stderr = joined_output(err).await;
        stopper.abort();
        Ok(ExecResult {
            exit_code: exit?,
            stdout,
            stderr,
        })
    }

    async fn kill_exec(&self, container_id: &str, exec_id: &str, object: &str) {
        let killed = call(
            "kill exec",
            object.to_string(),
            CALL_TIMEOUT,
            self.client().tasks().kill(self.req(KillRequest {
                container_id: container_id.to_string(),
                exec_id: exec_id.to_string(),
                signal: libc::SIGKILL as u32,
                all: false,
            })),
        )
        .await;
        match killed {
            Ok(_) => {}
            // It may have exited on its own in the meantime.
            Err(e) if e.is_not_found() => {}
            Err(e) => warn!(container_id, exec_id, error = %e, "cannot kill exec process"),
        }
    }
}

/// A start failure because the command cannot be run at all names the command; anything
/// else stays a containerd error.
fn start_error(container_id: &str, cmd: &[String], e: RuntimeError) -> RuntimeError {
    match e {
        RuntimeError::Call { status, .. }
            if status.message().contains("executable file not found")
                || status.message().contains("no such file or directory")
                || status.message().contains("permission denied") =>
        {
            RuntimeError::Spec {
                container: container_id.to_string(),
                field: format!("exec command {cmd:?}"),
                reason: status.message().to_string(),
            }
        }
        other => other,
    }
}

async fn joined_output(h: JoinHandle<Vec<u8>>) -> Vec<u8> {
    h.await.unwrap_or_default()
}

/// Reads until end-of-file (every writer closed) or until `stop` turns true, keeping the
/// first `MAX_EXEC_OUTPUT` bytes.
async fn read_capped(mut rx: pipe::Receiver, mut stop: watch::Receiver<bool>) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        tokio::select! {
            r = rx.read(&mut buf) => match r {
                Ok(0) => break,
                Ok(n) => {
                    let room = MAX_EXEC_OUTPUT.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
                Err(e) => {
                    debug!(error = %e, "reading exec output");
                    break;
                }
            },
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
            }
        }
    }
    kept
}

/// A private directory with one exec's FIFOs, removed on drop.
struct FifoDir {
    dir: PathBuf,
}

impl FifoDir {
    fn create(root: &Path, exec_id: &str) -> std::io::Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)?;
        let dir = root.join(exec_id);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let me = FifoDir { dir };
        for name in ["stdout", "stderr"] {
            nix::unistd::mkfifo(
                &me.path(name),
                nix::sys::stat::Mode::from_bits_truncate(0o600),
            )
            .map_err(std::io::Error::from)?;
        }
        Ok(me)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Opens the read end without waiting for a writer.
    fn receiver(&self, name: &str) -> Result<pipe::Receiver> {
        pipe::OpenOptions::new()
            .open_receiver(self.path(name))
            .map_err(|e| RuntimeError::Spec {
                container: String::new(),
                field: format!("exec FIFO {}", self.path(name).display()),
                reason: e.to_string(),
            })
    }
}

impl Drop for FifoDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            warn!(dir = %self.dir.display(), error = %e, "cannot remove exec FIFO directory");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_dir_is_created_and_removed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("exec-x");
        {
            let f = FifoDir::create(root.path(), "exec-x").unwrap();
            use std::os::unix::fs::FileTypeExt;
            let t = std::fs::metadata(f.path("stdout")).unwrap().file_type();
            assert!(t.is_fifo());
            assert!(dir.is_dir());
        }
        assert!(!dir.exists());
    }

    #[tokio::test]
    async fn read_capped_keeps_the_first_bytes_and_reads_to_the_end() {
        let root = tempfile::tempdir().unwrap();
        let f = FifoDir::create(root.path(), "e").unwrap();
        let rx = f.receiver("stdout").unwrap();
        let mut tx = pipe::OpenOptions::new()
            .open_sender(f.path("stdout"))
            .unwrap();
        let (_stop_tx, stop_rx) = watch::channel(false);
        let reader = tokio::spawn(read_capped(rx, stop_rx));
        use tokio::io::AsyncWriteExt;
        let data = vec![b'x'; 3 * MAX_EXEC_OUTPUT];
        tx.write_all(&data).await.unwrap();
        drop(tx);
        let got = reader.await.unwrap();
        assert_eq!(got.len(), MAX_EXEC_OUTPUT);
    }

    #[tokio::test]
    async fn read_capped_stops_when_told() {
        let root = tempfile::tempdir().unwrap();
        let f = FifoDir::create(root.path(), "e").unwrap();
        let rx = f.receiver("stdout").unwrap();
        // A writer that never closes, like a background child holding stdout.
        let mut tx = pipe::OpenOptions::new()
            .open_sender(f.path("stdout"))
            .unwrap();
        use tokio::io::AsyncWriteExt;
        tx.write_all(b"partial").await.unwrap();
        let (stop_tx, stop_rx) = watch::channel(false);
        let reader = tokio::spawn(read_capped(rx, stop_rx));
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop_tx.send(true).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("reader stopped")
            .unwrap();
        assert_eq!(got, b"partial");
        drop(tx);
    }
}
