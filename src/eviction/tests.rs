//! The manager's passes against a scripted Summary and pod set.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::json;

use super::*;
use crate::config::node::parse_eviction_thresholds;
use crate::stats::Summary;

const MIB: u64 = 1 << 20;

/// A Summary taken at second `at`, with the node's available memory, the node
/// filesystem's free bytes of 1000 MiB, and these pods' working sets.
fn summary(at: u32, memory_available: u64, fs_available: u64, pods: &[(&str, u64)]) -> Summary {
    let time = format!("2026-12-04T10:00:{at:02}Z");
    let pods: Vec<_> = pods
        .iter()
        .map(|(name, ws)| {
            json!({
                "podRef": {"name": name, "namespace": "default", "uid": name},
                "startTime": time,
                "containers": [{
                    "name": "c", "startTime": time,
                    "memory": {"time": time, "workingSetBytes": ws},
                }],
                "memory": {"time": time, "workingSetBytes": ws},
            })
        })
        .collect();
    serde_json::from_value(json!({
        "node": {
            "nodeName": "n",
            "startTime": time,
            "memory": {"time": time, "availableBytes": memory_available, "workingSetBytes": 4096 * MIB},
            "fs": {"time": time, "availableBytes": fs_available, "capacityBytes": 1000 * MIB,
                   "inodesFree": 1000, "inodes": 2000},
        },
        "pods": pods,
    }))
    .unwrap()
}

fn pod(name: &str, memory_request: Option<&str>, annotations: serde_json::Value) -> Arc<Pod> {
    let resources = memory_request
        .map(|r| json!({"requests": {"memory": r, "cpu": "100m"}, "limits": {"memory": r, "cpu": "100m"}}));
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name, "annotations": annotations},
            "spec": {
                "terminationGracePeriodSeconds": 20,
                "containers": [{"name": "c", "image": "busybox", "resources": resources}],
            },
        }))
        .unwrap(),
    )
}

#[derive(Default)]
struct Fakes {
    latest: Mutex<Option<Summary>>,
    fresh: Mutex<Option<Summary>>,
    pods: Mutex<Vec<Arc<Pod>>>,
    evicted: Mutex<Vec<(String, Eviction)>>,
    reclaims: Mutex<u32>,
    container_reclaims: Mutex<u32>,
}

struct Fake(Arc<Fakes>);

impl SummarySource for Fake {
    fn latest(&self) -> Option<Summary> {
        self.0.latest.lock().unwrap().clone()
    }
    fn fresh(&self) -> Option<Summary> {
        self.0.fresh.lock().unwrap().clone()
    }
}

impl PodControl for Fake {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.0.pods.lock().unwrap().clone()
    }
    fn evict(&self, uid: &str, eviction: Eviction) {
        self.0
            .evicted
            .lock()
            .unwrap()
            .push((uid.to_string(), eviction));
    }
    fn is_stopped(&self, _uid: &str) -> bool {
        true
    }
}

#[async_trait::async_trait]
impl NodeReclaim for Fake {
    async fn delete_unused_containers(&self) {
        *self.0.container_reclaims.lock().unwrap() += 1;
    }
    async fn delete_unused_images(&self) {
        assert_eq!(
            *self.0.container_reclaims.lock().unwrap(),
            *self.0.reclaims.lock().unwrap() + 1,
            "dead containers go before images"
        );
        *self.0.reclaims.lock().unwrap() += 1;
    }
}

fn manager(tune: impl FnOnce(&mut Config)) -> (EvictionManager, PressureView, Arc<Fakes>) {
    let mut cfg = Config::defaults(false);
    cfg.eviction_hard = parse_eviction_thresholds(&BTreeMap::from([
        ("memory.available".to_string(), "100Mi".to_string()),
        ("nodefs.available".to_string(), "100Mi".to_string()),
    ]))
    .unwrap();
    tune(&mut cfg);
    let fakes = Arc::new(Fakes::default());
    let (m, view) = EvictionManager::new(
        &cfg,
        Arc::new(Fake(fakes.clone())),
        Arc::new(Fake(fakes.clone())),
        Some(Arc::new(Fake(fakes.clone()))),
        Recorder::disabled(),
    );
    (m, view, fakes)
}

