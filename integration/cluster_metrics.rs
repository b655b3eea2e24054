//! The resource-metrics chain on a kubelet-rs node with the real metrics-server v0.8.0
//! (deploy/metrics-server, deployed by hack/cluster/metrics-server.sh): `kubectl top node`,
//! `kubectl top pod` against what the pods' own cgroups say, and a HorizontalPodAutoscaler that
//! scales a Deployment up while its pods spin and back down once they stop.
//!
//! metrics-server and its APIService are cluster-global, so this is one test on one node; it
//! removes them at the end, so later tests on the shared control plane see no aggregated API.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use common::cluster::{Cluster, ClusterNode};

const TEST: &str = "cluster_metrics";

/// Generous for a loaded 2-core machine: metrics-server needs its pod up, then two scrapes 15 s
/// apart before it answers for a node or pod; the HPA then acts on its 5 s sync period.
const METRICS_TIMEOUT_SECS: u64 = 600;
const HPA_TIMEOUT_SECS: u64 = 600;

/// Removes what the test made on the shared control plane (the HPA, the Deployment, the pods,
/// metrics-server and its APIService) when dropped. Declared after the node, so it runs
/// before the node's own clean-up and the agent stops the pods it ran.
struct Cleanup {
    cluster: Cluster,
    node: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let spin = format!("spin-{}", self.node);
        for args in [
            vec![
                "-n",
                "default",
                "delete",
                "hpa",
                &spin,
                "--ignore-not-found",
            ],
            vec![
                "-n",
                "default",
                "delete",
                "deployment",
                &spin,
                "--ignore-not-found",
            ],
        ] {
            let (ok, out) = self.cluster.kubectl(&args);
            if !ok {
                eprintln!("{TEST}: clean-up: kubectl {}: {out}", args.join(" "));
            }
        }
        let (ok, out) = self.cluster.delete_metrics_server();
        if !ok {
            eprintln!("{TEST}: clean-up: hack/cluster/metrics-server.sh --delete failed:\n{out}");
            if !std::thread::panicking() {
                panic!("{TEST}: metrics-server could not be removed:\n{out}");
            }
        }
    }
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn metrics_server_top_and_hpa() {
    let node = ClusterNode::start(TEST, &[]);
    common::import_named_images(&node.ns, &["metrics-server"]);
    let name = node.name().to_string();
    let _cleanup = Cleanup {
        cluster: node.cluster.clone(),
        node: name.clone(),
    };

    let started = Instant::now();
    let out = node
        .cluster
        .deploy_metrics_server(&name, METRICS_TIMEOUT_SECS);
    println!(
        "metrics-server answering after {}s:\n{out}",
        started.elapsed().as_secs()
    );

    top_node(&node);
    top_pods(&node);
    hpa_scales_up_and_down(&node);
}

/// `kubectl top node` prints the node's CPU and memory, with their share of allocatable.
fn top_node(node: &ClusterNode) {
    let out = node
        .cluster
        .ok(&["top", "node", node.name(), "--no-headers"]);
    println!("kubectl top node:\n{out}");
    let fields: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(
        fields.len(),
        5,
        "one row NAME CPU CPU% MEMORY MEMORY%: {out}"
    );
    assert_eq!(fields[0], node.name(), "{out}");
    assert!(millicores(fields[1]).is_some(), "CPU in millicores: {out}");
    assert!(percent(fields[2]).is_some(), "CPU%: {out}");
    assert!(
        mebibytes(fields[3]).is_some_and(|m| m > 0),
        "memory in Mi: {out}"
    );
    assert!(percent(fields[4]).is_some(), "MEMORY%: {out}");
}

