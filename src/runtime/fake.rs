//! An in-memory `Runtime` for unit tests. Tests script what each container does when its
//! task starts (runs, exits with a code, fails to start, is OOM-killed, ignores SIGTERM),
//! make containers vanish, make calls time out, and read back the calls the agent made.
//! Records are built by `containers::record_from`, the function the containerd
//! implementation uses, so a state means the same here as there.
//!
//! Timing uses tokio's clock, so tests run it with paused time and waits that cost nothing.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;

use super::accounts::Accounts;
use super::containers::{
    record_from, ContainerRecord, NewContainer, TaskIo, TaskSnapshot, TaskStatus,
};
use super::events::OomSeen;
use super::exec::{ExecError, ExecResult, ExecRunner};
use super::exec_stdio::fake::FakeExecs;
use super::image_store::ListedImage;
use super::images::{ImageConfig, ImageInfo};
use super::labels::{self, Kind};
use super::pull::{PullError, PullOutcome, RegistryCredential};
use super::service::Runtime;
use super::stdio::{
    BoxRead, BoxWrite, ProcessControl, ProcessEnd, ProcessStdio, StdioRequest, TermSize,
};
use super::{Result, RuntimeError};

/// What a container's task does once started.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Script {
    /// Runs until signalled; SIGTERM or SIGKILL ends it (143 / 137).
    Run,
    /// Runs and ignores SIGTERM: only SIGKILL ends it.
    IgnoreTerm,
    /// Exits with this code as soon as it starts.
    Exit(i32),
    /// The task cannot be started (containerd's start fails with this message).
    FailStart(String),
    /// Killed by the OOM killer right after it starts (exit 137, OOM reported).
    OomKill,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    Running,
    Exited(i32),
}

#[derive(Debug, Clone)]
struct FakeTask {
    pid: u32,
    state: TaskState,
    exited_at: Option<DateTime<Utc>>,
    ignores_term: bool,
}

#[derive(Debug, Clone)]
struct FakeContainer {
    labels: HashMap<String, String>,
    image: String,
    spec: oci_spec::runtime::Spec,
    runtime: crate::runtime::handlers::ContainerRuntime,
    created_at: DateTime<Utc>,
    task: Option<FakeTask>,
}

#[derive(Default)]
struct FakeState {
    containers: BTreeMap<String, FakeContainer>,
    images: HashMap<String, ImageInfo>,
    /// Images a pull would find in the registry.
    registry: HashMap<String, ImageInfo>,
    /// Per container name, what its next starts do (front first); `Run` once empty.
    scripts: HashMap<String, VecDeque<Script>>,
    /// Per container name, the exit code of execs in it (probes, hooks); 0 when unset.
    exec_exits: HashMap<String, i32>,
    /// Operations that answer with a timeout until cleared.
    hung: HashSet<&'static str>,
    calls: Vec<String>,
    /// For each pull, the image and where each credential it was given came from.
    pull_credentials: Vec<(String, Vec<String>)>,
    next_pid: u32,
    /// What a test adds to the logged call of each resources update (given the
    /// container's name): e.g. the pod cgroup's values at that moment.
    update_note: Option<UpdateNote>,
}

impl FakeState {
    /// What the update note (`note_updates`) sees at `op` on `target` (`name#attempt`), on
    /// a "noted" line of its own.
    fn note(&mut self, op: &str, target: &str) {
        if let Some(note) = self.update_note.clone() {
            let name = target.split('#').next().unwrap_or_default();
            let line = format!("noted {op} {target} {}", note(name));
            self.calls.push(line);
        }
    }
}

type UpdateNote = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// The fake runtime; cheap to clone (clones share their state).
#[derive(Clone, Default)]
pub(crate) struct FakeRuntime {
    state: Arc<Mutex<FakeState>>,
    oom_seen: OomSeen,
    /// Scripted exec processes: `execs().script(..)`, `execs().records()`.
    execs: FakeExecs,
    /// Per container name: what attaching gives, and what the sessions did.
    attach: Arc<Mutex<HashMap<String, FakeAttach>>>,
}

/// The image the fake knows under `name`: its command is `/<name>`, as a pause or
/// busybox image has one.
pub(crate) fn image(name: &str) -> ImageInfo {
    ImageInfo {
        name: name.to_string(),
        image_ref: format!("{name}@sha256:{:064x}", name.len()),
        chain_id: format!("sha256:{name}"),
        config: ImageConfig {
            cmd: Some(vec![format!("/{name}")]),
            ..ImageConfig::default()
        },
    }
}

