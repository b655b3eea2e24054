//! The copy loop against in-memory streams and a scripted process: what reaches each side,
//! the order of the end (output closed before the status), hang-up on a vanished client.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_trait::async_trait;
use tokio::io::{duplex, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{mpsc, oneshot, watch};

use super::*;
use crate::runtime::stdio::TermSize;
use crate::runtime::RuntimeError;
use crate::server::streaming::StatusSink;

type Log = Arc<Mutex<Vec<String>>>;

fn log(l: &Log, s: impl Into<String>) {
    l.lock().unwrap().push(s.into());
}

/// A process whose end the test decides.
struct Control {
    log: Log,
    end: Mutex<Option<oneshot::Receiver<Result<ProcessEnd, RuntimeError>>>>,
    /// Fired by hang_up, so a test can end the process as a SIGHUP would.
    hung_up: watch::Sender<bool>,
}

#[async_trait]
impl ProcessControl for Control {
    async fn resize(&self, size: TermSize) -> crate::runtime::Result<()> {
        log(&self.log, format!("resize {}x{}", size.width, size.height));
        Ok(())
    }
    async fn close_stdin(&self) -> crate::runtime::Result<()> {
        log(&self.log, "close_stdin");
        Ok(())
    }
    async fn hang_up(&self) {
        log(&self.log, "hang_up");
        let _ = self.hung_up.send(true);
    }
    async fn wait(&self) -> crate::runtime::Result<ProcessEnd> {
        let rx = self.end.lock().unwrap().take().expect("wait once");
        rx.await.expect("the test ends the process")
    }
    async fn finish(&self) {
        log(&self.log, "finish");
    }
}

struct Sink {
    log: Log,
    tx: oneshot::Sender<StreamStatus>,
}

#[async_trait]
impl StatusSink for Sink {
    async fn finish(self: Box<Self>, status: StreamStatus) {
        log(&self.log, "status");
        let _ = self.tx.send(status);
    }
}

/// A client-side writer that records its shutdown in the log.
struct Recorded<W> {
    inner: W,
    name: &'static str,
    log: Log,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Recorded<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        if r.is_ready() {
            log(&self.log, format!("{} closed", self.name));
        }
        r
    }
}

/// A reader that fails: the client's connection broke.
struct Broken;

impl AsyncRead for Broken {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()))
    }
}

struct Harness {
    log: Log,
    end: oneshot::Sender<Result<ProcessEnd, RuntimeError>>,
    hung_up: watch::Receiver<bool>,
    control: Box<Control>,
}

fn harness() -> Harness {
    let log: Log = Default::default();
    let (end_tx, end_rx) = oneshot::channel();
    let (hung_tx, hung_rx) = watch::channel(false);
    let control = Box::new(Control {
        log: log.clone(),
        end: Mutex::new(Some(end_rx)),
        hung_up: hung_tx,
    });
    Harness {
        log,
        end: end_tx,
        hung_up: hung_rx,
        control,
    }
}

fn sink(log: &Log) -> (Box<Sink>, oneshot::Receiver<StreamStatus>) {
    let (tx, rx) = oneshot::channel();
    (
        Box::new(Sink {
            log: log.clone(),
            tx,
        }),
        rx,
    )
}

fn exec(cmd: &[&str]) -> SessionKind {
    SessionKind::Exec {
        command: cmd.iter().map(|s| s.to_string()).collect(),
    }
}

#[tokio::test]
async fn output_reaches_the_client_and_is_closed_before_a_non_zero_exit_is_reported() {
    let h = harness();
    let (sink, status) = sink(&h.log);
    let (mut proc_out_w, proc_out_r) = duplex(1 << 16);
    let (mut proc_err_w, proc_err_r) = duplex(1 << 16);
    let (client_out_w, mut client_out_r) = duplex(1 << 16);
    let (client_err_w, mut client_err_r) = duplex(1 << 16);
    let remote = RemoteStreams {
        stdin: None,
        stdout: Some(Box::pin(Recorded {
            inner: client_out_w,
            name: "stdout",
            log: h.log.clone(),
        })),
        stderr: Some(Box::pin(Recorded {
            inner: client_err_w,
            name: "stderr",
            log: h.log.clone(),
        })),
        resize: None,
        status: sink,
    };
    let process = ProcessStdio {
        stdin: None,
        stdout: Some(Box::pin(proc_out_r)),
        stderr: Some(Box::pin(proc_err_r)),
        control: h.control,
    };
    let session = tokio::spawn(run(exec(&["sh", "-c", "exit 3"]), remote, process));
    proc_out_w.write_all(b"o\n").await.unwrap();
    proc_err_w.write_all(b"e\n").await.unwrap();
    drop((proc_out_w, proc_err_w));
    h.end.send(Ok(ProcessEnd::Exited(3))).unwrap();
    let mut out = String::new();
    client_out_r.read_to_string(&mut out).await.unwrap();
    let mut err = String::new();
    client_err_r.read_to_string(&mut err).await.unwrap();
    assert_eq!((out.as_str(), err.as_str()), ("o\n", "e\n"));
    let status = status.await.unwrap();
    session.await.unwrap();
    assert_eq!(
        status,
        StreamStatus::NonZeroExit {
            command: vec!["sh".into(), "-c".into(), "exit 3".into()],
            code: 3
        }
    );
    let log = h.log.lock().unwrap().clone();
    let at = |s: &str| {
        log.iter()
            .position(|l| l == s)
            .unwrap_or_else(|| panic!("{s} in {log:?}"))
    };
    assert!(
        at("stdout closed") < at("status") && at("stderr closed") < at("status"),
        "{log:?}"
    );
    assert!(at("finish") < at("status"), "{log:?}");
}

