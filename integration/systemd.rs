//! The agent as a systemd service: deploy/systemd/ installed by hack/install-systemd.sh.
//!
//! Anywhere (plain `cargo test`, no root): the installer stages the files (`--dest-root`);
//! systemd's own parser takes the unit with its drop-in without a word (`systemd-analyze
//! verify` needs no running systemd); the settings the pods' survival rests on are there;
//! the command line the drop-in builds, standalone and with the documented cluster flags,
//! is accepted by the agent's config loader; another `--name` gets paths of its own, and
//! `--uninstall --purge` removes that instance only.
//!
//! On a systemd host (systemd is PID 1), as root with KUBELET_RS_INTEGRATION=1: a second
//! instance installed with the documented command runs a static pod; `systemctl restart`
//! and `systemctl stop` keep its containers (same task pids, restartCount 0, logs still
//! written, the io relay's too); the agent's lines are in the journal. Elsewhere that test
//! says why it cannot run and returns, as the issue allows.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kubelet_rs::config::{load_from_args, AuthorizationMode, Config};
use serde_json::Value;

const INSTALLER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/install-systemd.sh");
const AGENT: &str = env!("CARGO_BIN_EXE_kubelet-rs");
const UNIT_DIR: &str = "/etc/systemd/system";
const DROP_IN: &str = "10-kubelet-rs.conf";

/// Runs the installer; panics with its output unless it succeeds.
fn install(args: &[&str]) -> String {
    let (ok, text) = common::run_text(Command::new(INSTALLER).args(args));
    assert!(ok, "install-systemd.sh {args:?} failed:\n{text}");
    text
}

/// The files the installer writes for instance `name`, staged under a temporary root.
fn stage(root: &Path, name: &str) {
    install(&[
        "--dest-root",
        root.to_str().unwrap(),
        "--binary",
        AGENT,
        "--name",
        name,
    ]);
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A unit and its drop-ins as systemd reads them, for the keys checked here: `[Section]`
/// headers, `Key=Value` lines, `#`/`;` comments. Assignments stay in file order, the unit's
/// first, so the last one wins and an empty one clears a list, as in systemd.
struct Unit {
    assignments: Vec<(String, String, String)>,
}

impl Unit {
    fn parse(files: &[&Path]) -> Unit {
        let mut assignments = Vec::new();
        for file in files {
            let mut section = String::new();
            for line in read(file).lines().map(str::trim) {
                if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                    continue;
                }
                assert!(
                    !line.ends_with('\\'),
                    "{}: continued lines are not read by this check: {line}",
                    file.display()
                );
                if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                    section = name.to_string();
                    continue;
                }
                let (key, value) = line
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{}: not Key=Value: {line}", file.display()));
                assignments.push((
                    section.clone(),
                    key.trim().to_string(),
                    value.trim().to_string(),
                ));
            }
        }
        Unit { assignments }
    }

    /// Every value of a list setting still in force: an empty assignment drops the earlier.
    fn list(&self, section: &str, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (s, k, v) in &self.assignments {
            if s == section && k == key {
                if v.is_empty() {
                    out.clear();
                } else {
                    out.push(v.clone());
                }
            }
        }
        out
    }

    /// The setting in force: the last assignment.
    fn get(&self, section: &str, key: &str) -> Option<String> {
        self.list(section, key).pop()
    }

    /// Whitespace-separated values (After=, Wants=, ...) of every assignment.
    fn words(&self, section: &str, key: &str) -> Vec<String> {
        self.list(section, key)
            .iter()
            .flat_map(|v| v.split_whitespace().map(str::to_string))
            .collect()
    }

    /// `Environment="NAME=value"` lines (one quoted assignment each, as the drop-in writes
    /// them), in order.
    fn environment(&self) -> Vec<(String, String)> {
        self.list("Service", "Environment")
            .iter()
            .map(|v| {
                let inner = v
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or_else(|| panic!("Environment={v}: expected one quoted NAME=value"));
                let (name, value) = inner.split_once('=').expect("NAME=value");
                (name.to_string(), value.to_string())
            })
            .collect()
    }
}

