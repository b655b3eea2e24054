//! Exec processes in running containers, the one machinery behind both exec paths: the
//! CRI's ExecSync (`exec_sync`: exec probes and lifecycle hooks, output captured here) and
//! the streamed exec of `kubectl exec` (`exec_stdio`, whose pipes go to the client).
//!
//! The sequence mirrors containerd's own CRI plugin (`execInternal`): the container must be
//! running; the exec process takes the container's OCI process (env, cwd, user,
//! capabilities) with only its args (and terminal) replaced; its stdio goes through FIFOs in
//! a private directory; Wait is asked before Start so the exit cannot slip by; afterwards
//! the process is deleted from the shim and its FIFOs removed. A probe command that outlives
//! its timeout is killed with SIGKILL so it cannot pile up in a container a probe keeps
//! poking.

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use containerd_client::services::v1::{
    CloseIoRequest, DeleteProcessRequest, ExecProcessRequest, GetContainerRequest, KillRequest,
    ResizePtyRequest, StartRequest, WaitRequest,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use prost_types::Any;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::client::{call, CALL_TIMEOUT};
use super::containers::TaskStatus;
use super::stdio::StdioRequest;
use super::{Containerd, Result, RuntimeError};

/// Bytes kept of each of stdout and stderr; the rest is read and dropped so the process
/// never blocks on a full pipe. Upstream's exec probe keeps 10 KiB of output too.
pub const MAX_EXEC_OUTPUT: usize = 10 * 1024;

/// Where the FIFOs of running execs live: one folder per containerd namespace (agents on
/// one host in different namespaces keep apart), one sub-directory per exec.
pub const EXEC_FIFO_DIR: &str = "/run/kubelet-rs/exec";

/// The FIFO folder of the execs of one containerd namespace.
pub fn exec_fifo_dir(namespace: &str) -> PathBuf {
    Path::new(EXEC_FIFO_DIR).join(namespace)
}

/// The `op` of the `RuntimeError::Timeout` that `exec_sync` returns when the command itself
/// ran out of time (as opposed to containerd not answering).
pub const EXEC_TIMEOUT_OP: &str = "exec: command timed out;";

const PROCESS_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/Process";

/// How long output may keep arriving after the process exited: a background child that
/// inherited stdout would otherwise hold the call open forever.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// How long a SIGKILLed exec process gets to be reported dead.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// How long the shim gets to open its end of the stdin FIFO once the process started (it
/// does so while starting it, so this only bounds a broken shim).
const STDIN_OPEN_WAIT: Duration = Duration::from_secs(10);

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
///
/// Callers that may stop waiting (a probe dropped with its pod, a hook cut short, a client
/// that leaves) go through [`exec_to_end`] rather than dropping this future: see there.
pub trait ExecRunner: Send + Sync + 'static {
    fn exec(
        &self,
        container_id: String,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<ExecResult, ExecError>>;
}

/// Runs `cmd` through `runner` on a task of its own and waits for it; a caller that is
/// dropped meanwhile stops waiting, but the command still runs to its end (its own
/// `timeout`) and is removed from the shim.
///
/// Dropping an exec half-way is what must not happen: once Start is sent, containerd 1.6's
/// runc shim opens the process's stdout/stderr FIFOs for writing and waits up to 30 s for a
/// reader, holding the process's pid lock; its exit handler needs that lock, and every
/// other call on that shim (task state, kill, delete of the pod's containers) queues behind
/// the exit handler. A probe exec dropped with its read ends closed thus held its pod's
/// teardown for 30 s.
pub(crate) async fn exec_to_end(
    runner: &dyn ExecRunner,
    container_id: String,
    cmd: Vec<String>,
    timeout: Duration,
) -> std::result::Result<ExecResult, ExecError> {
    match tokio::spawn(runner.exec(container_id, cmd, timeout)).await {
        Ok(r) => r,
        Err(e) => Err(ExecError::Failed(format!(
            "exec task ended abnormally: {e}"
        ))),
    }
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

/// Our ends of a started exec process's FIFOs. `stdout` always exists (the shim needs it
/// even when nobody reads it); `stderr` exists unless the process has a terminal.
pub(crate) struct ExecPipes {
    pub stdin: Option<pipe::Sender>,
    pub stdout: pipe::Receiver,
    pub stderr: Option<pipe::Receiver>,
}

/// What the Wait call reported: `None` while the process runs.
type ExitState = Option<std::result::Result<i32, tonic::Status>>;

/// A started exec process: its ids, its exit as containerd reports it, and its FIFO
/// directory until [`ExecProcess::delete`] (or, as a last resort, drop) removes both.
pub(crate) struct ExecProcess {
    containerd: Containerd,
    pub container_id: String,
    pub exec_id: String,
    /// The container and command, naming the process in errors.
    object: String,
    exit: watch::Receiver<ExitState>,
    waiter: JoinHandle<()>,
    /// `None` once deleted.
    fifos: Mutex<Option<FifoDir>>,
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
        let io = StdioRequest {
            stdin: false,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let (process, pipes) = self
            .start_exec(container_id, cmd, io, StateCheck::OnFailure)
            .await?;
        let result = capture(&process, pipes, timeout).await;
        process.delete().await;
        result
    }

    /// Starts `cmd` in the running container `container_id` with FIFOs for `io`, as
    /// containerd's `execInternal` does, and returns once the process runs. On any error
    /// nothing is left behind: no exec process in the shim, no FIFO directory.
    pub(crate) async fn start_exec(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        io: StdioRequest,
        check: StateCheck,
    ) -> Result<(ExecProcess, ExecPipes)> {
        if cmd.is_empty() {
            return Err(RuntimeError::Spec {
                container: container_id.to_string(),
                field: "exec command".into(),
                reason: "the command is empty".into(),
            });
        }
        let object = format!("{container_id} {cmd:?}");
        let (process_spec, running) = match check {
            StateCheck::First => {
                tokio::join!(
                    self.exec_process_spec(container_id, &cmd, io.tty),
                    self.require_running(container_id),
                )
            }
            StateCheck::OnFailure => (
                self.exec_process_spec(container_id, &cmd, io.tty).await,
                Ok(()),
            ),
        };
        // A missing container has no task either: its own error (not found) comes first.
        let process_spec = process_spec?;
        running?;
        let exec_id = format!("exec-{}", hex::encode(rand::random::<[u8; 8]>()));
        let fifo_err = |field: String, e: std::io::Error| RuntimeError::Spec {
            container: container_id.to_string(),
            field,
            reason: e.to_string(),
        };
        let fifo_root = exec_fifo_dir(self.namespace());
        let fifos = FifoDir::create(&fifo_root, &exec_id, io)
            .map_err(|e| fifo_err(format!("exec FIFOs in {}", fifo_root.display()), e))?;
        // Read ends first: the shim opens the write ends while starting the process and
        // blocks until a reader exists. They are opened non-blocking, so reading before
        // Start would see end-of-file; callers read only once this returns.
        let stdout = fifos.receiver(FifoDir::STDOUT)?;
        let stderr = match fifos.has(FifoDir::STDERR) {
            true => Some(fifos.receiver(FifoDir::STDERR)?),
            false => None,
        };
        // The shim opens its stdin end only while starting the process, and our blocking
        // open of the write end waits for it: start waiting now, collect it after Start.
        let stdin = fifos.has(FifoDir::STDIN).then(|| fifos.open_stdin_sender());

        let exec = ExecProcessRequest {
            container_id: container_id.to_string(),
            exec_id: exec_id.clone(),
            stdin: fifos.uri(FifoDir::STDIN),
            stdout: fifos.uri(FifoDir::STDOUT),
            stderr: fifos.uri(FifoDir::STDERR),
            terminal: io.tty,
            spec: Some(Any {
                type_url: PROCESS_TYPE_URL.into(),
                value: process_spec,
            }),
        };
        let created = call(
            "exec",
            object.clone(),
            CALL_TIMEOUT,
            self.client().tasks().exec(self.req(exec)),
        )
        .await;
        if let Err(e) = created {
            if let Some(s) = stdin {
                let _ = s.release().await;
            }
            return Err(self.not_running_or(container_id, check, e).await);
        }

        // Wait before Start, so the exit cannot slip by unobserved.
        let (exit_tx, exit) = watch::channel(None);
        let waiter = {
            let mut tasks = self.client().tasks();
            let req = self.req(WaitRequest {
                container_id: container_id.to_string(),
                exec_id: exec_id.clone(),
            });
            tokio::spawn(async move {
                let r = tasks.wait(req).await;
                let _ = exit_tx.send(Some(r.map(|r| r.into_inner().exit_status as i32)));
            })
        };
        let process = ExecProcess {
            containerd: self.clone(),
            container_id: container_id.to_string(),
            exec_id,
            object,
            exit,
            waiter,
            fifos: Mutex::new(Some(fifos)),
        };
        let started = call(
            "start exec",
            process.object.clone(),
            CALL_TIMEOUT,
            self.client().tasks().start(self.req(StartRequest {
                container_id: container_id.to_string(),
                exec_id: process.exec_id.clone(),
            })),
        )
        .await;
        if let Err(e) = started {
            if let Some(s) = stdin {
                let _ = s.release().await;
            }
            process.delete().await;
            let e = self.not_running_or(container_id, check, e).await;
            return Err(start_error(container_id, &cmd, e));
        }
        let stdin = match stdin {
            Some(s) => match s.opened().await {
                Ok(tx) => Some(tx),
                Err(e) => {
                    process.delete().await;
                    return Err(fifo_err("exec stdin FIFO".into(), e));
                }
            },
            None => None,
        };
        debug!(container_id, exec_id = %process.exec_id, ?io, "exec process started");
        Ok((
            process,
            ExecPipes {
                stdin,
                stdout,
                stderr,
            },
        ))
    }

    /// With the state checked only on failure: the container's state when it is not
    /// running (what upstream reports), else the call's own error.
    async fn not_running_or(
        &self,
        container_id: &str,
        check: StateCheck,
        e: RuntimeError,
    ) -> RuntimeError {
        if check == StateCheck::OnFailure {
            if let Err(state @ RuntimeError::NotRunning { .. }) =
                self.require_running(container_id).await
            {
                return state;
            }
        }
        e
    }

    pub(super) fn forget_exec_process(&self, container_id: &str) {
        if let Ok(mut m) = self.exec_processes.lock() {
            m.remove(container_id);
        }
    }

    /// Upstream execs only in running containers, and says which state it found.
    pub(crate) async fn require_running(&self, container_id: &str) -> Result<()> {
        let task = self.task(container_id).await?;
        let state = match task.map(|t| TaskStatus::try_from(t.status)) {
            Some(Ok(TaskStatus::Running | TaskStatus::Paused | TaskStatus::Pausing)) => {
                return Ok(())
            }
            Some(Ok(TaskStatus::Created)) => "CONTAINER_CREATED",
            Some(Ok(TaskStatus::Stopped)) | None => "CONTAINER_EXITED",
            Some(Ok(TaskStatus::Unknown) | Err(_)) => "CONTAINER_UNKNOWN",
        };
        Err(RuntimeError::NotRunning {
            container: container_id.to_string(),
            state,
        })
    }

    /// The container's OCI process with `cmd` as its args, as JSON. Kept as JSON so fields
    /// this agent does not model pass through untouched.
    async fn exec_process_spec(
        &self,
        container_id: &str,
        cmd: &[String],
        tty: bool,
    ) -> Result<Vec<u8>> {
        let bad = |reason: String| RuntimeError::Spec {
            container: container_id.to_string(),
            field: "spec.process".into(),
            reason,
        };
        let cached = self
            .exec_processes
            .lock()
            .ok()
            .and_then(|m| m.get(container_id).cloned());
        let base = match cached {
            Some(p) => p,
            None => {
                let p = std::sync::Arc::new(self.container_process(container_id).await?);
                if let Ok(mut m) = self.exec_processes.lock() {
                    // Entries go with their containers; this only bounds what records
                    // removed by others (not through this agent) could leave.
                    if m.len() >= EXEC_PROCESSES_MAX {
                        m.clear();
                    }
                    m.insert(container_id.to_string(), p.clone());
                }
                p
            }
        };
        let mut process = (*base).clone();
        exec_process(&mut process, cmd, tty);
        serde_json::to_vec(&process).map_err(|e| bad(e.to_string()))
    }

    /// The `process` object of the container's OCI spec, from its record.
    async fn container_process(&self, container_id: &str) -> Result<serde_json::Value> {
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
        spec.get_mut("process")
            .map(serde_json::Value::take)
            .filter(serde_json::Value::is_object)
            .ok_or_else(|| bad("the OCI spec has no process".into()))
    }
}

/// When an exec checks that its container runs: before it starts (a client's session), or
/// only to explain a failure (probes and hooks, which run only in containers their worker
/// saw running; one call to the shim fewer per exec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateCheck {
    First,
    OnFailure,
}

/// Bound of the exec process cache (see `ExecProcesses`).
const EXEC_PROCESSES_MAX: usize = 4096;

/// Turns the container's process into the exec's: only the args run (the container's
/// `commandLine`, a Windows field, would override them), with a terminal when asked, and
/// `TERM=xterm` then, replacing the container's own TERM as containerd's `oci.WithEnv` does.
fn exec_process(process: &mut serde_json::Value, cmd: &[String], tty: bool) {
    process["args"] = serde_json::json!(cmd);
    process["terminal"] = serde_json::Value::Bool(tty);
    if let Some(p) = process.as_object_mut() {
        p.remove("commandLine");
    }
    if tty {
        let mut env: Vec<serde_json::Value> = match process["env"].take() {
            serde_json::Value::Array(env) => env,
            _ => Vec::new(),
        };
        env.retain(|e| !e.as_str().is_some_and(|e| e.starts_with("TERM=")));
        env.push("TERM=xterm".into());
        process["env"] = serde_json::Value::Array(env);
    }
}

impl ExecProcess {
    /// The exit code once containerd reported one (a signal death is 128 + the signal).
    pub fn exited(&self) -> Option<i32> {
        match &*self.exit.borrow() {
            Some(Ok(code)) => Some(*code),
            _ => None,
        }
    }

    /// Waits for the process to exit and returns its exit code.
    pub async fn wait(&self) -> Result<i32> {
        let mut exit = self.exit.clone();
        let state = exit
            .wait_for(Option::is_some)
            .await
            .map(|s| s.clone())
            // The waiter ended without a word: it was aborted, i.e. the process deleted.
            .unwrap_or_else(|_| Some(Err(tonic::Status::cancelled("exec process deleted"))));
        match state {
            Some(Ok(code)) => Ok(code),
            Some(Err(status)) => Err(RuntimeError::Call {
                op: "wait exec",
                object: self.object.clone(),
                status: Box::new(status),
            }),
            None => unreachable!("waited for Some"),
        }
    }

    /// Waits at most `limit` for the exit; `None` when the process still runs.
    async fn wait_for(&self, limit: Duration) -> Option<i32> {
        tokio::time::timeout(limit, self.wait())
            .await
            .ok()
            .and_then(|r| r.ok())
    }

    /// Sends `signal` to the process; a process already gone is fine.
    pub async fn kill(&self, signal: i32) {
        let killed = call(
            "kill exec",
            self.object.clone(),
            CALL_TIMEOUT,
            self.containerd
                .client()
                .tasks()
                .kill(self.containerd.req(KillRequest {
                    container_id: self.container_id.clone(),
                    exec_id: self.exec_id.clone(),
                    signal: signal as u32,
                    all: false,
                })),
        )
        .await;
        match killed {
            Ok(_) => {}
            // It may have exited on its own in the meantime.
            Err(e) if e.is_not_found() => {}
            Err(e) => warn!(
                container_id = %self.container_id,
                exec_id = %self.exec_id,
                signal,
                error = %e,
                "cannot signal exec process"
            ),
        }
    }

    /// Resizes the process's terminal (the pty exists once the process started).
    pub async fn resize(&self, width: u16, height: u16) -> Result<()> {
        call(
            "resize exec pty",
            self.object.clone(),
            CALL_TIMEOUT,
            self.containerd
                .client()
                .tasks()
                .resize_pty(self.containerd.req(ResizePtyRequest {
                    container_id: self.container_id.clone(),
                    exec_id: self.exec_id.clone(),
                    width: width.into(),
                    height: height.into(),
                })),
        )
        .await
        .map(|_| ())
    }

    /// Makes the shim close its own writer on the stdin FIFO, so that the process sees
    /// end-of-file once ours is closed too.
    pub async fn close_stdin(&self) -> Result<()> {
        let closed = call(
            "close exec stdin",
            self.object.clone(),
            CALL_TIMEOUT,
            self.containerd
                .client()
                .tasks()
                .close_io(self.containerd.req(CloseIoRequest {
                    container_id: self.container_id.clone(),
                    exec_id: self.exec_id.clone(),
                    stdin: true,
                })),
        )
        .await;
        match closed {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(()),
        }
    }

    /// Removes the process from the shim (SIGKILLing it first if it still runs, as
    /// containerd's `WithProcessKill`) and its FIFO directory. Idempotent.
    pub async fn delete(&self) {
        let Some(fifos) = self.fifos.lock().expect("exec fifos").take() else {
            return;
        };
        if self.exited().is_none() {
            self.kill(libc::SIGKILL).await;
            if self.wait_for(KILL_WAIT).await.is_none() {
                warn!(
                    container_id = %self.container_id,
                    exec_id = %self.exec_id,
                    "exec process still not dead after SIGKILL"
                );
            }
        }
        self.waiter.abort();
        delete_process(&self.containerd, &self.container_id, &self.exec_id).await;
        drop(fifos);
    }
}

impl Drop for ExecProcess {
    /// A process dropped without `delete` (its caller was cancelled) is deleted in the
    /// background, so neither the shim nor the FIFO directory keeps it.
    fn drop(&mut self) {
        let Some(fifos) = self.fifos.get_mut().expect("exec fifos").take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (containerd, container_id, exec_id) = (
            self.containerd.clone(),
            self.container_id.clone(),
            self.exec_id.clone(),
        );
        let running = self.exited().is_none();
        rt.spawn(async move {
            if running {
                let _ = containerd
                    .client()
                    .tasks()
                    .kill(containerd.req(KillRequest {
                        container_id: container_id.clone(),
                        exec_id: exec_id.clone(),
                        signal: libc::SIGKILL as u32,
                        all: false,
                    }))
                    .await;
                // The shim refuses to delete a running process; give the kill a moment.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            delete_process(&containerd, &container_id, &exec_id).await;
            drop(fifos);
        });
    }
}

async fn delete_process(containerd: &Containerd, container_id: &str, exec_id: &str) {
    let deleted = call(
        "delete exec process",
        format!("{container_id} {exec_id}"),
        CALL_TIMEOUT,
        containerd
            .client()
            .tasks()
            .delete_process(containerd.req(DeleteProcessRequest {
                container_id: container_id.to_string(),
                exec_id: exec_id.to_string(),
            })),
    )
    .await;
    match deleted {
        Ok(_) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => warn!(container_id, exec_id, error = %e, "cannot delete exec process"),
    }
}

/// ExecSync's half: collects the first `MAX_EXEC_OUTPUT` bytes of stdout and stderr until
/// the process exits (plus a short drain), or kills it at `timeout`.
async fn capture(process: &ExecProcess, pipes: ExecPipes, timeout: Duration) -> Result<ExecResult> {
    let (stop_tx, stop_rx) = watch::channel(false);
    let out = tokio::spawn(read_capped(pipes.stdout, stop_rx.clone()));
    let err = pipes
        .stderr
        .map(|stderr| tokio::spawn(read_capped(stderr, stop_rx)));

    let exit = match tokio::time::timeout(timeout, process.wait()).await {
        Ok(exit) => exit,
        Err(_) => {
            debug!(
                container_id = %process.container_id,
                exec_id = %process.exec_id,
                ?timeout,
                "exec timed out, killing it"
            );
            process.kill(libc::SIGKILL).await;
            if process.wait_for(KILL_WAIT).await.is_none() {
                warn!(
                    container_id = %process.container_id,
                    exec_id = %process.exec_id,
                    "exec process still not dead after SIGKILL"
                );
            }
            let _ = stop_tx.send(true);
            return Err(RuntimeError::Timeout {
                op: EXEC_TIMEOUT_OP,
                object: process.object.clone(),
                secs: timeout.as_secs().max(1),
            });
        }
    };
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(OUTPUT_DRAIN).await;
        let _ = stop_tx.send(true);
    });
    let stdout = joined_output(Some(out)).await;
    let stderr = joined_output(err).await;
    stopper.abort();
    Ok(ExecResult {
        exit_code: exit?,
        stdout,
        stderr,
    })
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

async fn joined_output(h: Option<JoinHandle<Vec<u8>>>) -> Vec<u8> {
    match h {
        Some(h) => h.await.unwrap_or_default(),
        None => Vec::new(),
    }
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
    names: Vec<&'static str>,
}

impl FifoDir {
    const STDIN: &'static str = "stdin";
    const STDOUT: &'static str = "stdout";
    const STDERR: &'static str = "stderr";

    /// stdout always (the shim wants somewhere to write even when nobody reads), stdin
    /// when asked for, stderr unless a terminal merges it into stdout.
    fn create(root: &Path, exec_id: &str, io: StdioRequest) -> std::io::Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)?;
        let dir = root.join(exec_id);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let mut me = FifoDir {
            dir,
            names: Vec::new(),
        };
        let wanted = [
            (Self::STDIN, io.stdin),
            (Self::STDOUT, true),
            (Self::STDERR, !io.tty),
        ];
        for (name, _) in wanted.into_iter().filter(|(_, w)| *w) {
            nix::unistd::mkfifo(
                &me.path(name),
                nix::sys::stat::Mode::from_bits_truncate(0o600),
            )
            .map_err(std::io::Error::from)?;
            me.names.push(name);
        }
        Ok(me)
    }

    fn has(&self, name: &str) -> bool {
        self.names.contains(&name)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The path the shim is given, empty for a stream the process does not have.
    fn uri(&self, name: &str) -> String {
        match self.has(name) {
            true => self.path(name).display().to_string(),
            false => String::new(),
        }
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

    /// Starts the blocking open of the stdin FIFO's write end on its own thread: it returns
    /// only once the shim opened the read end. A non-blocking open would fail (ENXIO) if it
    /// came first, and the shim opens its end in the background, so there is no moment to
    /// time it against.
    fn open_stdin_sender(&self) -> PendingSender {
        let path = self.path(Self::STDIN);
        let (tx, rx) = oneshot::channel();
        let opener = path.clone();
        // A thread that cannot be spawned drops `tx`, which `opened` reports.
        let _ = std::thread::Builder::new()
            .name("exec-stdin-open".into())
            .spawn(move || {
                let _ = tx.send(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .custom_flags(libc::O_CLOEXEC)
                        .open(&opener),
                );
            });
        PendingSender { path, rx: Some(rx) }
    }
}

/// The write end of a stdin FIFO being opened on a helper thread.
struct PendingSender {
    path: PathBuf,
    /// `None` once collected or released.
    rx: Option<oneshot::Receiver<std::io::Result<File>>>,
}

impl PendingSender {
    async fn opened(mut self) -> std::io::Result<pipe::Sender> {
        let rx = self.rx.as_mut().expect("not collected yet");
        match tokio::time::timeout(STDIN_OPEN_WAIT, rx).await {
            Ok(Ok(file)) => {
                self.rx = None;
                pipe::Sender::from_file(file?)
            }
            Ok(Err(_)) => {
                self.rx = None;
                Err(std::io::Error::other(
                    "the thread opening the stdin FIFO could not run",
                ))
            }
            Err(_) => {
                let path = self.path.clone();
                let _ = self.release().await;
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the shim did not open {} in time", path.display()),
                ))
            }
        }
    }

    /// The shim will never open the read end (the process was not started): open one
    /// ourselves and hold it until the helper thread's open returned, whether that open
    /// began before or after ours, so the thread ends. True when the thread answered.
    async fn release(mut self) -> bool {
        let Some(rx) = self.rx.take() else {
            return true;
        };
        let reader = self.reader();
        let released =
            reader.is_ok() && matches!(tokio::time::timeout(STDIN_OPEN_WAIT, rx).await, Ok(Ok(_)));
        if !released {
            warn!(fifo = %self.path.display(), "cannot release the stdin FIFO's opener thread");
        }
        released
    }

    fn reader(&self) -> std::io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&self.path)
    }
}

