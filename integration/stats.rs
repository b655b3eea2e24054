//! The built-in stats collector against real containers with known load, read through the
//! agent's /stats/summary and /metrics/resource as metrics-server and kubectl top read them.

mod common;

use std::io::{Read, Write};

use common::*;
use serde_json::Value;

fn summary(node: &Node) -> Value {
    let (code, body) = http_get(node.port, "/stats/summary").expect("summary answers");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("summary is JSON")
}

fn pod_stats(s: &Value, name: &str) -> Option<Value> {
    s["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == name)
        .cloned()
}

fn container_stats(p: &Value, name: &str) -> Value {
    p["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name).cloned())
        .unwrap_or(Value::Null)
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn cpu_memory_and_network_match_known_load() {
    let node = Node::start_with("stats", &["--housekeeping-interval=2s"]);
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: load}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: mem, emptyDir: {{medium: Memory, sizeLimit: 256Mi}}}}]
  containers:
  - name: spin
    image: {BUSYBOX}
    command: ["sh", "-c", "while true; do :; done"]
  - name: hold
    image: {BUSYBOX}
    command: ["sh", "-c", "dd if=/dev/zero of=/mem/blob bs=1M count=100 2>/dev/null; exec sleep 3600"]
    volumeMounts: [{{name: mem, mountPath: /mem}}]
  - name: web
    image: {BUSYBOX}
    command: ["sh", "-c", "mkdir -p /tmp/w && dd if=/dev/zero of=/tmp/w/big bs=1M count=5 2>/dev/null && exec httpd -f -p 8080 -h /tmp/w"]
