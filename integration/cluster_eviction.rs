//! Eviction under memory pressure on a real node joined to the real control plane: a
//! BestEffort pod that grows past the node's allocatable memory is evicted (phase Failed,
//! reason Evicted, upstream's message, a DisruptionTarget condition, an Evicted event) while
//! a Guaranteed pod keeps running, and the node's MemoryPressure condition is set while the
//! threshold is crossed and cleared after the transition period.
//!
//! The pressure is the test's own, not the machine's: the agent works under its own
//! --cgroup-root with systemReserved leaving its pods 800 MiB (kubepods' limit), and the hard
//! memory.available threshold of 300 MiB also applies to that allocatable memory (upstream's
//! allocatableMemory.available), so pods using more than 500 MiB in all are past it. The
//! machine's own free memory (gigabytes) never comes near 300 MiB.
//!
//! Local ephemeral storage limits are enforced without any pressure: a pod whose container
//! writes past its ephemeral-storage limit and one that fills an emptyDir past its sizeLimit
//! are evicted with upstream's messages, while a neighbour keeps running and /stats/summary
//! shows its ephemeral storage grow.

mod common;

use common::cluster::ClusterNode;
use common::*;
use serde_json::Value;

/// Grows to 600 MiB of anonymous memory in 10 MiB steps (each a shell variable holding a
/// copy of a 10 MiB string), then waits in the shell: in a loop, as busybox's sh execs the
/// last command of `-c`, which would drop them. Anonymous memory goes with the process, so
/// the pressure ends when the pod is evicted.
const HOG: &str = r#"chunk=$(head -c 10485760 /dev/zero | tr "\0" a); i=0; while [ $i -lt 60 ]; do eval "v$i=\$chunk"; i=$((i+1)); sleep 0.2; done; echo filled; while :; do sleep 3600; done"#;

fn condition<'a>(node: &'a Value, kind: &str) -> Option<&'a Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn memory_pressure(node: &ClusterNode) -> String {
    condition(&node.node_object(), "MemoryPressure")
        .and_then(|c| c["status"].as_str())
        .unwrap_or("<absent>")
        .to_string()
}

/// Reasons of the events about `name` (of `kind`) in `namespace`.
fn event_reasons(node: &ClusterNode, namespace: &str, kind: &str, name: &str) -> Vec<String> {
    let selector = format!("involvedObject.kind={kind},involvedObject.name={name}");
    node.cluster
        .get(&["-n", namespace, "events", "--field-selector", &selector])
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect()
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn a_memory_hog_is_evicted_and_a_guaranteed_pod_keeps_running() {
    let root = format!("/krs-eviction-test-{}", std::process::id());
    let reserved = mem_total() - (800 << 20);
    let node = ClusterNode::start(
        "eviction",
        &[
            &format!("--cgroup-root={root}"),
            &format!("--system-reserved=memory={reserved}"),
            "--eviction-hard=memory.available<300Mi",
            // Long enough for two node status updates (every 10 s) to carry the condition.
            "--eviction-pressure-transition-period=30s",
            "--housekeeping-interval=2s",
        ],
    );
    let guaranteed = node.create_pod(
        "guaranteed",
        "exec sleep 3600",
        "    resources: {limits: {cpu: 100m, memory: 64Mi}}\n",
    );
    node.wait_api_pod(&guaranteed, 120, "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    assert_eq!(memory_pressure(&node), "False");

    let hog = node.create_pod("hog", HOG, "");
    // The condition lasts at least the transition period: watched from here on.
    let pressure_seen = std::cell::Cell::new(false);
    let evicted = node.wait_api_pod(&hog, 240, "evicted", |p| {
        if memory_pressure(&node) == "True" {
            pressure_seen.set(true);
        }
        p["status"]["reason"] == "Evicted"
    });
    assert_eq!(evicted["status"]["phase"], "Failed");
    let message = evicted["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "The node was low on resource: memory. Threshold quantity: 300Mi, available: "
        ) && message.contains("Container main was using ")
            && message.ends_with("request is 0, has larger consumption of memory. "),
        "{message}"
    );
    let disruption = condition(&evicted, "DisruptionTarget").expect("a DisruptionTarget condition");
    assert_eq!(disruption["status"], "True");
    assert_eq!(disruption["reason"], "TerminationByKubelet");
    assert_eq!(disruption["message"].as_str(), Some(message));
    let hog_stopped = node.wait_api_pod(&hog, 60, "its container stopped", |p| {
        p["status"]["containerStatuses"][0]["state"]["terminated"].is_object()
    });
    assert_eq!(
        hog_stopped["status"]["containerStatuses"][0]["restartCount"],
        0
    );
    node.wait_api(60, "the Evicted event recorded", |_| {
        event_reasons(&node, "default", "Pod", &hog).contains(&"Evicted".to_string())
    });

    // The node said so, and says so no more once the transition period has passed.
    node.wait_api(60, "MemoryPressure seen True", |_| {
        if memory_pressure(&node) == "True" {
            pressure_seen.set(true);
        }
        pressure_seen.get()
    });
    let name = node.name().to_string();
    node.wait_api(60, "the node's pressure events recorded", |_| {
        let reasons = event_reasons(&node, "default", "Node", &name);
        reasons.contains(&"EvictionThresholdMet".to_string())
            && reasons.contains(&"NodeHasInsufficientMemory".to_string())
    });
    node.wait_api(120, "MemoryPressure back to False", |_| {
        memory_pressure(&node) == "False"
    });

    // The Guaranteed pod ran through all of it.
    let g = node
        .api_pod(&guaranteed)
        .expect("the Guaranteed pod exists");
    assert_eq!(g["status"]["phase"], "Running", "{g}");
    assert_eq!(g["status"]["containerStatuses"][0]["restartCount"], 0);
    assert!(g["status"]["reason"].is_null(), "{g}");

    drop(node);
    let left = cgroups::remove_tree(&root);
    assert!(left.is_empty(), "cgroups left under {root}: {left:?}");
}

/// Bytes available to unprivileged users on the filesystem holding `path` (statvfs's
/// f_bavail, which the collector reports as the node filesystem's availableBytes).
fn fs_available(path: &std::path::Path) -> i64 {
    let (ok, out) = run_text(
        std::process::Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(path),
    );
    assert!(ok, "df {}: {out}", path.display());
    out.lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("df {}: {out}", path.display()))
}

