//! Dynamic provisioning of CSI volumes against a real control plane (the scheduler's volume
//! binding, the PV controller, the StatefulSet and attach/detach controllers), the real
//! external-attacher, and hack/csi's driver, registrar and provisioner (built on
//! sig-storage-lib-external-provisioner, doing external-provisioner's part, which the module
//! proxy does not serve):
//! - the driver's topology key is in its CSINode entry and on the Node as a label;
//! - a StatefulSet's volumeClaimTemplates through a WaitForFirstConsumer StorageClass: each
//!   claim is provisioned once the scheduler has picked the node (CreateVolume named
//!   `pvc-<claim uid>`, the claim's size, access mode and fsType, the class's parameters and
//!   mount options, the node's segment as its requirement) and bound to a PV in
//!   external-provisioner's form (csi source, reclaim policy, mount options, node affinity,
//!   finalizer); a claim no pod uses stays unprovisioned;
//! - the pods write onto their volumes, and a pod deleted and made again by the StatefulSet
//!   reads its data back;
//! - scaled down, the volumes are unpublished, unstaged and detached; the claims deleted,
//!   the PVs go through DeleteVolume (reclaimPolicy Delete), the driver's folders too, and
//!   nothing stays mounted.

mod common;

use std::path::Path;
use std::time::Instant;

use common::cluster::{Cluster, ClusterNode};
use common::csi::{count, requests_of, spawn, Bins, NodeDriver};
use common::mounts_under;
use serde_json::Value;

/// The driver's topology key (hack/csi/driver).
const TOPOLOGY_KEY: &str = "topology.csi.kubelet-rs.io/node";
/// The finalizer external-provisioner (and ours) puts on the PVs it makes.
const PV_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";

fn is_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

/// Removes what a failed run would leave in the shared cluster: the StatefulSet and claims,
/// then the driver's PVs and VolumeAttachments, whose finalizers (the provisioner's, the
/// attacher's) nobody would remove once those are stopped.
struct ApiCleanup {
    cluster: Cluster,
    driver: String,
    sts: String,
    claims: Vec<String>,
    class: String,
}

impl ApiCleanup {
    fn driver_objects(&self, kind: &str, field: &str) -> Vec<String> {
        self.cluster
            .get(&[kind])
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|o| o.pointer(field).and_then(Value::as_str) == Some(self.driver.as_str()))
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    }
}

impl Drop for ApiCleanup {
    fn drop(&mut self) {
        let c = &self.cluster;
        c.kubectl(&[
            "-n",
            "default",
            "delete",
            "statefulset",
            &self.sts,
            "--wait=false",
        ]);
        for claim in &self.claims {
            c.kubectl(&["-n", "default", "delete", "pvc", claim, "--wait=false"]);
        }
        for (kind, field) in [
            ("pv", "/spec/csi/driver"),
            ("volumeattachment", "/spec/attacher"),
        ] {
            for name in self.driver_objects(kind, field) {
                c.kubectl(&["delete", kind, &name, "--wait=false"]);
                c.kubectl(&[
                    "patch",
                    kind,
                    &name,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ]);
            }
        }
        c.kubectl(&["delete", "storageclass", &self.class, "--wait=false"]);
        c.kubectl(&["delete", "csidriver", &self.driver, "--wait=false"]);
    }
}

fn claim(n: &ClusterNode, name: &str) -> Option<Value> {
    n.cluster.get(&["-n", "default", "pvc", name])
}