/// A pod holding 200 MiB (a file in a memory-backed emptyDir, charged to its container's
/// memory cgroup and counted in the working set) reads 200Mi ±10 %; a pod spinning reads what
/// its container's cgroup says it used over the same windows, ±15 %.
fn top_pods(node: &ClusterNode) {
    let mem = node.create_pod(
        "mem",
        "dd if=/dev/zero of=/cache/fill bs=1M count=200 && echo filled && exec sleep 3600",
        "    volumeMounts:\n    - {name: cache, mountPath: /cache}\n  volumes:\n  - name: cache\n    emptyDir: {medium: Memory}\n",
    );
    let spin = node.create_pod("cpu", "while :; do :; done", "");
    for pod in [&mem, &spin] {
        node.wait_api_pod(pod, 180, "Running", |p| p["status"]["phase"] == "Running");
    }

    // Memory: a reading taken after the file was written.
    node.wait_api(120, "the mem pod wrote its 200 MiB", |c| {
        c.kubectl(&["-n", "default", "logs", &mem])
            .1
            .contains("filled")
    });
    let filled = SystemTime::now();
    let reading = wait_pod_metrics(node, &mem, |m| m.timestamp > filled);
    let (_, mem_bytes) = reading.containers["main"];
    let top = wait_top_pod(node, &mem);
    println!(
        "memory: kubectl top pod {mem}: {top} (metrics API: {:.1} MiB)",
        mem_bytes as f64 / MIB
    );
    let top_mib = mebibytes(top.split_whitespace().nth(2).unwrap_or_default())
        .unwrap_or_else(|| panic!("kubectl top pod {mem}: memory in Mi: {top}"));
    assert!(
        (180..=220).contains(&top_mib),
        "kubectl top pod {mem} reads {top_mib}Mi, expected 200Mi ±10 %: {top}"
    );

    // CPU: the spinner's container cgroup, sampled through the readings' windows.
    let cgroup = container_cgroup(node, &spin);
    let sampler = Sampler::start(cgroup.clone());
    let readings = consecutive_readings(node, &spin, &sampler, 4);
    let metric_ns: f64 = readings
        .iter()
        .map(|r| r.containers["main"].0 * r.window.as_secs_f64())
        .sum();
    let metric_secs: f64 = readings.iter().map(|r| r.window.as_secs_f64()).sum();
    let metric_millicores = metric_ns / metric_secs / 1e6;
    // Timestamps come truncated to the second: the windows are taken to end half a second
    // after them, which bounds the error at each end of the span by that half second.
    let first = &readings[0];
    let last = readings.last().unwrap();
    let span_start = first.timestamp + Duration::from_millis(500) - first.window;
    let span_end = last.timestamp + Duration::from_millis(500);
    // That end may lie a moment ahead of the newest sample.
    sampler.wait_past(span_end);
    let used_ns = sampler.usage_at(span_end) - sampler.usage_at(span_start);
    let span_secs = span_end.duration_since(span_start).unwrap().as_secs_f64();
    let cgroup_millicores = used_ns / span_secs / 1e6;
    sampler.stop();
    let top = wait_top_pod(node, &spin);
    println!(
        "cpu: metrics API {metric_millicores:.0}m over {} readings ({metric_secs:.1}s); \
         cgroup {} {cgroup_millicores:.0}m over the same {span_secs:.1}s; \
         kubectl top pod {spin}: {top}",
        readings.len(),
        cgroup.display()
    );
    assert!(
        millicores(top.split_whitespace().nth(1).unwrap_or_default()).is_some_and(|m| m > 0),
        "kubectl top pod {spin}: CPU in millicores: {top}"
    );
    assert!(
        cgroup_millicores > 100.0,
        "the spinner used only {cgroup_millicores:.0}m by its cgroup {}",
        cgroup.display()
    );
    let ratio = metric_millicores / cgroup_millicores;
    assert!(
        (0.85..=1.15).contains(&ratio),
        "metrics-server reads {metric_millicores:.0}m for {spin}, its cgroup says \
         {cgroup_millicores:.0}m over the same windows (ratio {ratio:.3}, expected ±15 %)"
    );

    for pod in [&mem, &spin] {
        node.cluster
            .ok(&["-n", "default", "delete", "pod", pod, "--wait=false"]);
    }
}

