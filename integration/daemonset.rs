//! The Dockerfile's DaemonSet mode: the agent runs in a privileged container under containerd
//! (host network, host PID) with the host paths the Dockerfile documents, and runs a pod in
//! another containerd namespace. No base image can be pulled here, so the agent's rootfs is
//! assembled from local files as the test images are: the agent binary, the libraries `ldd`
//! names, and iptables (which the CNI bridge plugin calls from the agent's mount namespace).
//!
//! What each part shows (each fails without the piece it names):
//! - the pod reaches Running: the pinned netns reaches the host (/run/netns, Bidirectional)
//!   and the shim finds the log writer (a copy of the agent under the root dir);
//! - its log is under /var/log/pods on the host, written by that copy;
//! - its memory emptyDir is a tmpfs inside the container: the agent's mount under the root
//!   dir reached the host (root dir, Bidirectional);
//! - its IP is reserved in the host's /var/lib/cni, shared with every other CNI user;
//! - removing the manifest removes the containers, the netns, the IP and the tmpfs.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use serde_json::Value;

const TEST: &str = "daemonset";
/// The agent's own container lives here; its pods in PODS_NS.
const AGENT_NS: &str = "krs-daemonset-agent";
const AGENT_ID: &str = "krs-daemonset-agent";
const PODS_NS: &str = "krs-daemonset";
const NODE: &str = "t-daemonset";
const NETNS_DIR: &str = "/run/netns";
/// Where the image puts the agent (the Dockerfile's path).
const IMAGE_EXE: &str = "/usr/local/bin/kubelet-rs";

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Mount points at or below `dir` in the test's (the host's) mount namespace.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// The propagation of the mount at exactly `dir`: Some(true) shared, Some(false) not, None
/// when `dir` is no mount point.
fn mount_is_shared(dir: &Path) -> Option<bool> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table
        .lines()
        .rfind(|l| l.split(' ').nth(4).map(Path::new) == Some(dir))
        .map(|l| {
            l.split(" - ")
                .next()
                .unwrap()
                .split(' ')
                .skip(6)
                .any(|f| f.starts_with("shared:"))
        })
}

/// Makes `dir` a shared mount point of its own, as `ip netns add` does for /run/netns, so a
/// container's Bidirectional mount of it propagates back. Returns whether a mount was made.
fn make_shared_mount(dir: &Path) -> bool {
    match mount_is_shared(dir) {
        Some(true) => false,
        Some(false) => {
            mount(
                None::<&str>,
                dir,
                None::<&str>,
                MsFlags::MS_SHARED,
                None::<&str>,
            )
            .unwrap();
            false
        }
        None => {
            mount(
                Some(dir),
                dir,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )
            .unwrap();
            mount(
                None::<&str>,
                dir,
                None::<&str>,
                MsFlags::MS_SHARED,
                None::<&str>,
            )
            .unwrap();
            true
        }
    }
}

