//! Cluster mode against a real control plane (hack/cluster/up.sh: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler v1.34.4) and kubectl: the Node and its Lease, pods
//! the scheduler binds to the node, their status, logs through the apiserver, graceful
//! deletion, mirror pods, admission, a Deployment scaled, and an agent restart.

mod common;

use std::time::Duration;

use common::cluster::ClusterNode;
use common::container_status;
use serde_json::Value;

fn condition<'a>(obj: &'a Value, kind: &str) -> &'a Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn is_ready_node(node: &Value) -> bool {
    condition(node, "Ready")["status"] == "True"
}

fn is_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running" && condition(pod, "Ready")["status"] == "True"
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn node_registers_ready_with_its_status_and_lease() {
    let mut n = ClusterNode::start(
        "cluster-node",
        &[
            "--node-labels=example.com/role=test",
            "--register-with-taints=example.com/dedicated=test:PreferNoSchedule",
        ],
    );
    let name = n.name().to_string();
    n.wait_api(60, "the Node is Ready", |c| {
        c.get(&["node", &name]).is_some_and(|o| is_ready_node(&o))
    });
    let node = n.node_object();
    // `kubectl get nodes` as a person reads it.
    let table = n.cluster.ok(&["get", "node", &name, "-o", "wide"]);
    assert!(
        table.contains("Ready") && table.contains("containerd://"),
        "{table}"
    );
    // The node's own events, as upstream records them at start.
    let selector = format!("involvedObject.kind=Node,involvedObject.name={name}");
    n.wait_api(30, "the node's Starting and condition events", |c| {
        let events = c.ok(&[
            "-n",
            "default",
            "get",
            "events",
            "--field-selector",
            &selector,
        ]);
        events.contains("Starting kubelet.") && events.contains("NodeHasSufficientMemory")
    });
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], name.as_str());
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["beta.kubernetes.io/os"], "linux");
    assert!(labels["kubernetes.io/arch"]
        .as_str()
        .is_some_and(|a| !a.is_empty()));
    assert_eq!(labels["example.com/role"], "test");
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        taints.iter().any(|t| t["key"] == "example.com/dedicated"
            && t["value"] == "test"
            && t["effect"] == "PreferNoSchedule"),
        "taints: {taints:?}"
    );

    let status = &node["status"];
    let cpus = std::thread::available_parallelism()
        .unwrap()
        .get()
        .to_string();
    assert_eq!(status["capacity"]["cpu"], cpus.as_str());
    assert_eq!(status["capacity"]["pods"], "110");
    for r in ["memory", "ephemeral-storage"] {
        assert!(status["capacity"][r].is_string(), "capacity {r}: {status}");
        assert!(
            status["allocatable"][r].is_string(),
            "allocatable {r}: {status}"
        );
    }
    // The default hard eviction threshold (memory.available<100Mi) comes off allocatable.
    assert_ne!(
        status["capacity"]["memory"],
        status["allocatable"]["memory"]
    );
    for (kind, reason) in [
        ("MemoryPressure", "KubeletHasSufficientMemory"),
        ("DiskPressure", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "KubeletHasSufficientPID"),
        ("Ready", "KubeletReady"),
    ] {
        let c = condition(&node, kind);
        assert_eq!(c["reason"], reason, "{kind}: {c}");
        let expected = if kind == "Ready" { "True" } else { "False" };
        assert_eq!(c["status"], expected, "{kind}: {c}");
    }
    let info = &status["nodeInfo"];
    assert!(
        info["containerRuntimeVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("containerd://") && v.len() > "containerd://".len()),
        "{info}"
    );
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(info["bootID"], boot_id.trim());
    assert_eq!(info["operatingSystem"], "linux");
    assert!(info["kubeletVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with('v')));
    assert!(info["kernelVersion"]
        .as_str()
        .is_some_and(|v| !v.is_empty()));
    let addresses = status["addresses"].as_array().cloned().unwrap_or_default();
    assert!(
        addresses
            .iter()
            .any(|a| a["type"] == "Hostname" && a["address"] == name.as_str()),
        "{addresses:?}"
    );
    assert!(
        addresses.iter().any(|a| a["type"] == "InternalIP"),
        "{addresses:?}"
    );
    assert_eq!(
        status["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        n.secure_port
    );
    let images = status["images"].as_array().cloned().unwrap_or_default();
    assert!(
        images
            .iter()
            .any(|i| i["names"].as_array().is_some_and(|ns| ns
                .iter()
                .any(|n| n.as_str().is_some_and(|n| n.contains("busybox"))))),
        "images: {images:?}"
    );

    // The Lease: held by the node, owned by the Node (from the first renewal after the Node
    // exists, as upstream), renewed.
    let lease_of = |n: &ClusterNode| n.cluster.get(&["-n", "kube-node-lease", "lease", &name]);
    n.wait_api(30, "the Lease is owned by the Node", |_| {
        lease_of(&n).is_some_and(|l| l["metadata"]["ownerReferences"][0]["kind"] == "Node")
    });
    let lease = lease_of(&n).unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], name.as_str());
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    let owner = &lease["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node");
    assert_eq!(owner["uid"], node["metadata"]["uid"]);
    let renewed = lease["spec"]["renewTime"].clone();
    n.wait_api(30, "the Lease is renewed", |_| {
        lease_of(&n).is_some_and(|l| l["spec"]["renewTime"] != renewed)
    });

    // A restarted agent adopts its Node: same object, still Ready.
    let uid = node["metadata"]["uid"].clone();
    n.kill9();
    n.launch();
    std::thread::sleep(Duration::from_secs(5));
    let again = n.node_object();
    assert_eq!(again["metadata"]["uid"], uid, "the Node was replaced");
    assert!(is_ready_node(&again), "{again}");
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn scheduled_pod_runs_reports_logs_and_deletes_gracefully() {
    let n = ClusterNode::start("cluster-pod", &[]);
    let pod = n.create_pod(
        "hello",
        "echo hello from $(hostname); trap 'echo bye; exit 0' TERM; i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done",
        "",
    );
    let p = n.wait_api_pod(&pod, 90, "Running and Ready", is_running);
    assert_eq!(p["spec"]["nodeName"], n.name());
    assert!(
        p["status"]["podIP"]
            .as_str()
            .is_some_and(|ip| !ip.is_empty()),
        "{p}"
    );
    assert!(
        p["status"]["hostIP"]
            .as_str()
            .is_some_and(|ip| !ip.is_empty()),
        "{p}"
    );
    assert!(p["status"]["startTime"].is_string(), "{p}");
    let main = container_status(&p, "main");
    assert_eq!(main["ready"], true);
    assert_eq!(main["restartCount"], 0);
    assert!(main["containerID"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));

    // kubectl logs goes apiserver -> the agent's port, with the apiserver's client certificate.
    n.wait_api(30, "kubectl logs shows the greeting", |c| {
        let (ok, out) = c.kubectl(&["-n", "default", "logs", &pod]);
        ok && out.contains(&format!("hello from {pod}"))
    });

    // kubectl logs -f follows: lines written after it started arrive.
    let followed = follow_logs(&n, &pod, 5);
    let started_at: u64 = followed
        .iter()
        .find_map(|l| l.strip_prefix("tick ").and_then(|t| t.parse().ok()))
        .expect("ticks in the followed log");
    assert!(
        followed
            .iter()
            .any(|l| *l == format!("tick {}", started_at + 3)),
        "kubectl logs -f did not follow: {followed:?}"
    );

    // The lifecycle's Events, as kubectl describe shows them (Scheduled is the scheduler's).
    let describe = n.cluster.ok(&["-n", "default", "describe", "pod", &pod]);
    for reason in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(describe.contains(reason), "no {reason} event:\n{describe}");
    }
    assert!(describe.contains("Started container main"), "{describe}");

    // Deleting through the API: SIGTERM, the container's trap runs, then the agent removes the
    // pod object (with its UID as precondition) and every container.
    let (ok, out) = n.cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "pod",
        &pod,
        "--wait=true",
        "--timeout=60s",
    ]);
    assert!(ok, "kubectl delete: {out}\nagent log:\n{}", n.log());
    assert!(n.api_pod(&pod).is_none());
    n.wait_until(30, "the pod's containers are removed", || {
        n.containers().is_empty()
    });
    let selector = format!("involvedObject.name={pod},reason=Killing");
    n.wait_api(30, "a Killing event", |c| {
        c.ok(&[
            "-n",
            "default",
            "get",
            "events",
            "--field-selector",
            &selector,
        ])
        .contains("Stopping container main")
    });
}