/// An EnvironmentFile as systemd reads the forms the shipped one uses: NAME=value lines, the
/// value optionally in double quotes, `#`/`;` comments.
fn environment_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .map(|l| {
            let (name, value) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not NAME=value: {l}"));
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            (name.to_string(), value.to_string())
        })
        .collect()
}

/// ExecStart's argv as systemd builds it: `$NAME` becomes the variable's words (none when
/// empty or unset), `${NAME}` one word; the command line itself has no quotes here.
fn expand(exec_start: &str, env: &BTreeMap<String, String>) -> Vec<String> {
    assert!(
        !exec_start.contains(['"', '\'', '\\']),
        "quoting in ExecStart is not read by this check: {exec_start}"
    );
    let mut argv = Vec::new();
    for word in exec_start.split_whitespace() {
        if let Some(name) = word.strip_prefix("${").and_then(|w| w.strip_suffix('}')) {
            argv.push(env.get(name).cloned().unwrap_or_default());
        } else if let Some(name) = word.strip_prefix('$') {
            if let Some(value) = env.get(name) {
                argv.extend(value.split_whitespace().map(str::to_string));
            }
        } else {
            argv.push(word.to_string());
        }
    }
    argv
}

/// The staged unit of instance `name` with its drop-in.
fn staged_unit(root: &Path, name: &str) -> (PathBuf, PathBuf) {
    let dir = root.join(UNIT_DIR.trim_start_matches('/'));
    let unit = dir.join(format!("{name}.service"));
    let drop_in = dir.join(format!("{name}.service.d/{DROP_IN}"));
    (unit, drop_in)
}

/// The agent's configuration from the drop-in's command line with `env_file` as the
/// operator's file; paths under /etc are read from the staged tree.
fn load_drop_in_config(root: &Path, env_file: &str) -> (Vec<String>, Config) {
    let (unit, drop_in) = staged_unit(root, "kubelet-rs");
    let unit = Unit::parse(&[&unit, &drop_in]);
    // EnvironmentFile= is applied after Environment=, so the operator's file wins.
    let mut env: BTreeMap<String, String> = unit.environment().into_iter().collect();
    env.extend(environment_file(env_file));
    let exec = unit.list("Service", "ExecStart");
    assert_eq!(exec.len(), 1, "one ExecStart in force: {exec:?}");
    let argv = expand(&exec[0], &env);
    let staged: Vec<String> = argv
        .iter()
        .map(|a| match a.strip_prefix("--config=") {
            Some(path) => format!("--config={}{path}", root.display()),
            None => a.clone(),
        })
        .collect();
    let config = load_from_args(staged.clone())
        .unwrap_or_else(|e| panic!("the agent refuses the drop-in's flags {argv:?}: {e}"));
    (argv, config)
}

/// One staged install (the binary is large in a debug build, so it is copied once) serves
/// both checks: the unit as systemd reads it, and the flags it hands the agent.
#[test]
fn installed_unit_is_valid_and_its_flags_are_accepted() {
    let root = tempfile::tempdir().unwrap();
    stage(root.path(), "kubelet-rs");
    for path in [
        "usr/local/bin/kubelet-rs",
        "etc/systemd/system/kubelet-rs.service",
        "etc/systemd/system/kubelet-rs.service.d/10-kubelet-rs.conf",
        "etc/default/kubelet-rs",
        "etc/kubelet-rs/config.yaml",
        "etc/kubernetes/manifests",
    ] {
        assert!(root.path().join(path).exists(), "not installed: {path}");
    }
    check_unit(root.path());
    check_flags(root.path());
}

