//! Scripted exec processes for the fake runtime (`FakeRuntime::exec_stdio`), so the
//! server's copy loop can be unit-tested without containerd. A test queues what the next
//! execs do ([`ExecScript`]), and reads back what each was asked ([`ExecRecord`]).
//! Timing uses tokio's clock, so paused-time tests cost nothing.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::watch;

use super::HANG_UP_GRACE;
use crate::runtime::stdio::{
    BoxRead, BoxWrite, ProcessControl, ProcessEnd, ProcessStdio, StdioRequest, TermSize,
};
use crate::runtime::{Result, RuntimeError};

const PIPE_BUFFER: usize = 64 * 1024;

/// What one fake exec process does, in this order: fails to start (`fail_start`); else
/// writes `stdout` and `stderr` (both to stdout with a tty, as a terminal merges them),
/// echoes its stdin to stdout until stdin ends (`echo_stdin`), keeps running until hung
/// up (`run_until_hang_up`), closes its output and exits with `exit_code`. A hang-up ends
/// a running process with 129 (SIGHUP), or with 137 after [`HANG_UP_GRACE`] when it
/// `ignores_hang_up` (the SIGKILL).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ExecScript {
    pub fail_start: Option<String>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub echo_stdin: bool,
    pub run_until_hang_up: bool,
    pub ignores_hang_up: bool,
    pub exit_code: i32,
}

/// What one exec was asked, as the fake saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ExecRecord {
    pub container_id: String,
    pub cmd: Vec<String>,
    pub io: StdioRequest,
    /// Every resize, in order (only a tty process records them, as only it has a size).
    pub resizes: Vec<TermSize>,
    pub stdin_closed: bool,
    pub hung_up: bool,
    /// How often `finish` was called (the copy loop must call it exactly once).
    pub finished: u32,
    /// The exit code, once the process exited.
    pub exit: Option<i32>,
}

/// The fake's exec state: queued scripts and every exec so far. Clones share it.
#[derive(Clone, Default)]
pub(crate) struct FakeExecs(Arc<Mutex<Execs>>);

#[derive(Default)]
struct Execs {
    scripts: VecDeque<ExecScript>,
    records: Vec<Arc<Mutex<ExecRecord>>>,
}

impl FakeExecs {
    /// The next execs do these, in order; once they are used up an exec exits 0 at once.
    pub(crate) fn script(&self, scripts: impl IntoIterator<Item = ExecScript>) {
        self.0.lock().expect("fake execs").scripts.extend(scripts);
    }

    /// Every exec started so far (failed starts included), oldest first.
    pub(crate) fn records(&self) -> Vec<ExecRecord> {
        self.0
            .lock()
            .expect("fake execs")
            .records
            .iter()
            .map(|r| r.lock().expect("exec record").clone())
            .collect()
    }

    /// Starts the next scripted process (the caller checked that the container runs).
    pub(crate) fn start(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        io: StdioRequest,
    ) -> Result<ProcessStdio> {
        let io = StdioRequest {
            stderr: io.stderr && !io.tty,
            ..io
        };
        let record = Arc::new(Mutex::new(ExecRecord {
            container_id: container_id.to_string(),
            cmd,
            io,
            ..ExecRecord::default()
        }));
        let script = {
            let mut st = self.0.lock().expect("fake execs");
            st.records.push(record.clone());
            st.scripts.pop_front().unwrap_or_default()
        };
        if let Some(msg) = script.fail_start {
            return Err(RuntimeError::Spec {
                container: container_id.to_string(),
                field: format!("exec command {:?}", record.lock().expect("record").cmd),
                reason: msg,
            });
        }
        let (stdin_ours, stdin_theirs) = tokio::io::duplex(PIPE_BUFFER);
        let (stdout_ours, stdout_theirs) = tokio::io::duplex(PIPE_BUFFER);
        let (stderr_ours, stderr_theirs) = tokio::io::duplex(PIPE_BUFFER);
        let (exit_tx, exit) = watch::channel(None);
        let (stdin_closed, stdin_closed_rx) = watch::channel(false);
        let (hung_up, hung_up_rx) = watch::channel(false);
        let process = Process {
            script: script.clone(),
            tty: io.tty,
            stdin: io.stdin.then_some(stdin_ours),
            stdout: stdout_ours,
            stderr: stderr_ours,
            stdin_closed: stdin_closed_rx,
            hung_up: hung_up_rx,
        };
        let rec = record.clone();
        tokio::spawn(async move {
            let code = process.run().await;
            rec.lock().expect("record").exit = Some(code);
            let _ = exit_tx.send(Some(code));
        });
        Ok(ProcessStdio {
            stdin: io.stdin.then(|| Box::pin(stdin_theirs) as BoxWrite),
            stdout: io.stdout.then(|| Box::pin(stdout_theirs) as BoxRead),
            stderr: io.stderr.then(|| Box::pin(stderr_theirs) as BoxRead),
            control: Box::new(Control {
                record,
                tty: io.tty,
                exit,
                stdin_closed,
                hung_up,
            }),
        })
    }
}

