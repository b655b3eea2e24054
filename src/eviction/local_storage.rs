//! Local ephemeral storage isolation (upstream's localStorageEviction): a pod is evicted,
//! whatever the node's pressure, when one of its emptyDir volumes uses more than its
//! sizeLimit, when the pod uses more ephemeral storage than its containers' limits add up
//! to, or when one container's writable layer and logs use more than its own limit. The
//! usage is the collector's (`stats::collector`): volumes by name, the pod's
//! `ephemeral-storage` figure, each container's `rootfs` and `logs`.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::stats::summary::{FsStats, PodStats};
use crate::vocabulary::quantity::{Format, Quantity};

/// The resource the limits name.
const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// Which rule a pod broke: upstream's metric label for it, and the pod's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    /// Upstream's `evictions` metric label (`emptydirfs.limit`, ...).
    pub signal: &'static str,
    pub message: String,
}

/// The first rule `pod` breaks, in upstream's order (emptyDir, pod, container), or None.
/// `dedicated_image_fs`: writable layers live on another filesystem than the node's, and
/// then count against no container's limit (upstream's containerEphemeralStorageLimitEviction).
pub(crate) fn check(pod: &Pod, stats: &PodStats, dedicated_image_fs: bool) -> Option<Violation> {
    empty_dir(pod, stats)
        .or_else(|| pod_limit(pod, stats))
        .or_else(|| container_limit(pod, stats, dedicated_image_fs))
}

/// A quantity as the API holds it, with the format upstream prints it back in.
fn parse(
    q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
) -> Option<(Quantity, Format)> {
    Some((Quantity::from_api(q).ok()?, Format::of(&q.0)))
}

fn used(fs: Option<&FsStats>) -> u64 {
    fs.and_then(|f| f.used_bytes).unwrap_or(0)
}

fn bytes_exceed(used: u64, limit: Quantity) -> bool {
    limit.cmp_value(i64::try_from(used).unwrap_or(i64::MAX)) == std::cmp::Ordering::Less
}

fn empty_dir(pod: &Pod, stats: &PodStats) -> Option<Violation> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    for v in volumes {
        let Some((limit, format)) = v
            .empty_dir
            .as_ref()
            .and_then(|e| e.size_limit.as_ref())
            .and_then(parse)
        else {
            continue;
        };
        let Some(usage) = stats
            .volume_stats
            .iter()
            .find(|s| s.name == v.name)
            .and_then(|s| s.fs.used_bytes)
        else {
            continue;
        };
        if limit > Quantity::ZERO && bytes_exceed(usage, limit) {
            return Some(Violation {
                signal: "emptydirfs.limit",
                message: format!(
                    "Usage of EmptyDir volume \"{}\" exceeds the limit \"{}\". ",
                    v.name,
                    limit.canonical(format)
                ),
            });
        }
    }
    None
}

/// A running total in upstream's `resource.Quantity` arithmetic: the format is the first
/// addend's (a zero total takes the addend's).
#[derive(Debug, Clone, Copy)]
struct Total(Quantity, Format);

impl Total {
    fn add(total: Option<Total>, q: Option<(Quantity, Format)>) -> Option<Total> {
        match (total, q) {
            (None, q) => q.map(|(q, f)| Total(q, f)),
            (t, None) => t,
            (Some(Total(t, f)), Some((q, g))) => {
                Some(Total(t + q, if t == Quantity::ZERO { g } else { f }))
            }
        }
    }

    fn max(total: Option<Total>, q: Option<Total>) -> Option<Total> {
        match (total, q) {
            (Some(t), Some(q)) if q.0 > t.0 => Some(q),
            (None, q) => q,
            (t, _) => t,
        }
    }
}

fn limit_of(c: &Container) -> Option<(Quantity, Format)> {
    c.resources
        .as_ref()?
        .limits
        .as_ref()?
        .get(EPHEMERAL_STORAGE)
        .and_then(parse)
}

