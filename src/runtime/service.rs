//! The runtime seam: what pods, probes and hooks ask of the container runtime, as one
//! CRI-shaped trait. `ContainerdRuntime` implements it over containerd's native API (with
//! the registry puller beside it, since containerd 1.6 has no server-side pull); the
//! in-memory fake in `runtime::fake` implements it for unit tests of the pod worker and
//! manager, which script containers that exit, fail to start, are OOM-killed or vanish,
//! and calls that time out.
//!
//! The operations stay at the granularity the agent uses: a pod sandbox is a container
//! record of kind `Sandbox` (the pause process that holds the pod's namespaces), so one
//! set of container calls serves sandboxes and containers alike.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::accounts::Accounts;
use super::containers::{ContainerRecord, NewContainer, TaskIo};
use super::exec::{ExecError, ExecRunner};
use super::image_store::ListedImage;
use super::images::ImageInfo;
use super::pull::{PullError, PullOutcome, Puller, RegistryCredential};
use super::stdio::{ProcessStdio, StdioRequest};
use super::{Containerd, Result};

/// The container runtime as the agent's pod workers see it. Every call has a deadline in
/// the implementation, so no call can hold a worker forever. Its exec half is the
/// `ExecRunner` the prober and the lifecycle hooks use (an `Arc<dyn Runtime>` coerces to
/// `Arc<dyn ExecRunner>`).
#[async_trait]
pub trait Runtime: ExecRunner {
    // Containers and sandboxes.

    /// Every record of one pod, with its task state, in one listing.
    async fn pod_containers(&self, pod_uid: &str) -> Result<Vec<ContainerRecord>>;
    /// Every record the agent manages (state recovery at start).
    async fn all_containers(&self) -> Result<Vec<ContainerRecord>>;
    /// Creates the record (and its rootfs); idempotent for an existing id.
    async fn create_container(&self, new: NewContainer<'_>) -> Result<()>;
    /// Creates and starts the container's task with the given stdio; returns its pid.
    async fn start_task(&self, id: &str, io: &TaskIo) -> Result<u32>;
    /// Merges labels into the record (how a dead container's end is remembered).
    async fn set_labels(&self, id: &str, set: HashMap<String, String>) -> Result<()>;
    /// Signals the task; a task or container already gone is success.
    async fn kill(&self, id: &str, signal: u32) -> Result<()>;
    /// Waits up to `timeout` for the task to exit: `Some(status)` when it did (or had),
    /// `None` when it still runs.
    async fn wait_exit(&self, id: &str, timeout: Duration) -> Result<Option<u32>>;
    /// Deletes the (exited) task; the record stays.
    async fn delete_task(&self, id: &str) -> Result<()>;
    /// Removes the record, its task and its rootfs; gone already is success.
    async fn remove_container(&self, id: &str) -> Result<()>;
    /// Changes the cgroup resources of a running container in place (an in-place pod
    /// resize), then writes them into the record's spec with `labels`, so a restart of the
    /// task, or of the agent, keeps them.
    async fn update_resources(
        &self,
        id: &str,
        resources: &oci_spec::runtime::LinuxResources,
        labels: HashMap<String, String>,
    ) -> Result<()>;
    /// The container's writable layer on the host, for the stats collector's rootfs usage.
    async fn upper_dir(&self, id: &str) -> Option<PathBuf>;

    // Images.

    /// The image as the runtime holds it; `RuntimeError::ImageNotFound` when it has none.
    async fn resolve_image(&self, image: &str) -> Result<ImageInfo>;
    /// Pulls (or confirms against the registry) an image with the pod's pull credentials.
    async fn pull_image(
        &self,
        image: &str,
        creds: &[RegistryCredential],
    ) -> std::result::Result<PullOutcome, PullError>;
    /// The users and groups the image defines (its /etc/passwd and /etc/group).
    async fn image_accounts(&self, image: &ImageInfo) -> Result<Arc<Accounts>>;

    // The image store, for image GC.

    /// Every image name with the digest of its target.
    async fn list_images(&self) -> Result<Vec<ListedImage>>;
    /// The image of every container record, running or dead, the agent's or not.
    async fn container_images(&self) -> Result<Vec<String>>;
    /// Bytes of an image's content.
    async fn image_size(&self, digest: &str) -> Result<u64>;
    /// Removes the image with this digest under all its names, returning once its content
    /// is freed.
    async fn remove_image(&self, digest: &str, names: &[String]) -> Result<()>;

    // Streams to a client (exec, attach).

    /// Starts `cmd` in the running container `container_id` with the requested stdio
    /// (`kubectl exec`). Returns once the process started; a process that cannot start
    /// (binary not found) is an error.
    async fn exec_stdio(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        io: StdioRequest,
    ) -> Result<ProcessStdio>;
    /// Attaches to the running container's own stdio (`kubectl attach`).
    async fn attach_stdio(&self, container_id: &str, io: StdioRequest) -> Result<ProcessStdio>;
}

/// containerd over its native gRPC API, with the registry puller for images it lacks.
#[derive(Clone)]
pub struct ContainerdRuntime {
    pub containerd: Containerd,
    pub puller: Puller,
}

impl ExecRunner for ContainerdRuntime {
    fn exec(
        &self,
        container_id: String,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> futures::future::BoxFuture<'static, std::result::Result<super::exec::ExecResult, ExecError>>
    {
        self.containerd.exec(container_id, cmd, timeout)
    }
}

#[async_trait]
impl Runtime for ContainerdRuntime {
    async fn pod_containers(&self, pod_uid: &str) -> Result<Vec<ContainerRecord>> {
        self.containerd.pod_containers(pod_uid).await
    }

