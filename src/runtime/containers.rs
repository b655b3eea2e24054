//! Containers and tasks in containerd: create, start, stop, observe, remove.
//!
//! A containerd *container* record (with its snapshot) outlives its task: after a task
//! exits, the agent writes how it ended into the record's labels and deletes the task, so
//! the record stands for a dead container (upstream keeps dead containers too) and the
//! next agent start can read restart counts and last states back from containerd.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use containerd_client::services::v1::container::Runtime;
use containerd_client::services::v1::snapshots::{
    MountsRequest, PrepareSnapshotRequest, RemoveSnapshotRequest,
};
use containerd_client::services::v1::{
    CloseIoRequest, Container, CreateContainerRequest, CreateTaskRequest, DeleteContainerRequest,
    DeleteTaskRequest, GetContainerRequest, GetRequest, KillRequest, ListContainersRequest,
    ResizePtyRequest, StartRequest, UpdateContainerRequest, UpdateTaskRequest, WaitRequest,
};
pub use containerd_client::types::v1::Status as TaskStatus;
use containerd_client::types::Mount;
use prost_types::{Any, FieldMask, Timestamp};
use tracing::debug;

use super::attach::spawn::{remove_relay_dir, TaskFifos};
use super::attach::{client, relay, relay_dir, RELAY_BASE_DIR};
use super::client::{call, CALL_TIMEOUT};
use super::handlers::ContainerRuntime;
use super::images::{ImageInfo, SNAPSHOTTER};
use super::labels::{self, Kind, PodRef};
use super::stdio::{ProcessStdio, StdioRequest, TermSize};
use super::{Containerd, Result, RuntimeError};

const SPEC_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
/// How containerd's typeurl names the OCI LinuxResources a task update carries.
const RESOURCES_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources";

/// How a container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    pub exit_code: i32,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Completed, Error, OOMKilled, StartError (upstream's terminated reasons).
    pub reason: String,
    pub message: String,
}

/// The observed state of one container record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// The record exists, its task was never started (or was created and not started).
    Created,
    Running {
        pid: u32,
        started_at: Option<DateTime<Utc>>,
    },
    /// Dead. `finalized` is false while the exited task still exists in containerd.
    Exited { info: ExitInfo, finalized: bool },
}

/// One container record of a pod, as containerd holds it.
#[derive(Debug, Clone)]
pub struct ContainerRecord {
    pub id: String,
    pub pod: PodRef,
    pub kind: Kind,
    pub name: String,
    pub attempt: u32,
    pub image: String,
    pub image_ref: String,
    pub created_at: Option<DateTime<Utc>>,
    pub labels: HashMap<String, String>,
    pub state: State,
}

impl ContainerRecord {
    pub fn is_running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }

    pub fn exit(&self) -> Option<&ExitInfo> {
        match &self.state {
            State::Exited { info, .. } => Some(info),
            _ => None,
        }
    }

    /// The signal that asks this container to stop: its image's STOPSIGNAL, else SIGTERM
    /// (as containerd's CRI plugin stops a container). A signal the agent cannot read is
    /// logged and SIGTERM sent, so a stop is never skipped.
    pub fn stop_signal(&self) -> u32 {
        let Some(text) = self.labels.get(labels::STOP_SIGNAL) else {
            return libc::SIGTERM as u32;
        };
        parse_signal(text).unwrap_or_else(|| {
            tracing::warn!(container = %self.name, container_id = %self.id, signal = %text, "the image's STOPSIGNAL is not a signal; sending SIGTERM");
            libc::SIGTERM as u32
        })
    }
}

