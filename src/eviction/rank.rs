//! Which pod goes first (upstream's rank functions) and the message it is evicted with
//! (upstream's evictionMessage). Usage comes from the pod's stats in the Summary; requests
//! from its spec, as the scheduler sums them.

use std::cmp::Ordering;

use k8s_openapi::api::core::v1::Pod;

use super::signals::{Resource, Signal};
use crate::pod::admission::pod_requests;
use crate::stats::summary::{ContainerStats, PodStats};
use crate::vocabulary::quantity::binary_size;
use crate::vocabulary::quantity::Quantity;

/// A pod that may be evicted, with its stats (None: the collector has none for it yet).
#[derive(Debug, Clone)]
pub(crate) struct Candidate<'a> {
    pub pod: &'a Pod,
    pub stats: Option<&'a PodStats>,
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The pod's request for `name` in whole units (0 when it requests none).
fn request(pod: &Pod, name: &str) -> i64 {
    pod_requests(pod).get(name).map_or(0, Quantity::value)
}

fn memory_usage(stats: &PodStats) -> i64 {
    stats
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes)
        .unwrap_or(0) as i64
}

fn process_count(stats: &PodStats) -> i64 {
    stats
        .process_stats
        .as_ref()
        .and_then(|p| p.process_count)
        .unwrap_or(0) as i64
}

/// What the pod uses of the disk resource: its containers' writable layers and logs and
/// its volumes on the node's filesystem (the collector's ephemeral-storage figure is that
/// sum), in bytes or inodes.
fn disk_usage(stats: &PodStats, resource: Resource) -> i64 {
    let e = stats.ephemeral_storage.as_ref();
    match resource {
        Resource::Inodes => e.and_then(|e| e.inodes_used),
        _ => e.and_then(|e| e.used_bytes),
    }
    .unwrap_or(0) as i64
}

/// Pods without stats first (upstream cannot tell what they use), then `by`.
fn with_stats(
    a: &Candidate<'_>,
    b: &Candidate<'_>,
    by: impl Fn(&PodStats, &PodStats) -> Ordering,
) -> Ordering {
    match (a.stats, b.stats) {
        (Some(x), Some(y)) => by(x, y),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Sorts `pods` into eviction order for `signal`: first to evict first.
pub(crate) fn rank(signal: Signal, pods: &mut [Candidate<'_>]) {
    let by_priority = |a: &Candidate<'_>, b: &Candidate<'_>| priority(a.pod).cmp(&priority(b.pod));
    match signal.resource() {
        Resource::Memory => pods.sort_by(|a, b| {
            let over = |c: &Candidate<'_>, s: &PodStats| memory_usage(s) - request(c.pod, "memory");
            with_stats(a, b, |x, y| (over(b, y) > 0).cmp(&(over(a, x) > 0)))
                .then_with(|| by_priority(a, b))
                .then_with(|| with_stats(a, b, |x, y| over(b, y).cmp(&over(a, x))))
        }),
        Resource::Pids => pods.sort_by(|a, b| {
            by_priority(a, b)
                .then_with(|| with_stats(a, b, |x, y| process_count(y).cmp(&process_count(x))))
        }),
        resource @ (Resource::EphemeralStorage | Resource::Inodes) => pods.sort_by(|a, b| {
            // Upstream compares inode usage with the bytes request too (its quirk, kept so
            // the order is the same).
            let over = |c: &Candidate<'_>, s: &PodStats| {
                disk_usage(s, resource) - request(c.pod, "ephemeral-storage")
            };
            let exceeds = |c: &Candidate<'_>, s: &PodStats| {
                let req = match resource {
                    Resource::Inodes => 0,
                    _ => request(c.pod, "ephemeral-storage"),
                };
                disk_usage(s, resource) > req
            };
            with_stats(a, b, |x, y| exceeds(b, y).cmp(&exceeds(a, x)))
                .then_with(|| by_priority(a, b))
                .then_with(|| with_stats(a, b, |x, y| over(b, y).cmp(&over(a, x))))
        }),
    }
}

/// A container's usage of the resource, where upstream reports one per container.
fn container_usage(c: &ContainerStats, resource: Resource) -> Option<i64> {
    match resource {
        Resource::Memory => c.memory.as_ref()?.working_set_bytes.map(|b| b as i64),
        Resource::EphemeralStorage => {
            let rootfs = c.rootfs.as_ref()?.used_bytes?;
            let logs = c.logs.as_ref()?.used_bytes?;
            Some((rootfs + logs) as i64)
        }
        Resource::Inodes | Resource::Pids => None,
    }
}

/// The text of a container's request as the API holds it ("0" when it has none).
fn container_request(pod: &Pod, name: &str, resource: Resource) -> (i64, String) {
    let spec = pod.spec.as_ref();
    let container = spec.into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    });
    container
        .filter(|c| c.name == name)
        .find_map(|c| {
            let q = c
                .resources
                .as_ref()?
                .requests
                .as_ref()?
                .get(resource.name())?;
            let parsed = Quantity::from_api(q).ok()?;
            Some((parsed.value(), q.0.clone()))
        })
        .unwrap_or((0, "0".to_string()))
}

