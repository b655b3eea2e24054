//! OCI runtime specs for the pod sandbox (pause) and app containers, built from the
//! PodSpec as upstream and containerd's CRI plugin do: image entrypoint/cmd versus
//! command/args, env with `$(VAR)` expansion, resources to cgroup settings, the security
//! context, and the pod's shared namespaces and files.
//!
//! The spec is put together with oci-spec's typed builders, so a misspelled field does not
//! compile. Their `build()` fills every field left unset from the type's `Default`, which
//! for some types is not empty (a process gets an RLIMIT_NOFILE of 1024 and inheritable
//! and ambient capabilities, `Linux` gets masked paths, a spec gets the hostname "youki"):
//! such fields are cleared after building wherever the spec should not carry them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilities, LinuxCapabilitiesBuilder, LinuxCpuBuilder,
    LinuxDeviceCgroupBuilder, LinuxMemoryBuilder, LinuxNamespace, LinuxNamespaceBuilder,
    LinuxNamespaceType, LinuxResources, LinuxResourcesBuilder, Mount, MountBuilder, ProcessBuilder,
    RootBuilder, Spec, SpecBuilder, UserBuilder,
};
use oci_spec::OciSpecError;

use crate::runtime::accounts::{self, Accounts, ResolvedUser, UserRef};
use crate::runtime::images::ImageConfig;
use crate::runtime::RuntimeError;
use crate::vocabulary::quantity::Quantity;
use crate::vocabulary::swap::ContainerSwap;
use crate::volume::Allocatable;

pub mod apparmor;
mod devices;
mod env;
pub mod seccomp;
pub mod selinux;
mod service_env;

pub use devices::{add_devices, host_devices, set_privileged_devices, DeviceInfo};
pub use env::{container_env, env_references, expand, EnvError, EnvObjects, EnvReferences};
pub use service_env::{service_env, service_links_enabled};

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
    /// The running process of an ephemeral container's target container, whose process
    /// namespace it joins (upstream's NamespaceMode TARGET) unless the pod shares one.
    pub target_pid: Option<u32>,
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
    /// Swap for the pod's app, init and ephemeral containers.
    pub swap: ContainerSwap,
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

/// A builder's failure, which names the container; the builders here set no required
/// field late, so this is not expected in practice.
fn built(container: &str) -> impl Fn(OciSpecError) -> RuntimeError + '_ {
    move |e| spec_err(container, "spec", e.to_string())
}

/// containerd's default capability set.
const DEFAULT_CAPS: [Capability; 14] = [
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fsetid,
    Capability::Fowner,
    Capability::Mknod,
    Capability::NetRaw,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setfcap,
    Capability::Setpcap,
    Capability::NetBindService,
    Capability::SysChroot,
    Capability::Kill,
    Capability::AuditWrite,
];

/// Every capability the kernel knows (privileged containers get them all).
const ALL_CAPS: [Capability; 41] = [
    Capability::Chown,
    Capability::DacOverride,
    Capability::DacReadSearch,
    Capability::Fowner,
    Capability::Fsetid,
    Capability::Kill,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setpcap,
    Capability::LinuxImmutable,
    Capability::NetBindService,
    Capability::NetBroadcast,
    Capability::NetAdmin,
    Capability::NetRaw,
    Capability::IpcLock,
    Capability::IpcOwner,
    Capability::SysModule,
    Capability::SysRawio,
    Capability::SysChroot,
    Capability::SysPtrace,
    Capability::SysPacct,
    Capability::SysAdmin,
    Capability::SysBoot,
    Capability::SysNice,
    Capability::SysResource,
    Capability::SysTime,
    Capability::SysTtyConfig,
    Capability::Mknod,
    Capability::Lease,
    Capability::AuditWrite,
    Capability::AuditControl,
    Capability::Setfcap,
    Capability::MacOverride,
    Capability::MacAdmin,
    Capability::Syslog,
    Capability::WakeAlarm,
    Capability::BlockSuspend,
    Capability::AuditRead,
    Capability::Perfmon,
    Capability::Bpf,
    Capability::CheckpointRestore,
];

/// The capabilities a privileged container (or an "ALL" add) gets: those of `ALL_CAPS` (in
/// kernel order, so index = capability number) inside the bounding set `bounding`, all when
/// it is unknown.
fn caps_within(bounding: Option<u64>) -> Vec<Capability> {
    ALL_CAPS
        .iter()
        .enumerate()
        .filter(|(bit, _)| bounding.is_none_or(|b| b & (1u64 << bit) != 0))
        .map(|(_, cap)| *cap)
        .collect()
}

/// The agent's bounding set, as containerd's CRI gives privileged containers the runtime's
/// current capabilities rather than every one the kernel knows: runc cannot grant one outside
/// its own bounding set and fails the start ("unable to apply caps"), as it would here, where
/// the machine withholds CAP_SYS_RESOURCE.
fn available_caps() -> &'static [Capability] {
    static CAPS: OnceLock<Vec<Capability>> = OnceLock::new();
    CAPS.get_or_init(|| {
        let bounding = procfs::process::Process::myself()
            .and_then(|p| p.status())
            .ok()
            .and_then(|s| s.capbnd);
        caps_within(bounding)
    })
}

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