#[tokio::test]
async fn memory_pressure_evicts_the_pod_over_its_request_and_spares_guaranteed_and_static_pods() {
    let (mut m, view, fakes) = manager(|_| {});
    let static_pod = pod(
        "static",
        None,
        json!({"kubernetes.io/config.source": "file"}),
    );
    *fakes.pods.lock().unwrap() = vec![
        pod("guaranteed", Some("500Mi"), json!({})),
        static_pod,
        pod("hog", None, json!({})),
    ];
    *fakes.latest.lock().unwrap() = Some(summary(
        0,
        50 * MIB,
        900 * MIB,
        &[
            ("guaranteed", 100 * MIB),
            ("static", 2000 * MIB),
            ("hog", 300 * MIB),
        ],
    ));
    assert_eq!(m.synchronize(false).await, ["hog"]);
    assert!(view.borrow().memory && !view.borrow().disk);
    let evicted = fakes.evicted.lock().unwrap().clone();
    assert_eq!(evicted.len(), 1);
    assert_eq!(evicted[0].1.grace_period, Duration::from_secs(1), "hard");
    assert_eq!(
        evicted[0].1.message,
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
         Container c was using 300Mi, request is 0, has larger consumption of memory. "
    );
    assert_eq!(
        *fakes.reclaims.lock().unwrap(),
        0,
        "memory has nothing to reclaim"
    );

    // The same sample again: no second eviction on stale stats.
    *fakes.pods.lock().unwrap() = vec![pod("guaranteed", Some("500Mi"), json!({}))];
    assert_eq!(m.synchronize(false).await, Vec::<String>::new());
    // A new sample still under pressure: the Guaranteed pod is next (static pods never).
    *fakes.latest.lock().unwrap() = Some(summary(
        10,
        50 * MIB,
        900 * MIB,
        &[("guaranteed", 100 * MIB)],
    ));
    assert_eq!(m.synchronize(false).await, ["guaranteed"]);

    // Relieved: no eviction, and the condition stays for the transition period (5 min).
    *fakes.latest.lock().unwrap() = Some(summary(20, 900 * MIB, 900 * MIB, &[]));
    assert_eq!(m.synchronize(false).await, Vec::<String>::new());
    assert!(view.borrow().memory);
}

#[tokio::test]
async fn only_critical_pods_left_means_no_eviction() {
    let (mut m, _view, fakes) = manager(|_| {});
    let critical: Arc<Pod> = Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "dns", "namespace": "kube-system", "uid": "dns"},
            "spec": {"priority": 2_000_000_000, "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap(),
    );
    *fakes.pods.lock().unwrap() = vec![critical];
    *fakes.latest.lock().unwrap() = Some(summary(0, 10 * MIB, 900 * MIB, &[("dns", 500 * MIB)]));
    assert_eq!(m.synchronize(false).await, Vec::<String>::new());
    assert!(fakes.evicted.lock().unwrap().is_empty());
}

