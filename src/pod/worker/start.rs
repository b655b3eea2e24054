//! Starting one container: its image under the pull policy, its OCI spec, the record and
//! task, the log path and link, and the postStart hook. A failure becomes the container's
//! waiting reason with upstream's words (ErrImagePull, CreateContainerConfigError,
//! CreateContainerError, RunContainerError, PostStartHookError).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use tracing::{debug, info, warn};

use super::{blocking, events, Sandbox, Worker, POST_START_TIMEOUT};
use crate::config::format_duration;
use crate::events::EventType;
use crate::logs;
use crate::objects::{ClusterObjects, ObjectError};
use crate::pod::qos::{oom_score_adj, qos_class};
use crate::pod::status::Waiting;
use crate::prober;
use crate::runtime::containers::{format_time, new_container_id, NewContainer};
use crate::runtime::images::ImageInfo;
use crate::runtime::labels::{self, Kind};
use crate::runtime::pull::credentials::{parse_docker_config, CredentialError, RegistryCredential};
use crate::runtime::spec;
use crate::runtime::RuntimeError;
use crate::volume;

impl Worker {
    /// Creates and starts one container; failures become the container's waiting reason.
    pub(super) async fn start(
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
                    self.started_after(c, f);
                }
                info!(pod = %self.pod_ref.display(), container = %c.name, container_id = %id, attempt, "container started");
            }
            Err(w) => {
                if let Some(msg) = failed_event_message(&w) {
                    self.container_event(
                        pod,
                        kind,
                        &c.name,
                        EventType::Warning,
                        events::FAILED,
                        msg,
                    );
                }
                if self.waiting.get(&c.name) != Some(&w) {
                    warn!(pod = %self.pod_ref.display(), container = %c.name, reason = %w.reason, message = %w.message, "container not started");
                }
                self.waiting.insert(c.name.clone(), w);
            }
        }
    }

    /// The image for a container under its pull policy, as upstream: Never uses only what
    /// the runtime has, IfNotPresent pulls when it is missing, Always checks the registry
    /// (a pull of an image that is already complete costs only the manifest check). A
    /// failed pull is ErrImagePull, then ImagePullBackOff until its back-off ends.
    async fn resolve_image(
        &mut self,
        pod: &Pod,
        c: &Container,
        kind: Kind,
    ) -> Result<ImageInfo, Waiting> {
        let image = c.image.clone().unwrap_or_default();
        // The recorder and the field path, not `self`: the pull below updates the worker.
        let (recorder, path) = (
            self.shared.recorder.clone(),
            events::field_path(kind, &c.name),
        );
        let event = |t: EventType, reason: &str, msg: String| {
            recorder.pod(pod, path.as_deref(), t, reason, msg)
        };
        let pull_policy = c.image_pull_policy.as_deref().unwrap_or("IfNotPresent");
        if pull_policy != "Always" {
            match self.shared.rt.resolve_image(&image).await {
                Ok(i) => {
                    let msg = format!("Container image \"{image}\" already present on machine");
                    info!(pod = %self.pod_ref.display(), container = %c.name, image = %image, "{msg}");
                    event(EventType::Normal, events::PULLED, msg);
                    return Ok(i);
                }
                Err(RuntimeError::ImageNotFound(_)) if pull_policy == "Never" => {
                    let msg = format!(
                        "Container image \"{image}\" is not present with pull policy of Never"
                    );
                    event(
                        EventType::Warning,
                        events::ERR_IMAGE_NEVER_PULL,
                        msg.clone(),
                    );
                    return Err(Waiting::new("ErrImageNeverPull", msg));
                }
                Err(RuntimeError::ImageNotFound(_)) => {}
                Err(e) => return Err(Waiting::new("ErrImagePull", e.to_string())),
            }
        }
        let key = format!("{}/image/{}", self.pod_ref.uid, c.name);
        let now = Utc::now();
        if let Some(last) = self.image_failures.get(&key) {
            if let Some(wait) = self.backoff.in_backoff(&key, last.0, now) {
                event(
                    EventType::Normal,
                    events::BACK_OFF,
                    format!("Back-off pulling image \"{image}\""),
                );
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
        event(
            EventType::Normal,
            events::PULLING,
            format!("Pulling image \"{image}\""),
        );
        let creds = match self.pull_credentials(pod).await {
            Ok(creds) => creds,
            Err(e) => {
                // As upstream, whose keyring refuses a pull secret that is not JSON.
                let msg = e.to_string();
                event(
                    EventType::Warning,
                    events::FAILED,
                    format!("Failed to pull image \"{image}\": {msg}"),
                );
                return Err(Waiting::new("ErrImagePull", msg));
            }
        };
        let asked = std::time::Instant::now();
        match self.shared.rt.pull_image(&image, &creds).await {
            Ok(out) => {
                self.image_failures.remove(&key);
                // Upstream's wording, also when the registry had nothing new (upstream's
                // pull then costs only the manifest check too, and says the same).
                let waited = asked.elapsed().max(out.duration);
                let msg = format!(
                    "Successfully pulled image \"{image}\" in {} ({} including waiting). Image size: {} bytes.",
                    format_duration(out.duration),
                    format_duration(waited),
                    out.size
                );
                event(EventType::Normal, events::PULLED, msg.clone());
                if out.pulled {
                    info!(pod = %self.pod_ref.display(), container = %c.name, image = %image,
                          size_bytes = out.size, fetched_bytes = out.bytes,
                          seconds = out.duration.as_secs_f64(), "{msg}");
                } else {
                    debug!(pod = %self.pod_ref.display(), container = %c.name, image = %image,
                           "image up to date with the registry");
                }
                Ok(out.image)
            }
            Err(e) => {
                let msg = e.to_string();
                event(
                    EventType::Warning,
                    events::FAILED,
                    format!("Failed to pull image \"{image}\": {msg}"),
                );
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
        let image = self.resolve_image(pod, c, kind).await?;
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
        let env_objects = self.env_objects(c).await;
        let env = spec::container_env(pod, c, &image.config, &ctx, &env_objects)
            .map_err(|e| config_error(e.to_string()))?;
        // Mount sources are resolved on the host (subPath directories made, symlinks
        // checked): file-system work, off the async runtime.
        let mounts = match sandbox.volumes.clone() {
            Some(v) => {
                let (container, env) = (c.clone(), env.clone());
                blocking(move || volume::container_mounts(&container, &v, &env))
                    .await
                    .map_err(|e| Waiting::new(e.waiting_reason(), e.to_string()))?
            }
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

        let cfg = self.shared.cfg.clone();
        let log_dir = self.log_dir();
        let log_path = logs::container_log_path(&log_dir, &c.name, attempt);
        if let Some(parent) = log_path.parent().map(|p| p.to_path_buf()) {
            let made = {
                let p = parent.clone();
                blocking(move || std::fs::create_dir_all(p)).await
            };
            made.map_err(|e| {
                Waiting::new(
                    "CreateContainerError",
                    format!("cannot create log directory {}: {e}", parent.display()),
                )
            })?;
        }
        let extra = HashMap::from([
            (labels::LOG_PATH.to_string(), log_path.display().to_string()),
            (labels::CGROUP_PARENT.to_string(), ctx.cgroup_parent.clone()),
            (
                labels::CONTAINER_HASH.to_string(),
                labels::container_hash(c),
            ),
        ]);
        let new = NewContainer {
            id: &id,
            pod: &self.pod_ref,
            kind,
            name: &c.name,
            attempt,
            image: &image,
            image_spec: c.image.as_deref().unwrap_or_default(),
            spec: &oci,
            extra_labels: extra,
        };
        rt.create_container(new.clone())
            .await
            .map_err(|e| Waiting::new("CreateContainerError", e.to_string()))?;
        self.container_event(
            pod,
            kind,
            &c.name,
            EventType::Normal,
            events::CREATED,
            format!("Created container: {}", c.name),
        );
        let mut record = new.as_record(None);

        let uri = logs::logger_uri(
            &self.shared.exe,
            &log_path,
            cfg.container_log_max_size,
            cfg.container_log_max_files,
        );
        let started = Utc::now();
        let pid = match rt.start_task(&id, &uri).await {
            Ok(pid) => pid,
            Err(e) => {
                // As upstream with containerd: the container is dead with StartError / 128,
                // and the pod shows RunContainerError until the next try.
                let msg = e.to_string();
                let _ = rt.delete_task(&id).await;
                let set = HashMap::from([
                    (labels::EXIT_CODE.to_string(), "128".to_string()),
                    (labels::REASON.to_string(), "StartError".to_string()),
                    (labels::MESSAGE.to_string(), msg.clone()),
                    (labels::STARTED_AT.to_string(), format_time(started)),
                    (labels::FINISHED_AT.to_string(), format_time(Utc::now())),
                ]);
                match rt.set_labels(&id, set.clone()).await {
                    Ok(()) => {
                        let mut labels = record.labels.clone();
                        labels.extend(set);
                        record = new_with_labels(&record, labels);
                    }
                    Err(e2) => debug!(error = %e2, "cannot record start failure"),
                }
                self.remember(record);
                return Err(Waiting::new("RunContainerError", msg));
            }
        };
        self.container_event(
            pod,
            kind,
            &c.name,
            EventType::Normal,
            events::STARTED,
            format!("Started container {}", c.name),
        );
        let started_label = HashMap::from([(labels::STARTED_AT.to_string(), format_time(started))]);
        if rt.set_labels(&id, started_label.clone()).await.is_ok() {
            record.labels.extend(started_label);
        }
        record.state = crate::runtime::containers::State::Running {
            pid,
            started_at: Some(started),
        };
        self.remember(record);
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let target = self.probe_target(c, &id, &sandbox.ips);
            let exec: std::sync::Arc<dyn prober::ExecRunner> = rt.clone();
            if let Err(msg) =
                prober::run_handler(hook, &target, exec.as_ref(), POST_START_TIMEOUT).await
            {
                // As upstream: the container is killed and the pod shows PostStartHookError.
                warn!(pod = %self.pod_ref.display(), container = %c.name, reason = events::FAILED_POST_START_HOOK, message = %msg, "postStart hook failed; killing container");
                // As upstream, the hook's output stays out of the event (it may hold
                // secrets), and the kill says why.
                let warn = |reason: &str, msg: &str| {
                    (EventType::Warning, reason.to_string(), msg.to_string())
                };
                for (t, reason, msg) in [
                    warn(events::FAILED_POST_START_HOOK, "PostStartHook failed"),
                    (
                        EventType::Normal,
                        events::KILLING.to_string(),
                        events::FAILED_POST_START_HOOK.to_string(),
                    ),
                ] {
                    self.container_event(pod, kind, &c.name, t, &reason, msg);
                }
                let text = format!("FailedPostStartHook: {msg}");
                let message = HashMap::from([(labels::MESSAGE.to_string(), text.clone())]);
                if rt.set_labels(&id, message.clone()).await.is_ok() {
                    self.label_record(&id, message);
                }
                let _ = rt.kill(&id, libc::SIGKILL as u32).await;
                if let Ok(Some(code)) = rt.wait_exit(&id, Duration::from_secs(10)).await {
                    self.saw_exit(&id, code);
                }
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
        blocking(move || {
            if let Some(parent) = link.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let _ = std::fs::remove_file(&link);
            let _ = std::os::unix::fs::symlink(&log_path, &link);
        })
        .await;
        Ok(id)
    }

    /// The ConfigMaps and Secrets the container's env and envFrom refer to. What cannot be
    /// read is kept as its error: `container_env` decides, in upstream's order, whether it
    /// matters (an optional reference to a missing object does not).
    async fn env_objects(&self, c: &Container) -> spec::EnvObjects {
        let refs = spec::env_references(c);
        let (objects, ns) = (&self.shared.objects, &self.pod_ref.namespace);
        let mut out = spec::EnvObjects::default();
        for name in &refs.config_maps {
            out.insert_config_map(name, objects.config_map(ns, name).await);
        }
        for name in &refs.secrets {
            out.insert_secret(name, objects.secret(ns, name).await);
        }
        out
    }

    /// The pod's imagePullSecrets as registry credentials, in the pod's order (the puller
    /// tries them before the node's own). A secret that cannot be read is left out with
    /// upstream's warning and the pull goes on without it.
    async fn pull_credentials(
        &self,
        pod: &Pod,
    ) -> Result<Vec<RegistryCredential>, CredentialError> {
        let (secrets, missing) = pull_secrets(self.shared.objects.as_ref(), pod).await;
        if !missing.is_empty() {
            let names: Vec<&str> = missing.iter().map(|(n, _)| n.as_str()).collect();
            for (name, e) in &missing {
                info!(pod = %self.pod_ref.display(), secret = %name, error = %e,
                      "Unable to retrieve pull secret, the image pull may not succeed.");
            }
            self.shared.recorder.pod(
                pod,
                None,
                EventType::Warning,
                FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET,
                format!(
                    "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                    names.join(", ")
                ),
            );
        }
        let mut creds = Vec::new();
        for s in &secrets {
            creds.extend(secret_credentials(s)?);
        }
        Ok(creds)
    }

    /// Adds a record this pass made to its view.
    fn remember(&mut self, record: crate::runtime::containers::ContainerRecord) {
        if let Some(v) = self.view.as_mut() {
            v.retain(|r| r.id != record.id);
            v.push(record);
        }
    }

    /// Labels this pass wrote on a record, mirrored in its view.
    pub(super) fn label_record(&mut self, id: &str, set: HashMap<String, String>) {
        if let Some(r) = self
            .view
            .as_mut()
            .and_then(|v| v.iter_mut().find(|r| r.id == id))
        {
            r.labels.extend(set);
        }
    }
}

/// The record with these labels and no task, as a listing shows a container whose end is
/// written into its labels.
fn new_with_labels(
    r: &crate::runtime::containers::ContainerRecord,
    labels: HashMap<String, String>,
) -> crate::runtime::containers::ContainerRecord {
    crate::runtime::containers::record_from(
        r.id.clone(),
        labels,
        &r.image,
        r.created_at,
        r.created_at,
        None,
    )
    .unwrap_or_else(|| r.clone())
}

/// Upstream's event reason for imagePullSecrets it could not read.
const FAILED_TO_RETRIEVE_IMAGE_PULL_SECRET: &str = "FailedToRetrieveImagePullSecret";

/// The pod's imagePullSecrets that could be read, in the pod's order, and the names of
/// those that could not with why. Entries without a name are skipped, as upstream (the API
/// once let them through).
async fn pull_secrets(
    objects: &dyn ClusterObjects,
    pod: &Pod,
) -> (Vec<Arc<Secret>>, Vec<(String, ObjectError)>) {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let refs = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref());
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    for r in refs.into_iter().flatten().filter(|r| !r.name.is_empty()) {
        match objects.secret(ns, &r.name).await {
            Ok(s) => found.push(s),
            Err(e) => missing.push((r.name.clone(), e)),
        }
    }
    (found, missing)
}

/// The registry credentials in a pull secret: `.dockerconfigjson` of a
/// kubernetes.io/dockerconfigjson secret or `.dockercfg` of a kubernetes.io/dockercfg one.
/// Other secrets, and these with the key missing or empty, hold none (as upstream).
fn secret_credentials(s: &Secret) -> Result<Vec<RegistryCredential>, CredentialError> {
    let key = match s.type_.as_deref() {
        Some("kubernetes.io/dockerconfigjson") => ".dockerconfigjson",
        Some("kubernetes.io/dockercfg") => ".dockercfg",
        _ => return Ok(Vec::new()),
    };
    match s.data.as_ref().and_then(|d| d.get(key)) {
        Some(bytes) if !bytes.0.is_empty() => {
            let source = format!(
                "secret {}/{}",
                s.metadata.namespace.as_deref().unwrap_or_default(),
                s.metadata.name.as_deref().unwrap_or_default()
            );
            parse_docker_config(&bytes.0, &source)
        }
        _ => Ok(Vec::new()),
    }
}

/// The message of upstream's "Failed" event for a container that could not be created or
/// started: the image errors by their reason ("Error: ErrImagePull"), others by their
/// message. A failed postStart hook has its own events.
fn failed_event_message(w: &Waiting) -> Option<String> {
    match w.reason.as_str() {
        "PostStartHookError" => None,
        "ErrImagePull" | "ImagePullBackOff" | "ErrImageNeverPull" => {
            Some(format!("Error: {}", w.reason))
        }
        _ => Some(format!("Error: {}", w.message)),
    }
}
