//! containerd restarts under a running agent: it reconnects and nothing is lost. This file
//! is its own test binary so that no other test runs while containerd is down.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn containerd_pid() -> Option<u32> {
    let out = Command::new("pgrep")
        .args(["-x", "containerd"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

fn systemd_is_init() -> bool {
    std::fs::read_to_string("/proc/1/comm").is_ok_and(|c| c.trim() == "systemd")
}

/// Stops containerd, waits `down`, starts it again the way hack/setup-node.sh does.
fn restart_containerd(down: Duration) {
    if systemd_is_init() {
        assert!(Command::new("systemctl")
            .args(["stop", "containerd"])
            .status()
            .unwrap()
            .success());
        std::thread::sleep(down);
        assert!(Command::new("systemctl")
            .args(["start", "containerd"])
            .status()
            .unwrap()
            .success());
    } else {
        let pid = containerd_pid().expect("containerd runs");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while containerd_pid().is_some() {
            assert!(Instant::now() < deadline, "containerd did not stop");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(down);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open("/var/log/containerd.log")
            .unwrap();
        // containerd must outlive this test (it serves every later one), so it is not waited on.
        #[allow(clippy::zombie_processes)]
        Command::new("containerd")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("containerd starts");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ctr(&["version"], "").0 {
        assert!(Instant::now() < deadline, "containerd did not come back");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn agent_survives_a_containerd_restart() {
    let node = Node::start("containerd-restart");
    node.write_manifest("a.yaml", &busybox_pod("a", "Always", "exec sleep 3600"));
    let before = node.wait_pod("a", 60, "Running", |p| p["status"]["phase"] == "Running");
    restart_containerd(Duration::from_secs(3));
    // Nothing was restarted, and the agent goes on managing: a new pod starts, a removed one goes.
    node.write_manifest("b.yaml", &busybox_pod("b", "Always", "exec sleep 3600"));
    node.wait_pod("b", 90, "Running after the restart", |p| {
        p["status"]["phase"] == "Running"
    });
    let after = node.wait_pod("a", 30, "still Running", |p| {
        p["status"]["phase"] == "Running"
    });
    assert_eq!(
        container_status(&before, "main")["containerID"],
        container_status(&after, "main")["containerID"]
    );
    assert_eq!(container_status(&after, "main")["restartCount"], 0);
    node.remove_manifest("a.yaml");
    node.wait_gone("a", 60);
    let log = node.log();
    assert!(!log.contains("panicked"), "{log}");
}