/// The process side of a fake exec.
struct Process {
    script: ExecScript,
    tty: bool,
    stdin: Option<DuplexStream>,
    stdout: DuplexStream,
    stderr: DuplexStream,
    stdin_closed: watch::Receiver<bool>,
    hung_up: watch::Receiver<bool>,
}

impl Process {
    /// Runs the script; returns the exit code. Writes to a stream the client did not ask
    /// for fail and are ignored, as a real process's output into a drained FIFO vanishes.
    async fn run(mut self) -> i32 {
        let _ = self.stdout.write_all(&self.script.stdout).await;
        let err_to = match self.tty {
            true => &mut self.stdout,
            false => &mut self.stderr,
        };
        let _ = err_to.write_all(&self.script.stderr).await;
        if let (true, Some(mut stdin)) = (self.script.echo_stdin, self.stdin.take()) {
            let mut buf = vec![0u8; 8192];
            loop {
                // `None`: hung up.
                let read = tokio::select! {
                    r = stdin.read(&mut buf) => Some(r.unwrap_or(0)),
                    _ = self.stdin_closed.wait_for(|c| *c) => Some(0),
                    _ = self.hung_up.wait_for(|h| *h) => None,
                };
                let Some(read) = read else {
                    return hang_up_code(self.script.ignores_hang_up).await;
                };
                if read == 0 {
                    break;
                }
                let _ = self.stdout.write_all(&buf[..read]).await;
            }
        }
        if self.script.run_until_hang_up {
            let _ = self.hung_up.wait_for(|h| *h).await;
            return hang_up_code(self.script.ignores_hang_up).await;
        }
        self.script.exit_code
    }
}

/// SIGHUP ends a process, unless it ignores SIGHUP: then the SIGKILL after the grace does.
async fn hang_up_code(ignores_hang_up: bool) -> i32 {
    if ignores_hang_up {
        tokio::time::sleep(HANG_UP_GRACE).await;
        return 128 + libc::SIGKILL;
    }
    128 + libc::SIGHUP
}

/// The control side of a fake exec.
struct Control {
    record: Arc<Mutex<ExecRecord>>,
    tty: bool,
    exit: watch::Receiver<Option<i32>>,
    stdin_closed: watch::Sender<bool>,
    hung_up: watch::Sender<bool>,
}

impl Control {
    fn record(&self) -> std::sync::MutexGuard<'_, ExecRecord> {
        self.record.lock().expect("exec record")
    }
}

#[async_trait]
impl ProcessControl for Control {
    async fn resize(&self, size: TermSize) -> Result<()> {
        if self.tty {
            self.record().resizes.push(size);
        }
        Ok(())
    }

    async fn close_stdin(&self) -> Result<()> {
        self.record().stdin_closed = true;
        let _ = self.stdin_closed.send(true);
        Ok(())
    }

    async fn hang_up(&self) {
        self.record().hung_up = true;
        let _ = self.hung_up.send(true);
        // As the real one: returns once the process ended or the SIGKILL went out.
        let mut exit = self.exit.clone();
        let limit = HANG_UP_GRACE + std::time::Duration::from_millis(1);
        let _ = tokio::time::timeout(limit, exit.wait_for(Option::is_some)).await;
    }

    async fn wait(&self) -> Result<ProcessEnd> {
        let mut exit = self.exit.clone();
        let code = exit
            .wait_for(Option::is_some)
            .await
            .map(|c| c.unwrap_or_default())
            .map_err(|_| RuntimeError::Stdio {
                container: self.record().container_id.clone(),
                reason: "the fake exec process vanished".into(),
            })?;
        Ok(ProcessEnd::Exited(code))
    }

