//! Test harness: runs the real `kubelet-rs` binary against the real containerd, each test
//! in a containerd namespace (per test and process), root dir, manifest folder, node name and
//! port of its own, so tests run in parallel without seeing each other's pods.
//!
//! Tests that need root and containerd carry
//! `#[ignore = "needs root and containerd: run hack/test.sh"]`, so a plain
//! `cargo test` reports them as ignored. hack/test.sh runs them with `--include-ignored` and
//! KUBELET_RS_INTEGRATION=1; once run, a missing containerd or test image is a failure,
//! never a skip. Each test removes the cgroups its containers left (see `cgroups`).

#![allow(dead_code)]

pub mod cgroups;
pub mod cluster;
pub mod csi;
pub mod ports;
pub mod registry;

pub use ports::free_port;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BUSYBOX: &str = "docker.io/library/busybox:1.36";
pub const SOCKET: &str = "/run/containerd/containerd.sock";

/// The mount points under `dir`, from the host's mount table.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let dir = dir.to_string_lossy().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|p| p.starts_with(&dir))
        .collect()
}

/// Panics unless this host may run an integration test and has what it needs. Reached only
/// when the ignored tests were asked for (`--ignored`, `--include-ignored`), so nothing here
/// is a skip: a test that was asked for and cannot run fails, naming what is missing.
/// KUBELET_RS_INTEGRATION=1 is the consent to start real pods, bridges and cgroups on this
/// host as root; hack/test.sh sets it.
pub fn require_integration(test: &str) {
    assert!(
        std::env::var("KUBELET_RS_INTEGRATION").as_deref() == Ok("1"),
        "{test}: integration tests start real pods on this host; set KUBELET_RS_INTEGRATION=1 \
         (as root, with containerd running) or run hack/test.sh"
    );
    assert!(
        nix::unistd::geteuid().is_root(),
        "{test}: KUBELET_RS_INTEGRATION=1 but not root"
    );
    assert!(
        Path::new(SOCKET).exists(),
        "{test}: containerd's socket {SOCKET} is missing: run hack/setup-node.sh"
    );
    let out = ctr(&["version"], "");
    assert!(out.0, "{test}: containerd does not answer: {}", out.1);
}

/// Runs `cmd` to its end; (success, stdout then stderr). Panics if it cannot start.
pub fn run_text(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{:?} does not start: {e}", cmd.get_program()));
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), s)
}

/// Runs `ctr` (in namespace `ns` unless empty); returns (success, stdout+stderr).
pub fn ctr(args: &[&str], ns: &str) -> (bool, String) {
    let mut cmd = Command::new("ctr");
    cmd.args(["--address", SOCKET, "--connect-timeout", "5s"]);
    if !ns.is_empty() {
        cmd.args(["-n", ns]);
    }
    run_text(cmd.args(args))
}

fn image_cache() -> PathBuf {
    PathBuf::from(
        std::env::var("KUBELET_RS_CACHE").unwrap_or_else(|_| "/var/cache/kubelet-rs".into()),
    )
    .join("images")
}

/// Imports the test images (built by hack/build-images.sh) into a namespace.
pub fn import_images(ns: &str) {
    import_named_images(ns, &["pause", "busybox"]);
}

/// Imports some of the test images into a namespace.
pub fn import_named_images(ns: &str, names: &[&str]) {
    for name in names {
        let tar = image_cache().join(format!("{name}.oci.tar"));
        assert!(
            tar.exists(),
            "test image {} is missing: run hack/build-images.sh",
            tar.display()
        );
        import_archive(ns, &tar);
    }
}

