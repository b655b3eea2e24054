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
#[ignore = "needs root and containerd: run hack/test.sh"]
fn host_port_reaches_the_pod_and_a_conflict_rejects_the_second_pod() {
    let node = Node::start("hostport");
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

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn volumes_are_shared_mounted_and_cleaned_up() {
    let node = Node::start("volumes");
    let host_dir = node.root.path().join("host-data");
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: vol
  labels: {{app: vol, tier: "a b"}}
  annotations: {{note: hello}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {{name: shared, emptyDir: {{}}}}
  - {{name: mem, emptyDir: {{medium: Memory, sizeLimit: 8Mi}}}}
  - {{name: host, hostPath: {{path: {host}, type: DirectoryOrCreate}}}}
  - name: info
    downwardAPI:
      items:
      - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
      - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
      - {{path: mem_limit, resourceFieldRef: {{containerName: server, resource: limits.memory, divisor: 1Mi}}}}
  - name: proj
    projected:
      sources:
      - downwardAPI:
          items:
          - {{path: ann, fieldRef: {{fieldPath: "metadata.annotations['note']"}}}}
  containers:
  - name: server
    image: {BUSYBOX}
    command: ["sh", "-c", "echo from-server > /data/index.html; exec httpd -f -p 8080 -h /data"]
    resources: {{limits: {{memory: 64Mi}}}}
    volumeMounts:
    - {{name: shared, mountPath: /data}}
  - name: client
    image: {BUSYBOX}
    env: [{{name: POD, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}]
    command:
    - sh
    - -c
    - |
      sleep 1
      echo "shared=$(wget -qO- http://localhost:8080/index.html)"
      echo "mem=$(grep ' /mem ' /proc/mounts | cut -d' ' -f3,4)"
      echo "labels=$(cat /info/labels | tr '\n' ';')"
      echo "name=$(cat /info/name) limit=$(cat /info/mem_limit) ann=$(cat /proj/ann)"
      echo hello-host > /host/out.txt
      touch /info/x 2>/dev/null && echo info-rw || echo info-ro
      touch /ro/x 2>/dev/null && echo ro-rw || echo ro-ro
      echo from-sub > /sub/file.txt
      echo "sub=$(cat /data/nested/dir/file.txt) expr=$(ls /exprs)"
      exec sleep 3600
    volumeMounts:
    - {{name: mem, mountPath: /mem}}
    - {{name: info, mountPath: /info}}
    - {{name: proj, mountPath: /proj}}
    - {{name: host, mountPath: /host}}
    - {{name: shared, mountPath: /ro, readOnly: true}}
    - {{name: shared, mountPath: /sub, subPath: nested/dir}}
    - {{name: shared, mountPath: /data}}
    - {{name: shared, mountPath: /exprs, subPathExpr: "dirs/$(POD)"}}
"#,
        host = host_dir.display()
    );
    node.write_manifest("vol.yaml", &m);
    let p = node.wait_pod("vol", 60, "Running", running);
    node.wait_until(30, "client output", || {
        read_log(&p, "client", 0).contains("sub=")
    });
    let log = read_log(&p, "client", 0);
    assert!(log.contains("shared=from-server"), "{log}");
    assert!(log.contains("mem=tmpfs rw"), "{log}");
    assert!(log.contains("size=8192k"), "{log}");
    assert!(log.contains(r#"labels=app="vol";tier="a b""#), "{log}");
    assert!(
        log.contains(&format!("name={} limit=64 ann=hello", node.pod_name("vol"))),
        "{log}"
    );
    assert!(log.contains("info-ro"), "{log}");
    assert!(log.contains("ro-ro"), "{log}");
    // The client sees the file it wrote under /sub at nested/dir of the whole volume.
    assert!(log.contains("sub=from-sub expr="), "{log}");
    assert_eq!(
        std::fs::read_to_string(host_dir.join("out.txt")).unwrap(),
        "hello-host\n"
    );
    // subPathExpr made its directory inside the volume.
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let vol_dir = node
        .root
        .path()
        .join("root/pods")
        .join(uid)
        .join("volumes/kubernetes.io~empty-dir/shared");
    assert!(vol_dir.join("dirs").join(node.pod_name("vol")).is_dir());
    // subPath mounted the subdirectory (made on demand), not the volume's root.
    assert_eq!(
        std::fs::read_to_string(vol_dir.join("nested/dir/file.txt")).unwrap(),
        "from-sub\n"
    );
    assert!(!vol_dir.join("file.txt").exists());
    let mem_dir = node
        .root
        .path()
        .join("root/pods")
        .join(uid)
        .join("volumes/kubernetes.io~empty-dir/mem");
    node.remove_manifest("vol.yaml");
    node.wait_gone("vol", 60);
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(
        !mounts.contains(&mem_dir.display().to_string()),
        "tmpfs left mounted"
    );
    assert!(!vol_dir.exists());
    // hostPath contents are never removed with the pod.
    assert!(host_dir.join("out.txt").exists());
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn a_volume_that_cannot_be_set_up_holds_only_its_pod() {
    let node = Node::start("volume-error");
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: badvol}}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{{name: h, hostPath: {{path: /no/such/dir/anywhere, type: Directory}}}}]
  containers:
  - {{name: c, image: {BUSYBOX}, command: [sleep, "3600"], volumeMounts: [{{name: h, mountPath: /h}}]}}
"#
    );
    node.write_manifest("bad.yaml", &m);
    node.write_manifest(
        "good.yaml",
        &busybox_pod("good", "Always", "exec sleep 3600"),
    );
    let p = node.wait_pod("badvol", 60, "waiting on its volume", |p| {
        container_status(p, "c")["state"]["waiting"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("/no/such/dir/anywhere"))
    });
    assert_eq!(
        container_status(&p, "c")["state"]["waiting"]["reason"],
        "ContainerCreating"
    );
    assert_eq!(p["status"]["phase"], "Pending");
    node.wait_pod("good", 60, "Running", running);
}

fn probe_pod(name: &str, script: &str, probes: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", {script:?}]
    ports: [{{containerPort: 8080, name: http}}]
{probes}
"#
    )
}