    async fn finish(&self) {
        self.record().finished += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd() -> Vec<String> {
        vec!["sh".into()]
    }

    async fn read_all(r: Option<BoxRead>) -> Vec<u8> {
        let mut out = Vec::new();
        r.expect("stream").read_to_end(&mut out).await.unwrap();
        out
    }

    #[tokio::test(start_paused = true)]
    async fn writes_its_output_and_exits_with_its_code() {
        let execs = FakeExecs::default();
        execs.script([ExecScript {
            stdout: b"out".to_vec(),
            stderr: b"err".to_vec(),
            exit_code: 3,
            ..ExecScript::default()
        }]);
        let io = StdioRequest {
            stdout: true,
            stderr: true,
            ..StdioRequest::default()
        };
        let p = execs.start("c1", cmd(), io).unwrap();
        assert!(p.stdin.is_none());
        assert_eq!(read_all(p.stdout).await, b"out");
        assert_eq!(read_all(p.stderr).await, b"err");
        assert_eq!(p.control.wait().await.unwrap(), ProcessEnd::Exited(3));
        p.control.finish().await;
        let r = &execs.records()[0];
        assert_eq!((r.exit, r.finished), (Some(3), 1));
    }

    #[tokio::test(start_paused = true)]
    async fn echoes_stdin_until_it_is_closed_and_records_resizes() {
        let execs = FakeExecs::default();
        execs.script([ExecScript {
            echo_stdin: true,
            ..ExecScript::default()
        }]);
        let io = StdioRequest {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: true,
        };
        let mut p = execs.start("c1", cmd(), io).unwrap();
        assert!(p.stderr.is_none(), "a tty has no stderr");
        let mut stdin = p.stdin.take().unwrap();
        stdin.write_all(b"abc").await.unwrap();
        let mut got = [0u8; 3];
        p.stdout
            .as_mut()
            .unwrap()
            .read_exact(&mut got)
            .await
            .unwrap();
        assert_eq!(&got, b"abc");
        let size = TermSize {
            width: 100,
            height: 40,
        };
        p.control.resize(size).await.unwrap();
        p.control.close_stdin().await.unwrap();
        assert_eq!(p.control.wait().await.unwrap(), ProcessEnd::Exited(0));
        let r = &execs.records()[0];
        assert_eq!(r.resizes, vec![size]);
        assert!(r.stdin_closed && !r.io.stderr);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hang_up_ends_it_with_sighup_or_sigkill_after_the_grace() {
        let execs = FakeExecs::default();
        let running = ExecScript {
            run_until_hang_up: true,
            ..ExecScript::default()
        };
        execs.script([
            running.clone(),
            ExecScript {
                ignores_hang_up: true,
                ..running
            },
        ]);
        for expected in [129, 137] {
            let p = execs.start("c1", cmd(), StdioRequest::default()).unwrap();
            p.control.hang_up().await;
            assert_eq!(
                p.control.wait().await.unwrap(),
                ProcessEnd::Exited(expected)
            );
        }
        assert!(execs.records().iter().all(|r| r.hung_up));
    }

    #[tokio::test(start_paused = true)]
    async fn the_fake_runtime_execs_only_in_running_containers() {
        use crate::runtime::fake::FakeRuntime;
        use crate::runtime::labels::PodRef;
        use crate::runtime::Runtime;
        let rt = FakeRuntime::new(&[], Default::default());
        let pod = PodRef {
            uid: "u1".into(),
            name: "p".into(),
            namespace: "default".into(),
        };
        rt.leave_running_sandbox(&pod, "sb1");
        rt.execs().script([ExecScript {
            exit_code: 3,
            ..ExecScript::default()
        }]);
        let p = rt
            .exec_stdio("sb1", cmd(), StdioRequest::default())
            .await
            .unwrap();
        assert_eq!(p.control.wait().await.unwrap(), ProcessEnd::Exited(3));
        assert_eq!(rt.execs().records()[0].container_id, "sb1");
        assert_eq!(rt.calls_of("exec_stdio"), vec!["exec_stdio POD#0 sh"]);

        let missing = rt
            .exec_stdio("nope", cmd(), StdioRequest::default())
            .await
            .err()
            .expect("no such container");
        assert!(missing.is_not_found(), "{missing}");
        rt.kill("sb1", libc::SIGKILL as u32).await.unwrap();
        let stopped = rt
            .exec_stdio("sb1", cmd(), StdioRequest::default())
            .await
            .err()
            .expect("not running");
        assert_eq!(
            stopped.to_string(),
            "container is in CONTAINER_EXITED state"
        );
        assert_eq!(rt.execs().records().len(), 1);
    }

    #[tokio::test]
    async fn a_start_failure_is_an_error_and_recorded() {
        let execs = FakeExecs::default();
        execs.script([ExecScript {
            fail_start: Some("executable file not found in $PATH".into()),
            ..ExecScript::default()
        }]);
        let e = execs
            .start("c1", vec!["nosuchbin".into()], StdioRequest::default())
            .err()
            .expect("start fails");
        assert!(e.to_string().contains("executable file not found"), "{e}");
        assert_eq!(execs.records()[0].cmd, vec!["nosuchbin".to_string()]);
    }
}
