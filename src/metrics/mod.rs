//! The agent's own Prometheus metrics, under the upstream kubelet's names so dashboards and
//! alerts written for the kubelet keep working.
//!
//! Two registries, as upstream splits them: [`registry()`] is served on `/metrics` (kubelet
//! and HTTP server metrics), [`probes_registry()`] on `/metrics/probes` (prober results).
//! The rest of the agent records through the functions below; they are cheap (one mutex).

mod process;
mod registry;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::stats::summary::{FsStats, PvcReference};

pub use registry::{
    exponential_buckets, format_float, Collector, Counter, Gauge, Histogram, Registry, Scalar,
    Stability, DEFAULT_BUCKETS,
};

/// The kubelet's metrics, registered once.
pub struct KubeletMetrics {
    pub pod_start_duration: Arc<Histogram>,
    pub runtime_operations_duration: Arc<Histogram>,
    pub runtime_operations_errors: Arc<Counter>,
    pub pleg_relist_duration: Arc<Histogram>,
    pub running_pods: Arc<Gauge>,
    pub running_containers: Arc<Gauge>,
    pub node_name: Arc<Gauge>,
    pub http_requests: Arc<Counter>,
    pub probe_total: Arc<Counter>,
    pub process_start_time: Arc<Gauge>,
    pub evictions: Arc<Counter>,
    /// kubelet_volume_stats_*, in `VOLUME_STATS`' order.
    pub volume_stats: Vec<Arc<Gauge>>,
}

/// The PVC-backed volumes' families (upstream's volumeStatsCollector), each with the value
/// of the summary it carries.
const VOLUME_STATS: [(&str, &str); 6] = [
    (
        "kubelet_volume_stats_capacity_bytes",
        "Capacity in bytes of the volume",
    ),
    (
        "kubelet_volume_stats_available_bytes",
        "Number of available bytes in the volume",
    ),
    (
        "kubelet_volume_stats_used_bytes",
        "Number of used bytes in the volume",
    ),
    (
        "kubelet_volume_stats_inodes",
        "Maximum number of inodes in the volume",
    ),
    (
        "kubelet_volume_stats_inodes_free",
        "Number of free inodes in the volume",
    ),
    (
        "kubelet_volume_stats_inodes_used",
        "Number of used inodes in the volume",
    ),
];

struct Registries {
    main: Registry,
    probes: Registry,
    metrics: KubeletMetrics,
}