const WEB: &str =
    "mkdir -p /tmp/w && echo ok > /tmp/w/index.html && exec httpd -f -p 8080 -h /tmp/w";

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn probes_drive_readiness_and_restarts() {
    let node = Node::start("probes");
    // exec readiness that starts failing and then passes
    node.write_manifest(
        "late.yaml",
        &probe_pod(
            "late",
            "sleep 20; touch /tmp/ready; exec sleep 3600",
            "    readinessProbe: {exec: {command: [test, -f, /tmp/ready]}, periodSeconds: 1}",
        ),
    );
    // exec liveness that fails once the file is gone
    node.write_manifest(
        "dies.yaml",
        &probe_pod(
            "dies",
            "touch /tmp/alive; sleep 3; rm /tmp/alive; exec sleep 3600",
            "    livenessProbe: {exec: {command: [test, -f, /tmp/alive]}, periodSeconds: 1, failureThreshold: 2}",
        ),
    );
    // httpGet readiness by port name passes; tcpSocket liveness passes
    node.write_manifest(
        "web.yaml",
        &probe_pod(
            "web",
            WEB,
            "    readinessProbe: {httpGet: {port: http, path: /index.html}, periodSeconds: 1}\n    livenessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}",
        ),
    );
    // httpGet readiness on a missing path fails; tcpSocket liveness on a closed port kills
    node.write_manifest(
        "bad.yaml",
        &probe_pod(
            "bad",
            WEB,
            "    readinessProbe: {httpGet: {port: 8080, path: /nope}, periodSeconds: 1}",
        ),
    );
    node.write_manifest(
        "tcpdead.yaml",
        &probe_pod(
            "tcpdead",
            WEB,
            "    livenessProbe: {tcpSocket: {port: 9999}, periodSeconds: 1, failureThreshold: 1}",
        ),
    );
    // startup probe holds readiness back until it passes
    node.write_manifest(
        "slow.yaml",
        &probe_pod(
            "slow",
            "sleep 20; touch /tmp/up; exec sleep 3600",
            "    startupProbe: {exec: {command: [test, -f, /tmp/up]}, periodSeconds: 1, failureThreshold: 90}\n    readinessProbe: {exec: {command: ['true']}, periodSeconds: 1}",
        ),
    );

    // The files appear 20 s after the containers start: long enough for both checks of the
    // "before" state on a loaded machine (with 4 s, the wait for one pod could outlast the
    // other's delay).
    let p = node.wait_pod("late", 30, "Running but not ready", |p| {
        p["status"]["phase"] == "Running"
            && container_status(p, "c")["state"]["running"].is_object()
    });
    assert_eq!(container_status(&p, "c")["ready"], false);
    assert_eq!(condition(&p, "Ready")["status"], "False");
    let p = node.wait_pod("slow", 30, "running, not started", |p| {
        container_status(p, "c")["state"]["running"].is_object()
    });
    assert_eq!(container_status(&p, "c")["started"], false);
    assert_eq!(container_status(&p, "c")["ready"], false);
    node.wait_pod("late", 60, "ready after the file appears", running);
    let p = node.wait_pod("slow", 60, "started and ready", running);
    assert_eq!(container_status(&p, "c")["started"], true);

    let p = node.wait_pod("dies", 60, "restarted by liveness", |p| {
        container_status(p, "c")["restartCount"]
            .as_i64()
            .unwrap_or(0)
            >= 1
            && container_status(p, "c")["lastState"]["terminated"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Liveness probe failed"))
    });
    let last = &container_status(&p, "c")["lastState"]["terminated"];
    assert!(
        last["message"]
            .as_str()
            .unwrap_or("")
            .contains("Liveness probe failed"),
        "{last}"
    );

    node.wait_pod("web", 30, "ready", running);
    let p = node.wait_pod("tcpdead", 60, "restarted by tcp liveness", |p| {
        container_status(p, "c")["restartCount"]
            .as_i64()
            .unwrap_or(0)
            >= 1
            && container_status(p, "c")["lastState"]["terminated"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Liveness probe failed"))
    });
    assert!(
        container_status(&p, "c")["lastState"]["terminated"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("Liveness probe failed")
    );
    let bad = node.wait_pod("bad", 10, "running", |p| {
        container_status(p, "c")["state"]["running"].is_object()
    });
    assert_eq!(container_status(&bad, "c")["ready"], false);
    // The failing readiness probe is counted as such on /metrics/probes.
    let (code, metrics) = http_get(node.port, "/metrics/probes").expect("/metrics/probes");
    assert_eq!(code, 200, "{metrics}");
    let count = |pod: &Value, probe_type: &str, result: &str| -> f64 {
        let m = &pod["metadata"];
        let labels = [
            format!("probe_type=\"{probe_type}\""),
            format!("result=\"{result}\""),
            "container=\"c\"".to_string(),
            format!("pod=\"{}\"", m["name"].as_str().unwrap()),
            format!("namespace=\"{}\"", m["namespace"].as_str().unwrap()),
            format!("pod_uid=\"{}\"", m["uid"].as_str().unwrap()),
        ];
        metrics
            .lines()
            .filter(|l| l.starts_with("prober_probe_total{"))
            .filter(|l| labels.iter().all(|x| l.contains(x.as_str())))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(count(&bad, "Readiness", "failed") > 0.0, "{metrics}");
    assert_eq!(count(&bad, "Readiness", "successful"), 0.0, "{metrics}");
    let web_pod = node.pod("web").unwrap();
    assert!(
        count(&web_pod, "Readiness", "successful") > 0.0,
        "{metrics}"
    );
    // The passing probes never restarted anything.
    let web = node.pod("web").unwrap();
    assert_eq!(container_status(&web, "c")["restartCount"], 0);
    assert_eq!(container_status(&bad, "c")["restartCount"], 0);
}

/// A grpc.health.v1 server on the host for hostNetwork pods' grpc probes: "" is SERVING,
/// "sick" is NOT_SERVING.
#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn pods_probed_every_second_are_removed_with_no_task_or_exec_left() {
    let node = Node::start("probe-teardown");
    let names = ["pt0", "pt1", "pt2", "pt3"];
    for name in names {
        node.write_manifest(
            &format!("{name}.yaml"),
            &probe_pod(
                name,
                "trap 'exit 0' TERM; sleep 3600 & wait",
                "    readinessProbe: {exec: {command: [\"true\"]}, periodSeconds: 1}",
            ),
        );
    }
    for name in names {
        node.wait_pod(name, 120, "Running and Ready", running);
    }
    // Removed while their probes run: a probe exec cut off half-way would leave its pod's
    // shim stuck (see runtime::exec::exec_to_end), so its tasks would outlive the pod.
    for name in names {
        node.remove_manifest(&format!("{name}.yaml"));
    }
    for name in names {
        node.wait_gone(name, 120);
    }
    node.wait_until(120, "no task left", || node.tasks().is_empty());
    node.wait_until(120, "no container left", || node.containers().is_empty());
    // Every probe exec was deleted from its shim (one already gone with its task is fine).
    let log = node.log();
    assert!(!log.contains("cannot delete exec process"), "{log}");
}

fn start_health_server(addr: std::net::SocketAddr) {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (reporter, service) = tonic_health::server::health_reporter();
            reporter
                .set_service_status("", tonic_health::ServingStatus::Serving)
                .await;
            reporter
                .set_service_status("sick", tonic_health::ServingStatus::NotServing)
                .await;
            tonic::transport::Server::builder()
                .add_service(service)
                .serve(addr)
                .await
                .unwrap();
        });
    });
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn grpc_probes() {
    let node = Node::start("grpc-probes");
    let port = free_port();
    // hostNetwork: the probe's pod IP is the node's address, where the test serves gRPC.
    node.write_manifest(
        "seed.yaml",
        &busybox_pod("seed", "Always", "exec sleep 3600"),
    );
    let seed = node.wait_pod("seed", 60, "Running", running);
    let host_ip: std::net::IpAddr = seed["status"]["hostIP"].as_str().unwrap().parse().unwrap();
    start_health_server(std::net::SocketAddr::new(host_ip, port));
    let grpc_pod = |name: &str, probe: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: [sleep, "3600"]
{probe}
"#
        )
    };
    node.write_manifest(
        "ok.yaml",
        &grpc_pod(
            "ok",
            &format!("    readinessProbe: {{grpc: {{port: {port}}}, periodSeconds: 1}}"),
        ),
    );
    node.write_manifest(
        "sick.yaml",
        &grpc_pod("sick", &format!("    livenessProbe: {{grpc: {{port: {port}, service: sick}}, periodSeconds: 1, failureThreshold: 1}}")),
    );
    node.wait_pod("ok", 60, "ready through grpc", running);
    let p = node.wait_pod("sick", 60, "restarted by grpc liveness", |p| {
        container_status(p, "c")["restartCount"]
            .as_i64()
            .unwrap_or(0)
            >= 1
            && container_status(p, "c")["lastState"]["terminated"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Liveness probe failed"))
    });
    assert!(
        container_status(&p, "c")["lastState"]["terminated"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("Liveness probe failed")
    );
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn lifecycle_hooks() {
    let node = Node::start("hooks");
    let out = node.root.path().join("hook-out");
    std::fs::create_dir_all(&out).unwrap();
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: hooked}}
spec:
  terminationGracePeriodSeconds: 5
  volumes: [{{name: out, hostPath: {{path: {out}}}}}]
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", "until grep -q started /tmp/post 2>/dev/null; do sleep 0.2; done; echo post=$(cat /tmp/post); exec sleep 3600"]
    volumeMounts: [{{name: out, mountPath: /out}}]
    lifecycle:
      postStart: {{exec: {{command: [sh, -c, "echo started > /tmp/post"]}}}}
      preStop: {{exec: {{command: [sh, -c, "echo stopping > /out/prestop"]}}}}
  - name: s
    image: {BUSYBOX}
    command: [sleep, "3600"]
    lifecycle:
      preStop: {{sleep: {{seconds: 1}}}}
"#,
        out = out.display()
    );
    node.write_manifest("hooked.yaml", &m);
    let p = node.wait_pod("hooked", 60, "Running", running);
    node.wait_until(20, "postStart output", || {
        read_log(&p, "c", 0).contains("post=started")
    });
    node.remove_manifest("hooked.yaml");
    node.wait_gone("hooked", 60);
    assert_eq!(
        std::fs::read_to_string(out.join("prestop")).unwrap(),
        "stopping\n"
    );
    assert!(
        node.log().matches("running preStop hook").count() >= 2,
        "{}",
        node.log()
    );

    let failing = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: postfail}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: [sleep, "3600"]
    lifecycle:
      postStart: {{exec: {{command: [sh, -c, "exit 5"]}}}}
