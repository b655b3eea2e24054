//! `kubectl attach`'s runtime half against the real containerd: the agent gives containers
//! with `stdin`/`tty` FIFO stdio held by an io relay, and `Containerd::attach_stdio` (what
//! the /attach route calls) reaches them: input in, output out (and into the CRI log), a
//! session that leaves keeps the container running, the relay outlives `kill -9` of the
//! agent, a terminal resizes, and stdinOnce gives EOF after the first session's input.
//! Runs only with KUBELET_RS_INTEGRATION=1, as root.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use kubelet_rs::runtime::stdio::{ProcessEnd, ProcessStdio, StdioRequest, TermSize};
use kubelet_rs::runtime::Containerd;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DEADLINE: Duration = Duration::from_secs(90);

fn pod(name: &str, restart: &str, extra: &str, command: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: {restart}
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {BUSYBOX}
    command: {command}
{extra}"#
    )
}

const READ_LOOP: &str = r#"["sh", "-c", "while read l; do echo got:$l; done"]"#;

fn running(p: &Value) -> bool {
    container_status(p, "main")["state"]["running"].is_object()
}

fn container_id(p: &Value) -> String {
    container_status(p, "main")["containerID"]
        .as_str()
        .and_then(|id| id.strip_prefix("containerd://"))
        .expect("a running container has an id")
        .to_string()
}

async fn containerd(node: &Node) -> Containerd {
    Containerd::connect(Path::new(SOCKET), &node.ns)
        .await
        .expect("connect to containerd")
}

/// Reads `stdout` until what arrived contains `want`; returns everything read.
async fn read_until(stdio: &mut ProcessStdio, want: &str) -> String {
    let stdout = stdio.stdout.as_mut().expect("stdout was asked for");
    let mut got = Vec::new();
    let found = tokio::time::timeout(DEADLINE, async {
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains(want) {
            let n = stdout.read(&mut buf).await.expect("reading stdout");
            assert!(
                n > 0,
                "stdout ended before {want:?}: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    let got = String::from_utf8_lossy(&got).into_owned();
    assert!(
        found.is_ok(),
        "no {want:?} within {DEADLINE:?}, got {got:?}"
    );
    got
}

/// Attaches, sends `line` and waits for the loop's answer.
async fn echo_through(c: &Containerd, id: &str, line: &str) -> ProcessStdio {
    let io = StdioRequest {
        stdin: true,
        stdout: true,
        stderr: true,
        tty: false,
    };
    let mut stdio = c.attach_stdio(id, io).await.expect("attach");
    let stdin = stdio.stdin.as_mut().expect("the container has stdin");
    stdin
        .write_all(format!("{line}\n").as_bytes())
        .await
        .unwrap();
    read_until(&mut stdio, &format!("got:{line}")).await;
    stdio
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and containerd: run hack/test.sh"]
async fn attach_survives_detach_and_an_agent_restart() {
    let mut node = Node::start("attach-stdin");
    node.write_manifest(
        "a.yaml",
        &pod("a", "Always", "    stdin: true\n", READ_LOOP),
    );
    let p = node.wait_pod("a", 90, "main running", running);
    let id = container_id(&p);
    let c = containerd(&node).await;

    let first = echo_through(&c, &id, "one").await;
    node.wait_until(60, "got:one in the container log", || {
        read_log(&p, "main", 0).contains("got:one")
    });
    // The session leaves: the container goes on and another session works.
    first.control.hang_up().await;
    first.control.finish().await;
    let second = echo_through(&c, &id, "two").await;
    second.control.finish().await;

    node.kill9();
    node.launch();
    let again = node.wait_pod("a", 90, "main still running", running);
    assert_eq!(container_id(&again), id, "the container was not restarted");
    assert_eq!(container_status(&again, "main")["restartCount"], 0);
    let third = echo_through(&c, &id, "three").await;
    third.control.finish().await;
    node.wait_until(60, "every answer in the container log", || {
        let log = read_log(&p, "main", 0);
        ["got:one", "got:two", "got:three"]
            .iter()
            .all(|l| log.contains(l))
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and containerd: run hack/test.sh"]
async fn a_tty_session_resizes_the_terminal() {
    let node = Node::start("attach-tty");
    node.write_manifest(
        "t.yaml",
        &pod(
            "t",
            "Always",
            "    stdin: true\n    tty: true\n",
            r#"["sh"]"#,
        ),
    );
    let p = node.wait_pod("t", 90, "main running", running);
    let c = containerd(&node).await;
    let io = StdioRequest {
        stdin: true,
        stdout: true,
        stderr: false,
        tty: true,
    };
    let mut stdio = c.attach_stdio(&container_id(&p), io).await.expect("attach");
    assert!(stdio.stderr.is_none(), "a terminal has no separate stderr");
    stdio
        .control
        .resize(TermSize {
            width: 50,
            height: 20,
        })
        .await
        .expect("resize");
    let stdin = stdio.stdin.as_mut().unwrap();
    stdin
        .write_all(b"stty size; echo TERM=$TERM\n")
        .await
        .unwrap();
    let out = read_until(&mut stdio, "TERM=xterm").await;
    assert!(out.contains("20 50"), "{out:?}");
    stdio.control.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and containerd: run hack/test.sh"]
async fn stdin_once_ends_the_input_after_the_first_session() {
    let node = Node::start("attach-once");
    node.write_manifest(
        "o.yaml",
        &pod(
            "o",
            "Never",
            "    stdin: true\n    stdinOnce: true\n",
            READ_LOOP,
        ),
    );
    let p = node.wait_pod("o", 90, "main running", running);
    let c = containerd(&node).await;
    let stdio = echo_through(&c, &container_id(&p), "one").await;
    stdio.control.close_stdin().await.unwrap();
    // The loop reads EOF and the container exits 0, which ends the session.
    let end = tokio::time::timeout(DEADLINE, stdio.control.wait())
        .await
        .expect("the session ends with the container")
        .unwrap();
    assert_eq!(end, ProcessEnd::Detached);
    stdio.control.finish().await;
    let done = node.wait_pod("o", 90, "main terminated", |p| {
        container_status(p, "main")["state"]["terminated"].is_object()
    });
    let t = &container_status(&done, "main")["state"]["terminated"];
    assert_eq!(t["exitCode"], 0, "{t}");
    assert!(read_log(&done, "main", 0).contains("got:one"));
}
