//! OCI runtime specs for the pod sandbox (pause) and app containers, built from the
//! PodSpec as upstream and containerd's CRI plugin do: image entrypoint/cmd versus
//! command/args, env with `$(VAR)` expansion, resources to cgroup settings, the security
//! context, and the pod's shared namespaces and files.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};
use oci_spec::runtime::Spec;
use serde_json::{json, Value};

use super::accounts::{self, Accounts, ResolvedUser, UserRef};
use super::images::{split_env, ImageConfig};
use super::RuntimeError;
use crate::quantity;
use crate::volume::{resource_value, Allocatable};

/// Everything about the pod that a container spec needs, computed once per sync.
#[derive(Debug, Clone)]
pub struct PodContext {
    pub sandbox_id: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
    /// e.g. /kubepods/besteffort/pod<uid>
    pub cgroup_parent: String,
    pub host_network: bool,
    pub host_pid: bool,
    pub host_ipc: bool,
    pub share_process_namespace: bool,
    /// The pinned netns (sandbox only; None with hostNetwork).
    pub netns_path: Option<String>,
    /// The running pause process, whose namespaces app containers join.
    pub sandbox_pid: u32,
    pub hostname: String,
    pub hosts_file: String,
    pub hostname_file: String,
    pub resolv_file: String,
    pub oom_score_adj: i64,
    /// The lowest oom_score_adj the agent may give: without CAP_SYS_RESOURCE the kernel
    /// refuses values below the caller's own (containerd's restrict_oom_score_adj).
    pub oom_score_adj_min: i64,
    pub pod_ips: Vec<String>,
    pub host_ip: String,
    pub node_name: String,
    /// Node allocatable, which an unset limit stands for in `resourceFieldRef` (as upstream).
    pub allocatable_cpu_millis: i64,
    pub allocatable_memory: i64,
}

impl PodContext {
    fn allocatable(&self) -> Allocatable {
        Allocatable {
            cpu_millis: Some(self.allocatable_cpu_millis),
            memory_bytes: Some(self.allocatable_memory),
            ephemeral_storage_bytes: None,
        }
    }
}

fn spec_err(container: &str, field: &str, reason: impl Into<String>) -> RuntimeError {
    RuntimeError::Spec {
        container: container.to_string(),
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// containerd's default capability set.
const DEFAULT_CAPS: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Every capability the kernel knows (privileged containers get them all).
const ALL_CAPS: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

const MASKED_PATHS: [&str; 11] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
    "/proc/scsi",
];

const READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

fn default_mounts(privileged: bool) -> Vec<Value> {
    vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", if privileged { "rw" } else { "ro" }]}),
        json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", if privileged { "rw" } else { "ro" }]}),
    ]
}

fn bind(dest: &str, src: &str, ro: bool) -> Value {
    json!({"destination": dest, "type": "bind", "source": src,
           "options": ["rbind", "rprivate", if ro { "ro" } else { "rw" }]})
}

fn cri_annotations(ctx: &PodContext, kind: &str, container: &str) -> Value {
    json!({
        "io.kubernetes.cri.container-type": kind,
        "io.kubernetes.cri.sandbox-id": ctx.sandbox_id,
        "io.kubernetes.cri.sandbox-name": ctx.pod_name,
        "io.kubernetes.cri.sandbox-namespace": ctx.pod_namespace,
        "io.kubernetes.cri.sandbox-uid": ctx.pod_uid,
        "io.kubernetes.cri.container-name": container,
        // One runc shim per pod: the shim groups containers carrying the same value.
        "io.containerd.runc.v2.group": ctx.sandbox_id,
    })
}

/// Parses the sandbox image's `User` when numeric ("65535", "65535:65535"). The pause
/// image's user is not looked up in its rootfs (app containers' users are: see
/// `process_user`), so a name there is refused.
fn numeric_user(user: &str) -> Result<(Option<u32>, Option<u32>), String> {
    if user.is_empty() {
        return Ok((None, None));
    }
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let uid = u
        .parse::<u32>()
        .map_err(|_| format!("sandbox image user {user:?} is not numeric"))?;
    let gid = match g {
        Some(g) => Some(
            g.parse::<u32>()
                .map_err(|_| format!("image group {g:?} is not numeric"))?,
        ),
        None => None,
    };
    Ok((Some(uid), gid))
}