/// Loads an image tarball into a namespace through the agent's own importer, as
/// hack/build-images.sh does.
pub fn import_archive(ns: &str, tar: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubelet-rs"))
        .args(["image", "import", tar.to_str().unwrap(), "--namespace", ns])
        .args(["--address", SOCKET])
        .output()
        .expect("kubelet-rs image import runs");
    assert!(
        out.status.success(),
        "importing {} into {ns}: {}",
        tar.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// GET on 127.0.0.1:port; (status code, body).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_string()))
}

/// One agent under test and everything it owns.
pub struct Node {
    pub test: String,
    pub ns: String,
    pub node_name: String,
    pub manifests: tempfile::TempDir,
    pub root: tempfile::TempDir,
    pub port: u16,
    /// The authenticated TLS port (10250 upstream).
    pub secure_port: u16,
    pub extra_args: Vec<String>,
    pub log_path: PathBuf,
    child: Option<Child>,
    /// Every pod uid `/pods` showed: their pod-level cgroups are checked and removed on drop,
    /// also for pods the agent removed while it ran.
    seen_pod_uids: Mutex<BTreeSet<String>>,
}

impl Node {
    pub fn start(test: &str) -> Node {
        Self::start_with(test, &[])
    }

    pub fn start_with(test: &str, extra: &[&str]) -> Node {
        Self::start_with_images(test, extra, &["pause", "busybox"])
    }

    pub fn agent_args(&self) -> Vec<String> {
        let mut a = vec![
            format!("--pod-manifest-path={}", self.manifests.path().display()),
            format!("--root-dir={}", self.root.path().join("root").display()),
            format!("--containerd-namespace={}", self.ns),
            format!("--hostname-override={}", self.node_name),
            format!("--read-only-port={}", self.port),
            format!("--port={}", self.secure_port),
            "--healthz-port=0".to_string(),
            "--file-check-frequency=2s".to_string(),
            "--v=3".to_string(),
        ];
        a.extend(self.extra_args.iter().cloned());
        a
    }

    /// Starts (or restarts) the agent process, appending to the same log.
    pub fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kubelet-rs"))
            .args(self.agent_args())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kubelet-rs starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while http_get(self.port, "/healthz").is_none() {
            assert!(
                Instant::now() < deadline,
                "agent did not listen: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// kill -9: the agent dies with its pods running.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn pod_name(&self, name: &str) -> String {
        format!("{name}-{}", self.node_name)
    }

    pub fn write_manifest(&self, file: &str, content: &str) {
        let tmp = self.manifests.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, content).unwrap();
        std::fs::rename(&tmp, self.manifests.path().join(file)).unwrap();
    }

    pub fn remove_manifest(&self, file: &str) {
        std::fs::remove_file(self.manifests.path().join(file)).unwrap();
    }

    pub fn pods(&self) -> Vec<Value> {
        let Some((200, body)) = http_get(self.port, "/pods") else {
            return Vec::new();
        };
        let v: Value = serde_json::from_str(&body).expect("/pods is JSON");
        let items = v["items"].as_array().cloned().unwrap_or_default();
        let mut seen = self.seen_pod_uids.lock().unwrap_or_else(|p| p.into_inner());
        seen.extend(
            items
                .iter()
                .filter_map(|p| p["metadata"]["uid"].as_str())
                .map(str::to_string),
        );
        items
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        let full = self.pod_name(name);
        self.pods()
            .into_iter()
            .find(|p| p["metadata"]["name"] == full.as_str())
    }

    /// Waits until the pod exists and `pred` holds; panics with the last status and the
    /// agent's log otherwise.
    pub fn wait_pod(
        &self,
        name: &str,
        timeout_secs: u64,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let label = format!("{}: pod {name}", self.test);
        wait_object(
            &label,
            timeout_secs,
            what,
            || self.pod(name),
            pred,
            |p| serde_json::to_string_pretty(&p["status"]).unwrap(),
            || self.log(),
        )
    }

    pub fn wait_gone(&self, name: &str, timeout_secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(timeout_secs);
        while self.pod(name).is_some() {
            assert!(
                Instant::now() < deadline,
                "{}: pod {name} was not removed\n{}",
                self.test,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Container ids in this node's namespace.
    pub fn containers(&self) -> Vec<String> {
        let (ok, out) = ctr(&["containers", "ls", "-q"], &self.ns);
        assert!(ok, "{out}");
        out.lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// (container id, pid, status) of the tasks in this node's namespace.
    pub fn tasks(&self) -> Vec<(String, u32, String)> {
        let (ok, out) = ctr(&["tasks", "ls"], &self.ns);
        assert!(ok, "{out}");
        out.lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((
                    f.first()?.to_string(),
                    f.get(1)?.parse().ok()?,
                    f.get(2)?.to_string(),
                ))
            })
            .collect()
    }

    pub fn wait_until(&self, timeout_secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(timeout_secs);
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "{}: never true: {what}\nagent log:\n{}",
                self.test,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Node {
    /// As `start_with`, but only the named test images (`pause`, `busybox`) are imported
    /// into the namespace: for tests where the agent must pull the rest itself.
    pub fn start_with_images(test: &str, extra: &[&str], images: &[&str]) -> Node {
        let mut node = Self::prepare(test, extra, images);
        node.launch();
        node
    }

    /// Everything `start_with_images` does except starting the agent: for harnesses that
    /// need the node's name before the agent's flags are final (cluster mode's kubeconfig).
    pub fn prepare(test: &str, extra: &[&str], images: &[&str]) -> Node {
        require_integration(test);
        let slug: String = test
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let ns = test_namespace(&slug);
        import_named_images(&ns, images);
        let root = tempfile::tempdir().unwrap();
        let log_path = root.path().join("agent.log");
        let node = Node {
            test: test.to_string(),
            node_name: format!("t-{slug}"),
            ns,
            manifests: tempfile::tempdir().unwrap(),
            root,
            port: free_port(),
            secure_port: free_port(),
            extra_args: extra.iter().map(|s| s.to_string()).collect(),
            log_path,
            child: None,
            seen_pod_uids: Mutex::default(),
        };
        node
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Let the agent clean up what it made (that path is under test too), then make sure.
        if self.is_running() {
            if let Ok(entries) = std::fs::read_dir(self.manifests.path()) {
                for e in entries.flatten() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
            let deadline = Instant::now() + Duration::from_secs(45);
            while Instant::now() < deadline && !self.containers().is_empty() {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        self.kill9();
        let mut left = purge_namespace_cgroups(&self.ns);
        unpin_left_netns(&self.root.path().join("root"));
        // Pods the agent removed while it ran should have taken their pod cgroup with them;
        // what is left here is the agent's leak, cleaned so later runs start clean.
        let seen =
            std::mem::take(&mut *self.seen_pod_uids.lock().unwrap_or_else(|p| p.into_inner()));
        remove_pod_logs(&seen);
        for uid in seen {
            for rel in cgroups::pod_cgroups(&uid) {
                if !cgroups::existing(&rel).is_empty() {
                    eprintln!("{}: removing pod cgroup {rel} the agent left", self.test);
                    left.extend(cgroups::remove_tree(&rel));
                }
            }
        }
        check_no_cgroups_left(&self.test, &left);
    }
}

/// The network namespaces the agent pinned for pods it did not get to tear down (a test
/// killed it): unpinned, so /run/netns keeps no leftovers for later tests (the daemonset test
/// waits for it to be empty).
fn unpin_left_netns(root: &Path) {
    let Ok(pods) = std::fs::read_dir(root.join("pods")) else {
        return;
    };
    for pod in pods.flatten() {
        let Ok(text) = std::fs::read_to_string(pod.path().join("sandbox.json")) else {
            continue;
        };
        let netns = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["netns"].as_str().map(PathBuf::from));
        if let Some(netns) = netns {
            let _ = nix::mount::umount2(&netns, nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_file(&netns);
        }
    }
}

/// Polls `fetch` every 200 ms until the object exists and `pred` holds; panics after
/// `timeout_secs` with what `show` makes of the last one seen and the agent's log.
pub fn wait_object(
    label: &str,
    timeout_secs: u64,
    what: &str,
    fetch: impl Fn() -> Option<Value>,
    pred: impl Fn(&Value) -> bool,
    show: impl Fn(&Value) -> String,
    agent_log: impl Fn() -> String,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(timeout_secs);
    let mut last = None;
    loop {
        if let Some(v) = fetch() {
            if pred(&v) {
                return v;
            }
            last = Some(v);
        }
        if Instant::now() > deadline {
            panic!(
                "{label} never reached: {what}\nlast: {}\nagent log:\n{}",
                last.as_ref()
                    .map(&show)
                    .unwrap_or_else(|| "<absent>".into()),
                agent_log()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Removes the log folders (/var/log/pods/<ns>_<name>_<uid>) of these pods and the
/// /var/log/containers links into them: the agent removes them with its pods, but not for
/// pods it never got to remove (killed, or the test failed first).
fn remove_pod_logs(uids: &BTreeSet<String>) {
    let owned = |name: &str| uids.iter().any(|uid| name.ends_with(&format!("_{uid}")));
    if let Ok(links) = std::fs::read_dir("/var/log/containers") {
        for link in links.flatten() {
            let into_ours = std::fs::read_link(link.path()).is_ok_and(|target| {
                target
                    .parent()
                    .and_then(Path::parent)
                    .and_then(Path::file_name)
                    .is_some_and(|dir| owned(&dir.to_string_lossy()))
            });
            if into_ours {
                let _ = std::fs::remove_file(link.path());
            }
        }
    }
    if let Ok(dirs) = std::fs::read_dir("/var/log/pods") {
        for dir in dirs.flatten() {
            if owned(&dir.file_name().to_string_lossy()) {
                let _ = std::fs::remove_dir_all(dir.path());
            }
        }
    }
}

/// Fails the test (unless it is already failing) when cgroups could not be removed.
fn check_no_cgroups_left(test: &str, left: &[PathBuf]) {
    if !left.is_empty() && !std::thread::panicking() {
        panic!(
            "{test}: cgroups still there after the test's clean-up (processes inside?): {left:?}"
        );
    }
}

/// `krs-<base>-<pid>`: the containerd namespace of one test in this test process. Other
/// processes running the same test on this containerd at the same time (another checkout, a
/// second `cargo test`) get their own, so neither purges the other's pods. Namespaces of the
/// same test left by processes that are gone (a crash, a kill) are purged here.
pub fn test_namespace(base: &str) -> String {
    let prefix = format!("krs-{base}-");
    let (_, listed) = ctr(&["namespaces", "ls", "-q"], "");
    for stale in listed.lines().map(str::trim) {
        let Some(pid) = stale
            .strip_prefix(&prefix)
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if gone {
            purge_namespace(stale);
        }
    }
    format!("{prefix}{}", std::process::id())
}

/// Removes every task, container, snapshot and image of a namespace, the namespace, and
/// the cgroups its containers lived in; fails the test if one of those cgroups stays.
pub fn purge_namespace(ns: &str) {
    let left = purge_namespace_cgroups(ns);
    check_no_cgroups_left(ns, &left);
}

/// As `purge_namespace`; returns the cgroups that could not be removed.
fn purge_namespace_cgroups(ns: &str) -> Vec<PathBuf> {
    let (_, out) = ctr(&["containers", "ls", "-q"], ns);
    let ids: Vec<&str> = out
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains(' '))
        .collect();
    // Read before the records go: the cgroups are found through the containers' specs.
    let mut owned: Vec<String> = ids
        .iter()
        .flat_map(|id| container_cgroups(ns, id))
        .collect();
    if cgroups::is_test_namespace(ns) {
        owned.push(format!("/{ns}"));
    }
    for &id in &ids {
        let _ = ctr(&["tasks", "kill", "-s", "SIGKILL", id], ns);
        std::thread::sleep(Duration::from_millis(100));
        let _ = ctr(&["tasks", "rm", "-f", id], ns);
        let _ = ctr(&["containers", "rm", id], ns);
        let _ = ctr(&["snapshots", "rm", id], ns);
    }
    let (_, imgs) = ctr(&["images", "ls", "-q"], ns);
    for i in imgs.lines().filter(|l| !l.trim().is_empty()) {
        // --sync: the image's content and snapshots go now, not at containerd's next GC
        // (which may come after the namespace removal below gave up).
        let _ = ctr(&["images", "rm", "--sync", i], ns);
    }
    // Anything containerd's GC still holds back keeps the namespace; retried for a while.
    for attempt in 0..25 {
        if ctr(&["namespaces", "rm", ns], "").0 {
            break;
        }
        if attempt == 10 {
            remove_unreferenced(ns);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    owned
        .iter()
        .flat_map(|rel| cgroups::remove_tree(rel))
        .collect()
}

/// Removes the snapshots and content blobs of a namespace that has no image or container
/// left (GC would take them, but only at its next run). Snapshots go children first: each
/// pass removes those no other snapshot names as parent.
fn remove_unreferenced(ns: &str) {
    for _ in 0..10 {
        let (_, listed) = ctr(&["snapshots", "ls"], ns);
        let rows: Vec<Vec<&str>> = listed
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect())
            .filter(|f: &Vec<&str>| !f.is_empty())
            .collect();
        if rows.is_empty() {
            break;
        }
        // KEY, then PARENT only when the snapshot has one, then KIND.
        let parents: BTreeSet<&str> = rows.iter().filter(|f| f.len() == 3).map(|f| f[1]).collect();
        for f in rows.iter().filter(|f| !parents.contains(f[0])) {
            let _ = ctr(&["snapshots", "rm", f[0]], ns);
        }
    }
    let (_, blobs) = ctr(&["content", "ls", "-q"], ns);
    for digest in blobs.lines().map(str::trim).filter(|d| !d.is_empty()) {
        let _ = ctr(&["content", "rm", digest], ns);
    }
}

/// The cgroups a container of `ns` owns, from the cgroupsPath of its OCI spec.
fn container_cgroups(ns: &str, id: &str) -> Vec<String> {
    let (ok, info) = ctr(&["containers", "info", id], ns);
    let path = ok
        .then(|| serde_json::from_str::<Value>(&info).ok())
        .flatten()
        .and_then(|v| {
            v["Spec"]["linux"]["cgroupsPath"]
                .as_str()
                .map(str::to_string)
        });
    path.map(|p| cgroups::owned_by_container(&p, ns))
        .unwrap_or_default()
}

/// A pod manifest with one busybox container running `script` under `sh -c`.
pub fn busybox_pod(name: &str, restart_policy: &str, script: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: {restart_policy}
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {BUSYBOX}
    command: ["sh", "-c", {script:?}]
"#
    )
}

pub fn container_status<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

pub fn condition<'a>(pod: &'a Value, kind: &str) -> &'a Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// The content of a container's CRI log (all attempts' current files of that restart count).
pub fn read_log(pod: &Value, container: &str, restart: u32) -> String {
    let m = &pod["metadata"];
    let dir = format!(
        "/var/log/pods/{}_{}_{}/{container}/{restart}.log",
        m["namespace"].as_str().unwrap(),
        m["name"].as_str().unwrap(),
        m["uid"].as_str().unwrap()
    );
    std::fs::read_to_string(dir).unwrap_or_default()
}

/// Imports into `ns` an image `name` made of the busybox test image plus one layer holding
/// `files` (path in the image, content), with `user` as its config's User: images that
/// differ from the test images in one detail, without a registry or a build tool.
pub fn import_busybox_variant(ns: &str, name: &str, user: &str, files: &[(&str, &str)]) {
    use sha2::{Digest, Sha256};
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("layout");
    let blobs = layout.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let sh = |cmd: &str| {
        let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let base = image_cache().join("busybox.oci.tar");
    sh(&format!(
        "tar -xf '{}' -C '{}'",
        base.display(),
        layout.display()
    ));
    let put = |bytes: &[u8]| -> (String, usize) {
        let hex = hex::encode(Sha256::digest(bytes));
        std::fs::write(blobs.join(&hex), bytes).unwrap();
        (format!("sha256:{hex}"), bytes.len())
    };
    let blob_json = |digest: &str| -> Value {
        let hex = digest.trim_start_matches("sha256:");
        serde_json::from_slice(&std::fs::read(blobs.join(hex)).unwrap()).unwrap()
    };

    let rootfs = tmp.path().join("layer");
    for (path, content) in files {
        let p = rootfs.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
    }
    let tar = tmp.path().join("layer.tar");
    sh(&format!(
        "tar --numeric-owner --owner=0 --group=0 -C '{}' -cf '{}' .",
        rootfs.display(),
        tar.display()
    ));
    let tar_bytes = std::fs::read(&tar).unwrap();
    let diff_id = format!("sha256:{}", hex::encode(Sha256::digest(&tar_bytes)));
    sh(&format!("gzip -n -9 '{}'", tar.display()));
    let (layer_digest, layer_size) = put(&std::fs::read(tmp.path().join("layer.tar.gz")).unwrap());

    let index_path = layout.join("index.json");
    let mut index: Value = serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
    let mut manifest = blob_json(index["manifests"][0]["digest"].as_str().unwrap());
    let mut config = blob_json(manifest["config"]["digest"].as_str().unwrap());
    config["config"]["User"] = user.into();
    config["rootfs"]["diff_ids"]
        .as_array_mut()
        .unwrap()
        .push(diff_id.into());
    let (config_digest, config_size) = put(&serde_json::to_vec(&config).unwrap());
    manifest["config"]["digest"] = config_digest.into();
    manifest["config"]["size"] = config_size.into();
    manifest["layers"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": layer_digest,
            "size": layer_size,
        }));
    let (manifest_digest, manifest_size) = put(&serde_json::to_vec(&manifest).unwrap());
    let entry = &mut index["manifests"][0];
    entry["digest"] = manifest_digest.into();
    entry["size"] = manifest_size.into();
    entry["annotations"] = serde_json::json!({
        "io.containerd.image.name": name,
        "org.opencontainers.image.ref.name": name.rsplit(':').next().unwrap(),
    });
    std::fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();

    let archive = tmp.path().join("variant.oci.tar");
    sh(&format!(
        "tar -C '{}' -cf '{}' .",
        layout.display(),
        archive.display()
    ));
    import_archive(ns, &archive);
}

/// The host's MemTotal in bytes, as the agent reads its memory capacity.
pub fn mem_total() -> i64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}