    async fn all_containers(&self) -> Result<Vec<ContainerRecord>> {
        self.containerd.all_containers().await
    }

    async fn create_container(&self, new: NewContainer<'_>) -> Result<()> {
        self.containerd.create_container(new).await
    }

    async fn start_task(&self, id: &str, io: &TaskIo) -> Result<u32> {
        self.containerd.start_task(id, io).await
    }

    async fn set_labels(&self, id: &str, set: HashMap<String, String>) -> Result<()> {
        self.containerd.set_labels(id, set).await
    }

    async fn kill(&self, id: &str, signal: u32) -> Result<()> {
        self.containerd.kill(id, signal).await
    }

    async fn wait_exit(&self, id: &str, timeout: Duration) -> Result<Option<u32>> {
        self.containerd.wait_exit(id, timeout).await
    }

    async fn delete_task(&self, id: &str) -> Result<()> {
        self.containerd.delete_task(id).await
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        self.containerd.remove_container(id).await
    }

    async fn update_resources(
        &self,
        id: &str,
        resources: &oci_spec::runtime::LinuxResources,
        labels: HashMap<String, String>,
    ) -> Result<()> {
        self.containerd
            .update_resources(id, resources, labels)
            .await
    }

    async fn upper_dir(&self, id: &str) -> Option<PathBuf> {
        self.containerd.upper_dir(id).await
    }

    async fn resolve_image(&self, image: &str) -> Result<ImageInfo> {
        self.containerd.resolve_image(image).await
    }

    async fn pull_image(
        &self,
        image: &str,
        creds: &[RegistryCredential],
    ) -> std::result::Result<PullOutcome, PullError> {
        self.puller.pull(image, creds).await
    }

    async fn image_accounts(&self, image: &ImageInfo) -> Result<Arc<Accounts>> {
        self.containerd.image_accounts(image).await
    }

    async fn list_images(&self) -> Result<Vec<ListedImage>> {
        self.containerd.list_images().await
    }

    async fn container_images(&self) -> Result<Vec<String>> {
        self.containerd.container_images().await
    }

    async fn image_size(&self, digest: &str) -> Result<u64> {
        self.containerd.image_size(digest).await
    }

    async fn remove_image(&self, digest: &str, names: &[String]) -> Result<()> {
        self.containerd.remove_image(digest, names).await
    }

    async fn exec_stdio(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        io: StdioRequest,
    ) -> Result<ProcessStdio> {
        self.containerd.exec_stdio(container_id, cmd, io).await
    }

    async fn attach_stdio(&self, container_id: &str, io: StdioRequest) -> Result<ProcessStdio> {
        self.containerd.attach_stdio(container_id, io).await
    }
}