"#
    );
    node.write_manifest("postfail.yaml", &failing);
    let p = node.wait_pod("postfail", 60, "PostStartHookError", |p| {
        container_status(p, "c")["state"]["waiting"]["reason"] == "PostStartHookError"
            || container_status(p, "c")["lastState"]["terminated"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("FailedPostStartHook"))
    });
    let text = container_status(&p, "c").to_string();
    assert!(text.contains("FailedPostStartHook"), "{text}");
    assert!(node.log().contains("FailedPostStartHook"));
}

fn restarted_with(p: &Value, what: &str) -> bool {
    container_status(p, "c")["restartCount"]
        .as_i64()
        .unwrap_or(0)
        >= 1
        && container_status(p, "c")["lastState"]["terminated"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(what))
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn probe_grace_period_overrides_the_pods_for_a_liveness_kill() {
    let node = Node::start("probe-grace");
    // Only the first run ignores SIGTERM, so that removing the pod at the end (under the
    // pod's 60 s) is quick; the liveness kill under test is of the first run.
    let script = "if [ -e /state/once ]; then trap 'exit 0' TERM; else touch /state/once; trap '' TERM; fi; while true; do sleep 1; done";
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: stubborn}}
spec:
  terminationGracePeriodSeconds: 60
  volumes: [{{name: state, emptyDir: {{}}}}]
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", {script:?}]
    volumeMounts: [{{name: state, mountPath: /state}}]
    livenessProbe:
      exec: {{command: ["false"]}}
      periodSeconds: 1
      failureThreshold: 1
      terminationGracePeriodSeconds: 1
