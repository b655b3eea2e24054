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
use common::csi::{count, requests, requests_of, Bins, NodeDriver};
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
    let s = |p: &Path| p.display().to_string();
    let fail_dir = tempfile::tempdir().unwrap();
    let fail = fail_dir.path().join("fail-publish");
    // One driver name per node: CSIDrivers are cluster-wide and tests share the cluster.
    let driver = format!("{node}.csi.kubelet-rs.io");
    let mut d = NodeDriver::start(
        &bins,
        &n,
        &driver,
        true,
        &[format!("--fail-publish-file={}", s(&fail))],
    );
    let (data, reqs) = (d.data.clone(), d.reqs.clone());

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
    drop(d.registrar.take());
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

/// The claims of a JWT (its middle part), undecoded signature and all: what the driver got.
fn jwt_claims(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url claims");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

/// A CSIDriver with tokenRequests and requiresRepublish, against the real TokenRequest API:
/// NodePublishVolume's volume context carries one token per audience, bound to the pod and
/// its service account; the volume is published again on later syncs; a republish that fails
/// is a FailedMount while the pod runs on with its mount; the pod's deletion unpublishes it.
#[test]
#[ignore = "needs root, containerd, the control plane and hack/csi's binaries: run hack/test.sh"]
fn a_driver_asking_for_tokens_gets_the_pods_and_is_published_again_on_every_sync() {
    let bins = Bins::get();
    // Syncs every 2 s (upstream's default: a minute), so republishes come quickly.
    let n = ClusterNode::start("cluster-csi-tokens", &["--sync-frequency=2s"]);
    let node = n.name().to_string();
    let root = n.root.path().join("root");
    let fail_dir = tempfile::tempdir().unwrap();
    let fail = fail_dir.path().join("fail-publish");
    let driver = format!("{node}.tokens.csi.kubelet-rs.io");
    let d = NodeDriver::start(
        &bins,
        &n,
        &driver,
        false,
        &[format!("--fail-publish-file={}", fail.display())],
    );
    let audience = format!("vault-{node}");
    n.cluster.apply(&format!(
        "apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {{name: {driver}}}
spec:
  attachRequired: false
  podInfoOnMount: false
  requiresRepublish: true
  volumeLifecycleModes: [Ephemeral]
  tokenRequests:
  - audience: {audience}
    expirationSeconds: 3600
  - audience: ''
"
    ));
    d.wait_listed(&n);
    let pod = n.create_pod(
        "tokens",
        "sleep 3600",
        &format!(
            "    volumeMounts: [{{name: secrets, mountPath: /secrets}}]
  volumes:
  - name: secrets
    csi: {{driver: {driver}}}
"
        ),
    );
    let running = n.wait_api_pod(&pod, 120, "Running on its CSI volume", is_running);
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();
    let target = root
        .join("pods")
        .join(&uid)
        .join("volumes/kubernetes.io~csi/secrets/mount");
    assert_eq!(mounts_under(&target).len(), 1);

    // One token per audience, in upstream's JSON, bound to the pod.
    let first = requests_of(&d.reqs, "NodePublishVolume")
        .into_iter()
        .next()
        .expect("published");
    let tokens: Value = serde_json::from_str(
        first["volume_context"]["csi.storage.k8s.io/serviceAccount.tokens"]
            .as_str()
            .expect("the tokens in the volume context"),
    )
    .unwrap();
    let keys: Vec<&String> = tokens.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["", audience.as_str()], "{tokens}");
    for (aud, t) in tokens.as_object().unwrap() {
        assert!(t["expirationTimestamp"].is_string(), "{t}");
        let claims = jwt_claims(t["token"].as_str().unwrap());
        assert_eq!(claims["sub"], "system:serviceaccount:default:default");
        assert_eq!(claims["kubernetes.io"]["pod"]["name"], pod.as_str());
        assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str());
        let auds: Vec<&str> = claims["aud"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if aud.is_empty() {
            assert!(
                !auds.contains(&audience.as_str()),
                "the apiserver's own audiences: {auds:?}"
            );
        } else {
            assert_eq!(auds, [audience.as_str()]);
        }
        let lifetime = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
        if !aud.is_empty() {
            assert_eq!(lifetime, 3600, "the audience's expirationSeconds");
        }
    }

    // requiresRepublish: published again on later syncs, at the same target, with tokens.
    n.wait_until(60, "two republishes", || {
        count(&d.reqs, "NodePublishVolume") >= 3
    });
    for r in requests_of(&d.reqs, "NodePublishVolume") {
        assert_eq!(r["target_path"], target.display().to_string().as_str());
        assert!(r["volume_context"]["csi.storage.k8s.io/serviceAccount.tokens"].is_string());
    }
    assert_eq!(
        mounts_under(&target).len(),
        1,
        "one mount, however often published"
    );

    // A failing republish: a FailedMount, the pod and its mount as they were.
    let main_id = container_status(&running, "main")["containerID"].clone();
    std::fs::write(&fail, "").unwrap();
    n.wait_api(60, "a FailedMount for the failed republish", |_| {
        events(&n, &pod, "FailedMount")
            .iter()
            .any(|m| m.contains("injected NodePublishVolume failure"))
    });
    let after = n.api_pod(&pod).unwrap();
    assert!(is_running(&after));
    assert_eq!(container_status(&after, "main")["containerID"], main_id);
    assert_eq!(mounts_under(&target).len(), 1, "the volume stays mounted");
    std::fs::remove_file(&fail).unwrap();

    n.cluster
        .ok(&["-n", "default", "delete", "pod", &pod, "--wait=false"]);
    n.wait_api(120, "the pod is gone", |_| n.api_pod(&pod).is_none());
    assert!(count(&d.reqs, "NodeUnpublishVolume") >= 1);
    assert!(
        mounts_under(&root).is_empty(),
        "mounts left under the root dir: {:?}",
        mounts_under(&root)
    );
    n.cluster
        .kubectl(&["delete", "csidriver", &driver, "--wait=false"]);
}
