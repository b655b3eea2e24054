//! CNI ADD/DEL for a pod sandbox, as containerd's CRI plugin (go-cni + libcni) does it:
//! the built-in loopback network as `lo`, then the first network config of the conf dir as
//! `eth0`, each a chain of plugins exec'd in order (ADD) or in reverse (DEL).

mod cache;
mod config;
mod exec;
mod result;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Map, Value};

use self::cache::CachedAttachment;
pub use self::config::ConfigError;
use self::config::NetworkList;
use self::exec::{CniCommand, Invocation, PluginRunner};
pub use self::result::{NotCidr, ResultError};
use super::netns::netns_exists;
use super::NetworkError;

/// The interface name of the loopback attachment.
pub const LOOPBACK_IFNAME: &str = "lo";
/// The interface name of the pod's network (containerd's `defaultIfName`).
pub const POD_IFNAME: &str = "eth0";

/// A hostPort to forward into the pod, handed to plugins declaring `portMappings`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMapping {
    /// 0 means "no host port": such entries are not sent, as in containerd.
    pub host_port: u16,
    pub container_port: u16,
    /// "tcp", "udp" or "sctp"; the pod spec's upper-case form is accepted and lower-cased.
    pub protocol: String,
    /// Empty for all host addresses.
    pub host_ip: String,
}

/// Which sandbox to attach and what the plugins are told about its pod. DEL must be given
/// the same port mappings as ADD: plugins such as portmap find their rules through them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachRequest {
    pub sandbox_id: String,
    pub netns: PathBuf,
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
    pub port_mappings: Vec<PortMapping>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AttachResult {
    /// The addresses of `interface` inside the pod, IPv4 first: the pod IPs.
    pub ips: Vec<IpAddr>,
    pub interface: String,
    /// The pod network's final CNI result, as the last plugin printed it.
    pub raw: Value,
}

/// Runs CNI plugins for pods. Cheap to clone; it reads the conf dir on every call, so a
/// config dropped in later (by a network add-on's DaemonSet) is picked up without a restart.
#[derive(Debug, Clone)]
pub struct Cni {
    conf_dir: PathBuf,
    bin_dirs: Vec<PathBuf>,
    timeout: Duration,
    cache_dir: Option<PathBuf>,
}

/// What every plugin exec of one attachment shares.
struct Attachment<'a> {
    req: &'a AttachRequest,
    netns: &'a str,
    cni_args: String,
    capability_args: Map<String, Value>,
}

impl Cni {
    /// `timeout` bounds each plugin exec; the plugin is killed when it runs out.
    pub fn new(conf_dir: impl Into<PathBuf>, bin_dirs: Vec<PathBuf>, timeout: Duration) -> Self {
        Self {
            conf_dir: conf_dir.into(),
            bin_dirs,
            timeout,
            cache_dir: None,
        }
    }