"#
    );
    node.write_manifest("stubborn.yaml", &m);
    node.wait_pod("stubborn", 60, "first run started", |p| {
        container_status(p, "c")["state"]["running"].is_object()
    });
    // Within 25 s, far short of the pod's 60 s grace period.
    let p = node.wait_pod("stubborn", 25, "killed by liveness", |p| {
        restarted_with(p, "Liveness probe failed")
    });
    // The first run ignored SIGTERM: only the SIGKILL at the end of the probe's grace
    // period could have stopped it.
    assert_eq!(
        container_status(&p, "c")["lastState"]["terminated"]["exitCode"],
        137,
        "{}",
        container_status(&p, "c")
    );
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn pre_stop_is_cut_by_the_grace_period() {
    let node = Node::start("prestop-bound");
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: slowstop}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    lifecycle:
      preStop: {{sleep: {{seconds: 30}}}}
"#
    );
    node.write_manifest("slowstop.yaml", &m);
    node.wait_pod("slowstop", 60, "Running", running);
    let t0 = std::time::Instant::now();
    node.remove_manifest("slowstop.yaml");
    node.wait_gone("slowstop", 40);
    let took = t0.elapsed();
    // Uncut, the preStop alone takes 30 s; 20 s leaves the teardown room on a loaded machine.
    assert!(
        took < std::time::Duration::from_secs(20),
        "pod with a 2 s grace period took {took:?} to go"
    );
    node.wait_until(10, "containers removed", || node.containers().is_empty());
    let log = node.log();
    assert!(log.contains("running preStop hook"), "{log}");
    // The sleep handler cut short reports it, as upstream's does.
    assert!(
        log.lines().any(|l| l.contains("FailedPreStopHook")
            && l.contains("container terminated before sleep hook finished")),
        "{log}"
    );
}