// The cpu conversions are the cgroups layer's, written once there.
use crate::cgroups::{milli_cpu_to_quota, milli_cpu_to_shares, MIN_SHARES, QUOTA_PERIOD};

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn mount(
    dest: &str,
    typ: &str,
    source: impl Into<PathBuf>,
    options: Vec<String>,
) -> Result<Mount, OciSpecError> {
    MountBuilder::default()
        .destination(dest)
        .typ(typ)
        .source(source)
        .options(options)
        .build()
}

/// A bind mount with `options` after "rbind" (propagation, then "ro"/"rw", ...).
pub(crate) fn bind_mount(
    dest: &str,
    source: impl Into<PathBuf>,
    options: &[&str],
) -> Result<Mount, OciSpecError> {
    let mut all = vec!["rbind".to_string()];
    all.extend(strings(options));
    mount(dest, "bind", source, all)
}

fn default_mounts(privileged: bool) -> Result<Vec<Mount>, OciSpecError> {
    let sys = if privileged { "rw" } else { "ro" };
    Ok(vec![
        mount(
            "/proc",
            "proc",
            "proc",
            strings(&["nosuid", "noexec", "nodev"]),
        )?,
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            strings(&["nosuid", "strictatime", "mode=755", "size=65536k"]),
        )?,
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            strings(&[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ]),
        )?,
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            strings(&["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]),
        )?,
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            strings(&["nosuid", "noexec", "nodev"]),
        )?,
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            strings(&["nosuid", "noexec", "nodev", sys]),
        )?,
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            strings(&["nosuid", "noexec", "nodev", "relatime", sys]),
        )?,
    ])
}

fn bind(dest: &str, src: &str, ro: bool) -> Result<Mount, OciSpecError> {
    bind_mount(dest, src, &["rprivate", if ro { "ro" } else { "rw" }])
}