impl FakeRuntime {
    /// A runtime holding `images`, reporting OOM kills into `oom_seen` as containerd's
    /// event stream does.
    pub(crate) fn new(images: &[&str], oom_seen: OomSeen) -> FakeRuntime {
        let rt = FakeRuntime {
            state: Arc::default(),
            oom_seen,
            execs: FakeExecs::default(),
            attach: Arc::default(),
        };
        {
            let mut st = rt.lock();
            st.next_pid = 1000;
            for i in images {
                st.images.insert(i.to_string(), image(i));
            }
        }
        rt
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().expect("fake runtime state")
    }

    /// The next starts of the container named `name` (the sandbox is "POD") do these, in order.
    pub(crate) fn script(&self, name: &str, scripts: impl IntoIterator<Item = Script>) {
        self.lock()
            .scripts
            .entry(name.to_string())
            .or_default()
            .extend(scripts);
    }

    /// Execs (probes, hooks) in the container named `name` exit with `code` from now on.
    pub(crate) fn exec_exits(&self, name: &str, code: i32) {
        self.lock().exec_exits.insert(name.to_string(), code);
    }

    /// What the next `exec_stdio` calls do and what each was asked (see `ExecScript`).
    pub(crate) fn execs(&self) -> &FakeExecs {
        &self.execs
    }

    /// The STOPSIGNAL of the image the fake holds as `image`.
    pub(crate) fn set_stop_signal(&self, image: &str, signal: &str) {
        if let Some(i) = self.lock().images.get_mut(image) {
            i.config.stop_signal = Some(signal.to_string());
        }
    }

    /// An image a pull can fetch.
    pub(crate) fn add_to_registry(&self, name: &str) {
        self.lock().registry.insert(name.to_string(), image(name));
    }

    /// Calls of this operation (a `Runtime` method name, or "exec" for `ExecRunner::exec`)
    /// time out until `unhang`.
    pub(crate) fn hang(&self, op: &'static str) {
        self.lock().hung.insert(op);
    }

    pub(crate) fn unhang(&self, op: &'static str) {
        self.lock().hung.remove(op);
    }

