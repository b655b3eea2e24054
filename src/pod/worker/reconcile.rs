//! One pass of the level-triggered loop: list the pod's containers once, record exits,
//! collect old records, make sure the sandbox and volumes exist, then start the init
//! containers the init plan names (`init`: in order, sidecars kept running) and, once the
//! pod is initialized, the app containers under the restart policy. A pod with sidecars
//! whose app containers all ended for good has its sidecars stopped, and ends.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use tracing::{error, info, warn};

use super::init;
use super::resize;
use super::sandbox::latest_sandbox;
use super::{events, grace_period, policy, resync_interval, Worker, RETRY};
use crate::events::EventType;
use crate::pod::ephemeral;
use crate::pod::sidecar::{self, has_sidecars, is_sidecar};
use crate::pod::status::{self, attempts, PodFailure, StatusInput, Waiting};
use crate::runtime::containers::{ContainerRecord, State};
use crate::runtime::labels::{self, Kind, PodRef};
use crate::runtime::RuntimeError;
use crate::volume::{self, Allocatable, DownwardContext};

/// The pod's activeDeadlineSeconds, if it has one. Bounded as every span from a pod (see
/// `spec_seconds`): chrono panics on a number of seconds past i64::MAX / 1000.
fn active_deadline(pod: &Pod) -> Option<chrono::Duration> {
    let secs = pod.spec.as_ref()?.active_deadline_seconds?;
    Some(chrono::Duration::seconds(
        secs.clamp(0, super::MAX_SPEC_SECONDS),
    ))
}

fn should_restart(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Always" => true,
        "OnFailure" => exit_code != 0,
        _ => false,
    }
}

/// Why a running container is restarted at once, whatever the restart policy.
#[derive(Debug, Clone, Copy)]
enum Restart {
    /// Its definition (image) changed.
    Changed,
    /// Its resizePolicy asks for a restart to take its new resources.
    Resize,
}

/// What the pass decided for one container, from its newest record.
enum Step {
    /// It runs.
    Running,
    /// It ended and is not to be restarted.
    Done,
    /// Start attempt `attempt`; `after` is when the previous one ended (for back-off).
    Start {
        attempt: u32,
        after: Option<chrono::DateTime<Utc>>,
    },
    /// A record that was created but never started: remove it, then start it again.
    Replace { id: String, attempt: u32 },
}

/// The step for a container whose records are `tries` (newest first): start it when it has
/// none, start the next attempt when its last one exited and `restarts` says so for the exit
/// code, replace a record that was created but never started.
fn step_for(tries: &[&ContainerRecord], restarts: impl Fn(i32) -> bool) -> Step {
    let Some(newest) = tries.first() else {
        return Step::Start {
            attempt: 0,
            after: None,
        };
    };
    match &newest.state {
        State::Running { .. } => Step::Running,
        State::Exited { info, .. } if !restarts(info.exit_code) => Step::Done,
        State::Exited { info, .. } => Step::Start {
            attempt: newest.attempt + 1,
            after: Some(info.finished_at.unwrap_or_else(Utc::now)),
        },
        State::Created => Step::Replace {
            id: newest.id.clone(),
            attempt: newest.attempt,
        },
    }
}

impl Worker {
    /// The records of the pass's view (empty before the listing).
    pub(super) fn records(&self) -> &[ContainerRecord] {
        self.view.as_deref().unwrap_or(&[])
    }