/// The settings the pods' survival and the agent's start rest on, then systemd's own parser.
fn check_unit(root: &Path) {
    let (unit_path, drop_in_path) = staged_unit(root, "kubelet-rs");
    let unit = Unit::parse(&[&unit_path, &drop_in_path]);
    // Only the agent is signalled on stop and restart: its io relays (in this cgroup) live on.
    assert_eq!(unit.get("Service", "KillMode").as_deref(), Some("process"));
    assert_eq!(unit.get("Service", "Restart").as_deref(), Some("always"));
    assert_eq!(
        unit.get("Unit", "StartLimitIntervalSec").as_deref(),
        Some("0")
    );
    // containerd first, but its restarts must not restart the agent.
    for key in ["Wants", "After"] {
        assert!(
            unit.words("Unit", key)
                .iter()
                .any(|u| u == "containerd.service"),
            "{key}= lacks containerd.service"
        );
    }
    for key in ["Requires", "BindsTo", "PartOf", "Requisite"] {
        assert!(
            !unit
                .words("Unit", key)
                .iter()
                .any(|u| u == "containerd.service"),
            "{key}=containerd.service would stop the agent with containerd"
        );
    }
    // The host's mount namespace, and a /run/kubelet-rs that outlives a stop.
    for key in [
        "PrivateTmp",
        "PrivateMounts",
        "PrivateDevices",
        "ProtectSystem",
        "ProtectHome",
        "MountFlags",
        "RuntimeDirectory",
        "TemporaryFileSystem",
        "ReadOnlyPaths",
        "InaccessiblePaths",
        "RootDirectory",
    ] {
        assert_eq!(unit.get("Service", key), None, "{key}= set");
    }
    let exec = unit.list("Service", "ExecStart");
    assert_eq!(exec.len(), 1, "the drop-in replaces ExecStart: {exec:?}");
    assert!(
        exec[0].starts_with("/usr/local/bin/kubelet-rs "),
        "{exec:?}"
    );
    assert_eq!(
        unit.list("Service", "EnvironmentFile"),
        ["-/etc/default/kubelet-rs"]
    );
    assert_eq!(
        unit.get("Install", "WantedBy").as_deref(),
        Some("multi-user.target")
    );

    // systemd's own parser on the same two files, the binary path pointed at the staged
    // binary (verify checks that it exists): any diagnostic fails.
    let verify = tempfile::tempdir().unwrap();
    let staged_binary = root.join("usr/local/bin/kubelet-rs");
    let retarget = |from: &Path, to: PathBuf| {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let text = read(from).replace("/usr/local/bin/kubelet-rs", staged_binary.to_str().unwrap());
        std::fs::write(&to, text).unwrap();
        to
    };
    let verify_unit = retarget(&unit_path, verify.path().join("kubelet-rs.service"));
    retarget(
        &drop_in_path,
        verify
            .path()
            .join(format!("kubelet-rs.service.d/{DROP_IN}")),
    );
    match Command::new("systemd-analyze")
        .arg("verify")
        .arg(&verify_unit)
        .output()
    {
        Ok(out) => {
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            // verify also loads the units this one names (containerd.service, ...): what it
            // says about the host's own files is shown, not held against ours.
            let verify_dir = verify.path().to_string_lossy();
            let (ours, host): (Vec<&str>, Vec<&str>) = said
                .lines()
                .filter(|l| !l.trim().is_empty())
                .partition(|l| l.contains(verify_dir.as_ref()) || l.contains("kubelet-rs.service"));
            if !host.is_empty() {
                eprintln!(
                    "systemd-analyze verify, on other units:\n{}",
                    host.join("\n")
                );
            }
            assert!(
                out.status.success() && ours.is_empty(),
                "systemd-analyze verify: {}\n{said}",
                out.status
            );
        }
        Err(e) if std::env::var("KUBELET_RS_INTEGRATION").as_deref() == Ok("1") => {
            panic!("systemd-analyze cannot run ({e}): install systemd's tools")
        }
        Err(e) => eprintln!(
            "systemd-analyze cannot run ({e}): the unit was checked by the key checks only"
        ),
    }
}