    /// Every call so far, as "op target" lines (target: `name#attempt`, or the pod uid).
    pub(crate) fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// The calls whose line starts with `prefix`.
    pub(crate) fn calls_of(&self, prefix: &str) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.starts_with(prefix))
            .collect()
    }

    /// Each pull so far: the image and the sources of the credentials it was given, in order.
    pub(crate) fn pull_credentials(&self) -> Vec<(String, Vec<String>)> {
        self.lock().pull_credentials.clone()
    }

    pub(crate) fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// The running container named `name` exits with `code` (as if its process ended).
    pub(crate) fn exit(&self, name: &str, code: i32) {
        let mut st = self.lock();
        for c in st.containers.values_mut() {
            if c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(name) {
                if let Some(t) = c.task.as_mut().filter(|t| t.state == TaskState::Running) {
                    t.state = TaskState::Exited(code);
                    t.exited_at = Some(Utc::now());
                }
            }
        }
    }

    /// Every record of the container named `name` loses the label `label`, as records made
    /// by an earlier version of the agent lack labels it writes now.
    pub(crate) fn drop_label(&self, name: &str, label: &str) {
        for c in self.lock().containers.values_mut() {
            if c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(name) {
                c.labels.remove(label);
            }
        }
    }

    /// Every record of the container named `name` disappears (removed behind the agent's back).
    pub(crate) fn vanish(&self, name: &str) {
        self.lock()
            .containers
            .retain(|_, c| c.labels.get(labels::CONTAINER_NAME).map(String::as_str) != Some(name));
    }

    /// Adds a record as an earlier run of the agent left it: a running sandbox of a pod.
    pub(crate) fn leave_running_sandbox(&self, pod: &labels::PodRef, id: &str) {
        let host = HashMap::from([(labels::HOST_NETWORK.to_string(), "true".into())]);
        self.leave_running_sandbox_with(pod, id, host);
    }

    /// `leave_running_sandbox` with these labels besides the usual ones (e.g. a pod network's
    /// netns instead of the host network).
    pub(crate) fn leave_running_sandbox_with(
        &self,
        pod: &labels::PodRef,
        id: &str,
        extra_labels: HashMap<String, String>,
    ) {
        let new = NewContainer {
            id,
            pod,
            kind: Kind::Sandbox,
            name: labels::SANDBOX_NAME,
            attempt: 0,
            image: &image("pause"),
            image_spec: "pause",
            spec: &oci_spec::runtime::Spec::default(),
            extra_labels,
            runtime: crate::runtime::handlers::ContainerRuntime::runc_v2(),
        };
        let mut st = self.lock();
        st.next_pid += 1;
        let pid = st.next_pid;
        st.containers.insert(
            id.to_string(),
            FakeContainer {
                labels: new.record_labels(),
                image: "pause".into(),
                spec: new.spec.clone(),
                runtime: new.runtime.clone(),
                created_at: Utc::now(),
                task: Some(FakeTask {
                    pid,
                    state: TaskState::Running,
                    exited_at: None,
                    ignores_term: false,
                }),
            },
        );
    }

    /// Calls `note` at each resources update with the container's name; what it returns
    /// is logged with the call (and on a "noted" line at each task start, kill and delete).
    pub(crate) fn note_updates(&self, note: impl Fn(&str) -> String + Send + Sync + 'static) {
        self.lock().update_note = Some(Arc::new(note));
    }

    /// The OCI spec the newest container of this name was created with.
    pub(crate) fn spec_of(&self, name: &str) -> Option<oci_spec::runtime::Spec> {
        let st = self.lock();
        st.containers
            .values()
            .filter(|c| c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(name))
            .max_by_key(|c| c.created_at)
            .map(|c| c.spec.clone())
    }

    /// The containerd runtime the newest container of that name was created with.
    pub(crate) fn runtime_of(
        &self,
        name: &str,
    ) -> Option<crate::runtime::handlers::ContainerRuntime> {
        let st = self.lock();
        st.containers
            .values()
            .filter(|c| c.labels.get(labels::CONTAINER_NAME).map(String::as_str) == Some(name))
            .max_by_key(|c| c.created_at)
            .map(|c| c.runtime.clone())
    }

    /// The records of a pod as the agent would list them (no call is logged).
    pub(crate) fn records(&self, pod_uid: &str) -> Vec<ContainerRecord> {
        self.list(Some(pod_uid))
    }

    fn list(&self, pod_uid: Option<&str>) -> Vec<ContainerRecord> {
        let st = self.lock();
        let mut out: Vec<(DateTime<Utc>, ContainerRecord)> = st
            .containers
            .iter()
            .filter(|(_, c)| {
                pod_uid.is_none_or(|u| c.labels.get(labels::POD_UID).map(String::as_str) == Some(u))
            })
            .filter_map(|(id, c)| {
                let task = c.task.as_ref().map(|t| TaskSnapshot {
                    status: match t.state {
                        TaskState::Running => TaskStatus::Running,
                        TaskState::Exited(_) => TaskStatus::Stopped,
                    },
                    pid: t.pid,
                    exit_status: match t.state {
                        TaskState::Exited(code) => code as u32,
                        TaskState::Running => 0,
                    },
                    exited_at: t.exited_at,
                });
                let r = record_from(
                    id.clone(),
                    c.labels.clone(),
                    &c.image,
                    Some(c.created_at),
                    Some(c.created_at),
                    task,
                )?;
                Some((c.created_at, r))
            })
            .collect();
        out.sort_by_key(|(t, r)| (*t, r.id.clone()));
        out.into_iter().map(|(_, r)| r).collect()
    }

    /// Logs the call and fails it with a timeout if the operation hangs (after waiting the
    /// deadline a real call would wait, on tokio's clock).
    async fn enter(&self, op: &'static str, target: String) -> Result<()> {
        let hung = {
            let mut st = self.lock();
            st.calls.push(format!("{op} {target}"));
            st.hung.contains(op)
        };
        if hung {
            tokio::time::sleep(super::client::CALL_TIMEOUT).await;
            return Err(RuntimeError::Timeout {
                op,
                object: target,
                secs: super::client::CALL_TIMEOUT.as_secs(),
            });
        }
        Ok(())
    }

    fn target(&self, id: &str) -> String {
        let st = self.lock();
        match st.containers.get(id) {
            Some(c) => format!(
                "{}#{}",
                c.labels
                    .get(labels::CONTAINER_NAME)
                    .cloned()
                    .unwrap_or_default(),
                c.labels.get(labels::ATTEMPT).cloned().unwrap_or_default()
            ),
            None => format!("<gone {}>", &id[..id.len().min(8)]),
        }
    }

    fn not_found(op: &'static str, id: &str) -> RuntimeError {
        RuntimeError::Call {
            op,
            object: id.to_string(),
            status: Box::new(tonic::Status::not_found(format!(
                "container {id} not found"
            ))),
        }
    }
}