/// A signal as an image config writes it (moby's ParseSignal): a number, or a name with or
/// without `SIG`, in any case, including `RTMIN+n` / `RTMAX-n`.
pub(crate) fn parse_signal(text: &str) -> Option<u32> {
    let text = text.trim();
    if let Ok(n) = text.parse::<u32>() {
        return (1..=libc::SIGRTMAX() as u32).contains(&n).then_some(n);
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let realtime = |base: libc::c_int, rest: &str, sign: i32| -> Option<u32> {
        let offset: i32 = if rest.is_empty() {
            0
        } else {
            rest.parse().ok()?
        };
        let n = base + sign * offset;
        (libc::SIGRTMIN()..=libc::SIGRTMAX())
            .contains(&n)
            .then_some(n as u32)
    };
    if let Some(rest) = name.strip_prefix("RTMIN") {
        return realtime(libc::SIGRTMIN(), rest.strip_prefix('+').unwrap_or(rest), 1);
    }
    if let Some(rest) = name.strip_prefix("RTMAX") {
        return realtime(libc::SIGRTMAX(), rest.strip_prefix('-').unwrap_or(rest), -1);
    }
    format!("SIG{name}")
        .parse::<nix::sys::signal::Signal>()
        .ok()
        .map(|s| s as i32 as u32)
}

/// Where a task's stdio goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskIo {
    /// Nowhere (/dev/null): the pause container.
    Null,
    /// stdout and stderr to this `binary://` URI (the CRI logger); no stdin.
    Logger(String),
    /// FIFOs held by the container's io relay (containers with stdin or a terminal).
    Fifos(TaskFifos),
}

impl TaskIo {
    /// CreateTaskRequest's stdin, stdout, stderr and terminal.
    fn create_fields(&self) -> (String, String, String, bool) {
        let path = |p: &std::path::Path| p.display().to_string();
        match self {
            TaskIo::Null => Default::default(),
            TaskIo::Logger(uri) => (String::new(), uri.clone(), uri.clone(), false),
            TaskIo::Fifos(f) => (
                f.stdin.as_deref().map(path).unwrap_or_default(),
                path(&f.stdout),
                f.stderr.as_deref().map(path).unwrap_or_default(),
                f.terminal,
            ),
        }
    }
}

/// What `create_container` needs.
#[derive(Clone)]
pub struct NewContainer<'a> {
    pub id: &'a str,
    pub pod: &'a PodRef,
    pub kind: Kind,
    pub name: &'a str,
    pub attempt: u32,
    pub image: &'a ImageInfo,
    /// The image reference as the pod spec wrote it.
    pub image_spec: &'a str,
    pub spec: &'a oci_spec::runtime::Spec,
    pub extra_labels: HashMap<String, String>,
    /// The containerd runtime of the pod's handler (`runtime::handlers`); every container
    /// of a pod gets its sandbox's, as containerd's CRI plugin does.
    pub runtime: ContainerRuntime,
}

impl NewContainer<'_> {
    /// The labels of the record: pod identity, kind, name, attempt and image, plus extras.
    pub fn record_labels(&self) -> HashMap<String, String> {
        let mut l = self.pod.labels();
        l.insert(labels::KIND.into(), self.kind.as_str().into());
        l.insert(labels::CONTAINER_NAME.into(), self.name.into());
        l.insert(labels::ATTEMPT.into(), self.attempt.to_string());
        l.insert(labels::IMAGE.into(), self.image_spec.into());
        l.insert(labels::IMAGE_REF.into(), self.image.image_ref.clone());
        if let Some(signal) = self
            .image
            .config
            .stop_signal
            .as_deref()
            .filter(|s| !s.trim().is_empty())
        {
            l.insert(labels::STOP_SIGNAL.into(), signal.trim().into());
        }
        l.extend(self.extra_labels.clone());
        l
    }

    /// The record as a listing would show it right after creation (`pid: None`) or after
    /// its task started: what a pass that made it knows without asking again.
    pub fn as_record(&self, pid: Option<u32>) -> ContainerRecord {
        let now = Utc::now();
        let task = pid.map(|pid| TaskSnapshot {
            status: TaskStatus::Running,
            pid,
            exit_status: 0,
            exited_at: None,
        });
        record_from(
            self.id.to_string(),
            self.record_labels(),
            &self.image.name,
            Some(now),
            Some(now),
            task,
        )
        .expect("the labels of a new record name its pod and kind")
    }
}

