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
use common::csi::{count, requests_of, Bins, NodeDriver};
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

/// A pod's script: whether /dev/xvda is a block device, then BYTES written onto it and read
/// back (`wrote_and_read` checks its log).
fn writer_script() -> String {
    format!(
        "if [ -b /dev/xvda ]; then echo is-block; fi; \
         printf {BYTES} | dd of=/dev/xvda bs=512 conv=sync,fsync 2>/dev/null; \
         echo read-$(dd if=/dev/xvda bs={len} count=1 2>/dev/null); sleep 3600",
        len = BYTES.len()
    )
}

fn wrote_and_read(log: &str) -> bool {
    log.contains("is-block") && log.contains(&format!("read-{BYTES}"))
}

/// Whether /stats/summary has the pod's volume "data" under `claim` with the 16 MiB
/// capacity of the tests' devices (and, with `zero_used`, 0 used, as upstream's
/// MetricsBlock reports a device).
fn capacity_reported(n: &ClusterNode, pod: &str, claim: &str, zero_used: bool) -> bool {
    let Some((200, body)) = common::http_get(n.port, "/stats/summary") else {
        return false;
    };
    let summary: Value = serde_json::from_str(&body).unwrap_or_default();
    summary["pods"].as_array().into_iter().flatten().any(|p| {
        p["podRef"]["name"] == pod
            && p["volume"].as_array().into_iter().flatten().any(|v| {
                v["name"] == "data"
                    && v["pvcRef"]["name"] == claim
                    && v["capacityBytes"] == 16u64 << 20
                    && (!zero_used || v["usedBytes"] == 0)
            })
    })
}

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

    let writer = n.create_pod("writer", &writer_script(), &block_claim(&claim, false));
    let running = n.wait_api_pod(&writer, 120, "Running with its device", is_running);
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();
    n.wait_until(60, "the writer wrote and read back its bytes", || {
        wrote_and_read(&log_of(&n, &writer))
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
        capacity_reported(&n, &writer, &claim, true)
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

/// A CSI block volume, against hack/csi's driver (a loop device over an image file of its
/// own) with the real external-attacher: the claim's pod gets a block device that writes
/// through to the driver's image; staged, published at upstream's path (a file the driver
/// binds its device onto) and mapped onto the pod's map file, which a loop device holds open;
/// the capacity is asked of the driver (NodeGetVolumeStats at the map file) and is in
/// /stats/summary; an agent kill -9 doubles nothing; the pod's deletion unpublishes,
/// unstages, and leaves no mount and no loop device.
#[test]
#[ignore = "needs root, containerd, loop devices, the control plane and hack/csi's binaries: run hack/test.sh"]
fn a_csi_block_volume_is_staged_published_mapped_and_measured() {
    let bins = Bins::get();
    let mut n = ClusterNode::start(
        "cluster-block-csi",
        &["--volume-stats-agg-period=2s", "--housekeeping-interval=1s"],
    );
    let node = n.name().to_string();
    let root = n.root.path().join("root");
    let driver = format!("{node}.block.csi.kubelet-rs.io");
    let d = NodeDriver::start(
        &bins,
        &n,
        &driver,
        true,
        &[format!("--block-size={}", 16u64 << 20)],
    );
    let (pv, claim, handle) = (
        format!("pv-csiblock-{node}"),
        format!("csiblock-{node}"),
        format!("blk-{node}"),
    );
    n.cluster.apply(&format!(
        "apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {{name: {driver}}}
spec:
  attachRequired: true
  podInfoOnMount: false
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}}}
spec:
  capacity: {{storage: 16Mi}}
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ''
  claimRef: {{namespace: default, name: {claim}}}
  csi: {{driver: {driver}, volumeHandle: {handle}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {claim}, namespace: default}}
spec:
  storageClassName: ''
  volumeName: {pv}
  volumeMode: Block
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 16Mi}}}}
"
    ));
    d.wait_listed(&n);
    let writer = n.create_pod("csiwriter", &writer_script(), &block_claim(&claim, false));
    let running = n.wait_api_pod(&writer, 180, "Running with its CSI device", is_running);
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();
    n.wait_until(60, "the writer wrote and read back its bytes", || {
        wrote_and_read(&log_of(&n, &writer))
    });
    let image = d.data.join("volumes").join(&handle).join("block.img");
    let head = {
        use std::io::Read;
        let mut buf = vec![0; BYTES.len()];
        std::fs::File::open(&image)
            .unwrap()
            .read_exact(&mut buf)
            .unwrap();
        buf
    };
    assert_eq!(head, BYTES.as_bytes(), "through to the driver's image");

    // Staged with a Block capability, published at upstream's path, mapped and locked.
    let base = root.join("plugins/kubernetes.io/csi/volumeDevices");
    let stage = requests_of(&d.reqs, "NodeStageVolume");
    assert_eq!(stage.len(), 1);
    assert!(
        stage[0]["volume_capability"]["block"].is_object(),
        "{}",
        stage[0]
    );
    let publish = base.join("publish").join(&pv).join(&uid);
    let published = requests_of(&d.reqs, "NodePublishVolume");
    assert_eq!(published.len(), 1);
    assert_eq!(
        published[0]["target_path"],
        publish.display().to_string().as_str()
    );
    let map_file = base.join(&pv).join("dev").join(&uid);
    let mut mounted = mounts_under(&base);
    mounted.sort();
    let mut want = vec![
        map_file.display().to_string(),
        publish.display().to_string(),
    ];
    want.sort();
    assert_eq!(mounted, want, "the driver's bind and the map");
    assert!(std::fs::symlink_metadata(
        root.join("pods")
            .join(&uid)
            .join("volumeDevices/kubernetes.io~csi")
            .join(&pv)
    )
    .is_ok());
    let locks = loops_backed_under(&root);
    assert_eq!(locks.len(), 1, "{locks:?}");
    assert_eq!(locks[0].1, map_file);

    // The capacity, as the driver reports it for the map file.
    n.wait_until(
        60,
        "the CSI block volume's capacity in /stats/summary",
        || capacity_reported(&n, &writer, &claim, false),
    );
    let stats = requests_of(&d.reqs, "NodeGetVolumeStats");
    assert!(
        stats
            .iter()
            .all(|r| r["volume_path"] == map_file.display().to_string().as_str()),
        "{stats:?}"
    );

    // kill -9: the pod runs on, nothing doubled, the driver not asked again.
    let main_id = container_status(&running, "main")["containerID"].clone();
    n.kill9();
    n.launch();
    std::thread::sleep(Duration::from_secs(5));
    let after = n.wait_api_pod(&writer, 60, "still Running", is_running);
    assert_eq!(container_status(&after, "main")["containerID"], main_id);
    assert_eq!(mounts_under(&base).len(), 2, "one map, not two");
    assert_eq!(loops_backed_under(&root).len(), 1, "one lock, not two");
    assert_eq!(count(&d.reqs, "NodePublishVolume"), 1);

    n.cluster
        .ok(&["-n", "default", "delete", "pod", &writer, "--wait=false"]);
    n.wait_api(120, "the writer is gone", |_| n.api_pod(&writer).is_none());
    n.wait_until(60, "unstaged", || count(&d.reqs, "NodeUnstageVolume") >= 1);
    assert_eq!(count(&d.reqs, "NodeUnpublishVolume"), 1);
    assert!(mounts_under(&root).is_empty(), "{:?}", mounts_under(&root));
    assert!(loops_backed_under(&root).is_empty(), "the lock went");
    assert!(
        loops_backed_under(d.work.path()).is_empty(),
        "the driver's loop device went with the unstage"
    );
    n.cluster
        .kubectl(&["-n", "default", "delete", "pvc", &claim, "--wait=false"]);
    n.cluster.kubectl(&["delete", "pv", &pv, "--wait=false"]);
    n.cluster
        .kubectl(&["delete", "csidriver", &driver, "--wait=false"]);
}