fn registries() -> &'static Registries {
    static REGISTRIES: OnceLock<Registries> = OnceLock::new();
    REGISTRIES.get_or_init(|| {
        let main = Registry::new();
        let probes = Registry::new();
        let metrics = KubeletMetrics {
            pod_start_duration: main.register(Arc::new(Histogram::new(
                "kubelet_pod_start_duration_seconds",
                "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
                Stability::Alpha,
                &[],
                vec![
                    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0,
                    180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0,
                    3600.0,
                ],
            ))),
            runtime_operations_duration: main.register(Arc::new(Histogram::new(
                "kubelet_runtime_operations_duration_seconds",
                "Duration in seconds of runtime operations. Broken down by operation type.",
                Stability::Alpha,
                &["operation_type"],
                exponential_buckets(0.005, 2.5, 14),
            ))),
            runtime_operations_errors: main.register(Arc::new(Scalar::counter(
                "kubelet_runtime_operations_errors_total",
                "Cumulative number of runtime operation errors by operation type.",
                Stability::Alpha,
                &["operation_type"],
            ))),
            pleg_relist_duration: main.register(Arc::new(Histogram::new(
                "kubelet_pleg_relist_duration_seconds",
                "Duration in seconds for relisting pods in PLEG.",
                Stability::Alpha,
                &[],
                DEFAULT_BUCKETS.to_vec(),
            ))),
            running_pods: main.register(Arc::new(Scalar::gauge(
                "kubelet_running_pods",
                "Number of pods that have a running pod sandbox",
                Stability::Alpha,
                &[],
            ))),
            running_containers: main.register(Arc::new(Scalar::gauge(
                "kubelet_running_containers",
                "Number of containers currently running",
                Stability::Alpha,
                &["container_state"],
            ))),
            node_name: main.register(Arc::new(Scalar::gauge(
                "kubelet_node_name",
                "The node's name. The count is always 1.",
                Stability::Alpha,
                &["node"],
            ))),
            http_requests: main.register(Arc::new(Scalar::counter(
                "kubelet_http_requests_total",
                "Number of the http requests received since the server started",
                Stability::Alpha,
                &["method", "path", "server_type", "long_running"],
            ))),
            probe_total: probes.register(Arc::new(Scalar::counter(
                "prober_probe_total",
                "Cumulative number of a liveness, readiness or startup probe for a container by result.",
                // BETA upstream (pkg/kubelet/prober): dashboards match the help text.
                Stability::Beta,
                &["probe_type", "result", "container", "pod", "namespace", "pod_uid"],
            ))),
            process_start_time: probes.register(Arc::new(Scalar::gauge(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                Stability::Alpha,
                &[],
            ))),
            evictions: main.register(Arc::new(Scalar::counter(
                "kubelet_evictions",
                "Cumulative number of pod evictions by eviction signal",
                Stability::Alpha,
                &["eviction_signal"],
            ))),
            volume_stats: VOLUME_STATS
                .iter()
                .map(|&(name, help)| {
                    main.register(Arc::new(Scalar::gauge(
                        name,
                        help,
                        Stability::Alpha,
                        &["namespace", "persistentvolumeclaim"],
                    )))
                })
                .collect(),
        };
        // The Go client's process collector, as component-base puts it on /metrics.
        main.register(Arc::new(process::ProcessCollector));
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        metrics.process_start_time.set(&[], start);
        Registries {
            main,
            probes,
            metrics,
        }
    })
}

/// The metric handles, for callers that need more than the helpers below.
pub fn kubelet() -> &'static KubeletMetrics {
    &registries().metrics
}

/// The registry served on `/metrics`.
pub fn registry() -> &'static Registry {
    &registries().main
}

/// The registry served on `/metrics/probes`.
pub fn probes_registry() -> &'static Registry {
    &registries().probes
}

/// One runtime (containerd) call: its duration, and an error count when it failed.
/// `op` uses upstream's operation names where one exists (`run_podsandbox`, `create_container`,
/// `start_container`, `stop_container`, `pull_image`, `list_containers`, ...).
pub fn runtime_op(op: &str, duration: Duration, failed: bool) {
    let m = kubelet();
    m.runtime_operations_duration
        .observe(&[op], duration.as_secs_f64());
    if failed {
        m.runtime_operations_errors.inc(&[op]);
    }
}

/// The eviction manager evicted a pod for `signal` (memory.available, ...).
pub fn eviction(signal: &str) {
    kubelet().evictions.inc(&[signal]);
}

/// A pod went from first seen to running.
pub fn pod_started(duration: Duration) {
    kubelet()
        .pod_start_duration
        .observe(&[], duration.as_secs_f64());
}

/// One relist of the runtime's pods (the periodic safety net behind containerd events).
pub fn pleg_relist(duration: Duration) {
    kubelet()
        .pleg_relist_duration
        .observe(&[], duration.as_secs_f64());
}

/// Pods with a running sandbox, and containers by state (`running`, `exited`, `created`,
/// `unknown`, as upstream's `container_state` label values).
pub fn set_running(pods: usize, containers_by_state: &[(&str, usize)]) {
    let m = kubelet();
    m.running_pods.set(&[], pods as f64);
    m.running_containers.reset();
    for (state, n) in containers_by_state {
        m.running_containers.set(&[state], *n as f64);
    }
}

/// The claims' volume usage from a stats snapshot: one series per claim (the first pod
/// that has it, as upstream), each value as far as the volume reports it.
pub fn set_volume_stats(volumes: &[(&PvcReference, &FsStats)]) {
    let series = volume_series(volumes);
    for (gauge, s) in kubelet().volume_stats.iter().zip(series.iter()) {
        gauge.set_all(s);
    }
}

