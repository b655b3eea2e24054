//! One pass of the level-triggered loop: list the pod's containers once, record exits,
//! collect old records, make sure the sandbox and volumes exist, then walk the init
//! containers in order and the app containers under the restart policy.

use std::collections::HashMap;
use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::core::v1::{Container, Pod, PodStatus};
use tracing::{error, info};

use super::sandbox::latest_sandbox;
use super::{policy, resync_interval, Worker, RETRY};
use crate::pod::status::{self, attempts, StatusInput, Waiting};
use crate::runtime::containers::{ContainerRecord, State};
use crate::runtime::labels::{Kind, PodRef};
use crate::runtime::RuntimeError;
use crate::volume::{self, Allocatable, DownwardContext};

fn should_restart(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Always" => true,
        "OnFailure" => exit_code != 0,
        _ => false,
    }
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
    fn records(&self) -> &[ContainerRecord] {
        self.view.as_deref().unwrap_or(&[])
    }

    /// One pass of the level-triggered loop. Returns when to look again.
    pub(super) async fn sync(&mut self, pod: &Pod) -> Result<Duration, RuntimeError> {
        let rt = self.shared.rt.clone();
        let relist = std::time::Instant::now();
        self.view = None;
        self.view = Some(rt.pod_containers(&self.pod_ref.uid).await?);
        crate::metrics::pleg_relist(relist.elapsed());
        self.finalize_view().await?;
        self.collect_garbage().await;

        // A pod that reached Succeeded or Failed stays there; its sandbox is stopped.
        let st = self.preview_status(pod);
        if matches!(st.phase.as_deref(), Some("Succeeded") | Some("Failed")) {
            let running = latest_sandbox(self.records())
                .filter(|s| s.is_running())
                .map(|s| s.id.clone());
            if let Some(id) = running {
                info!(pod = %self.pod_ref.display(), "pod is terminal; stopping its sandbox");
                rt.kill(&id, libc::SIGKILL as u32).await?;
                if let Some(code) = rt.wait_exit(&id, Duration::from_secs(10)).await? {
                    self.saw_exit(&id, code);
                }
            }
            return Ok(self.shared.cfg.sync_frequency);
        }

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
                cpu_millis: Some(self.shared.cpu_capacity_millis),
                memory_bytes: Some(self.shared.memory_capacity),
                ephemeral_storage_bytes: None,
            },
        };
        match volume::setup_pod_volumes(pod, &self.pod_dir().dir, &downward).await {
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
        let mut next = resync_interval(self.shared.cfg.sync_frequency);
        let spec = pod.spec.clone().unwrap_or_default();

        let never = policy(pod) == "Never";
        for c in spec.init_containers.iter().flatten() {
            let tries = attempts(self.records(), &c.name, Kind::Init);
            let step = step_for(&tries, |code| code != 0 && !never);
            match step {
                Step::Running => return Ok(next),
                Step::Done => {
                    let succeeded = tries[0].exit().is_some_and(|e| e.exit_code == 0);
                    self.waiting.remove(&c.name);
                    if succeeded {
                        continue;
                    }
                    // Failed for good (restartPolicy Never): the pod fails, nothing follows.
                    return Ok(next);
                }
                _ => {}
            }
            // Init containers run one at a time: whatever happened, this pass ends here.
            if let Some(wait) = self.take_step(pod, c, Kind::Init, step, &sandbox).await? {
                return Ok(wait.min(next));
            }
            return Ok(next);
        }

        for c in &spec.containers {
            let tries = attempts(self.records(), &c.name, Kind::App);
            let step = step_for(&tries, |code| should_restart(policy(pod), code));
            if matches!(step, Step::Done) {
                self.waiting.remove(&c.name);
            }
            if let Some(wait) = self.take_step(pod, c, Kind::App, step, &sandbox).await? {
                next = next.min(wait);
                continue;
            }
            if self.waiting.contains_key(&c.name) {
                next = next.min(RETRY * 5);
            }
        }
        self.manage_probes(pod, &sandbox).await?;
        Ok(next)
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
                    if let Some(wait) = self.in_backoff(pod, c, finished) {
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
        finished: chrono::DateTime<Utc>,
    ) -> Option<Duration> {
        let key = self.backoff_key(c);
        let wait = self.backoff.in_backoff(&key, finished, Utc::now())?;
        let msg = format!(
            "back-off {}s restarting failed container={} pod={}",
            self.backoff.current(&key).as_secs(),
            c.name,
            PodRef::display(&super::pod_ref(pod))
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
