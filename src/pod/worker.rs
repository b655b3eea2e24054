//! One worker per pod: a level-triggered loop that compares the pod's spec with what
//! containerd holds and acts until they match, then publishes the pod's status. Every
//! action is idempotent, so a crash at any point is repaired by the next sync; a slow or
//! failing pod only delays itself.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use tokio::sync::{watch, Notify};
use tracing::{debug, error, info, warn};

use super::backoff::Backoff;
use super::files::{remove_log_links, remove_pod_cgroups, PodDir, SandboxState};
use super::qos::{oom_score_adj, pod_cgroup_parent, qos_class};
use super::status::{self, attempts, StatusInput, Waiting};
use super::StatusStore;
use crate::config::{format_duration, Config};
use crate::logs;
use crate::network::cni::{AttachRequest, Cni, PortMapping};
use crate::network::netns;
use crate::prober::{self, ContainerProbes, ProbeOptions, ProbeTarget};
use crate::runtime::containers::{
    format_time, new_container_id, ContainerRecord, NewContainer, State,
};
use crate::runtime::events::OomSeen;
use crate::runtime::images::ImageInfo;
use crate::runtime::labels::{self, Kind, PodRef};
use crate::runtime::spec::{self, PodContext};
use crate::runtime::{Containerd, RuntimeError};
use crate::volume::{self, Allocatable, DownwardContext, PodVolumes};

/// How often a settled pod is re-checked even with no event (the events are the fast path);
/// a shorter syncFrequency shortens it (see `resync_interval`).
const RESYNC: Duration = Duration::from_secs(10);
/// How long a postStart hook may take before it counts as failed.
const POST_START_TIMEOUT: Duration = Duration::from_secs(120);
/// Retry delay after a failed sync step (runtime error, network not ready).
const RETRY: Duration = Duration::from_secs(2);

/// What every worker shares.
pub struct Shared {
    pub rt: Containerd,
    pub cni: Cni,
    pub cfg: Arc<Config>,
    pub statuses: StatusStore,
    /// The agent's own executable: containerd's shim runs it as each container's logger.
    pub exe: PathBuf,
    pub host_ip: String,
    pub memory_capacity: i64,
    pub cpu_capacity_millis: i64,
    pub puller: crate::runtime::pull::Puller,
    /// What the stats collector samples, by pod UID; workers keep their pod's entry current.
    pub stats_pods: StatsPods,
    /// When the agent started (probes of containers found running start without a burst).
    pub started: std::time::Instant,
    /// See `PodContext::oom_score_adj_min`.
    pub oom_score_adj_min: i64,
    /// Containers containerd reported an OOM for, until their exit is recorded.
    pub oom_seen: OomSeen,
    /// Stamped by the manager's loop; read by /healthz/syncloop.
    pub sync_loop: Arc<super::sync_health::SyncLoopHealth>,
}

pub type StatsPods =
    Arc<std::sync::RwLock<std::collections::BTreeMap<String, crate::stats::PodInfo>>>;

/// A running sandbox, as app containers need it.
struct Sandbox {
    id: String,
    pid: u32,
    ips: Vec<String>,
    volumes: Option<PodVolumes>,
}

pub struct Worker {
    shared: Arc<Shared>,
    pod_ref: PodRef,
    backoff: Backoff,
    waiting: HashMap<String, Waiting>,
    start_time: DateTime<Utc>,
    last_status: Option<PodStatus>,
    sandbox_error: Option<String>,
    volume_error: Option<Waiting>,
    /// Probe workers of running containers, by container id.
    probes: HashMap<String, ContainerProbes>,
    /// Wakes this worker; probes notify it when a result changes.
    wake: Arc<Notify>,
    /// The last failed pull of each container's image: when, and the registry's answer.
    image_failures: HashMap<String, (DateTime<Utc>, String)>,
    /// Whether the pod start latency was recorded (only for pods this worker started).
    start_recorded: bool,
    started_any: bool,
    /// Each container's writable layer (overlay upper dir), looked up once per container.
    upper_dirs: HashMap<String, Option<PathBuf>>,
}

fn policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

fn grace_period(pod: &Pod) -> Duration {
    let secs = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
        .max(0);
    Duration::from_secs(secs as u64)
}

pub fn pod_ref(pod: &Pod) -> PodRef {
    PodRef {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        namespace: pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
    }
}

fn should_restart(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Always" => true,
        "OnFailure" => exit_code != 0,
        _ => false,
    }
}

impl Worker {
    pub fn new(shared: Arc<Shared>, pod_ref: PodRef) -> Self {
        Worker {
            shared,
            pod_ref,
            backoff: Backoff::default(),
            waiting: HashMap::new(),
            start_time: Utc::now(),
            last_status: None,
            sandbox_error: None,
            volume_error: None,
            probes: HashMap::new(),
            wake: Arc::new(Notify::new()),
            upper_dirs: HashMap::new(),
            start_recorded: false,
            started_any: false,
            image_failures: HashMap::new(),
        }
    }