/// Each `VOLUME_STATS` family's series: (namespace, claim) and the value.
fn volume_series<'a>(volumes: &[(&'a PvcReference, &FsStats)]) -> [Vec<(Vec<&'a str>, f64)>; 6] {
    let mut seen = std::collections::HashSet::new();
    let mut series: [Vec<(Vec<&str>, f64)>; 6] = Default::default();
    for (pvc, fs) in volumes {
        if !seen.insert((pvc.namespace.as_str(), pvc.name.as_str())) {
            continue;
        }
        let values = [
            fs.capacity_bytes,
            fs.available_bytes,
            fs.used_bytes,
            fs.inodes,
            fs.inodes_free,
            fs.inodes_used,
        ];
        for (out, v) in series.iter_mut().zip(values) {
            if let Some(v) = v {
                out.push((vec![pvc.namespace.as_str(), pvc.name.as_str()], v as f64));
            }
        }
    }
    series
}

pub fn set_node_name(node: &str) {
    let m = kubelet();
    m.node_name.reset();
    m.node_name.set(&[node], 1.0);
}

/// Probe kind, as upstream labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeType {
    Liveness,
    Readiness,
    Startup,
}

/// Probe outcome, as upstream labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    Successful,
    Failed,
    Unknown,
}

/// One probe run of a container.
pub fn probe_result(
    probe: ProbeType,
    result: ProbeResult,
    container: &str,
    pod: &str,
    namespace: &str,
    pod_uid: &str,
) {
    let probe = match probe {
        ProbeType::Liveness => "Liveness",
        ProbeType::Readiness => "Readiness",
        ProbeType::Startup => "Startup",
    };
    let result = match result {
        ProbeResult::Successful => "successful",
        ProbeResult::Failed => "failed",
        ProbeResult::Unknown => "unknown",
    };
    kubelet()
        .probe_total
        .inc(&[probe, result, container, pod, namespace, pod_uid]);
}

/// Forgets the probe series of every container of a pod that left the node (every probe
/// type and result), so `/metrics/probes` does not keep series of every pod that ever ran.
pub fn forget_pod_probe_series(pod_uid: &str) {
    kubelet()
        .probe_total
        .remove_matching(&[("pod_uid", pod_uid)]);
}

