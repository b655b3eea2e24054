//! The agent's own log as people and log collectors read it: no colour codes when stderr is
//! not a terminal (journald, a file, a pipe), and structured fields printed as values
//! (`ips=10.88.0.5`, not `ips=[10.88.0.5]`; `size=8388608`, not `size=Some(8388608)`).

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;

const ESC: u8 = 0x1b;

/// Runs the agent with stderr on a pipe and no NO_COLOR, against a containerd socket that
/// does not exist: it logs its start and its retries without root or containerd.
#[test]
fn log_on_a_pipe_has_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubelet-rs"))
        .args([
            format!("--root-dir={}", dir.path().join("root").display()),
            format!("--pod-manifest-path={}", manifests.display()),
            format!(
                "--container-runtime-endpoint=unix://{}",
                dir.path().join("no-containerd.sock").display()
            ),
            format!("--port={}", free_port()),
            "--read-only-port=0".into(),
            "--healthz-port=0".into(),
            "--hostname-override=t-agent-log".into(),
            "--v=3".into(),
        ])
        .env_remove("NO_COLOR")
        .env_remove("KUBELET_RS_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubelet-rs starts");
    let mut stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    // Read until the first retry is logged: by then the start-up lines are out too.
    let mut log = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !String::from_utf8_lossy(&log).contains("containerd not reachable") {
        assert!(
            Instant::now() < deadline,
            "no retry logged:\n{}",
            String::from_utf8_lossy(&log)
        );
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(200)) {
            log.extend(chunk);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = String::from_utf8_lossy(&log);
    assert!(text.contains("kubelet-rs starting"), "{text}");
    assert!(
        !log.contains(&ESC),
        "escape codes in a log written to a pipe:\n{text:?}"
    );
}

/// `key=value` pairs whose value is Rust's Debug form of an Option, a Vec or a struct
/// rather than the value itself.
fn debug_formatted_fields(line: &str) -> Vec<String> {
    line.split(' ')
        .filter_map(|word| {
            let (key, value) = word.split_once('=')?;
            let is_key = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
            let debug = value.starts_with("Some(")
                || value == "None"
                || value.starts_with('[')
                || value.starts_with('{');
            (is_key && debug).then(|| word.to_string())
        })
        .chain(
            // A struct's Debug: `after=ProbeStatus { started: true, ... }`.
            line.match_indices("=")
                .filter(|(i, _)| {
                    let rest = &line[i + 1..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric())
                        .collect();
                    name.starts_with(|c: char| c.is_ascii_uppercase())
                        && rest[name.len()..].starts_with(" {")
                })
                .map(|(i, _)| line[i..].chars().take(40).collect()),
        )
        .collect()
}

#[test]
fn debug_forms_are_recognised() {
    assert!(debug_formatted_fields("x INFO a: m size=Some(8388608) pod=\"p\"").len() == 1);
    assert!(debug_formatted_fields("x INFO a: m ips=[10.88.0.5] max_parallel=None").len() == 2);
    assert!(debug_formatted_fields("x DEBUG a: m after=ProbeStatus { started: true }").len() == 1);
    assert!(debug_formatted_fields(
        "x INFO a: pod network attached ips=10.88.0.5 size=8388608 ready=true pod=\"a b\""
    )
    .is_empty());
}

/// A pod whose start goes through the network, a memory volume with a size and a readiness
/// probe: their log lines, and the agent's start-up lines, carry values, not Debug forms.
#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn log_fields_are_values() {
    let node = Node::start("agent-log");
    node.write_manifest(
        "p.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {{name: mem, emptyDir: {{medium: Memory, sizeLimit: 8Mi}}}}
  containers:
  - name: main
    image: {BUSYBOX}
    command: ["sh", "-c", "touch /tmp/ready; exec sleep 3600"]
    readinessProbe: {{exec: {{command: [test, -f, /tmp/ready]}}, periodSeconds: 1}}
    volumeMounts:
    - {{name: mem, mountPath: /mem}}
"#
        ),
    );
    node.wait_pod("p", 90, "Ready", |p| {
        condition(p, "Ready")["status"] == "True"
    });
    let log = node.log();
    assert!(
        !log.as_bytes().contains(&ESC),
        "escape codes in the agent's log file:\n{log:?}"
    );
    // Each site that used to print a Debug form is on the path of this pod.
    for (message, field) in [
        ("image pulls configured", "max_parallel="),
        ("pod network attached", "ips="),
        ("mounted tmpfs volume", "size=8388608"),
        ("probe status changed", "ready=true"),
        ("pod phase", "phase=Running"),
        ("pod sandbox started", "ips="),
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(message) && l.contains(field)),
            "no line {message:?} with {field}:\n{log}"
        );
    }
    let bad: Vec<(&str, Vec<String>)> = log
        .lines()
        .map(|l| (l, debug_formatted_fields(l)))
        .filter(|(_, found)| !found.is_empty())
        .collect();
    assert!(bad.is_empty(), "fields printed in Debug form: {bad:#?}");
}