/// A Deployment whose pods spin until a file appears in a hostPath folder (so pods the HPA
/// adds after the stop see it too), CPU request 100m and limit 200m (three spinners cannot
/// swamp two cores), and an autoscaling/v2 HPA at 50 % CPU: replicas go above 1 while they
/// spin, and back to 1 once they stop (no scale-down stabilization window).
fn hpa_scales_up_and_down(node: &ClusterNode) {
    let name = format!("spin-{}", node.name());
    let flag_dir = tempfile::tempdir().unwrap();
    node.cluster.apply(&format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: {node}}}
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 2
      volumes:
      - {{name: flag, hostPath: {{path: {flag}, type: Directory}}}}
      containers:
      - name: main
        image: {image}
        command: ['sh', '-c', 'while [ ! -e /flag/stop ]; do :; done; exec sleep 3600']
        resources:
          requests: {{cpu: 100m}}
          limits: {{cpu: 200m}}
        volumeMounts:
        - {{name: flag, mountPath: /flag}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {{name: {name}, namespace: default}}
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: {name}}}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {{type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown: {{stabilizationWindowSeconds: 0}}
",
        node = node.name(),
        flag = flag_dir.path().display(),
        image = common::BUSYBOX,
    ));

    let started = Instant::now();
    wait_replicas(node, &name, "scaled up above 1 replica", |r| r > 1);
    println!(
        "HPA scaled {name} up after {}s",
        started.elapsed().as_secs()
    );
    std::fs::write(flag_dir.path().join("stop"), "").unwrap();
    let stopped = Instant::now();
    wait_replicas(node, &name, "scaled back down to 1 replica", |r| r == 1);
    println!(
        "HPA scaled {name} down after {}s",
        stopped.elapsed().as_secs()
    );
}