/// The pause container: holds the pod's namespaces.
pub fn sandbox_spec(ctx: &PodContext, image: &ImageConfig) -> Result<Spec, RuntimeError> {
    let mut args: Vec<String> = image.entrypoint.clone().unwrap_or_default();
    args.extend(image.cmd.clone().unwrap_or_default());
    if args.is_empty() {
        args.push("/pause".into());
    }
    let (uid, gid) = numeric_user(image.user.as_deref().unwrap_or(""))
        .map_err(|e| spec_err("POD", "image.user", e))?;
    let mut namespaces = vec![json!({"type": "mount"})];
    if !ctx.host_pid {
        namespaces.push(json!({"type": "pid"}));
    }
    if !ctx.host_ipc {
        namespaces.push(json!({"type": "ipc"}));
    }
    if !ctx.host_network {
        namespaces.push(json!({"type": "uts"}));
        let path = ctx
            .netns_path
            .clone()
            .ok_or_else(|| spec_err("POD", "netns", "no network namespace for a pod network"))?;
        namespaces.push(json!({"type": "network", "path": path}));
    }
    let mut mounts = default_mounts(false);
    mounts.push(bind("/etc/resolv.conf", &ctx.resolv_file, true));
    let mut v = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": uid.unwrap_or(0), "gid": gid.unwrap_or(0)},
            "args": args,
            "env": image.env.clone().unwrap_or_else(|| vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()]),
            "cwd": "/",
            "capabilities": caps_json(DEFAULT_CAPS.iter().map(|s| s.to_string()).collect()),
            "noNewPrivileges": true,
            "oomScoreAdj": (-998i64).max(ctx.oom_score_adj_min),
        },
        "root": {"path": "rootfs", "readonly": true},
        "mounts": mounts,
        "annotations": cri_annotations(ctx, "sandbox", "POD"),
        "linux": {
            "cgroupsPath": format!("{}/{}", ctx.cgroup_parent, ctx.sandbox_id),
            "namespaces": namespaces,
            "resources": {"devices": [{"allow": false, "access": "rwm"}], "cpu": {"shares": 2}},
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
        },
    });
    if !ctx.host_network {
        v["hostname"] = json!(ctx.hostname);
        v["linux"]["sysctl"] = json!({"net.ipv4.ip_unprivileged_port_start": "0"});
    }
    to_spec(v, "POD")
}

fn caps_json(caps: Vec<String>) -> Value {
    json!({"bounding": caps, "effective": caps, "permitted": caps})
}

fn to_spec(v: Value, container: &str) -> Result<Spec, RuntimeError> {
    serde_json::from_value(v).map_err(|e| spec_err(container, "spec", e.to_string()))
}

/// `$(VAR)` expansion as upstream: `$$` is a literal `$`, an undefined `$(VAR)` stays as it
/// is, and a `$` not followed by `(` or `$` is kept.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let b = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            match b[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// Value of an env var's `fieldRef`, from the pod object and what the agent knows of it.
fn field_ref(pod: &Pod, ctx: &PodContext, path: &str) -> Option<String> {
    let meta = &pod.metadata;
    let from_map = |m: &Option<BTreeMap<String, String>>, key: &str| {
        m.as_ref().and_then(|m| m.get(key).cloned())
    };
    let bracket = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['"))
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "spec.nodeName" => Some(ctx.node_name.clone()),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone()),
        "status.hostIP" | "status.hostIPs" => Some(ctx.host_ip.clone()),
        "status.podIP" => Some(ctx.pod_ips.first().cloned().unwrap_or_default()),
        "status.podIPs" => Some(ctx.pod_ips.join(",")),
        _ => {
            if let Some(k) = bracket("metadata.labels") {
                from_map(&meta.labels, &k)
            } else if let Some(k) = bracket("metadata.annotations") {
                from_map(&meta.annotations, &k)
            } else {
                None
            }
        }
    }
}

