//! Pod health and local storage on a real containerd: host ports, probes, lifecycle hooks
//! and volumes.

mod common;

use common::*;
use serde_json::Value;

fn running(p: &Value) -> bool {
    p["status"]["phase"] == "Running" && condition(p, "Ready")["status"] == "True"
}

fn http_body(addr: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(
        &addr.parse().ok()?,
        std::time::Duration::from_secs(2),
    )
    .ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(3)))
        .ok()?;
    write!(s, "GET / HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    Some(buf)
}

#[test]
fn host_port_reaches_the_pod_and_a_conflict_rejects_the_second_pod() {
    let Some(node) = Node::start("hostport") else {
        return;
    };
    let port = free_port();
    let web = |name: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: {BUSYBOX}
    command: ["sh", "-c", "mkdir -p /tmp/www && echo hello-from-{name} > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
    ports: [{{containerPort: 8080, hostPort: {port}}}]
"#
        )
    };
    node.write_manifest("first.yaml", &web("first"));
    let first = node.wait_pod("first", 60, "Running", running);
    let host_ip = first["status"]["hostIP"].as_str().unwrap().to_string();
    node.wait_until(30, "the host port answers", || {
        http_body(&format!("{host_ip}:{port}")).is_some_and(|b| b.contains("hello-from-first"))
    });
    node.write_manifest("second.yaml", &web("second"));
    let second = node.wait_pod("second", 30, "rejected", |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(second["status"]["reason"], "NodePorts");
    assert!(second["status"]["message"]
        .as_str()
        .unwrap()
        .contains("free ports"));
    // The first pod is undisturbed.
    let again = node.wait_pod("first", 10, "still Running", running);
    assert_eq!(
        container_status(&again, "web")["containerID"],
        container_status(&first, "web")["containerID"]
    );
    assert!(http_body(&format!("{host_ip}:{port}"))
        .unwrap()
        .contains("hello-from-first"));
    assert_eq!(
        node.containers().len(),
        2,
        "nothing created for the rejected pod"
    );
}
