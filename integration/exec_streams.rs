//! Streamed exec (`Containerd::exec_stdio`, what `kubectl exec` runs on) against the real
//! containerd: exit codes (a signal death as 128 + n), stdin to end-of-file, a terminal
//! resize, a background child holding stdout, hang-up (SIGHUP, and SIGKILL after the grace
//! for a process ignoring it), a missing binary, 20 parallel execs of 1 MiB, and nothing
//! left behind (no exec process in the task, no FIFO directory). Then port-forward's dial
//! inside a network namespace this test creates. Also the probe path measurement:
//! `exec_sync` against `exec_stdio`, 100 calls of `true` each (figures printed, not
//! asserted). Runs only with KUBELET_RS_INTEGRATION=1, as root; owns the containerd
//! namespace `krs-exec-streams-<pid>` and removes it afterwards, even on failure.

mod common;

use std::io::{Read, Write};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    ctr, import_images, purge_namespace, require_integration, test_namespace, BUSYBOX, SOCKET,
};
use futures::FutureExt;
use kubelet_rs::network::netns;
use kubelet_rs::network::port_forward;
use kubelet_rs::runtime::exec::exec_fifo_dir;
use kubelet_rs::runtime::stdio::{ProcessEnd, ProcessStdio, StdioRequest, TermSize};
use kubelet_rs::runtime::Containerd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn ns() -> &'static str {
    static NS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NS.get_or_init(|| test_namespace("exec-streams"))
}
const ID: &str = "krs-exec-streams";
const STOPPED: &str = "krs-exec-streams-stopped";
/// Generous: a loaded 2-core machine is slow, never this slow.
const DEADLINE: Duration = Duration::from_secs(120);