/// The pod's ephemeral-storage limit as upstream's PodLimits sums it: the app containers
/// and sidecars together, or the largest init container with the sidecars started before
/// it, whichever is more, plus the pod overhead; None when no container sets one.
fn pod_limit_of(pod: &Pod) -> Option<Total> {
    let spec = pod.spec.as_ref()?;
    let mut total = None;
    for c in &spec.containers {
        total = Total::add(total, limit_of(c));
    }
    let mut sidecars = None;
    let mut init_peak = None;
    for c in spec.init_containers.iter().flatten() {
        let own = limit_of(c);
        let with = if c.restart_policy.as_deref() == Some("Always") {
            total = Total::add(total, own);
            sidecars = Total::add(sidecars, own);
            sidecars
        } else {
            Total::add(Total::add(None, own), sidecars.map(|t| (t.0, t.1)))
        };
        init_peak = Total::max(init_peak, with);
    }
    let total = Total::max(total, init_peak)?;
    let overhead = spec
        .overhead
        .as_ref()
        .and_then(|o| o.get(EPHEMERAL_STORAGE))
        .and_then(parse);
    Total::add(Some(total), overhead)
}

fn pod_limit(pod: &Pod, stats: &PodStats) -> Option<Violation> {
    let Total(limit, format) = pod_limit_of(pod)?;
    let usage = used(stats.ephemeral_storage.as_ref());
    bytes_exceed(usage, limit).then(|| Violation {
        signal: "ephemeralpodfs.limit",
        message: format!(
            "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
            limit.canonical(format)
        ),
    })
}