    /// Keep each ADD's config and result under `dir`, so DEL replays the same plugins with
    /// the cached prevResult (CNI ≥ 0.4.0) even after the conf dir changed.
    pub fn with_result_cache(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    pub fn conf_dir(&self) -> &Path {
        &self.conf_dir
    }

    /// The name of the network pods would get, or why there is none: the node's
    /// NetworkReady condition. Reads the conf dir (a few small files).
    pub fn network_status(&self) -> Result<String, NetworkError> {
        NetworkList::load_first(&self.conf_dir).map(|list| list.name)
    }

    /// Attaches `lo` and `eth0` in the sandbox's namespace and returns eth0's addresses. On
    /// failure whatever was set up is torn down again before the error is returned.
    pub async fn add(&self, req: &AttachRequest) -> Result<AttachResult, NetworkError> {
        // The namespace is not checked here: the plugins say precisely what is wrong with it.
        let netns = validate(req)?;
        // A few small files, but on a disk that may be slow: off the async workers.
        let conf_dir = self.conf_dir.clone();
        let main = tokio::task::spawn_blocking(move || NetworkList::load_first(&conf_dir))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
        let att = Attachment::new(req, netns);

        let outcome = self.add_both(&att, &main).await;
        if let Err(e) = &outcome {
            tracing::warn!(sandbox = %req.sandbox_id, pod = %req.pod_name, namespace = %req.pod_namespace, network = %main.name, error = %e, "CNI ADD failed; tearing down what was set up");
            if let Err(undo) = self.teardown(&att, Some(main)).await {
                tracing::warn!(sandbox = %req.sandbox_id, error = %undo, "CNI DEL after a failed ADD also failed");
            }
        }
        outcome
    }

    /// Detaches `eth0` then `lo`. Idempotent: a second DEL, or a DEL after the namespace is
    /// gone (then CNI_NETNS is empty, which the spec allows), succeeds.
    pub async fn del(&self, req: &AttachRequest) -> Result<(), NetworkError> {
        let netns = validate(req)?;
        let netns = if netns_exists(&req.netns) { netns } else { "" };
        let att = Attachment::new(req, netns);
        self.teardown(&att, None).await
    }

    async fn add_both(
        &self,
        att: &Attachment<'_>,
        main: &NetworkList,
    ) -> Result<AttachResult, NetworkError> {
        let lo = NetworkList::loopback();
        let lo_result = self.add_list(att, &lo, LOOPBACK_IFNAME).await?;
        self.cache_save(att, &lo, LOOPBACK_IFNAME, &lo_result)
            .await?;

        let result = self.add_list(att, main, POD_IFNAME).await?;
        self.cache_save(att, main, POD_IFNAME, &result).await?;

        let last_plugin = &main
            .plugins
            .last()
            .expect("lists are never empty")
            .plugin_type;
        let ips = result::interface_ips(&result, POD_IFNAME).map_err(|source| {
            NetworkError::BadAddresses {
                plugin: last_plugin.clone(),
                network: main.name.clone(),
                command: CniCommand::Add.as_str(),
                sandbox: att.req.sandbox_id.clone(),
                source: Box::new(source),
            }
        })?;
        if ips.is_empty() {
            return Err(NetworkError::NoAddress {
                network: main.name.clone(),
                sandbox: att.req.sandbox_id.clone(),
                ifname: POD_IFNAME.into(),
            });
        }
        tracing::info!(sandbox = %att.req.sandbox_id, pod = %att.req.pod_name, namespace = %att.req.pod_namespace, network = %main.name, config = %main.source.display(), ips = %ips.iter().map(ToString::to_string).collect::<Vec<_>>().join(","), "pod network attached");
        Ok(AttachResult {
            ips,
            interface: POD_IFNAME.into(),
            raw: result,
        })
    }

    /// `main` is the config to fall back on for eth0 when no cache entry says what ADD ran.
    async fn teardown(
        &self,
        att: &Attachment<'_>,
        main: Option<NetworkList>,
    ) -> Result<(), NetworkError> {
        let conf_dir = &self.conf_dir;
        let pod = self
            .del_network(att, POD_IFNAME, || match main {
                Some(list) => Ok(list),
                None => NetworkList::load_first(conf_dir),
            })
            .await;
        // Loopback goes too even if eth0 failed: DEL frees as much as it can each time.
        let lo = self
            .del_network(att, LOOPBACK_IFNAME, || Ok(NetworkList::loopback()))
            .await;
        pod.and(lo)
    }

    async fn add_list(
        &self,
        att: &Attachment<'_>,
        list: &NetworkList,
        ifname: &str,
    ) -> Result<Value, NetworkError> {
        let inv = att.invocation(CniCommand::Add, ifname);
        let mut prev: Option<Value> = None;
        for plugin in &list.plugins {
            let stdin = plugin.stdin_config(list, prev.as_ref(), &att.capability_args);
            let out = self
                .runner()
                .run(&plugin.plugin_type, &list.name, &inv, &stdin)
                .await?;
            match out {
                Some(result @ Value::Object(_)) => prev = Some(result),
                other => {
                    return Err(NetworkError::BadResult {
                        plugin: plugin.plugin_type.clone(),
                        network: list.name.clone(),
                        command: CniCommand::Add.as_str(),
                        sandbox: att.req.sandbox_id.clone(),
                        reason: match other {
                            None => "printed no result".into(),
                            Some(v) => format!("result is not a JSON object: {v}"),
                        },
                    })
                }
            }
        }
        Ok(prev.expect("lists are never empty"))
    }

    async fn del_network(
        &self,
        att: &Attachment<'_>,
        ifname: &str,
        current_config: impl FnOnce() -> Result<NetworkList, NetworkError>,
    ) -> Result<(), NetworkError> {
        let cache_path = self
            .cache_dir
            .as_deref()
            .map(|dir| cache::entry_path(dir, &att.req.sandbox_id, ifname));
        let cached = match &cache_path {
            Some(path) => cache::load(path).await,
            None => None,
        };
        let (list, prev_result) = match cached.and_then(|c| cached_list(c, cache_path.as_deref())) {
            Some((list, result)) => (list, Some(result)),
            None => (current_config()?, None),
        };
        let prev_result = prev_result.filter(|_| list.del_takes_prev_result());

        let inv = att.invocation(CniCommand::Del, ifname);
        for plugin in list.plugins.iter().rev() {
            let stdin = plugin.stdin_config(&list, prev_result.as_ref(), &att.capability_args);
            self.runner()
                .run(&plugin.plugin_type, &list.name, &inv, &stdin)
                .await?;
        }
        if let Some(path) = &cache_path {
            cache::remove(path).await?;
        }
        Ok(())
    }

    async fn cache_save(
        &self,
        att: &Attachment<'_>,
        list: &NetworkList,
        ifname: &str,
        result: &Value,
    ) -> Result<(), NetworkError> {
        let Some(dir) = &self.cache_dir else {
            return Ok(());
        };
        let entry = CachedAttachment {
            network: list.to_conflist(),
            result: result.clone(),
        };
        cache::save(&cache::entry_path(dir, &att.req.sandbox_id, ifname), &entry).await
    }

    fn runner(&self) -> PluginRunner<'_> {
        PluginRunner {
            bin_dirs: &self.bin_dirs,
            timeout: self.timeout,
        }
    }
}