/// Records the head (request line and headers) of every HTTP request it gets, and answers
/// each with an empty 200.
fn start_recording_server(
    addr: std::net::SocketAddr,
) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use std::io::{Read, Write};
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = std::net::TcpListener::bind(addr).unwrap();
    let out = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            out.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf).into_owned());
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    seen
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn http_get_hooks_reach_their_host() {
    let node = Node::start("http-hooks");
    node.write_manifest(
        "seed.yaml",
        &busybox_pod("seed", "Always", "exec sleep 3600"),
    );
    let seed = node.wait_pod("seed", 60, "Running", running);
    let host_ip: std::net::IpAddr = seed["status"]["hostIP"].as_str().unwrap().parse().unwrap();
    let port = free_port();
    let seen = start_recording_server(std::net::SocketAddr::new(host_ip, port));
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: webhooks}}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: c
    image: {BUSYBOX}
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    lifecycle:
      postStart:
        httpGet: {{host: "{host_ip}", port: {port}, path: "/post-start?n=1", httpHeaders: [{{name: X-Hook, value: post}}]}}
      preStop:
        httpGet: {{host: "{host_ip}", port: {port}, path: /pre-stop}}
"#
    );
    node.write_manifest("webhooks.yaml", &m);
    node.wait_pod("webhooks", 60, "Running", running);
    let requests = || seen.lock().unwrap().clone();
    node.wait_until(10, "the postStart GET", || !requests().is_empty());
    let post: Vec<String> = requests()
        .into_iter()
        .filter(|r| r.starts_with("GET /post-start?n=1 HTTP/1.1\r\n"))
        .collect();
    assert_eq!(post.len(), 1, "{:?}", requests());
    let head = post[0].to_ascii_lowercase();
    assert!(head.contains("\r\nx-hook: post\r\n"), "{head}");
    assert!(head.contains("\r\nuser-agent: kube-lifecycle/"), "{head}");
    assert!(
        !requests().iter().any(|r| r.starts_with("GET /pre-stop ")),
        "preStop ran before the pod was removed: {:?}",
        requests()
    );

    node.remove_manifest("webhooks.yaml");
    node.wait_gone("webhooks", 60);
    let pre = requests()
        .into_iter()
        .filter(|r| r.starts_with("GET /pre-stop HTTP/1.1\r\n"))
        .count();
    assert_eq!(pre, 1, "{:?}", requests());
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn a_failing_startup_probe_restarts_the_container() {
    let node = Node::start("startup-fails");
    node.write_manifest(
        "nostart.yaml",
        &probe_pod(
            "nostart",
            "exec sleep 3600",
            "    startupProbe: {exec: {command: ['false']}, periodSeconds: 1, failureThreshold: 2}",
        ),
    );
    let p = node.wait_pod("nostart", 60, "restarted by the startup probe", |p| {
        restarted_with(p, "Startup probe failed")
    });
    assert_eq!(container_status(&p, "c")["started"], false);
    let log = node.log();
    assert!(
        log.lines()
            .any(|l| l.contains("probe failed; killing container")
                && l.contains("Startup probe failed")),
        "{log}"
    );
}