/// /run/netns as a node with iproute2 or systemd has it: a shared mount. Other tests' agents
/// pin namespaces there too; a bind made over pins would hide them, so it is made only while
/// none exist (the check and the mount are microseconds apart).
fn shared_netns_dir() -> bool {
    let dir = Path::new(NETNS_DIR);
    std::fs::create_dir_all(dir).unwrap();
    if mount_is_shared(dir).is_some() {
        return make_shared_mount(dir);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while mounts_under(dir).iter().any(|p| p != dir) {
        assert!(
            Instant::now() < deadline,
            "{NETNS_DIR} kept pinned namespaces of other tests for 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    make_shared_mount(dir)
}

/// Copies `bin` into `rootfs` at the same path (a hard link when possible: the debug agent is
/// large), with the shared libraries `ldd` names.
fn add_binary(rootfs: &Path, bin: &Path, at: &Path) {
    let dest = rootfs.join(at.strip_prefix("/").unwrap());
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    if std::fs::hard_link(bin, &dest).is_err() {
        std::fs::copy(bin, &dest).unwrap();
    }
    add_libraries(rootfs, bin);
}

fn add_libraries(rootfs: &Path, elf: &Path) {
    for line in sh(&format!("ldd '{}'", elf.display())).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux... (0x...)"
        let path = line
            .split("=>")
            .last()
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap_or_default();
        if !path.starts_with('/') {
            continue;
        }
        let dest = rootfs.join(&path[1..]);
        if dest.exists() {
            continue;
        }
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        // Follows the library's symlinks: the copy holds the real file under the linked name.
        std::fs::copy(path, &dest).unwrap();
    }
}

/// The image's rootfs: what the Dockerfile's final stage holds that this test needs.
fn assemble_rootfs(rootfs: &Path) {
    for d in ["etc", "tmp", "run", "var", "proc", "sys", "dev"] {
        std::fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    // Debian's layout: the agent pins namespaces under /var/run/netns.
    std::os::unix::fs::symlink("../run", rootfs.join("var/run")).unwrap();
    add_binary(
        rootfs,
        Path::new(env!("CARGO_BIN_EXE_kubelet-rs")),
        Path::new(IMAGE_EXE),
    );
    // The bridge plugin (ipMasq) and portmap run iptables from the agent's mount namespace;
    // the same backend as the host's (nft or legacy), as the image must match its host.
    let iptables = std::fs::canonicalize(sh("command -v iptables").trim()).unwrap();
    let name = iptables.file_name().unwrap().to_str().unwrap().to_string();
    add_binary(
        rootfs,
        &iptables,
        Path::new("/usr/sbin").join(&name).as_path(),
    );
    for tool in ["iptables", "iptables-save", "iptables-restore"] {
        std::os::unix::fs::symlink(&name, rootfs.join("usr/sbin").join(tool)).unwrap();
    }
    let xtables = sh("ls -d /usr/lib/*/xtables 2>/dev/null || ls -d /usr/lib/xtables");
    let xtables = Path::new(xtables.lines().next().unwrap().trim());
    let dest = rootfs.join(xtables.strip_prefix("/").unwrap());
    std::fs::create_dir_all(&dest).unwrap();
    for e in std::fs::read_dir(xtables).unwrap().flatten() {
        std::fs::copy(e.path(), dest.join(e.file_name())).unwrap();
        add_libraries(rootfs, &e.path());
    }
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\n").unwrap();
}

/// The documented host mounts, each at the same path inside: (path, options).
fn documented_mounts(root_dir: &Path, manifests: &Path) -> Vec<(PathBuf, &'static str)> {
    vec![
        // containerd's socket.
        ("/run/containerd".into(), "rbind:rw"),
        // Pod dirs, volumes: the agent's tmpfs mounts must reach the host, where runc runs.
        (root_dir.into(), "rbind:rw:rshared"),
        // Pinned network namespaces: runc opens them on the host.
        (NETNS_DIR.into(), "rbind:rw:rshared"),
        // host-local IPAM state, shared with every other CNI user of the node.
        ("/var/lib/cni".into(), "rbind:rw"),
        // CRI logs; the log writer runs on the host and writes them there.
        ("/var/log".into(), "rbind:rw"),
        ("/etc/cni/net.d".into(), "rbind:ro"),
        ("/opt/cni/bin".into(), "rbind:ro"),
        // Debian's plugins; /opt/cni/bin links to them here, and links must resolve inside.
        ("/usr/lib/cni".into(), "rbind:ro"),
        ("/sys/fs/cgroup".into(), "rbind:rw"),
        // Image snapshots: the agent reads an image's /etc/passwd and /etc/group from a view.
        ("/var/lib/containerd".into(), "rbind:ro:rslave"),
        // iptables' lock, so the agent's plugins and the host's iptables users take turns.
        ("/run/xtables.lock".into(), "bind:rw"),
        (manifests.into(), "rbind:ro"),
    ]
}

/// Everything the test made, undone in reverse on drop (also after a failed assertion).
struct DaemonSet {
    /// Holds the root dir, manifests, rootfs and log; removed last.
    _tmp: tempfile::TempDir,
    root_dir: PathBuf,
    manifests: PathBuf,
    rootfs: PathBuf,
    log_path: PathBuf,
    port: u16,
    agent: Option<Child>,
    made_netns_mount: bool,
}

impl DaemonSet {
    fn start() -> Option<DaemonSet> {
        require_integration(TEST);
        purge_namespace(PODS_NS);
        remove_agent_container();
        import_images(PODS_NS);

        let tmp = tempfile::tempdir().unwrap();
        let root_dir = tmp.path().join("root");
        let manifests = tmp.path().join("manifests");
        // Not "rootfs": runc 1.1 finds the mount holding the rootfs by string prefix, and
        // "<tmp>/root" (a shared mount) would match, failing pivot_root.
        let rootfs = tmp.path().join("image");
        for d in [&root_dir, &manifests, &rootfs] {
            std::fs::create_dir_all(d).unwrap();
        }
        assemble_rootfs(&rootfs);
        for dir in ["/var/lib/cni", "/var/log/pods", "/var/log/containers"] {
            std::fs::create_dir_all(dir).unwrap();
        }
        // iptables makes it on first use; the mount needs it now.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open("/run/xtables.lock")
            .unwrap();
        let mut ds = DaemonSet {
            log_path: tmp.path().join("agent.log"),
            root_dir,
            manifests,
            rootfs,
            _tmp: tmp,
            port: free_port(),
            agent: None,
            made_netns_mount: false,
        };
        ds.made_netns_mount = shared_netns_dir();
        // A node's /var/lib/kubelet-rs is a shared mount (systemd makes every mount shared);
        // this temporary root dir becomes one the same way /run/netns did.
        make_shared_mount(&ds.root_dir);
        ds.run_agent();
        Some(ds)
    }

    /// The agent's container dies (as in an upgrade's rollout) and a new one starts from
    /// the same image; the pods keep running meanwhile.
    fn restart_agent(&mut self) {
        remove_agent_container();
        if let Some(mut agent) = self.agent.take() {
            let _ = agent.wait();
        }
        self.run_agent();
    }

    fn run_agent(&mut self) {
        let mut cmd = Command::new("ctr");
        cmd.args(["--address", SOCKET, "-n", AGENT_NS, "run"])
            .args(["--rootfs", "--privileged", "--net-host"])
            // ctr 1.6 has no --pid-host: join the host's pid namespace, this test's own (pid
            // 1's would do on a node, but this sandbox denies access to pid 1).
            .arg("--with-ns")
            .arg(format!("pid:/proc/{}/ns/pid", std::process::id()))
            // Bidirectional mounts need a shared rootfs (containerd's CRI plugin sets the same).
            .args(["--rootfs-propagation", "rshared"])
            .args(["--cgroup", &format!("/{AGENT_ID}")])
            // What the image's config carries (a rootfs run gets no environment of its own):
            // the CNI plugins find iptables on the agent's PATH.
            .args([
                "--env",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ])
            .args(["--env", "NO_COLOR=1"]);
        for (path, options) in documented_mounts(&self.root_dir, &self.manifests) {
            let p = path.display();
            cmd.arg("--mount")
                .arg(format!("type=bind,src={p},dst={p},options={options}"));
        }
        cmd.arg(&self.rootfs).arg(AGENT_ID).arg(IMAGE_EXE).args([
            format!("--pod-manifest-path={}", self.manifests.display()),
            format!("--root-dir={}", self.root_dir.display()),
            format!("--containerd-namespace={PODS_NS}"),
            format!("--hostname-override={NODE}"),
            format!("--read-only-port={}", self.port),
            format!("--port={}", free_port()),
            "--healthz-port=0".into(),
            "--file-check-frequency=2s".into(),
            "--v=3".into(),
        ]);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap();
        // ctr stays attached and copies the agent's output into the log.
        self.agent = Some(
            cmd.stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("ctr runs"),
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        while http_get(self.port, "/healthz").is_none() {
            assert!(
                Instant::now() < deadline,
                "the agent's container did not listen: {}",
                self.log()
            );
            let exited = self.agent.as_mut().unwrap().try_wait().unwrap();
            assert!(
                exited.is_none(),
                "the agent's container exited: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn pod(&self, name: &str) -> Option<Value> {
        let (200, body) = http_get(self.port, "/pods")? else {
            return None;
        };
        let v: Value = serde_json::from_str(&body).ok()?;
        let full = format!("{name}-{NODE}");
        v["items"]
            .as_array()?
            .iter()
            .find(|p| p["metadata"]["name"] == full.as_str())
            .cloned()
    }

    fn wait(&self, what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "never true: {what}\nagent log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn write_manifest(&self, file: &str, content: &str) {
        let tmp = self.manifests.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, self.manifests.join(file)).unwrap();
    }

    fn pod_containers(&self) -> Vec<String> {
        let (ok, out) = ctr(&["containers", "ls", "-q"], PODS_NS);
        assert!(ok, "{out}");
        out.lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }
}

fn remove_agent_container() {
    let _ = ctr(&["tasks", "kill", "-s", "SIGKILL", AGENT_ID], AGENT_NS);
    for _ in 0..50 {
        if ctr(&["tasks", "rm", "-f", AGENT_ID], AGENT_NS).0
            || !ctr(&["tasks", "ls", "-q"], AGENT_NS).1.contains(AGENT_ID)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = ctr(&["containers", "rm", AGENT_ID], AGENT_NS);
    let _ = ctr(&["namespaces", "rm", AGENT_NS], "");
}

impl Drop for DaemonSet {
    fn drop(&mut self) {
        // The agent takes its pods down (that is under test), then everything else goes.
        if let Some(agent) = self.agent.as_mut() {
            if agent.try_wait().ok().flatten().is_none() {
                if let Ok(entries) = std::fs::read_dir(&self.manifests) {
                    for e in entries.flatten() {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
                let deadline = Instant::now() + Duration::from_secs(45);
                while Instant::now() < deadline && !self.pod_containers().is_empty() {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        remove_agent_container();
        if let Some(mut agent) = self.agent.take() {
            let _ = agent.kill();
            let _ = agent.wait();
        }
        purge_namespace(PODS_NS);
        for p in mounts_under(&self.root_dir).iter().rev() {
            let _ = umount2(p, MntFlags::MNT_DETACH);
        }
        // Only while no other test pins a namespace there: a plain umount refuses a mount
        // with mounts below it.
        if self.made_netns_mount {
            let _ = umount2(NETNS_DIR, MntFlags::empty());
        }
    }
}

/// The pod's sandbox netns, from the OCI spec of the container whose network namespace
/// names a path.
fn sandbox_netns(containers: &[String]) -> Option<PathBuf> {
    containers.iter().find_map(|id| {
        let (ok, out) = ctr(&["containers", "info", id], PODS_NS);
        assert!(ok, "{out}");
        let v: Value = serde_json::from_str(&out).ok()?;
        v["Spec"]["linux"]["namespaces"]
            .as_array()?
            .iter()
            .find(|n| n["type"] == "network")
            .and_then(|n| n["path"].as_str())
            .filter(|p| p.starts_with("/var/run/netns/") || p.starts_with("/run/netns/"))
            .map(PathBuf::from)
    })
}

/// Mounts below the root dir (not the root dir's own shared mount).
fn volume_mounts(root_dir: &Path) -> Vec<PathBuf> {
    mounts_under(root_dir)
        .into_iter()
        .filter(|p| p != root_dir)
        .collect()
}

fn is_nsfs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
}

fn ticks(log: &str) -> usize {
    log.lines()
        .filter(|l| l.ends_with(" stdout F tick"))
        .count()
}

/// Pids of the processes executing `exe` (compared by the /proc/<pid>/exe link).
fn processes_running(exe: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path().join("exe")).ok().as_deref() == Some(exe))
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn agent_in_a_privileged_container_runs_a_pod_with_the_documented_mounts() {
    let Some(mut ds) = DaemonSet::start() else {
        return;
    };
    ds.write_manifest(
        "web.yaml",
        r#"apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: docker.io/library/busybox:1.36
    command: ["sh", "-c", "echo hello-from-the-daemonset; grep ' /cache ' /proc/mounts; while true; do echo tick; sleep 1; done"]
    volumeMounts: [{name: cache, mountPath: /cache}]
  volumes: [{name: cache, emptyDir: {medium: Memory, sizeLimit: 8Mi}}]
"#,
    );
    let mut pod = Value::Null;
    ds.wait("pod web Running with a pod IP", 120, || {
        pod = ds.pod("web").unwrap_or(Value::Null);
        pod["status"]["phase"] == "Running" && pod["status"]["podIP"].as_str().is_some()
    });
    let ip = pod["status"]["podIP"].as_str().unwrap().to_string();
    assert_ne!(
        pod["status"]["podIP"], pod["status"]["hostIP"],
        "a pod network, not the host's"
    );
    let container_id = container_status(&pod, "main")["containerID"].clone();

    // The log, on the host, written by the host-side copy of the agent.
    let mut log = String::new();
    ds.wait("the container's log under /var/log/pods", 60, || {
        log = read_log(&pod, "main", 0);
        log.contains("tmpfs /cache") && ticks(&log) > 0
    });
    assert!(
        log.contains(" stdout F hello-from-the-daemonset\n"),
        "{log}"
    );
    let installed = ds.root_dir.join("bin/kubelet-rs");
    let agent = std::fs::metadata(env!("CARGO_BIN_EXE_kubelet-rs")).unwrap();
    let copy = std::fs::metadata(&installed).expect("the agent installed its log writer");
    assert_eq!(copy.len(), agent.len());
    assert_ne!(copy.ino(), agent.ino(), "a copy, not the image's file");
    let writers = processes_running(&installed);
    assert!(
        !writers.is_empty(),
        "no process runs {}",
        installed.display()
    );
    assert!(
        ds.log()
            .contains("containers' log writer is the installed copy"),
        "{}",
        ds.log()
    );

    // Host-visible network state.
    let netns = sandbox_netns(&ds.pod_containers()).expect("the sandbox names a pinned netns");
    assert!(
        is_nsfs(&netns),
        "{} is no namespace on the host",
        netns.display()
    );
    let network = std::fs::read_dir("/var/lib/cni/networks")
        .unwrap()
        .flatten()
        .find(|e| e.path().join(&ip).exists())
        .unwrap_or_else(|| panic!("{ip} is not reserved in the host's /var/lib/cni"));
    let reservation = network.path().join(&ip);
    let tmpfs_on_host = volume_mounts(&ds.root_dir);
    assert!(
        tmpfs_on_host.iter().any(|p| p.ends_with("cache")),
        "the emptyDir's tmpfs is not mounted on the host: {tmpfs_on_host:?}"
    );

    // An upgrade: the installed copy is another version, and the agent's container is
    // replaced. The new agent installs its own copy; the running writer keeps its file.
    let older = ds.root_dir.join("bin/.older");
    std::fs::write(&older, b"an older agent").unwrap();
    std::fs::rename(&older, &installed).unwrap();
    let before = ticks(&read_log(&pod, "main", 0));
    ds.restart_agent();
    ds.wait("the new agent installs its copy", 60, || {
        std::fs::metadata(&installed).is_ok_and(|m| m.len() == agent.len())
    });
    ds.wait(
        "the pod's log goes on across the agent's restart",
        60,
        || ticks(&read_log(&pod, "main", 0)) >= before + 3,
    );
    for pid in &writers {
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "log writer {pid} died with the agent"
        );
    }
    ds.wait("pod web Running again in the new agent's view", 60, || {
        ds.pod("web").is_some_and(|p| {
            p["status"]["phase"] == "Running"
                && container_status(&p, "main")["containerID"] == container_id
                && container_status(&p, "main")["restartCount"] == 0
        })
    });

    // The manifest goes: so do the containers and what they held on the host.
    std::fs::remove_file(ds.manifests.join("web.yaml")).unwrap();
    ds.wait("pod web gone from /pods", 60, || ds.pod("web").is_none());
    ds.wait("the pod's containers removed", 60, || {
        ds.pod_containers().is_empty()
    });
    ds.wait("the netns unpinned and removed", 30, || !netns.exists());
    ds.wait("the IP released", 30, || !reservation.exists());
    ds.wait("the tmpfs unmounted on the host", 30, || {
        volume_mounts(&ds.root_dir).is_empty()
    });
    ds.wait("the log writers gone", 30, || {
        writers
            .iter()
            .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    });
}
