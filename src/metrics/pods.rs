//! The pod-level kubelet_* families: what the pod manager holds (desired, active, working,
//! restarted pods), what the workers start (sandboxes, containers) and how long a pass takes,
//! and what the runtime runs (running pods and containers, summed from the workers' listings).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::kubelet;

/// A container's kind, as upstream's `container_type` label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerType {
    Container,
    InitContainer,
    EphemeralContainer,
}

impl ContainerType {
    fn label(self) -> &'static str {
        match self {
            ContainerType::Container => "container",
            ContainerType::InitContainer => "init_container",
            ContainerType::EphemeralContainer => "ephemeral_container",
        }
    }
}

/// A container start is attempted (after its back-off, as upstream counts it).
pub fn container_started(kind: ContainerType) {
    kubelet().started_containers.inc(&[kind.label()]);
}

/// A container start failed with `code`, upstream's waiting reason (ErrImagePull,
/// CreateContainerConfigError, RunContainerError, ...), a small set of values.
pub fn container_start_failed(kind: ContainerType, code: &str) {
    kubelet()
        .started_containers_errors
        .inc(&[kind.label(), code]);
}

/// A pod sandbox being created: counted when made, and counted as an error unless
/// `succeeded` is called before it drops (every early return of the creation is a failure).
#[must_use]
pub struct PodSandboxStart {
    done: bool,
}

pub fn pod_sandbox_start() -> PodSandboxStart {
    kubelet().started_pods.inc(&[]);
    PodSandboxStart { done: false }
}

impl PodSandboxStart {
    pub fn succeeded(mut self) {
        self.done = true;
    }
}

impl Drop for PodSandboxStart {
    fn drop(&mut self) {
        if !self.done {
            kubelet().started_pods_errors.inc(&[]);
        }
    }
}

/// Why a worker passes, as upstream's update types label the pod worker's durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerPass {
    /// The first pass of a pod the worker was started for.
    Create,
    /// The pod changed in its source.
    Update,
    /// A resync or a wake-up (runtime event, probe result) with the pod unchanged.
    Sync,
}

/// One worker pass took `took`.
pub fn pod_worker_pass(kind: WorkerPass, took: Duration) {
    let label = match kind {
        WorkerPass::Create => "create",
        WorkerPass::Update => "update",
        WorkerPass::Sync => "sync",
    };
    kubelet()
        .pod_worker_duration
        .observe(&[label], took.as_secs_f64());
}

/// What one pod has in the runtime, from its worker's latest listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeState {
    pub sandbox_running: bool,
    /// Its app, init and ephemeral containers by upstream's `container_state` value
    /// (`running`, `exited`, `created`, `unknown`).
    pub containers: Vec<(&'static str, usize)>,
}

/// Every pod's latest state, by UID. The workers list their own pod on each pass (there is
/// no node-wide relist to count from), so the node's totals are summed here.
fn states() -> &'static Mutex<HashMap<String, RuntimeState>> {
    static STATES: std::sync::OnceLock<Mutex<HashMap<String, RuntimeState>>> =
        std::sync::OnceLock::new();
    STATES.get_or_init(Default::default)
}

/// A worker's listing of its pod: kubelet_running_pods and kubelet_running_containers are
/// brought up to date with it.
pub fn pod_runtime_state(uid: &str, state: RuntimeState) {
    let mut all = states().lock().unwrap_or_else(|p| p.into_inner());
    if all.get(uid) == Some(&state) {
        return;
    }
    all.insert(uid.to_string(), state);
    publish_running(&all);
}

/// The pod's state as last recorded (tests).
#[cfg(test)]
pub fn runtime_state_of(uid: &str) -> Option<RuntimeState> {
    states()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(uid)
        .cloned()
}

/// The pod left the node: it no longer counts.
pub fn forget_pod_runtime_state(uid: &str) {
    let mut all = states().lock().unwrap_or_else(|p| p.into_inner());
    if all.remove(uid).is_some() {
        publish_running(&all);
    }
}

fn publish_running(all: &HashMap<String, RuntimeState>) {
    let (pods, by_state) = running_totals(all.values());
    super::set_running(pods, &by_state);
}