impl ExecRunner for FakeRuntime {
    fn exec(
        &self,
        container_id: String,
        cmd: Vec<String>,
        _timeout: Duration,
    ) -> BoxFuture<'static, std::result::Result<ExecResult, ExecError>> {
        let rt = self.clone();
        async move {
            let target = rt.target(&container_id);
            let hung = {
                let mut st = rt.lock();
                st.calls.push(format!("exec {target} {}", cmd.join(" ")));
                st.hung.contains("exec")
            };
            if hung {
                // Dropped before its end, an exec leaves containerd's shim waiting for its
                // FIFO readers (see `exec::exec_to_end`): recorded, so tests can say it
                // never happens.
                let mut guard = CancelGuard {
                    rt: rt.clone(),
                    line: Some(format!("exec cancelled {target}")),
                };
                tokio::time::sleep(super::client::CALL_TIMEOUT).await;
                guard.line = None;
                rt.lock().calls.push(format!("exec timed out {target}"));
                return Err(ExecError::Failed(format!(
                    "exec in {container_id}: timed out after {:?}",
                    super::client::CALL_TIMEOUT
                )));
            }
            let (running, exit_code) = {
                let st = rt.lock();
                let c = st.containers.get(&container_id);
                let running = c
                    .and_then(|c| c.task.as_ref())
                    .is_some_and(|t| t.state == TaskState::Running);
                let code = c
                    .and_then(|c| c.labels.get(labels::CONTAINER_NAME))
                    .and_then(|name| st.exec_exits.get(name))
                    .copied()
                    .unwrap_or(0);
                (running, code)
            };
            if !running {
                return Err(ExecError::Failed(format!(
                    "container {container_id} is not running"
                )));
            }
            Ok(ExecResult {
                exit_code,
                stdout: Vec::new(),
                stderr: Vec::new(),
            })
        }
        .boxed()
    }
}

/// Records `line` as a call when dropped with it still set.
struct CancelGuard {
    rt: FakeRuntime,
    line: Option<String>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(line) = self.line.take() {
            self.rt.lock().calls.push(line);
        }
    }
}

#[async_trait]
impl Runtime for FakeRuntime {
    async fn pod_containers(&self, pod_uid: &str) -> Result<Vec<ContainerRecord>> {
        self.enter("pod_containers", pod_uid.to_string()).await?;
        Ok(self.list(Some(pod_uid)))
    }

    async fn all_containers(&self) -> Result<Vec<ContainerRecord>> {
        self.enter("all_containers", String::new()).await?;
        Ok(self.list(None))
    }

    async fn create_container(&self, new: NewContainer<'_>) -> Result<()> {
        self.enter("create_container", format!("{}#{}", new.name, new.attempt))
            .await?;
        let mut st = self.lock();
        st.containers
            .entry(new.id.to_string())
            .or_insert_with(|| FakeContainer {
                labels: new.record_labels(),
                image: new.image.name.clone(),
                spec: new.spec.clone(),
                runtime: new.runtime.clone(),
                created_at: Utc::now(),
                task: None,
            });
        Ok(())
    }