/// The container's environment: the image's, then the container's own, each later one
/// able to refer to earlier ones with `$(VAR)`.
pub fn container_env(
    pod: &Pod,
    c: &Container,
    image: &ImageConfig,
    ctx: &PodContext,
) -> Result<Vec<(String, String)>, RuntimeError> {
    let mut env: Vec<(String, String)> = split_env(image.env.as_deref().unwrap_or(&[]));
    let mut own: Vec<(String, String)> = Vec::new();
    for (
        i,
        EnvVar {
            name,
            value,
            value_from,
        },
    ) in c.env.iter().flatten().enumerate()
    {
        let field = format!("env[{i}]");
        let v = if let Some(from) = value_from {
            if let Some(f) = &from.field_ref {
                field_ref(pod, ctx, &f.field_path).ok_or_else(|| {
                    spec_err(
                        &c.name,
                        &format!("{field}.valueFrom.fieldRef.fieldPath"),
                        format!("unsupported field path {:?}", f.field_path),
                    )
                })?
            } else if let Some(r) = &from.resource_field_ref {
                // An empty containerName means the container being started, as upstream.
                let target = r
                    .container_name
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(&c.name);
                resource_value(
                    pod,
                    target,
                    &r.resource,
                    r.divisor.as_ref().map(|d| d.0.as_str()),
                    &ctx.allocatable(),
                )
                .map_err(|(sub, reason)| {
                    spec_err(
                        &c.name,
                        &format!("{field}.valueFrom.resourceFieldRef.{sub}"),
                        reason,
                    )
                })?
            } else {
                return Err(spec_err(
                    &c.name,
                    &format!("{field}.valueFrom"),
                    "configMapKeyRef and secretKeyRef need cluster mode, which is not built yet",
                ));
            }
        } else {
            let known = own.clone();
            expand(value.as_deref().unwrap_or(""), &|n| {
                known
                    .iter()
                    .rev()
                    .find(|(k, _)| k == n)
                    .map(|(_, v)| v.clone())
            })
        };
        own.push((name.clone(), v));
    }
    for (k, v) in own {
        if let Some(slot) = env.iter_mut().find(|(ek, _)| *ek == k) {
            slot.1 = v;
        } else {
            env.push((k, v));
        }
    }
    Ok(env)
}

/// Upstream's rule for the process's argv.
pub fn container_args(c: &Container, image: &ImageConfig, env: &[(String, String)]) -> Vec<String> {
    let lookup = |n: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
    };
    let exp = |v: &Vec<String>| v.iter().map(|s| expand(s, &lookup)).collect::<Vec<_>>();
    let command = c.command.as_ref().filter(|v| !v.is_empty());
    let args = c.args.as_ref().filter(|v| !v.is_empty());
    match (command, args) {
        (Some(cmd), Some(a)) => [exp(cmd), exp(a)].concat(),
        (Some(cmd), None) => exp(cmd),
        (None, Some(a)) => [image.entrypoint.clone().unwrap_or_default(), exp(a)].concat(),
        (None, None) => [
            image.entrypoint.clone().unwrap_or_default(),
            image.cmd.clone().unwrap_or_default(),
        ]
        .concat(),
    }
}

fn capability_name(c: &str) -> String {
    let up = c.to_ascii_uppercase();
    if up.starts_with("CAP_") {
        up
    } else {
        format!("CAP_{up}")
    }
}