/// Waits until the Deployment's replicas (what the HPA set) satisfy `pred`; on a timeout the
/// failure shows the HPA's status and events.
fn wait_replicas(node: &ClusterNode, name: &str, what: &str, pred: impl Fn(i64) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(HPA_TIMEOUT_SECS);
    loop {
        let replicas = node
            .cluster
            .get(&["-n", "default", "deployment", name])
            .and_then(|d| d["spec"]["replicas"].as_i64());
        if replicas.is_some_and(&pred) {
            return;
        }
        if Instant::now() > deadline {
            let (_, hpa) = node
                .cluster
                .kubectl(&["-n", "default", "describe", "hpa", name]);
            let (_, top) = node.cluster.kubectl(&["-n", "default", "top", "pod"]);
            panic!(
                "{TEST}: {name} never {what} within {HPA_TIMEOUT_SECS}s (replicas {replicas:?})\n\
                 HPA:\n{hpa}\nkubectl top pod:\n{top}\nagent log:\n{}",
                node.node.log()
            );
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// A pod's entry in the metrics API (what `kubectl top pod` prints).
struct PodMetrics {
    timestamp: SystemTime,
    window: Duration,
    /// Container name -> (CPU in nanocores, memory working set in bytes).
    containers: std::collections::BTreeMap<String, (f64, u64)>,
}

const MIB: f64 = 1024.0 * 1024.0;

fn pod_metrics(cluster: &Cluster, pod: &str) -> Option<PodMetrics> {
    let path = format!("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/{pod}");
    let (ok, out) = cluster.kubectl(&["get", "--raw", &path]);
    if !ok {
        return None;
    }
    let v: Value = serde_json::from_str(&out).ok()?;
    let timestamp = chrono::DateTime::parse_from_rfc3339(v["timestamp"].as_str()?).ok()?;
    let containers = v["containers"]
        .as_array()?
        .iter()
        .filter_map(|c| {
            Some((
                c["name"].as_str()?.to_string(),
                (
                    nanocores(c["usage"]["cpu"].as_str()?)?,
                    bytes(c["usage"]["memory"].as_str()?)?,
                ),
            ))
        })
        .collect();
    Some(PodMetrics {
        timestamp: SystemTime::from(timestamp),
        window: go_duration(v["window"].as_str()?)?,
        containers,
    })
}

/// Waits for a metrics API reading of `pod` (with its `main` container) that `pred` accepts.
fn wait_pod_metrics(
    node: &ClusterNode,
    pod: &str,
    pred: impl Fn(&PodMetrics) -> bool,
) -> PodMetrics {
    let deadline = Instant::now() + Duration::from_secs(METRICS_TIMEOUT_SECS);
    loop {
        if let Some(m) = pod_metrics(&node.cluster, pod) {
            if m.containers.contains_key("main") && pred(&m) {
                return m;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{TEST}: no fresh metrics for pod {pod} within {METRICS_TIMEOUT_SECS}s\n{}",
            metrics_server_state(&node.cluster)
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// `count` successive readings of `pod` whose windows follow one another without a gap (each
/// starts where the one before ended, to the second the timestamps carry) and all lie within
/// what the sampler saw. A reading that does not follow on (one was missed) starts the run
/// again.
fn consecutive_readings(
    node: &ClusterNode,
    pod: &str,
    sampler: &Sampler,
    count: usize,
) -> Vec<PodMetrics> {
    let mut readings: Vec<PodMetrics> = Vec::new();
    while readings.len() < count {
        let newer_than = readings.last().map(|r| r.timestamp);
        let since = sampler.first_sample_time();
        let r = wait_pod_metrics(node, pod, |m| {
            newer_than.is_none_or(|t| m.timestamp > t)
                && m.timestamp.checked_sub(m.window).is_some_and(|s| s > since)
        });
        let follows = readings.last().is_none_or(|prev| {
            let gap = r
                .timestamp
                .duration_since(prev.timestamp)
                .unwrap_or_default()
                .as_secs_f64();
            (gap - r.window.as_secs_f64()).abs() <= 1.5
        });
        if !follows {
            readings.clear();
        }
        readings.push(r);
    }
    readings
}

/// `kubectl top pod POD` once it answers: its one row, NAME CPU MEMORY.
fn wait_top_pod(node: &ClusterNode, pod: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(METRICS_TIMEOUT_SECS);
    loop {
        let (ok, out) = node
            .cluster
            .kubectl(&["-n", "default", "top", "pod", pod, "--no-headers"]);
        if ok && out.split_whitespace().count() == 3 {
            return out.trim().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "{TEST}: kubectl top pod {pod} never answered: {out}\n{}",
            metrics_server_state(&node.cluster)
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

fn metrics_server_state(cluster: &Cluster) -> String {
    let (_, pods) = cluster.kubectl(&[
        "-n",
        "kube-system",
        "get",
        "pods",
        "-l",
        "k8s-app=metrics-server",
        "-o",
        "wide",
    ]);
    let (_, logs) = cluster.kubectl(&[
        "-n",
        "kube-system",
        "logs",
        "deployment/metrics-server",
        "--tail",
        "40",
    ]);
    format!("metrics-server pods:\n{pods}\nmetrics-server log:\n{logs}")
}

/// The cgroup (relative to each hierarchy) of the `main` container of `pod`, from its OCI spec.
fn container_cgroup(node: &ClusterNode, pod: &str) -> PathBuf {
    let p = node.wait_api_pod(pod, 60, "main has a container id", |p| {
        common::container_status(p, "main")["containerID"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    });
    let id = common::container_status(&p, "main")["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let (ok, info) = common::ctr(&["containers", "info", &id], &node.ns);
    assert!(ok, "ctr containers info {id}: {info}");
    let info: Value = serde_json::from_str(&info).expect("ctr prints JSON");
    let path = info["Spec"]["linux"]["cgroupsPath"]
        .as_str()
        .unwrap_or_else(|| panic!("container {id} has no cgroupsPath"));
    PathBuf::from(path.trim_start_matches('/'))
}

/// Total CPU time (ns) a cgroup used: cpuacct.usage on cgroup v1, cpu.stat's usage_usec on v2.
fn cpu_usage_ns(rel: &Path) -> Option<f64> {
    common::cgroups::hierarchies().into_iter().find_map(|h| {
        let dir = h.join(rel);
        if let Ok(s) = std::fs::read_to_string(dir.join("cpuacct.usage")) {
            return s.trim().parse::<f64>().ok();
        }
        // v1's cpu controller has a cpu.stat too, without usage_usec: only v2's counts.
        let stat = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
        stat.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|us| us * 1e3)
    })
}

/// Samples a cgroup's CPU usage every 200 ms on a thread of its own, so the usage at any
/// moment of the run can be read back (interpolated between the samples around it).
struct Sampler {
    samples: Arc<Mutex<Vec<(SystemTime, f64)>>>,
    stop: Arc<AtomicBool>,
    cgroup: PathBuf,
}

impl Sampler {
    fn start(cgroup: PathBuf) -> Sampler {
        assert!(
            cpu_usage_ns(&cgroup).is_some(),
            "no CPU usage for cgroup {} in any hierarchy",
            cgroup.display()
        );
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st, cg) = (samples.clone(), stop.clone(), cgroup.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                if let Some(ns) = cpu_usage_ns(&cg) {
                    s.lock().unwrap().push((SystemTime::now(), ns));
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let sampler = Sampler {
            samples,
            stop,
            cgroup,
        };
        while sampler.samples.lock().unwrap().is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
        sampler
    }

    /// Waits until a sample was taken at or after `t`.
    fn wait_past(&self, t: SystemTime) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .samples
            .lock()
            .unwrap()
            .last()
            .is_none_or(|(at, _)| *at < t)
        {
            assert!(
                Instant::now() < deadline,
                "the sampler of {} stopped sampling",
                self.cgroup.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn first_sample_time(&self) -> SystemTime {
        self.samples.lock().unwrap()[0].0
    }

    /// The usage at `t`, interpolated between the samples either side of it.
    fn usage_at(&self, t: SystemTime) -> f64 {
        let samples = self.samples.lock().unwrap();
        let after = samples
            .iter()
            .position(|(at, _)| *at >= t)
            .unwrap_or_else(|| {
                panic!(
                    "no sample of {} at or after {t:?} (last {:?})",
                    self.cgroup.display(),
                    samples.last()
                )
            });
        let (t1, u1) = samples[after];
        if after == 0 {
            return u1;
        }
        let (t0, u0) = samples[after - 1];
        let span = t1.duration_since(t0).unwrap().as_secs_f64();
        let part = t.duration_since(t0).unwrap().as_secs_f64();
        u0 + (u1 - u0) * part / span
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A CPU quantity as the metrics API writes it ("123456789n", "15u", "250m", "2") in nanocores.
fn nanocores(q: &str) -> Option<f64> {
    let (num, scale) = match q.as_bytes().last()? {
        b'n' => (&q[..q.len() - 1], 1.0),
        b'u' => (&q[..q.len() - 1], 1e3),
        b'm' => (&q[..q.len() - 1], 1e6),
        _ => (q, 1e9),
    };
    num.parse::<f64>().ok().map(|v| v * scale)
}

/// A memory quantity ("204800Ki", "200Mi", "1234") in bytes.
fn bytes(q: &str) -> Option<u64> {
    let units = [
        ("Ki", 1u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ];
    for (suffix, mult) in units {
        if let Some(num) = q.strip_suffix(suffix) {
            return num.parse::<u64>().ok().map(|v| v * mult);
        }
    }
    q.parse().ok()
}

/// A Go duration string ("15.021s", "1m0.5s", "900ms") as the metrics API writes `window`.
fn go_duration(s: &str) -> Option<Duration> {
    let mut total = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let value: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    Some(Duration::from_secs_f64(total))
}

/// "250m" (kubectl top's CPU column) in millicores.
fn millicores(s: &str) -> Option<u64> {
    s.strip_suffix('m')?.parse().ok()
}

/// "204Mi" (kubectl top's memory column) in MiB.
fn mebibytes(s: &str) -> Option<u64> {
    s.strip_suffix("Mi")?.parse().ok()
}

fn percent(s: &str) -> Option<u64> {
    s.strip_suffix('%')?.parse().ok()
}

#[test]
fn quantities_parse_as_the_metrics_api_writes_them() {
    assert_eq!(nanocores("123456789n"), Some(123456789.0));
    assert_eq!(nanocores("250m"), Some(250e6));
    assert_eq!(nanocores("2"), Some(2e9));
    assert_eq!(bytes("204800Ki"), Some(200 << 20));
    assert_eq!(bytes("1234"), Some(1234));
    assert_eq!(go_duration("15.5s"), Some(Duration::from_millis(15_500)));
    assert_eq!(go_duration("1m0.5s"), Some(Duration::from_millis(60_500)));
    assert_eq!(go_duration("900ms"), Some(Duration::from_millis(900)));
    assert_eq!(go_duration("15x"), None);
    assert_eq!(millicores("990m"), Some(990));
    assert_eq!(mebibytes("201Mi"), Some(201));
}