    /// The worker loop: sync while the pod is desired, terminate and clean up once it is not.
    pub async fn run(mut self, mut desired: watch::Receiver<Option<Arc<Pod>>>, wake: Arc<Notify>) {
        let uid = self.pod_ref.uid.clone();
        self.wake = wake.clone();
        loop {
            let current = desired.borrow_and_update().clone();
            let Some(pod) = current else { break };
            let next = match self.sync(&pod).await {
                Ok(next) => next,
                Err(e) => {
                    warn!(pod = %self.pod_ref.display(), error = %e, "pod sync failed");
                    RETRY
                }
            };
            self.publish(&pod).await;
            tokio::select! {
                _ = wake.notified() => {}
                r = desired.changed() => if r.is_err() { break },
                _ = tokio::time::sleep(next) => {}
            }
        }
        // Removed: stop everything, retrying until clean-up is complete. Probes stop first so
        // a dying container is not probed.
        self.probes.clear();
        let pod = desired.borrow().clone();
        let grace = pod
            .as_deref()
            .map(grace_period)
            .or_else(|| {
                PodDir::new(&self.shared.cfg.root_dir, &uid)
                    .load_pod()
                    .as_ref()
                    .map(grace_period)
            })
            .unwrap_or(Duration::from_secs(30));
        let mut delay = RETRY;
        loop {
            match self.terminate(grace).await {
                Ok(()) => break,
                Err(e) => {
                    warn!(pod = %self.pod_ref.display(), error = %e, "pod clean-up failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
            }
        }
        self.shared.statuses.write().await.remove(&uid);
        if let Ok(mut m) = self.shared.stats_pods.write() {
            m.remove(&uid);
        }
        info!(pod = %self.pod_ref.display(), "pod removed");
    }

    async fn publish(&mut self, pod: &Pod) {
        let mut records = match self.shared.rt.pod_containers(&self.pod_ref.uid).await {
            Ok(r) => r,
            Err(e) => {
                warn!(pod = %self.pod_ref.display(), error = %e, "cannot read pod state");
                return;
            }
        };
        // A task that exited since the sync looked is recorded first: its reason (OOMKilled
        // above all) is only known once the exit is finalized, and a status showing the
        // raw exit would tell readers the wrong reason until the next sync.
        if let Err(e) = self.finalize_exits(&mut records).await {
            warn!(pod = %self.pod_ref.display(), error = %e, "cannot record a container exit");
        }
        let sandbox = latest_sandbox(&records);
        let ips: Vec<String> = sandbox
            .and_then(|s| s.labels.get(labels::POD_IPS))
            .map(|s| {
                s.split(',')
                    .filter(|x| !x.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let probe_results = self.probe_results(&records);
        let status = status::compute(&StatusInput {
            pod,
            records: &records,
            waiting: &self.waiting,
            probes: &probe_results,
            sandbox_ready: sandbox.is_some_and(|s| s.is_running()),
            pod_ips: &ips,
            host_ip: &self.shared.host_ip,
            // The oldest record dates the pod's start across agent restarts.
            start_time: records
                .iter()
                .filter_map(|r| r.created_at)
                .min()
                .map_or(self.start_time, |t| t.min(self.start_time)),
            now: Utc::now(),
            previous: self.last_status.as_ref(),
        });
        self.publish_stats_info(pod, &records, status.start_time.as_ref())
            .await;
        let mut out = pod.clone();
        out.status = Some(status.clone());
        let all_started = status
            .container_statuses
            .iter()
            .flatten()
            .all(|c| c.started == Some(true));
        if self.started_any && !self.start_recorded && all_started {
            self.start_recorded = true;
            let took = (Utc::now() - self.start_time).to_std().unwrap_or_default();
            crate::metrics::pod_started(took);
        }
        if self.last_status.as_ref().map(|s| &s.phase) != Some(&status.phase) {
            info!(pod = %self.pod_ref.display(), phase = ?status.phase, "pod phase");
        }
        self.last_status = Some(status);
        self.shared
            .statuses
            .write()
            .await
            .insert(self.pod_ref.uid.clone(), out);
    }

    /// Tells the stats collector what of this pod runs now (it never asks containerd).
    async fn publish_stats_info(
        &mut self,
        pod: &Pod,
        records: &[ContainerRecord],
        start: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
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
        let cfg = &self.shared.cfg;
        let log_dir = logs::pod_log_dir(
            &cfg.pod_logs_dir,
            &self.pod_ref.namespace,
            &self.pod_ref.name,
            &self.pod_ref.uid,
        );
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
        let pod_dir = PodDir::new(&cfg.root_dir, &self.pod_ref.uid);
        let volumes = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter(|v| v.empty_dir.is_some())
            .map(|v| crate::stats::VolumeInfo {
                name: v.name.clone(),
                path: pod_dir
                    .dir
                    .join("volumes/kubernetes.io~empty-dir")
                    .join(&v.name),
                ephemeral: true,
            })
            .collect();
        let info = crate::stats::PodInfo {
            uid: self.pod_ref.uid.clone(),
            name: self.pod_ref.name.clone(),
            namespace: self.pod_ref.namespace.clone(),
            pause_pid,
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
        };
        if let Ok(mut m) = self.shared.stats_pods.write() {
            m.insert(self.pod_ref.uid.clone(), info);
        }
    }

    /// One pass of the level-triggered loop. Returns when to look again.
    async fn sync(&mut self, pod: &Pod) -> Result<Duration, RuntimeError> {
        let rt = self.shared.rt.clone();
        let relist = std::time::Instant::now();
        let mut records = rt.pod_containers(&self.pod_ref.uid).await?;
        crate::metrics::pleg_relist(relist.elapsed());
        self.finalize_exits(&mut records).await?;
        self.collect_garbage(&records).await;

        // A pod that reached Succeeded or Failed stays there; its sandbox is stopped.
        let st = self.preview_status(pod, &records);
        if matches!(st.phase.as_deref(), Some("Succeeded") | Some("Failed")) {
            if let Some(sb) = latest_sandbox(&records).filter(|s| s.is_running()) {
                info!(pod = %self.pod_ref.display(), "pod is terminal; stopping its sandbox");
                rt.kill(&sb.id, libc::SIGKILL as u32).await?;
                rt.wait_exit(&sb.id, Duration::from_secs(10)).await?;
            }
            return Ok(self.shared.cfg.sync_frequency);
        }

        let mut sandbox = match self.ensure_sandbox(pod, &records).await {
            Ok(s) => {
                self.sandbox_error = None;
                s
            }
            Err(e) => {
                let msg = e.to_string();
                if self.sandbox_error.as_deref() != Some(&msg) {
                    error!(pod = %self.pod_ref.display(), error = %msg, "cannot create pod sandbox");
                }
                self.sandbox_error = Some(msg);
                return Ok(RETRY);
            }
        };
        // Volumes before any container; set-up is idempotent, so every sync re-checks them
        // (and refreshes downwardAPI files).
        let pod_dir = PodDir::new(&self.shared.cfg.root_dir, &self.pod_ref.uid);
        let downward = DownwardContext {
            node_name: self.shared.cfg.node_name.clone(),
            host_ip: self.shared.host_ip.clone(),
            pod_ips: sandbox.ips.clone(),
            allocatable: Allocatable {
                cpu_millis: Some(self.shared.cpu_capacity_millis),
                memory_bytes: Some(self.shared.memory_capacity),
                ephemeral_storage_bytes: None,
            },
        };
        match volume::setup_pod_volumes(pod, &pod_dir.dir, &downward).await {
            Ok(v) => sandbox.volumes = Some(v),
            Err(e) => {
                let w = Waiting::new(e.waiting_reason(), e.to_string());
                if self.volume_error.as_ref() != Some(&w) {
                    error!(pod = %self.pod_ref.display(), error = %e, "pod volumes cannot be set up");
                }
                for c in pod.spec.iter().flat_map(|s| {
                    s.init_containers
                        .iter()
                        .flatten()
                        .chain(s.containers.iter())
                }) {
                    self.waiting.insert(c.name.clone(), w.clone());
                }
                self.volume_error = Some(w);
                return Ok(RETRY * 5);
            }
        }
        if self.volume_error.take().is_some() {
            self.waiting.clear();
        }
        // Creating a sandbox may have stopped old containers: look again.
        let records = rt.pod_containers(&self.pod_ref.uid).await?;
        let mut next = resync_interval(self.shared.cfg.sync_frequency);
        let spec = pod.spec.clone().unwrap_or_default();

        for c in spec.init_containers.iter().flatten() {
            let tries = attempts(&records, &c.name, Kind::Init);
            match tries.first().map(|r| &r.state) {
                Some(State::Exited { info, .. }) if info.exit_code == 0 => {
                    self.waiting.remove(&c.name);
                    continue;
                }
                Some(State::Running { .. }) => return Ok(next),
                Some(State::Exited { info, .. }) => {
                    if policy(pod) == "Never" {
                        self.waiting.remove(&c.name);
                        return Ok(next);
                    }
                    let finished = info.finished_at.unwrap_or_else(Utc::now);
                    let attempt = tries[0].attempt + 1;
                    if let Some(wait) = self.in_backoff(pod, c, finished) {
                        return Ok(wait.min(next));
                    }
                    self.start(pod, c, Kind::Init, attempt, &sandbox, Some(finished))
                        .await;
                    return Ok(next);
                }
                Some(State::Created) => {
                    let (id, attempt) = (tries[0].id.clone(), tries[0].attempt);
                    rt.remove_container(&id).await?;
                    self.start(pod, c, Kind::Init, attempt, &sandbox, None)
                        .await;
                    return Ok(next);
                }
                None => {
                    self.start(pod, c, Kind::Init, 0, &sandbox, None).await;
                    return Ok(next);
                }
            }
        }

        for c in &spec.containers {
            let tries = attempts(&records, &c.name, Kind::App);
            match tries.first().map(|r| &r.state) {
                Some(State::Running { .. }) => {}
                Some(State::Exited { info, .. }) => {
                    if !should_restart(policy(pod), info.exit_code) {
                        self.waiting.remove(&c.name);
                        continue;
                    }
                    let finished = info.finished_at.unwrap_or_else(Utc::now);
                    let attempt = tries[0].attempt + 1;
                    if let Some(wait) = self.in_backoff(pod, c, finished) {
                        next = next.min(wait);
                        continue;
                    }
                    self.start(pod, c, Kind::App, attempt, &sandbox, Some(finished))
                        .await;
                }
                Some(State::Created) => {
                    let (id, attempt) = (tries[0].id.clone(), tries[0].attempt);
                    rt.remove_container(&id).await?;
                    self.start(pod, c, Kind::App, attempt, &sandbox, None).await;
                }
                None => {
                    self.start(pod, c, Kind::App, 0, &sandbox, None).await;
                }
            }
            if self.waiting.contains_key(&c.name) {
                next = next.min(RETRY * 5);
            }
        }
        self.manage_probes(pod, &sandbox).await?;
        Ok(next)
    }

    /// Starts probe workers for running containers that have probes, drops those of
    /// containers that are gone, and kills a container whose liveness (or startup) probe
    /// failed; the restart policy then applies as for any exit.
    async fn manage_probes(&mut self, pod: &Pod, sandbox: &Sandbox) -> Result<(), RuntimeError> {
        let records = self.shared.rt.pod_containers(&self.pod_ref.uid).await?;
        let running: HashMap<&str, &ContainerRecord> = records
            .iter()
            .filter(|r| r.kind == Kind::App && r.is_running())
            .map(|r| (r.id.as_str(), r))
            .collect();
        self.probes
            .retain(|id, _| running.contains_key(id.as_str()));
        let specs = pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or(&[]);
        for c in specs {
            if c.liveness_probe.is_none()
                && c.readiness_probe.is_none()
                && c.startup_probe.is_none()
            {
                continue;
            }
            let Some(r) = running.values().find(|r| r.name == c.name) else {
                continue;
            };
            if !self.probes.contains_key(&r.id) {
                let running_for = match &r.state {
                    State::Running {
                        started_at: Some(t),
                        ..
                    } => (Utc::now() - *t).to_std().unwrap_or_default(),
                    _ => Duration::ZERO,
                };
                let probes = ContainerProbes::start_with(
                    self.probe_target(c, &r.id, &sandbox.ips),
                    c,
                    Arc::new(self.shared.rt.clone()),
                    self.wake.clone(),
                    ProbeOptions {
                        agent_uptime: Some(self.shared.started.elapsed()),
                        running_for,
                    },
                );
                self.probes.insert(r.id.clone(), probes);
            }
            let failure = self
                .probes
                .get(&r.id)
                .and_then(|p| p.status().liveness_failure);
            if let Some(f) = failure {
                let grace = f
                    .grace_period_override
                    .map(|g| Duration::from_secs(g.max(1) as u64))
                    .unwrap_or_else(|| grace_period(pod));
                let msg = format!("{}; container {} will be restarted", f.message, c.name);
                warn!(pod = %self.pod_ref.display(), container = %c.name, reason = "Unhealthy", message = %f.message, "probe failed; killing container");
                self.shared
                    .rt
                    .set_labels(&r.id, HashMap::from([(labels::MESSAGE.to_string(), msg)]))
                    .await?;
                self.probes.remove(&r.id);
                let id = r.id.clone();
                let rec = (*r).clone();
                self.stop_one(Some(pod), &rec, grace).await?;
                debug!(container_id = %id, "container stopped after a failed probe");
            }
        }
        Ok(())
    }

    fn probe_target(&self, c: &Container, id: &str, ips: &[String]) -> ProbeTarget {
        ProbeTarget {
            pod: format!("{}/{}", self.pod_ref.namespace, self.pod_ref.name),
            container: c.name.clone(),
            container_id: id.to_string(),
            pod_uid: self.pod_ref.uid.clone(),
            pod_ip: ips.first().and_then(|i| i.parse().ok()),
            ports: c.ports.clone().unwrap_or_default(),
        }
    }

    /// started/ready per container name, from the probe workers of the running containers.
    fn probe_results(&self, records: &[ContainerRecord]) -> HashMap<String, status::Probed> {
        records
            .iter()
            .filter_map(|r| {
                let st = self.probes.get(&r.id)?.status();
                Some((
                    r.name.clone(),
                    status::Probed {
                        started: st.started,
                        ready: st.ready,
                    },
                ))
            })
            .collect()
    }

    fn preview_status(&self, pod: &Pod, records: &[ContainerRecord]) -> PodStatus {
        status::compute(&StatusInput {
            pod,
            records,
            waiting: &self.waiting,
            probes: &HashMap::new(),
            sandbox_ready: true,
            pod_ips: &[],
            host_ip: "",
            start_time: self.start_time,
            now: Utc::now(),
            previous: None,
        })
    }

    fn backoff_key(&self, c: &Container) -> String {
        format!("{}/{}", self.pod_ref.uid, c.name)
    }

    /// Some(remaining) while the container's restart must wait; sets CrashLoopBackOff.
    fn in_backoff(
        &mut self,
        pod: &Pod,
        c: &Container,
        finished: DateTime<Utc>,
    ) -> Option<Duration> {
        let key = self.backoff_key(c);
        let wait = self.backoff.in_backoff(&key, finished, Utc::now())?;
        let msg = format!(
            "back-off {}s restarting failed container={} pod={}",
            self.backoff.current(&key).as_secs(),
            c.name,
            PodRef::display(&pod_ref(pod))
        );
        self.waiting
            .insert(c.name.clone(), Waiting::new("CrashLoopBackOff", msg));
        Some(wait + Duration::from_millis(50))
    }

    /// Writes how each exited task ended into its record's labels, then deletes the task.
    async fn finalize_exits(
        &mut self,
        records: &mut [ContainerRecord],
    ) -> Result<(), RuntimeError> {
        for r in records.iter_mut() {
            let State::Exited { info, finalized } = &mut r.state else {
                continue;
            };
            if *finalized {
                continue;
            }
            let oom_event = self.shared.oom_seen.contains(&r.id);
            if r.kind != Kind::Sandbox {
                let parent = r
                    .labels
                    .get(labels::CGROUP_PARENT)
                    .cloned()
                    .unwrap_or_default();
                if oom_event || oom_killed(&format!("{parent}/{}", r.id)) {
                    info.reason = "OOMKilled".into();
                }
                if info.finished_at.is_none() {
                    info.finished_at = Some(Utc::now());
                }
                let mut set = HashMap::from([
                    (labels::EXIT_CODE.to_string(), info.exit_code.to_string()),
                    (labels::REASON.to_string(), info.reason.clone()),
                    (
                        labels::FINISHED_AT.to_string(),
                        format_time(info.finished_at.unwrap_or_else(Utc::now)),
                    ),
                ]);
                if let Some(s) = info.started_at {
                    set.insert(labels::STARTED_AT.to_string(), format_time(s));
                }
                self.shared.rt.set_labels(&r.id, set).await?;
                info!(pod = %self.pod_ref.display(), container = %r.name, exit_code = info.exit_code,
                      reason = %info.reason, "container exited");
            }
            self.shared.rt.delete_task(&r.id).await?;
            self.shared.oom_seen.forget(&r.id);
            *finalized = true;
        }
        Ok(())
    }

    /// Container GC within the pod, as upstream's with maxPerPodContainer 1: of each
    /// container's dead records only the newest stays (the one its lastState shows); older
    /// ones go with their snapshots and log files. Running records are never touched, and
    /// only the newest sandbox is kept.
    async fn collect_garbage(&self, records: &[ContainerRecord]) {
        for old in dead_beyond_the_newest(records) {
            if let Err(e) = self.shared.rt.remove_container(&old.id).await {
                warn!(pod = %self.pod_ref.display(), container = %old.name, error = %e, "cannot remove old container");
                continue;
            }
            debug!(pod = %self.pod_ref.display(), container = %old.name, attempt = old.attempt,
                   container_id = %old.id, "removed a dead container");
            if let Some(p) = old.labels.get(labels::LOG_PATH) {
                logs::remove_log_files(std::path::Path::new(p));
            }
            let _ = std::fs::remove_file(logs::container_log_symlink(
                &self.shared.cfg.container_logs_dir,
                &self.pod_ref.name,
                &self.pod_ref.namespace,
                &old.name,
                &old.id,
            ));
        }
    }

    async fn ensure_sandbox(
        &mut self,
        pod: &Pod,
        records: &[ContainerRecord],
    ) -> Result<Sandbox, SandboxError> {
        let rt = &self.shared.rt;
        let latest = latest_sandbox(records);
        if let Some(sb) = latest {
            if let State::Running { pid, .. } = sb.state {
                return Ok(Sandbox {
                    id: sb.id.clone(),
                    pid,
                    ips: split_ips(sb.labels.get(labels::POD_IPS)),
                    volumes: None,
                });
            }
        }
        let attempt = latest.map(|s| s.attempt + 1).unwrap_or(0);
        if let Some(old) = latest {
            warn!(pod = %self.pod_ref.display(), "pod sandbox is not running; recreating it and its containers");
            self.stop_containers(records, Duration::from_secs(2))
                .await?;
            self.teardown_network(Some(old)).await?;
            rt.remove_container(&old.id).await?;
        }

        let cfg = &self.shared.cfg;
        let dir = PodDir::new(&cfg.root_dir, &self.pod_ref.uid);
        dir.create()
            .map_err(|e| SandboxError::Files(dir.dir.display().to_string(), e))?;
        dir.save_pod(pod)
            .map_err(|e| SandboxError::Files(dir.dir.display().to_string(), e))?;
        let pause = match rt.resolve_image(&cfg.pod_infra_container_image).await {
            Err(e) if e.is_not_found() => {
                self.shared
                    .puller
                    .pull(&cfg.pod_infra_container_image, &[])
                    .await
                    .map_err(|e| SandboxError::Image(e.to_string()))?
                    .image
            }
            other => other?,
        };
        let id = new_container_id();
        let hostnet = host_network(pod);
        let mut netns_path = None;
        let mut ips: Vec<String> = Vec::new();
        if !hostnet {
            // Record the name before pinning so a crash here cannot leak the namespace.
            let name = netns::new_netns_name();
            let path = PathBuf::from("/var/run/netns").join(&name);
            dir.save_state(&SandboxState {
                netns: Some(path.display().to_string()),
            })
            .map_err(|e| SandboxError::Files(dir.dir.display().to_string(), e))?;
            let pinned = netns::pin(std::path::Path::new("/var/run/netns"), &name).await?;
            let req = self.attach_request(pod, &id, &pinned);
            match self.shared.cni.add(&req).await {
                Ok(r) => ips = r.ips.iter().map(|i| i.to_string()).collect(),
                Err(e) => {
                    let _ = self.shared.cni.del(&req).await;
                    let _ = netns::remove(&pinned).await;
                    return Err(e.into());
                }
            }
            netns_path = Some(pinned.display().to_string());
        } else {
            ips.push(self.shared.host_ip.clone());
        }
        let hostname = if hostnet {
            nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_else(|_| cfg.node_name.clone())
        } else {
            pod_hostname(pod)
        };
        // Everything after the network is attached undoes it on failure, so a failed
        // attempt never leaks a namespace or an address (the next attempt pins a new one).
        let started: Result<u32, SandboxError> = async {
            dir.write_etc(pod, &hostname, ips.first().map(String::as_str))
                .map_err(|e| SandboxError::Files(dir.dir.display().to_string(), e))?;
            let ctx = self.pod_context(pod, &id, netns_path.clone(), 0, &ips, &hostname);
            let mut spec = spec::sandbox_spec(&ctx, &pause.config)?;
            spec::set_cgroup_leaf(&mut spec, &ctx.cgroup_parent, &id);
            let mut extra = HashMap::from([
                (labels::POD_IPS.to_string(), ips.join(",")),
                (labels::HOST_NETWORK.to_string(), hostnet.to_string()),
                (labels::CGROUP_PARENT.to_string(), ctx.cgroup_parent.clone()),
            ]);
            if let Some(n) = &netns_path {
                extra.insert(labels::NETNS.to_string(), n.clone());
            }
            rt.create_container(NewContainer {
                id: &id,
                pod: &self.pod_ref,
                kind: Kind::Sandbox,
                name: labels::SANDBOX_NAME,
                attempt,
                image: &pause,
                image_spec: &cfg.pod_infra_container_image,
                spec: &spec,
                extra_labels: extra,
            })
            .await?;
            Ok(rt.start_task(&id, "").await?)
        }
        .await;
        let pid = match started {
            Ok(pid) => pid,
            Err(e) => {
                let _ = rt.remove_container(&id).await;
                if let Some(n) = &netns_path {
                    let req = self.attach_request(pod, &id, std::path::Path::new(n));
                    let _ = self.shared.cni.del(&req).await;
                    let _ = netns::remove(std::path::Path::new(n)).await;
                }
                return Err(e);
            }
        };
        info!(pod = %self.pod_ref.display(), sandbox = %id, ips = ?ips, "pod sandbox started");
        Ok(Sandbox {
            id,
            pid,
            ips,
            volumes: None,
        })
    }

    fn attach_request(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        netns: &std::path::Path,
    ) -> AttachRequest {
        AttachRequest {
            sandbox_id: sandbox_id.to_string(),
            netns: netns.to_path_buf(),
            pod_name: self.pod_ref.name.clone(),
            pod_namespace: self.pod_ref.namespace.clone(),
            pod_uid: self.pod_ref.uid.clone(),
            port_mappings: port_mappings(pod),
        }
    }

    fn pod_context(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        netns_path: Option<String>,
        sandbox_pid: u32,
        ips: &[String],
        hostname: &str,
    ) -> PodContext {
        let spec = pod.spec.as_ref();
        let qos = qos_class(pod);
        let dir = PodDir::new(&self.shared.cfg.root_dir, &self.pod_ref.uid);
        PodContext {
            sandbox_id: sandbox_id.to_string(),
            pod_name: self.pod_ref.name.clone(),
            pod_namespace: self.pod_ref.namespace.clone(),
            pod_uid: self.pod_ref.uid.clone(),
            cgroup_parent: pod_cgroup_parent(&self.pod_ref.uid, qos),
            host_network: host_network(pod),
            host_pid: spec.and_then(|s| s.host_pid).unwrap_or(false),
            host_ipc: spec.and_then(|s| s.host_ipc).unwrap_or(false),
            share_process_namespace: spec
                .and_then(|s| s.share_process_namespace)
                .unwrap_or(false),
            netns_path,
            sandbox_pid,
            hostname: hostname.to_string(),
            hosts_file: dir.hosts().display().to_string(),
            hostname_file: dir.hostname().display().to_string(),
            resolv_file: dir.resolv().display().to_string(),
            oom_score_adj: 0,
            oom_score_adj_min: self.shared.oom_score_adj_min,
            pod_ips: ips.to_vec(),
            host_ip: self.shared.host_ip.clone(),
            node_name: self.shared.cfg.node_name.clone(),
            allocatable_cpu_millis: self.shared.cpu_capacity_millis,
            allocatable_memory: self.shared.memory_capacity,
        }
    }

    /// Creates and starts one container; failures become the container's waiting reason.
    async fn start(
        &mut self,
        pod: &Pod,
        c: &Container,
        kind: Kind,
        attempt: u32,
        sandbox: &Sandbox,
        previous_finish: Option<DateTime<Utc>>,
    ) {
        match self.try_start(pod, c, kind, attempt, sandbox).await {
            Ok(id) => {
                self.started_any = true;
                self.waiting.remove(&c.name);
                if let Some(f) = previous_finish {
                    let key = self.backoff_key(c);
                    self.backoff.next(&key, f, Utc::now());
                }
                info!(pod = %self.pod_ref.display(), container = %c.name, container_id = %id, attempt, "container started");
            }
            Err(w) => {
                if self.waiting.get(&c.name) != Some(&w) {
                    warn!(pod = %self.pod_ref.display(), container = %c.name, reason = %w.reason, message = %w.message, "container not started");
                }
                self.waiting.insert(c.name.clone(), w);
            }
        }
    }

    /// The image for a container under its pull policy, as upstream: Never uses only what
    /// containerd has, IfNotPresent pulls when it is missing, Always checks the registry
    /// (a pull of an image that is already complete costs only the manifest check). A
    /// failed pull is ErrImagePull, then ImagePullBackOff until its back-off ends.
    async fn resolve_image(&mut self, c: &Container) -> Result<ImageInfo, Waiting> {
        let image = c.image.clone().unwrap_or_default();
        let pull_policy = c.image_pull_policy.as_deref().unwrap_or("IfNotPresent");
        if pull_policy != "Always" {
            match self.shared.rt.resolve_image(&image).await {
                Ok(i) => {
                    info!(pod = %self.pod_ref.display(), container = %c.name, image = %image,
                          "Container image \"{image}\" already present on machine");
                    return Ok(i);
                }
                Err(RuntimeError::ImageNotFound(_)) if pull_policy == "Never" => {
                    return Err(Waiting::new(
                        "ErrImageNeverPull",
                        format!(
                            "Container image \"{image}\" is not present with pull policy of Never"
                        ),
                    ))
                }
                Err(RuntimeError::ImageNotFound(_)) => {}
                Err(e) => return Err(Waiting::new("ErrImagePull", e.to_string())),
            }
        }
        let key = format!("{}/image/{}", self.pod_ref.uid, c.name);
        let now = Utc::now();
        if let Some(last) = self.image_failures.get(&key) {
            if let Some(wait) = self.backoff.in_backoff(&key, last.0, now) {
                return Err(Waiting::new(
                    "ImagePullBackOff",
                    format!(
                        "Back-off pulling image \"{image}\": {} (next try in {}s)",
                        last.1,
                        wait.as_secs()
                    ),
                ));
            }
        }
        info!(pod = %self.pod_ref.display(), container = %c.name, image = %image, "pulling image");
        let asked = std::time::Instant::now();
        match self.shared.puller.pull(&image, &[]).await {
            Ok(out) => {
                self.image_failures.remove(&key);
                if out.pulled {
                    // Upstream's wording (an event and a log line there; no status field).
                    let waited = asked.elapsed().max(out.duration);
                    info!(pod = %self.pod_ref.display(), container = %c.name, image = %image,
                          size_bytes = out.size, fetched_bytes = out.bytes,
                          seconds = out.duration.as_secs_f64(),
                          "Successfully pulled image \"{image}\" in {} ({} including waiting). Image size: {} bytes.",
                          format_duration(out.duration), format_duration(waited), out.size);
                } else {
                    debug!(pod = %self.pod_ref.display(), container = %c.name, image = %image,
                           "image up to date with the registry");
                }
                Ok(out.image)
            }
            Err(e) => {
                let msg = e.to_string();
                self.backoff.next(&key, now, now);
                self.image_failures.insert(key, (now, msg.clone()));
                Err(Waiting::new("ErrImagePull", msg))
            }
        }
    }

    async fn try_start(
        &mut self,
        pod: &Pod,
        c: &Container,
        kind: Kind,
        attempt: u32,
        sandbox: &Sandbox,
    ) -> Result<String, Waiting> {
        let rt = self.shared.rt.clone();
        let image = self.resolve_image(c).await?;
        let mut ctx = self.pod_context(pod, &sandbox.id, None, sandbox.pid, &sandbox.ips, "");
        let qos = qos_class(pod);
        let mem_request = c
            .resources
            .as_ref()
            .and_then(|r| {
                r.requests
                    .as_ref()
                    .and_then(|m| m.get("memory"))
                    .or(r.limits.as_ref().and_then(|m| m.get("memory")))
            })
            .and_then(|q| crate::quantity::bytes(&q.0));
        ctx.oom_score_adj = oom_score_adj(qos, mem_request, self.shared.memory_capacity);
        let config_error = |e: String| Waiting::new("CreateContainerConfigError", e);
        let env = spec::container_env(pod, c, &image.config, &ctx)
            .map_err(|e| config_error(e.to_string()))?;
        let mounts = match &sandbox.volumes {
            Some(v) => volume::container_mounts(c, v, &env)
                .map_err(|e| Waiting::new(e.waiting_reason(), e.to_string()))?,
            None => Vec::new(),
        };
        let accounts = rt
            .image_accounts(&image)
            .await
            .map_err(|e| Waiting::new("CreateContainerError", e.to_string()))?;
        let mut oci = spec::container_spec(pod, c, &image.config, &ctx, &env, &mounts, &accounts)
            .map_err(|e| match &e {
            // containerd resolves the user in upstream's split, so a user the image
            // lacks fails its CreateContainer; the kubelet's own checks come before.
            RuntimeError::Spec { field, .. } if field == "image.user" => {
                Waiting::new("CreateContainerError", e.to_string())
            }
            _ => config_error(e.to_string()),
        })?;
        let id = new_container_id();
        spec::set_cgroup_leaf(&mut oci, &ctx.cgroup_parent, &id);

        let cfg = &self.shared.cfg;
        let log_dir = logs::pod_log_dir(
            &cfg.pod_logs_dir,
            &self.pod_ref.namespace,
            &self.pod_ref.name,
            &self.pod_ref.uid,
        );
        let log_path = logs::container_log_path(&log_dir, &c.name, attempt);
        if let Some(parent) = log_path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                Waiting::new(
                    "CreateContainerError",
                    format!("cannot create log directory {}: {e}", parent.display()),
                )
            })?;
        }
        let extra = HashMap::from([
            (labels::LOG_PATH.to_string(), log_path.display().to_string()),
            (labels::CGROUP_PARENT.to_string(), ctx.cgroup_parent.clone()),
        ]);
        rt.create_container(NewContainer {
            id: &id,
            pod: &self.pod_ref,
            kind,
            name: &c.name,
            attempt,
            image: &image,
            image_spec: c.image.as_deref().unwrap_or_default(),
            spec: &oci,
            extra_labels: extra,
        })
        .await
        .map_err(|e| Waiting::new("CreateContainerError", e.to_string()))?;

        let uri = logs::logger_uri(
            &self.shared.exe,
            &log_path,
            cfg.container_log_max_size,
            cfg.container_log_max_files,
        );
        let started = Utc::now();
        if let Err(e) = rt.start_task(&id, &uri).await {
            // As upstream with containerd: the container is dead with StartError / 128, and
            // the pod shows RunContainerError until the next try.
            let msg = e.to_string();
            let _ = rt.delete_task(&id).await;
            let set = HashMap::from([
                (labels::EXIT_CODE.to_string(), "128".to_string()),
                (labels::REASON.to_string(), "StartError".to_string()),
                (labels::MESSAGE.to_string(), msg.clone()),
                (labels::STARTED_AT.to_string(), format_time(started)),
                (labels::FINISHED_AT.to_string(), format_time(Utc::now())),
            ]);
            if let Err(e2) = rt.set_labels(&id, set).await {
                debug!(error = %e2, "cannot record start failure");
            }
            return Err(Waiting::new("RunContainerError", msg));
        }
        let _ = rt
            .set_labels(
                &id,
                HashMap::from([(labels::STARTED_AT.to_string(), format_time(started))]),
            )
            .await;
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let target = self.probe_target(c, &id, &sandbox.ips);
            if let Err(msg) = prober::run_handler(hook, &target, &rt, POST_START_TIMEOUT).await {
                // As upstream: the container is killed and the pod shows PostStartHookError.
                warn!(pod = %self.pod_ref.display(), container = %c.name, reason = "FailedPostStartHook", message = %msg, "postStart hook failed; killing container");
                let text = format!("FailedPostStartHook: {msg}");
                let _ = rt
                    .set_labels(
                        &id,
                        HashMap::from([(labels::MESSAGE.to_string(), text.clone())]),
                    )
                    .await;
                let _ = rt.kill(&id, libc::SIGKILL as u32).await;
                let _ = rt.wait_exit(&id, Duration::from_secs(10)).await;
                return Err(Waiting::new("PostStartHookError", text));
            }
        }
        let link = logs::container_log_symlink(
            &cfg.container_logs_dir,
            &self.pod_ref.name,
            &self.pod_ref.namespace,
            &c.name,
            &id,
        );
        if let Some(parent) = link.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::remove_file(&link);
        let _ = std::os::unix::fs::symlink(&log_path, &link);
        Ok(id)
    }

    /// Stops every running non-sandbox container: the stop signal, `grace`, then SIGKILL.
    /// Stops every running non-sandbox container in parallel, each as `stop_one` does.
    async fn stop_containers(
        &self,
        records: &[ContainerRecord],
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        let pod = PodDir::new(&self.shared.cfg.root_dir, &self.pod_ref.uid).load_pod();
        let running = records
            .iter()
            .filter(|r| r.kind != Kind::Sandbox && r.is_running());
        let stops = running.map(|r| self.stop_one(pod.as_ref(), r, grace));
        futures::future::join_all(stops)
            .await
            .into_iter()
            .collect::<Result<Vec<()>, _>>()?;
        Ok(())
    }

    /// Stops one container as upstream: its preStop hook within the grace period, then the
    /// stop signal, then SIGKILL when what is left of the grace period (at least 2 s) ends.
    async fn stop_one(
        &self,
        pod: Option<&Pod>,
        r: &ContainerRecord,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        let rt = &self.shared.rt;
        let spec = pod.and_then(|p| p.spec.as_ref()).and_then(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
                .find(|c| c.name == r.name)
        });
        let started = std::time::Instant::now();
        if let Some(hook) = spec
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.as_ref())
        {
            let ips = self.sandbox_ips().await;
            let target = self.probe_target(spec.expect("hook implies spec"), &r.id, &ips);
            info!(pod = %self.pod_ref.display(), container = %r.name, "running preStop hook");
            match prober::run_handler(hook, &target, rt, grace).await {
                Ok(()) => {}
                Err(msg) => {
                    warn!(pod = %self.pod_ref.display(), container = %r.name, reason = "FailedPreStopHook", message = %msg, "preStop hook failed")
                }
            }
        }
        let remaining = grace
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(2));
        info!(pod = %self.pod_ref.display(), container = %r.name, grace_seconds = remaining.as_secs(), "stopping container");
        rt.kill(&r.id, libc::SIGTERM as u32).await?;
        if !matches!(rt.wait_exit(&r.id, remaining).await, Ok(Some(_))) {
            info!(pod = %self.pod_ref.display(), container = %r.name, "grace period over; killing");
            rt.kill(&r.id, libc::SIGKILL as u32).await?;
            rt.wait_exit(&r.id, Duration::from_secs(10)).await?;
        }
        Ok(())
    }

    async fn sandbox_ips(&self) -> Vec<String> {
        let records = self
            .shared
            .rt
            .pod_containers(&self.pod_ref.uid)
            .await
            .unwrap_or_default();
        split_ips(latest_sandbox(&records).and_then(|s| s.labels.get(labels::POD_IPS)))
    }

    async fn teardown_network(
        &self,
        sandbox: Option<&ContainerRecord>,
    ) -> Result<(), SandboxError> {
        let dir = PodDir::new(&self.shared.cfg.root_dir, &self.pod_ref.uid);
        let netns = sandbox
            .and_then(|s| s.labels.get(labels::NETNS).cloned())
            .or_else(|| dir.load_state().netns);
        let Some(netns) = netns else { return Ok(()) };
        let pod = dir.load_pod();
        let req = AttachRequest {
            sandbox_id: sandbox.map(|s| s.id.clone()).unwrap_or_default(),
            netns: PathBuf::from(&netns),
            pod_name: self.pod_ref.name.clone(),
            pod_namespace: self.pod_ref.namespace.clone(),
            pod_uid: self.pod_ref.uid.clone(),
            port_mappings: pod.as_ref().map(port_mappings).unwrap_or_default(),
        };
        if sandbox.is_some() {
            self.shared.cni.del(&req).await?;
        }
        netns::remove(std::path::Path::new(&netns)).await?;
        Ok(())
    }

    /// Stops and removes everything of the pod, in order, each step idempotent.
    pub async fn terminate(&mut self, grace: Duration) -> Result<(), SandboxError> {
        let rt = self.shared.rt.clone();
        let records = rt.pod_containers(&self.pod_ref.uid).await?;
        self.stop_containers(&records, grace).await?;
        for r in records.iter().filter(|r| r.kind != Kind::Sandbox) {
            rt.remove_container(&r.id).await?;
        }
        let sandboxes: Vec<&ContainerRecord> =
            records.iter().filter(|r| r.kind == Kind::Sandbox).collect();
        for sb in &sandboxes {
            rt.kill(&sb.id, libc::SIGKILL as u32).await?;
            self.teardown_network(Some(sb)).await?;
            rt.remove_container(&sb.id).await?;
        }
        if sandboxes.is_empty() {
            self.teardown_network(None).await?;
        }
        let cfg = &self.shared.cfg;
        let log_dir = logs::pod_log_dir(
            &cfg.pod_logs_dir,
            &self.pod_ref.namespace,
            &self.pod_ref.name,
            &self.pod_ref.uid,
        );
        let _ = std::fs::remove_dir_all(&log_dir);
        remove_log_links(
            &cfg.container_logs_dir,
            &self.pod_ref.name,
            &self.pod_ref.namespace,
        );
        for qos in [
            super::qos::QosClass::Guaranteed,
            super::qos::QosClass::Burstable,
            super::qos::QosClass::BestEffort,
        ] {
            remove_pod_cgroups(&pod_cgroup_parent(&self.pod_ref.uid, qos));
        }
        let pod_dir = PodDir::new(&cfg.root_dir, &self.pod_ref.uid);
        // Volumes first: removing the pod dir must never walk into a mounted tmpfs.
        volume::teardown_pod_volumes(&pod_dir.dir).await?;
        pod_dir
            .remove()
            .map_err(|e| SandboxError::Files(self.pod_ref.uid.clone(), e))?;
        self.backoff.forget_prefix(&self.pod_ref.uid);
        Ok(())
    }
}

