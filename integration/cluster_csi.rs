//! CSI volumes against a real control plane (the attach/detach controller, the PV controller,
//! the StatefulSet controller), the real external-attacher, and a CSI driver and registrar
//! built from hack/csi (upstream's hostpath driver, provisioner and registrar are not on the
//! module proxy; these speak the same protocols):
//! - the driver registers through the agent's plugins_registry: the node's CSINode lists it
//!   and the Node carries its node ID;
//! - a StatefulSet's claim (a pre-made PV of the driver) is attached by the external-attacher,
//!   staged and published at upstream's paths with the attachment's publish context, and in
//!   the Node's volumesInUse; its usage (NodeGetVolumeStats) is in /stats/summary under its
//!   claim and in the kubelet_volume_stats_* series; the pod survives an agent kill -9 with
//!   one mount, and the data it wrote is there for the pod the StatefulSet makes after a
//!   deletion;
//! - a NodePublishVolume failure is a FailedMount in upstream's words and leaves no mount
//!   folder; an inline ephemeral volume runs once the driver stops failing;
//! - once the pods are gone the volume is unpublished and unstaged, nothing stays mounted,
//!   volumesInUse empties, and the registrar's end deregisters the driver.

mod common;

use std::path::Path;
use std::time::Duration;

use common::cluster::ClusterNode;
use common::container_status;
use common::csi::{count, requests, spawn, Bins};
use common::mounts_under;
use serde_json::Value;