/// Upstream's eviction message: the starved resource, the threshold and what was
/// available, then each container using more than it requested.
pub(crate) fn message(
    resource: Resource,
    threshold: Option<(i64, i64)>,
    pod: &Pod,
    stats: Option<&PodStats>,
) -> String {
    let mut m = format!("The node was low on resource: {}. ", resource.name());
    if let Some((quantity, available)) = threshold {
        m.push_str(&format!(
            "Threshold quantity: {}, available: {}. ",
            binary_size(quantity),
            binary_size(available)
        ));
    }
    let Some(stats) = stats else { return m };
    let spec_names: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .map(|c| c.name.as_str())
        .collect();
    for c in &stats.containers {
        if !spec_names.contains(&c.name.as_str()) {
            continue;
        }
        let Some(usage) = container_usage(c, resource) else {
            continue;
        };
        let (request, request_text) = container_request(pod, &c.name, resource);
        if usage > request {
            m.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of {}. ",
                c.name,
                binary_size(usage),
                request_text,
                resource.name()
            ));
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summary::{FsStats, MemoryStats, PodReference, ProcessStats, Time};
    use chrono::Utc;

    fn pod(name: &str, priority: Option<i32>, memory_request: Option<&str>) -> Pod {
        let resources = memory_request
            .map(|r| serde_json::json!({"requests": {"memory": r}, "limits": {"memory": r}}));
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {
                "priority": priority,
                "containers": [{"name": "c", "image": "busybox", "resources": resources}],
            },
        }))
        .unwrap()
    }

    fn stats(name: &str, working_set: u64, processes: u64, disk: u64) -> PodStats {
        let time = Time(Utc::now());
        let memory = MemoryStats {
            psi: None,
            time,
            available_bytes: None,
            usage_bytes: None,
            working_set_bytes: Some(working_set),
            rss_bytes: None,
            page_faults: None,
            major_page_faults: None,
        };
        PodStats {
            io: None,
            pod_ref: PodReference {
                name: name.into(),
                namespace: "default".into(),
                uid: name.into(),
            },
            start_time: time,
            containers: vec![ContainerStats {
                io: None,
                name: "c".into(),
                start_time: time,
                cpu: None,
                memory: Some(memory.clone()),
                accelerators: vec![],
                rootfs: None,
                logs: None,
                user_defined_metrics: vec![],
                swap: None,
            }],
            cpu: None,
            memory: Some(memory),
            network: None,
            volume_stats: vec![],
            ephemeral_storage: Some(FsStats {
                time,
                available_bytes: None,
                capacity_bytes: None,
                used_bytes: Some(disk),
                inodes_free: None,
                inodes: None,
                inodes_used: Some(disk / 10),
            }),
            process_stats: Some(ProcessStats {
                process_count: Some(processes),
            }),
            swap: None,
        }
    }

    fn order(signal: Signal, pods: &[(&Pod, Option<&PodStats>)]) -> Vec<String> {
        let mut c: Vec<Candidate<'_>> = pods
            .iter()
            .map(|(pod, stats)| Candidate { pod, stats: *stats })
            .collect();
        rank(signal, &mut c);
        c.iter()
            .map(|c| c.pod.metadata.name.clone().unwrap())
            .collect()
    }

    #[test]
    fn memory_ranks_pods_over_their_request_then_by_priority_then_by_usage_above_request() {
        let guaranteed = pod("guaranteed", Some(-10), Some("100Mi"));
        let hog = pod("hog", Some(10), None);
        let small = pod("small", Some(10), None);
        let low = pod("low", Some(0), None);
        let mib = 1 << 20;
        let s_guaranteed = stats("guaranteed", 50 * mib, 1, 0);
        let s_hog = stats("hog", 500 * mib, 1, 0);
        let s_small = stats("small", mib, 1, 0);
        let s_low = stats("low", mib, 1, 0);
        assert_eq!(
            order(
                Signal::MemoryAvailable,
                &[
                    (&guaranteed, Some(&s_guaranteed)),
                    (&small, Some(&s_small)),
                    (&hog, Some(&s_hog)),
                    (&low, Some(&s_low)),
                ]
            ),
            vec!["low", "hog", "small", "guaranteed"],
            "the Guaranteed pod under its request goes last whatever its priority"
        );
        let unknown = pod("unknown", Some(100), None);
        assert_eq!(
            order(
                Signal::AllocatableMemoryAvailable,
                &[(&hog, Some(&s_hog)), (&unknown, None)]
            ),
            vec!["unknown", "hog"],
            "a pod without stats goes first"
        );
    }

    #[test]
    fn pids_rank_by_priority_then_process_count() {
        let a = pod("a", None, None);
        let b = pod("b", None, None);
        let c = pod("c", Some(-1), None);
        let (sa, sb, sc) = (
            stats("a", 0, 5, 0),
            stats("b", 0, 50, 0),
            stats("c", 0, 1, 0),
        );
        assert_eq!(
            order(
                Signal::PidAvailable,
                &[(&a, Some(&sa)), (&b, Some(&sb)), (&c, Some(&sc))]
            ),
            vec!["c", "b", "a"]
        );
    }

    #[test]
    fn disk_ranks_pods_over_their_ephemeral_storage_request_first() {
        let mut requesting = pod("requesting", Some(-5), None);
        requesting.spec.as_mut().unwrap().containers[0].resources = Some(
            serde_json::from_value(serde_json::json!({"requests": {"ephemeral-storage": "1Gi"}}))
                .unwrap(),
        );
        let filler = pod("filler", None, None);
        let quiet = pod("quiet", None, None);
        let gib = 1 << 30;
        let (sr, sf, sq) = (
            stats("requesting", 0, 1, gib / 2),
            stats("filler", 0, 1, 2 * gib),
            stats("quiet", 0, 1, 10),
        );
        assert_eq!(
            order(
                Signal::NodeFsAvailable,
                &[
                    (&requesting, Some(&sr)),
                    (&quiet, Some(&sq)),
                    (&filler, Some(&sf))
                ]
            ),
            vec!["filler", "quiet", "requesting"]
        );
    }

    #[test]
    fn the_message_names_the_threshold_and_the_containers_over_their_request() {
        let hog = pod("hog", None, None);
        let s = stats("hog", 300 << 20, 1, 0);
        assert_eq!(
            message(
                Resource::Memory,
                Some((100 << 20, 94_564 << 10)),
                &hog,
                Some(&s)
            ),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 94564Ki. \
             Container c was using 300Mi, request is 0, has larger consumption of memory. "
        );
        let modest = pod("modest", None, Some("1Gi"));
        assert_eq!(
            message(Resource::Memory, None, &modest, Some(&s)),
            "The node was low on resource: memory. ",
            "a container under its request is not named"
        );
    }
}