/// The node's own disk pressure, relative to what is free when it starts: the nodefs
/// threshold sits 1 GiB below that, and a pod writing 2 GiB into an emptyDir crosses it by
/// about 1 GiB, a margin for whatever else the machine writes or frees meanwhile. The node
/// reclaims first: the dead container of a pod that ran to its end, and an image no container
/// uses; as that frees too little, the filling pod is evicted, its emptyDir goes with it, and
/// the pressure ends.
#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn a_disk_filler_is_evicted_once_removing_unused_images_is_not_enough() {
    let probe = tempfile::tempdir().unwrap();
    let threshold = fs_available(probe.path()) - (1 << 30);
    let node = ClusterNode::start(
        "disk eviction",
        &[
            &format!("--eviction-hard=nodefs.available<{threshold}"),
            "--eviction-pressure-transition-period=30s",
            "--housekeeping-interval=2s",
            "--minimum-image-ttl-duration=0s",
        ],
    );
    assert_eq!(
        node.root
            .path()
            .metadata()
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                m.dev()
            })
            .ok(),
        probe
            .path()
            .metadata()
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                m.dev()
            })
            .ok(),
        "the agent's root dir is on the filesystem measured"
    );
    // An image nothing uses (its own content: metrics-server's), for the reclaim to take.
    import_named_images(&node.ns, &["metrics-server"]);
    let unused = "registry.k8s.io/metrics-server/metrics-server:v0.8.0";
    let listed = || ctr(&["images", "ls", "-q"], &node.ns).1;
    assert!(listed().contains(unused), "{}", listed());

    // A pod that ran to its end: its dead container (and its writable layer) is the
    // first thing the node reclaims, and its status stays.
    let done = node.create_pod(
        "done",
        "dd if=/dev/zero of=/tmp/scratch bs=1M count=64 && echo done",
        "  restartPolicy: Never\n",
    );
    let done_uid = node.wait_api_pod(&done, 120, "Succeeded", |p| {
        p["status"]["phase"] == "Succeeded"
    })["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let containers_of = |uid: &str| {
        let filter = format!("labels.\"io.kubernetes.pod.uid\"=={uid}");
        let (ok, out) = ctr(&["containers", "ls", "-q", &filter], &node.ns);
        assert!(ok, "{out}");
        out.lines().filter(|l| !l.trim().is_empty()).count()
    };
    assert!(
        containers_of(&done_uid) > 0,
        "the ended pod keeps its containers"
    );

    let filler = node.create_pod(
        "filler",
        "dd if=/dev/zero of=/data/fill bs=1M count=2048 && echo filled && exec sleep 3600",
        "    volumeMounts:\n    - {name: data, mountPath: /data}\n  volumes:\n  - name: data\n    emptyDir: {}\n",
    );
    let evicted = node.wait_api_pod(&filler, 300, "evicted", |p| {
        p["status"]["reason"] == "Evicted"
    });
    assert_eq!(evicted["status"]["phase"], "Failed");
    let message = evicted["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message
            .starts_with("The node was low on resource: ephemeral-storage. Threshold quantity: "),
        "{message}"
    );
    assert!(
        !listed().contains(unused),
        "the unused image was removed before any pod was evicted: {}",
        listed()
    );
    assert_eq!(
        containers_of(&done_uid),
        0,
        "the ended pod's containers were removed"
    );
    let done_now = node.api_pod(&done).expect("the ended pod is still there");
    assert_eq!(done_now["status"]["phase"], "Succeeded");
    assert_eq!(
        done_now["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0,
        "its status stands: {done_now}"
    );
    let name = node.name().to_string();
    node.wait_api(60, "the node's disk pressure events recorded", |_| {
        let reasons = event_reasons(&node, "default", "Node", &name);
        reasons.contains(&"EvictionThresholdMet".to_string())
            && reasons.contains(&"NodeHasDiskPressure".to_string())
    });
    // The evicted pod's emptyDir is released with it: the pressure ends.
    node.wait_api(180, "DiskPressure back to False", |_| {
        condition(&node.node_object(), "DiskPressure").is_some_and(|c| c["status"] == "False")
    });
}