/// What a record's task looked like when it was listed.
#[derive(Debug, Clone, Copy)]
pub struct TaskSnapshot {
    pub status: TaskStatus,
    pub pid: u32,
    pub exit_status: u32,
    pub exited_at: Option<DateTime<Utc>>,
}

fn is_managed(l: &HashMap<String, String>) -> bool {
    PodRef::from_labels(l).is_some() && l.get(labels::KIND).and_then(|k| Kind::parse(k)).is_some()
}

/// A record as the agent sees it, from the container's labels and its task (if any);
/// `None` for a container the agent did not make. The fake runtime builds its records
/// through this too, so both agree on what a state means.
pub fn record_from(
    id: String,
    l: HashMap<String, String>,
    image: &str,
    created_at: Option<DateTime<Utc>>,
    updated_at: Option<DateTime<Utc>>,
    task: Option<TaskSnapshot>,
) -> Option<ContainerRecord> {
    let (Some(pod), Some(kind)) = (
        PodRef::from_labels(&l),
        l.get(labels::KIND).and_then(|k| Kind::parse(k)),
    ) else {
        return None;
    };
    let started_label = parse_time(l.get(labels::STARTED_AT));
    let state = match task {
        Some(p) => match p.status {
            TaskStatus::Running | TaskStatus::Paused | TaskStatus::Pausing => State::Running {
                pid: p.pid,
                started_at: started_label.or(updated_at),
            },
            // The shim could not say in time (containerd gives up on runc's state after 2 s
            // and answers UNKNOWN): a task with a process may well still run, so it counts as
            // running and gets a graceful stop, as upstream treats an unknown container;
            // taken as not started, its stop would skip straight to SIGKILL.
            TaskStatus::Unknown if p.pid != 0 => State::Running {
                pid: p.pid,
                started_at: started_label.or(updated_at),
            },
            TaskStatus::Stopped => {
                let code = p.exit_status as i32;
                State::Exited {
                    info: ExitInfo {
                        exit_code: code,
                        started_at: started_label,
                        finished_at: p.exited_at,
                        reason: exit_reason(code).to_string(),
                        message: String::new(),
                    },
                    finalized: false,
                }
            }
            _ => State::Created,
        },
        None => match l.get(labels::EXIT_CODE).and_then(|c| c.parse::<i32>().ok()) {
            Some(code) => State::Exited {
                info: ExitInfo {
                    exit_code: code,
                    started_at: started_label,
                    finished_at: parse_time(l.get(labels::FINISHED_AT)),
                    reason: l
                        .get(labels::REASON)
                        .cloned()
                        .unwrap_or_else(|| exit_reason(code).to_string()),
                    message: l.get(labels::MESSAGE).cloned().unwrap_or_default(),
                },
                finalized: true,
            },
            None => State::Created,
        },
    };
    Some(ContainerRecord {
        attempt: l
            .get(labels::ATTEMPT)
            .and_then(|a| a.parse().ok())
            .unwrap_or(0),
        name: l.get(labels::CONTAINER_NAME).cloned().unwrap_or_default(),
        image: l
            .get(labels::IMAGE)
            .cloned()
            .unwrap_or_else(|| image.to_string()),
        image_ref: l.get(labels::IMAGE_REF).cloned().unwrap_or_default(),
        created_at,
        labels: l,
        id,
        pod,
        kind,
        state,
    })
}

pub fn ts_to_chrono(ts: &Timestamp) -> Option<DateTime<Utc>> {
    if ts.seconds <= 0 {
        return None;
    }
    Utc.timestamp_opt(ts.seconds, ts.nanos.max(0) as u32)
        .single()
}