    /// One pass of the level-triggered loop. Returns when to look again.
    pub(super) async fn sync(&mut self, pod: &Pod) -> Result<Duration, RuntimeError> {
        let rt = self.shared.rt.clone();
        let relist = std::time::Instant::now();
        self.view = None;
        self.view = Some(rt.pod_containers(&self.pod_ref.uid).await?);
        let since_previous = self.last_relist.map(|at| relist.duration_since(at));
        self.last_relist = Some(relist);
        crate::metrics::pleg_relist(relist.elapsed(), since_previous);
        self.finalize_view().await?;
        self.collect_garbage().await;

        self.check_eviction();
        self.check_active_deadline(pod);
        if self.failure.is_none() && self.main_containers_ended(pod) {
            self.stop_sidecars(pod).await?;
        }

        // A pod that reached Succeeded or Failed stays there: what still runs of it (a pod
        // failed as a whole) is stopped within its grace period, then its sandbox.
        let st = self.preview_status(pod);
        if matches!(st.phase.as_deref(), Some("Succeeded") | Some("Failed")) {
            let records = self.records().to_vec();
            let grace = self.eviction_grace.unwrap_or_else(|| grace_period(pod));
            self.stop_containers(Some(pod), &records, grace).await?;
            if latest_sandbox(self.records()).is_some_and(|s| s.is_running()) {
                info!(pod = %self.pod_ref.display(), "pod is terminal; stopping its sandbox");
                self.stop_sandbox().await?;
            }
            self.release_ended_pod().await;
            self.reclaim_ended_pod().await;
            return Ok(self.shared.cfg.sync_frequency);
        }

        // From here on the pass works on the pod as allocated: a resize the node cannot take
        // yet leaves the containers as they are.
        let allocated = self.allocate(pod).await;
        let pod = &allocated;

        let mut sandbox = match self.ensure_sandbox(pod).await {
            Ok(s) => {
                self.sandbox_error = None;
                s
            }
            Err(e) => {
                let msg = e.to_string();
                if self.sandbox_error.as_deref() != Some(&msg) {
                    error!(pod = %self.pod_ref.display(), error = %msg, "cannot create pod sandbox");
                }
                self.pod_event(
                    pod,
                    EventType::Warning,
                    events::FAILED_CREATE_POD_SANDBOX,
                    format!("Failed to create pod sandbox: {msg}"),
                );
                self.sandbox_error = Some(msg);
                return Ok(RETRY);
            }
        };
        if sandbox.replaced {
            // A new sandbox replaced a dead one and stopped every container on the way:
            // the next pass lists what is left and starts them again in the new sandbox.
            self.view = None;
            return Ok(Duration::ZERO);
        }
        // Volumes before any container; set-up is idempotent, so every sync re-checks them
        // (and refreshes downwardAPI files).
        let downward = DownwardContext {
            node_name: self.shared.cfg.node_name.clone(),
            host_ip: self.shared.host_ip.clone(),
            pod_ips: sandbox.ips.clone(),
            allocatable: Allocatable {
                cpu_millis: Some(self.shared.node_allocatable().0),
                memory_bytes: Some(self.shared.node_allocatable().1),
                ephemeral_storage_bytes: None,
            },
        };
        // The objects the volumes reference are read on every pass too: a changed ConfigMap
        // or Secret, or a renewed token, is rewritten into the volume (subPath mounts keep
        // the version they were started with, as upstream).
        let (objects, pod_dir) = (self.shared.objects.clone(), self.pod_dir().dir);
        match volume::setup_pod_volumes(pod, &pod_dir, &downward, &*objects, &self.shared.csi).await
        {
            Ok(v) => {
                // Refreshes that failed leave the volume as it was and the pod running (as
                // upstream's failed remounts): they show as FailedMount events and are
                // tried again on the next pass.
                for stale in v.stale() {
                    warn!(pod = %self.pod_ref.display(), volume = %stale.volume, error = %stale.error, "volume kept its last content: refreshing it failed");
                    self.pod_event(
                        pod,
                        EventType::Warning,
                        events::FAILED_MOUNT,
                        stale.event_message.clone(),
                    );
                }
                self.stats_volumes =
                    super::publish::stats_volumes(pod, &v, &self.shared.cfg.root_dir);
                sandbox.volumes = Some(v);
            }
            Err(e) => {
                let w = Waiting::new(e.waiting_reason(), e.to_string());
                if self.volume_error.as_ref() != Some(&w) {
                    error!(pod = %self.pod_ref.display(), error = %e, "pod volumes cannot be set up");
                }
                // Upstream's words (`MountVolume.SetUp failed for volume "cfg" : configmap
                // "cfg" not found`); the recorder folds the repeats of each retry.
                self.pod_event(
                    pod,
                    EventType::Warning,
                    events::FAILED_MOUNT,
                    e.event_message(),
                );
                for c in pod.spec.iter().flat_map(|s| {
                    s.init_containers
                        .iter()
                        .flatten()
                        .chain(s.containers.iter())
                }) {
                    self.waiting.insert(c.name.clone(), w.clone());
                }
                self.volume_error = Some(w);
                self.volume_failures = self.volume_failures.saturating_add(1);
                return Ok(volume_retry(self.volume_failures, e.is_transient()));
            }
        }
        self.volume_failures = 0;
        if self.volume_error.take().is_some() {
            self.waiting.clear();
        }
        let mut next = resync_interval(self.shared.cfg.sync_frequency);
        let spec = pod.spec.clone().unwrap_or_default();
        if self.deferred() {
            next = next.min(crate::pod::allocation::DEFERRED_RETRY);
        }
        // The running containers get what was allocated to them before anything starts, in
        // upstream's SyncPod order: those whose resizePolicy restarts them are stopped
        // first, then the pod cgroup and the others are resized in place, then the stopped
        // ones start with their new resources. Stopped after the pod cgroup shrank, a
        // container would still hold a cpu quota above its parent's, which cgroup v1
        // refuses; started before it grew, it would ask for more than its parent has.
        let restarts = self.resize_restarts(pod);
        for (c, kind, r) in &restarts {
            self.stop_for_restart(pod, c, *kind, r, &sandbox, Restart::Resize)
                .await?;
        }
        if !restarts.is_empty() {
            // Their tasks deleted now: an exited container's cgroup, quota and all, stays
            // until then, and still holds the pod cgroup's quota up.
            self.finalize_view().await?;
        }
        match self.actuate_resize(pod).await {
            Ok(()) => self.resize_error = None,
            Err(e) => {
                warn!(pod = %self.pod_ref.display(), error = %e, "in-place resize failed; retrying");
                self.resize_error = Some(e.to_string());
                next = next.min(RETRY * 5);
            }
        }
        for (c, kind, r) in &restarts {
            self.start(pod, c, *kind, r.attempt + 1, &sandbox, None)
                .await;
        }

        // Ephemeral containers start once, before the init containers (as upstream's
        // SyncPod, so a pod stuck in its init containers can be debugged), and are never
        // restarted, whatever the pod's restart policy.
        for (c, _) in ephemeral::containers(pod) {
            let tries = attempts(self.records(), &c.name, Kind::Ephemeral);
            let step = step_for(&tries, |_| false);
            if matches!(step, Step::Done) {
                self.waiting.remove(&c.name);
            }
            self.take_step(pod, &c, Kind::Ephemeral, step, &sandbox)
                .await?;
            next = next.min(self.waiting_retry(&c.name));
        }

        let (initialized, wait) = self.sync_init_containers(pod, &spec, &sandbox).await?;
        next = next.min(wait);
        if !initialized {
            // The main containers wait.
            return self.end_pass(pod, &sandbox, next).await;
        }

        for c in &spec.containers {
            let tries = attempts(self.records(), &c.name, Kind::App);
            let changed = tries
                .first()
                .filter(|r| r.is_running() && labels::spec_changed(&r.labels, c))
                .map(|r| (*r).clone());
            if let Some(r) = changed {
                self.restart_changed(pod, c, Kind::App, &r, &sandbox, Restart::Changed)
                    .await?;
                continue;
            }
            let step = step_for(&tries, |code| should_restart(policy(pod), code));
            if matches!(step, Step::Done) {
                self.waiting.remove(&c.name);
            }
            if let Some(wait) = self.take_step(pod, c, Kind::App, step, &sandbox).await? {
                next = next.min(wait);
                continue;
            }
            next = next.min(self.waiting_retry(&c.name));
        }
        self.end_pass(pod, &sandbox, next).await
    }