    async fn start_task(&self, id: &str, _io: &TaskIo) -> Result<u32> {
        let target = self.target(id);
        self.enter("start_task", target.clone()).await?;
        let mut st = self.lock();
        let name = match st.containers.get(id) {
            Some(c) => c
                .labels
                .get(labels::CONTAINER_NAME)
                .cloned()
                .unwrap_or_default(),
            None => return Err(Self::not_found("start task", id)),
        };
        st.note("start_task", &target);
        let script = st
            .scripts
            .get_mut(&name)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Script::Run);
        st.next_pid += 1;
        let pid = st.next_pid;
        let now = Utc::now();
        let (state, exited_at) = match &script {
            Script::FailStart(msg) => {
                return Err(RuntimeError::Call {
                    op: "start task",
                    object: id.to_string(),
                    status: Box::new(tonic::Status::unknown(msg.clone())),
                })
            }
            Script::Exit(code) => (TaskState::Exited(*code), Some(now)),
            Script::OomKill => {
                self.oom_seen.record(id);
                (TaskState::Exited(137), Some(now))
            }
            Script::Run | Script::IgnoreTerm => (TaskState::Running, None),
        };
        let c = st.containers.get_mut(id).expect("checked above");
        c.task = Some(FakeTask {
            pid,
            state,
            exited_at,
            ignores_term: script == Script::IgnoreTerm,
        });
        Ok(pid)
    }

    async fn set_labels(&self, id: &str, set: HashMap<String, String>) -> Result<()> {
        let target = self.target(id);
        self.enter("set_labels", target).await?;
        match self.lock().containers.get_mut(id) {
            Some(c) => {
                c.labels.extend(set);
                Ok(())
            }
            None => Err(Self::not_found("update container", id)),
        }
    }

    async fn update_resources(
        &self,
        id: &str,
        resources: &oci_spec::runtime::LinuxResources,
        labels: HashMap<String, String>,
    ) -> Result<()> {
        let target = self.target(id);
        let name = target.split('#').next().unwrap_or_default().to_string();
        let note = self.lock().update_note.clone();
        let cpu = resources.cpu().as_ref();
        let shown = format!(
            "{target} shares={} quota={} memory={}{}",
            cpu.and_then(|c| c.shares()).unwrap_or(0),
            cpu.and_then(|c| c.quota()).unwrap_or(0),
            resources
                .memory()
                .as_ref()
                .and_then(|m| m.limit())
                .unwrap_or(0),
            note.map(|n| format!(" {}", n(&name))).unwrap_or_default()
        );
        self.enter("update_resources", shown).await?;
        let mut st = self.lock();
        let Some(c) = st.containers.get_mut(id) else {
            return Err(Self::not_found("update task", id));
        };
        if !c
            .task
            .as_ref()
            .is_some_and(|t| t.state == TaskState::Running)
        {
            return Err(RuntimeError::Call {
                op: "update task",
                object: id.to_string(),
                status: Box::new(tonic::Status::failed_precondition("task is not running")),
            });
        }
        if let Some(linux) = c.spec.linux_mut() {
            let mut res = linux.resources().clone().unwrap_or_default();
            res.set_cpu(resources.cpu().clone());
            res.set_memory(*resources.memory());
            linux.set_resources(Some(res));
        }
        c.labels.extend(labels);
        Ok(())
    }

    async fn kill(&self, id: &str, signal: u32) -> Result<()> {
        let target = self.target(id);
        self.enter("kill", format!("{target} {signal}")).await?;
        let mut st = self.lock();
        st.note("kill", &target);
        if let Some(t) = st.containers.get_mut(id).and_then(|c| c.task.as_mut()) {
            let ends = signal == libc::SIGKILL as u32 || !t.ignores_term;
            if t.state == TaskState::Running && ends {
                t.state = TaskState::Exited(128 + signal as i32);
                t.exited_at = Some(Utc::now());
            }
        }
        Ok(())
    }

    async fn wait_exit(&self, id: &str, timeout: Duration) -> Result<Option<u32>> {
        let target = self.target(id);
        self.enter("wait_exit", target).await?;
        let exited = |rt: &FakeRuntime| {
            let st = rt.lock();
            match st.containers.get(id).and_then(|c| c.task.as_ref()) {
                Some(FakeTask {
                    state: TaskState::Exited(code),
                    ..
                }) => Some(*code as u32),
                Some(_) => None,
                None => Some(0),
            }
        };
        if let Some(code) = exited(self) {
            return Ok(Some(code));
        }
        tokio::time::sleep(timeout).await;
        Ok(exited(self))
    }

    async fn delete_task(&self, id: &str) -> Result<()> {
        let target = self.target(id);
        self.enter("delete_task", target.clone()).await?;
        let mut st = self.lock();
        st.note("delete_task", &target);
        if let Some(c) = st.containers.get_mut(id) {
            c.task = None;
        }
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        let target = self.target(id);
        self.enter("remove_container", target).await?;
        self.lock().containers.remove(id);
        Ok(())
    }

    async fn upper_dir(&self, _id: &str) -> Option<PathBuf> {
        None
    }

    async fn resolve_image(&self, image: &str) -> Result<ImageInfo> {
        self.enter("resolve_image", image.to_string()).await?;
        self.lock()
            .images
            .get(image)
            .cloned()
            .ok_or_else(|| RuntimeError::ImageNotFound(image.to_string()))
    }

    async fn pull_image(
        &self,
        image: &str,
        creds: &[RegistryCredential],
    ) -> std::result::Result<PullOutcome, PullError> {
        let _ = self.enter("pull_image", image.to_string()).await;
        let mut st = self.lock();
        st.pull_credentials.push((
            image.to_string(),
            creds.iter().map(|c| c.source.clone()).collect(),
        ));
        match st.registry.get(image).cloned() {
            Some(info) => {
                st.images.insert(image.to_string(), info.clone());
                Ok(PullOutcome {
                    image: info,
                    pulled: true,
                    bytes: 0,
                    size: 0,
                    duration: Duration::ZERO,
                })
            }
            None => Err(PullError::NotFound {
                image: image.to_string(),
                registry: "fake.registry".into(),
                detail: "manifest unknown".into(),
            }),
        }
    }

    async fn list_images(&self) -> Result<Vec<ListedImage>> {
        self.enter("list_images", String::new()).await?;
        Ok(self
            .lock()
            .images
            .values()
            .map(|i| ListedImage {
                name: i.name.clone(),
                digest: i
                    .image_ref
                    .rsplit_once('@')
                    .map(|(_, d)| d.to_string())
                    .unwrap_or_default(),
            })
            .collect())
    }

    async fn container_images(&self) -> Result<Vec<String>> {
        self.enter("container_images", String::new()).await?;
        Ok(self
            .lock()
            .containers
            .values()
            .map(|c| c.image.clone())
            .collect())
    }

    async fn image_size(&self, digest: &str) -> Result<u64> {
        self.enter("image_size", digest.to_string()).await?;
        Ok(0)
    }

    async fn remove_image(&self, digest: &str, names: &[String]) -> Result<()> {
        self.enter("remove_image", names.join(",")).await?;
        let mut st = self.lock();
        st.images
            .retain(|name, i| !(names.contains(name) && i.image_ref.ends_with(digest)));
        Ok(())
    }

    async fn exec_stdio(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        io: StdioRequest,
    ) -> Result<ProcessStdio> {
        let target = self.target(container_id);
        self.enter("exec_stdio", format!("{target} {}", cmd.join(" ")))
            .await?;
        let state = {
            let st = self.lock();
            let Some(c) = st.containers.get(container_id) else {
                return Err(Self::not_found("get container", container_id));
            };
            match c.task.as_ref().map(|t| t.state) {
                Some(TaskState::Running) => None,
                _ => Some("CONTAINER_EXITED"),
            }
        };
        if let Some(state) = state {
            return Err(RuntimeError::NotRunning {
                container: container_id.to_string(),
                state,
            });
        }
        self.execs.start(container_id, cmd, io)
    }

    async fn attach_stdio(&self, container_id: &str, io: StdioRequest) -> Result<ProcessStdio> {
        let target = self.target(container_id);
        self.enter("attach_stdio", target).await?;
        let name = {
            let st = self.lock();
            let c = st
                .containers
                .get(container_id)
                .ok_or_else(|| Self::not_found("attach", container_id))?;
            if !c
                .task
                .as_ref()
                .is_some_and(|t| t.state == TaskState::Running)
            {
                return Err(RuntimeError::Stdio {
                    container: container_id.to_string(),
                    reason: "container is in CONTAINER_EXITED state".into(),
                });
            }
            c.labels
                .get(labels::CONTAINER_NAME)
                .cloned()
                .unwrap_or_default()
        };
        let (script, record) = {
            let mut attach = self.attach.lock().expect("fake attach state");
            let a = attach.entry(name).or_default();
            (a.script.clone(), a.record.clone())
        };
        let read = |bytes: Vec<u8>| Box::pin(std::io::Cursor::new(bytes)) as BoxRead;
        Ok(ProcessStdio {
            stdin: (io.stdin && script.stdin).then(|| {
                Box::pin(AttachInput {
                    record: record.clone(),
                }) as BoxWrite
            }),
            stdout: io.stdout.then(|| read(script.output.clone())),
            stderr: (io.stderr && !script.tty).then(|| read(Vec::new())),
            control: Box::new(FakeAttachControl {
                record,
                tty: script.tty,
            }),
        })
    }

    async fn image_accounts(&self, _image: &ImageInfo) -> Result<Arc<Accounts>> {
        Ok(Arc::new(Accounts::parse(
            "root:x:0:0::/root:/bin/sh\n",
            "root:x:0:\n",
        )))
    }
}

