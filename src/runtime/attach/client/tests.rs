use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::sync::Mutex as StdMutex;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::logs::RotationPolicy;
use crate::runtime::attach::relay::{self, RelayConfig, STDERR_FIFO, STDIN_FIFO, STDOUT_FIFO};

const DEADLINE: Duration = Duration::from_secs(60);

struct Relay {
    config: RelayConfig,
    _tmp: tempfile::TempDir,
}

fn start_relay(container: Container) -> Relay {
    let tmp = tempfile::tempdir().unwrap();
    let config = RelayConfig {
        dir: tmp.path().join("relay"),
        log_path: tmp.path().join("0.log"),
        rotation: RotationPolicy::DISABLED,
        container,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let c = config.clone();
    std::thread::spawn(move || {
        let _ = relay::serve(&c, |r| tx.send(r.is_ok()).unwrap());
    });
    assert!(rx.recv_timeout(DEADLINE).unwrap());
    Relay { config, _tmp: tmp }
}

fn open_write(path: std::path::PathBuf) -> File {
    OpenOptions::new().write(true).open(path).unwrap()
}

#[derive(Default)]
struct Recorder {
    resized: StdMutex<Vec<TermSize>>,
    stdin_closed: StdMutex<u32>,
}

#[async_trait]
impl TaskIoControl for Recorder {
    async fn resize(&self, size: TermSize) -> Result<()> {
        self.resized.lock().unwrap().push(size);
        Ok(())
    }

    async fn close_stdin(&self) -> Result<()> {
        *self.stdin_closed.lock().unwrap() += 1;
        Ok(())
    }
}

fn recorder() -> Arc<Recorder> {
    Arc::new(Recorder::default())
}

const ALL: StdioRequest = StdioRequest {
    stdin: true,
    stdout: true,
    stderr: true,
    tty: false,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_carries_input_and_output_and_ends_with_the_output() {
    let relay = start_relay(Container {
        stdin: true,
        tty: false,
        stdin_once: true,
    });
    let mut out = open_write(relay.config.fifo(STDOUT_FIFO));
    let err = open_write(relay.config.fifo(STDERR_FIFO));
    let mut stdin_fifo = File::open(relay.config.fifo(STDIN_FIFO)).unwrap();
    let container_input = tokio::task::spawn_blocking(move || {
        let mut all = Vec::new();
        stdin_fifo.read_to_end(&mut all).unwrap();
        all
    });
    let task = recorder();
    let (mut stdio, container) = connect(&relay.config.socket(), ALL, task.clone())
        .await
        .unwrap();
    assert!(container.stdin_once);

    let mut stdin = stdio.stdin.take().expect("the container has stdin");
    stdin.write_all(b"one\n").await.unwrap();
    stdio.control.close_stdin().await.unwrap();
    let input = tokio::time::timeout(DEADLINE, container_input)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(input, b"one\n", "stdinOnce: the input, then EOF");
    assert_eq!(*task.stdin_closed.lock().unwrap(), 1, "and CloseIO");

    out.write_all(b"got:one\n").unwrap();
    drop((out, err));
    let mut got = Vec::new();
    let mut stdout = stdio.stdout.take().unwrap();
    tokio::time::timeout(DEADLINE, stdout.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, b"got:one\n");
    let mut stderr = Vec::new();
    stdio
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .await
        .unwrap();
    assert!(stderr.is_empty());
    assert_eq!(
        tokio::time::timeout(DEADLINE, stdio.control.wait())
            .await
            .unwrap()
            .unwrap(),
        ProcessEnd::Detached
    );
    // Not a tty: a resize goes nowhere.
    stdio
        .control
        .resize(TermSize {
            width: 50,
            height: 20,
        })
        .await
        .unwrap();
    assert!(task.resized.lock().unwrap().is_empty());
    stdio.control.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tty_session_resizes_and_has_no_stderr_and_stdin_only_when_the_container_has_one() {
    let relay = start_relay(Container {
        stdin: false,
        tty: true,
        stdin_once: false,
    });
    let out = open_write(relay.config.fifo(STDOUT_FIFO));
    let task = recorder();
    let io = StdioRequest {
        stdin: true,
        stdout: true,
        stderr: false,
        tty: true,
    };
    let (stdio, container) = connect(&relay.config.socket(), io, task.clone())
        .await
        .unwrap();
    assert!(container.tty);
    assert!(stdio.stdin.is_none(), "no stdin on a container without one");
    assert!(stdio.stderr.is_none());
    let size = TermSize {
        width: 50,
        height: 20,
    };
    stdio.control.resize(size).await.unwrap();
    assert_eq!(*task.resized.lock().unwrap(), [size]);
    // A terminal's input never ends for the container with one session's.
    stdio.control.close_stdin().await.unwrap();
    assert_eq!(*task.stdin_closed.lock().unwrap(), 0);
    // Leaving does not end the container's output for anyone else.
    stdio.control.hang_up().await;
    stdio.control.finish().await;
    let (again, _) = connect(&relay.config.socket(), io, recorder())
        .await
        .unwrap();
    drop(out);
    assert_eq!(
        tokio::time::timeout(DEADLINE, again.control.wait())
            .await
            .unwrap()
            .unwrap(),
        ProcessEnd::Detached
    );
}

#[tokio::test]
async fn attaching_to_a_logger_container_streams_nothing_and_ends_when_it_stops() {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut stdio = silent_until(ALL, async move {
        let _ = stopped.await;
    });
    assert!(stdio.stdin.is_none());
    let mut stdout = stdio.stdout.take().unwrap();
    let reading = tokio::spawn(async move {
        let mut got = Vec::new();
        stdout.read_to_end(&mut got).await.map(|_| got)
    });
    stop.send(()).unwrap();
    assert!(reading.await.unwrap().unwrap().is_empty());
    assert_eq!(stdio.control.wait().await.unwrap(), ProcessEnd::Detached);
}