#[tokio::test]
async fn disk_pressure_removes_unused_images_first_and_evicts_only_if_that_was_not_enough() {
    let (mut m, view, fakes) = manager(|_| {});
    *fakes.pods.lock().unwrap() = vec![pod("filler", None, json!({}))];
    *fakes.latest.lock().unwrap() = Some(summary(0, 900 * MIB, 50 * MIB, &[("filler", MIB)]));
    *fakes.fresh.lock().unwrap() = Some(summary(1, 900 * MIB, 200 * MIB, &[("filler", MIB)]));
    assert_eq!(
        m.synchronize(false).await,
        Vec::<String>::new(),
        "the images freed enough"
    );
    assert_eq!(*fakes.reclaims.lock().unwrap(), 1);
    assert!(view.borrow().disk && !view.borrow().memory);

    *fakes.latest.lock().unwrap() = Some(summary(10, 900 * MIB, 50 * MIB, &[("filler", MIB)]));
    *fakes.fresh.lock().unwrap() = Some(summary(11, 900 * MIB, 60 * MIB, &[("filler", MIB)]));
    assert_eq!(m.synchronize(false).await, ["filler"]);
    assert_eq!(*fakes.reclaims.lock().unwrap(), 2);
    let evicted = fakes.evicted.lock().unwrap().clone();
    assert!(
        evicted[0]
            .1
            .message
            .starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: 100Mi, available: 50Mi. "),
        "{}",
        evicted[0].1.message
    );
}

#[tokio::test]
async fn a_soft_threshold_waits_its_grace_period_and_gives_the_pods_their_own() {
    let (mut m, view, fakes) = manager(|cfg| {
        cfg.eviction_hard.clear();
        cfg.eviction_soft = parse_eviction_thresholds(
            &[("memory.available".to_string(), "1Gi".to_string())].into(),
        )
        .unwrap();
        cfg.eviction_soft_grace_period =
            [("memory.available".to_string(), Duration::from_secs(3600))].into();
    });
    *fakes.pods.lock().unwrap() = vec![pod("hog", None, json!({}))];
    *fakes.latest.lock().unwrap() = Some(summary(0, 500 * MIB, 900 * MIB, &[("hog", MIB)]));
    assert_eq!(
        m.synchronize(false).await,
        Vec::<String>::new(),
        "within the grace period"
    );
    assert!(view.borrow().memory, "the condition is set at once");
}

#[test]
fn eviction_grace_periods_follow_upstream() {
    let hard = Threshold {
        signal: Signal::MemoryAvailable,
        value: crate::config::node::ThresholdValue::Percentage(0.1),
        grace_period: Duration::ZERO,
        min_reclaim: None,
    };
    let soft = Threshold {
        grace_period: Duration::from_secs(60),
        ..hard
    };
    let p = pod("p", None, json!({}));
    let secs = |t: &Threshold, max: i32, pod: &Pod| eviction_grace(t, max, pod).as_secs();
    assert_eq!(secs(&hard, 300, &p), 1);
    assert_eq!(secs(&soft, 0, &p), 20, "0 leaves the pod its own");
    assert_eq!(secs(&soft, 10, &p), 10);
    assert_eq!(secs(&soft, 300, &p), 20, "capped by the pod's own");
    assert_eq!(secs(&soft, -1, &p), 1, "negative: 1 s, as upstream");
    let mut unset = (*p).clone();
    unset
        .spec
        .as_mut()
        .unwrap()
        .termination_grace_period_seconds = None;
    assert_eq!(secs(&soft, 0, &unset), 30);
}

#[tokio::test]
async fn the_pass_after_an_eviction_samples_again() {
    let (mut m, _view, fakes) = manager(|_| {});
    *fakes.pods.lock().unwrap() = vec![pod("hog", None, json!({})), pod("next", None, json!({}))];
    *fakes.latest.lock().unwrap() = Some(summary(
        0,
        50 * MIB,
        900 * MIB,
        &[("hog", 300 * MIB), ("next", MIB)],
    ));
    assert_eq!(m.synchronize(false).await, ["hog"]);
    // The collector's cache still holds a sample from before the hog ended; the one taken
    // now does not see the pressure any more.
    *fakes.pods.lock().unwrap() = vec![pod("next", None, json!({}))];
    *fakes.latest.lock().unwrap() = Some(summary(
        2,
        50 * MIB,
        900 * MIB,
        &[("hog", 300 * MIB), ("next", MIB)],
    ));
    *fakes.fresh.lock().unwrap() = Some(summary(3, 400 * MIB, 900 * MIB, &[("next", MIB)]));
    assert_eq!(m.synchronize(true).await, Vec::<String>::new());
    assert_eq!(fakes.evicted.lock().unwrap().len(), 1);
}