/// Errors while building or tearing down a pod's sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("network: {0}")]
    Network(#[from] crate::network::NetworkError),
    #[error("pod sandbox image: {0}")]
    Image(String),
    #[error("volumes: {0}")]
    Volume(#[from] crate::volume::VolumeError),
    #[error("pod directory {0}: {1}")]
    Files(String, std::io::Error),
}

fn latest_sandbox(records: &[ContainerRecord]) -> Option<&ContainerRecord> {
    records
        .iter()
        .filter(|r| r.kind == Kind::Sandbox)
        .max_by_key(|r| r.attempt)
}

fn split_ips(s: Option<&String>) -> Vec<String> {
    s.map(|s| {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    })
    .unwrap_or_default()
}

fn pod_hostname(pod: &Pod) -> String {
    let h = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    // A hostname is at most 63 characters; upstream truncates and trims a trailing '-'/'.'.
    let mut h: String = h.chars().take(63).collect();
    while h.ends_with('-') || h.ends_with('.') {
        h.pop();
    }
    h
}

fn port_mappings(pod: &Pod) -> Vec<PortMapping> {
    let mut out = Vec::new();
    for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        for p in c.ports.iter().flatten() {
            let Some(hp) = p.host_port.filter(|h| *h > 0) else {
                continue;
            };
            out.push(PortMapping {
                host_port: hp as u16,
                container_port: p.container_port as u16,
                protocol: p
                    .protocol
                    .clone()
                    .unwrap_or_else(|| "TCP".into())
                    .to_ascii_lowercase(),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    out
}

/// The records container GC removes: per (kind, name), every exited record but the newest
/// exited one (sandboxes: every exited record but the newest sandbox). Records that are
/// running or only created are never chosen.
fn dead_beyond_the_newest(records: &[ContainerRecord]) -> Vec<&ContainerRecord> {
    let mut by_name: HashMap<(Kind, &str), Vec<&ContainerRecord>> = HashMap::new();
    for r in records {
        by_name
            .entry((r.kind, r.name.as_str()))
            .or_default()
            .push(r);
    }
    let mut out = Vec::new();
    for ((kind, _), mut list) in by_name {
        list.sort_by_key(|r| std::cmp::Reverse(r.attempt));
        let exited = |r: &&ContainerRecord| matches!(r.state, State::Exited { .. });
        if kind == Kind::Sandbox {
            out.extend(list.into_iter().skip(1).filter(exited));
        } else {
            out.extend(list.into_iter().filter(exited).skip(1));
        }
    }
    out
}

/// The period of a settled pod's re-check: the relist safety net, never longer than the
/// configured syncFrequency (upstream's bound on how long a pod may go unsynced).
fn resync_interval(sync_frequency: Duration) -> Duration {
    RESYNC.min(sync_frequency).max(Duration::from_secs(1))
}

#[cfg(test)]
mod container_gc_tests {
    use super::*;
    use crate::runtime::containers::ExitInfo;

    fn rec(kind: Kind, name: &str, attempt: u32, state: State) -> ContainerRecord {
        ContainerRecord {
            id: format!("{name}-{attempt}"),
            pod: PodRef {
                uid: "u".into(),
                namespace: "ns".into(),
                name: "p".into(),
            },
            kind,
            name: name.into(),
            attempt,
            image: String::new(),
            image_ref: String::new(),
            created_at: None,
            labels: HashMap::new(),
            state,
        }
    }

    fn dead() -> State {
        State::Exited {
            info: ExitInfo {
                exit_code: 1,
                started_at: None,
                finished_at: None,
                reason: "Error".into(),
                message: String::new(),
            },
            finalized: true,
        }
    }

    fn running() -> State {
        State::Running {
            pid: 1,
            started_at: None,
        }
    }

    fn ids(v: Vec<&ContainerRecord>) -> Vec<String> {
        let mut out: Vec<String> = v.into_iter().map(|r| r.id.clone()).collect();
        out.sort();
        out
    }

    #[test]
    fn one_dead_record_per_container_stays() {
        let records = vec![
            rec(Kind::Sandbox, "POD", 1, running()),
            rec(Kind::Sandbox, "POD", 0, dead()),
            rec(Kind::App, "crash", 3, dead()),
            rec(Kind::App, "crash", 2, dead()),
            rec(Kind::App, "crash", 1, dead()),
            rec(Kind::App, "web", 2, running()),
            rec(Kind::App, "web", 1, dead()),
            rec(Kind::App, "web", 0, dead()),
            rec(Kind::Init, "setup", 0, dead()),
            rec(Kind::App, "new", 1, State::Created),
            rec(Kind::App, "new", 0, dead()),
        ];
        assert_eq!(
            ids(dead_beyond_the_newest(&records)),
            ["POD-0", "crash-1", "crash-2", "web-0"]
        );
    }
}

#[cfg(test)]
mod resync_tests {
    use super::*;

    #[test]
    fn sync_frequency_bounds_the_resync() {
        assert_eq!(resync_interval(Duration::from_secs(60)), RESYNC);
        assert_eq!(
            resync_interval(Duration::from_secs(3)),
            Duration::from_secs(3)
        );
        assert_eq!(resync_interval(Duration::ZERO), Duration::from_secs(1));
    }
}

/// Whether the kernel's OOM killer acted in this cgroup (v1 memory.oom_control, v2 memory.events).
fn oom_killed(cgroup_path: &str) -> bool {
    let rel = cgroup_path.trim_start_matches('/');
    let candidates = [
        format!("/sys/fs/cgroup/memory/{rel}/memory.oom_control"),
        format!("/sys/fs/cgroup/{rel}/memory.events"),
    ];
    candidates.iter().any(|f| {
        std::fs::read_to_string(f).ok().is_some_and(|s| {
            s.lines().any(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .is_some_and(|n| n > 0)
            })
        })
    })
}

#[cfg(test)]
mod port_mapping_tests {
    use super::*;

    #[test]
    fn port_mappings_keep_host_ip_lowercase_protocols_and_skip_ports_without_host_port() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "a", "ports": [
                    {"containerPort": 53, "hostPort": 5353, "protocol": "UDP", "hostIP": "127.0.0.1"},
                    {"containerPort": 8080},
                    {"containerPort": 9090, "hostPort": 0},
                ]},
                {"name": "b", "ports": [{"containerPort": 80, "hostPort": 8000}]},
            ]}
        }))
        .unwrap();
        let got: Vec<(u16, u16, String, String)> = port_mappings(&pod)
            .into_iter()
            .map(|m| (m.host_port, m.container_port, m.protocol, m.host_ip))
            .collect();
        assert_eq!(
            got,
            vec![
                (5353, 53, "udp".to_string(), "127.0.0.1".to_string()),
                // An unset protocol is TCP, and an unset hostIP means every host address.
                (8000, 80, "tcp".to_string(), String::new()),
            ]
        );
    }
}
