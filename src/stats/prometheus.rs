//! `/metrics/resource`, as the upstream kubelet renders it: cpu and memory samples stamped
//! with their stats time in milliseconds (what metrics-server reads), written by the one
//! Prometheus text writer ([`crate::metrics::text`]).

use super::summary::{ContainerStats, PodStats, Summary, Time};
use crate::metrics::text::{encode, Family, MetricType};

/// The content type the kubelet answers /metrics/resource with.
pub use crate::metrics::text::CONTENT_TYPE;

fn millis(t: &Time) -> i64 {
    t.0.timestamp_millis()
}

/// Renders the resource metrics from one snapshot. `scrape_error` is true when the
/// snapshot could not be taken (the last good data, if any, is still rendered).
pub fn render_resource_metrics(summary: Option<&Summary>, scrape_error: bool) -> String {
    let mut container_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        MetricType::Counter,
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    );
    let mut container_mem = Family::new(
        "container_memory_working_set_bytes",
        MetricType::Gauge,
        "[STABLE] Current working set of the container in bytes",
    );
    let mut container_start = Family::new(
        "container_start_time_seconds",
        MetricType::Gauge,
        "[STABLE] Start time of the container since unix epoch in seconds",
    );
    let mut node_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        MetricType::Counter,
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    );
    let mut node_mem = Family::new(
        "node_memory_working_set_bytes",
        MetricType::Gauge,
        "[STABLE] Current working set of the node in bytes",
    );
    let mut pod_cpu = Family::new(
        "pod_cpu_usage_seconds_total",
        MetricType::Counter,
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    );
    let mut pod_mem = Family::new(
        "pod_memory_working_set_bytes",
        MetricType::Gauge,
        "[STABLE] Current working set of the pod in bytes",
    );
    let mut scrape = Family::new(
        "resource_scrape_error",
        MetricType::Gauge,
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    );
    scrape.sample(vec![], if scrape_error { 1.0 } else { 0.0 }, None);

    if let Some(s) = summary {
        if let Some((t, v)) = s
            .node
            .cpu
            .as_ref()
            .and_then(|c| Some((millis(&c.time), c.usage_core_nano_seconds?)))
        {
            node_cpu.sample(vec![], v as f64 / 1e9, Some(t));
        }
        if let Some((t, v)) = s
            .node
            .memory
            .as_ref()
            .and_then(|m| Some((millis(&m.time), m.working_set_bytes?)))
        {
            node_mem.sample(vec![], v as f64, Some(t));
        }
        for pod in &s.pods {
            for c in &pod.containers {
                container_series(
                    pod,
                    c,
                    &mut container_cpu,
                    &mut container_mem,
                    &mut container_start,
                );
            }
            let labels = || {
                vec![
                    ("namespace", pod.pod_ref.namespace.clone()),
                    ("pod", pod.pod_ref.name.clone()),
                ]
            };
            if let Some((t, v)) = pod
                .cpu
                .as_ref()
                .and_then(|c| Some((millis(&c.time), c.usage_core_nano_seconds?)))
            {
                pod_cpu.sample(labels(), v as f64 / 1e9, Some(t));
            }
            if let Some((t, v)) = pod
                .memory
                .as_ref()
                .and_then(|m| Some((millis(&m.time), m.working_set_bytes?)))
            {
                pod_mem.sample(labels(), v as f64, Some(t));
            }
        }
    }

    // Families without series are left out, as the Go client's gatherer does.
    encode([
        container_cpu,
        container_mem,
        container_start,
        node_cpu,
        node_mem,
        pod_cpu,
        pod_mem,
        scrape,
    ])
}