fn summary(node: &ClusterNode) -> Value {
    let (code, body) = http_get(node.port, "/stats/summary").expect("summary answers");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("summary is JSON")
}

/// The pod's `ephemeral-storage.usedBytes` in the agent's Summary, when it has one.
fn ephemeral_used(node: &ClusterNode, pod: &str) -> Option<u64> {
    summary(node)["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == pod)?["ephemeral-storage"]["usedBytes"]
        .as_u64()
}

fn assert_storage_evicted(node: &ClusterNode, pod: &str, message: &str) {
    let evicted = node.wait_api_pod(pod, 120, "evicted", |p| p["status"]["reason"] == "Evicted");
    assert_eq!(evicted["status"]["phase"], "Failed", "{evicted}");
    assert_eq!(evicted["status"]["message"], message, "{evicted}");
    assert!(
        condition(&evicted, "DisruptionTarget").is_none(),
        "upstream sets no DisruptionTarget for a local storage limit: {evicted}"
    );
    node.wait_api(60, "the Evicted event recorded", |_| {
        event_reasons(node, "default", "Pod", pod).contains(&"Evicted".to_string())
    });
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn pods_past_their_local_storage_limits_are_evicted_and_a_neighbour_keeps_running() {
    const MIB: u64 = 1 << 20;
    let node = ClusterNode::start(
        "local storage eviction",
        &[
            "--housekeeping-interval=1s",
            // Volumes, writable layers and logs measured every second, not every minute.
            "--volume-stats-agg-period=1s",
        ],
    );
    let neighbour = node.create_pod(
        "neighbour",
        "exec sleep 3600",
        "    resources: {limits: {ephemeral-storage: 64Mi}}\n    \
         volumeMounts: [{name: data, mountPath: /data}]\n  \
         volumes: [{name: data, emptyDir: {}}]\n",
    );
    let running = node.wait_api_pod(&neighbour, 120, "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();

    // A second container keeps the pod's total limit (66Mi) above what the first writes, so
    // the container's own limit is what it breaks.
    let writer = node.create_pod(
        "writer",
        "dd if=/dev/urandom of=/tmp/fill bs=1M count=4 && exec sleep 3600",
        &format!(
            "    resources: {{limits: {{ephemeral-storage: 2Mi}}}}\n  \
             - name: idle\n    image: {BUSYBOX}\n    command: [sleep, '3600']\n    \
             resources: {{limits: {{ephemeral-storage: 64Mi}}}}\n"
        ),
    );
    let filler = node.create_pod(
        "filler",
        "dd if=/dev/urandom of=/scratch/fill bs=1M count=3 && exec sleep 3600",
        "    volumeMounts: [{name: scratch, mountPath: /scratch}]\n  \
         volumes: [{name: scratch, emptyDir: {sizeLimit: 1Mi}}]\n",
    );

    // The neighbour's usage as the Summary shows it grows with what lands in its emptyDir.
    let mut before = 0;
    node.wait_api(
        60,
        "the neighbour's ephemeral storage in /stats/summary",
        |_| {
            ephemeral_used(&node, &neighbour)
                .map(|u| before = u)
                .is_some()
        },
    );
    let data = node
        .root
        .path()
        .join("root/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~empty-dir/data");
    std::fs::write(data.join("blob"), vec![7u8; 3 * MIB as usize]).unwrap();
    node.wait_api(
        60,
        "the neighbour's ephemeral storage grown by 3 MiB",
        |_| ephemeral_used(&node, &neighbour).is_some_and(|u| u >= before + 3 * MIB),
    );

    assert_storage_evicted(
        &node,
        &writer,
        "Container main exceeded its local ephemeral storage limit \"2Mi\". ",
    );
    assert_storage_evicted(
        &node,
        &filler,
        "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". ",
    );

    // 3 MiB of its 64Mi: the neighbour ran through all of it.
    let n = node.api_pod(&neighbour).expect("the neighbour exists");
    assert_eq!(n["status"]["phase"], "Running", "{n}");
    assert_eq!(n["status"]["containerStatuses"][0]["restartCount"], 0);
    assert!(n["status"]["reason"].is_null(), "{n}");
}