fn cmd(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn io(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> StdioRequest {
    StdioRequest {
        stdin,
        stdout,
        stderr,
        tty,
    }
}

/// Processes in the container besides its init (exec processes and their children).
fn extra_processes() -> Vec<String> {
    let (_, out) = ctr(&["tasks", "ps", ID], ns());
    out.lines().skip(2).map(str::to_string).collect()
}

fn fifo_dirs() -> Vec<PathBuf> {
    std::fs::read_dir(exec_fifo_dir(ns()))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Waits (up to the deadline) until `cond` holds; the condition's last view on failure.
async fn eventually(what: &str, mut cond: impl FnMut() -> Result<(), String>) {
    let until = Instant::now() + DEADLINE;
    loop {
        match cond() {
            Ok(()) => return,
            Err(e) if Instant::now() > until => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn nothing_left(what: &str) {
    eventually(what, || {
        let (procs, dirs) = (extra_processes(), fifo_dirs());
        match procs.is_empty() && dirs.is_empty() {
            true => Ok(()),
            false => Err(format!("processes {procs:?}, FIFO dirs {dirs:?}")),
        }
    })
    .await;
}

async fn read_all(p: &mut ProcessStdio) -> (Vec<u8>, Vec<u8>) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let o = async {
        if let Some(r) = p.stdout.as_mut() {
            r.read_to_end(&mut out).await.unwrap();
        }
    };
    let e = async {
        if let Some(r) = p.stderr.as_mut() {
            r.read_to_end(&mut err).await.unwrap();
        }
    };
    tokio::time::timeout(DEADLINE, async { tokio::join!(o, e) })
        .await
        .expect("output ends");
    (out, err)
}

async fn exit_of(p: &ProcessStdio) -> i32 {
    match tokio::time::timeout(DEADLINE, p.control.wait())
        .await
        .expect("the process exits")
        .unwrap()
    {
        ProcessEnd::Exited(code) => code,
        other => panic!("an exec ended as {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and containerd: run hack/test.sh"]
async fn exec_streams_against_containerd() {
    require_integration("exec_streams_against_containerd");
    purge_namespace(ns());
    import_images(ns());
    let (ok, out) = ctr(&["run", "-d", BUSYBOX, ID, "sleep", "3600"], ns());
    assert!(ok, "ctr run: {out}");
    let (ok, out) = ctr(&["run", "-d", BUSYBOX, STOPPED, "true"], ns());
    assert!(ok, "ctr run: {out}");

    let outcome = AssertUnwindSafe(cases()).catch_unwind().await;
    let purged = std::panic::catch_unwind(|| purge_namespace(ns()));
    for _ in 0..20 {
        if !ctr(&["namespaces", "ls", "-q"], "")
            .1
            .lines()
            .any(|l| l.trim() == ns())
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
        let _ = ctr(&["namespaces", "rm", ns()], "");
    }
    if let Err(panic) = outcome.and(purged) {
        std::panic::resume_unwind(panic);
    }
}

async fn cases() {
    let c = Containerd::connect(Path::new(SOCKET), ns())
        .await
        .expect("connect to containerd");

    // Exit codes, a signal death as 128 + 9, stdout and stderr apart.
    for (script, code, out, err) in [
        ("echo o; echo e >&2; exit 3", 3, "o\n", "e\n"),
        ("kill -9 $$", 137, "", ""),
    ] {
        let mut p = c
            .exec_stdio(ID, cmd(&["sh", "-c", script]), io(false, true, true, false))
            .await
            .unwrap();
        assert!(p.stdin.is_none());
        let (o, e) = read_all(&mut p).await;
        assert_eq!(exit_of(&p).await, code, "{script}");
        assert_eq!(
            (o.as_slice(), e.as_slice()),
            (out.as_bytes(), err.as_bytes())
        );
        p.control.finish().await;
    }
    nothing_left("after exit codes").await;

    // stdin piped and closed: cat returns what it got, then exits 0.
    let mut p = c
        .exec_stdio(ID, cmd(&["cat"]), io(true, true, true, false))
        .await
        .unwrap();
    let mut stdin = p.stdin.take().unwrap();
    stdin.write_all(b"hello through a FIFO\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    p.control.close_stdin().await.unwrap();
    let (o, _) = read_all(&mut p).await;
    assert_eq!(o, b"hello through a FIFO\n");
    assert_eq!(exit_of(&p).await, 0);
    // Writing after the close is an error, not a hang.
    assert!(stdin.write_all(b"late").await.is_err());
    p.control.finish().await;

    // A terminal with a resize: stty reports the size set. The command waits for a line
    // so the resize lands first; a terminal has no stderr.
    let mut p = c
        .exec_stdio(
            ID,
            cmd(&["sh", "-c", "read x; stty size; echo $TERM"]),
            io(true, true, true, true),
        )
        .await
        .unwrap();
    assert!(p.stderr.is_none());
    p.control
        .resize(TermSize {
            width: 100,
            height: 40,
        })
        .await
        .unwrap();
    let mut stdin = p.stdin.take().unwrap();
    stdin.write_all(b"go\r").await.unwrap();
    let (o, _) = read_all(&mut p).await;
    let text = String::from_utf8_lossy(&o);
    assert!(text.contains("40 100"), "stty size said {text:?}");
    assert!(text.contains("xterm"), "TERM: {text:?}");
    assert_eq!(exit_of(&p).await, 0);
    p.control.finish().await;
    nothing_left("after stdin and tty").await;

    // A hang-up: SIGHUP ends sleep (128 + 1); one that ignores SIGHUP is SIGKILLed after the
    // grace. finish() removes the process and its FIFOs.
    for (script, code) in [
        ("exec sleep 1000", 129),
        ("trap '' HUP; exec sleep 1000", 137),
    ] {
        let p = c
            .exec_stdio(ID, cmd(&["sh", "-c", script]), io(false, true, true, false))
            .await
            .unwrap();
        // Signalled only once `sleep` runs: a shell not yet past its `trap` would die of
        // the SIGHUP it is meant to ignore.
        eventually("the exec's sleep runs", || {
            let procs = extra_processes();
            let sleeping = procs.iter().any(|line| {
                let pid = line.split_whitespace().next().unwrap_or_default();
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim() == "sleep")
            });
            match sleeping {
                true => Ok(()),
                false => Err(format!("no sleep among {procs:?}")),
            }
        })
        .await;
        tokio::time::timeout(DEADLINE, p.control.hang_up())
            .await
            .expect("hang_up returns");
        assert_eq!(exit_of(&p).await, code, "{script}");
        drop(p.stdout);
        drop(p.stderr);
        p.control.finish().await;
        // A second finish is harmless.
        p.control.finish().await;
        nothing_left(script).await;
    }

    // A background child holding stdout: the exec's exit is reported, and finish returns.
    let mut p = c
        .exec_stdio(
            ID,
            cmd(&["sh", "-c", "sleep 1000 & echo $!"]),
            io(false, true, true, false),
        )
        .await
        .unwrap();
    assert_eq!(exit_of(&p).await, 0);
    // The child's pid, one line.
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while byte[0] != b'\n' {
        p.stdout
            .as_mut()
            .unwrap()
            .read_exact(&mut byte)
            .await
            .unwrap();
        line.push(byte[0]);
    }
    let child = String::from_utf8(line).unwrap().trim().to_string();
    // What the copy loop does: a bounded drain (the pipe does not end), then drop and finish.
    let drained = tokio::time::timeout(Duration::from_secs(1), read_all(&mut p)).await;
    assert!(drained.is_err(), "the background child holds stdout open");
    let ProcessStdio { control, .. } = p;
    tokio::time::timeout(DEADLINE, control.finish())
        .await
        .expect("finish returns");
    eventually("the FIFO dir goes", || match fifo_dirs().is_empty() {
        true => Ok(()),
        false => Err(format!("{:?}", fifo_dirs())),
    })
    .await;
    let r = c
        .exec_sync(ID, cmd(&["kill", &child]), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0, "the background sleep was still there");
    nothing_left("after the background child").await;

    // A missing binary is an error, and nothing stays.
    let e = c
        .exec_stdio(ID, cmd(&["nosuchbin"]), io(true, true, true, false))
        .await
        .err()
        .expect("nosuchbin cannot start");
    let msg = e.to_string();
    assert!(
        msg.contains("nosuchbin") && msg.contains("executable file not found"),
        "{msg}"
    );
    println!("missing binary: {msg}");
    nothing_left("after nosuchbin").await;

    // Containers that are not running, or not there.
    eventually("the short container stops", || {
        let (_, out) = ctr(&["tasks", "ls"], ns());
        match out
            .lines()
            .any(|l| l.starts_with(STOPPED) && l.contains("STOPPED"))
        {
            true => Ok(()),
            false => Err(out),
        }
    })
    .await;
    let e = c
        .exec_stdio(STOPPED, cmd(&["true"]), io(false, true, false, false))
        .await
        .err()
        .expect("no exec in a stopped container");
    assert_eq!(e.to_string(), "container is in CONTAINER_EXITED state");
    let e = c
        .exec_stdio(
            "no-such-container",
            cmd(&["true"]),
            io(false, true, false, false),
        )
        .await
        .err()
        .expect("no such container");
    assert!(e.is_not_found(), "{e}");
    // Probes and hooks (exec_sync) check the state only when the exec fails; the error is
    // the same.
    let e = c
        .exec_sync(STOPPED, cmd(&["true"]), Duration::from_secs(30))
        .await
        .expect_err("no exec_sync in a stopped container");
    assert_eq!(e.to_string(), "container is in CONTAINER_EXITED state");
    let e = c
        .exec_sync("no-such-container", cmd(&["true"]), Duration::from_secs(30))
        .await
        .expect_err("no such container");
    assert!(e.is_not_found(), "{e}");

    // 20 parallel execs of 1 MiB each.
    let runs = (0..20).map(|_| {
        let c = c.clone();
        async move {
            let mut p = c
                .exec_stdio(
                    ID,
                    cmd(&["head", "-c", "1048576", "/dev/zero"]),
                    io(false, true, true, false),
                )
                .await
                .unwrap();
            let (o, e) = read_all(&mut p).await;
            let code = exit_of(&p).await;
            p.control.finish().await;
            (o.len(), e.len(), code)
        }
    });
    for got in futures::future::join_all(runs).await {
        assert_eq!(got, (1_048_576, 0, 0));
    }
    nothing_left("after 20 parallel execs").await;

    measure_probe_paths(&c).await;
}

/// Point 4 of the issue: which exec path is cheaper for probes. Prints latency p50/p99 and
/// this process's CPU time per call for 100 calls of `true` each way.
async fn measure_probe_paths(c: &Containerd) {
    const CALLS: usize = 100;
    for path in ["exec_sync", "exec_stdio"] {
        let mut took = Vec::with_capacity(CALLS);
        let cpu_before = cpu_time();
        for _ in 0..CALLS {
            let started = Instant::now();
            let code = match path {
                "exec_sync" => {
                    c.exec_sync(ID, cmd(&["true"]), Duration::from_secs(30))
                        .await
                        .unwrap()
                        .exit_code
                }
                _ => {
                    let mut p = c
                        .exec_stdio(ID, cmd(&["true"]), io(false, true, true, false))
                        .await
                        .unwrap();
                    read_all(&mut p).await;
                    let code = exit_of(&p).await;
                    p.control.finish().await;
                    code
                }
            };
            assert_eq!(code, 0);
            took.push(started.elapsed());
        }
        let cpu = cpu_time() - cpu_before;
        took.sort();
        println!(
            "probe path {path}: {CALLS} calls of `true`: p50 {:?}, p99 {:?}, agent CPU {:?} per call",
            took[CALLS / 2],
            took[CALLS * 99 / 100],
            cpu / CALLS as u32
        );
    }
    nothing_left("after the measurement").await;
}

/// User + system CPU time of this process so far (clock-tick resolution).
fn cpu_time() -> Duration {
    let stat = procfs::process::Process::myself().unwrap().stat().unwrap();
    let ticks = stat.utime + stat.stime;
    Duration::from_secs_f64(ticks as f64 / procfs::ticks_per_second() as f64)
}

/// A network namespace with a listener inside on port P, and one on the host on the same P
/// answering differently: the dial must reach the pod's. A closed port gives upstream's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: run hack/test.sh"]
async fn port_forward_dials_inside_the_namespace() {
    require_integration("port_forward_dials_inside_the_namespace");
    let dir = tempfile::tempdir().unwrap();
    let path = netns::pin(dir.path(), &netns::new_netns_name())
        .await
        .unwrap();
    let outcome = AssertUnwindSafe(port_forward_cases(&path))
        .catch_unwind()
        .await;
    netns::remove(&path).await.unwrap();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn port_forward_cases(path: &Path) {
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    let pod = listen_inside(path, port);
    let answer = |l: std::net::TcpListener, text: &'static [u8]| {
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = [0u8; 4];
            s.read_exact(&mut got).unwrap();
            s.write_all(text).unwrap();
        })
    };
    let _host_answers = answer(host, b"host");
    let pod_answers = answer(pod, b"pod!");

    let mut conn = port_forward::dial(Some(path), port).await.unwrap();
    conn.write_all(b"ping").await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(DEADLINE, conn.read_to_end(&mut got))
        .await
        .expect("the pod's listener answers")
        .unwrap();
    assert_eq!(got, b"pod!");
    pod_answers.join().unwrap();

    let closed = port.wrapping_add(1).max(1);
    let e = port_forward::dial(Some(path), closed).await.unwrap_err();
    let text = e.to_string();
    let expected = format!(
        "failed to connect to localhost:{closed} inside namespace \"{}\", IPv4: \
         dial tcp4 127.0.0.1:{closed}: connect: connection refused IPv6 dial tcp6 [::1]:{closed}: ",
        path.display()
    );
    assert!(text.starts_with(&expected), "{text}");
    println!("closed port: {text}");
}

/// Brings up `lo` in the namespace and binds 127.0.0.1:<port> there, from a thread that
/// enters it and exits afterwards (the socket stays in the namespace).
fn listen_inside(path: &Path, port: u16) -> std::net::TcpListener {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let ns = std::fs::File::open(&path).unwrap();
        nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let up = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(up.success(), "ip link set lo up");
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap()
    })
    .join()
    .unwrap()
}