"#
    );
    node.write_manifest("load.yaml", &m);
    let pod = node.wait_pod("load", 60, "Running", |p| p["status"]["phase"] == "Running");
    let full = node.pod_name("load");
    let ip = pod["status"]["podIP"].as_str().unwrap().to_string();

    // Bytes the pod sends: fetch 5 MiB from it over the pod network.
    node.wait_until(30, "5 MiB fetched from the pod", || {
        let Ok(mut s) = std::net::TcpStream::connect((ip.as_str(), 8080)) else {
            return false;
        };
        let _ = write!(s, "GET /big HTTP/1.0\r\n\r\n");
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        buf.len() >= 5 << 20
    });

    // Two samples are needed for a rate; wait until the numbers have settled.
    let mut last = Value::Null;
    node.wait_until(60, "stats for all three containers with a cpu rate", || {
        let s = summary(&node);
        let Some(p) = pod_stats(&s, &full) else {
            return false;
        };
        let ok = ["spin", "hold", "web"]
            .iter()
            .all(|c| container_stats(&p, c)["cpu"]["usageNanoCores"].is_u64())
            && container_stats(&p, "hold")["memory"]["workingSetBytes"]
                .as_u64()
                .unwrap_or(0)
                >= 100 << 20
            && p["network"]["txBytes"].as_u64().unwrap_or(0) >= 5 << 20;
        last = p;
        ok
    });
    let p = last;
    let spin = container_stats(&p, "spin")["cpu"]["usageNanoCores"]
        .as_u64()
        .unwrap() as f64;
    // The spinning container gets what the scheduler gives it: one core on an idle
    // machine, less while other tests load this one (the rate's arithmetic is unit-tested in
    // stats::collector). So the figure must be a large share of a core, never more than
    // the one its single thread can use, and clearly apart from the idle container's.
    assert!(
        (0.25e9..=1.1e9).contains(&spin),
        "a container spinning one core reads {spin} nanocores"
    );
    // Two housekeeping intervals later the container that filled its volume only sleeps.
    std::thread::sleep(std::time::Duration::from_secs(5));
    let later = pod_stats(&summary(&node), &full).expect("the pod's stats");
    let idle = container_stats(&later, "hold")["cpu"]["usageNanoCores"]
        .as_u64()
        .unwrap() as f64;
    assert!(idle < 0.05e9, "a sleeping container reads {idle} nanocores");
    let ws = container_stats(&p, "hold")["memory"]["workingSetBytes"]
        .as_u64()
        .unwrap();
    assert!(ws >= 100 << 20, "working set {ws}");
    assert_eq!(p["network"]["name"], "eth0");
    assert!(
        p["network"]["txBytes"].as_u64().unwrap() >= 5 << 20,
        "{}",
        p["network"]
    );
    assert!(p["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0);
    let s = summary(&node);
    assert_eq!(s["node"]["nodeName"], node.node_name.as_str());
    assert!(s["node"]["cpu"]["usageNanoCores"].as_u64().unwrap() >= 900_000_000);
    assert!(s["node"]["fs"]["capacityBytes"].as_u64().unwrap() > 0);
    assert!(
        s["node"]["runtime"]["imageFs"]["capacityBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    // The agent's own cgroup, containerd's (found by its pid) and the pods' root: each read
    // from a real cgroup, so each has memory in use.
    for name in ["kubelet", "runtime", "pods"] {
        let sc = s["node"]["systemContainers"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == name))
            .unwrap_or_else(|| panic!("no {name} system container: {}", s["node"]));
        assert!(
            sc["memory"]["usageBytes"].as_u64().unwrap_or(0) > 0,
            "{name}: {sc}"
        );
    }

    // only_cpu_and_memory drops the rest.
    let (_, body) = http_get(node.port, "/stats/summary?only_cpu_and_memory=true").unwrap();
    let small: Value = serde_json::from_str(&body).unwrap();
    let sp = pod_stats(&small, &full).unwrap();
    assert!(sp.get("network").is_none() && sp["cpu"].is_object());
    // Only the literal "true" selects it, as upstream compares strings.
    let (_, body) = http_get(node.port, "/stats/summary?only_cpu_and_memory=1").unwrap();
    let one: Value = serde_json::from_str(&body).unwrap();
    let op = pod_stats(&one, &full).unwrap();
    assert!(op["network"].is_object(), "{op}");
    assert!(one["node"]["fs"].is_object(), "{}", one["node"]);

    // metrics-server's view.
    let (code, text) = http_get(node.port, "/metrics/resource").unwrap();
    assert_eq!(code, 200);
    assert!(text.contains(&format!(
        "container_cpu_usage_seconds_total{{container=\"spin\",namespace=\"default\",pod=\"{full}\"}}"
    )), "{text}");
    assert!(text.contains("node_memory_working_set_bytes "));
    assert!(text.contains("resource_scrape_error 0"), "{text}");

    // The agent's own metrics.
    let (code, own) = http_get(node.port, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert!(
        own.contains("kubelet_pod_start_duration_seconds_count 1"),
        "{own}"
    );
    assert!(
        own.contains(
            "kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"create_task\""
        ),
        "{own}"
    );
    // Every pod sync relists, so a pod that ran has been counted.
    let relists = sample_value(&own, "kubelet_pleg_relist_duration_seconds_count")
        .unwrap_or_else(|| panic!("no PLEG relist count: {own}"));
    assert!(relists > 0.0, "PLEG relist count {relists}");

    // /runningpods/ is on the authenticated port only; the legacy flag defaults (anonymous,
    // AlwaysAllow) let an anonymous client in.
    let (code, body) = https_get(&node, "/runningpods/");
    assert_eq!(code, 200, "{body}");
    let list: Value = serde_json::from_str(&body).expect("/runningpods/ is JSON");
    assert_eq!(list["kind"], "PodList", "{body}");
    let running = list["items"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["metadata"]["name"] == full.as_str()))
        .unwrap_or_else(|| panic!("{full} is not in {body}"));
    assert_eq!(running["metadata"]["uid"], pod["metadata"]["uid"]);
    let mut names: Vec<&str> = running["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["hold", "spin", "web"], "{running}");
}

/// The value of an unlabelled sample in a Prometheus text exposition.
fn sample_value(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (n, rest) = l.split_once(' ')?;
        (n == name).then(|| rest.split_whitespace().next()?.parse().ok())?
    })
}

/// GET on the agent's TLS port, verifying its self-signed certificate against the CA it
/// keeps next to it under the root dir; (status, body).
fn https_get(node: &Node, path: &str) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let pem = std::fs::read(node.root.path().join("root/pki/kubelet.crt")).unwrap();
    let chain: Vec<CertificateDer> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(chain[1].clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let conn = rustls::ClientConnection::new(
        std::sync::Arc::new(config),
        ServerName::try_from(node.node_name.clone()).unwrap(),
    )
    .unwrap();
    let tcp = std::net::TcpStream::connect(("127.0.0.1", node.secure_port)).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        node.node_name
    )
    .unwrap();
    let mut buf = Vec::new();
    let _ = tls.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, body.to_string())
}

