//! The probes of one running container: a task per probe, thresholds, and the container's
//! started / ready / liveness state that the pod worker reads.
//!
//! Semantics follow upstream's prober workers: readiness starts false and becomes true on
//! the first success; liveness starts healthy; until a startup probe succeeds, liveness and
//! readiness do not run. A liveness or startup probe that reaches its failure threshold is
//! reported once and stops (the container is about to be killed; its replacement gets new
//! probes). A startup probe stops after its success.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, EnvVar, Probe};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tracing::{debug, info, warn};

use super::action::{self, Attempt, Outcome};
use super::{ExecRunner, ProbeTarget};

/// Upstream retries a probe that could not run (not one that failed) this many times.
const MAX_ATTEMPTS: usize = 3;

/// What the pod worker needs to know about a container's probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeStatus {
    /// No startup probe, or it succeeded.
    pub started: bool,
    /// Started, and no readiness probe or its last settled result is a success.
    pub ready: bool,
    /// Set once a liveness or startup probe reached its failure threshold: kill the
    /// container (with its grace period override, if any).
    pub liveness_failure: Option<LivenessFailure>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivenessFailure {
    /// As upstream's event: "Liveness probe failed: HTTP probe failed with statuscode: 500".
    pub message: String,
    /// The probe's terminationGracePeriodSeconds.
    pub grace_period_override: Option<i64>,
    /// "Liveness" or "Startup".
    pub kind: &'static str,
}

/// Knobs the caller may set; `Default` is what `ContainerProbes::start` uses.
#[derive(Debug, Clone, Default)]
pub struct ProbeOptions {
    /// Where each failed attempt is recorded as an Event (upstream's prober records
    /// Unhealthy for every failed result and ProbeWarning for warnings, whatever the
    /// threshold): the pod and the container's field path.
    pub events: Option<ProbeEvents>,
    /// How long the agent has been up. Upstream spreads first probes over a random part of
    /// the period only while the kubelet is younger than that period (after a restart,
    /// every container's probes would otherwise fire at once); `None` always spreads them.
    pub agent_uptime: Option<Duration>,
    /// How long the container has been running already (probes started after an agent
    /// restart): it counts towards initialDelaySeconds.
    pub running_for: Duration,
}

/// The recorder, pod and field path a container's probe Events go to.
#[derive(Debug, Clone)]
pub struct ProbeEvents {
    pub recorder: crate::events::Recorder,
    pub pod: Arc<k8s_openapi::api::core::v1::Pod>,
    /// `spec.containers{name}` (or `spec.initContainers{name}` for restartable init
    /// containers).
    pub field_path: String,
}