/// What attaching to a fake container gives (per container name; the default: no stdin, no
/// tty, no output).
#[derive(Debug, Clone, Default)]
pub(crate) struct AttachScript {
    /// The container has stdin (`stdin: true`): sessions asking for it get it.
    pub stdin: bool,
    pub tty: bool,
    /// Each session reads this on stdout, then its output ends.
    pub output: Vec<u8>,
}

/// What the attach sessions of a container did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AttachRecord {
    pub input: Vec<u8>,
    pub resizes: Vec<TermSize>,
    pub stdin_closes: u32,
    pub hang_ups: u32,
}

#[derive(Default)]
struct FakeAttach {
    script: AttachScript,
    record: Arc<Mutex<AttachRecord>>,
}

impl FakeRuntime {
    /// Attaching to the container named `name` gives this from now on.
    pub(crate) fn script_attach(&self, name: &str, script: AttachScript) {
        self.attach
            .lock()
            .expect("fake attach state")
            .entry(name.to_string())
            .or_default()
            .script = script;
    }

    /// What the attach sessions of the container named `name` did so far.
    pub(crate) fn attached(&self, name: &str) -> AttachRecord {
        let attach = self.attach.lock().expect("fake attach state");
        attach
            .get(name)
            .map(|a| a.record.lock().expect("fake attach record").clone())
            .unwrap_or_default()
    }
}

