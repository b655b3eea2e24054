//! The agent's own Prometheus metrics, under the upstream kubelet's names so dashboards and
//! alerts written for the kubelet keep working.
//!
//! Two registries, as upstream splits them: [`registry()`] is served on `/metrics` (kubelet
//! and HTTP server metrics), [`probes_registry()`] on `/metrics/probes` (prober results).
//! The rest of the agent records through the functions below; they are cheap (one mutex).

mod build_info;
pub mod certificates;
pub(crate) mod pods;
mod process;
mod registry;
pub mod rest_client;
pub mod storage;
pub mod text;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::stats::summary::{FsStats, PvcReference};

pub use pods::{
    container_start_failed, container_started, forget_pod_runtime_state, pod_restarted,
    pod_runtime_state, pod_sandbox_start, pod_worker_pass, record_pod_counts, ContainerType,
    PodCounts, PodSandboxStart, RuntimeState, WorkerPass,
};
pub use registry::{
    exponential_buckets, Collector, Counter, Gauge, GaugeFunc, Histogram, Registry, Scalar,
    Stability, DEFAULT_BUCKETS,
};

/// The kubelet's metrics, registered once.
pub struct KubeletMetrics {
    pub pod_start_duration: Arc<Histogram>,
    pub runtime_operations: Arc<Counter>,
    pub runtime_operations_duration: Arc<Histogram>,
    pub runtime_operations_errors: Arc<Counter>,
    pub pleg_relist_duration: Arc<Histogram>,
    pub pleg_relist_interval: Arc<Histogram>,
    pub pleg_last_seen: Arc<Gauge>,
    pub pod_worker_duration: Arc<Histogram>,
    pub pod_status_sync_duration: Arc<Histogram>,
    pub cgroup_manager_duration: Arc<Histogram>,
    pub started_pods: Arc<Counter>,
    pub started_pods_errors: Arc<Counter>,
    pub started_containers: Arc<Counter>,
    pub started_containers_errors: Arc<Counter>,
    pub restarted_pods: Arc<Counter>,
    pub desired_pods: Arc<Gauge>,
    pub active_pods: Arc<Gauge>,
    pub working_pods: Arc<Gauge>,
    pub rest_client: rest_client::Families,
    pub storage_operation_duration: Arc<Histogram>,
    pub volume_manager_total_volumes: Arc<Gauge>,
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
            runtime_operations: main.register(Arc::new(Scalar::counter(
                "kubelet_runtime_operations_total",
                "Cumulative number of runtime operations by operation type.",
                Stability::Alpha,
                &["operation_type"],
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
            pleg_relist_interval: main.register(Arc::new(Histogram::new(
                "kubelet_pleg_relist_interval_seconds",
                "Interval in seconds between relisting in PLEG.",
                Stability::Alpha,
                &[],
                DEFAULT_BUCKETS.to_vec(),
            ))),
            pleg_last_seen: main.register(Arc::new(Scalar::gauge(
                "kubelet_pleg_last_seen_seconds",
                "Timestamp in seconds when PLEG was last seen active.",
                Stability::Alpha,
                &[],
            ))),
            pod_worker_duration: main.register(Arc::new(Histogram::new(
                "kubelet_pod_worker_duration_seconds",
                "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
                Stability::Alpha,
                &["operation_type"],
                DEFAULT_BUCKETS.to_vec(),
            ))),
            pod_status_sync_duration: main.register(Arc::new(Histogram::new(
                "kubelet_pod_status_sync_duration_seconds",
                "Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.",
                Stability::Alpha,
                &[],
                vec![0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0],
            ))),
            cgroup_manager_duration: main.register(Arc::new(Histogram::new(
                "kubelet_cgroup_manager_duration_seconds",
                "Duration in seconds for cgroup manager operations. Broken down by method.",
                Stability::Alpha,
                &["operation_type"],
                DEFAULT_BUCKETS.to_vec(),
            ))),
            started_pods: main.register(Arc::new(Scalar::counter(
                "kubelet_started_pods_total",
                "Cumulative number of pods started",
                Stability::Alpha,
                &[],
            ))),
            started_pods_errors: main.register(Arc::new(Scalar::counter(
                "kubelet_started_pods_errors_total",
                "Cumulative number of errors when starting pods",
                Stability::Alpha,
                &[],
            ))),
            started_containers: main.register(Arc::new(Scalar::counter(
                "kubelet_started_containers_total",
                "Cumulative number of containers started",
                Stability::Alpha,
                &["container_type"],
            ))),
            started_containers_errors: main.register(Arc::new(Scalar::counter(
                "kubelet_started_containers_errors_total",
                "Cumulative number of errors when starting containers",
                Stability::Alpha,
                &["container_type", "code"],
            ))),
            restarted_pods: main.register(Arc::new(Scalar::counter(
                "kubelet_restarted_pods_total",
                "Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)",
                Stability::Alpha,
                &["static"],
            ))),
            desired_pods: main.register(Arc::new(Scalar::gauge(
                "kubelet_desired_pods",
                "The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.",
                Stability::Alpha,
                &["static"],
            ))),
            active_pods: main.register(Arc::new(Scalar::gauge(
                "kubelet_active_pods",
                "The number of pods the kubelet considers active and which are being considered when admitting new pods. static is true if the pod is not from the apiserver.",
                Stability::Alpha,
                &["static"],
            ))),
            working_pods: main.register(Arc::new(Scalar::gauge(
                "kubelet_working_pods",
                "Number of pods the kubelet is actually running, broken down by lifecycle phase, whether the pod is desired, orphaned, or runtime only (also orphaned), and whether the pod is static. An orphaned pod has been removed from local configuration or force deleted in the API and consumes resources that are not otherwise visible.",
                Stability::Alpha,
                &["lifecycle", "config", "static"],
            ))),
            rest_client: rest_client::Families::register(&main),
            storage_operation_duration: main.register(Arc::new(Histogram::new(
                "storage_operation_duration_seconds",
                "Storage operation duration",
                Stability::Alpha,
                &["volume_plugin", "operation_name", "status", "migrated"],
                vec![
                    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
                ],
            ))),
            volume_manager_total_volumes: main.register(Arc::new(Scalar::gauge(
                "volume_manager_total_volumes",
                "Number of volumes in Volume Manager",
                Stability::Alpha,
                &["plugin_name", "state"],
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
        build_info::register(&main);
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
    m.runtime_operations.inc(&[op]);
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

/// One relist of a pod's records (each worker pass lists its pod: the agent's PLEG), how
/// long it took and, when the same worker listed before, the time since that listing.
pub fn pleg_relist(duration: Duration, since_previous: Option<Duration>) {
    let m = kubelet();
    m.pleg_relist_duration.observe(&[], duration.as_secs_f64());
    if let Some(interval) = since_previous {
        m.pleg_relist_interval.observe(&[], interval.as_secs_f64());
    }
    // Whole seconds, as upstream sets it from the relist time's Unix().
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    m.pleg_last_seen.set(&[], now as f64);
}

/// One cgroup manager operation (`create`, `update` or `destroy`, upstream's names), timed
/// from now until the returned guard drops.
pub fn cgroup_op(operation: &'static str) -> impl Drop {
    struct Timed(&'static str, std::time::Instant);
    impl Drop for Timed {
        fn drop(&mut self) {
            kubelet()
                .cgroup_manager_duration
                .observe(&[self.0], self.1.elapsed().as_secs_f64());
        }
    }
    Timed(operation, std::time::Instant::now())
}

/// A pod's status reached the API server, `since` the change it carries was first seen.
pub fn pod_status_synced(since: Duration) {
    kubelet()
        .pod_status_sync_duration
        .observe(&[], since.as_secs_f64());
}

/// Pods with a running sandbox, and containers by state (`running`, `exited`, `created`,
/// `unknown`, as upstream's `container_state` label values).
pub fn set_running(pods: usize, containers_by_state: &[(&str, usize)]) {
    let m = kubelet();
    m.running_pods.set(&[], pods as f64);
    let series: Vec<(Vec<&str>, f64)> = containers_by_state
        .iter()
        .map(|(state, n)| (vec![*state], *n as f64))
        .collect();
    m.running_containers.set_all(&series);
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
        pod_worker_pass(WorkerPass::Sync, Duration::from_millis(20));
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
        // Unlabelled families are there from the start (the workers' tests move them).
        assert!(text.contains("# TYPE kubelet_running_pods gauge\n"));
        assert!(text.contains("# TYPE kubelet_pleg_last_seen_seconds gauge\n"));
        assert!(
            text.contains(
                "kubelet_runtime_operations_total{operation_type=\"pull_image_test\"} 1\n"
            ),
            "{text}"
        );
        assert!(text.contains("kubelet_pod_status_sync_duration_seconds_bucket{le=\"0.01\"}"));
        assert!(text.contains("kubelet_pleg_relist_interval_seconds_bucket{le=\"0.005\"}"));
        assert!(text.contains("# HELP kubelet_pod_worker_duration_seconds [ALPHA] Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync\n"));
        assert!(text.contains("kubelet_http_requests_total{long_running=\"false\",method=\"GET\",path=\"pods\",server_type=\"readonly\"}"));
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
        assert!(probes.contains("prober_probe_total{container=\"web\",namespace=\"default\",pod=\"p\",pod_uid=\"uid-1\",probe_type=\"Readiness\",result=\"failed\"} 1\n"), "{probes}");
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
                "container=\"a\",namespace=\"default\",pod=\"forget\",pod_uid=\"uid-forget-1\""
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
