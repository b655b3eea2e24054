//! `Containerd::exec_sync` against the real containerd: output, exit codes, a command that
//! outlives its timeout (killed, reported as a timeout, nothing left running) and a binary
//! missing from the image. Runs only with KUBELET_RS_INTEGRATION=1, as root; owns the
//! containerd namespace `krs-exec-test-<pid>` and removes it afterwards, even on failure.

mod common;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    ctr, import_images, purge_namespace, require_integration, test_namespace, BUSYBOX, SOCKET,
};
use futures::FutureExt;
use kubelet_rs::runtime::exec::exec_fifo_dir;
use kubelet_rs::runtime::{Containerd, RuntimeError};

/// `krs-exec-test-<pid>`: a run of this file on the same containerd at the same time (another
/// checkout, say) has a namespace of its own.
fn ns() -> &'static str {
    static NS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NS.get_or_init(|| test_namespace("exec-test"))
}
const ID: &str = "krs-exec-target";

fn cmd(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Exec processes of the container that containerd still knows about (ids besides init).
fn exec_processes() -> Vec<String> {
    let (_, out) = ctr(&["tasks", "ps", ID], ns());
    out.lines().skip(1).map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and containerd: run hack/test.sh"]
async fn exec_sync_against_containerd() {
    require_integration("exec_sync_against_containerd");
    purge_namespace(ns());
    import_images(ns());
    let (ok, out) = ctr(&["run", "-d", BUSYBOX, ID, "sleep", "3600"], ns());
    assert!(ok, "ctr run: {out}");
    // containerd's default cgroupsPath for `ctr run` is /<namespace>/<id>.
    let ns_cgroup = format!("/{}", ns());
    assert!(!common::cgroups::existing(&ns_cgroup).is_empty());

    let outcome = AssertUnwindSafe(cases()).catch_unwind().await;
    // A clean-up failure (a cgroup left) must not hide the cases' own failure.
    let purged = std::panic::catch_unwind(|| purge_namespace(ns()));
    // containerd removes snapshots by garbage collection, shortly after their images are
    // gone; until then the namespace is not empty and cannot be removed.
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
    // runc takes only the container's own cgroup; the namespace's is the harness's to remove.
    let left = common::cgroups::existing(&ns_cgroup);
    assert!(left.is_empty(), "cgroups left: {left:?}");
}

async fn cases() {
    let c = Containerd::connect(Path::new(SOCKET), ns())
        .await
        .expect("connect to containerd");
    let t = Duration::from_secs(30);

    let r = c.exec_sync(ID, cmd(&["echo", "hi"]), t).await.unwrap();
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.stdout, b"hi\n");
    assert!(r.stderr.is_empty());

    let r = c
        .exec_sync(ID, cmd(&["sh", "-c", "echo out; echo err >&2; exit 3"]), t)
        .await
        .unwrap();
    assert_eq!(r.exit_code, 3);
    assert_eq!(r.stdout, b"out\n");
    assert_eq!(r.stderr, b"err\n");

    // The container's environment and working directory carry over.
    let r = c
        .exec_sync(ID, cmd(&["sh", "-c", "echo $PATH; pwd"]), t)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(text.contains("/bin"), "PATH not inherited: {text}");

    // Large output is capped, and the process is not blocked by a full pipe.
    let r = c
        .exec_sync(
            ID,
            cmd(&["sh", "-c", "head -c 200000 /dev/zero; exit 0"]),
            t,
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.stdout.len(), kubelet_rs::runtime::exec::MAX_EXEC_OUTPUT);

    let started = Instant::now();
    let e = c
        .exec_sync(ID, cmd(&["sleep", "30"]), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(e.is_exec_timeout(), "expected a timeout, got {e}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "timeout took {:?}",
        started.elapsed()
    );
    // The timed-out process was killed, not left behind.
    let deadline = Instant::now() + Duration::from_secs(5);
    while exec_processes().len() > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, ps) = ctr(&["tasks", "ps", ID], ns());
    assert_eq!(
        exec_processes().len(),
        1,
        "exec process left running:\n{ps}"
    );

    let e = c
        .exec_sync(ID, cmd(&["no-such-binary", "x"]), t)
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, RuntimeError::Spec { .. }) && msg.contains("no-such-binary"),
        "unclear error for a missing binary: {msg}"
    );
    println!("missing binary: {msg}");

    // The container survived all of this, and no FIFO directory is left over.
    let r = c.exec_sync(ID, cmd(&["true"]), t).await.unwrap();
    assert_eq!(r.exit_code, 0);
    let leftovers: Vec<_> = std::fs::read_dir(exec_fifo_dir(ns()))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "FIFO dirs left: {leftovers:?}");

    let e = c
        .exec_sync("no-such-container", cmd(&["true"]), t)
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e}");
}