/// One HTTP request to the kubelet's servers; `path` is upstream's bucket (first path
/// segment or `other`), `server_type` is `readonly` or `readwrite`.
pub fn http_request(method: &str, path: &str, server_type: &str, long_running: bool) {
    kubelet().http_requests.inc(&[
        method,
        path,
        server_type,
        if long_running { "true" } else { "false" },
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_has_one_series_per_family_from_its_first_pod_with_what_it_reports() {
        let claim = |name: &str| PvcReference {
            name: name.into(),
            namespace: "db".into(),
        };
        let fs = |used: Option<u64>| FsStats {
            time: crate::stats::summary::Time(chrono::Utc::now()),
            available_bytes: Some(10),
            capacity_bytes: Some(30),
            used_bytes: used,
            inodes_free: None,
            inodes: None,
            inodes_used: None,
        };
        let (a, b) = (claim("data-0"), claim("data-1"));
        let (first, second, partial) = (fs(Some(20)), fs(Some(5)), fs(None));
        let series = volume_series(&[(&a, &first), (&a, &second), (&b, &partial)]);
        let [capacity, available, used, inodes, _, _] = &series;
        assert_eq!(
            capacity,
            &[(vec!["db", "data-0"], 30.0), (vec!["db", "data-1"], 30.0)]
        );
        assert_eq!(available.len(), 2);
        assert_eq!(
            used,
            &[(vec!["db", "data-0"], 20.0)],
            "the first pod's; none unreported"
        );
        assert!(inodes.is_empty());
        let names: Vec<_> = VOLUME_STATS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names[2], "kubelet_volume_stats_used_bytes");
    }

    #[test]
    fn helpers_land_in_the_served_registries() {
        runtime_op("pull_image_test", Duration::from_millis(10), true);
        pod_started(Duration::from_secs(2));
        set_node_name("node-a");
        set_running(2, &[("running", 3), ("exited", 1)]);
        probe_result(
            ProbeType::Readiness,
            ProbeResult::Failed,
            "web",
            "p",
            "default",
            "uid-1",
        );
        http_request("GET", "pods", "readonly", false);

        let text = registry().gather();
        assert!(
            text.contains(
                "kubelet_runtime_operations_errors_total{operation_type=\"pull_image_test\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains("kubelet_runtime_operations_duration_seconds_bucket{operation_type=\"pull_image_test\",le=\"0.0125\"} 1\n"), "{text}");
        assert!(text.contains("# TYPE kubelet_pod_start_duration_seconds histogram\n"));
        assert!(text.contains("kubelet_node_name{node=\"node-a\"} 1\n"));
        assert!(text.contains("kubelet_running_pods 2\n"));
        assert!(text.contains("kubelet_running_containers{container_state=\"exited\"} 1\n"));
        assert!(text.contains("kubelet_http_requests_total{method=\"GET\",path=\"pods\",server_type=\"readonly\",long_running=\"false\"}"));
        assert!(
            !text.contains("prober_probe_total"),
            "probes have their own endpoint"
        );
        // The process families, as the Go client's collector puts them on upstream's /metrics.
        assert!(
            text.contains("# TYPE process_resident_memory_bytes gauge\n"),
            "{text}"
        );
        assert!(text.contains("\nprocess_cpu_seconds_total "), "{text}");

        let probes = probes_registry().gather();
        assert!(probes.contains("prober_probe_total{probe_type=\"Readiness\",result=\"failed\",container=\"web\",pod=\"p\",namespace=\"default\",pod_uid=\"uid-1\"} 1\n"), "{probes}");
        assert!(probes.contains("# TYPE process_start_time_seconds gauge\n"));
        assert!(
            probes.contains("# HELP prober_probe_total [BETA] Cumulative number of a liveness"),
            "{probes}"
        );
    }

    #[test]
    fn forgetting_probe_series_takes_one_pod() {
        let count = |container: &str, uid: &str, result: &str| {
            kubelet()
                .probe_total
                .get(&["Liveness", result, container, "forget", "default", uid])
        };
        for (container, uid) in [
            ("a", "uid-forget-1"),
            ("b", "uid-forget-1"),
            ("a", "uid-forget-2"),
        ] {
            probe_result(
                ProbeType::Liveness,
                ProbeResult::Successful,
                container,
                "forget",
                "default",
                uid,
            );
            probe_result(
                ProbeType::Liveness,
                ProbeResult::Failed,
                container,
                "forget",
                "default",
                uid,
            );
        }
        forget_pod_probe_series("uid-forget-1");
        assert_eq!(count("a", "uid-forget-1", "successful"), None);
        assert_eq!(count("a", "uid-forget-1", "failed"), None);
        assert_eq!(count("b", "uid-forget-1", "successful"), None);
        assert_eq!(count("a", "uid-forget-2", "failed"), Some(1.0));
        let text = probes_registry().gather();
        assert!(
            !text.contains(
                "container=\"a\",pod=\"forget\",namespace=\"default\",pod_uid=\"uid-forget-1\""
            ),
            "{text}"
        );
    }

    #[test]
    fn remove_matching_ignores_unknown_labels() {
        let c = Scalar::counter("t_total", "t", Stability::Alpha, &["a", "b"]);
        c.inc(&["1", "x"]);
        c.inc(&["1", "y"]);
        c.inc(&["2", "x"]);
        assert_eq!(c.remove_matching(&[("nope", "1")]), 0);
        assert_eq!(c.remove_matching(&[("a", "1")]), 2);
        assert_eq!(c.get(&["2", "x"]), Some(1.0));
    }
}