struct AttachInput {
    record: Arc<Mutex<AttachRecord>>,
}

impl tokio::io::AsyncWrite for AttachInput {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let mut record = self.record.lock().expect("fake attach record");
        record.input.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

struct FakeAttachControl {
    record: Arc<Mutex<AttachRecord>>,
    tty: bool,
}

impl FakeAttachControl {
    fn record(&self) -> std::sync::MutexGuard<'_, AttachRecord> {
        self.record.lock().expect("fake attach record")
    }
}

#[async_trait]
impl ProcessControl for FakeAttachControl {
    async fn resize(&self, size: TermSize) -> Result<()> {
        if self.tty {
            self.record().resizes.push(size);
        }
        Ok(())
    }

    async fn close_stdin(&self) -> Result<()> {
        self.record().stdin_closes += 1;
        Ok(())
    }

    async fn hang_up(&self) {
        self.record().hang_ups += 1;
    }

    /// The scripted output is all there is: the session ends once it was read.
    async fn wait(&self) -> Result<ProcessEnd> {
        Ok(ProcessEnd::Detached)
    }

    async fn finish(&self) {}
}

mod attach_tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn attach_gives_the_scripted_output_and_records_the_session() {
        let rt = FakeRuntime::new(&[], OomSeen::default());
        let pod = labels::PodRef {
            uid: "u".into(),
            name: "p".into(),
            namespace: "ns".into(),
        };
        rt.leave_running_sandbox(&pod, "c1");
        let name = labels::SANDBOX_NAME;
        rt.script_attach(
            name,
            AttachScript {
                stdin: true,
                tty: true,
                output: b"got:one\n".to_vec(),
            },
        );
        let io = StdioRequest {
            stdin: true,
            stdout: true,
            stderr: false,
            tty: true,
        };
        let mut stdio = rt.attach_stdio("c1", io).await.unwrap();
        stdio
            .stdin
            .as_mut()
            .unwrap()
            .write_all(b"one\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        stdio
            .stdout
            .as_mut()
            .unwrap()
            .read_to_end(&mut out)
            .await
            .unwrap();
        assert_eq!(out, b"got:one\n");
        let size = TermSize {
            width: 50,
            height: 20,
        };
        stdio.control.resize(size).await.unwrap();
        stdio.control.close_stdin().await.unwrap();
        assert_eq!(stdio.control.wait().await.unwrap(), ProcessEnd::Detached);
        assert_eq!(
            rt.attached(name),
            AttachRecord {
                input: b"one\n".to_vec(),
                resizes: vec![size],
                stdin_closes: 1,
                hang_ups: 0,
            }
        );

        rt.exit(name, 0);
        let err = rt.attach_stdio("c1", io).await.err().expect("not running");
        assert!(err.to_string().contains("CONTAINER_EXITED"), "{err}");
    }
}