/// The command line the drop-in builds, as installed and with the documented cluster lines,
/// through the agent's own config loader.
fn check_flags(root: &Path) {
    let env_file = read(&root.join("etc/default/kubelet-rs"));

    // As installed: standalone on the static pods, with nothing that needs an API server
    // (the main server refuses to start with webhooks and no --kubeconfig).
    let (argv, config) = load_drop_in_config(root, &env_file);
    assert_eq!(argv[0], "/usr/local/bin/kubelet-rs");
    assert!(
        argv.contains(&"--config=/etc/kubelet-rs/config.yaml".to_string()),
        "{argv:?}"
    );
    assert_eq!(
        config.static_pod_path.as_deref(),
        Some(Path::new("/etc/kubernetes/manifests"))
    );
    assert_eq!(config.kubeconfig, None);
    assert!(!config.authentication_token_webhook);
    assert_eq!(config.authorization_mode, AuthorizationMode::AlwaysAllow);
    assert!(!config.anonymous_auth);

    // The cluster lines the file documents, uncommented as the README says.
    let cluster: String = env_file
        .lines()
        .map(|l| {
            l.strip_prefix("#KUBELET_RS_")
                .map_or(l.to_string(), |rest| format!("KUBELET_RS_{rest}"))
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(cluster, env_file, "the file documents no cluster flags");
    let (argv, config) = load_drop_in_config(root, &cluster);
    assert_eq!(
        config.kubeconfig.as_deref(),
        Some(Path::new("/etc/kubernetes/kubelet.conf")),
        "{argv:?}"
    );
    assert_eq!(
        config.bootstrap_kubeconfig.as_deref(),
        Some(Path::new("/etc/kubernetes/bootstrap-kubelet.conf"))
    );
    assert!(config.rotate_certificates);
    assert_eq!(
        config.client_ca_file.as_deref(),
        Some(Path::new("/etc/kubernetes/pki/ca.crt"))
    );
    assert!(config.authentication_token_webhook);
    assert_eq!(config.authorization_mode, AuthorizationMode::Webhook);
    // The config file still applies under the flags.
    assert_eq!(
        config.static_pod_path.as_deref(),
        Some(Path::new("/etc/kubernetes/manifests"))
    );
}

#[test]
fn another_name_gets_its_own_files_and_uninstalls_alone() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    // The default instance's files, as far as an uninstall of another could touch them.
    let others = [
        "usr/local/bin/kubelet-rs",
        "etc/default/kubelet-rs",
        "etc/kubelet-rs/config.yaml",
        "etc/systemd/system/kubelet-rs.service",
        "etc/systemd/system/kubelet-rs.service.d/10-kubelet-rs.conf",
    ];
    for path in others {
        std::fs::create_dir_all(r.join(path).parent().unwrap()).unwrap();
        std::fs::write(r.join(path), "the default instance").unwrap();
    }

    stage(r, "krs-other");
    let (unit_path, drop_in_path) = staged_unit(r, "krs-other");
    let unit = Unit::parse(&[&unit_path, &drop_in_path]);
    let exec = unit.list("Service", "ExecStart");
    assert!(exec[0].starts_with("/usr/local/bin/krs-other "), "{exec:?}");
    assert_eq!(
        unit.list("Service", "EnvironmentFile"),
        ["-/etc/default/krs-other"]
    );
    let config_args = (
        "KUBELET_RS_CONFIG_ARGS".to_string(),
        "--config=/etc/krs-other/config.yaml".to_string(),
    );
    assert!(
        unit.environment().contains(&config_args),
        "{:?}",
        unit.environment()
    );
    for path in [
        "usr/local/bin/krs-other",
        "etc/default/krs-other",
        "etc/krs-other/config.yaml",
    ] {
        assert!(r.join(path).exists(), "not installed: {path}");
    }

    // A reinstall (an upgrade) replaces the shipped files and keeps the operator's.
    std::fs::write(
        r.join("etc/default/krs-other"),
        "KUBELET_RS_EXTRA_ARGS=--v=4\n",
    )
    .unwrap();
    std::fs::write(&unit_path, "stale").unwrap();
    stage(r, "krs-other");
    assert_eq!(
        read(&r.join("etc/default/krs-other")),
        "KUBELET_RS_EXTRA_ARGS=--v=4\n"
    );
    assert_ne!(read(&unit_path), "stale");

    install(&[
        "--dest-root",
        r.to_str().unwrap(),
        "--name",
        "krs-other",
        "--uninstall",
        "--purge",
    ]);
    for path in [
        "usr/local/bin/krs-other",
        "etc/default/krs-other",
        "etc/krs-other",
        "etc/systemd/system/krs-other.service",
        "etc/systemd/system/krs-other.service.d",
    ] {
        assert!(
            !r.join(path).exists(),
            "left by --uninstall --purge: {path}"
        );
    }
    for path in others {
        assert_eq!(read(&r.join(path)), "the default instance", "{path}");
    }
}

// ---- on a systemd host -------------------------------------------------------------------

/// Why the service test cannot run here, or None on a systemd host (sd_booted's test, or
/// PID 1's name).
fn not_a_systemd_host() -> Option<String> {
    let pid1 = std::fs::read_to_string("/proc/1/comm")
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|e| format!("unknown: {e}"));
    if Path::new("/run/systemd/system").is_dir() || pid1 == "systemd" {
        return None;
    }
    Some(format!(
        "systemd is not PID 1 here (PID 1 is {pid1}): the systemd service test needs a systemd host"
    ))
}