fn events(n: &ClusterNode, pod: &str, reason: &str) -> Vec<String> {
    let selector = format!("involvedObject.name={pod},reason={reason}");
    n.cluster
        .get(&["-n", "default", "events", "--field-selector", &selector])
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

fn is_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

#[test]
#[ignore = "needs root, containerd, the control plane and hack/csi's binaries: run hack/test.sh"]
fn a_csi_driver_registers_and_serves_a_statefulset_and_an_inline_volume() {
    let bins = Bins::get();
    // Volume stats asked of the driver every 2 s (upstream's default: a minute).
    let mut n = ClusterNode::start(
        "cluster-csi",
        &["--volume-stats-agg-period=2s", "--housekeeping-interval=1s"],
    );
    let node = n.name().to_string();
    let root = n.root.path().join("root");
    let work = tempfile::tempdir().unwrap();
    let (sock, data, reqs, fail) = (
        work.path().join("csi.sock"),
        work.path().join("data"),
        work.path().join("requests.jsonl"),
        work.path().join("fail-publish"),
    );
    // One driver name per node: CSIDrivers are cluster-wide and tests share the cluster.
    let driver = format!("{node}.csi.kubelet-rs.io");
    let s = |p: &Path| p.display().to_string();
    let _driver = spawn(
        &bins.driver(),
        &[
            format!("--endpoint={}", s(&sock)),
            format!("--driver-name={driver}"),
            format!("--node-id={node}"),
            format!("--data-dir={}", s(&data)),
            "--attach-required=true".into(),
            format!("--fail-publish-file={}", s(&fail)),
            format!("--requests-log={}", s(&reqs)),
        ],
        &work.path().join("driver.log"),
    );
    n.wait_until(30, "the driver's socket", || sock.exists());
    let registrar = spawn(
        &bins.registrar(),
        &[
            format!("--csi-address={}", s(&sock)),
            format!(
                "--plugin-registration-dir={}",
                s(&root.join("plugins_registry"))
            ),
        ],
        &work.path().join("registrar.log"),
    );
    let _attacher = spawn(
        &bins.attacher(),
        &[
            format!("--csi-address={}", s(&sock)),
            format!("--kubeconfig={}", s(&n.cluster.kubeconfig)),
            "--leader-election=false".into(),
            "--timeout=30s".into(),
        ],
        &work.path().join("attacher.log"),
    );

    // Registration: the CSINode and the Node's annotation.
    n.wait_api(60, "the CSINode lists the driver", |c| {
        c.get(&["csinode", &node]).is_some_and(|cn| {
            cn["spec"]["drivers"].as_array().is_some_and(|d| {
                d.iter()
                    .any(|d| d["name"] == driver.as_str() && d["nodeID"] == node.as_str())
            })
        })
    });
    let ids: Value = serde_json::from_str(
        n.node_object()["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]
            .as_str()
            .expect("the nodeid annotation"),
    )
    .unwrap();
    assert_eq!(ids[&driver], node.as_str());
    let csinode = n.cluster.get(&["csinode", &node]).unwrap();
    assert_eq!(csinode["metadata"]["ownerReferences"][0]["kind"], "Node");

    let (class, pv, handle, sts) = (
        format!("csi-{node}"),
        format!("pv-csi-{node}"),
        format!("vol-{node}"),
        format!("db-{node}"),
    );
    n.cluster.apply(&format!(
        "apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {{name: {driver}}}
spec:
  attachRequired: true
  podInfoOnMount: true
  volumeLifecycleModes: [Persistent, Ephemeral]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: {class}}}
provisioner: kubernetes.io/no-provisioner
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {class}
  csi: {{driver: {driver}, volumeHandle: {handle}, volumeAttributes: {{tier: gold}}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {sts}, namespace: default}}
spec:
  replicas: 1
  serviceName: {sts}
  selector: {{matchLabels: {{app: {sts}}}}}
  template:
    metadata: {{labels: {{app: {sts}}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: {node}}}
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: {image}
        imagePullPolicy: Never
        command: [sh, -c, 'if [ -f /data/f ]; then echo found $(cat /data/f); else echo first > /data/f; fi; sleep 3600']
        volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      storageClassName: {class}
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 1Gi}}}}
",
        image = common::BUSYBOX
    ));
    let pod = format!("{sts}-0");
    let running = n.wait_api_pod(&pod, 180, "Running on its CSI volume", is_running);
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();
    let target = root
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~csi")
        .join(&pv)
        .join("mount");
    assert_eq!(
        std::fs::read_to_string(data.join("volumes").join(&handle).join("f")).unwrap(),
        "first\n",
        "the pod wrote onto the driver's volume"
    );
    assert_eq!(
        mounts_under(&target).len(),
        1,
        "published at upstream's path"
    );
    let log = requests(&reqs);
    let stage = log
        .iter()
        .find(|(m, _)| m.ends_with("NodeStageVolume"))
        .expect("staged");
    assert_eq!(
        stage.1["publish_context"]["krs-published"],
        node.as_str(),
        "{stage:?}"
    );
    assert!(stage.1["staging_target_path"]
        .as_str()
        .unwrap()
        .starts_with(&s(&root.join("plugins/kubernetes.io/csi").join(&driver))));
    let publish = log
        .iter()
        .find(|(m, _)| m.ends_with("NodePublishVolume"))
        .expect("published");
    assert_eq!(publish.1["target_path"], s(&target).as_str());
    assert_eq!(
        publish.1["volume_context"]["csi.storage.k8s.io/pod.name"],
        pod.as_str()
    );
    assert_eq!(publish.1["volume_context"]["tier"], "gold");
    let in_use = format!("kubernetes.io/csi/{driver}^{handle}");
    n.wait_api(30, "the volume is in the Node's volumesInUse", |c| {
        c.get(&["node", &node]).is_some_and(|no| {
            no["status"]["volumesInUse"]
                .as_array()
                .is_some_and(|v| v.iter().any(|x| x == in_use.as_str()))
        })
    });

    // The volume's usage, as the driver reports it, in /stats/summary under its claim and
    // in the kubelet_volume_stats_* series.
    let claim = format!("data-{pod}");
    n.wait_until(60, "the volume's stats in /stats/summary", || {
        let Some((200, body)) = common::http_get(n.port, "/stats/summary") else {
            return false;
        };
        let summary: Value = serde_json::from_str(&body).unwrap_or_default();
        summary["pods"].as_array().into_iter().flatten().any(|p| {
            p["podRef"]["name"] == pod.as_str()
                && p["volume"].as_array().into_iter().flatten().any(|v| {
                    v["name"] == "data"
                        && v["pvcRef"]["name"] == claim.as_str()
                        && v["pvcRef"]["namespace"] == "default"
                        && v["capacityBytes"].as_u64().is_some_and(|c| c > 0)
                        && v["usedBytes"].is_u64()
                        && v["inodes"].as_u64().is_some_and(|i| i > 0)
                })
        })
    });
    assert!(
        count(&reqs, "NodeGetVolumeStats") >= 1,
        "asked of the driver"
    );
    let series = format!(
        "kubelet_volume_stats_capacity_bytes{{namespace=\"default\",persistentvolumeclaim=\"{claim}\"}}"
    );
    n.wait_until(30, "the kubelet_volume_stats_* series", || {
        common::http_get(n.port, "/metrics").is_some_and(|(_, m)| m.contains(&series))
    });

    // kill -9 with the volume mounted: the pod runs on, one mount, no new publish.
    let main_id = container_status(&running, "main")["containerID"].clone();
    let publishes = count(&reqs, "NodePublishVolume");
    n.kill9();
    n.launch();
    std::thread::sleep(Duration::from_secs(5));
    let after = n.wait_api_pod(&pod, 60, "still Running", is_running);
    assert_eq!(container_status(&after, "main")["containerID"], main_id);
    assert_eq!(mounts_under(&target).len(), 1, "one mount, not two");
    assert_eq!(count(&reqs, "NodePublishVolume"), publishes);

    // The StatefulSet's next pod finds the data.
    n.cluster
        .ok(&["-n", "default", "delete", "pod", &pod, "--wait=false"]);
    n.wait_api(120, "a new pod", |_| {
        n.api_pod(&pod)
            .is_some_and(|p| p["metadata"]["uid"] != uid.as_str() && is_running(&p))
    });
    n.wait_until(30, "the new pod read the old data", || {
        let (_, log) = n.cluster.kubectl(&["-n", "default", "logs", &pod]);
        log.contains("found first")
    });
    assert!(
        !root.join("pods").join(&uid).exists(),
        "the old pod's folder went"
    );

    // A failing NodePublishVolume: upstream's FailedMount words, no mount folder left.
    std::fs::write(&fail, "").unwrap();
    let inline = format!("inline-{node}");
    n.cluster.apply(&format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: {inline}, namespace: default}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {image}
    imagePullPolicy: Never
    command: [sh, -c, 'echo ok > /scratch/f && sleep 3600']
    volumeMounts: [{{name: scratch, mountPath: /scratch}}]
  volumes:
  - name: scratch
    csi: {{driver: {driver}}}
