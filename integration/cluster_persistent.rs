//! Persistent volumes against a real control plane (the scheduler's volume binding and the
//! controller manager's PV controller do the binding, as on any cluster):
//! - a local PV through a WaitForFirstConsumer StorageClass: the claim binds when the pod
//!   is scheduled, the agent bind-mounts the volume into the pod's dir, what the pod wrote
//!   is on the volume and is read by the next pod (read-only as its claim says); the pod
//!   survives an agent kill -9 with its volume mounted, and once the pods are gone no mount
//!   of the pods' dirs is left;
//! - a pod whose claim does not exist waits in ContainerCreating with upstream's
//!   FailedMount event, and runs once its claim is created and bound to a hostPath PV.

mod common;

use std::time::Duration;

use common::cluster::ClusterNode;
use common::container_status;
use common::mounts_under;
use serde_json::Value;

fn is_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

fn claim_volume(claim: &str, read_only: bool) -> String {
    format!(
        "    volumeMounts: [{{name: data, mountPath: /data}}]
  volumes:
  - name: data
    persistentVolumeClaim: {{claimName: {claim}, readOnly: {read_only}}}
"
    )
}

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

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn a_local_volume_keeps_its_data_across_pods_and_agent_restarts() {
    let mut n = ClusterNode::start("cluster-pv-local", &[]);
    let node = n.name().to_string();
    let disk = tempfile::tempdir().unwrap();
    let (class, pv, claim) = (
        format!("local-{node}"),
        format!("pv-{node}"),
        format!("data-{node}"),
    );
    n.cluster.apply(&format!(
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: {class}}}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {class}
  local: {{path: {disk}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {{key: kubernetes.io/hostname, operator: In, values: [{node}]}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {claim}, namespace: default}}
spec:
  storageClassName: {class}
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
",
        disk = disk.path().display()
    ));
    // WaitForFirstConsumer: nothing binds before a pod needs the claim.
    std::thread::sleep(Duration::from_secs(2));
    let pending = n
        .cluster
        .get(&["-n", "default", "pvc", &claim])
        .expect("the claim");
    assert_eq!(pending["status"]["phase"], "Pending", "{pending}");

    let writer = n.create_pod(
        "writer",
        "echo kept > /data/f && sleep 3600",
        &claim_volume(&claim, false),
    );
    let running = n.wait_api_pod(&writer, 120, "Running with its volume", is_running);
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();
    let bound = n.cluster.get(&["-n", "default", "pvc", &claim]).unwrap();
    assert_eq!(bound["status"]["phase"], "Bound");
    assert_eq!(bound["spec"]["volumeName"], pv.as_str());
    let at = n
        .root
        .path()
        .join("root/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~local-volume")
        .join(&pv);
    n.wait_until(30, "the pod wrote onto the volume", || {
        std::fs::read_to_string(disk.path().join("f")).is_ok_and(|s| s == "kept\n")
    });
    assert_eq!(
        mounts_under(&at),
        vec![std::fs::canonicalize(&at)
            .unwrap()
            .to_string_lossy()
            .to_string()],
        "the volume is bound at upstream's path"
    );

    // kill -9 with the volume mounted: the pod runs on, its volume neither lost nor doubled.
    let main_id = container_status(&running, "main")["containerID"].clone();
    n.kill9();
    n.launch();
    std::thread::sleep(Duration::from_secs(5));
    let after = n.wait_api_pod(&writer, 60, "still Running", is_running);
    assert_eq!(container_status(&after, "main")["containerID"], main_id);
    assert_eq!(container_status(&after, "main")["restartCount"], 0);
    assert_eq!(mounts_under(&at).len(), 1, "one mount, not two");

    n.cluster
        .ok(&["-n", "default", "delete", "pod", &writer, "--wait=false"]);
    n.wait_api(120, "the writer is gone", |_| n.api_pod(&writer).is_none());
    assert!(mounts_under(&at).is_empty(), "the bind went with the pod");
    assert!(!at.exists(), "its folder too");
    assert_eq!(
        std::fs::read_to_string(disk.path().join("f")).unwrap(),
        "kept\n",
        "the volume's data stays"
    );

    // The next pod reads it; its claim says readOnly, so it cannot write.
    let reader = n.create_pod(
        "reader",
        "cat /data/f; if touch /data/g; then echo wrote; else echo refused; fi; sleep 3600",
        &claim_volume(&claim, true),
    );
    n.wait_api_pod(&reader, 120, "Running", is_running);
    n.wait_until(30, "the reader's log", || {
        let (_, log) = n.cluster.kubectl(&["-n", "default", "logs", &reader]);
        log.contains("kept") && log.contains("refused")
    });
    assert!(!disk.path().join("g").exists());

    let root = n.root.path().join("root/pods");
    n.cluster
        .ok(&["-n", "default", "delete", "pod", &reader, "--wait=false"]);
    n.wait_api(120, "the reader is gone", |_| n.api_pod(&reader).is_none());
    assert!(
        mounts_under(&root).is_empty(),
        "mounts left: {:?}",
        mounts_under(&root)
    );
    n.cluster
        .kubectl(&["-n", "default", "delete", "pvc", &claim, "--wait=false"]);
    n.cluster.kubectl(&["delete", "pv", &pv, "--wait=false"]);
    n.cluster
        .kubectl(&["delete", "storageclass", &class, "--wait=false"]);
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn a_pod_waits_for_its_claim_then_runs_on_a_host_path_volume() {
    let n = ClusterNode::start("cluster-pv-wait", &[]);
    let node = n.name().to_string();
    let host = tempfile::tempdir().unwrap();
    let (pv, claim) = (format!("hp-{node}"), format!("later-{node}"));
    // The scheduler would hold a pod whose claim is missing: this one names its node, as a
    // DaemonSet's pods do, and reaches the agent at once.
    let direct = format!("direct-{node}");
    n.cluster.apply(&format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: {direct}, namespace: default}}
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: {image}
    command: ['sh', '-c', 'echo here > /data/f && sleep 3600']
{mounts}",
        image = common::BUSYBOX,
        mounts = claim_volume(&claim, false)
    ));
    n.wait_api_pod(&direct, 60, "ContainerCreating", |p| {
        container_status(p, "main")["state"]["waiting"]["reason"] == "ContainerCreating"
    });
    let wanted = format!(
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data], \
         failed to process volumes=[data]: error processing PVC default/{claim}: failed to fetch \
         PVC from API server: persistentvolumeclaims \"{claim}\" not found"
    );
    n.wait_api(60, "a FailedMount event in upstream's words", |_| {
        events(&n, &direct, "FailedMount").contains(&wanted)
    });

    // The claim appears, pre-bound to a hostPath volume; the PV controller binds them.
    n.cluster.apply(&format!(
        "apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ''
  hostPath: {{path: {host}, type: Directory}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {claim}, namespace: default}}
spec:
  storageClassName: ''
  volumeName: {pv}
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
",
        host = host.path().display()
    ));
    n.wait_api_pod(&direct, 120, "Running once the claim is bound", is_running);
    n.wait_until(30, "the pod wrote into the host path", || {
        std::fs::read_to_string(host.path().join("f")).is_ok_and(|s| s == "here\n")
    });
    n.cluster
        .ok(&["-n", "default", "delete", "pod", &direct, "--wait=false"]);
    n.wait_api(120, "the pod is gone", |_| n.api_pod(&direct).is_none());
    assert!(
        host.path().join("f").exists(),
        "a hostPath volume is left alone"
    );
    n.cluster
        .kubectl(&["-n", "default", "delete", "pvc", &claim, "--wait=false"]);
    n.cluster.kubectl(&["delete", "pv", &pv, "--wait=false"]);
}