    /// What every pass that reached its containers does last: the probes of what runs,
    /// and a look again when the active deadline passes.
    async fn end_pass(
        &mut self,
        pod: &Pod,
        sandbox: &super::Sandbox,
        mut next: Duration,
    ) -> Result<Duration, RuntimeError> {
        self.manage_probes(pod, sandbox).await?;
        if let Some(left) = self.until_active_deadline(pod) {
            // Look again when the deadline passes (a little after, so it has).
            next = next.min(left + Duration::from_millis(50));
        }
        Ok(next)
    }

    /// Starts the init containers the plan names (`init::plan`): the next regular one when
    /// the one before completed, the next one after a sidecar once it has started, and
    /// every sidecar that does not run (restarted under back-off, whatever the restart
    /// policy). A running sidecar whose definition changed is restarted first. Returns
    /// whether the pod is initialized (its main containers may run), and when to look again
    /// for the init containers' sake.
    async fn sync_init_containers(
        &mut self,
        pod: &Pod,
        spec: &PodSpec,
        sandbox: &super::Sandbox,
    ) -> Result<(bool, Duration), RuntimeError> {
        let init_specs = spec.init_containers.as_deref().unwrap_or(&[]);
        for c in init_specs.iter().filter(|c| is_sidecar(c)) {
            let tries = attempts(self.records(), &c.name, Kind::Init);
            let newest = tries.first().filter(|r| r.is_running());
            let changed = newest
                .filter(|r| labels::spec_changed(&r.labels, c))
                .map(|r| (*r).clone());
            if let Some(r) = changed {
                self.restart_changed(pod, c, Kind::Init, &r, sandbox, Restart::Changed)
                    .await?;
            }
        }
        let plan = init::plan(spec, self.records(), |r| self.sidecar_started(spec, r));
        if plan.failed {
            // A regular init container failed for good (restartPolicy Never): the pod
            // fails and nothing more starts. The next pass finds it terminal and stops
            // what still runs (its sidecars, its sandbox), so it comes at once.
            return Ok((false, Duration::ZERO));
        }
        let never = policy(pod) == "Never";
        let mut next = Duration::MAX;
        let mut look_again = false;
        for i in plan.start {
            let c = &init_specs[i];
            let sidecar = is_sidecar(c);
            let tries = attempts(self.records(), &c.name, Kind::Init);
            let step = step_for(&tries, |code| sidecar || (code != 0 && !never));
            let backoff = self.take_step(pod, c, Kind::Init, step, sandbox).await?;
            let failed = backoff.is_some() || self.waiting.contains_key(&c.name);
            next = next.min(backoff.unwrap_or_else(|| self.waiting_retry(&c.name)));
            if failed && !sidecar {
                // As upstream's SyncPod: a regular init container that could not start
                // holds back the rest; a sidecar that could not does not.
                break;
            }
            // A sidecar without a startupProbe has started once it runs: the next init
            // container may follow at once (nothing else would wake the worker for it).
            look_again |= !failed && sidecar && c.startup_probe.is_none();
        }
        if look_again && !plan.initialized {
            next = Duration::ZERO;
        }
        Ok((plan.initialized, next))
    }