fn parse_time(s: Option<&String>) -> Option<DateTime<Utc>> {
    s.and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// Reason for a terminated container that did not OOM: upstream says Completed for exit 0.
pub fn exit_reason(code: i32) -> &'static str {
    if code == 0 {
        "Completed"
    } else {
        "Error"
    }
}

impl Containerd {
    /// Every record of one pod, with its task state.
    pub async fn pod_containers(&self, uid: &str) -> Result<Vec<ContainerRecord>> {
        self.list_records(vec![labels::pod_filter(uid)]).await
    }

    /// Every record the agent manages, for rebuilding state on start.
    pub async fn all_containers(&self) -> Result<Vec<ContainerRecord>> {
        self.list_records(vec![labels::managed_filter()]).await
    }

    /// One listing, then the task of each record that can have one: a record whose exit
    /// is already written into its labels had its task deleted, so asking its shim again
    /// would only cost a call per dead container. The task lookups run concurrently.
    async fn list_records(&self, filters: Vec<String>) -> Result<Vec<ContainerRecord>> {
        let list = call(
            "list containers",
            filters.join(","),
            CALL_TIMEOUT,
            self.client()
                .containers()
                .list(self.req(ListContainersRequest { filters })),
        )
        .await?;
        let lookups = list.containers.into_iter().map(|c| async move {
            if c.labels.contains_key(labels::EXIT_CODE) || !is_managed(&c.labels) {
                return Ok((c, None));
            }
            let task = self.task(&c.id).await?.map(|p| TaskSnapshot {
                status: TaskStatus::try_from(p.status).unwrap_or(TaskStatus::Unknown),
                pid: p.pid,
                exit_status: p.exit_status,
                exited_at: p.exited_at.as_ref().and_then(ts_to_chrono),
            });
            Ok::<_, RuntimeError>((c, task))
        });
        let mut out = Vec::new();
        for found in futures::future::join_all(lookups).await {
            let (c, task) = found?;
            let created_at = c.created_at.as_ref().and_then(ts_to_chrono);
            let updated_at = c.updated_at.as_ref().and_then(ts_to_chrono);
            if let Some(r) = record_from(c.id, c.labels, &c.image, created_at, updated_at, task) {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// The task of a container, `None` when it has none.
    pub async fn task(&self, id: &str) -> Result<Option<containerd_client::types::v1::Process>> {
        let got = call(
            "get task",
            id,
            CALL_TIMEOUT,
            self.client().tasks().get(self.req(GetRequest {
                container_id: id.to_string(),
                exec_id: String::new(),
            })),
        )
        .await;
        match got {
            Ok(r) => Ok(r.process),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates the container record, then its snapshot. Idempotent: an existing record or
    /// snapshot with this id is kept. The record comes first because it is what holds the
    /// snapshot against containerd's garbage collector: a snapshot prepared before its
    /// container exists is unreferenced, and a GC pass in between (frequent when many pods
    /// start at once) removes it, so the task cannot be created.
    pub async fn create_container(&self, n: NewContainer<'_>) -> Result<()> {
        let l = n.record_labels();
        let spec = serde_json::to_vec(n.spec).map_err(|e| RuntimeError::Spec {
            container: n.name.to_string(),
            field: "spec".into(),
            reason: e.to_string(),
        })?;
        let created = call(
            "create container",
            n.id,
            CALL_TIMEOUT,
            self.client()
                .containers()
                .create(self.req(CreateContainerRequest {
                    container: Some(Container {
                        id: n.id.to_string(),
                        labels: l,
                        image: n.image.name.clone(),
                        runtime: Some(Runtime {
                            name: n.runtime.name.clone(),
                            options: n.runtime.options.clone(),
                        }),
                        spec: Some(Any {
                            type_url: SPEC_TYPE_URL.into(),
                            value: spec,
                        }),
                        snapshotter: SNAPSHOTTER.into(),
                        snapshot_key: n.id.to_string(),
                        ..Default::default()
                    }),
                })),
        )
        .await;
        match created {
            Ok(_) => {}
            Err(e) if e.is_already_exists() => {}
            Err(e) => return Err(e),
        }
        let prepare = call(
            "prepare snapshot",
            n.id,
            CALL_TIMEOUT,
            self.client()
                .snapshots()
                .prepare(self.req(PrepareSnapshotRequest {
                    snapshotter: SNAPSHOTTER.into(),
                    key: n.id.to_string(),
                    parent: n.image.chain_id.clone(),
                    labels: HashMap::new(),
                })),
        )
        .await;
        match prepare {
            Ok(_) => Ok(()),
            Err(e) if e.is_already_exists() => Ok(()),
            Err(e) => {
                // No record without its rootfs: the next attempt starts clean.
                let _ = call(
                    "delete container",
                    n.id,
                    CALL_TIMEOUT,
                    self.client()
                        .containers()
                        .delete(self.req(DeleteContainerRequest {
                            id: n.id.to_string(),
                        })),
                )
                .await;
                Err(e)
            }
        }
    }

    /// Creates and starts the container's task with the given stdio. Returns the task's pid.
    pub async fn start_task(&self, id: &str, io: &TaskIo) -> Result<u32> {
        let existing = self.task(id).await?;
        if let Some(p) = &existing {
            if TaskStatus::try_from(p.status) == Ok(TaskStatus::Running) {
                return Ok(p.pid);
            }
        }
        if existing.is_none() {
            let mounts = self.snapshot_mounts(id).await?;
            let (stdin, stdout, stderr, terminal) = io.create_fields();
            call(
                "create task",
                id,
                Duration::from_secs(120),
                self.client().tasks().create(self.req(CreateTaskRequest {
                    container_id: id.to_string(),
                    rootfs: mounts,
                    stdin,
                    stdout,
                    stderr,
                    terminal,
                    ..Default::default()
                })),
            )
            .await?;
        }
        call(
            "start task",
            id,
            Duration::from_secs(120),
            self.client().tasks().start(self.req(StartRequest {
                container_id: id.to_string(),
                exec_id: String::new(),
            })),
        )
        .await
        .map(|r| r.pid)
    }

    /// Resizes the terminal of a container's own process (`kubectl attach -t`).
    pub async fn resize_container_pty(&self, id: &str, size: TermSize) -> Result<()> {
        call(
            "resize pty",
            id,
            CALL_TIMEOUT,
            self.client().tasks().resize_pty(self.req(ResizePtyRequest {
                container_id: id.to_string(),
                exec_id: String::new(),
                width: u32::from(size.width),
                height: u32::from(size.height),
            })),
        )
        .await
        .map(|_| ())
    }

    /// Ends the stdin of a container's own process: the shim holds a write end of the
    /// stdin FIFO until told.
    pub async fn close_container_stdin(&self, id: &str) -> Result<()> {
        call(
            "close stdin",
            id,
            CALL_TIMEOUT,
            self.client().tasks().close_io(self.req(CloseIoRequest {
                container_id: id.to_string(),
                exec_id: String::new(),
                stdin: true,
            })),
        )
        .await
        .map(|_| ())
    }

    /// Opens the running container's own stdio for `kubectl attach`: through its io relay
    /// when it has one (stdin or tty); otherwise its output goes to the logger and the
    /// session carries nothing until the container stops. Upstream's message for a
    /// container that is not running.
    pub async fn attach_stdio(&self, id: &str, io: StdioRequest) -> Result<ProcessStdio> {
        let stdio_err = |reason: String| RuntimeError::Stdio {
            container: id.to_string(),
            reason,
        };
        self.require_running(id).await?;
        let socket = relay_dir(Path::new(RELAY_BASE_DIR), id).join(relay::SOCKET);
        if !tokio::fs::try_exists(&socket).await.unwrap_or(false) {
            let (containerd, id) = (self.clone(), id.to_string());
            let exited = async move {
                // A day per wait: the stream is cheap, and a containerd error ends the
                // session rather than leave it hanging.
                while let Ok(None) = containerd
                    .wait_exit(&id, Duration::from_secs(24 * 3600))
                    .await
                {}
            };
            return Ok(client::silent_until(io, exited));
        }
        let task = Arc::new(OwnProcess {
            containerd: self.clone(),
            id: id.to_string(),
        });
        let (stdio, _) = client::connect(&socket, io, task).await.map_err(|e| {
            stdio_err(format!(
                "connecting to its io relay {}: {e}",
                socket.display()
            ))
        })?;
        debug!(container_id = id, "attached");
        Ok(stdio)
    }

    /// Sets labels on a record (other labels are kept).
    pub async fn set_labels(&self, id: &str, set: HashMap<String, String>) -> Result<()> {
        let paths = set.keys().map(|k| format!("labels.{k}")).collect();
        call(
            "update container",
            id,
            CALL_TIMEOUT,
            self.client()
                .containers()
                .update(self.req(UpdateContainerRequest {
                    container: Some(Container {
                        id: id.to_string(),
                        labels: set,
                        ..Default::default()
                    }),
                    update_mask: Some(FieldMask { paths }),
                })),
        )
        .await
        .map(|_| ())
    }

    /// Resizes a running container in place, as containerd's CRI UpdateContainerResources:
    /// the task's cgroup first (runc update through the shim), then the record's spec and
    /// labels, so the next task of this record, and the agent after a restart, see what
    /// the container now has. A spec that cannot be read back is an error naming the
    /// container; the task's update stands either way.
    pub async fn update_resources(
        &self,
        id: &str,
        resources: &oci_spec::runtime::LinuxResources,
        labels: HashMap<String, String>,
    ) -> Result<()> {
        let spec_error = |reason: String| RuntimeError::Spec {
            container: id.to_string(),
            field: "linux.resources".into(),
            reason,
        };
        let value = serde_json::to_vec(resources).map_err(|e| spec_error(e.to_string()))?;
        call(
            "update task",
            id,
            CALL_TIMEOUT,
            self.client().tasks().update(self.req(UpdateTaskRequest {
                container_id: id.to_string(),
                resources: Some(Any {
                    type_url: RESOURCES_TYPE_URL.into(),
                    value,
                }),
                annotations: HashMap::new(),
            })),
        )
        .await?;
        let got = call(
            "get container",
            id,
            CALL_TIMEOUT,
            self.client()
                .containers()
                .get(self.req(GetContainerRequest { id: id.to_string() })),
        )
        .await?;
        let raw = got
            .container
            .and_then(|c| c.spec)
            .ok_or_else(|| spec_error("the record has no spec".into()))?;
        let mut spec: serde_json::Value =
            serde_json::from_slice(&raw.value).map_err(|e| spec_error(e.to_string()))?;
        let new = serde_json::to_value(resources).map_err(|e| spec_error(e.to_string()))?;
        // Only cpu and memory change: devices, pids and the rest stay as created.
        if let Some(res) = spec
            .pointer_mut("/linux/resources")
            .and_then(|r| r.as_object_mut())
        {
            for key in ["cpu", "memory"] {
                match new.get(key) {
                    Some(v) => res.insert(key.to_string(), v.clone()),
                    None => res.remove(key),
                };
            }
        }
        let value = serde_json::to_vec(&spec).map_err(|e| spec_error(e.to_string()))?;
        let mut paths: Vec<String> = labels.keys().map(|k| format!("labels.{k}")).collect();
        paths.push("spec".into());
        call(
            "update container",
            id,
            CALL_TIMEOUT,
            self.client()
                .containers()
                .update(self.req(UpdateContainerRequest {
                    container: Some(Container {
                        id: id.to_string(),
                        labels,
                        spec: Some(Any {
                            type_url: raw.type_url,
                            value,
                        }),
                        ..Default::default()
                    }),
                    update_mask: Some(FieldMask { paths }),
                })),
        )
        .await
        .map(|_| ())
    }

    /// Sends a signal to the task's init process. A missing task is not an error.
    pub async fn kill(&self, id: &str, signal: u32) -> Result<()> {
        let r = call(
            "kill task",
            id,
            CALL_TIMEOUT,
            self.client().tasks().kill(self.req(KillRequest {
                container_id: id.to_string(),
                exec_id: String::new(),
                signal,
                all: false,
            })),
        )
        .await;
        match r {
            Err(e) if e.is_not_found() => Ok(()),
            // containerd answers FailedPrecondition/NotFound-like errors for a process that
            // already exited; the caller only cares that it is not running.
            Err(RuntimeError::Call { status, .. })
                if status.message().contains("process already finished")
                    || status.message().contains("not found") =>
            {
                Ok(())
            }
            other => other.map(|_| ()),
        }
    }

    /// Waits up to `timeout` for the task to exit; `Some(exit status)` when it did.
    pub async fn wait_exit(&self, id: &str, timeout: Duration) -> Result<Option<u32>> {
        let mut tasks = self.client().tasks();
        let fut = tasks.wait(self.req(WaitRequest {
            container_id: id.to_string(),
            exec_id: String::new(),
        }));
        match tokio::time::timeout(timeout, fut).await {
            Ok(Ok(r)) => Ok(Some(r.into_inner().exit_status)),
            Ok(Err(status)) if status.code() == tonic::Code::NotFound => Ok(Some(0)),
            Ok(Err(status)) => Err(RuntimeError::Call {
                op: "wait task",
                object: id.to_string(),
                status: Box::new(status),
            }),
            Err(_) => Ok(None),
        }
    }

    /// Deletes an exited task (the record stays). Missing task: Ok.
    pub async fn delete_task(&self, id: &str) -> Result<()> {
        let r = call(
            "delete task",
            id,
            Duration::from_secs(60),
            self.client().tasks().delete(self.req(DeleteTaskRequest {
                container_id: id.to_string(),
            })),
        )
        .await;
        match r {
            Err(e) if e.is_not_found() => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Removes a container entirely: SIGKILL if still running, then task, record and
    /// snapshot. Every step tolerates an already-missing object.
    pub async fn remove_container(&self, id: &str) -> Result<()> {
        if let Some(p) = self.task(id).await? {
            if TaskStatus::try_from(p.status) != Ok(TaskStatus::Stopped) {
                self.kill(id, libc::SIGKILL as u32).await?;
                self.wait_exit(id, Duration::from_secs(10)).await?;
            }
            self.delete_task(id).await?;
        }
        let r = call(
            "delete container",
            id,
            CALL_TIMEOUT,
            self.client()
                .containers()
                .delete(self.req(DeleteContainerRequest { id: id.to_string() })),
        )
        .await;
        match r {
            Err(e) if !e.is_not_found() => return Err(e),
            _ => {}
        }
        self.remove_snapshot(id).await?;
        self.forget_exec_process(id);
        // An io relay normally removes its directory when the output ends; this covers a
        // relay that died or an agent that stopped between relay and task.
        remove_relay_dir(relay_dir(Path::new(RELAY_BASE_DIR), id)).await;
        debug!(container_id = id, "container removed");
        Ok(())
    }

    /// Removes a snapshot of the agent's snapshotter; one already gone is not an error.
    pub async fn remove_snapshot(&self, key: &str) -> Result<()> {
        let r = call(
            "remove snapshot",
            key,
            CALL_TIMEOUT,
            self.client()
                .snapshots()
                .remove(self.req(RemoveSnapshotRequest {
                    snapshotter: SNAPSHOTTER.into(),
                    key: key.to_string(),
                })),
        )
        .await;
        match r {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(()),
        }
    }
}

impl Containerd {
    /// The mounts of a container's rootfs snapshot (its key is the container id).
    async fn snapshot_mounts(&self, id: &str) -> Result<Vec<Mount>> {
        call(
            "snapshot mounts",
            id,
            CALL_TIMEOUT,
            self.client().snapshots().mounts(self.req(MountsRequest {
                snapshotter: SNAPSHOTTER.into(),
                key: id.to_string(),
            })),
        )
        .await
        .map(|r| r.mounts)
    }

    /// The writable layer of a container's snapshot (the overlay `upperdir`), for disk stats.
    pub async fn upper_dir(&self, id: &str) -> Option<std::path::PathBuf> {
        let mounts = self.snapshot_mounts(id).await.ok()?;
        mounts
            .iter()
            .flat_map(|m| m.options.iter())
            .find_map(|o| o.strip_prefix("upperdir="))
            .map(std::path::PathBuf::from)
    }
}

/// The container's own process, as an attach session drives it.
struct OwnProcess {
    containerd: Containerd,
    id: String,
}

#[async_trait::async_trait]
impl client::TaskIoControl for OwnProcess {
    async fn resize(&self, size: TermSize) -> Result<()> {
        self.containerd.resize_container_pty(&self.id, size).await
    }

    async fn close_stdin(&self) -> Result<()> {
        self.containerd.close_container_stdin(&self.id).await
    }
}

/// A fresh container id: 64 hex characters, as containerd's CRI plugin makes them.
pub fn new_container_id() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_signals_are_read_as_image_configs_write_them() {
        for (text, n) in [
            ("SIGQUIT", libc::SIGQUIT),
            ("quit", libc::SIGQUIT),
            ("SigInt", libc::SIGINT),
            ("9", libc::SIGKILL),
            (" SIGUSR1 ", libc::SIGUSR1),
            ("SIGRTMIN+3", libc::SIGRTMIN() + 3),
            ("RTMAX-1", libc::SIGRTMAX() - 1),
            ("SIGRTMIN", libc::SIGRTMIN()),
        ] {
            assert_eq!(parse_signal(text), Some(n as u32), "{text}");
        }
        for bad in ["", "0", "65", "SIGNOPE", "RTMIN+99", "-1"] {
            assert_eq!(parse_signal(bad), None, "{bad:?}");
        }
        let mut r = record(TaskStatus::Running, 1);
        assert_eq!(r.stop_signal(), libc::SIGTERM as u32, "no STOPSIGNAL");
        r.labels
            .insert(labels::STOP_SIGNAL.into(), "SIGWINCH".into());
        assert_eq!(r.stop_signal(), libc::SIGWINCH as u32);
        r.labels.insert(labels::STOP_SIGNAL.into(), "bogus".into());
        assert_eq!(r.stop_signal(), libc::SIGTERM as u32, "unreadable: SIGTERM");
    }

    fn record(status: TaskStatus, pid: u32) -> ContainerRecord {
        let l: HashMap<String, String> = [
            (labels::POD_NAME, "p"),
            (labels::POD_NAMESPACE, "default"),
            (labels::POD_UID, "u1"),
            (labels::CONTAINER_NAME, "c"),
            (labels::KIND, "app"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let task = TaskSnapshot {
            status,
            pid,
            exit_status: 0,
            exited_at: None,
        };
        record_from("id".into(), l, "img", None, None, Some(task)).expect("a managed record")
    }

    #[test]
    fn a_task_of_unknown_status_with_a_process_counts_as_running() {
        assert!(matches!(
            record(TaskStatus::Unknown, 42).state,
            State::Running { pid: 42, .. }
        ));
        assert!(matches!(
            record(TaskStatus::Unknown, 0).state,
            State::Created
        ));
        assert!(matches!(
            record(TaskStatus::Created, 42).state,
            State::Created
        ));
    }
}