impl<'a> Attachment<'a> {
    fn new(req: &'a AttachRequest, netns: &'a str) -> Self {
        Self {
            req,
            netns,
            cni_args: cni_args(req),
            capability_args: capability_args(req),
        }
    }

    fn invocation<'s>(&'s self, command: CniCommand, ifname: &'s str) -> Invocation<'s> {
        Invocation {
            command,
            container_id: &self.req.sandbox_id,
            netns: self.netns,
            ifname,
            cni_args: &self.cni_args,
        }
    }
}

fn cached_list(entry: CachedAttachment, path: Option<&Path>) -> Option<(NetworkList, Value)> {
    let path = path?;
    let bytes = serde_json::to_vec(&entry.network).ok()?;
    match NetworkList::from_conflist_bytes(&bytes, path) {
        Ok(list) => Some((list, entry.result)),
        Err(e) => {
            tracing::warn!(error = %e, "cached CNI config unusable; using the current config");
            None
        }
    }
}

/// Checks what ends up in file names and in CNI_ARGS (`;`-separated `K=V` pairs that libcni
/// based plugins reject when a value holds `;` or `=`). Returns the netns path as text.
fn validate(req: &AttachRequest) -> Result<&str, NetworkError> {
    let invalid = |reason: String| NetworkError::InvalidRequest {
        sandbox: req.sandbox_id.clone(),
        reason,
    };
    if req.sandbox_id.is_empty() || req.sandbox_id.contains(['/', '\0']) {
        return Err(invalid("sandbox id must be a non-empty file name".into()));
    }
    for (field, value) in [
        ("sandbox id", &req.sandbox_id),
        ("pod name", &req.pod_name),
        ("pod namespace", &req.pod_namespace),
        ("pod uid", &req.pod_uid),
    ] {
        if value.contains([';', '=']) {
            return Err(invalid(format!("{field} {value:?} contains ';' or '='")));
        }
    }
    req.netns
        .to_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| invalid(format!("netns path {:?} is empty or not UTF-8", req.netns)))
}

/// The labels containerd passes (its `cniNamespaceOpts`), in a fixed order.
fn cni_args(req: &AttachRequest) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
        req.pod_namespace, req.pod_name, req.sandbox_id, req.pod_uid
    )
}

/// Capability args by capability name; each plugin gets the ones it declares.
fn capability_args(req: &AttachRequest) -> Map<String, Value> {
    let ports: Vec<Value> = req
        .port_mappings
        .iter()
        .filter(|p| p.host_port != 0)
        .map(|p| {
            json!({
                "hostPort": p.host_port,
                "containerPort": p.container_port,
                "protocol": p.protocol.to_ascii_lowercase(),
                "hostIP": p.host_ip,
            })
        })
        .collect();
    let mut args = Map::new();
    args.insert("portMappings".into(), Value::Array(ports));
    args
}

#[cfg(test)]
mod tests;
