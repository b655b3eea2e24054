//! Stopping containers as upstream (preStop hook within the grace period, the stop signal,
//! SIGKILL when the grace period ends) and terminating a pod: its containers, sandbox,
//! network, logs, cgroups, volumes and directory, each step idempotent.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tracing::{info, warn};

use super::events;
use super::sandbox::{latest_sandbox, split_ips, SandboxError};
use super::termination_order::TerminationOrder;
use super::{blocking, Worker};
use crate::cgroups::remove::remove_on_host;
use crate::events::EventType;
use crate::pod::files::remove_log_links;
use crate::prober;
use crate::runtime::containers::ContainerRecord;
use crate::runtime::labels::{self, Kind};
use crate::runtime::RuntimeError;
use crate::volume;

impl Worker {
    /// Stops every running non-sandbox container in parallel, each as `stop_one` does; in a
    /// pod with sidecars, the sidecars are sent their stop signal only after the main
    /// containers ended, in reverse order (`TerminationOrder`), within the same grace
    /// period. `pod` gives the containers' hooks and the order; without it, the pod as the
    /// sandbox saved it.
    pub(super) async fn stop_containers(
        &mut self,
        pod: Option<&Pod>,
        records: &[ContainerRecord],
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        let saved = match pod {
            Some(_) => None,
            None => {
                let dir = self.pod_dir();
                blocking(move || dir.load_pod()).await
            }
        };
        let pod = pod.or(saved.as_ref());
        let ips = split_ips(latest_sandbox(records).and_then(|s| s.labels.get(labels::POD_IPS)));
        let running: Vec<&ContainerRecord> = records
            .iter()
            .filter(|r| r.kind != Kind::Sandbox && r.is_running())
            .collect();
        let order = pod.and_then(|p| p.spec.as_ref()).and_then(|s| {
            let names = running
                .iter()
                .filter(|r| matches!(r.kind, Kind::App | Kind::Init))
                .map(|r| r.name.as_str());
            TerminationOrder::new(s, names)
        });
        let stops = running
            .iter()
            .map(|r| self.stop_one(pod, r, grace, &ips, None, order.as_ref()));
        let ended = futures::future::join_all(stops).await;
        for (id, status) in ended.into_iter().collect::<Result<Vec<_>, _>>()? {
            self.saw_exit(&id, status);
        }
        Ok(())
    }

    /// Stops the pod for good, as upstream's pod termination before its clean-up: its
    /// containers within `grace`, then its sandbox. How each ended is recorded in the view,
    /// which the final status is published from.
    pub(super) async fn stop_pod(
        &mut self,
        pod: &Pod,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        let rt = self.shared.rt.clone();
        self.view = None;
        self.view = Some(rt.pod_containers(&self.pod_ref.uid).await?);
        self.finalize_view().await?;
        let records = self.view.clone().unwrap_or_default();
        self.stop_containers(Some(pod), &records, grace).await?;
        self.stop_sandbox().await?;
        self.finalize_view().await
    }

    /// Kills the pod's running sandbox, once nothing of the pod is to run in it any more.
    pub(super) async fn stop_sandbox(&mut self) -> Result<(), RuntimeError> {
        let running = latest_sandbox(self.view.as_deref().unwrap_or(&[]))
            .filter(|s| s.is_running())
            .map(|s| s.id.clone());
        let Some(id) = running else { return Ok(()) };
        let rt = self.shared.rt.clone();
        rt.kill(&id, libc::SIGKILL as u32).await?;
        if let Some(code) = rt.wait_exit(&id, Duration::from_secs(10)).await? {
            self.saw_exit(&id, code);
        }
        Ok(())
    }