/// A Summary with no pressure and these pods' (uid, ephemeral storage, volume, rootfs).
fn storage_summary(pods: &[(&str, u64, u64, u64)]) -> Summary {
    let time = "2026-12-06T10:00:00Z";
    let fs = |used: u64| json!({"time": time, "usedBytes": used});
    let pods: Vec<_> = pods
        .iter()
        .map(|(uid, eph, vol, rootfs)| {
            json!({
                "podRef": {"name": uid, "namespace": "default", "uid": uid},
                "startTime": time,
                "containers": [{"name": "c", "startTime": time, "rootfs": fs(*rootfs), "logs": fs(0)}],
                "volume": [{"name": "scratch", "time": time, "usedBytes": vol}],
                "ephemeral-storage": fs(*eph),
            })
        })
        .collect();
    serde_json::from_value(json!({
        "node": {
            "nodeName": "n", "startTime": time,
            "memory": {"time": time, "availableBytes": 4096 * MIB, "workingSetBytes": 100 * MIB},
            "fs": {"time": time, "availableBytes": 900 * MIB, "capacityBytes": 1000 * MIB,
                   "inodesFree": 1000, "inodes": 2000},
        },
        "pods": pods,
    }))
    .unwrap()
}

fn storage_pod(name: &str, annotations: serde_json::Value) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name, "annotations": annotations},
            "spec": {
                "containers": [{"name": "c", "image": "busybox",
                    "resources": {"limits": {"ephemeral-storage": "10Mi"}}}],
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}],
            },
        }))
        .unwrap(),
    )
}

#[tokio::test]
async fn local_storage_limits_evict_every_pod_past_them_without_pressure_or_thresholds() {
    let (mut m, view, fakes) = manager(|cfg| cfg.eviction_hard = Default::default());
    *fakes.pods.lock().unwrap() = vec![
        storage_pod("writer", json!({})),
        storage_pod("filler", json!({})),
        storage_pod("neighbour", json!({})),
        storage_pod("static", json!({"kubernetes.io/config.source": "file"})),
    ];
    *fakes.latest.lock().unwrap() = Some(storage_summary(&[
        ("writer", 11 * MIB, 0, 11 * MIB),
        ("filler", 2 * MIB, 2 * MIB, 0),
        ("neighbour", 9 * MIB, MIB, 8 * MIB),
        ("static", 50 * MIB, 50 * MIB, 0),
    ]));
    let mut evicted = m.synchronize(false).await;
    evicted.sort();
    assert_eq!(evicted, ["filler", "writer"], "the static pod is critical");
    assert_eq!(*view.borrow(), Pressure::default(), "no pressure condition");
    let asked = fakes.evicted.lock().unwrap().clone();
    let of = |uid: &str| asked.iter().find(|(u, _)| u == uid).unwrap().1.clone();
    assert_eq!(
        of("filler"),
        Eviction {
            message: "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ".into(),
            grace_period: Duration::from_secs(1),
            disruption: false,
        }
    );
    assert_eq!(
        of("writer").message,
        "Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. "
    );

    // localStorageCapacityIsolation off: the limits are not enforced.
    let (mut m, _view, fakes) = manager(|cfg| {
        cfg.eviction_hard = Default::default();
        cfg.local_storage_capacity_isolation = false;
    });
    *fakes.pods.lock().unwrap() = vec![storage_pod("writer", json!({}))];
    *fakes.latest.lock().unwrap() = Some(storage_summary(&[("writer", 11 * MIB, 0, 11 * MIB)]));
    assert!(m.synchronize(false).await.is_empty());
    assert!(fakes.evicted.lock().unwrap().is_empty());
}