#[tokio::test]
async fn stdin_reaches_the_process_and_its_end_closes_the_process_stdin() {
    let h = harness();
    let (sink, status) = sink(&h.log);
    let (mut client_in_w, client_in_r) = duplex(1 << 16);
    let (proc_in_w, mut proc_in_r) = duplex(1 << 16);
    let (size_tx, size_rx) = mpsc::channel(4);
    let remote = RemoteStreams {
        stdin: Some(Box::pin(client_in_r)),
        stdout: None,
        stderr: None,
        resize: Some(size_rx),
        status: sink,
    };
    let process = ProcessStdio {
        stdin: Some(Box::pin(proc_in_w)),
        stdout: None,
        stderr: None,
        control: h.control,
    };
    let session = tokio::spawn(run(exec(&["cat"]), remote, process));
    size_tx
        .send(TermSize {
            width: 100,
            height: 40,
        })
        .await
        .unwrap();
    client_in_w.write_all(b"abc").await.unwrap();
    drop(client_in_w);
    let mut got = Vec::new();
    proc_in_r.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"abc");
    // close_stdin comes right after the copy; wait for it before ending the process.
    tokio::time::timeout(Duration::from_secs(60), async {
        while !h.log.lock().unwrap().iter().any(|l| l == "close_stdin") {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("close_stdin within a minute");
    h.end.send(Ok(ProcessEnd::Exited(0))).unwrap();
    assert_eq!(status.await.unwrap(), StreamStatus::Success);
    session.await.unwrap();
    let log = h.log.lock().unwrap().clone();
    assert!(log.contains(&"close_stdin".to_string()), "{log:?}");
    assert!(log.contains(&"resize 100x40".to_string()), "{log:?}");
    assert!(!log.contains(&"hang_up".to_string()), "{log:?}");
}

#[tokio::test]
async fn a_vanished_client_hangs_the_process_up_and_it_is_still_finished() {
    let mut h = harness();
    let (sink, status) = sink(&h.log);
    let remote = RemoteStreams {
        stdin: Some(Box::pin(Broken)),
        stdout: None,
        stderr: None,
        resize: None,
        status: sink,
    };
    let process = ProcessStdio {
        stdin: None,
        stdout: None,
        stderr: None,
        control: h.control,
    };
    let session = tokio::spawn(run(exec(&["sleep", "1000"]), remote, process));
    // The process dies of the hang-up, as sleep does of SIGHUP.
    h.hung_up.wait_for(|h| *h).await.unwrap();
    h.end.send(Ok(ProcessEnd::Exited(129))).unwrap();
    session.await.unwrap();
    let log = h.log.lock().unwrap().clone();
    assert_eq!(log, vec!["hang_up", "finish", "status"]);
    assert!(matches!(
        status.await.unwrap(),
        StreamStatus::NonZeroExit { code: 129, .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn output_held_open_by_a_background_child_is_closed_after_the_drain_time() {
    let h = harness();
    let (sink, status) = sink(&h.log);
    // The process's stdout never ends: its writer is kept alive by the test.
    let (_proc_out_w, proc_out_r) = duplex(1 << 16);
    let (client_out_w, _client_out_r) = duplex(1 << 16);
    let remote = RemoteStreams {
        stdin: None,
        stdout: Some(Box::pin(client_out_w)),
        stderr: None,
        resize: None,
        status: sink,
    };
    let process = ProcessStdio {
        stdin: None,
        stdout: Some(Box::pin(proc_out_r)),
        stderr: None,
        control: h.control,
    };
    let session = tokio::spawn(run(exec(&["sh", "-c", "sleep 1000 &"]), remote, process));
    h.end.send(Ok(ProcessEnd::Exited(0))).unwrap();
    assert_eq!(status.await.unwrap(), StreamStatus::Success);
    session.await.unwrap();
}

#[tokio::test]
async fn a_runtime_failure_is_reported_in_upstreams_words() {
    let h = harness();
    let (sink, status) = sink(&h.log);
    let remote = RemoteStreams {
        stdin: None,
        stdout: None,
        stderr: None,
        resize: None,
        status: sink,
    };
    let process = ProcessStdio {
        stdin: None,
        stdout: None,
        stderr: None,
        control: h.control,
    };
    let session = tokio::spawn(run(SessionKind::Attach, remote, process));
    h.end
        .send(Err(RuntimeError::Stdio {
            container: "c".into(),
            reason: "gone".into(),
        }))
        .unwrap();
    session.await.unwrap();
    assert_eq!(
        status.await.unwrap(),
        StreamStatus::Internal {
            message: "error attaching to container: container c: gone".into()
        }
    );
    assert_eq!(
        exec(&["x"]).failure("boom"),
        StreamStatus::Internal {
            message: "error executing command in container: boom".into()
        }
    );
}