fn systemctl(args: &[&str]) -> (bool, String) {
    let out = Command::new("systemctl")
        .args(args)
        .output()
        .expect("systemctl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text.trim().to_string())
}

/// An instance of the service installed for this test, uninstalled (with its files) on drop.
struct Service {
    name: String,
}

impl Service {
    /// Installs with the documented command, the test node's flags in the operator's file
    /// (they override the installed config: own ports, namespace, manifest and root dirs).
    fn install(node: &common::Node) -> Service {
        let service = Service {
            name: format!("kubelet-rs-t{}", std::process::id()),
        };
        install(&["--binary", AGENT, "--name", &service.name, "--no-start"]);
        let args = node.agent_args();
        assert!(
            args.iter()
                .all(|a| !a.contains(|c: char| c.is_whitespace() || c == '"')),
            "{args:?}"
        );
        std::fs::write(
            format!("/etc/default/{}", service.name),
            format!("KUBELET_RS_EXTRA_ARGS=\"{}\"\n", args.join(" ")),
        )
        .unwrap();
        service
    }

    fn ctl(&self, verb: &str) {
        let (ok, out) = systemctl(&[verb, &self.name]);
        assert!(
            ok,
            "systemctl {verb} {}: {out}\n{}",
            self.name,
            self.journal()
        );
    }

    fn show(&self, property: &str) -> String {
        systemctl(&["show", "-p", property, "--value", &self.name]).1
    }

    fn journal(&self) -> String {
        let out = Command::new("journalctl")
            .args(["-u", &self.name, "--no-pager", "-o", "cat"])
            .output()
            .expect("journalctl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls `cond` until it holds; panics after `secs` with the service's journal.
    fn wait(&self, secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "never true within {secs}s: {what}\nstatus: {}\njournal:\n{}",
                systemctl(&["status", "--no-pager", &self.name]).1,
                self.journal()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let out = Command::new(INSTALLER)
            .args(["--name", &self.name, "--uninstall", "--purge"])
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            other => eprintln!("uninstalling {}: {other:?}", self.name),
        }
    }
}

const POD: &str = "keep";
const TICK: &str = "i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done";

/// Two containers that log every second: one through containerd's shim and the log writer
/// (containerd.service's cgroup), one with stdin, through the agent's io relay (the agent's
/// cgroup: what KillMode=process keeps).
fn pod_manifest() -> String {
    let busybox = common::BUSYBOX;
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {POD}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: plain
    image: {busybox}
    command: ["sh", "-c", {TICK:?}]
  - name: relayed
    image: {busybox}
    stdin: true
    command: ["sh", "-c", {TICK:?}]
"#
    )
}

/// container name -> containerID of the pod's running containers, with their restart counts.
fn running_containers(pod: &Value) -> BTreeMap<String, (String, u64)> {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["state"]["running"].is_object())
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_string(),
                (
                    c["containerID"].as_str().unwrap_or_default().to_string(),
                    c["restartCount"].as_u64().unwrap_or(u64::MAX),
                ),
            )
        })
        .collect()
}