    /// Stops one container as upstream's killContainer: the Killing event (`message`, or
    /// "Stopping container <name>"), its preStop hook within the grace period, then (with
    /// an `order`) its turn, then the stop signal, then SIGKILL when what is left of the
    /// grace period (at least 2 s) ends. Returns the container's id and exit status.
    pub(super) async fn stop_one(
        &self,
        pod: Option<&Pod>,
        r: &ContainerRecord,
        grace: Duration,
        pod_ips: &[String],
        message: Option<String>,
        order: Option<&TerminationOrder>,
    ) -> Result<(String, u32), RuntimeError> {
        let rt = &self.shared.rt;
        let spec = pod.and_then(|p| p.spec.as_ref()).and_then(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == r.name)
        });
        // Ephemeral containers have no hooks, but their stop is told as any other's.
        let in_spec = spec.is_some() || r.kind == Kind::Ephemeral;
        if let (Some(pod), true) = (pod, in_spec) {
            let msg = message.unwrap_or_else(|| format!("Stopping container {}", r.name));
            self.container_event(
                pod,
                r.kind,
                &r.name,
                EventType::Normal,
                events::KILLING,
                msg,
            );
        }
        let started = tokio::time::Instant::now();
        if let Some((c, hook)) = spec.and_then(|c| {
            c.lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.as_ref())
                .map(|h| (c, h))
        }) {
            let target = self.probe_target(c, &r.id, pod_ips);
            info!(pod = %self.pod_ref.display(), container = %r.name, "running preStop hook");
            if let Err(msg) = prober::run_handler(hook, &target, rt.as_ref(), grace).await {
                warn!(pod = %self.pod_ref.display(), container = %r.name, reason = events::FAILED_PRE_STOP_HOOK, message = %msg, "preStop hook failed");
                if let Some(pod) = pod {
                    // As upstream, the hook's output stays out of the event (it may hold
                    // secrets); the log line above has it.
                    self.container_event(
                        pod,
                        r.kind,
                        &r.name,
                        EventType::Warning,
                        events::FAILED_PRE_STOP_HOOK,
                        "PreStopHook failed".into(),
                    );
                }
            }
        }
        if let Some(order) = order {
            // A sidecar waits for the containers it outlives, within the grace period.
            order
                .wait_turn(&r.name, grace.saturating_sub(started.elapsed()))
                .await;
        }
        let remaining = grace
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(2));
        info!(pod = %self.pod_ref.display(), container = %r.name, grace_seconds = remaining.as_secs(), "stopping container");
        rt.kill(&r.id, r.stop_signal()).await?;
        let status = match rt.wait_exit(&r.id, remaining).await {
            Ok(Some(status)) => status,
            _ => {
                info!(pod = %self.pod_ref.display(), container = %r.name, "grace period over; killing");
                rt.kill(&r.id, libc::SIGKILL as u32).await?;
                rt.wait_exit(&r.id, Duration::from_secs(10))
                    .await?
                    .unwrap_or(128 + libc::SIGKILL as u32)
            }
        };
        if let Some(order) = order {
            order.ended(&r.name);
        }
        Ok((r.id.clone(), status))
    }

    /// An ended pod (Succeeded, or Failed: evicted, past its deadline) keeps its
    /// containers' records for its statuses and logs until it is deleted, but not what only
    /// a running pod needs, as upstream's SyncTerminatedPod: its volumes are torn down (an
    /// emptyDir's data goes, a tmpfs's memory is freed) and its cgroup removed. Once per
    /// worker; a failure is retried on the next pass.
    pub(super) async fn release_ended_pod(&mut self) {
        if self.released {
            return;
        }
        let pod_dir = self.pod_dir();
        if let Err(e) = volume::teardown_pod_volumes(&pod_dir.dir, &self.shared.csi).await {
            warn!(pod = %self.pod_ref.display(), error = %e, "cannot tear down the ended pod's volumes; retrying");
            return;
        }
        let (cm, cfg, uid) = (
            self.shared.cm.clone(),
            self.shared.cfg.clone(),
            self.pod_ref.uid.clone(),
        );
        blocking(move || remove_pod_cgroup(cm.as_deref(), &cfg, &uid)).await;
        info!(pod = %self.pod_ref.display(), "pod ended: its volumes and cgroup released");
        self.released = true;
    }

    /// When the eviction manager asked (node-level reclaim under disk pressure), an ended
    /// pod gives up now what it would keep until deleted: its dead containers with their
    /// writable layers and logs, its sandbox and directory. Its status stays as last
    /// published (`frozen`), as upstream keeps a terminal pod's.
    pub(super) async fn reclaim_ended_pod(&mut self) {
        let uid = self.pod_ref.uid.clone();
        if !self.shared.evictions.reclaim_requested(&uid) {
            return;
        }
        // Nothing of it runs any more: no grace period applies.
        match self.terminate(Duration::from_secs(1), &|| false).await {
            Ok(_) => {
                self.frozen = true;
                info!(pod = %self.pod_ref.display(), "ended pod's containers removed to reclaim disk space");
            }
            Err(e) => {
                warn!(pod = %self.pod_ref.display(), error = %e, "cannot remove the ended pod's containers")
            }
        }
        self.shared.evictions.reclaim_done(&uid);
    }

    /// Stops and removes everything of the pod, in order, each step idempotent. When
    /// `keep` holds once everything is stopped, nothing is removed: the pod's next worker
    /// starts it again from its dead containers (see `finish_removed`).
    pub async fn terminate(
        &mut self,
        grace: Duration,
        keep: &(dyn Fn() -> bool + Sync),
    ) -> Result<Cleanup, SandboxError> {
        let rt = self.shared.rt.clone();
        let records = rt.pod_containers(&self.pod_ref.uid).await?;
        self.stop_containers(None, &records, grace).await?;
        let sandboxes: Vec<&ContainerRecord> =
            records.iter().filter(|r| r.kind == Kind::Sandbox).collect();
        // Tasks first, records after, network last, as containerd's CRI plugin stops a
        // sandbox before its CNI DEL (and the upstream kubelet removes records only at its
        // next container GC). What comes later queues across pods: the plugins serialise
        // DELs on their locks (host-local's store, iptables') and containerd serialises
        // record and snapshot deletes on its metadata store, so a task delete put behind
        // them waited for every other pod's (~80 ms a pod). The pinned netns outlives the
        // pause process; the sandbox record stays until the network is down, as it names
        // the netns, so a crash in between still leads to a CNI DEL.
        for sb in &sandboxes {
            rt.kill(&sb.id, libc::SIGKILL as u32).await?;
            if rt
                .wait_exit(&sb.id, Duration::from_secs(10))
                .await?
                .is_some()
            {
                rt.delete_task(&sb.id).await?;
            }
        }
        if keep() {
            return Ok(Cleanup::Kept);
        }
        for r in records.iter().filter(|r| r.kind != Kind::Sandbox) {
            rt.remove_container(&r.id).await?;
        }
        for sb in &sandboxes {
            self.teardown_network(Some(sb)).await?;
            rt.remove_container(&sb.id).await?;
        }
        if sandboxes.is_empty() {
            self.teardown_network(None).await?;
        }
        let cfg = self.shared.cfg.clone();
        let log_dir = self.log_dir();
        let (name, namespace, uid) = (
            self.pod_ref.name.clone(),
            self.pod_ref.namespace.clone(),
            self.pod_ref.uid.clone(),
        );
        let cm = self.shared.cm.clone();
        let containers: Vec<(String, String)> = records
            .iter()
            .filter(|r| r.kind != Kind::Sandbox)
            .map(|r| (r.name.clone(), r.id.clone()))
            .collect();
        blocking(move || {
            let _ = std::fs::remove_dir_all(&log_dir);
            remove_log_links(
                &cfg.container_logs_dir,
                &name,
                &namespace,
                &containers,
                &log_dir,
            );
            remove_pod_cgroup(cm.as_deref(), &cfg, &uid);
        })
        .await;
        let pod_dir = self.pod_dir();
        // Volumes first: removing the pod dir must never walk into a mounted tmpfs.
        volume::teardown_pod_volumes(&pod_dir.dir, &self.shared.csi).await?;
        let dir = pod_dir.dir.clone();
        blocking(move || pod_dir.remove())
            .await
            .map_err(|source| SandboxError::Files { dir, source })?;
        self.backoff.forget_prefix(&self.pod_ref.uid);
        Ok(Cleanup::Removed)
    }
}

/// What `terminate` left of a stopped pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleanup {
    /// Everything of it is gone.
    Removed,
    /// Its records, files, cgroup and network stay: its next worker replaces the dead
    /// sandbox and restarts its containers.
    Kept,
}

/// Removes the pod's cgroup wherever it is (its class may have changed with its spec);
/// one still busy is left in place, with a warning. Blocking.
fn remove_pod_cgroup(
    cm: Option<&crate::cm::ContainerManager>,
    cfg: &crate::config::Config,
    uid: &str,
) {
    match cm {
        Some(cm) => {
            let left = cm.remove_pod(uid);
            if !left.is_empty() {
                let left: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
                warn!(pod_uid = %uid, left = %left.join(" "), "pod cgroups still busy; left in place");
            }
        }
        None => {
            for cgroup in crate::cm::Layout::from_config(cfg).pod_cgroups(uid) {
                remove_on_host(&cgroup);
            }
        }
    }
}