/// Only app containers' limits are checked one by one, as upstream's.
fn container_limit(pod: &Pod, stats: &PodStats, dedicated_image_fs: bool) -> Option<Violation> {
    let spec = pod.spec.as_ref()?;
    for c in &stats.containers {
        let Some((limit, format)) = spec
            .containers
            .iter()
            .find(|s| s.name == c.name)
            .and_then(limit_of)
        else {
            continue;
        };
        if limit.value() == 0 {
            continue;
        }
        let mut usage = used(c.logs.as_ref());
        if !dedicated_image_fs {
            usage += used(c.rootfs.as_ref());
        }
        if bytes_exceed(usage, limit) {
            return Some(Violation {
                signal: "ephemeralcontainerfs.limit",
                message: format!(
                    "Container {} exceeded its local ephemeral storage limit \"{}\". ",
                    c.name,
                    limit.canonical(format)
                ),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T: &str = "2026-12-06T10:00:00Z";

    fn fs(used: u64) -> serde_json::Value {
        json!({"time": T, "usedBytes": used})
    }

    /// Stats with the pod's ephemeral storage, volumes (name, used) and containers
    /// (name, rootfs, logs).
    fn stats(ephemeral: u64, volumes: &[(&str, u64)], containers: &[(&str, u64, u64)]) -> PodStats {
        let volumes: Vec<_> = volumes
            .iter()
            .map(|(n, u)| json!({"name": n, "time": T, "usedBytes": u}))
            .collect();
        let containers: Vec<_> = containers
            .iter()
            .map(|(n, r, l)| json!({"name": n, "startTime": T, "rootfs": fs(*r), "logs": fs(*l)}))
            .collect();
        serde_json::from_value(json!({
            "podRef": {"name": "p", "namespace": "default", "uid": "u"},
            "startTime": T,
            "containers": containers,
            "volume": volumes,
            "ephemeral-storage": fs(ephemeral),
        }))
        .unwrap()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u"}, "spec": spec}))
            .unwrap()
    }

    fn limited(name: &str, limit: &str) -> serde_json::Value {
        json!({"name": name, "image": "busybox",
               "resources": {"limits": {"ephemeral-storage": limit}}})
    }

    #[test]
    fn an_empty_dir_past_its_size_limit() {
        let p = pod(json!({
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [
                {"name": "scratch", "emptyDir": {"sizeLimit": "1024Ki"}},
                {"name": "free", "emptyDir": {}},
            ],
        }));
        let at = |used| {
            check(
                &p,
                &stats(0, &[("scratch", used), ("free", 1 << 30)], &[]),
                false,
            )
        };
        assert_eq!(at(1 << 20), None, "at the limit is not past it");
        assert_eq!(
            at((1 << 20) + 1),
            Some(Violation {
                signal: "emptydirfs.limit",
                message: "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ".into(),
            })
        );
        let zero = pod(json!({
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "0"}}],
        }));
        assert_eq!(
            check(&zero, &stats(0, &[("scratch", 5)], &[]), false),
            None,
            "a zero sizeLimit is no limit"
        );
    }

    #[test]
    fn a_pod_past_its_containers_limits_added_up() {
        let p = pod(json!({
            "containers": [limited("a", "1Mi"), limited("b", "1Gi"), {"name": "c", "image": "busybox"}],
        }));
        let limit = (1u64 << 20) + (1 << 30);
        assert_eq!(check(&p, &stats(limit, &[], &[]), false), None);
        assert_eq!(
            check(&p, &stats(limit + 1, &[], &[]), false),
            Some(Violation {
                signal: "ephemeralpodfs.limit",
                message: "Pod ephemeral local storage usage exceeds the total limit of containers 1025Mi. ".into(),
            })
        );
        let unlimited = pod(json!({"containers": [{"name": "c", "image": "busybox"}]}));
        assert_eq!(
            check(&unlimited, &stats(u64::MAX / 2, &[], &[]), false),
            None
        );
    }

    #[test]
    fn the_pod_limit_counts_init_containers_sidecars_and_overhead_as_upstream() {
        // App 1M + sidecar 1M = 2M; the plain init container (5M, with the sidecar before
        // it: 6M) is more; plus 1M overhead.
        let p = pod(json!({
            "initContainers": [
                {"name": "side", "image": "b", "restartPolicy": "Always",
                 "resources": {"limits": {"ephemeral-storage": "1M"}}},
                limited("init", "5M"),
            ],
            "containers": [limited("a", "1M")],
            "overhead": {"ephemeral-storage": "1M"},
        }));
        let Total(q, f) = pod_limit_of(&p).unwrap();
        assert_eq!(q.canonical(f), "7M");
    }

    #[test]
    fn a_container_past_its_own_limit_counts_its_writable_layer_and_logs() {
        let p =
            pod(json!({"containers": [limited("writer", "1Mi"), {"name": "other", "image": "b"}]}));
        // The pod total is kept under the pod rule's reach to see the container rule.
        let s = |rootfs, logs| stats(0, &[], &[("other", 1 << 30, 0), ("writer", rootfs, logs)]);
        assert_eq!(check(&p, &s(1 << 19, 1 << 19), false), None);
        let over = check(&p, &s(1 << 19, (1 << 19) + 1), false);
        assert_eq!(
            over,
            Some(Violation {
                signal: "ephemeralcontainerfs.limit",
                message: "Container writer exceeded its local ephemeral storage limit \"1Mi\". "
                    .into(),
            })
        );
        assert_eq!(
            check(&p, &s(1 << 30, 1), true),
            None,
            "on a dedicated image filesystem the writable layer is not the node's storage"
        );
    }

    #[test]
    fn the_rules_go_in_upstreams_order() {
        let p = pod(json!({
            "containers": [limited("c", "1Mi")],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Mi"}}],
        }));
        let all = stats(10 << 20, &[("v", 2 << 20)], &[("c", 2 << 20, 0)]);
        assert_eq!(check(&p, &all, false).unwrap().signal, "emptydirfs.limit");
        let pod_and_container = stats(10 << 20, &[("v", 0)], &[("c", 2 << 20, 0)]);
        assert_eq!(
            check(&p, &pod_and_container, false).unwrap().signal,
            "ephemeralpodfs.limit"
        );
    }
}