impl Drop for PendingSender {
    /// Dropped uncollected (the caller was cancelled): release the helper thread as
    /// `release` does, from a thread of its own since drop cannot wait.
    fn drop(&mut self) {
        let Some(rx) = self.rx.take() else {
            return;
        };
        let Ok(reader) = self.reader() else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("exec-stdin-release".into())
            .spawn(move || {
                let _ = rx.blocking_recv();
                drop(reader);
            });
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
    use tokio::io::AsyncWriteExt;

    fn all() -> StdioRequest {
        StdioRequest {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        }
    }

    #[test]
    fn fifo_dir_is_created_and_removed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("exec-x");
        {
            let f = FifoDir::create(root.path(), "exec-x", all()).unwrap();
            use std::os::unix::fs::FileTypeExt;
            for name in ["stdin", "stdout", "stderr"] {
                let t = std::fs::metadata(f.path(name)).unwrap().file_type();
                assert!(t.is_fifo(), "{name}");
            }
            assert!(dir.is_dir());
        }
        assert!(!dir.exists());
    }

    #[test]
    fn a_terminal_has_no_stderr_and_stdout_is_always_there() {
        let root = tempfile::tempdir().unwrap();
        let io = StdioRequest {
            tty: true,
            ..StdioRequest::default()
        };
        let f = FifoDir::create(root.path(), "e", io).unwrap();
        assert_eq!(f.uri("stdin"), "");
        assert_eq!(f.uri("stderr"), "");
        assert_eq!(f.uri("stdout"), f.path("stdout").display().to_string());
        assert!(!f.path("stderr").exists());
    }

