//! What a pass shows the rest of the agent: the pod's status, handed to the status manager
//! (the one writer of statuses), and what the stats collector samples. Both come from the
//! pass's own view, so publishing costs no runtime listing.

use std::path::Path;

use chrono::Utc;
use k8s_openapi::api::core::v1::{Pod, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::{info, warn};

use super::sandbox::{latest_sandbox, split_ips};
use super::Worker;
use crate::pod::status::{self, StatusInput};
use crate::runtime::containers::{ContainerRecord, State};
use crate::runtime::labels::{self, Kind};
use crate::stats::summary::PvcReference;
use crate::stats::{Measure, VolumeInfo};
use crate::volume::{PodVolumes, Usage};

impl Worker {
    /// Computes the pod's status from the pass's view and hands it to the status manager.
    /// Exits the pass itself caused (kills, failed hooks) are recorded first, so a status
    /// never shows an exit without its reason.
    pub(super) async fn publish(&mut self, pod: &Pod) {
        if self.frozen {
            // Its containers are gone: the status they ended with stands.
            if let Some(status) = self.last_status.clone() {
                let mut out = pod.clone();
                out.status = Some(status);
                self.shared.statuses.set(out);
            }
            return;
        }
        if let Err(e) = self.finalize_view().await {
            warn!(pod = %self.pod_ref.display(), error = %e, "cannot record a container exit");
        }
        let Some(records) = self.view.take() else {
            return;
        };
        let sandbox = latest_sandbox(&records);
        let ips = split_ips(sandbox.and_then(|s| s.labels.get(labels::POD_IPS)));
        let probe_results = self.probe_results(&records);
        let status = status::compute(&StatusInput {
            pod,
            records: &records,
            waiting: &self.waiting,
            probes: &probe_results,
            sandbox_ready: sandbox.is_some_and(|s| s.is_running()),
            pod_ips: &ips,
            host_ip: &self.shared.host_ip,
            start_time: self.pod_start(pod, &records),
            now: Utc::now(),
            previous: self.last_status.as_ref(),
            terminal: self.terminating,
            failure: self.failure.as_ref(),
        });
        let mut status = status;
        self.resize_status(pod, &records, &mut status);
        self.publish_stats_info(&records, status.start_time.as_ref())
            .await;
        self.view = Some(records);
        let mut out = pod.clone();
        out.status = Some(status.clone());
        let all_started = status
            .container_statuses
            .iter()
            .flatten()
            .all(|c| c.started == Some(true));
        if all_started || self.terminating || is_terminal(status.phase.as_deref()) {
            self.first_start_done = true;
        }
        if self.started_any && !self.start_recorded && all_started {
            self.start_recorded = true;
            let took = (Utc::now() - self.start_time).to_std().unwrap_or_default();
            crate::metrics::pod_started(took);
        }
        if self.last_status.as_ref().map(|s| &s.phase) != Some(&status.phase) {
            info!(pod = %self.pod_ref.display(), phase = %status.phase.as_deref().unwrap_or(""), "pod phase");
        }
        self.last_status = Some(status);
        self.shared.statuses.set(out);
    }

    /// Tells the stats collector what of this pod runs now (it never asks the runtime).
    async fn publish_stats_info(&mut self, records: &[ContainerRecord], start: Option<&Time>) {
        let Some(sandbox) = latest_sandbox(records).filter(|s| s.is_running()) else {
            if let Ok(mut m) = self.shared.stats_pods.write() {
                m.remove(&self.pod_ref.uid);
            }
            return;
        };
        let pause_pid = match sandbox.state {
            State::Running { pid, .. } => Some(pid),
            _ => None,
        };
        let log_dir = self.log_dir();
        let mut containers = Vec::new();
        for r in records
            .iter()
            .filter(|r| r.kind != Kind::Sandbox && r.is_running())
        {
            if !self.upper_dirs.contains_key(&r.id) {
                let upper = self.shared.rt.upper_dir(&r.id).await;
                self.upper_dirs.insert(r.id.clone(), upper);
            }
            let parent = r
                .labels
                .get(labels::CGROUP_PARENT)
                .cloned()
                .unwrap_or_default();
            containers.push(crate::stats::ContainerInfo {
                name: r.name.clone(),
                id: r.id.clone(),
                image: r.image.clone(),
                cgroup_path: format!("{parent}/{}", r.id),
                start_time: match r.state {
                    State::Running {
                        started_at: Some(t),
                        ..
                    } => t,
                    _ => r.created_at.unwrap_or_else(Utc::now),
                },
                log_dir: Some(log_dir.join(&r.name)),
                rootfs_upper: self.upper_dirs.get(&r.id).cloned().flatten(),
            });
        }
        self.upper_dirs
            .retain(|id, _| records.iter().any(|r| &r.id == id));
        let pod_dir = self.pod_dir();
        let volumes = self.stats_volumes.clone();
        let info = crate::stats::PodInfo {
            uid: self.pod_ref.uid.clone(),
            name: self.pod_ref.name.clone(),
            namespace: self.pod_ref.namespace.clone(),
            pause_pid,
            sandbox: Some(crate::stats::SandboxInfo {
                id: sandbox.id.clone(),
                image: sandbox.image.clone(),
            }),
            cgroup_parent: sandbox
                .labels
                .get(labels::CGROUP_PARENT)
                .cloned()
                .unwrap_or_default(),
            start_time: start
                .and_then(|t| chrono::DateTime::from_timestamp(t.0.as_second(), 0))
                .unwrap_or(self.start_time),
            containers,
            volumes,
            host_files: vec![pod_dir.hosts()],
        };
        if let Ok(mut m) = self.shared.stats_pods.write() {
            m.insert(self.pod_ref.uid.clone(), info);
        }
    }
}

/// The pod's volumes the collector measures, as upstream's volume plugins measure them:
/// emptyDir, configMap, secret, downwardAPI and projected walked, a `local` PV by its
/// filesystem, a CSI volume as its driver reports it, a `local` block device by its size and
/// a CSI one as its driver reports it for the pod's map file (upstream's volume path for a
/// block volume); hostPath not at all. Those on the node's disk count in the pod's ephemeral
/// storage (upstream's IsLocalEphemeralVolume: emptyDir not in memory, configMap); a claim's
/// volume names its claim.
pub(super) fn stats_volumes(pod: &Pod, volumes: &PodVolumes, root_dir: &Path) -> Vec<VolumeInfo> {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let spec: Vec<&Volume> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .collect();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    volumes
        .iter()
        .filter_map(|(name, v)| {
            let mut path = v.path.clone();
            let (measure, ephemeral) = match v.kind.usage() {
                Usage::Walk { node_disk } => (Measure::Walk, node_disk),
                Usage::StatFs => (Measure::StatFs, false),
                Usage::Reported => (Measure::Reported, false),
                Usage::DeviceSize => (Measure::DeviceSize, false),
                Usage::ReportedForMapFile => {
                    let folder = v.path.file_name()?.to_string_lossy();
                    path = crate::volume::csi::block_map_file(root_dir, &folder, uid);
                    (Measure::Reported, false)
                }
                Usage::NotMeasured => return None,
            };
            let source = spec.iter().find(|s| s.name == name);
            let claim = source.and_then(|s| {
                if let Some(c) = &s.persistent_volume_claim {
                    Some(c.claim_name.clone())
                } else {
                    // A generic ephemeral volume's claim is named after the pod and volume.
                    s.ephemeral.as_ref().map(|_| format!("{pod_name}-{name}"))
                }
            });
            Some(VolumeInfo {
                name: name.to_string(),
                path,
                ephemeral,
                measure,
                pvc: claim.map(|name| PvcReference {
                    name,
                    namespace: namespace.clone(),
                }),
            })
        })
        .collect()
}

fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded") | Some("Failed"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::VolumeKind;

    #[test]
    fn volumes_are_measured_as_upstreams_plugins_measure_them() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [
                    {"name": "disk", "emptyDir": {}},
                    {"name": "shm", "emptyDir": {"medium": "Memory"}},
                    {"name": "cfg", "configMap": {"name": "x"}},
                    {"name": "token", "projected": {"sources": []}},
                    {"name": "host", "hostPath": {"path": "/srv"}},
                    {"name": "db", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                    {"name": "raw", "persistentVolumeClaim": {"claimName": "dev"}},
                    {"name": "rawcsi", "persistentVolumeClaim": {"claimName": "devcsi"}},
                ],
            },
        }))
        .unwrap();
        let dir = std::path::Path::new("/r/pods/u/volumes");
        let mut v = PodVolumes::new("p_ns(u)", "/r/pods/u");
        for (name, kind, sub) in [
            ("disk", VolumeKind::EmptyDir, "kubernetes.io~empty-dir/disk"),
            (
                "shm",
                VolumeKind::EmptyDirMemory,
                "kubernetes.io~empty-dir/shm",
            ),
            ("cfg", VolumeKind::ConfigMap, "kubernetes.io~configmap/cfg"),
            (
                "token",
                VolumeKind::Projected,
                "kubernetes.io~projected/token",
            ),
            ("host", VolumeKind::HostPath, "/srv"),
            ("db", VolumeKind::Local, "kubernetes.io~local-volume/pv-1"),
            ("scratch", VolumeKind::Csi, "kubernetes.io~csi/pvc-2/mount"),
            (
                "raw",
                VolumeKind::LocalBlock,
                "../volumeDevices/kubernetes.io~local-volume/pv-3",
            ),
            (
                "rawcsi",
                VolumeKind::CsiBlock,
                "../volumeDevices/kubernetes.io~csi/pv-4",
            ),
        ] {
            let host = crate::volume::HostVolume {
                path: dir.join(sub),
                read_only: false,
                kind,
            };
            v.insert(name, host);
        }
        let got = stats_volumes(&pod, &v, std::path::Path::new("/r"));
        let seen: Vec<_> = got
            .iter()
            .map(|v| {
                let claim = v
                    .pvc
                    .as_ref()
                    .map(|p| format!("{}/{}", p.namespace, p.name));
                (v.name.as_str(), v.measure, v.ephemeral, claim)
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("cfg", Measure::Walk, true, None),
                ("db", Measure::StatFs, false, Some("ns/data".into())),
                ("disk", Measure::Walk, true, None),
                ("raw", Measure::DeviceSize, false, Some("ns/dev".into())),
                ("rawcsi", Measure::Reported, false, Some("ns/devcsi".into())),
                (
                    "scratch",
                    Measure::Reported,
                    false,
                    Some("ns/p-scratch".into())
                ),
                ("shm", Measure::Walk, false, None),
                ("token", Measure::Walk, false, None),
            ],
            "hostPath is not measured; a claim's volume names it"
        );
        assert_eq!(got[2].path, dir.join("kubernetes.io~empty-dir/disk"));
        assert_eq!(
            got[3].path,
            dir.join("../volumeDevices/kubernetes.io~local-volume/pv-3"),
            "a local device measured through the pod's link"
        );
        assert_eq!(
            got[4].path,
            std::path::Path::new("/r/plugins/kubernetes.io/csi/volumeDevices/pv-4/dev/u"),
            "a CSI device asked of its driver at the pod's map file"
        );
    }
}