/// `kubectl logs -f` of the pod's container until `want` lines arrived (or 30 s passed).
fn follow_logs(n: &ClusterNode, pod: &str, want: usize) -> Vec<String> {
    use std::io::BufRead;
    let mut child = std::process::Command::new(&n.cluster.kubectl)
        .arg("--kubeconfig")
        .arg(&n.cluster.kubeconfig)
        .args(["-n", "default", "logs", "-f", "--tail", "1", pod])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl runs");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut lines = Vec::new();
    while lines.len() < want {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn force_deleted_pod_has_its_containers_removed() {
    let n = ClusterNode::start("cluster-force", &[]);
    let pod = n.create_pod("doomed", "while true; do sleep 1; done", "");
    n.wait_api_pod(&pod, 90, "Running and Ready", is_running);
    // kubectl get pods -o wide: Running, the pod's IP and this node.
    let wide = n
        .cluster
        .ok(&["-n", "default", "get", "pod", &pod, "-o", "wide"]);
    let row = wide.lines().nth(1).unwrap_or_default().to_string();
    let ip = n.api_pod(&pod).unwrap()["status"]["podIP"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        row.contains("Running") && row.contains(&ip) && row.contains(n.name()),
        "{wide}"
    );
    assert!(!n.containers().is_empty());
    // Gone from the API at once: the agent learns it from the watch and removes everything.
    n.cluster.ok(&[
        "-n",
        "default",
        "delete",
        "pod",
        &pod,
        "--grace-period=0",
        "--force",
    ]);
    n.wait_until(60, "the force-deleted pod's containers are removed", || {
        n.containers().is_empty()
    });
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn static_pod_is_mirrored_recreated_and_removed() {
    let n = ClusterNode::start("cluster-mirror", &[]);
    n.write_manifest(
        "web.yaml",
        &common::busybox_pod("web", "Always", "while true; do sleep 1; done"),
    );
    let name = n.pod_name("web");
    let mirror = n.wait_api_pod(&name, 90, "the mirror pod is Running", is_running);
    let annotations = &mirror["metadata"]["annotations"];
    assert!(
        annotations["kubernetes.io/config.mirror"].is_string(),
        "{annotations}"
    );
    let owner = &mirror["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node");
    assert_eq!(owner["name"], n.name());
    let container_id = container_status(&mirror, "main")["containerID"].clone();

    // Deleting the mirror does not touch the static pod: the mirror comes back, same container.
    let old_uid = mirror["metadata"]["uid"].clone();
    n.cluster
        .ok(&["-n", "default", "delete", "pod", &name, "--wait=false"]);
    let again = n.wait_api_pod(&name, 60, "the mirror pod is recreated and Running", |p| {
        p["metadata"]["uid"] != old_uid && is_running(p)
    });
    let main = container_status(&again, "main");
    assert_eq!(
        main["containerID"], container_id,
        "the static pod was restarted"
    );
    assert_eq!(main["restartCount"], 0);

    // Removing the manifest removes the mirror.
    n.remove_manifest("web.yaml");
    n.wait_api(60, "the mirror pod is removed", |_| {
        n.api_pod(&name).is_none()
    });
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn pod_the_node_does_not_fit_is_refused_with_upstreams_reason() {
    let n = ClusterNode::start("cluster-admit", &[]);
    // Bound straight to the node (no scheduler), with a selector the node does not match.
    let name = format!("misfit-{}", n.name());
    n.cluster.apply(&format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeName: {node}
  nodeSelector:
    example.com/no-such-label: 'yes'
  automountServiceAccountToken: false
  containers:
  - name: main
    image: {image}
    command: ['sleep', '3600']
",
        node = n.name(),
        image = common::BUSYBOX
    ));
    let p = n.wait_api_pod(&name, 60, "phase Failed", |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(p["status"]["reason"], "NodeAffinity", "{p}");
    assert!(
        p["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("NodeAffinity")),
        "{p}"
    );
    assert!(n.containers().is_empty(), "a refused pod got containers");
    n.cluster
        .ok(&["-n", "default", "delete", "pod", &name, "--wait=false"]);
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn deployment_of_ten_scales_to_zero_and_back() {
    let n = ClusterNode::start("cluster-deploy", &[]);
    let name = format!("ten-{}", n.name());
    let deployment = |replicas: u32| {
        format!(
            "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: default
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      nodeSelector:
        kubernetes.io/hostname: {node}
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: {image}
        command: ['sleep', '3600']
",
            node = n.name(),
            image = common::BUSYBOX
        )
    };
    let ready = |want: u64| {
        let name = name.clone();
        move |c: &common::cluster::Cluster| {
            c.get(&["-n", "default", "deployment", &name])
                .is_some_and(|d| d["status"]["readyReplicas"].as_u64().unwrap_or(0) == want)
        }
    };
    n.cluster.apply(&deployment(10));
    n.wait_api(180, "10 replicas ready", ready(10));
    assert_eq!(
        n.api_pods().iter().filter(|p| is_running(p)).count(),
        10,
        "all ten run on this node"
    );
    n.cluster.apply(&deployment(0));
    n.wait_api(120, "scaled to zero: no pods left", |_| {
        n.api_pods().is_empty()
    });
    n.wait_until(60, "their containers are removed", || {
        n.containers().is_empty()
    });
    n.cluster.apply(&deployment(10));
    n.wait_api(180, "10 replicas ready again", ready(10));
    n.cluster.ok(&[
        "-n",
        "default",
        "delete",
        "deployment",
        &name,
        "--wait=false",
    ]);
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn restarted_agent_keeps_pods_mirrors_and_statuses() {
    let mut n = ClusterNode::start("cluster-restart", &[]);
    let pod = n.create_pod("steady", "while true; do sleep 1; done", "");
    n.write_manifest(
        "static.yaml",
        &common::busybox_pod("static", "Always", "while true; do sleep 1; done"),
    );
    let mirror = n.pod_name("static");
    n.wait_api_pod(&pod, 90, "Running and Ready", is_running);
    n.wait_api_pod(&mirror, 90, "the mirror is Running", is_running);
    // Let the statuses settle, then remember exactly what the API holds.
    std::thread::sleep(Duration::from_secs(5));
    let before_pod = n.api_pod(&pod).unwrap();
    let before_mirror = n.api_pod(&mirror).unwrap();
    let node_uid = n.node_object()["metadata"]["uid"].clone();
    let mut tasks = n.tasks();
    tasks.sort();

    n.kill9();
    n.launch();
    std::thread::sleep(Duration::from_secs(15));

    assert_eq!(
        n.node_object()["metadata"]["uid"],
        node_uid,
        "a second Node"
    );
    let mut tasks_after = n.tasks();
    tasks_after.sort();
    assert_eq!(tasks_after, tasks, "a container was restarted");
    let after_pod = n.api_pod(&pod).unwrap();
    let after_mirror = n.api_pod(&mirror).unwrap();
    assert_eq!(
        after_mirror["metadata"]["uid"], before_mirror["metadata"]["uid"],
        "the mirror pod was recreated"
    );
    // An unchanged status is not written again: the objects are the very same versions.
    assert_eq!(
        after_pod["metadata"]["resourceVersion"], before_pod["metadata"]["resourceVersion"],
        "the pod's status was rewritten:\nbefore {}\nafter {}",
        before_pod["status"], after_pod["status"]
    );
    assert_eq!(
        after_mirror["metadata"]["resourceVersion"], before_mirror["metadata"]["resourceVersion"],
        "the mirror's status was rewritten:\nbefore {}\nafter {}",
        before_mirror["status"], after_mirror["status"]
    );
    assert!(is_running(&after_pod));
}