fn container_series(
    pod: &PodStats,
    c: &ContainerStats,
    cpu: &mut Family,
    mem: &mut Family,
    start: &mut Family,
) {
    let labels = || {
        vec![
            ("container", c.name.clone()),
            ("namespace", pod.pod_ref.namespace.clone()),
            ("pod", pod.pod_ref.name.clone()),
        ]
    };
    let start_ns = c.start_time.0.timestamp_nanos_opt().unwrap_or(0);
    if start_ns > 0 {
        start.sample(labels(), start_ns as f64 / 1e9, None);
    }
    if let Some((t, v)) = c
        .cpu
        .as_ref()
        .and_then(|x| Some((millis(&x.time), x.usage_core_nano_seconds?)))
    {
        cpu.sample(labels(), v as f64 / 1e9, Some(t));
    }
    if let Some((t, v)) = c
        .memory
        .as_ref()
        .and_then(|m| Some((millis(&m.time), m.working_set_bytes?)))
    {
        mem.sample(labels(), v as f64, Some(t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::*;
    use chrono::DateTime;

    fn time(s: &str) -> Time {
        Time(
            DateTime::parse_from_rfc3339(s)
                .unwrap()
                .with_timezone(&chrono::Utc),
        )
    }

    fn pod(name: &str, containers: Vec<ContainerStats>) -> PodStats {
        PodStats {
            io: None,
            pod_ref: PodReference {
                name: name.into(),
                namespace: "ersilia-core".into(),
                uid: "u".into(),
            },
            start_time: time("2025-06-22T15:52:26Z"),
            containers,
            cpu: Some(CpuStats {
                psi: None,
                time: time("2025-06-23T19:09:26.448Z"),
                usage_nano_cores: Some(1),
                usage_core_nano_seconds: Some(44421506699),
            }),
            memory: Some(MemoryStats {
                psi: None,
                time: time("2025-06-23T19:09:26.448Z"),
                available_bytes: None,
                usage_bytes: Some(6328320),
                working_set_bytes: Some(4403200),
                rss_bytes: None,
                page_faults: None,
                major_page_faults: None,
            }),
            network: None,
            volume_stats: vec![],
            ephemeral_storage: None,
            process_stats: None,
            swap: None,
        }
    }

    fn container(name: &str) -> ContainerStats {
        ContainerStats {
            io: None,
            name: name.into(),
            start_time: time("2025-06-22T15:52:26.4872775Z"),
            cpu: Some(CpuStats {
                psi: None,
                time: time("2025-06-23T19:09:26.568Z"),
                usage_nano_cores: None,
                usage_core_nano_seconds: Some(44356054006),
            }),
            memory: Some(MemoryStats {
                psi: None,
                time: time("2025-06-23T19:09:26.568Z"),
                available_bytes: None,
                usage_bytes: None,
                working_set_bytes: Some(4206592),
                rss_bytes: None,
                page_faults: None,
                major_page_faults: None,
            }),
            accelerators: vec![],
            rootfs: None,
            logs: None,
            user_defined_metrics: vec![],
            swap: None,
        }
    }

    #[test]
    fn renders_like_the_kubelet() {
        let s = Summary {
            node: NodeStats {
                io: None,
                node_name: "n".into(),
                system_containers: vec![],
                start_time: time("2025-06-22T07:59:40Z"),
                cpu: Some(CpuStats {
                    psi: None,
                    time: time("2025-06-23T19:09:34.670Z"),
                    usage_nano_cores: None,
                    usage_core_nano_seconds: Some(6197005020909),
                }),
                memory: Some(MemoryStats {
                    psi: None,
                    time: time("2025-06-23T19:09:34.670Z"),
                    available_bytes: None,
                    usage_bytes: None,
                    working_set_bytes: Some(1137475584),
                    rss_bytes: None,
                    page_faults: None,
                    major_page_faults: None,
                }),
                network: None,
                fs: None,
                runtime: None,
                rlimit: None,
                swap: None,
            },
            pods: vec![pod(
                "ersilia-nginx-567d564fc-cpfvd",
                vec![container("nginx")],
            )],
        };
        let want = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="nginx",namespace="ersilia-core",pod="ersilia-nginx-567d564fc-cpfvd"} 44.356054006 1750705766568
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container="nginx",namespace="ersilia-core",pod="ersilia-nginx-567d564fc-cpfvd"} 4.206592e+06 1750705766568
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container="nginx",namespace="ersilia-core",pod="ersilia-nginx-567d564fc-cpfvd"} 1.7506075464872775e+09
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 6197.005020909 1750705774670
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.137475584e+09 1750705774670
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace="ersilia-core",pod="ersilia-nginx-567d564fc-cpfvd"} 44.421506699 1750705766448
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace="ersilia-core",pod="ersilia-nginx-567d564fc-cpfvd"} 4.4032e+06 1750705766448
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
"#;
        assert_eq!(render_resource_metrics(Some(&s), false), want);
    }

    #[test]
    fn series_sorted_and_labels_escaped_and_missing_values_skipped() {
        let mut b = container("b");
        b.cpu = None;
        let mut weird = container("a\"x\\y");
        weird.memory.as_mut().unwrap().working_set_bytes = None;
        let s = Summary {
            node: NodeStats {
                io: None,
                node_name: "n".into(),
                system_containers: vec![],
                start_time: time("2025-06-22T07:59:40Z"),
                cpu: None,
                memory: None,
                network: None,
                fs: None,
                runtime: None,
                rlimit: None,
                swap: None,
            },
            pods: vec![pod("zz", vec![b]), pod("aa", vec![weird])],
        };
        let text = render_resource_metrics(Some(&s), true);
        assert!(!text.contains("node_cpu_usage_seconds_total"));
        assert!(text.contains(r#"container_cpu_usage_seconds_total{container="a\"x\\y",namespace="ersilia-core",pod="aa"}"#), "{text}");
        assert!(!text.contains(r#"container_cpu_usage_seconds_total{container="b""#));
        assert!(!text.contains(r#"container_memory_working_set_bytes{container="a"#));
        let aa = text
            .find(r#"pod_cpu_usage_seconds_total{namespace="ersilia-core",pod="aa"}"#)
            .unwrap();
        let zz = text
            .find(r#"pod_cpu_usage_seconds_total{namespace="ersilia-core",pod="zz"}"#)
            .unwrap();
        assert!(aa < zz);
        assert!(text.ends_with("resource_scrape_error 1\n"));
    }

    #[test]
    fn no_snapshot_yet_reports_only_the_error_gauge() {
        let text = render_resource_metrics(None, true);
        assert_eq!(
            text,
            "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise\n# TYPE resource_scrape_error gauge\nresource_scrape_error 1\n"
        );
    }
}