fn cri_annotations(ctx: &PodContext, kind: &str, container: &str) -> HashMap<String, String> {
    [
        ("io.kubernetes.cri.container-type", kind),
        ("io.kubernetes.cri.sandbox-id", &ctx.sandbox_id),
        ("io.kubernetes.cri.sandbox-name", &ctx.pod_name),
        ("io.kubernetes.cri.sandbox-namespace", &ctx.pod_namespace),
        ("io.kubernetes.cri.sandbox-uid", &ctx.pod_uid),
        ("io.kubernetes.cri.container-name", container),
        // One runc shim per pod: the shim groups containers carrying the same value.
        ("io.containerd.runc.v2.group", &ctx.sandbox_id),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// A namespace to create (`path` None) or to join.
fn namespace(
    typ: LinuxNamespaceType,
    path: Option<String>,
) -> Result<LinuxNamespace, OciSpecError> {
    match path {
        Some(p) => LinuxNamespaceBuilder::default().typ(typ).path(p).build(),
        None => LinuxNamespaceBuilder::default().typ(typ).build(),
    }
}

/// The bounding, effective and permitted sets (inheritable and ambient stay empty, as
/// containerd leaves them).
fn capabilities(caps: HashSet<Capability>) -> Result<LinuxCapabilities, OciSpecError> {
    let mut c = LinuxCapabilitiesBuilder::default()
        .bounding(caps.clone())
        .effective(caps.clone())
        .permitted(caps)
        .build()?;
    c.set_inheritable(None);
    c.set_ambient(None);
    Ok(c)
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

/// The oom_score_adj as the kernel takes it (-1000..=1000), never below what the agent
/// may give.
fn oom_score_adj(want: i64, min: i64) -> i32 {
    want.max(min).clamp(-1000, 1000) as i32
}

/// The pause container: holds the pod's namespaces.
pub fn sandbox_spec(ctx: &PodContext, image: &ImageConfig) -> Result<Spec, RuntimeError> {
    let oci = built("POD");
    let mut args: Vec<String> = image.entrypoint.clone().unwrap_or_default();
    args.extend(image.cmd.clone().unwrap_or_default());
    if args.is_empty() {
        args.push("/pause".into());
    }
    let (uid, gid) = numeric_user(image.user.as_deref().unwrap_or(""))
        .map_err(|e| spec_err("POD", "image.user", e))?;
    let mut namespaces = vec![namespace(LinuxNamespaceType::Mount, None)];
    if !ctx.host_pid {
        namespaces.push(namespace(LinuxNamespaceType::Pid, None));
    }
    if !ctx.host_ipc {
        namespaces.push(namespace(LinuxNamespaceType::Ipc, None));
    }
    if !ctx.host_network {
        namespaces.push(namespace(LinuxNamespaceType::Uts, None));
        let path = ctx
            .netns_path
            .clone()
            .ok_or_else(|| spec_err("POD", "netns", "no network namespace for a pod network"))?;
        namespaces.push(namespace(LinuxNamespaceType::Network, Some(path)));
    }
    let namespaces = namespaces
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(&oci)?;
    let mut mounts = default_mounts(false).map_err(&oci)?;
    mounts.push(bind("/etc/resolv.conf", &ctx.resolv_file, true).map_err(&oci)?);
    let user = UserBuilder::default()
        .uid(uid.unwrap_or(0))
        .gid(gid.unwrap_or(0))
        .build()
        .map_err(&oci)?;
    let env = image.env.clone().unwrap_or_else(|| {
        vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()]
    });
    let mut process = ProcessBuilder::default()
        .terminal(false)
        .user(user)
        .args(args)
        .env(env)
        .cwd("/")
        .capabilities(capabilities(DEFAULT_CAPS.into_iter().collect()).map_err(&oci)?)
        .no_new_privileges(true)
        .oom_score_adj(oom_score_adj(-998, ctx.oom_score_adj_min))
        .build()
        .map_err(&oci)?;
    process.set_rlimits(None);
    let resources = LinuxResourcesBuilder::default()
        .devices(vec![LinuxDeviceCgroupBuilder::default()
            .allow(false)
            .access("rwm")
            .build()
            .map_err(&oci)?])
        .cpu(
            LinuxCpuBuilder::default()
                .shares(MIN_SHARES)
                .build()
                .map_err(&oci)?,
        )
        .build()
        .map_err(&oci)?;
    let mut linux = LinuxBuilder::default()
        .cgroups_path(format!("{}/{}", ctx.cgroup_parent, ctx.sandbox_id))
        .namespaces(namespaces)
        .resources(resources)
        .masked_paths(strings(&MASKED_PATHS))
        .readonly_paths(strings(&READONLY_PATHS));
    if !ctx.host_network {
        linux = linux.sysctl(HashMap::from([(
            "net.ipv4.ip_unprivileged_port_start".to_string(),
            "0".to_string(),
        )]));
    }
    let mut spec = SpecBuilder::default()
        .version("1.0.2")
        .process(process)
        .root(
            RootBuilder::default()
                .path("rootfs")
                .readonly(true)
                .build()
                .map_err(&oci)?,
        )
        .mounts(mounts)
        .annotations(cri_annotations(ctx, "sandbox", "POD"))
        .linux(linux.build().map_err(&oci)?)
        .build()
        .map_err(&oci)?;
    spec.set_hostname((!ctx.host_network).then(|| ctx.hostname.clone()));
    Ok(spec)
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

/// A capability named as the API writes it ("NET_ADMIN", "CAP_NET_ADMIN", any case);
/// None when the kernel has no such capability.
fn capability(name: &str) -> Option<Capability> {
    let full = capability_name(name);
    Capability::from_str(full.strip_prefix("CAP_").unwrap_or(&full)).ok()
}

/// The container's capability set: containerd's defaults (all when privileged), then the
/// securityContext's adds (ignored when privileged) and drops; "ALL" means every one.
fn container_capabilities(
    c: &Container,
    privileged: bool,
) -> Result<HashSet<Capability>, RuntimeError> {
    let sc = c.security_context.as_ref();
    let mut caps: HashSet<Capability> = if privileged {
        available_caps().iter().copied().collect()
    } else {
        DEFAULT_CAPS.into_iter().collect()
    };
    if let Some(cs) = sc.and_then(|s| s.capabilities.as_ref()) {
        if !privileged {
            for add in cs.add.iter().flatten() {
                if capability_name(add) == "CAP_ALL" {
                    caps.extend(available_caps());
                } else {
                    caps.insert(capability(add).ok_or_else(|| {
                        spec_err(
                            &c.name,
                            "securityContext.capabilities",
                            format!("unknown capability {:?}", capability_name(add)),
                        )
                    })?);
                }
            }
        }
        for drop in cs.drop.iter().flatten() {
            if capability_name(drop) == "CAP_ALL" {
                caps.clear();
            } else if let Some(cap) = capability(drop) {
                caps.remove(&cap);
            }
        }
    }
    Ok(caps)
}

/// A container's resource quantity, refused with its field named when malformed or
/// negative.
fn resource_quantity(
    container: &str,
    field: &str,
    q: Option<&ApiQuantity>,
) -> Result<Option<Quantity>, RuntimeError> {
    let Some(q) = q else { return Ok(None) };
    let v = Quantity::from_api(q).map_err(|e| spec_err(container, field, e.to_string()))?;
    if v.is_negative() {
        return Err(spec_err(
            container,
            field,
            format!("{:?} must not be negative", q.0),
        ));
    }
    Ok(Some(v))
}

/// The container's cgroup resources as upstream's kuberuntime computes them
/// (calculateLinuxResources): shares from the CPU request (from the limit when the request
/// is zero or unset), a CFS quota over a 100ms period from a non-zero CPU limit, and the
/// memory limit in bytes when non-zero, every quantity rounded up as upstream rounds it.
pub(crate) fn container_resources(
    c: &Container,
    privileged: bool,
    swap: ContainerSwap,
) -> Result<LinuxResources, RuntimeError> {
    let name = c.name.as_str();
    let oci = built(name);
    let res = c.resources.as_ref();
    let limits = res.and_then(|r| r.limits.as_ref());
    let requests = res.and_then(|r| r.requests.as_ref());
    let get = |m: Option<&BTreeMap<String, ApiQuantity>>, kind: &str, what: &str| {
        resource_quantity(
            name,
            &format!("resources.{kind}.{what}"),
            m.and_then(|m| m.get(what)),
        )
    };
    let cpu_limit = get(limits, "limits", "cpu")?.unwrap_or_default();
    let cpu_request = get(requests, "requests", "cpu")?.unwrap_or_default();
    let mem_limit = get(limits, "limits", "memory")?.unwrap_or_default();

    let shares = if cpu_request.is_zero() && !cpu_limit.is_zero() {
        milli_cpu_to_shares(cpu_limit.milli_value())
    } else {
        milli_cpu_to_shares(cpu_request.milli_value())
    };
    let mut cpu = LinuxCpuBuilder::default().shares(shares);
    let quota = milli_cpu_to_quota(cpu_limit.milli_value(), QUOTA_PERIOD);
    if quota != 0 {
        cpu = cpu.quota(quota).period(QUOTA_PERIOD);
    }
    let mut resources = LinuxResourcesBuilder::default()
        .devices(vec![LinuxDeviceCgroupBuilder::default()
            .allow(privileged)
            .access("rwm")
            .build()
            .map_err(&oci)?])
        .cpu(cpu.build().map_err(&oci)?);
    if mem_limit.value() != 0 {
        let mut memory = LinuxMemoryBuilder::default().limit(mem_limit.value());
        // v1 NoSwap: memory+swap capped at the memory limit (upstream sets it only when
        // there is a limit to equal).
        if swap == ContainerSwap::NoSwapV1 {
            memory = memory.swap(mem_limit.value());
        }
        resources = resources.memory(memory.build().map_err(&oci)?);
    }
    if swap == ContainerSwap::NoSwapV2 {
        resources = resources.unified(HashMap::from([(
            "memory.swap.max".to_string(),
            "0".to_string(),
        )]));
    }
    resources.build().map_err(&oci)
}

/// The PATH containerd's CRI plugin gives a container (`oci.WithDefaultPathEnv`).
const DEFAULT_PATH_ENV: (&str, &str) = (
    "PATH",
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
);

/// The process environment as containerd's CRI plugin lays it out: its default PATH first,
/// `TERM=xterm` for a tty (`oci.WithTTY`), `HOSTNAME` (the sandbox's hostname; empty when
/// none is known), then the image's and the container's variables, each replacing a
/// variable of the same name in place or appended. An image without PATH (or without any
/// Env) so still gets one, and commands without a slash are found as under the upstream
/// kubelet.
fn process_env(env: &[(String, String)], tty: bool, hostname: &str) -> Vec<String> {
    let mut base = vec![DEFAULT_PATH_ENV];
    if tty {
        base.push(("TERM", "xterm"));
    }
    if !hostname.is_empty() {
        base.push(("HOSTNAME", hostname));
    }
    let mut out: Vec<String> = base.iter().map(|(k, v)| format!("{k}={v}")).collect();
    // (A container with every Service's variables has thousands.)
    let mut index: HashMap<&str, usize> =
        base.iter().enumerate().map(|(i, (k, _))| (*k, i)).collect();
    for (k, v) in env {
        let var = format!("{k}={v}");
        match index.get(k.as_str()) {
            Some(&i) => out[i] = var,
            None => {
                index.insert(k, out.len());
                out.push(var);
            }
        }
    }
    out
}

/// An app or init container, joined to the sandbox's namespaces. `env` comes from
/// `container_env`; `volume_mounts` are the container's volume binds.
pub fn container_spec(
    pod: &Pod,
    c: &Container,
    image: &ImageConfig,
    ctx: &PodContext,
    env: &[(String, String)],
    volume_mounts: &[Mount],
    accounts: &Accounts,
) -> Result<Spec, RuntimeError> {
    let name = c.name.as_str();
    let oci = built(name);
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
    let privileged = sc.and_then(|s| s.privileged).unwrap_or(false);
    let caps = container_capabilities(c, privileged)?;
    let read_only = sc
        .and_then(|s| s.read_only_root_filesystem)
        .unwrap_or(false);
    let no_new_privs = sc.and_then(|s| s.allow_privilege_escalation) == Some(false);

    let sandbox = |ns: &str| Some(format!("/proc/{}/ns/{ns}", ctx.sandbox_pid));
    let mut namespaces = vec![namespace(LinuxNamespaceType::Mount, None)];
    if ctx.share_process_namespace {
        namespaces.push(namespace(LinuxNamespaceType::Pid, sandbox("pid")));
    } else if let Some(pid) = ctx.target_pid.filter(|_| !ctx.host_pid) {
        let target = format!("/proc/{pid}/ns/pid");
        namespaces.push(namespace(LinuxNamespaceType::Pid, Some(target)));
    } else if !ctx.host_pid {
        namespaces.push(namespace(LinuxNamespaceType::Pid, None));
    }
    if !ctx.host_ipc {
        namespaces.push(namespace(LinuxNamespaceType::Ipc, sandbox("ipc")));
    }
    if !ctx.host_network {
        namespaces.push(namespace(LinuxNamespaceType::Uts, sandbox("uts")));
        namespaces.push(namespace(LinuxNamespaceType::Network, sandbox("net")));
    }
    let namespaces = namespaces
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(&oci)?;

    let mut mounts = default_mounts(privileged).map_err(&oci)?;
    let taken = |dest: &str| {
        volume_mounts
            .iter()
            .any(|m| m.destination().as_os_str() == dest)
    };
    // A volume mounted over one of these files wins, as upstream.
    for (dest, src) in [
        ("/etc/hosts", &ctx.hosts_file),
        ("/etc/hostname", &ctx.hostname_file),
        ("/etc/resolv.conf", &ctx.resolv_file),
    ] {
        if !taken(dest) {
            mounts.push(bind(dest, src, read_only).map_err(&oci)?);
        }
    }
    mounts.extend(volume_mounts.iter().cloned());

    let mut linux = LinuxBuilder::default()
        .cgroups_path(format!("{}/{}", ctx.cgroup_parent, "CONTAINER_ID"))
        .namespaces(namespaces)
        .resources(container_resources(c, privileged, ctx.swap)?);
    if let Some(sysctls) = pod_sc.and_then(|s| s.sysctls.as_ref()) {
        linux = linux.sysctl(
            sysctls
                .iter()
                // runc writes each under /proc/sys by its dotted name.
                .map(|s| {
                    (
                        crate::pod::admission::normalize_sysctl(&s.name),
                        s.value.clone(),
                    )
                })
                .collect::<HashMap<_, _>>(),
        );
    }
    let mut linux = linux.build().map_err(&oci)?;
    if privileged {
        // The builder's default masks paths; a privileged container sees them all.
        linux.set_masked_paths(None);
        linux.set_readonly_paths(None);
    } else {
        linux.set_masked_paths(Some(strings(&MASKED_PATHS)));
        linux.set_readonly_paths(Some(strings(&READONLY_PATHS)));
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
    let tty = c.tty == Some(true);
    let process_env = process_env(env, tty, &ctx.hostname);
    let mut process = ProcessBuilder::default()
        .terminal(tty)
        .user(
            UserBuilder::default()
                .uid(user.uid)
                .gid(user.gid)
                .additional_gids(user.additional_gids)
                .build()
                .map_err(&oci)?,
        )
        .args(args)
        .env(process_env)
        .cwd(cwd)
        .capabilities(capabilities(caps).map_err(&oci)?)
        .no_new_privileges(no_new_privs)
        .oom_score_adj(oom_score_adj(ctx.oom_score_adj, ctx.oom_score_adj_min))
        .build()
        .map_err(&oci)?;
    process.set_rlimits(None);
    let mut spec = SpecBuilder::default()
        .version("1.0.2")
        .process(process)
        .root(
            RootBuilder::default()
                .path("rootfs")
                .readonly(read_only)
                .build()
                .map_err(&oci)?,
        )
        .mounts(mounts)
        .annotations(cri_annotations(ctx, "container", name))
        .linux(linux)
        .build()
        .map_err(&oci)?;
    spec.set_hostname(None);
    Ok(spec)
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
    use serde_json::{json, Value};

    /// Shared with `spec::env`'s tests.
    pub(super) fn ctx() -> PodContext {
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
            target_pid: None,
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
            swap: ContainerSwap::Unmanaged,
        }
    }

    pub(super) fn pod(container: Value) -> (Pod, Container) {
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

    pub(super) fn spec_of(p: &Pod, c: &Container) -> Result<Spec, RuntimeError> {
        let env =
            container_env(p, c, &image(), &ctx(), &EnvObjects::default()).map_err(|e| match e {
                EnvError::Spec(e) => e,
                e => panic!("{e}"),
            })?;
        container_spec(p, c, &image(), &ctx(), &env, &[], &Accounts::default())
    }

    #[test]
    fn sysctl_names_with_slashes_reach_the_runtime_dotted() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"securityContext": {"sysctls": [
                    {"name": "net/ipv4/conf/eno2.100/rp_filter", "value": "1"},
                    {"name": "kernel.shm_rmid_forced", "value": "1"}]},
                "containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let s = spec_of(&p, &c).unwrap();
        let mut got: Vec<_> = s
            .linux()
            .clone()
            .unwrap()
            .sysctl()
            .clone()
            .unwrap()
            .into_iter()
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("kernel.shm_rmid_forced".to_string(), "1".to_string()),
                (
                    "net.ipv4.conf.eno2/100.rp_filter".to_string(),
                    "1".to_string()
                ),
            ]
        );
    }

    #[test]
    fn an_ephemeral_container_joins_its_targets_process_namespace_unless_the_pod_shares_one() {
        let (p, c) = pod(json!({"name": "debugger", "image": "i"}));
        let pid_ns = |ctx: &PodContext| {
            let env = container_env(&p, &c, &image(), ctx, &EnvObjects::default()).unwrap();
            let s = container_spec(&p, &c, &image(), ctx, &env, &[], &Accounts::default()).unwrap();
            let linux = s.linux().clone().unwrap();
            linux
                .namespaces()
                .clone()
                .unwrap()
                .into_iter()
                .find(|n| n.typ() == LinuxNamespaceType::Pid)
                .map(|n| n.path().clone().map(|p| p.display().to_string()))
        };
        let mut target = ctx();
        target.target_pid = Some(77);
        assert_eq!(pid_ns(&target), Some(Some("/proc/77/ns/pid".into())));
        assert_eq!(pid_ns(&ctx()), Some(None), "a process namespace of its own");
        let mut shared = target.clone();
        shared.share_process_namespace = true;
        assert_eq!(pid_ns(&shared), Some(Some("/proc/42/ns/pid".into())));
        let mut host = target;
        host.host_pid = true;
        assert_eq!(pid_ns(&host), None, "the host's");
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

    /// containerd's CRI plugin gives every container its default PATH first, TERM for a
    /// tty, then HOSTNAME (the sandbox's); the image's and the container's variables replace
    /// them in place or follow them.
    #[test]
    fn containers_get_containerds_default_path_and_hostname() {
        let default = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        let process_env = |img: &ImageConfig, c: Value| {
            let (p, c) = pod(c);
            let env = container_env(&p, &c, img, &ctx(), &EnvObjects::default()).unwrap();
            let s = container_spec(&p, &c, img, &ctx(), &env, &[], &Accounts::default()).unwrap();
            s.process().as_ref().unwrap().env().clone().unwrap()
        };
        let hostname = "HOSTNAME=p-node".to_string();
        let mut no_env = image();
        no_env.env = None;
        assert_eq!(
            process_env(&no_env, json!({"name": "c", "image": "i"})),
            vec![default.to_string(), hostname.clone()]
        );
        // Env without PATH: the defaults first, then the image's, then the container's.
        no_env.env = Some(vec!["A=image".into()]);
        assert_eq!(
            process_env(
                &no_env,
                json!({"name": "c", "image": "i", "env": [{"name": "B", "value": "own"}]})
            ),
            vec![
                default.to_string(),
                hostname.clone(),
                "A=image".into(),
                "B=own".into()
            ]
        );
        // The image's PATH (or the container's) takes the default's place; a container's
        // HOSTNAME or TERM replaces the plugin's.
        let mut late_path = image();
        late_path.env = Some(vec!["A=image".into(), "PATH=/opt/bin".into()]);
        assert_eq!(
            process_env(&late_path, json!({"name": "c", "image": "i"})),
            vec![
                "PATH=/opt/bin".to_string(),
                hostname.clone(),
                "A=image".into()
            ]
        );
        assert_eq!(
            process_env(
                &late_path,
                json!({"name": "c", "image": "i", "tty": true, "env": [
                    {"name": "PATH", "value": "/own"},
                    {"name": "HOSTNAME", "value": "mine"},
                    {"name": "TERM", "value": "vt100"}]})
            ),
            vec![
                "PATH=/own".to_string(),
                "TERM=vt100".into(),
                "HOSTNAME=mine".into(),
                "A=image".into()
            ]
        );
        assert_eq!(
            process_env(&late_path, json!({"name": "c", "image": "i", "tty": true})),
            vec![
                "PATH=/opt/bin".to_string(),
                "TERM=xterm".into(),
                hostname,
                "A=image".into()
            ]
        );
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
        let env = container_env(&p, &c, &image(), &ctx(), &EnvObjects::default()).unwrap();
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
        let env = container_env(&p, &c, &image(), &ctx(), &EnvObjects::default()).unwrap();
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
        let e = container_env(&p, &c, &image(), &ctx(), &EnvObjects::default())
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

    #[test]
    fn no_swap_caps_swap_as_upstream_on_each_cgroup_version() {
        let limited =
            json!({"name": "c", "image": "i", "resources": {"limits": {"memory": "64Mi"}}});
        let free = json!({"name": "c", "image": "i"});
        let resources = |c: Value, swap| {
            let (p, c) = pod(c);
            let ctx = PodContext { swap, ..ctx() };
            let env = container_env(&p, &c, &image(), &ctx, &EnvObjects::default()).unwrap();
            let s =
                container_spec(&p, &c, &image(), &ctx, &env, &[], &Accounts::default()).unwrap();
            serde_json::to_value(s).unwrap()["linux"]["resources"].clone()
        };
        let v2 = resources(free.clone(), ContainerSwap::NoSwapV2);
        assert_eq!(v2["unified"]["memory.swap.max"], "0");
        let v1 = resources(limited.clone(), ContainerSwap::NoSwapV1);
        assert_eq!(
            v1["memory"]["swap"],
            64 << 20,
            "memory+swap = the memory limit"
        );
        assert!(v1["unified"].is_null());
        let v1_free = resources(free, ContainerSwap::NoSwapV1);
        assert!(v1_free["memory"].is_null(), "no limit to equal: {v1_free}");
        let none = resources(limited, ContainerSwap::Unmanaged);
        assert!(
            none["memory"]["swap"].is_null() && none["unified"].is_null(),
            "{none}"
        );
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
        let env = container_env(&p, &c, &img, &ctx(), &EnvObjects::default()).unwrap();
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
            available_caps().len()
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

    fn golden(name: &str) -> Spec {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/runtime/testdata")
            .join(format!("{name}.json"));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    /// testdata/container-privileged.json, with every capability, as this host would have it:
    /// only those of its bounding set.
    fn privileged_golden() -> Spec {
        let mut spec = golden("container-privileged");
        let keep: HashSet<Capability> = available_caps().iter().copied().collect();
        let mut process = spec.process().clone().unwrap();
        let mut caps = process.capabilities().clone().unwrap();
        let within = |set: &Option<HashSet<Capability>>| {
            set.as_ref()
                .map(|s| s.intersection(&keep).copied().collect::<HashSet<_>>())
        };
        caps.set_bounding(within(caps.bounding()));
        caps.set_effective(within(caps.effective()));
        caps.set_permitted(within(caps.permitted()));
        process.set_capabilities(Some(caps));
        spec.set_process(Some(process));
        spec
    }

    /// The typed builders produce the very documents the earlier JSON-built specs were
    /// (captured in testdata/ before the rewrite), field for field: nothing the builders'
    /// defaults would add (rlimits, inheritable or ambient capabilities, masked paths on a
    /// privileged container, a hostname under hostNetwork) slips in.
    #[test]
    fn specs_are_the_documents_they_were() {
        let pause = ImageConfig {
            entrypoint: Some(vec!["/pause".into()]),
            user: Some("65535:65535".into()),
            ..Default::default()
        };
        assert_eq!(sandbox_spec(&ctx(), &pause).unwrap(), golden("sandbox"));
        let mut hn = ctx();
        hn.host_network = true;
        hn.host_pid = true;
        hn.host_ipc = true;
        hn.netns_path = None;
        assert_eq!(
            sandbox_spec(&hn, &ImageConfig::default()).unwrap(),
            golden("sandbox-host")
        );
        let (p, c) = pod(json!({"name": "c", "image": "i",
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "250m"}},
            "securityContext": {"runAsUser": 1000, "runAsGroup": 2000, "readOnlyRootFilesystem": true,
                "allowPrivilegeEscalation": false,
                "capabilities": {"add": ["NET_ADMIN"], "drop": ["KILL"]}}}));
        assert_eq!(spec_of(&p, &c).unwrap(), golden("container"));
        let (p, c) =
            pod(json!({"name": "c", "image": "i", "securityContext": {"privileged": true}}));
        assert_eq!(spec_of(&p, &c).unwrap(), privileged_golden());
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p-node", "namespace": "default", "uid": "u1"},
            "spec": {"securityContext": {"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}],
                    "supplementalGroups": [5], "fsGroup": 7},
                "containers": [{"name": "c", "image": "i", "workingDir": "/w", "command": ["sh"],
                    "env": [{"name": "X", "value": "y"}], "resources": {"limits": {"memory": "1Gi"}}}]}
        }))
        .unwrap();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let mut sp = ctx();
        sp.share_process_namespace = true;
        sp.host_network = true;
        let env = container_env(&p, &c, &image(), &sp, &EnvObjects::default()).unwrap();
        let mounts = vec![
            bind_mount("/etc/hosts", "/v/hosts", &["rprivate", "ro"]).unwrap(),
            bind_mount("/data", "/v/data", &["rslave", "rw"]).unwrap(),
        ];
        let s = container_spec(&p, &c, &image(), &sp, &env, &mounts, &Accounts::default()).unwrap();
        assert_eq!(s, golden("container-shared"));
        // Also as serialized text: no field present in one and absent in the other.
        assert_eq!(
            serde_json::to_value(&s)
                .unwrap()
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            serde_json::to_value(golden("container-shared"))
                .unwrap()
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>()
        );
    }

    /// cpu.shares and the CFS quota of a container whose request and limit are `cpu`.
    fn cpu_of(cpu: &str) -> (Value, Value, Value) {
        let (p, c) = pod(json!({"name": "c", "image": "i",
            "resources": {"limits": {"cpu": cpu}, "requests": {"cpu": cpu}}}));
        let v = serde_json::to_value(spec_of(&p, &c).unwrap()).unwrap();
        let cpu = &v["linux"]["resources"]["cpu"];
        (
            cpu["shares"].clone(),
            cpu["quota"].clone(),
            cpu["period"].clone(),
        )
    }

    /// Every milli value from 1m to 4000m, written as millis, as a decimal and with an
    /// exponent, gives the shares and quota upstream computes, worked out here in integer
    /// arithmetic the way upstream's MilliCPUToShares and milliCPUToQuota do it.
    #[test]
    fn cpu_shares_and_quota_match_upstream_for_every_milli_value() {
        for m in 1..=4000i64 {
            let shares = (m * 1024 / 1000).clamp(2, 262_144);
            let quota = (m * 100_000 / 1000).max(1000);
            for form in [
                format!("{m}m"),
                format!("{}.{:03}", m / 1000, m % 1000),
                format!("{m}e-3"),
            ] {
                assert_eq!(
                    cpu_of(&form),
                    (json!(shares), json!(quota), json!(100_000)),
                    "{form}"
                );
            }
        }
        // Sub-milli values round up to the next milli, as MilliValue does.
        assert_eq!(cpu_of("0.0001").0, json!(2));
        assert_eq!(cpu_of("1001u").1, json!(1000));
        assert_eq!(cpu_of("2.0001").0, json!(2049));
        assert_eq!(cpu_of("2.0001").1, json!(200_100));
    }

    #[test]
    fn cpu_edges_follow_upstream() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(256_000), 262_144);
        assert_eq!(milli_cpu_to_shares(300_000), 262_144, "capped at MaxShares");
        assert_eq!(milli_cpu_to_quota(0, QUOTA_PERIOD), 0);
        assert_eq!(milli_cpu_to_quota(1, QUOTA_PERIOD), 1000);
        assert_eq!(milli_cpu_to_quota(10, QUOTA_PERIOD), 1000);
        assert_eq!(milli_cpu_to_quota(11, QUOTA_PERIOD), 1100);
        let spec = |res: Value| {
            let (p, c) = pod(json!({"name": "c", "image": "i", "resources": res}));
            serde_json::to_value(spec_of(&p, &c).unwrap()).unwrap()["linux"]["resources"].clone()
        };
        // A zero request takes its shares from the limit; a zero limit sets no quota; a
        // zero memory limit sets no limit.
        let r = spec(json!({"requests": {"cpu": "0"}, "limits": {"cpu": "1", "memory": "0"}}));
        assert_eq!(r["cpu"]["shares"], 1024);
        assert!(r.get("memory").is_none(), "{r}");
        let r = spec(json!({"requests": {"cpu": "250m"}, "limits": {"cpu": "0"}}));
        assert_eq!(r["cpu"], json!({"shares": 256}));
        let r = spec(json!({"requests": {"cpu": "300"}}));
        assert_eq!(r["cpu"]["shares"], 262_144);
        // Memory rounds up to whole bytes and stays exact past 2^53.
        let r = spec(json!({"limits": {"memory": "1.5"}}));
        assert_eq!(r["memory"]["limit"], 2);
        let r = spec(json!({"limits": {"memory": "9007199254740993"}}));
        assert_eq!(r["memory"]["limit"], 9_007_199_254_740_993i64);
        let r = spec(json!({"limits": {"memory": "1.5Gi"}}));
        assert_eq!(r["memory"]["limit"], 1_610_612_736);
    }

    #[test]
    fn bad_resource_quantities_name_their_field() {
        for (res, field) in [
            (json!({"limits": {"cpu": "1 core"}}), "resources.limits.cpu"),
            (json!({"requests": {"cpu": "-1"}}), "resources.requests.cpu"),
            (
                json!({"limits": {"memory": "10MB"}}),
                "resources.limits.memory",
            ),
        ] {
            let (p, c) = pod(json!({"name": "c", "image": "i", "resources": res}));
            let e = spec_of(&p, &c).unwrap_err();
            assert!(
                matches!(&e, RuntimeError::Spec { field: f, container, .. } if f == field && container == "c"),
                "{e}"
            );
        }
    }

    #[test]
    fn unknown_capabilities_are_refused() {
        let (p, c) = pod(json!({"name": "c", "image": "i",
            "securityContext": {"capabilities": {"add": ["NOT_A_CAP"]}}}));
        let e = spec_of(&p, &c).unwrap_err().to_string();
        assert!(e.contains("unknown capability \"CAP_NOT_A_CAP\""), "{e}");
        let (p, c) = pod(json!({"name": "c", "image": "i",
            "securityContext": {"capabilities": {"add": ["all"], "drop": ["sys_admin"]}}}));
        let v = serde_json::to_value(spec_of(&p, &c).unwrap()).unwrap();
        let eff = v["process"]["capabilities"]["effective"]
            .as_array()
            .unwrap();
        assert_eq!(eff.len(), available_caps().len() - 1);
        assert!(!eff.contains(&json!("CAP_SYS_ADMIN")));
    }

    #[test]
    fn privileged_caps_stay_inside_the_bounding_set() {
        // This machine's: everything up to CAP_CHECKPOINT_RESTORE but CAP_SYS_RESOURCE.
        let caps = caps_within(Some(0x1fffeffffff));
        assert_eq!(caps.len(), ALL_CAPS.len() - 1);
        assert!(!caps.contains(&Capability::SysResource));
        assert!(caps.contains(&Capability::SysAdmin));
        assert!(caps.contains(&Capability::CheckpointRestore));
        assert_eq!(caps_within(None).len(), ALL_CAPS.len());
        assert_eq!(caps_within(Some(0b1)), vec![Capability::Chown]);
    }
}
