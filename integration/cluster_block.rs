//! Raw block volumes against a real control plane: a loop device as an in-tree `local` PV
//! with `volumeMode: Block`, bound through a WaitForFirstConsumer StorageClass to a Block
//! claim. A pod gets it at `/dev/xvda` (a block device node in the container), writes bytes
//! with dd and reads them back; the agent's map (the bind onto the global map file, the
//! pod's link) is at upstream's paths and survives an agent kill -9 without doubling; a loop
//! device over the map file holds the device open while the pod runs (upstream's descriptor
//! lock) and goes with the pod; the volume's capacity (the device's size) is in
//! /stats/summary under its claim and in kubelet_volume_stats_capacity_bytes; the
//! next pod (its claim readOnly) reads the same bytes and cannot write; once the pods are
//! gone nothing stays mounted under the agent's root dir.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::cluster::ClusterNode;
use common::container_status;
use common::mounts_under;
use serde_json::Value;

fn is_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

/// A loop device over a file, detached when dropped (a failed test too).
struct LoopDevice {
    path: PathBuf,
    _backing: tempfile::TempDir,
}

impl LoopDevice {
    fn new(bytes: u64) -> LoopDevice {
        let backing = tempfile::tempdir().unwrap();
        let file = backing.path().join("disk.img");
        std::fs::File::create(&file)
            .unwrap()
            .set_len(bytes)
            .unwrap();
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&file)
            .output()
            .expect("losetup runs");
        assert!(
            out.status.success(),
            "losetup -f --show: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        LoopDevice {
            path,
            _backing: backing,
        }
    }
    /// The device's first `n` bytes, read on the host.
    fn head(&self, n: usize) -> Vec<u8> {
        use std::io::Read;
        let mut buf = vec![0; n];
        std::fs::File::open(&self.path)
            .unwrap()
            .read_exact(&mut buf)
            .unwrap();
        buf
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}

fn block_claim(claim: &str, read_only: bool) -> String {
    format!(
        "    volumeDevices: [{{name: data, devicePath: /dev/xvda}}]
  volumes:
  - name: data
    persistentVolumeClaim: {{claimName: {claim}, readOnly: {read_only}}}
"
    )
}

fn log_of(n: &ClusterNode, pod: &str) -> String {
    n.cluster.kubectl(&["-n", "default", "logs", pod]).1
}

const BYTES: &str = "kubelet-rs-block-42";

/// The loop devices whose backing file is at or below `dir`, as sysfs names them.
fn loops_backed_under(dir: &std::path::Path) -> Vec<(String, PathBuf)> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/sys/block").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(b) = std::fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        let backing = PathBuf::from(b.trim_end());
        if backing.starts_with(&dir) {
            out.push((name, backing));
        }
    }
    out
}

