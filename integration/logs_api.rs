//! /containerLogs on the authenticated port against real containers: every query parameter.

mod common;

use std::process::Command;

use common::*;

/// GET over HTTPS with curl (the agent's certificate is self-signed; anonymous access is on
/// with bare flags, as upstream's legacy defaults).
fn curl(port: u16, path_and_query: &str, max_time: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", max_time, "-w", "\n%{http_code}"])
        .arg(format!("https://127.0.0.1:{port}{path_and_query}"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn container_logs_parameters() {
    let node = Node::start("logs-api");
    // First run prints "first-run" and exits 1; the second prints numbered lines forever.
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: talk}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: state, emptyDir: {{}}}}]
  containers:
  - name: c
    image: {BUSYBOX}
    volumeMounts: [{{name: state, mountPath: /state}}]
    command:
    - sh
    - -c
    - |
      if [ ! -f /state/ran ]; then touch /state/ran; echo first-run; exit 1; fi
      i=0; while true; do echo line-$i; i=$((i+1)); sleep 0.5; done
"#
    );
    node.write_manifest("talk.yaml", &m);
    node.wait_pod("talk", 60, "restarted once and running", |p| {
        let c = container_status(p, "c");
        c["restartCount"] == 1 && c["state"]["running"].is_object()
    });
    let pod = node.pod_name("talk");
    let base = format!("/containerLogs/default/{pod}/c");
    let port = node.secure_port;
    node.wait_until(20, "five lines", || {
        curl(port, &base, "5").1.contains("line-4")
    });

    let (code, all) = curl(port, &base, "5");
    assert_eq!(code, 200);
    assert!(all.starts_with("line-0\n"), "{all}");

    let (_, tail) = curl(port, &format!("{base}?tailLines=2"), "5");
    assert_eq!(tail.lines().count(), 2, "{tail}");

    let (_, stamped) = curl(port, &format!("{base}?timestamps=true&tailLines=1"), "5");
    let (ts, rest) = stamped.trim_end().split_once(' ').unwrap();
    assert!(
        ts.len() == 30 && ts.ends_with('Z'),
        "fixed 9-digit timestamp: {ts}"
    );
    assert!(rest.starts_with("line-"));

    let (_, limited) = curl(port, &format!("{base}?limitBytes=8"), "5");
    assert_eq!(limited.len(), 8, "{limited:?}");

    let (_, previous) = curl(port, &format!("{base}?previous=true"), "5");
    assert_eq!(previous, "first-run\n");

    let (_, recent) = curl(port, &format!("{base}?sinceSeconds=1"), "5");
    assert!(
        recent.lines().count() <= 3 && !recent.contains("line-0\n"),
        "{recent}"
    );
    let future = "2999-01-01T00:00:00Z";
    let (_, none) = curl(port, &format!("{base}?sinceTime={future}"), "5");
    assert_eq!(none, "");

    // follow streams new lines until the client goes away.
    let (_, followed) = curl(port, &format!("{base}?follow=true&tailLines=1"), "3");
    assert!(followed.lines().count() >= 3, "{followed}");

    let (code, _) = curl(port, &format!("/containerLogs/default/{pod}/nosuch"), "5");
    assert_eq!(code, 404);
    let (code, _) = curl(
        port,
        &format!("{base}?sinceSeconds=1&sinceTime={future}"),
        "5",
    );
    assert_eq!(code, 422);
}