",
        image = common::BUSYBOX
    ));
    let want = "MountVolume.SetUp failed for volume \"scratch\" : rpc error: code = Internal desc = injected NodePublishVolume failure";
    n.wait_api(60, "the FailedMount event", |_| {
        events(&n, &inline, "FailedMount").iter().any(|m| m == want)
    });
    let inline_uid = n.api_pod(&inline).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let inline_target = root
        .join("pods")
        .join(&inline_uid)
        .join("volumes/kubernetes.io~csi/scratch/mount");
    assert!(
        !inline_target.exists(),
        "no mount folder after a failed publish"
    );
    std::fs::remove_file(&fail).unwrap();
    n.wait_api_pod(
        &inline,
        120,
        "Running once the driver publishes",
        is_running,
    );
    assert_eq!(mounts_under(&inline_target).len(), 1);
    n.cluster
        .ok(&["-n", "default", "delete", "pod", &inline, "--wait=false"]);
    n.wait_api(120, "the inline pod is gone", |_| {
        n.api_pod(&inline).is_none()
    });
    assert!(mounts_under(&inline_target).is_empty());

    // Scaled to 0: unpublished, unstaged, nothing mounted, nothing in use.
    n.cluster.ok(&[
        "-n",
        "default",
        "scale",
        "statefulset",
        &sts,
        "--replicas=0",
    ]);
    n.wait_api(120, "the StatefulSet's pod is gone", |_| {
        n.api_pod(&pod).is_none()
    });
    n.wait_until(60, "unstaged", || count(&reqs, "NodeUnstageVolume") >= 1);
    assert!(
        mounts_under(&root).is_empty(),
        "mounts left under the root dir: {:?}",
        mounts_under(&root)
    );
    assert!(!root
        .join("plugins/kubernetes.io/csi")
        .join(&driver)
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some()));
    n.wait_api(60, "volumesInUse emptied", |c| {
        c.get(&["node", &node]).is_some_and(|no| {
            !no["status"]["volumesInUse"]
                .as_array()
                .is_some_and(|v| v.iter().any(|x| x == in_use.as_str()))
        })
    });

    // The registrar's end deregisters the driver.
    drop(registrar);
    n.wait_api(60, "the CSINode no longer lists the driver", |c| {
        c.get(&["csinode", &node]).is_some_and(|cn| {
            !cn["spec"]["drivers"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["name"] == driver.as_str()))
        })
    });

    for (kind, name) in [("statefulset", sts.as_str()), ("pvc", claim.as_str())] {
        n.cluster
            .kubectl(&["-n", "default", "delete", kind, name, "--wait=false"]);
    }
    for (kind, name) in [
        ("pv", pv.as_str()),
        ("storageclass", class.as_str()),
        ("csidriver", driver.as_str()),
    ] {
        n.cluster.kubectl(&["delete", kind, name, "--wait=false"]);
    }
}