#[test]
#[ignore = "needs root, containerd, the control plane and hack/csi's binaries: run hack/test.sh"]
fn a_statefulset_gets_provisioned_csi_volumes_that_go_with_their_claims() {
    let bins = Bins::get();
    let n = ClusterNode::start("cluster-csi-prov", &[]);
    let node = n.name().to_string();
    let root = n.root.path().join("root");
    // One driver name per node: CSIDrivers and StorageClasses are cluster-wide.
    let driver = format!("{node}.prov.csi.kubelet-rs.io");
    let (class, sts, unused) = (
        format!("prov-{node}"),
        format!("pdb-{node}"),
        format!("unused-{node}"),
    );
    let replicas = 2;
    let claims: Vec<String> = (0..replicas).map(|i| format!("data-{sts}-{i}")).collect();
    let s = |p: &Path| p.display().to_string();
    let d = NodeDriver::start(&bins, &n, &driver, true, &[]);
    let (data, reqs) = (d.data.clone(), d.reqs.clone());
    let _provisioner = spawn(
        &bins.provisioner(),
        &[
            format!("--csi-address={}", s(&d.sock)),
            format!("--kubeconfig={}", s(&n.cluster.kubeconfig)),
            "--timeout=30s".into(),
            "--extra-create-metadata".into(),
            // Bounds the wait after a failed try (the lib's default doubles up to 5 min).
            "--retry-interval-max=5s".into(),
            "--v=3".into(),
        ],
        &d.work.path().join("provisioner.log"),
    );
    let _cleanup = ApiCleanup {
        cluster: n.cluster.clone(),
        driver: driver.clone(),
        sts: sts.clone(),
        claims: claims.iter().cloned().chain([unused.clone()]).collect(),
        class: class.clone(),
    };

    // The driver's topology: its key in the CSINode, the node's segment as a Node label.
    n.wait_api(
        60,
        "the CSINode lists the driver with its topology key",
        |c| {
            c.get(&["csinode", &node]).is_some_and(|cn| {
                cn["spec"]["drivers"].as_array().is_some_and(|d| {
                    d.iter().any(|d| {
                        d["name"] == driver.as_str()
                            && d["topologyKeys"] == serde_json::json!([TOPOLOGY_KEY])
                    })
                })
            })
        },
    );
    n.wait_api(30, "the Node carries the topology label", |_| {
        n.node_object()["metadata"]["labels"][TOPOLOGY_KEY] == node.as_str()
    });

    n.cluster.apply(&format!(
        "apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {{name: {driver}}}
spec:
  attachRequired: true
  podInfoOnMount: true
  volumeLifecycleModes: [Persistent]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: {class}}}
provisioner: {driver}
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
mountOptions: [noatime]
parameters: {{tier: gold, csi.storage.k8s.io/fstype: ext4}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {unused}, namespace: default}}
spec:
  storageClassName: {class}
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
"
    ));
    let started = Instant::now();
    n.cluster.apply(&format!(
        "apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {sts}, namespace: default}}
spec:
  replicas: {replicas}
  podManagementPolicy: Parallel
  serviceName: {sts}
  selector: {{matchLabels: {{app: {sts}}}}}
  template:
    metadata: {{labels: {{app: {sts}}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: {node}}}
      terminationGracePeriodSeconds: 1
      automountServiceAccountToken: false
      containers:
      - name: main
        image: {image}
        imagePullPolicy: Never
        command: [sh, -c, 'if [ -f /data/f ]; then echo found $(cat /data/f); else hostname > /data/f; fi; sleep 3600']
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
    let pods: Vec<String> = (0..replicas).map(|i| format!("{sts}-{i}")).collect();
    let mut uids = Vec::new();
    for pod in &pods {
        let p = n.wait_api_pod(pod, 240, "Running on a provisioned volume", is_running);
        uids.push(p["metadata"]["uid"].as_str().unwrap().to_string());
    }
    eprintln!(
        "{replicas} pods Running on provisioned volumes {:.1}s after the StatefulSet",
        started.elapsed().as_secs_f64()
    );

    // Each claim: provisioned on the node the scheduler picked, bound to its PV.
    let creates = requests_of(&reqs, "CreateVolume");
    let mut pvs = Vec::new();
    for (claim_name, (pod, pod_uid)) in claims.iter().zip(pods.iter().zip(&uids)) {
        let c = claim(&n, claim_name).expect("the StatefulSet's claim");
        let pvc_uid = c["metadata"]["uid"].as_str().unwrap();
        let pv_name = format!("pvc-{pvc_uid}");
        assert_eq!(c["status"]["phase"], "Bound", "{c}");
        assert_eq!(c["spec"]["volumeName"], pv_name.as_str());
        assert_eq!(
            c["metadata"]["annotations"]["volume.kubernetes.io/selected-node"],
            node.as_str()
        );
        assert_eq!(
            c["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"],
            driver.as_str()
        );

        let create = creates
            .iter()
            .find(|r| r["name"] == pv_name.as_str())
            .unwrap_or_else(|| panic!("no CreateVolume for {pv_name}: {creates:?}"));
        assert_eq!(
            create["capacity_range"]["required_bytes"], "1073741824",
            "{create}"
        );
        assert_eq!(create["parameters"]["tier"], "gold", "{create}");
        assert_eq!(
            create["parameters"]["csi.storage.k8s.io/pvc/name"],
            claim_name.as_str()
        );
        assert!(
            create["parameters"]["csi.storage.k8s.io/fstype"].is_null(),
            "the provisioner's own parameter stays with it: {create}"
        );
        let cap = &create["volume_capabilities"][0];
        assert_eq!(cap["access_mode"]["mode"], "SINGLE_NODE_WRITER", "{create}");
        assert_eq!(cap["mount"]["fs_type"], "ext4", "{create}");
        assert_eq!(cap["mount"]["mount_flags"], serde_json::json!(["noatime"]));
        let want_segment = serde_json::json!([{ "segments": { TOPOLOGY_KEY: node.as_str() } }]);
        assert_eq!(
            create["accessibility_requirements"]["requisite"], want_segment,
            "the selected node's segment: {create}"
        );

        let pv = n
            .cluster
            .get(&["pv", &pv_name])
            .expect("the provisioned PV");
        let spec = &pv["spec"];
        assert_eq!(spec["csi"]["driver"], driver.as_str(), "{pv}");
        assert_eq!(spec["csi"]["volumeHandle"], pv_name.as_str());
        assert_eq!(spec["csi"]["fsType"], "ext4");
        assert_eq!(spec["csi"]["volumeAttributes"]["tier"], "gold");
        assert_eq!(spec["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(spec["storageClassName"], class.as_str());
        assert_eq!(spec["mountOptions"], serde_json::json!(["noatime"]));
        assert_eq!(spec["capacity"]["storage"], "1Gi");
        assert_eq!(spec["claimRef"]["name"], claim_name.as_str());
        assert_eq!(
            spec["nodeAffinity"]["required"]["nodeSelectorTerms"],
            serde_json::json!([{ "matchExpressions": [
                { "key": TOPOLOGY_KEY, "operator": "In", "values": [node.as_str()] }
            ] }]),
            "{pv}"
        );
        assert_eq!(
            pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
            driver.as_str()
        );
        assert!(
            pv["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == PV_FINALIZER)),
            "{pv}"
        );

        // The pod wrote onto its own volume, published at upstream's path.
        assert_eq!(
            std::fs::read_to_string(data.join("volumes").join(&pv_name).join("f")).unwrap(),
            format!("{pod}\n")
        );
        let target = root
            .join("pods")
            .join(pod_uid)
            .join("volumes/kubernetes.io~csi")
            .join(&pv_name)
            .join("mount");
        assert_eq!(mounts_under(&target).len(), 1, "{}", target.display());
        pvs.push(pv_name);
    }
    // The volume's context from CreateVolume reaches the node calls; so do mount options.
    let publish = requests_of(&reqs, "NodePublishVolume");
    assert!(
        publish.iter().all(|r| r["volume_context"]["tier"] == "gold"
            && r["volume_capability"]["mount"]["mount_flags"] == serde_json::json!(["noatime"])),
        "{publish:?}"
    );

    // WaitForFirstConsumer: the claim no pod uses is not provisioned.
    let idle = claim(&n, &unused).expect("the unused claim");
    assert_eq!(idle["status"]["phase"], "Pending", "{idle}");
    assert!(idle["metadata"]["annotations"]["volume.kubernetes.io/selected-node"].is_null());
    let idle_pv = format!("pvc-{}", idle["metadata"]["uid"].as_str().unwrap());
    assert!(
        !creates.iter().any(|r| r["name"] == idle_pv.as_str()),
        "CreateVolume for a claim no pod uses"
    );

    // A pod deleted: the StatefulSet's next one mounts the same volume and finds its data.
    n.cluster
        .ok(&["-n", "default", "delete", "pod", &pods[0], "--wait=false"]);
    n.wait_api(180, "a new pod", |_| {
        n.api_pod(&pods[0])
            .is_some_and(|p| p["metadata"]["uid"] != uids[0].as_str() && is_running(&p))
    });
    let want = format!("found {}", pods[0]);
    n.wait_until(30, "the new pod read its data", || {
        let (_, log) = n.cluster.kubectl(&["-n", "default", "logs", &pods[0]]);
        log.contains(&want)
    });
    assert_eq!(
        count(&reqs, "CreateVolume"),
        creates.len(),
        "no new volume for the new pod"
    );

    // Scaled to 0: unpublished, unstaged, detached.
    n.cluster.ok(&[
        "-n",
        "default",
        "scale",
        "statefulset",
        &sts,
        "--replicas=0",
    ]);
    n.wait_api(120, "the StatefulSet's pods are gone", |_| {
        pods.iter().all(|p| n.api_pod(p).is_none())
    });
    n.wait_until(60, "unstaged", || {
        let unstaged = requests_of(&reqs, "NodeUnstageVolume");
        pvs.iter()
            .all(|pv| unstaged.iter().any(|r| r["volume_id"] == pv.as_str()))
    });
    n.wait_api(120, "detached: no VolumeAttachment of the PVs", |c| {
        c.get(&["volumeattachment"])
            .and_then(|v| v["items"].as_array().cloned())
            .is_some_and(|items| {
                !items.iter().any(|va| {
                    va["spec"]["source"]["persistentVolumeName"]
                        .as_str()
                        .is_some_and(|p| pvs.iter().any(|x| x == p))
                })
            })
    });
    assert!(
        mounts_under(&root).is_empty(),
        "mounts left under the root dir: {:?}",
        mounts_under(&root)
    );

    // The claims deleted: reclaimPolicy Delete takes the PVs through DeleteVolume.
    let deleting = Instant::now();
    for c in &claims {
        n.cluster
            .ok(&["-n", "default", "delete", "pvc", c, "--wait=false"]);
    }
    n.wait_api(120, "the provisioned PVs are deleted", |c| {
        pvs.iter().all(|pv| c.get(&["pv", pv]).is_none())
    });
    eprintln!(
        "{} PVs deleted {:.1}s after their claims",
        pvs.len(),
        deleting.elapsed().as_secs_f64()
    );
    let deletes = requests_of(&reqs, "DeleteVolume");
    for pv in &pvs {
        assert!(
            deletes.iter().any(|r| r["volume_id"] == pv.as_str()),
            "DeleteVolume {pv}: {deletes:?}"
        );
        assert!(
            !data.join("volumes").join(pv).exists(),
            "the driver removed {pv}'s folder"
        );
    }
    assert!(
        mounts_under(&root).is_empty() && mounts_under(&data).is_empty(),
        "mounts left: {:?} {:?}",
        mounts_under(&root),
        mounts_under(&data)
    );
}