/// The series of `family` whose label set contains every `want` pair (as `k="v"`); (labels
/// text, value) of each.
fn series<'a>(text: &'a str, family: &str, want: &[String]) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(family)?.strip_prefix('{')?;
            let (labels, tail) = rest.split_once("} ")?;
            let labels_padded = format!(",{labels},");
            want.iter()
                .all(|w| labels_padded.contains(&format!(",{w},")))
                .then(|| Some((labels, tail.split_whitespace().next()?.parse().ok()?)))?
        })
        .collect()
}

/// `/metrics/cadvisor` on a node running a busybox pod: its container's cpu and working set
/// with the labels upstream's kubelet gives them on containerd (id = the cgroup path, name =
/// the container's ID), on the read-only port too, and a cpu counter that moves.
#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn cadvisor_metrics_of_a_busybox_pod() {
    let node = Node::start_with("cadvisor", &["--housekeeping-interval=2s"]);
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: busy}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: work
    image: {BUSYBOX}
    command: ["sh", "-c", "while true; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 1; done"]
"#
    );
    node.write_manifest("busy.yaml", &m);
    node.wait_pod("busy", 60, "Running", |p| p["status"]["phase"] == "Running");
    let full = node.pod_name("busy");
    let want = vec![
        "container=\"work\"".to_string(),
        "cpu=\"total\"".to_string(),
        format!("image=\"{BUSYBOX}\""),
        "namespace=\"default\"".to_string(),
        format!("pod=\"{full}\""),
    ];
    let mut first = None;
    node.wait_until(60, "the container's cpu series", || {
        let Some((200, text)) = http_get(node.port, "/metrics/cadvisor") else {
            return false;
        };
        first = series(&text, "container_cpu_usage_seconds_total", &want)
            .first()
            .map(|(l, v)| (l.to_string(), *v));
        first.is_some()
    });
    let (labels, cpu0) = first.unwrap();
    // name is the 64-hex container ID, id its cgroup: the pod's cgroup, then the ID.
    let name = labels
        .split(',')
        .find_map(|kv| kv.strip_prefix("name=\""))
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no name label: {labels}"));
    assert_eq!(name.len(), 64, "{labels}");
    assert!(name.bytes().all(|b| b.is_ascii_hexdigit()), "{labels}");
    assert!(
        labels.contains("/pod") && labels.contains(&format!("{name}\",image=")),
        "id is the cgroup path ending in the ID: {labels}"
    );

    // The counter moves as the container works, and its working set is there.
    let mut later = cpu0;
    node.wait_until(60, "the cpu counter to move", || {
        let Some((200, text)) = http_get(node.port, "/metrics/cadvisor") else {
            return false;
        };
        later = series(&text, "container_cpu_usage_seconds_total", &want)
            .first()
            .map_or(cpu0, |s| s.1);
        later > cpu0
    });
    let (code, text) = http_get(node.port, "/metrics/cadvisor").unwrap();
    assert_eq!(code, 200);
    let ws = series(
        &text,
        "container_memory_working_set_bytes",
        &[
            "container=\"work\"".to_string(),
            format!("name=\"{name}\""),
            format!("pod=\"{full}\""),
        ],
    );
    assert_eq!(ws.len(), 1, "{text}");
    assert!(ws[0].1 > 0.0, "working set {}", ws[0].1);
    // The pod's cgroup and its sandbox, as upstream shows them on containerd.
    let pod_series = series(
        &text,
        "container_memory_working_set_bytes",
        &["container=\"\"".to_string(), format!("pod=\"{full}\"")],
    );
    assert_eq!(
        pod_series.len(),
        2,
        "pod cgroup and sandbox: {pod_series:?}"
    );
    assert!(
        series(
            &text,
            "container_network_receive_bytes_total",
            &["interface=\"eth0\"".to_string(), format!("pod=\"{full}\"")]
        )
        .len()
            == 1,
        "the sandbox carries the pod's network"
    );
    assert!(text.contains("container_scrape_error 0\n"), "{text}");
    assert!(text.contains("# TYPE machine_cpu_cores gauge\n"), "{text}");
}