    #[test]
    fn the_exec_process_takes_the_containers_with_new_args() {
        let mut p = serde_json::json!({
            "args": ["/pause"],
            "commandLine": "pause.exe",
            "cwd": "/work",
            "env": ["PATH=/bin", "TERM=dumb"],
            "user": {"uid": 1000, "gid": 1000},
        });
        let cmd = vec!["sh".to_string(), "-c".into(), "exit 3".into()];
        let mut plain = p.clone();
        exec_process(&mut plain, &cmd, false);
        assert_eq!(plain["args"], serde_json::json!(cmd));
        assert_eq!(plain["terminal"], false);
        assert!(plain.get("commandLine").is_none());
        assert_eq!(plain["env"], serde_json::json!(["PATH=/bin", "TERM=dumb"]));
        assert_eq!(plain["user"]["uid"], 1000);
        assert_eq!(plain["cwd"], "/work");

        exec_process(&mut p, &cmd, true);
        assert_eq!(p["terminal"], true);
        assert_eq!(p["env"], serde_json::json!(["PATH=/bin", "TERM=xterm"]));
    }

    #[tokio::test]
    async fn the_stdin_writer_opens_once_a_reader_comes() {
        let root = tempfile::tempdir().unwrap();
        let f = FifoDir::create(root.path(), "e", all()).unwrap();
        let pending = f.open_stdin_sender();
        // What the shim does: open the read end, later.
        let mut reader = pipe::OpenOptions::new()
            .open_receiver(f.path("stdin"))
            .unwrap();
        let mut tx = pending.opened().await.unwrap();
        tx.write_all(b"abc").await.unwrap();
        drop(tx);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"abc");
    }

    #[tokio::test]
    async fn a_stdin_writer_nobody_will_read_is_released() {
        let root = tempfile::tempdir().unwrap();
        let f = FifoDir::create(root.path(), "e", all()).unwrap();
        for _ in 0..20 {
            // Released at once, often before the helper thread even began its open.
            assert!(f.open_stdin_sender().release().await);
        }
    }

    #[tokio::test]
    async fn read_capped_keeps_the_first_bytes_and_reads_to_the_end() {
        let root = tempfile::tempdir().unwrap();
        let f = FifoDir::create(root.path(), "e", all()).unwrap();
        let rx = f.receiver("stdout").unwrap();
        let mut tx = pipe::OpenOptions::new()
            .open_sender(f.path("stdout"))
            .unwrap();
        let (_stop_tx, stop_rx) = watch::channel(false);
        let reader = tokio::spawn(read_capped(rx, stop_rx));
        let data = vec![b'x'; 3 * MAX_EXEC_OUTPUT];
        tx.write_all(&data).await.unwrap();
        drop(tx);
        let got = reader.await.unwrap();
        assert_eq!(got.len(), MAX_EXEC_OUTPUT);
    }

    #[tokio::test]
    async fn read_capped_stops_when_told() {
        let root = tempfile::tempdir().unwrap();
        let f = FifoDir::create(root.path(), "e", all()).unwrap();
        let rx = f.receiver("stdout").unwrap();
        // A writer that never closes, like a background child holding stdout.
        let mut tx = pipe::OpenOptions::new()
            .open_sender(f.path("stdout"))
            .unwrap();
        tx.write_all(b"partial").await.unwrap();
        let (stop_tx, stop_rx) = watch::channel(false);
        let reader = tokio::spawn(read_capped(rx, stop_rx));
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop_tx.send(true).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .expect("reader stopped")
            .unwrap();
        assert_eq!(got, b"partial");
        drop(tx);
    }
}
