//! The pod sandbox: the pause container that holds the pod's namespaces, its pinned
//! network namespace and CNI attachment, and the pod's /etc files. A sandbox that is no
//! longer running is replaced together with every container of the pod, as upstream.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tracing::{info, warn};

use super::{blocking, events, host_network, Sandbox, Worker};
use crate::events::EventType;
use crate::network::cni::{AttachRequest, PortMapping};
use crate::network::netns;
use crate::pod::dns::DnsSettings;
use crate::pod::files::SandboxState;
use crate::pod::spec::{self, seccomp, PodContext};
use crate::runtime::containers::TaskIo;
use crate::runtime::containers::{new_container_id, ContainerRecord, NewContainer, State};
use crate::runtime::labels::{self, Kind};
use crate::runtime::RuntimeError;
use crate::vocabulary::qos::qos_class;

/// Errors while building or tearing down a pod's sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("network: {0}")]
    Network(#[from] crate::network::NetworkError),
    #[error("pod sandbox image: {0}")]
    Image(#[source] crate::runtime::pull::PullError),
    #[error("volumes: {0}")]
    Volume(#[from] crate::volume::VolumeError),
    #[error("pod cgroup: {0}")]
    Cgroup(#[from] crate::cgroups::CgroupError),
    /// The pod's hostname cannot be the sandbox's (upstream's wording).
    #[error(transparent)]
    Hostname(crate::pod::files::FqdnTooLong),
    #[error("seccomp: {0}")]
    Seccomp(#[from] crate::pod::spec::seccomp::SeccompError),
    /// The pod's RuntimeClass could not be read (upstream's runtimeclass manager's error,
    /// as its event shows it).
    #[error(transparent)]
    RuntimeClass(crate::objects::ObjectError),
    /// The RuntimeClass's handler has no runtime on this node (containerd's words).
    #[error(transparent)]
    Handler(#[from] crate::runtime::handlers::UnknownHandler),
    #[error("pod directory {dir}: {source}")]
    Files {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Worker {
    fn files_error(&self) -> impl Fn(std::io::Error) -> SandboxError {
        let dir = self.pod_dir().dir;
        move |source| SandboxError::Files {
            dir: dir.clone(),
            source,
        }
    }

    /// The running sandbox, or a new one. A sandbox that stopped is replaced: the pod's
    /// containers are stopped and its network torn down first (`Sandbox::replaced`).
    pub(super) async fn ensure_sandbox(&mut self, pod: &Pod) -> Result<Sandbox, SandboxError> {
        let rt = self.shared.rt.clone();
        // The pod's cgroup with its limits exists before anything runs in it (upstream's
        // EnsureExists in SyncPod); on later passes this writes only what changed.
        if let Some(cm) = self.shared.cm.clone() {
            let p = pod.clone();
            blocking(move || cm.ensure_pod(&p)).await?;
        }
        let latest = latest_sandbox(self.view.as_deref().unwrap_or(&[])).cloned();
        if let Some(sb) = &latest {
            if let State::Running { pid, .. } = sb.state {
                return Ok(Sandbox {
                    id: sb.id.clone(),
                    pid,
                    ips: split_ips(sb.labels.get(labels::POD_IPS)),
                    volumes: None,
                    replaced: false,
                    // A sandbox made before handlers were recorded ran the default runtime.
                    handler: sb
                        .labels
                        .get(labels::RUNTIME_HANDLER)
                        .cloned()
                        .unwrap_or_default(),
                });
            }
        }
        let attempt = latest.as_ref().map(|s| s.attempt + 1).unwrap_or(0);
        if let Some(old) = &latest {
            warn!(pod = %self.pod_ref.display(), "pod sandbox is not running; recreating it and its containers");
            self.pod_event(
                pod,
                EventType::Normal,
                events::SANDBOX_CHANGED,
                "Pod sandbox changed, it will be killed and re-created.".into(),
            );
            let records = self.view.clone().unwrap_or_default();
            self.stop_containers(Some(pod), &records, Duration::from_secs(2))
                .await?;
            self.teardown_network(Some(old)).await?;
            rt.remove_container(&old.id).await?;
            self.forget_record(&old.id);
        }

        // Counted as started from here (upstream: once it decides to create one), and as
        // failed unless it runs.
        let counted = crate::metrics::pod_sandbox_start();
        // The handler and its runtime before anything is made, as upstream resolves the
        // RuntimeClass before RunPodSandbox and containerd maps the handler before it pins
        // a network namespace: a pod whose handler cannot be served costs nothing per retry.
        let handler = self.runtime_handler(pod).await?;
        let runtime = self.shared.handlers.resolve(&handler)?.clone();

        let cfg = self.shared.cfg.clone();
        let hostnet = host_network(pod);
        // Before anything is created: a hostname the kernel cannot hold fails the sandbox.
        let (hostname, uts_hostname) = sandbox_hostnames(pod, &cfg.node_name, &cfg.cluster_domain)
            .map_err(SandboxError::Hostname)?;
        let dir = self.pod_dir();
        let saved = {
            let (dir, pod) = (dir.clone(), pod.clone());
            blocking(move || dir.create().and_then(|()| dir.save_pod(&pod))).await
        };
        saved.map_err(self.files_error())?;
        let pause = match rt.resolve_image(&cfg.pod_infra_container_image).await {
            Err(e) if e.is_not_found() => {
                rt.pull_image(&cfg.pod_infra_container_image, &[])
                    .await
                    .map_err(SandboxError::Image)?
                    .image
            }
            other => other?,
        };
        let id = new_container_id();
        let mut netns_path = None;
        let mut ips: Vec<String> = Vec::new();
        if !hostnet {
            // Record the name before pinning so a crash here cannot leak the namespace.
            let name = netns::new_netns_name();
            let path = PathBuf::from("/var/run/netns").join(&name);
            let state = SandboxState {
                netns: Some(path.display().to_string()),
            };
            let d = dir.clone();
            blocking(move || d.save_state(&state))
                .await
                .map_err(self.files_error())?;
            let pinned = netns::pin(Path::new("/var/run/netns"), &name).await?;
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
        // Everything after the network is attached undoes it on failure, so a failed
        // attempt never leaks a namespace or an address (the next attempt pins a new one).
        let started: Result<ContainerRecord, SandboxError> = async {
            let written = {
                let (d, pod, h, uts, ip) = (
                    dir.clone(),
                    pod.clone(),
                    hostname.clone(),
                    uts_hostname.clone(),
                    ips.first().cloned(),
                );
                let dns = DnsSettings::from_config(&self.shared.cfg);
                blocking(move || d.write_etc(&pod, &h, &uts, ip.as_deref(), &dns)).await
            };
            let resolver = written.map_err(self.files_error())?;
            if resolver.missing_cluster_dns {
                let message = format!(
                    "pod: \"{}\". kubelet does not have ClusterDNS IP configured and cannot create \
                     Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.",
                    self.pod_ref.display()
                );
                warn!(pod = %self.pod_ref.display(), "no clusterDNS configured: the pod gets the node's resolver");
                self.pod_event(pod, EventType::Warning, "MissingClusterDNS", message);
            }
            let ctx = self.pod_context(pod, &id, netns_path.clone(), 0, &ips, &uts_hostname);
            let mut spec = spec::sandbox_spec(&ctx, &pause.config)?;
            // containerd's CRI gives the pause container the pod-level profile (none when a
            // container of the pod is privileged, which makes the sandbox privileged).
            let settings = seccomp::Settings::new(&cfg.root_dir, cfg.seccomp_default);
            let choice = seccomp::choose(pod, None, &settings)?;
            let privileged = seccomp::pod_has_privileged(pod);
            let loaded = blocking(move || seccomp::load(&choice, privileged)).await?;
            seccomp::apply(&mut spec, &loaded)?;
            self.set_selinux(pod, None, &mut spec);
            spec::set_cgroup_leaf(&mut spec, &ctx.cgroup_parent, &id);
            let mut extra = HashMap::from([
                (labels::POD_IPS.to_string(), ips.join(",")),
                (labels::HOST_NETWORK.to_string(), hostnet.to_string()),
                (labels::CGROUP_PARENT.to_string(), ctx.cgroup_parent.clone()),
            ]);
            if let Some(n) = &netns_path {
                extra.insert(labels::NETNS.to_string(), n.clone());
            }
            if !handler.is_empty() {
                extra.insert(labels::RUNTIME_HANDLER.to_string(), handler.clone());
            }
            let new = NewContainer {
                id: &id,
                pod: &self.pod_ref,
                kind: Kind::Sandbox,
                name: labels::SANDBOX_NAME,
                attempt,
                image: &pause,
                image_spec: &cfg.pod_infra_container_image,
                spec: &spec,
                extra_labels: extra,
                runtime: runtime.clone(),
            };
            rt.create_container(new.clone()).await?;
            let pid = rt.start_task(&id, &TaskIo::Null).await?;
            Ok(new.as_record(Some(pid)))
        }
        .await;
        let record = match started {
            Ok(r) => r,
            Err(e) => {
                let _ = rt.remove_container(&id).await;
                if let Some(n) = &netns_path {
                    let req = self.attach_request(pod, &id, Path::new(n));
                    let _ = self.shared.cni.del(&req).await;
                    let _ = netns::remove(Path::new(n)).await;
                }
                return Err(e);
            }
        };
        let pid = match record.state {
            State::Running { pid, .. } => pid,
            _ => 0,
        };
        if let Some(v) = self.view.as_mut() {
            v.push(record);
        }
        counted.succeeded();
        info!(pod = %self.pod_ref.display(), sandbox = %id, ips = %ips.join(","), runtime_handler = %handler, "pod sandbox started");
        Ok(Sandbox {
            id,
            pid,
            ips,
            volumes: None,
            replaced: latest.is_some(),
            handler,
        })
    }

    /// The pod's RuntimeClass handler, as upstream's createPodSandbox looks it up: `""` (the
    /// default) without a runtimeClassName, and without RuntimeClasses to read (a node
    /// with no API server: upstream's kubelet then has no runtimeclass manager and runs
    /// the pod with the default handler; said in the log, as nothing else would say it).
    async fn runtime_handler(&self, pod: &Pod) -> Result<String, SandboxError> {
        let Some(class) = pod
            .spec
            .as_ref()
            .and_then(|s| s.runtime_class_name.as_deref())
            .filter(|c| !c.is_empty())
        else {
            return Ok(String::new());
        };
        match self.shared.objects.runtime_handler(class).await {
            Ok(Some(handler)) => {
                if !handler.is_empty() {
                    info!(pod = %self.pod_ref.display(), runtime_class = %class, runtime_handler = %handler, "running pod with runtime handler");
                }
                Ok(handler)
            }
            Ok(None) => {
                warn!(pod = %self.pod_ref.display(), runtime_class = %class, "no API server to read RuntimeClasses from: the pod runs with the default runtime handler, as upstream's standalone kubelet runs it");
                Ok(String::new())
            }
            Err(e) => Err(SandboxError::RuntimeClass(e)),
        }
    }

    pub(super) fn attach_request(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        netns: &Path,
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

    pub(super) fn pod_context(
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
        let dir = self.pod_dir();
        PodContext {
            sandbox_id: sandbox_id.to_string(),
            pod_name: self.pod_ref.name.clone(),
            pod_namespace: self.pod_ref.namespace.clone(),
            pod_uid: self.pod_ref.uid.clone(),
            cgroup_parent: crate::cm::Layout::from_config(&self.shared.cfg)
                .pod_cgroup(&self.pod_ref.uid, qos),
            host_network: host_network(pod),
            host_pid: spec.and_then(|s| s.host_pid).unwrap_or(false),
            host_ipc: spec.and_then(|s| s.host_ipc).unwrap_or(false),
            share_process_namespace: spec
                .and_then(|s| s.share_process_namespace)
                .unwrap_or(false),
            netns_path,
            sandbox_pid,
            target_pid: None,
            hostname: hostname.to_string(),
            hosts_file: dir.hosts().display().to_string(),
            hostname_file: dir.hostname().display().to_string(),
            resolv_file: dir.resolv().display().to_string(),
            oom_score_adj: 0,
            oom_score_adj_min: self.shared.oom_score_adj_min,
            pod_ips: ips.to_vec(),
            host_ip: self.shared.host_ip.clone(),
            node_name: self.shared.cfg.node_name.clone(),
            allocatable_cpu_millis: self.shared.node_allocatable().0,
            allocatable_memory: self.shared.node_allocatable().1,
            swap: self
                .shared
                .cm
                .as_ref()
                .map(|cm| cm.container_swap())
                .unwrap_or_default(),
        }
    }

    /// Detaches the pod from CNI and removes its pinned network namespace. With no sandbox
    /// record left, the namespace saved in the pod directory is removed (CNI DEL needs the
    /// sandbox id the attachment was made with, which went with the record).
    pub(super) async fn teardown_network(
        &self,
        sandbox: Option<&ContainerRecord>,
    ) -> Result<(), SandboxError> {
        let dir = self.pod_dir();
        let netns = match sandbox.and_then(|s| s.labels.get(labels::NETNS).cloned()) {
            Some(n) => Some(n),
            None => {
                let d = dir.clone();
                blocking(move || d.load_state().netns).await
            }
        };
        let Some(netns) = netns else { return Ok(()) };
        let d = dir.clone();
        let pod = blocking(move || d.load_pod()).await;
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
        netns::remove(Path::new(&netns)).await?;
        Ok(())
    }
}

pub(super) fn latest_sandbox(records: &[ContainerRecord]) -> Option<&ContainerRecord> {
    records
        .iter()
        .filter(|r| r.kind == Kind::Sandbox)
        .max_by_key(|r| r.attempt)
}

pub(super) fn split_ips(s: Option<&String>) -> Vec<String> {
    s.map(|s| {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(str::to_string)
            .collect()
    })
    .unwrap_or_default()
}

/// A sandbox's hostname and the kernel (UTS) hostname it gets: the node's for a pod on the
/// host network, else the pod's, as FQDN under setHostnameAsFQDN (an error past the
/// kernel's 64 bytes).
pub(super) fn sandbox_hostnames(
    pod: &Pod,
    node_name: &str,
    cluster_domain: &str,
) -> Result<(String, String), crate::pod::files::FqdnTooLong> {
    if host_network(pod) {
        let h = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| node_name.to_string());
        return Ok((h.clone(), h));
    }
    let h = pod_hostname(pod);
    let uts = crate::pod::files::kernel_hostname(pod, &h, cluster_domain)?;
    Ok((h, uts))
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
            // Validation refuses ports outside 1-65535 before a pod gets here; a value that
            // still does not fit is skipped rather than truncated to another port.
            let (Ok(host_port), Ok(container_port)) =
                (u16::try_from(hp), u16::try_from(p.container_port))
            else {
                continue;
            };
            out.push(PortMapping {
                host_port,
                container_port,
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
                {"name": "c", "ports": [{"containerPort": 80, "hostPort": 70000}]},
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