/// A probe's parameters with upstream's defaults.
#[derive(Debug, Clone)]
pub(crate) struct ProbeSpec {
    pub probe: Probe,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl ProbeSpec {
    /// `unit` is one second in the agent; unit tests shrink it to run in real time.
    pub fn new(probe: &Probe, unit: Duration) -> Self {
        let secs =
            |v: Option<i32>, default: i32, min: i32| unit * v.unwrap_or(default).max(min) as u32;
        ProbeSpec {
            probe: probe.clone(),
            initial_delay: secs(probe.initial_delay_seconds, 0, 0),
            period: secs(probe.period_seconds, 10, 1),
            timeout: secs(probe.timeout_seconds, 1, 1),
            success_threshold: probe.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: probe.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Liveness,
    Readiness,
    Startup,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }
}

#[derive(Debug)]
struct State {
    has_startup: bool,
    has_readiness: bool,
    startup_succeeded: bool,
    readiness_succeeded: bool,
    liveness_failure: Option<LivenessFailure>,
    /// Set when the probes are dropped: no metric is recorded afterwards, so a probe that
    /// was mid-run cannot bring back a series just forgotten.
    stopped: bool,
}

impl State {
    fn status(&self) -> ProbeStatus {
        let started = !self.has_startup || self.startup_succeeded;
        ProbeStatus {
            started,
            ready: started && (!self.has_readiness || self.readiness_succeeded),
            liveness_failure: self.liveness_failure.clone(),
        }
    }
}

struct Shared {
    target: ProbeTarget,
    env: Vec<EnvVar>,
    exec: Arc<dyn ExecRunner>,
    state: Mutex<State>,
    started: watch::Sender<bool>,
    on_change: Arc<Notify>,
    events: Option<ProbeEvents>,
}

impl Shared {
    /// Records a failed or warned attempt as upstream's prober does (its words: "Liveness
    /// probe failed: <output>", "Readiness probe warning: <output>").
    fn record_attempt(&self, kind: Kind, outcome: &Outcome) {
        let Some(ev) = &self.events else { return };
        let (event_type, reason, what) = match outcome {
            Outcome::Success(_) => return,
            Outcome::Failure(_) => (crate::events::EventType::Warning, "Unhealthy", "failed"),
            Outcome::Warning(_) => (crate::events::EventType::Warning, "ProbeWarning", "warning"),
        };
        ev.recorder.pod(
            &ev.pod,
            Some(&ev.field_path),
            event_type,
            reason,
            format!(
                "{} probe {what}: {}",
                kind.label(),
                outcome.output().trim_end()
            ),
        );
    }

    fn status(&self) -> ProbeStatus {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .status()
    }

    /// Records a settled result; true when this probe is done for this container.
    fn settle(&self, kind: Kind, spec: &ProbeSpec, success: bool, output: &str) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let before = state.status();
        let failure = |kind: Kind| LivenessFailure {
            message: format!("{} probe failed: {}", kind.label(), output.trim_end()),
            grace_period_override: spec.probe.termination_grace_period_seconds,
            kind: kind.label(),
        };
        let done = match (kind, success) {
            (Kind::Readiness, ok) => {
                state.readiness_succeeded = ok;
                false
            }
            (Kind::Liveness, true) => false,
            (Kind::Startup, true) => {
                state.startup_succeeded = true;
                true
            }
            (Kind::Liveness | Kind::Startup, false) => {
                if state.liveness_failure.is_none() {
                    state.liveness_failure = Some(failure(kind));
                }
                true
            }
        };
        let after = state.status();
        drop(state);
        if after.started {
            self.started.send_replace(true);
        }
        if before != after {
            debug!(pod = %self.target.pod, container = %self.target.container, probe = kind.label(), started = after.started, ready = after.ready, liveness_failure = after.liveness_failure.as_ref().map(|f| f.message.as_str()), "probe status changed");
            // A stored permit: the pod worker sees the change even if it was busy.
            self.on_change.notify_one();
        }
        done
    }
}

/// The running probes of one container. Dropping it stops them.
pub struct ContainerProbes {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

/// Dropping the probes ends them: nothing is recorded afterwards. Their
/// `prober_probe_total` series stay while the pod is on the node, so a restarted
/// container's counters go on counting as upstream's (its probe worker outlives container
/// restarts); the pod worker forgets the pod's series when the pod goes
/// (`metrics::forget_pod_probe_series`).
impl Drop for ContainerProbes {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        state.stopped = true;
    }
}

impl ContainerProbes {
    /// Starts the container's probes (must be called inside a tokio runtime). `on_change`
    /// is notified (`notify_one`) whenever `status()` changes.
    pub fn start(
        target: ProbeTarget,
        container: &Container,
        exec: Arc<dyn ExecRunner>,
        on_change: Arc<Notify>,
    ) -> ContainerProbes {
        Self::start_with(target, container, exec, on_change, ProbeOptions::default())
    }

    pub fn start_with(
        target: ProbeTarget,
        container: &Container,
        exec: Arc<dyn ExecRunner>,
        on_change: Arc<Notify>,
        options: ProbeOptions,
    ) -> ContainerProbes {
        Self::start_scaled(
            target,
            container,
            exec,
            on_change,
            options,
            Duration::from_secs(1),
        )
    }