/// Pods with a running sandbox, and containers summed by state.
fn running_totals<'a>(
    states: impl Iterator<Item = &'a RuntimeState>,
) -> (usize, Vec<(&'static str, usize)>) {
    let mut pods = 0;
    let mut by_state: std::collections::BTreeMap<&'static str, usize> = Default::default();
    for s in states {
        pods += usize::from(s.sandbox_running);
        for (state, n) in &s.containers {
            *by_state.entry(state).or_default() += n;
        }
    }
    (pods, by_state.into_iter().collect())
}

/// The pod manager's view, as upstream's housekeeping reports it: the pods the sources want
/// and those still active (not ended, rejected or finished), each split by static, and the
/// workers by lifecycle, config state and static.
#[derive(Debug, Clone, Default)]
pub struct PodCounts {
    /// (static, count) of the desired pods.
    pub desired: [usize; 2],
    pub active: [usize; 2],
    /// ((lifecycle, config, static), count) for every worker; combinations not listed are 0.
    pub working: Vec<((&'static str, &'static str, &'static str), usize)>,
}

/// Every combination upstream reports, so a state that empties shows 0 rather than its last
/// count: desired and orphaned pods by static, runtime-only ones with static unknown.
const WORKING_SERIES: [(&str, &str); 5] = [
    ("desired", "true"),
    ("desired", ""),
    ("orphan", "true"),
    ("orphan", ""),
    ("runtime_only", "unknown"),
];
const LIFECYCLES: [&str; 3] = ["sync", "terminating", "terminated"];

pub fn record_pod_counts(counts: &PodCounts) {
    let m = kubelet();
    // Upstream's static label: "true", or empty for API pods.
    for (i, label) in ["", "true"].iter().enumerate() {
        m.desired_pods.set(&[label], counts.desired[i] as f64);
        m.active_pods.set(&[label], counts.active[i] as f64);
    }
    let series = working_series(counts);
    let series: Vec<(Vec<&str>, f64)> = series.iter().map(|(k, n)| (k.to_vec(), *n)).collect();
    m.working_pods.set_all(&series);
}

/// kubelet_working_pods' 15 series: (lifecycle, config, static) and the count.
fn working_series(counts: &PodCounts) -> Vec<([&'static str; 3], f64)> {
    let mut out = Vec::new();
    for (config, static_) in WORKING_SERIES {
        for lifecycle in LIFECYCLES {
            let n: usize = counts
                .working
                .iter()
                .filter(|((l, c, s), _)| *l == lifecycle && *c == config && *s == static_)
                .map(|(_, n)| n)
                .sum();
            out.push(([lifecycle, config, static_], n as f64));
        }
    }
    out
}

/// A pod that stopped was wanted again with the same UID and is started anew.
pub fn pod_restarted(static_pod: bool) {
    kubelet()
        .restarted_pods
        .inc(&[if static_pod { "true" } else { "" }]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_totals_sum_the_pods_listings() {
        let a = RuntimeState {
            sandbox_running: true,
            containers: vec![("running", 2), ("exited", 1)],
        };
        let b = RuntimeState {
            sandbox_running: false,
            containers: vec![("exited", 3)],
        };
        assert_eq!(
            running_totals([&a, &b].into_iter()),
            (1, vec![("exited", 4), ("running", 2)])
        );
        assert_eq!(running_totals(std::iter::empty()), (0, vec![]));
    }

    #[test]
    fn working_pods_have_every_upstream_combination() {
        let counts = PodCounts {
            desired: [0, 0],
            active: [0, 0],
            working: vec![
                (("sync", "desired", ""), 1),
                (("sync", "desired", ""), 1),
                (("terminating", "runtime_only", "unknown"), 1),
            ],
        };
        let series = working_series(&counts);
        assert_eq!(series.len(), 15);
        let get = |k: [&str; 3]| series.iter().find(|(s, _)| *s == k).map(|(_, n)| *n);
        assert_eq!(get(["sync", "desired", ""]), Some(2.0));
        assert_eq!(get(["terminating", "runtime_only", "unknown"]), Some(1.0));
        assert_eq!(get(["terminated", "orphan", "true"]), Some(0.0));
        assert_eq!(
            get(["sync", "runtime_only", ""]),
            None,
            "not a combination upstream has"
        );
    }

    #[test]
    fn a_sandbox_start_counts_an_error_unless_it_succeeds() {
        let m = kubelet();
        let (started, errors) = (
            || m.started_pods.get(&[]).unwrap_or(0.0),
            || m.started_pods_errors.get(&[]).unwrap_or(0.0),
        );
        // Other tests start sandboxes too: the counters only go up, so deltas are lower
        // bounds, and this test's failure is seen as one more error at least.
        let (s0, e0) = (started(), errors());
        pod_sandbox_start().succeeded();
        assert!(started() >= s0 + 1.0);
        let e1 = errors();
        drop(pod_sandbox_start());
        assert!(started() >= s0 + 2.0);
        assert!(errors() >= e1 + 1.0 && e1 >= e0);
        container_start_failed(ContainerType::InitContainer, "CreateContainerConfigError");
        let text = crate::metrics::registry().gather();
        assert!(text.contains(
            "kubelet_started_containers_errors_total{code=\"CreateContainerConfigError\",container_type=\"init_container\"}"
        ), "{text}");
        assert!(text.contains("# HELP kubelet_started_pods_total [ALPHA] Cumulative number of pods started\n# TYPE kubelet_started_pods_total counter\n"));
    }
}