/// The process user, as the kubelet and containerd's CRI plugin settle it: runAsUser, else
/// the image's user (no user is root); runAsNonRoot checked on that, with upstream's
/// messages; then names, primary and supplementary groups looked up in the image.
fn process_user(
    pod: &Pod,
    c: &Container,
    image: &ImageConfig,
    accounts: &Accounts,
) -> Result<ResolvedUser, RuntimeError> {
    let name = c.name.as_str();
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = c.security_context.as_ref();
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    // An id outside u32 is refused, naming its field.
    let id = |v: Option<i64>, field: &str| {
        v.map(|v| {
            u32::try_from(v).map_err(|_| {
                spec_err(
                    name,
                    &format!("securityContext.{field}"),
                    format!("{v} is out of range"),
                )
            })
        })
        .transpose()
    };
    let run_as_user = id(
        sc.and_then(|s| s.run_as_user)
            .or(pod_sc.and_then(|s| s.run_as_user)),
        "runAsUser",
    )?;
    let run_as_group = id(
        sc.and_then(|s| s.run_as_group)
            .or(pod_sc.and_then(|s| s.run_as_group)),
        "runAsGroup",
    )?;
    let image_user = accounts::image_user(image.user.as_deref().unwrap_or(""));
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or(pod_sc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    if non_root {
        let refusal = match (run_as_user, &image_user) {
            (Some(0), _) => Some("container's runAsUser breaks non-root policy".to_string()),
            (Some(_), _) => None,
            (None, Some(UserRef::Name(n))) => Some(format!(
                "container has runAsNonRoot and image has non-numeric user ({n}), cannot verify user is non-root"
            )),
            (None, Some(UserRef::Id(0)) | None) => {
                Some("container has runAsNonRoot and image will run as root".to_string())
            }
            (None, Some(UserRef::Id(_))) => None,
        };
        if let Some(r) = refusal {
            return Err(spec_err(
                name,
                "securityContext.runAsNonRoot",
                format!("{r} (pod: {pod_name:?}, container: {name})"),
            ));
        }
    }
    let user = match run_as_user {
        Some(u) => UserRef::Id(u),
        None => image_user.unwrap_or(UserRef::Id(0)),
    };
    let mut supplemental: Vec<u32> = Vec::new();
    if let Some(p) = pod_sc {
        supplemental.extend(
            p.supplemental_groups
                .iter()
                .flatten()
                .filter_map(|g| u32::try_from(*g).ok()),
        );
        if let Some(fs) = p.fs_group.and_then(|g| u32::try_from(g).ok()) {
            supplemental.push(fs);
        }
    }
    accounts
        .resolve(&user, run_as_group, &supplemental)
        .map_err(|e| spec_err(name, "image.user", e))
}

/// An app or init container, joined to the sandbox's namespaces. `env` comes from
/// `container_env`; `volume_mounts` are the container's volume binds (OCI mount JSON).
pub fn container_spec(
    pod: &Pod,
    c: &Container,
    image: &ImageConfig,
    ctx: &PodContext,
    env: &[(String, String)],
    volume_mounts: &[Value],
    accounts: &Accounts,
) -> Result<Spec, RuntimeError> {
    let name = c.name.as_str();
    let args = container_args(c, image, env);
    if args.is_empty() {
        return Err(spec_err(
            name,
            "command",
            "no command specified and the image has no entrypoint or cmd",
        ));
    }
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = c.security_context.as_ref();
    let user = process_user(pod, c, image, accounts)?;
    let (uid, gid, additional) = (user.uid, user.gid, user.additional_gids);
    let privileged = sc.and_then(|s| s.privileged).unwrap_or(false);
    let mut caps: Vec<String> = if privileged {
        ALL_CAPS.iter().map(|s| s.to_string()).collect()
    } else {
        DEFAULT_CAPS.iter().map(|s| s.to_string()).collect()
    };
    if let Some(cs) = sc.and_then(|s| s.capabilities.as_ref()) {
        if !privileged {
            for add in cs.add.iter().flatten() {
                let n = capability_name(add);
                if n == "CAP_ALL" {
                    caps = ALL_CAPS.iter().map(|s| s.to_string()).collect();
                } else if !caps.contains(&n) {
                    caps.push(n);
                }
            }
        }
        for drop in cs.drop.iter().flatten() {
            let n = capability_name(drop);
            if n == "CAP_ALL" {
                caps.clear();
            } else {
                caps.retain(|c| *c != n);
            }
        }
    }
    for cap in &caps {
        if !ALL_CAPS.contains(&cap.as_str()) {
            return Err(spec_err(
                name,
                "securityContext.capabilities",
                format!("unknown capability {cap:?}"),
            ));
        }
    }
    let read_only = sc
        .and_then(|s| s.read_only_root_filesystem)
        .unwrap_or(false);
    let no_new_privs = sc.and_then(|s| s.allow_privilege_escalation) == Some(false);

    let sandbox = |ns: &str| format!("/proc/{}/ns/{ns}", ctx.sandbox_pid);
    let mut namespaces = vec![json!({"type": "mount"})];
    if ctx.share_process_namespace {
        namespaces.push(json!({"type": "pid", "path": sandbox("pid")}));
    } else if !ctx.host_pid {
        namespaces.push(json!({"type": "pid"}));
    }
    if !ctx.host_ipc {
        namespaces.push(json!({"type": "ipc", "path": sandbox("ipc")}));
    }
    if !ctx.host_network {
        namespaces.push(json!({"type": "uts", "path": sandbox("uts")}));
        namespaces.push(json!({"type": "network", "path": sandbox("net")}));
    }

    let mut mounts = default_mounts(privileged);
    let taken = |dest: &str| volume_mounts.iter().any(|m| m["destination"] == dest);
    // A volume mounted over one of these files wins, as upstream.
    for (dest, src) in [
        ("/etc/hosts", &ctx.hosts_file),
        ("/etc/hostname", &ctx.hostname_file),
        ("/etc/resolv.conf", &ctx.resolv_file),
    ] {
        if !taken(dest) {
            mounts.push(bind(dest, src, read_only));
        }
    }
    mounts.extend(volume_mounts.iter().cloned());

    let res = c.resources.as_ref();
    let get =
        |m: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
         k: &str| m.and_then(|m| m.get(k)).map(|q| q.0.clone());
    let limits = res.and_then(|r| r.limits.as_ref());
    let requests = res.and_then(|r| r.requests.as_ref());
    let cpu_limit = get(limits, "cpu")
        .map(|q| {
            quantity::cpu_millis(&q).ok_or_else(|| {
                spec_err(
                    name,
                    "resources.limits.cpu",
                    format!("invalid quantity {q:?}"),
                )
            })
        })
        .transpose()?;
    let cpu_request = get(requests, "cpu")
        .map(|q| {
            quantity::cpu_millis(&q).ok_or_else(|| {
                spec_err(
                    name,
                    "resources.requests.cpu",
                    format!("invalid quantity {q:?}"),
                )
            })
        })
        .transpose()?
        .or(cpu_limit);
    let mem_limit = get(limits, "memory")
        .map(|q| {
            quantity::bytes(&q).ok_or_else(|| {
                spec_err(
                    name,
                    "resources.limits.memory",
                    format!("invalid quantity {q:?}"),
                )
            })
        })
        .transpose()?;
    // Upstream: shares = milliCPU * 1024 / 1000, at least 2.
    let shares = cpu_request.map(|m| (m * 1024 / 1000).max(2)).unwrap_or(2);
    let mut cpu = json!({"shares": shares});
    if let Some(l) = cpu_limit {
        let period = 100_000i64;
        cpu["quota"] = json!((l * period / 1000).max(1000));
        cpu["period"] = json!(period);
    }
    let mut resources = json!({
        "devices": [{"allow": privileged, "access": "rwm"}],
        "cpu": cpu,
    });
    if let Some(m) = mem_limit {
        resources["memory"] = json!({"limit": m});
    }

    let mut linux = json!({
        "cgroupsPath": format!("{}/{}", ctx.cgroup_parent, "CONTAINER_ID"),
        "namespaces": namespaces,
        "resources": resources,
    });
    if !privileged {
        linux["maskedPaths"] = json!(MASKED_PATHS);
        linux["readonlyPaths"] = json!(READONLY_PATHS);
    }
    if let Some(sysctls) = pod_sc.and_then(|s| s.sysctls.as_ref()) {
        let m: BTreeMap<String, String> = sysctls
            .iter()
            .map(|s| (s.name.clone(), s.value.clone()))
            .collect();
        linux["sysctl"] = json!(m);
    }
    let cwd = c
        .working_dir
        .clone()
        .filter(|w| !w.is_empty())
        .or_else(|| image.working_dir.clone().filter(|w| !w.is_empty()))
        .unwrap_or_else(|| "/".into());
    if !cwd.starts_with('/') {
        return Err(spec_err(
            name,
            "workingDir",
            format!("{cwd:?} is not an absolute path"),
        ));
    }
    let v = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": uid, "gid": gid, "additionalGids": additional},
            "args": args,
            "env": env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "cwd": cwd,
            "capabilities": caps_json(caps),
            "noNewPrivileges": no_new_privs,
            "oomScoreAdj": ctx.oom_score_adj.max(ctx.oom_score_adj_min),
        },
        "root": {"path": "rootfs", "readonly": read_only},
        "mounts": mounts,
        "annotations": cri_annotations(ctx, "container", name),
        "linux": linux,
    });
    to_spec(v, name)
}

