//! What a pass shows the rest of the agent: the pod's status, handed to the status manager
//! (the one writer of statuses), and what the stats collector samples. Both come from the
//! pass's own view, so publishing costs no runtime listing.

use chrono::Utc;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::{info, warn};

use super::sandbox::{latest_sandbox, split_ips};
use super::Worker;
use crate::pod::status::{self, StatusInput};
use crate::runtime::containers::{ContainerRecord, State};
use crate::runtime::labels::{self, Kind};

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
        self.publish_stats_info(pod, &records, status.start_time.as_ref())
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
    async fn publish_stats_info(
        &mut self,
        pod: &Pod,
        records: &[ContainerRecord],
        start: Option<&Time>,
    ) {
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
        let volumes = stats_volumes(pod, &pod_dir.dir);
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

/// The pod's volumes the collector measures: its emptyDirs, those on the node's disk
/// counted in its ephemeral storage, memory-backed ones (tmpfs: memory, not disk) only
/// reported, as upstream's IsLocalEphemeralVolume tells them apart.
fn stats_volumes(pod: &Pod, pod_dir: &std::path::Path) -> Vec<crate::stats::VolumeInfo> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| Some((v, v.empty_dir.as_ref()?)))
        .map(|(v, e)| crate::stats::VolumeInfo {
            name: v.name.clone(),
            path: pod_dir
                .join("volumes/kubernetes.io~empty-dir")
                .join(&v.name),
            ephemeral: e.medium.as_deref() != Some("Memory"),
        })
        .collect()
}

fn is_terminal(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded") | Some("Failed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_backed_empty_dirs_are_reported_but_not_ephemeral_storage() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "volumes": [
                    {"name": "disk", "emptyDir": {}},
                    {"name": "shm", "emptyDir": {"medium": "Memory"}},
                    {"name": "cfg", "configMap": {"name": "x"}},
                ],
            },
        }))
        .unwrap();
        let v = stats_volumes(&pod, std::path::Path::new("/r/pods/u"));
        let seen: Vec<_> = v.iter().map(|v| (v.name.as_str(), v.ephemeral)).collect();
        assert_eq!(seen, [("disk", true), ("shm", false)]);
        assert_eq!(
            v[0].path,
            std::path::Path::new("/r/pods/u/volumes/kubernetes.io~empty-dir/disk")
        );
    }
}
