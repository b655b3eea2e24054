//! Starting one container: its image under the pull policy, its OCI spec, the record and
//! task, the log path and link, and the postStart hook. A failure becomes the container's
//! waiting reason with upstream's words (ErrImagePull, CreateContainerConfigError,
//! CreateContainerError, RunContainerError, PostStartHookError).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use tracing::{debug, info, warn};

use super::{blocking, events, Sandbox, Worker, POST_START_TIMEOUT};
use crate::config::format_duration;
use crate::events::EventType;
use crate::logs;
use crate::objects::{ClusterObjects, ObjectError, ServicesWait};
use crate::pod::ephemeral;
use crate::pod::qos::container_oom_score_adj;
use crate::pod::spec::{self, seccomp};
use crate::pod::status::Waiting;
use crate::prober;
use crate::runtime::attach::{self, RelayConfig};
use crate::runtime::containers::{format_time, new_container_id, NewContainer, TaskIo};
use crate::runtime::images::ImageInfo;
use crate::runtime::labels::{self, Kind};
use crate::runtime::pull::credentials::{parse_docker_config, CredentialError, RegistryCredential};
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
        let metric_kind = match kind {
            Kind::Init => crate::metrics::ContainerType::InitContainer,
            Kind::Ephemeral => crate::metrics::ContainerType::EphemeralContainer,
            Kind::App | Kind::Sandbox => crate::metrics::ContainerType::Container,
        };
        crate::metrics::container_started(metric_kind);
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
                crate::metrics::container_start_failed(metric_kind, &w.reason);
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
        self.yield_start_slot();
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

    /// The container's seccomp filter: the kubelet's choice (a bad field is the
    /// container's config error), then the runtime's (a Localhost profile it cannot read or
    /// decode fails the create, in containerd's words).
    async fn set_seccomp(
        &self,
        pod: &Pod,
        c: &Container,
        id: &str,
        oci: &mut oci_spec::runtime::Spec,
    ) -> Result<(), Waiting> {
        let cfg = &self.shared.cfg;
        let settings = seccomp::Settings::new(&cfg.root_dir, cfg.seccomp_default);
        let privileged = c
            .security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false);
        let failed = |e: seccomp::SeccompError| {
            warn!(pod = %self.pod_ref.display(), container = %c.name, error = %e,
                  "seccomp profile refused");
            if e.from_runtime() {
                Waiting::new(
                    "CreateContainerError",
                    format!(
                        "failed to generate container {id:?} spec: failed to generate spec: {e}"
                    ),
                )
            } else {
                Waiting::new("CreateContainerConfigError", e.to_string())
            }
        };
        let choice = seccomp::choose(pod, Some(c), &settings).map_err(failed)?;
        let loaded = blocking(move || seccomp::load(&choice, privileged))
            .await
            .map_err(failed)?;
        seccomp::apply(oci, &loaded).map_err(failed)
    }

    /// The container's AppArmor profile on an AppArmor host (`spec::apparmor`): a request
    /// that names no valid profile is the container's config error; a Localhost profile the
    /// kernel lacks, or a default profile that cannot be loaded, fails the create.
    async fn set_apparmor(
        &self,
        pod: &Pod,
        c: &Container,
        oci: &mut oci_spec::runtime::Spec,
    ) -> Result<(), Waiting> {
        use spec::apparmor;
        let requested = apparmor::requested(pod, &c.name)
            .map_err(|e| Waiting::new("CreateContainerConfigError", e.to_string()))?;
        let privileged = c
            .security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false);
        let disabled = self.shared.handlers.apparmor_disabled();
        let profile =
            blocking(move || apparmor::profile_on_host(requested.as_ref(), privileged, disabled))
                .await
                .map_err(|e| {
                    warn!(pod = %self.pod_ref.display(), container = %c.name, error = %e,
                      "AppArmor profile refused");
                    Waiting::new("CreateContainerError", e.to_string())
                })?;
        apparmor::apply(oci, profile);
        Ok(())
    }

    /// The sandbox's (`c` None) or a container's SELinux labels where the host has SELinux
    /// on; where it is off, options asked for are left out, as containerd leaves them, and
    /// said so once per pod in an event (containerd says nothing).
    pub(super) fn set_selinux(
        &mut self,
        pod: &Pod,
        c: Option<&Container>,
        oci: &mut oci_spec::runtime::Spec,
    ) {
        use spec::selinux::{self, Decision};
        // containerd labels only with its CRI plugin's enable_selinux (off by default).
        let host = selinux::host().filter(|_| self.shared.handlers.selinux_enabled());
        match selinux::decide(host, pod, c) {
            Decision::Apply(labels) => selinux::apply(oci, &labels),
            Decision::NotApplied if !self.selinux_not_applied_said => {
                self.selinux_not_applied_said = true;
                let what = c.map_or("the pod".to_string(), |c| format!("container {:?}", c.name));
                warn!(pod = %self.pod_ref.display(), container = c.map_or("", |c| c.name.as_str()),
                      "seLinuxOptions not applied: SELinux is off on the host or in containerd's config");
                self.pod_event(
                    pod,
                    EventType::Warning,
                    events::SELINUX_OPTIONS_NOT_APPLIED,
                    format!(
                        "seLinuxOptions of {what} are not applied: SELinux is not enabled on this node (or containerd's enable_selinux is off); the pod runs without the labels, as with containerd"
                    ),
                );
            }
            Decision::NotApplied | Decision::Nothing => {}
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
        // The sandbox's UTS hostname, which containerd's CRI plugin also gives every
        // container as $HOSTNAME (scripts such as a StatefulSet's read their ordinal there).
        let cfg = &self.shared.cfg;
        let hostname = super::sandbox::sandbox_hostnames(pod, &cfg.node_name, &cfg.cluster_domain)
            .map(|(_, uts)| uts)
            .unwrap_or_default();
        let mut ctx =
            self.pod_context(pod, &sandbox.id, None, sandbox.pid, &sandbox.ips, &hostname);
        ctx.oom_score_adj = container_oom_score_adj(pod, c, self.shared.memory_capacity);
        if kind == Kind::Ephemeral {
            ctx.target_pid = self.target_pid(pod, &c.name)?;
        }
        let config_error = |e: String| Waiting::new("CreateContainerConfigError", e);
        let env_objects = self.env_objects(pod, c).await;
        let env = spec::container_env(pod, c, &image.config, &ctx, &env_objects)
            .map_err(|e| config_error(e.to_string()))?;
        // Mount sources are resolved on the host (subPath directories made, symlinks
        // checked): file-system work, off the async runtime.
        let (mut mounts, devices) = match sandbox.volumes.clone() {
            Some(v) => {
                let (container, env) = (c.clone(), env.clone());
                blocking(move || {
                    Ok::<_, volume::VolumeError>((
                        volume::container_mounts(&container, &v, &env)?,
                        volume::container_devices(&container, &v)?,
                    ))
                })
                .await
                .map_err(|e| Waiting::new(e.waiting_reason(), e.to_string()))?
            }
            None => (Vec::new(), Vec::new()),
        };
        // The instance's termination message file, after the volume mounts (as upstream).
        let message_file = match c
            .termination_message_path
            .as_deref()
            .filter(|p| !p.is_empty())
        {
            Some(dest) => {
                let (dir, name) = (self.pod_dir().dir, c.name.clone());
                let tag = new_container_id()[..8].to_string();
                let made = blocking(move || {
                    crate::pod::termination_message::create_file(&dir, &name, &tag)
                })
                .await
                .map_err(|e| {
                    Waiting::new(
                        "CreateContainerError",
                        format!("cannot create the termination message file: {e}"),
                    )
                })?;
                let mount = spec::bind_mount(dest, &made, &["rw"])
                    .map_err(|e| config_error(e.to_string()))?;
                mounts.push(mount);
                Some(made)
            }
            None => None,
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
        // The sandbox's runtime, looked up again by its handler as containerd's CRI plugin
        // does for each container (a handler removed from the config since fails here).
        let runtime = self
            .shared
            .handlers
            .resolve(&sandbox.handler)
            .map_err(|e| Waiting::new("CreateContainerError", e.to_string()))?
            .clone();
        let privileged = c
            .security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false);
        // The raw block volumes' devices, then a privileged container's host devices (as
        // its runtime says), resolved on the host as containerd's CRI resolves a container's
        // devices (a device that cannot be read fails its CreateContainer).
        if privileged || !devices.is_empty() {
            let (name, spec, policy) = (c.name.clone(), oci, runtime.privileged_devices);
            oci = blocking(move || -> Result<_, crate::runtime::RuntimeError> {
                let mut spec = spec;
                // The container's own devices first, as containerd: a host node of the same
                // path never replaces a volume's device.
                spec::add_devices(&mut spec, &name, &devices)?;
                if privileged {
                    spec::set_privileged_devices(&mut spec, &name, policy, Path::new("/dev"))?;
                }
                Ok(spec)
            })
            .await
            .map_err(|e| Waiting::new("CreateContainerError", e.to_string()))?;
        }
        let id = new_container_id();
        self.set_seccomp(pod, c, &id, &mut oci).await?;
        self.set_selinux(pod, Some(c), &mut oci);
        self.set_apparmor(pod, c, &mut oci).await?;
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
        let mut extra = HashMap::from([
            (labels::LOG_PATH.to_string(), log_path.display().to_string()),
            (labels::CGROUP_PARENT.to_string(), ctx.cgroup_parent.clone()),
            (
                labels::CONTAINER_HASH.to_string(),
                labels::container_hash(c),
            ),
        ]);
        extra.insert(
            labels::RESOURCES.to_string(),
            crate::pod::worker::resize::resources_label(c),
        );
        if let Some(file) = &message_file {
            extra.insert(
                labels::TERMINATION_MESSAGE_FILE.to_string(),
                file.display().to_string(),
            );
        }
        if let Some(policy) = c.termination_message_policy.clone() {
            extra.insert(labels::TERMINATION_MESSAGE_POLICY.to_string(), policy);
        }
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
            runtime,
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

        let relay = attach::needs_relay(c).then(|| RelayConfig {
            dir: attach::relay_dir(Path::new(attach::RELAY_BASE_DIR), &id),
            log_path: log_path.clone(),
            rotation: logs::RotationPolicy {
                max_size: cfg.container_log_max_size,
                max_files: cfg.container_log_max_files,
            },
            container: attach::protocol::Container {
                stdin: c.stdin == Some(true),
                tty: c.tty == Some(true),
                stdin_once: c.stdin_once == Some(true),
            },
        });
        let started = Utc::now();
        let task = match &relay {
            // A container with stdin or a terminal gets FIFOs that its io relay holds for
            // its whole life (containerd 1.6 drops stdin with the logger's binary IO).
            Some(config) => match attach::spawn::start_relay(&self.shared.exe, config).await {
                Ok(fifos) => rt.start_task(&id, &TaskIo::Fifos(fifos)).await,
                Err(e) => Err(RuntimeError::Stdio {
                    container: c.name.clone(),
                    reason: e.to_string(),
                }),
            },
            None => {
                let uri = logs::logger_uri(
                    &self.shared.exe,
                    &log_path,
                    cfg.container_log_max_size,
                    cfg.container_log_max_files,
                );
                rt.start_task(&id, &TaskIo::Logger(uri)).await
            }
        };
        let pid = match task {
            Ok(pid) => pid,
            Err(e) => {
                if let Some(config) = &relay {
                    attach::spawn::remove_relay_dir(config.dir.clone()).await;
                }
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
            self.yield_start_slot();
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

    /// The process of the container an ephemeral container targets (its process namespace
    /// is the one to join); None without a target. A target that does not run is an error
    /// the next pass tries again, as upstream's runtime refuses such a container.
    fn target_pid(&self, pod: &Pod, name: &str) -> Result<Option<u32>, Waiting> {
        let target = ephemeral::containers(pod)
            .into_iter()
            .find(|(c, _)| c.name == name)
            .and_then(|(_, target)| target);
        let Some(target) = target else {
            return Ok(None);
        };
        let records = self.view.as_deref().unwrap_or(&[]);
        records
            .iter()
            .filter(|r| matches!(r.kind, Kind::App | Kind::Init) && r.name == target)
            .find_map(|r| match r.state {
                crate::runtime::containers::State::Running { pid, .. } => Some(Some(pid)),
                _ => None,
            })
            .ok_or_else(|| {
                Waiting::new(
                    "CreateContainerError",
                    format!("target container {target:?} is not running"),
                )
            })
    }

    /// The ConfigMaps and Secrets the container's env and envFrom refer to. What cannot be
    /// read is kept as its error: `container_env` decides, in upstream's order, whether it
    /// matters (an optional reference to a missing object does not). With them, the
    /// variables of the Services the pod sees.
    async fn env_objects(&self, pod: &Pod, c: &Container) -> spec::EnvObjects {
        let refs = spec::env_references(c);
        let (objects, ns) = (&self.shared.objects, &self.pod_ref.namespace);
        let mut out = spec::EnvObjects::default();
        let links = spec::service_links_enabled(pod);
        out.set_service_env(
            objects
                .services(ServicesWait::for_pod(pod))
                .await
                .map(|all| spec::service_env(&all, ns, links)),
        );
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

#[cfg(test)]
mod tests {
    //! What the worker reads from the cluster before a container starts: the objects its
    //! env refers to and the pod's pull secrets, over the fake objects and runtime.

    use super::*;
    use crate::events::Recorder;
    use crate::objects::fake::FakeObjects;
    use crate::pod::worker::tests::test_shared;
    use crate::pod::worker::Shared;
    use crate::runtime::events::OomSeen;
    use crate::runtime::fake::FakeRuntime;
    use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Event};
    use k8s_openapi::ByteString;
    use serde_json::{json, Value};
    use tokio::sync::mpsc;

    const UID: &str = "e1e1e1e1-uid";

    struct Harness {
        fake: FakeRuntime,
        objects: Arc<FakeObjects>,
        shared: Arc<Shared>,
        events: mpsc::Receiver<Event>,
        _dir: tempfile::TempDir,
    }

    fn harness() -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let oom_seen = OomSeen::default();
        let fake = FakeRuntime::new(&["pause", "busybox"], oom_seen.clone());
        let (recorder, events) = Recorder::capturing();
        let shared = test_shared(dir.path(), fake.clone(), oom_seen, |_| {}, recorder);
        let objects = Arc::new(FakeObjects::default());
        let mut shared = Arc::try_unwrap(shared).unwrap_or_else(|_| panic!("shared elsewhere"));
        shared.objects = objects.clone();
        Harness {
            fake,
            objects,
            shared: Arc::new(shared),
            events,
            _dir: dir,
        }
    }

    /// A host-network pod in namespace `ns` with one container `app` and these spec fields.
    fn pod(container: Value, spec: Value) -> Pod {
        let mut c = json!({"name": "app", "image": "busybox"});
        c.as_object_mut()
            .unwrap()
            .extend(container.as_object().unwrap().clone());
        let mut s = json!({"hostNetwork": true, "containers": [c]});
        s.as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": UID},
            "spec": s,
        }))
        .unwrap()
    }

    fn app_status(h: &Harness) -> ContainerStatus {
        let v = h.shared.statuses.get(UID).expect("a published status");
        v.pod
            .status
            .clone()
            .unwrap()
            .container_statuses
            .into_iter()
            .flatten()
            .find(|c| c.name == "app")
            .expect("a status for app")
    }

    fn waiting(c: &ContainerStatus) -> Option<(String, String)> {
        let w = c.state.as_ref()?.waiting.as_ref()?;
        Some((w.reason.clone()?, w.message.clone().unwrap_or_default()))
    }

    /// (reason, message) of the Events recorded so far.
    fn drain(h: &mut Harness) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while let Ok(e) = h.events.try_recv() {
            out.push((e.reason.unwrap_or_default(), e.message.unwrap_or_default()));
        }
        out
    }

    fn secret(name: &str, type_: &str, key: &str, value: &[u8]) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("ns".into());
        s.type_ = Some(type_.into());
        s.data = Some([(key.to_string(), ByteString(value.to_vec()))].into());
        s
    }

    /// The legacy `.dockercfg`: the map of registries itself.
    fn legacy_config(registry: &str, user: &str, password: &str) -> Vec<u8> {
        use base64::Engine;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        serde_json::to_vec(&json!({registry: {"auth": auth}})).unwrap()
    }

    fn docker_config(registry: &str, user: &str, password: &str) -> Vec<u8> {
        let map: Value = serde_json::from_slice(&legacy_config(registry, user, password)).unwrap();
        serde_json::to_vec(&json!({ "auths": map })).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_config_map_holds_the_container_until_it_appears() {
        let mut h = harness();
        let p = pod(
            json!({"env": [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}),
            json!({}),
        );
        let mut w = Worker::new(h.shared.clone(), crate::pod::worker::pod_ref(&p));
        w.pass(&p).await;
        assert_eq!(
            waiting(&app_status(&h)),
            Some((
                "CreateContainerConfigError".into(),
                "configmap \"cfg\" not found".into()
            ))
        );
        assert!(
            drain(&mut h).contains(&("Failed".into(), "Error: configmap \"cfg\" not found".into())),
            "upstream's Failed event"
        );
        assert!(
            !h.fake
                .calls_of("create_container")
                .iter()
                .any(|c| c.contains("app")),
            "{:?}",
            h.fake.calls()
        );

        // Present but without the key: upstream's other message.
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "cfg", "namespace": "ns"}, "data": {"other": "x"}}))
        .unwrap();
        h.objects.put_config_map(cm.clone());
        w.pass(&p).await;
        assert_eq!(
            waiting(&app_status(&h)).map(|w| w.1),
            Some("couldn't find key k in ConfigMap ns/cfg".into())
        );

        let mut cm = cm;
        cm.data = Some([("k".to_string(), "v".to_string())].into());
        h.objects.put_config_map(cm);
        w.pass(&p).await;
        assert!(app_status(&h).state.unwrap().running.is_some());
    }

    /// Before the Services' first listing an API pod's container waits (upstream's error),
    /// while a static pod's starts with what is known: kubeadm's etcd and apiserver are
    /// static pods, and no Service can be listed before the apiserver runs.
    #[tokio::test(start_paused = true)]
    async fn a_static_pod_starts_before_the_services_are_listed_an_api_pod_waits() {
        let h = harness();
        h.objects
            .services_unsynced
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let api_pod = pod(json!({}), json!({}));
        let mut w = Worker::new(h.shared.clone(), crate::pod::worker::pod_ref(&api_pod));
        w.pass(&api_pod).await;
        assert_eq!(
            waiting(&app_status(&h)),
            Some((
                "CreateContainerConfigError".into(),
                "services have not yet been read at least once, cannot construct envvars".into()
            ))
        );
        assert!(
            !h.fake
                .calls_of("create_container")
                .iter()
                .any(|c| c.contains("app")),
            "{:?}",
            h.fake.calls()
        );

        // The same pod from a manifest file (another UID, as a static pod has its own).
        let h = harness();
        h.objects
            .services_unsynced
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let mut static_pod = api_pod.clone();
        static_pod.metadata.annotations = Some(
            [(
                crate::vocabulary::pod_source::CONFIG_SOURCE_ANNOTATION.to_string(),
                "file".to_string(),
            )]
            .into(),
        );
        let mut w = Worker::new(h.shared.clone(), crate::pod::worker::pod_ref(&static_pod));
        w.pass(&static_pod).await;
        assert!(
            app_status(&h).state.unwrap().running.is_some(),
            "{:?}",
            h.fake.calls()
        );
    }

    #[tokio::test]
    async fn pull_secrets_are_read_in_the_pods_order_and_missing_ones_named() {
        let objects = FakeObjects::default();
        let json_type = "kubernetes.io/dockerconfigjson";
        objects.put_secret(secret(
            "second",
            json_type,
            ".dockerconfigjson",
            &docker_config("reg.test", "u2", "p2"),
        ));
        objects.put_secret(secret(
            "first",
            "kubernetes.io/dockercfg",
            ".dockercfg",
            &legacy_config("reg.test", "u1", "p1"),
        ));
        objects.put_secret(secret("opaque", "Opaque", ".dockerconfigjson", b"{}"));
        let p = pod(
            json!({}),
            json!({"imagePullSecrets": [
                {"name": "first"}, {"name": "gone"}, {"name": ""}, {"name": "opaque"}, {"name": "second"}]}),
        );
        let (found, missing) = pull_secrets(&objects, &p).await;
        let names: Vec<_> = found
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["first", "opaque", "second"]);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].0, "gone");
        assert!(missing[0].1.is_not_found());

        let creds: Vec<RegistryCredential> = found
            .iter()
            .map(|s| secret_credentials(s).unwrap())
            .collect::<Vec<_>>()
            .concat();
        let who: Vec<_> = creds
            .iter()
            .map(|c| {
                (
                    c.key.as_str(),
                    c.username.as_str(),
                    c.password.as_str(),
                    c.source.as_str(),
                )
            })
            .collect();
        // The Opaque secret holds no credentials, whatever its keys.
        assert_eq!(
            who,
            [
                ("reg.test", "u1", "p1", "secret ns/first"),
                ("reg.test", "u2", "p2", "secret ns/second"),
            ]
        );
    }

    #[test]
    fn a_docker_secret_without_its_key_holds_nothing_and_a_bad_one_is_an_error() {
        let s = secret("s", "kubernetes.io/dockerconfigjson", ".dockercfg", b"{}");
        assert!(secret_credentials(&s).unwrap().is_empty());
        let s = secret(
            "s",
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            b"",
        );
        assert!(secret_credentials(&s).unwrap().is_empty());
        let s = secret(
            "s",
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            b"nope",
        );
        let e = secret_credentials(&s).unwrap_err().to_string();
        assert!(e.contains("secret ns/s"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_pull_secret_is_a_warning_and_the_pull_goes_on() {
        let mut h = harness();
        h.fake.add_to_registry("reg.test/app:1");
        let p = pod(
            json!({"image": "reg.test/app:1"}),
            json!({"imagePullSecrets": [{"name": "gone"}, {"name": "also-gone"}]}),
        );
        let mut w = Worker::new(h.shared.clone(), crate::pod::worker::pod_ref(&p));
        w.pass(&p).await;
        assert!(app_status(&h).state.unwrap().running.is_some());
        assert_eq!(h.fake.calls_of("pull_image"), ["pull_image reg.test/app:1"]);
        let events = drain(&mut h);
        assert!(
            events.contains(&(
                "FailedToRetrieveImagePullSecret".into(),
                "Unable to retrieve some image pull secrets (gone, also-gone); attempting to pull the image may not succeed.".into()
            )),
            "{events:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pull_secret_that_is_not_json_fails_the_pull() {
        let h = harness();
        h.fake.add_to_registry("reg.test/app:1");
        h.objects.put_secret(secret(
            "bad",
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            b"{not json",
        ));
        let p = pod(
            json!({"image": "reg.test/app:1"}),
            json!({"imagePullSecrets": [{"name": "bad"}]}),
        );
        let mut w = Worker::new(h.shared.clone(), crate::pod::worker::pod_ref(&p));
        w.pass(&p).await;
        let (reason, message) = waiting(&app_status(&h)).unwrap();
        assert_eq!(reason, "ErrImagePull");
        assert!(message.contains("secret ns/bad"), "{message}");
        assert!(h.fake.calls_of("pull_image").is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_pods_pull_secrets_reach_the_runtime_in_its_order() {
        let h = harness();
        h.fake.add_to_registry("reg.test/app:1");
        h.objects.put_secret(secret(
            "new",
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            &docker_config("reg.test", "u1", "p1"),
        ));
        h.objects.put_secret(secret(
            "old",
            "kubernetes.io/dockercfg",
            ".dockercfg",
            &legacy_config("reg.test", "u2", "p2"),
        ));
        let p = pod(
            json!({"image": "reg.test/app:1"}),
            json!({"imagePullSecrets": [{"name": "new"}, {"name": "old"}]}),
        );
        let mut w = Worker::new(h.shared.clone(), crate::pod::worker::pod_ref(&p));
        w.pass(&p).await;
        assert!(app_status(&h).state.unwrap().running.is_some());
        assert_eq!(
            h.fake.pull_credentials(),
            [(
                "reg.test/app:1".to_string(),
                vec!["secret ns/new".to_string(), "secret ns/old".to_string()]
            )]
        );
    }
}