#[test]
#[ignore = "needs root, containerd, loop devices and the control plane: run hack/test.sh"]
fn a_local_block_volume_is_a_device_in_the_container_and_keeps_its_bytes_across_pods() {
    let disk = LoopDevice::new(16 << 20);
    let mut n = ClusterNode::start("cluster-block-local", &[]);
    let node = n.name().to_string();
    let (class, pv, claim) = (
        format!("block-{node}"),
        format!("pv-block-{node}"),
        format!("raw-{node}"),
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
  capacity: {{storage: 16Mi}}
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: {class}
  local: {{path: {dev}}}
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
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 16Mi}}}}
",
        dev = disk.path.display()
    ));

    let writer = n.create_pod(
        "writer",
        &format!(
            "if [ -b /dev/xvda ]; then echo is-block; fi; \
             printf {BYTES} | dd of=/dev/xvda bs=512 conv=sync,fsync 2>/dev/null; \
             echo read-$(dd if=/dev/xvda bs={len} count=1 2>/dev/null); sleep 3600",
            len = BYTES.len()
        ),
        &block_claim(&claim, false),
    );
    let running = n.wait_api_pod(&writer, 120, "Running with its device", is_running);
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();
    n.wait_until(60, "the writer wrote and read back its bytes", || {
        let log = log_of(&n, &writer);
        log.contains("is-block") && log.contains(&format!("read-{BYTES}"))
    });
    assert_eq!(
        disk.head(BYTES.len()),
        BYTES.as_bytes(),
        "on the device itself"
    );

    // Mapped at upstream's paths: the pod's link to the device, bound onto the map file.
    let root = n.root.path().join("root");
    let link = root
        .join("pods")
        .join(&uid)
        .join("volumeDevices/kubernetes.io~local-volume")
        .join(&pv);
    assert_eq!(std::fs::read_link(&link).unwrap(), disk.path);
    let global = root
        .join("plugins/kubernetes.io~local-volume/volumeDevices")
        .join(&pv);
    let map_file = std::fs::canonicalize(global.join(&uid)).unwrap();
    assert_eq!(
        mounts_under(&global),
        vec![map_file.to_string_lossy().to_string()]
    );
    // The descriptor lock: one loop device over the map file.
    let locks = loops_backed_under(&root);
    assert_eq!(locks.len(), 1, "{locks:?}");
    assert_eq!(locks[0].1, map_file);

    // Its capacity is the device's size, as upstream's MetricsBlock reports it.
    n.wait_until(60, "the block volume's capacity in /stats/summary", || {
        let Some((200, body)) = common::http_get(n.port, "/stats/summary") else {
            return false;
        };
        let summary: Value = serde_json::from_str(&body).unwrap_or_default();
        summary["pods"].as_array().into_iter().flatten().any(|p| {
            p["podRef"]["name"] == writer.as_str()
                && p["volume"].as_array().into_iter().flatten().any(|v| {
                    v["name"] == "data"
                        && v["pvcRef"]["name"] == claim.as_str()
                        && v["capacityBytes"] == 16u64 << 20
                        && v["usedBytes"] == 0
                })
        })
    });
    let series = format!(
        "kubelet_volume_stats_capacity_bytes{{namespace=\"default\",persistentvolumeclaim=\"{claim}\"}} "
    );
    n.wait_until(
        30,
        "kubelet_volume_stats_capacity_bytes of the claim",
        || {
            common::http_get(n.port, "/metrics").is_some_and(|(_, m)| {
                m.lines()
                    .filter_map(|l| l.strip_prefix(&series))
                    .any(|v| v.parse::<f64>() == Ok((16u64 << 20) as f64))
            })
        },
    );

    // kill -9 with the device mapped: the pod runs on, the map neither lost nor doubled.
    let main_id = container_status(&running, "main")["containerID"].clone();
    n.kill9();
    n.launch();
    std::thread::sleep(Duration::from_secs(5));
    let after = n.wait_api_pod(&writer, 60, "still Running", is_running);
    assert_eq!(container_status(&after, "main")["containerID"], main_id);
    assert_eq!(mounts_under(&global).len(), 1, "one map, not two");
    assert_eq!(loops_backed_under(&root).len(), 1, "one lock, not two");

    n.cluster
        .ok(&["-n", "default", "delete", "pod", &writer, "--wait=false"]);
    n.wait_api(120, "the writer is gone", |_| n.api_pod(&writer).is_none());
    assert!(mounts_under(&root).is_empty(), "{:?}", mounts_under(&root));
    assert!(loops_backed_under(&root).is_empty(), "the lock went");
    assert!(std::fs::symlink_metadata(&link).is_err(), "the link went");
    assert!(
        !global.exists(),
        "the global map path went with the last pod"
    );

    // The next pod reads the bytes; its claim says readOnly: the device cgroup refuses a write.
    let reader = n.create_pod(
        "reader",
        &format!(
            "if [ -b /dev/xvda ]; then echo is-block; fi; \
             echo read-$(dd if=/dev/xvda bs={len} count=1 2>/dev/null); \
             if printf x | dd of=/dev/xvda conv=notrunc 2>/dev/null; then echo wrote; else echo refused; fi; \
             sleep 3600",
            len = BYTES.len()
        ),
        &block_claim(&claim, true),
    );
    n.wait_api_pod(&reader, 120, "Running", is_running);
    n.wait_until(60, "the reader's log", || {
        let log = log_of(&n, &reader);
        log.contains("is-block")
            && log.contains(&format!("read-{BYTES}"))
            && log.contains("refused")
    });
    assert_eq!(disk.head(BYTES.len()), BYTES.as_bytes(), "not overwritten");

    n.cluster
        .ok(&["-n", "default", "delete", "pod", &reader, "--wait=false"]);
    n.wait_api(120, "the reader is gone", |_| n.api_pod(&reader).is_none());
    assert!(mounts_under(&root).is_empty(), "{:?}", mounts_under(&root));
    assert!(!global.exists());
    n.cluster
        .kubectl(&["-n", "default", "delete", "pvc", &claim, "--wait=false"]);
    n.cluster.kubectl(&["delete", "pv", &pv, "--wait=false"]);
    n.cluster
        .kubectl(&["delete", "storageclass", &class, "--wait=false"]);
}