    /// `start_with` with probe seconds lasting `unit`.
    pub(crate) fn start_scaled(
        target: ProbeTarget,
        container: &Container,
        exec: Arc<dyn ExecRunner>,
        on_change: Arc<Notify>,
        options: ProbeOptions,
        unit: Duration,
    ) -> ContainerProbes {
        let state = State {
            has_startup: container.startup_probe.is_some(),
            has_readiness: container.readiness_probe.is_some(),
            startup_succeeded: false,
            readiness_succeeded: false,
            liveness_failure: None,
            stopped: false,
        };
        let started = state.status().started;
        let shared = Arc::new(Shared {
            target,
            env: container.env.clone().unwrap_or_default(),
            exec,
            state: Mutex::new(state),
            started: watch::Sender::new(started),
            on_change,
            events: options.events.clone(),
        });
        let probes = [
            (Kind::Startup, &container.startup_probe),
            (Kind::Liveness, &container.liveness_probe),
            (Kind::Readiness, &container.readiness_probe),
        ];
        let tasks = probes
            .into_iter()
            .filter_map(|(kind, p)| p.as_ref().map(|p| (kind, ProbeSpec::new(p, unit))))
            .map(|(kind, spec)| {
                let delay = first_delay(&spec, &options);
                tokio::spawn(run(kind, spec, shared.clone(), delay))
            })
            .collect();
        ContainerProbes { shared, tasks }
    }

    pub fn status(&self) -> ProbeStatus {
        self.shared.status()
    }
}

/// When the first probe runs: after the initial delay (counted from the container's
/// start) and, when spreading, after a random part of the period.
fn first_delay(spec: &ProbeSpec, options: &ProbeOptions) -> Duration {
    let spread = options.agent_uptime.is_none_or(|up| up < spec.period);
    let jitter = if spread {
        spec.period.mul_f64(rand::random::<f64>())
    } else {
        Duration::ZERO
    };
    jitter.max(spec.initial_delay.saturating_sub(options.running_for))
}

async fn run(kind: Kind, spec: ProbeSpec, shared: Arc<Shared>, first_delay: Duration) {
    tokio::time::sleep(first_delay).await;
    if kind != Kind::Startup {
        let mut started = shared.started.subscribe();
        if started.wait_for(|s| *s).await.is_err() {
            return;
        }
    }
    let mut ticker = tokio::time::interval(spec.period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last: Option<bool> = None;
    let mut run_length = 0u32;
    loop {
        ticker.tick().await;
        let outcome = match attempt(&spec, &shared).await {
            Ok(o) => o,
            Err(e) => {
                warn!(pod = %shared.target.pod, container = %shared.target.container, probe = kind.label(), error = %e, "probe errored; result ignored");
                continue;
            }
        };
        match &outcome {
            Outcome::Failure(out) => {
                info!(pod = %shared.target.pod, container = %shared.target.container, probe = kind.label(), output = %out.trim_end(), "probe failed")
            }
            Outcome::Warning(out) => {
                info!(pod = %shared.target.pod, container = %shared.target.container, probe = kind.label(), output = %out.trim_end(), "probe warning")
            }
            Outcome::Success(_) => {}
        }
        let success = outcome.is_success();
        shared.record_metric(kind, success);
        shared.record_attempt(kind, &outcome);
        if last == Some(success) {
            run_length = run_length.saturating_add(1);
        } else {
            last = Some(success);
            run_length = 1;
        }
        let threshold = if success {
            spec.success_threshold
        } else {
            spec.failure_threshold
        };
        if run_length >= threshold && shared.settle(kind, &spec, success, outcome.output()) {
            return;
        }
    }
}

impl Shared {
    fn record_metric(&self, kind: Kind, success: bool) {
        // Under the state lock, so it cannot interleave with the drop that forgets the series.
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if !state.stopped {
            record_metric(kind, success, &self.target);
        }
    }
}

fn record_metric(kind: Kind, success: bool, t: &super::ProbeTarget) {
    use crate::metrics::{probe_result, ProbeResult, ProbeType};
    let probe = match kind {
        Kind::Liveness => ProbeType::Liveness,
        Kind::Readiness => ProbeType::Readiness,
        Kind::Startup => ProbeType::Startup,
    };
    let result = if success {
        ProbeResult::Successful
    } else {
        ProbeResult::Failed
    };
    let (ns, pod) = t.pod.split_once('/').unwrap_or(("", t.pod.as_str()));
    probe_result(probe, result, &t.container, pod, ns, &t.pod_uid);
}

async fn attempt(spec: &ProbeSpec, shared: &Shared) -> Attempt {
    let mut result = Err(String::new());
    for _ in 0..MAX_ATTEMPTS {
        result = action::run_probe(
            &spec.probe,
            &shared.target,
            &shared.env,
            shared.exec.as_ref(),
            spec.timeout,
        )
        .await;
        if result.is_ok() {
            break;
        }
    }
    result
}