    /// A running sidecar has started: it has no startupProbe, or that probe succeeded (its
    /// postStart hook ran within its start). Until its probe worker reports, it has not.
    fn sidecar_started(&self, spec: &PodSpec, r: &ContainerRecord) -> bool {
        let has_startup_probe = spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == r.name && c.startup_probe.is_some());
        !has_startup_probe || self.probes.get(&r.id).is_some_and(|p| p.status().started)
    }

    /// In a pod with sidecars whose restart policy is not Always, every main container
    /// ended and none is to be restarted: the pod is done (upstream's computePodActions
    /// kills it then, sidecars included, and starts no init container again).
    fn main_containers_ended(&self, pod: &Pod) -> bool {
        let Some(spec) = pod.spec.as_ref().filter(|s| has_sidecars(s)) else {
            return false;
        };
        !spec.containers.is_empty()
            && spec.containers.iter().all(|c| {
                let tries = attempts(self.records(), &c.name, Kind::App);
                matches!(
                    step_for(&tries, |code| should_restart(policy(pod), code)),
                    Step::Done
                )
            })
    }

    /// Stops the sidecars of a pod whose main containers ended (`main_containers_ended`),
    /// in reverse order within the pod's grace period; their exits do not decide the
    /// phase, so the pod then ends Succeeded or Failed as its main containers did.
    async fn stop_sidecars(&mut self, pod: &Pod) -> Result<(), RuntimeError> {
        let sidecars: Vec<ContainerRecord> = self
            .records()
            .iter()
            .filter(|r| r.kind == Kind::Init && r.is_running())
            .filter(|r| sidecar::is_sidecar_named(pod, &r.name))
            .cloned()
            .collect();
        // Those waiting for a restart are not restarted any more.
        for c in pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
        {
            if is_sidecar(c) {
                self.waiting.remove(&c.name);
            }
        }
        if sidecars.is_empty() {
            return Ok(());
        }
        info!(pod = %self.pod_ref.display(), sidecars = sidecars.len(), "main containers ended; stopping the sidecars");
        self.stop_containers(Some(pod), &sidecars, grace_period(pod))
            .await
    }

    /// A running container whose spec changed (its image, as the API allows) is killed and
    /// started again at once, whatever the restart policy, as upstream's computePodActions:
    /// the new definition is not a crash, so no back-off applies.
    /// (Sidecars too, with upstream's words for them.)
    async fn restart_changed(
        &mut self,
        pod: &Pod,
        c: &Container,
        kind: Kind,
        r: &ContainerRecord,
        sandbox: &super::Sandbox,
        why: Restart,
    ) -> Result<(), RuntimeError> {
        self.stop_for_restart(pod, c, kind, r, sandbox, why).await?;
        self.start(pod, c, kind, r.attempt + 1, sandbox, None).await;
        Ok(())
    }

    /// The running containers (main ones and sidecars) that take their allocated resources
    /// only through a restart.
    fn resize_restarts(&self, pod: &Pod) -> Vec<(Container, Kind, ContainerRecord)> {
        let Some(spec) = pod.spec.as_ref() else {
            return Vec::new();
        };
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| is_sidecar(c));
        sidecars
            .map(|c| (c, Kind::Init))
            .chain(spec.containers.iter().map(|c| (c, Kind::App)))
            .filter_map(|(c, kind)| {
                let r = attempts(self.records(), &c.name, kind).first().copied()?;
                (resize::needs_restart(c, r) && !labels::spec_changed(&r.labels, c))
                    .then(|| (c.clone(), kind, r.clone()))
            })
            .collect()
    }

    /// Stops a running container that is to start again at once, saying why.
    async fn stop_for_restart(
        &mut self,
        pod: &Pod,
        c: &Container,
        kind: Kind,
        r: &ContainerRecord,
        sandbox: &super::Sandbox,
        why: Restart,
    ) -> Result<(), RuntimeError> {
        info!(pod = %self.pod_ref.display(), container = %c.name, container_id = %r.id, reason = ?why, "restarting container");
        self.probes.remove(&r.id);
        let msg = match (why, kind) {
            // Upstream's words (computePodResizeAction).
            (Restart::Resize, _) => format!("Container {} resize requires restart", c.name),
            (Restart::Changed, Kind::Init) => {
                format!("Init container {} definition changed", c.name)
            }
            (Restart::Changed, _) => {
                format!("Container {} definition changed, will be restarted", c.name)
            }
        };
        let (id, status) = self
            .stop_one(
                Some(pod),
                r,
                grace_period(pod),
                &sandbox.ips,
                Some(msg),
                None,
            )
            .await?;
        self.saw_exit(&id, status);
        Ok(())
    }

    /// When the pod started on this node, as its status says: the oldest of its records
    /// (that survives an agent restart), the worker's own start, and the start the API
    /// already shows.
    pub(super) fn pod_start(&self, pod: &Pod, records: &[ContainerRecord]) -> DateTime<Utc> {
        let api = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0));
        records
            .iter()
            .filter_map(|r| r.created_at)
            .chain(api)
            .fold(self.start_time, DateTime::min)
    }

    /// How long until the pod's activeDeadlineSeconds passes; `None` without a deadline
    /// or once it passed.
    fn until_active_deadline(&self, pod: &Pod) -> Option<Duration> {
        let deadline = active_deadline(pod)?;
        let active = Utc::now() - self.pod_start(pod, self.records());
        (deadline - active).to_std().ok().filter(|d| !d.is_zero())
    }

    /// Fails the pod once it has been active longer than its activeDeadlineSeconds, as
    /// upstream's active deadline handler: phase Failed, reason DeadlineExceeded, and an
    /// event; its containers are then killed and never restarted.
    fn check_active_deadline(&mut self, pod: &Pod) {
        if self.failure.is_some() || active_deadline(pod).is_none() {
            return;
        }
        if self.until_active_deadline(pod).is_some() {
            return;
        }
        let failure = PodFailure {
            reason: events::DEADLINE_EXCEEDED.to_string(),
            message: "Pod was active on the node longer than the specified deadline".to_string(),
            disruption: false,
        };
        info!(pod = %self.pod_ref.display(), reason = %failure.reason, "pod was active longer than its activeDeadlineSeconds; failing it");
        self.pod_event(
            pod,
            EventType::Normal,
            &failure.reason,
            failure.message.clone(),
        );
        // Its containers end for good: their statuses show how, not why they would wait.
        self.waiting.clear();
        self.failure = Some(failure);
    }

    /// Fails the pod when the eviction manager asked for it: phase Failed, reason Evicted
    /// and (under node pressure) a DisruptionTarget condition; its containers are then stopped within the
    /// eviction's grace period and never restarted. (The manager recorded the event.)
    fn check_eviction(&mut self) {
        let Some(eviction) = self.shared.evictions.take(&self.pod_ref.uid) else {
            return;
        };
        if self.failure.is_some() {
            return;
        }
        info!(pod = %self.pod_ref.display(), grace_seconds = eviction.grace_period.as_secs(), "pod evicted; stopping it");
        self.waiting.clear();
        self.eviction_grace = Some(eviction.grace_period);
        self.failure = Some(PodFailure {
            reason: crate::eviction::REASON_EVICTED.to_string(),
            message: eviction.message,
            disruption: eviction.disruption,
        });
    }

    /// When to look again at a container that could not start: soon after a failed pull,
    /// so its status moves on to ImagePullBackOff while the back-off runs (as upstream's
    /// pod workers requeue it), else within 10 s; never, for one that is not waiting.
    fn waiting_retry(&self, container: &str) -> Duration {
        match self.waiting.get(container) {
            Some(w) if w.reason == "ErrImagePull" => RETRY,
            Some(_) => RETRY * 5,
            None => Duration::MAX,
        }
    }

    /// Carries out a step; `Some(wait)` when the container must wait out its back-off.
    async fn take_step(
        &mut self,
        pod: &Pod,
        c: &Container,
        kind: Kind,
        step: Step,
        sandbox: &super::Sandbox,
    ) -> Result<Option<Duration>, RuntimeError> {
        match step {
            Step::Running | Step::Done => {}
            Step::Start { attempt, after } => {
                if let Some(finished) = after {
                    if let Some(wait) = self.in_backoff(pod, c, kind, finished) {
                        return Ok(Some(wait));
                    }
                }
                self.start(pod, c, kind, attempt, sandbox, after).await;
            }
            Step::Replace { id, attempt } => {
                self.shared.rt.remove_container(&id).await?;
                self.forget_record(&id);
                self.start(pod, c, kind, attempt, sandbox, None).await;
            }
        }
        Ok(None)
    }

    pub(super) fn preview_status(&self, pod: &Pod) -> PodStatus {
        status::compute(&StatusInput {
            pod,
            records: self.records(),
            waiting: &self.waiting,
            probes: &HashMap::new(),
            sandbox_ready: true,
            pod_ips: &[],
            host_ip: "",
            start_time: self.pod_start(pod, self.records()),
            now: Utc::now(),
            previous: self.last_status.as_ref(),
            terminal: self.terminating,
            failure: self.failure.as_ref(),
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
        kind: Kind,
        finished: chrono::DateTime<Utc>,
    ) -> Option<Duration> {
        let key = self.backoff_key(c);
        let wait = self.backoff.in_backoff(&key, finished, Utc::now())?;
        let shown = PodRef::display(&super::pod_ref(pod));
        let msg = format!(
            "back-off {}s restarting failed container={} pod={shown}",
            self.backoff.current(&key).as_secs(),
            c.name,
        );
        self.container_event(
            pod,
            kind,
            &c.name,
            EventType::Warning,
            events::BACK_OFF,
            format!(
                "Back-off restarting failed container {} in pod {shown}",
                c.name
            ),
        );
        self.waiting
            .insert(c.name.clone(), Waiting::new("CrashLoopBackOff", msg));
        Some(wait + Duration::from_millis(50))
    }

    /// A container started: its next exit counts against its back-off.
    pub(super) fn started_after(&mut self, c: &Container, previous_finish: chrono::DateTime<Utc>) {
        let key = self.backoff_key(c);
        self.backoff.next(&key, previous_finish, Utc::now());
    }
}

/// When a pod whose volumes failed to set up `failures` times in a row is tried again:
/// upstream's exponential back-off of volume operations (500 ms, doubling), capped at 2 s
/// for a failure that passes by itself (a read the Node authorizer refused a moment after
/// the pod reached the node, a claim not bound yet) and at 10 s for the rest (a missing
/// object, a driver's error, a bad spec). Upstream's cap is 2 min 2 s; the lower caps keep
/// a pod from waiting minutes for a volume whose cause went away.
fn volume_retry(failures: u32, transient: bool) -> Duration {
    let cap = if transient { RETRY } else { RETRY * 5 };
    let exp = failures.saturating_sub(1).min(16);
    (Duration::from_millis(500) * 2u32.pow(exp)).min(cap)
}

#[cfg(test)]
mod tests {
    //! Volume set-up as the pass sees it: a pod whose ConfigMap is missing waits in
    //! ContainerCreating with upstream's FailedMount event, starts once it appears, and runs
    //! on when it is deleted again.

    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use serde_json::json;

    use super::super::tests::test_shared;
    use super::super::{pod_ref, Worker};
    use crate::events::Recorder;
    use crate::objects::fake::FakeObjects;
    use crate::runtime::events::OomSeen;
    use crate::runtime::fake::FakeRuntime;

    const UID: &str = "0c0c0c0c-uid";

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": UID},
            "spec": {
                "hostNetwork": true,
                "containers": [{"name": "app", "image": "busybox",
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}],
                "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]
            }
        }))
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_config_map_holds_the_pod_until_it_appears_and_not_after() {
        let dir = tempfile::tempdir().unwrap();
        let oom_seen = OomSeen::default();
        let fake = FakeRuntime::new(&["pause", "busybox"], oom_seen.clone());
        let (recorder, mut events) = Recorder::capturing();
        let shared = test_shared(dir.path(), fake, oom_seen, |_| {}, recorder);
        let objects = Arc::new(FakeObjects::default());
        let mut shared = Arc::into_inner(shared).expect("the only reference");
        shared.objects = objects.clone();
        let shared = Arc::new(shared);
        let p = pod();
        let mut w = Worker::new(shared.clone(), pod_ref(&p));

        let next = w.pass(&p).await;
        assert_eq!(
            next,
            std::time::Duration::from_millis(500),
            "volume errors are retried, first after half a second"
        );
        let status = shared
            .statuses
            .get(UID)
            .unwrap()
            .pod
            .status
            .clone()
            .unwrap();
        let waiting = status.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .waiting
            .unwrap();
        assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
        let mut failed_mount = Vec::new();
        while let Ok(e) = events.try_recv() {
            if e.reason.as_deref() == Some("FailedMount") {
                failed_mount.push((e.type_.unwrap_or_default(), e.message.unwrap_or_default()));
            }
        }
        assert_eq!(
            failed_mount,
            [(
                "Warning".to_string(),
                "MountVolume.SetUp failed for volume \"cfg\" : configmap \"cfg\" not found"
                    .to_string()
            )]
        );

        // Still missing: the next try comes after twice the delay.
        assert_eq!(w.pass(&p).await, std::time::Duration::from_secs(1));

        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some("default".into());
        cm.metadata.name = Some("cfg".into());
        cm.data = Some([("k".to_string(), "v".to_string())].into());
        objects.put_config_map(cm);
        w.pass(&p).await;
        let status = shared
            .statuses
            .get(UID)
            .unwrap()
            .pod
            .status
            .clone()
            .unwrap();
        let state = status.container_statuses.unwrap()[0].state.clone().unwrap();
        assert!(state.running.is_some(), "{state:?}");
        let file = dir
            .path()
            .join("root/pods")
            .join(UID)
            .join("volumes/kubernetes.io~configmap/cfg/k");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "v");

        // The ConfigMap deleted under the running pod: its volume keeps the last content,
        // the pod runs on, and the failed refresh is a FailedMount event.
        while events.try_recv().is_ok() {}
        objects.remove_config_map("default", "cfg");
        w.pass(&p).await;
        let status = shared
            .statuses
            .get(UID)
            .unwrap()
            .pod
            .status
            .clone()
            .unwrap();
        let state = status.container_statuses.unwrap()[0].state.clone().unwrap();
        assert!(state.running.is_some(), "{state:?}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "v");
        let mut reasons = Vec::new();
        while let Ok(e) = events.try_recv() {
            reasons.push(e.reason.unwrap_or_default());
        }
        assert_eq!(reasons, ["FailedMount"]);
    }

    /// activeDeadlineSeconds and grace periods from a pod are bounded before they meet a
    /// clock: a huge value (the API server lets any int64 grace period through) or a negative
    /// one never panics a worker.
    #[test]
    fn absurd_spans_from_a_pod_do_not_panic() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [], "activeDeadlineSeconds": i64::MAX,
                     "terminationGracePeriodSeconds": i64::MAX}
        }))
        .unwrap();
        let deadline = super::active_deadline(&pod).unwrap();
        let _ = chrono::Utc::now() + deadline;
        let grace = super::super::grace_period(&pod);
        let _ = tokio::time::Instant::now() + grace;
        let _ = std::time::Instant::now() + grace;
        pod.metadata.deletion_grace_period_seconds = Some(i64::MAX);
        let _ = std::time::Instant::now() + super::super::deletion_grace_period(&pod);
        pod.spec.as_mut().unwrap().active_deadline_seconds = Some(i64::MIN);
        assert_eq!(super::active_deadline(&pod), Some(chrono::Duration::zero()));
        pod.spec.as_mut().unwrap().termination_grace_period_seconds = Some(-5);
        assert_eq!(super::super::grace_period(&pod), std::time::Duration::ZERO);
    }

    #[test]
    fn a_failed_volume_set_up_is_retried_after_upstreams_doubling_delays_up_to_a_cap() {
        use super::volume_retry;
        let secs = |n, t| volume_retry(n, t).as_secs_f64();
        let others: Vec<f64> = (1..=7).map(|n| secs(n, false)).collect();
        assert_eq!(others, [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]);
        let transient: Vec<f64> = (1..=4).map(|n| secs(n, true)).collect();
        assert_eq!(transient, [0.5, 1.0, 2.0, 2.0]);
        assert_eq!(
            secs(u32::MAX, false),
            10.0,
            "no overflow however long it fails"
        );
    }
}