/// Sets the container's own cgroup leaf once its id is known (specs are built before).
pub fn set_cgroup_leaf(spec: &mut Spec, parent: &str, id: &str) {
    if let Some(linux) = spec.linux_mut() {
        linux.set_cgroups_path(Some(format!("{parent}/{id}").into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> PodContext {
        PodContext {
            sandbox_id: "sb".into(),
            pod_name: "p-node".into(),
            pod_namespace: "default".into(),
            pod_uid: "u1".into(),
            cgroup_parent: "/kubepods/besteffort/podu1".into(),
            host_network: false,
            host_pid: false,
            host_ipc: false,
            share_process_namespace: false,
            netns_path: Some("/var/run/netns/cni-x".into()),
            sandbox_pid: 42,
            hostname: "p-node".into(),
            hosts_file: "/r/hosts".into(),
            hostname_file: "/r/hostname".into(),
            resolv_file: "/r/resolv.conf".into(),
            oom_score_adj: 1000,
            oom_score_adj_min: -1000,
            pod_ips: vec!["10.88.0.5".into()],
            host_ip: "192.0.2.1".into(),
            node_name: "node".into(),
            allocatable_cpu_millis: 2000,
            allocatable_memory: 1 << 30,
        }
    }

    fn pod(container: Value) -> (Pod, Container) {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p-node", "namespace": "default", "uid": "u1", "labels": {"app": "x"}},
            "spec": {"containers": [container]}
        }))
        .unwrap();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        (p, c)
    }

    fn image() -> ImageConfig {
        ImageConfig {
            entrypoint: Some(vec!["/ep".into()]),
            cmd: Some(vec!["default-arg".into()]),
            env: Some(vec!["PATH=/bin".into(), "A=image".into()]),
            working_dir: Some("/work".into()),
            user: None,
            stop_signal: None,
        }
    }

    fn spec_of(p: &Pod, c: &Container) -> Result<Spec, RuntimeError> {
        let env = container_env(p, c, &image(), &ctx())?;
        container_spec(p, c, &image(), &ctx(), &env, &[], &Accounts::default())
    }

    #[test]
    fn expansion_rules() {
        let l = |n: &str| (n == "X").then(|| "1".to_string());
        assert_eq!(expand("a$(X)b", &l), "a1b");
        assert_eq!(expand("$(Y)", &l), "$(Y)");
        assert_eq!(expand("$$(X)", &l), "$(X)");
        assert_eq!(expand("$X $", &l), "$X $");
        assert_eq!(expand("$(X", &l), "$(X");
        assert_eq!(expand("é$(X)", &l), "é1");
    }

    #[test]
    fn args_follow_upstream() {
        let img = image();
        let (_, c) = pod(json!({"name": "c", "image": "i"}));
        assert_eq!(container_args(&c, &img, &[]), vec!["/ep", "default-arg"]);
        let (_, c) = pod(json!({"name": "c", "image": "i", "args": ["x"]}));
        assert_eq!(container_args(&c, &img, &[]), vec!["/ep", "x"]);
        let (_, c) = pod(json!({"name": "c", "image": "i", "command": ["sh"]}));
        assert_eq!(container_args(&c, &img, &[]), vec!["sh"]);
        let (_, c) = pod(json!({"name": "c", "image": "i", "command": ["sh"], "args": ["$(V)"]}));
        let env = vec![("V".to_string(), "v".to_string())];
        assert_eq!(container_args(&c, &img, &env), vec!["sh", "v"]);
    }

    #[test]
    fn env_merges_expands_and_reads_fields() {
        let (p, c) = pod(json!({"name": "c", "image": "i", "env": [
            {"name": "A", "value": "own"},
            {"name": "B", "value": "$(A)-x"},
            {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "L", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        ]}));
        let env = container_env(&p, &c, &image(), &ctx()).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("A"), Some("own"));
        assert_eq!(get("B"), Some("own-x"));
        assert_eq!(get("N"), Some("p-node"));
        assert_eq!(get("L"), Some("x"));
        assert_eq!(get("IP"), Some("10.88.0.5"));
        assert_eq!(get("PATH"), Some("/bin"));
        // No limits: node allocatable stands in, as upstream.
        assert_eq!(get("MEM"), Some("1024"));
        assert_eq!(get("CPU"), Some("2"));
    }

    #[test]
    fn resource_field_ref_reads_the_named_container() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p-node", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [
                {"name": "app", "image": "i", "env": [
                    {"name": "SIDE_MEM", "valueFrom": {"resourceFieldRef": {
                        "containerName": "side", "resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "SIDE_CPU", "valueFrom": {"resourceFieldRef": {
                        "containerName": "side", "resource": "requests.cpu", "divisor": "1m"}}},
                    {"name": "OWN_MEM", "valueFrom": {"resourceFieldRef": {
                        "containerName": "", "resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "SIDE_CPU_LIMIT", "valueFrom": {"resourceFieldRef": {
                        "containerName": "side", "resource": "limits.cpu"}}},
                ]},
                {"name": "side", "image": "i", "resources": {
                    "limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}}},
            ]}
        }))
        .unwrap();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let env = container_env(&p, &c, &image(), &ctx()).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("SIDE_MEM"), Some("64"));
        assert_eq!(get("SIDE_CPU"), Some("250"));
        // The own container has no limits: node allocatable (1Gi) stands in.
        assert_eq!(get("OWN_MEM"), Some("1024"));
        // The sibling sets no CPU limit: it falls back to allocatable too.
        assert_eq!(get("SIDE_CPU_LIMIT"), Some("2"));

        let (p, c) = pod(json!({"name": "c", "image": "i", "env": [
            {"name": "X", "valueFrom": {"resourceFieldRef": {
                "containerName": "nope", "resource": "limits.cpu"}}},
        ]}));
        let e = container_env(&p, &c, &image(), &ctx())
            .unwrap_err()
            .to_string();
        assert!(e.contains("resourceFieldRef.containerName"), "{e}");
    }

    #[test]
    fn resources_and_security_context() {
        let (p, c) = pod(json!({"name": "c", "image": "i",
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "250m"}},
            "securityContext": {"runAsUser": 1000, "runAsGroup": 2000, "readOnlyRootFilesystem": true,
                "allowPrivilegeEscalation": false,
                "capabilities": {"add": ["NET_ADMIN"], "drop": ["KILL"]}}}));
        let s = spec_of(&p, &c).unwrap();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["linux"]["resources"]["cpu"]["shares"], 256);
        assert_eq!(v["linux"]["resources"]["cpu"]["quota"], 50000);
        assert_eq!(v["linux"]["resources"]["memory"]["limit"], 64 << 20);
        assert_eq!(v["process"]["user"]["uid"], 1000);
        assert_eq!(v["process"]["user"]["gid"], 2000);
        assert_eq!(v["root"]["readonly"], true);
        assert_eq!(v["process"]["noNewPrivileges"], true);
        assert_eq!(v["process"]["cwd"], "/work");
        let eff: Vec<String> =
            serde_json::from_value(v["process"]["capabilities"]["effective"].clone()).unwrap();
        assert!(eff.contains(&"CAP_NET_ADMIN".to_string()));
        assert!(!eff.contains(&"CAP_KILL".to_string()));
        let ns = v["linux"]["namespaces"].as_array().unwrap();
        assert!(ns
            .iter()
            .any(|n| n["type"] == "network" && n["path"] == "/proc/42/ns/net"));
        assert_eq!(v["annotations"]["io.containerd.runc.v2.group"], "sb");
    }

    /// The spec's process user for an image whose USER is `image_user`.
    fn user_of(c: Value, image_user: Option<&str>) -> Result<Value, String> {
        let (p, c) = pod(c);
        let img = ImageConfig {
            user: image_user.map(String::from),
            ..image()
        };
        let accounts = Accounts::parse(
            "root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/:/bin/sh\nwww:x:33:33::/:/bin/false\n",
            "root:x:0:\nstaff:x:50:app\napp:x:1000:\n",
        );
        let env = container_env(&p, &c, &img, &ctx()).unwrap();
        container_spec(&p, &c, &img, &ctx(), &env, &[], &accounts)
            .map(|s| serde_json::to_value(s).unwrap()["process"]["user"].clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn run_as_non_root_refuses_root_with_upstreams_messages() {
        let sc = |sc: Value| json!({"name": "c", "image": "i", "securityContext": sc});
        let e = user_of(sc(json!({"runAsNonRoot": true})), None).unwrap_err();
        assert!(
            e.contains("container has runAsNonRoot and image will run as root (pod: \"p-node\", container: c)"),
            "{e}"
        );
        let e = user_of(sc(json!({"runAsNonRoot": true})), Some("0:0")).unwrap_err();
        assert!(e.contains("image will run as root"), "{e}");
        let e = user_of(
            sc(json!({"runAsNonRoot": true, "runAsUser": 0})),
            Some("1000"),
        )
        .unwrap_err();
        assert!(
            e.contains("container's runAsUser breaks non-root policy"),
            "{e}"
        );
        let e = user_of(sc(json!({"runAsNonRoot": true})), Some("app")).unwrap_err();
        assert!(
            e.contains("image has non-numeric user (app), cannot verify user is non-root"),
            "{e}"
        );
        assert_eq!(
            user_of(sc(json!({"runAsNonRoot": true})), Some("1000")).unwrap()["uid"],
            1000
        );
        assert_eq!(
            user_of(
                sc(json!({"runAsNonRoot": true, "runAsUser": 7})),
                Some("app")
            )
            .unwrap()["uid"],
            7
        );
    }

    #[test]
    fn the_user_is_looked_up_in_the_image_as_containerd_does() {
        let plain = json!({"name": "c", "image": "i"});
        // A user name: its ids and its groups.
        let u = user_of(plain.clone(), Some("app")).unwrap();
        assert_eq!(
            (u["uid"].clone(), u["gid"].clone()),
            (json!(1000), json!(1000))
        );
        assert_eq!(u["additionalGids"], json!([50, 1000]));
        // A bare uid takes its passwd group; the image's group part is dropped, as upstream.
        let u = user_of(plain.clone(), Some("33:7")).unwrap();
        assert_eq!((u["uid"].clone(), u["gid"].clone()), (json!(33), json!(33)));
        // runAsUser without runAsGroup: the passwd group of that uid, or 0.
        let u = user_of(
            json!({"name": "c", "image": "i", "securityContext": {"runAsUser": 1000}}),
            None,
        )
        .unwrap();
        assert_eq!(u["gid"], 1000);
        let u = user_of(
            json!({"name": "c", "image": "i", "securityContext": {"runAsUser": 4242}}),
            None,
        )
        .unwrap();
        assert_eq!(u["gid"], 0);
        // No user at all is root.
        let u = user_of(plain.clone(), None).unwrap();
        assert_eq!((u["uid"].clone(), u["gid"].clone()), (json!(0), json!(0)));
        // A name the image lacks names the image's user field.
        let e = user_of(plain, Some("ghost")).unwrap_err();
        assert!(
            e.contains("image.user") && e.contains("unable to find user ghost"),
            "{e}"
        );
    }

    #[test]
    fn privileged_gets_all_caps_and_no_masks() {
        let (p, c) =
            pod(json!({"name": "c", "image": "i", "securityContext": {"privileged": true}}));
        let v = serde_json::to_value(spec_of(&p, &c).unwrap()).unwrap();
        assert_eq!(
            v["process"]["capabilities"]["bounding"]
                .as_array()
                .unwrap()
                .len(),
            ALL_CAPS.len()
        );
        assert!(v["linux"].get("maskedPaths").is_none() || v["linux"]["maskedPaths"].is_null());
    }

    #[test]
    fn sandbox_joins_pinned_netns() {
        let img = ImageConfig {
            entrypoint: Some(vec!["/pause".into()]),
            user: Some("65535:65535".into()),
            ..Default::default()
        };
        let v = serde_json::to_value(sandbox_spec(&ctx(), &img).unwrap()).unwrap();
        assert_eq!(v["process"]["user"]["uid"], 65535);
        assert_eq!(v["hostname"], "p-node");
        let ns = v["linux"]["namespaces"].as_array().unwrap();
        assert!(ns
            .iter()
            .any(|n| n["type"] == "network" && n["path"] == "/var/run/netns/cni-x"));
        assert_eq!(v["linux"]["cgroupsPath"], "/kubepods/besteffort/podu1/sb");
    }
}