/// containerd's pid of each container's running task.
fn task_pids(
    node: &common::Node,
    containers: &BTreeMap<String, (String, u64)>,
) -> BTreeMap<String, u32> {
    let tasks = node.tasks();
    containers
        .iter()
        .filter_map(|(name, (id, _))| {
            let id = id.strip_prefix("containerd://")?;
            tasks
                .iter()
                .find(|(t, _, status)| t == id && status == "RUNNING")
                .map(|(_, pid, _)| (name.clone(), *pid))
        })
        .collect()
}

fn log_lines(pod: &Value, container: &str) -> usize {
    common::read_log(pod, container, 0).lines().count()
}

/// Waits until both containers' logs have grown past `before`: their writers are alive.
fn wait_logs_grow(service: &Service, pod: &Value, when: &str) {
    let before: Vec<usize> = ["plain", "relayed"]
        .iter()
        .map(|c| log_lines(pod, c))
        .collect();
    service.wait(120, &format!("both containers still log {when}"), || {
        ["plain", "relayed"]
            .iter()
            .zip(&before)
            .all(|(c, n)| log_lines(pod, c) > *n)
    });
}

#[test]
#[ignore = "needs root, containerd and systemd as PID 1: run hack/test.sh"]
fn service_restart_and_stop_keep_pods_running() {
    if let Some(reason) = not_a_systemd_host() {
        // Straight to the stream, not eprintln!: the test harness keeps a passing test's
        // eprintln! output to itself, and this line is for whoever reads hack/test.sh's log.
        let _ = writeln!(std::io::stderr(), "{reason}");
        return;
    }
    let node = common::Node::prepare("systemd-service", &[], &["pause", "busybox"]);
    let service = Service::install(&node);
    let answers = || common::http_get(node.port, "/healthz").is_some_and(|(code, _)| code == 200);
    service.ctl("start");
    service.wait(120, "the agent answers", answers);

    node.write_manifest("keep.yaml", &pod_manifest());
    let mut pod = Value::Null;
    service.wait(240, "both containers running", || {
        pod = node.pod(POD).unwrap_or(Value::Null);
        running_containers(&pod).len() == 2
    });
    let containers = running_containers(&pod);
    let pids = task_pids(&node, &containers);
    assert_eq!(pids.len(), 2, "tasks of {containers:?}: {:?}", node.tasks());

    // restart: a new agent takes the same containers over.
    let agent_pid = service.show("MainPID");
    service.ctl("restart");
    service.wait(120, "a new agent answers", || {
        let pid = service.show("MainPID");
        pid != agent_pid && pid != "0" && answers()
    });
    service.wait(
        240,
        "the new agent reports the same containers, not restarted",
        || {
            node.pod(POD)
                .is_some_and(|p| running_containers(&p) == containers)
        },
    );
    assert!(
        containers.values().all(|(_, restarts)| *restarts == 0),
        "{containers:?}"
    );
    assert_eq!(
        task_pids(&node, &containers),
        pids,
        "tasks changed across the restart"
    );
    wait_logs_grow(&service, &pod, "after systemctl restart");

    // The agent's own lines, both runs, and its exit on the restart's SIGTERM.
    service.wait(
        60,
        "the journal holds both starts and the SIGTERM exit",
        || {
            let journal = service.journal();
            journal.matches("kubelet-rs starting").count() >= 2
                && journal.contains("SIGTERM: exiting; pods keep running")
        },
    );

    // stop: the agent goes, the pod stays and keeps logging.
    service.ctl("stop");
    assert_eq!(
        service.show("ActiveState"),
        "inactive",
        "{}",
        service.journal()
    );
    assert!(!answers(), "the agent still answers after systemctl stop");
    assert_eq!(
        task_pids(&node, &containers),
        pids,
        "tasks changed across the stop"
    );
    wait_logs_grow(&service, &pod, "with the service stopped");

    // start again, and let the agent remove the pod it runs.
    service.ctl("start");
    service.wait(120, "the agent answers again", answers);
    node.remove_manifest("keep.yaml");
    service.wait(120, "the pod and its containers are gone", || {
        node.pod(POD).is_none() && node.containers().is_empty()
    });
}
