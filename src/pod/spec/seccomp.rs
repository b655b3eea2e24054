//! Seccomp for containers and the pod sandbox, in the two steps upstream splits between the
//! kubelet and containerd's CRI plugin.
//!
//! `choose` is the kubelet's part (kuberuntime's getSeccompProfile): the container's
//! `securityContext.seccompProfile` wins over the pod's; with neither, `seccompDefault` makes
//! it RuntimeDefault, else Unconfined. A Localhost profile is a file under
//! `<root-dir>/seccomp/`. The deprecated `seccomp.security.alpha.kubernetes.io/*` annotations
//! are not read: the kubelet stopped reading them in 1.27.
//!
//! `load` and `apply` are containerd's part (generateSeccompSpecOpts): a privileged
//! container, or a sandbox of a pod with one, gets no filter whatever it asked for;
//! Unconfined gets none; RuntimeDefault gets the default profile below, fitted to the
//! container's bounding capabilities; Localhost gets the file's content, an OCI
//! `LinuxSeccomp` document, as it is.
//!
//! The default profile is data (`seccomp_default.json`): containerd 1.7's default allowlist
//! written as rules, each allowing (or failing with an errno) a set of syscalls, possibly
//! only on some architectures, from some kernel version, with or without a capability, or
//! for some argument values. Anything no rule allows fails with EPERM.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Container, Pod, SeccompProfile};
use oci_spec::runtime::{
    Arch, Capability, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder,
    LinuxSeccompBuilder, LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder, Spec,
};
use oci_spec::OciSpecError;
use serde::Deserialize;

/// Upstream's kubelet seccomp profile root, under the root directory.
pub const PROFILE_DIR: &str = "seccomp";

/// What the kubelet asks the runtime for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    Unconfined,
    RuntimeDefault,
    /// The profile's absolute path.
    Localhost(PathBuf),
}

/// What the spec gets: no filter, the default profile (fitted to the spec's capabilities
/// when applied), or a Localhost profile as read.
#[derive(Debug, Clone, PartialEq)]
pub enum Seccomp {
    Unconfined,
    RuntimeDefault,
    Profile(LinuxSeccomp),
}

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// The kubelet's refusal, before anything reaches the runtime.
    #[error("localhostProfile must be set if seccompProfile type is Localhost.")]
    NoLocalhostProfile,
    /// The API server's validation refuses these; a static pod does not pass through it,
    /// so the path is checked here too rather than letting it name a file outside the
    /// profile root.
    #[error("{field}: {path:?}: {reason}")]
    OutsideRoot {
        field: String,
        path: String,
        reason: &'static str,
    },
    /// containerd's wording (seccomp.WithProfile).
    #[error("cannot load seccomp profile {:?}: open {}: {}", .path.display().to_string(), .path.display(), go_errno(.source))]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("decoding seccomp profile failed {:?}: {source}", .path.display().to_string())]
    Invalid {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The built-in default profile does not build (a bug in the data, caught by tests).
    #[error("default seccomp profile: {0}")]
    Default(String),
}

impl SeccompError {
    /// Whether the runtime (containerd) is the one that fails, so that the container waits
    /// with CreateContainerError; the kubelet's own refusals are CreateContainerConfigError.
    pub fn from_runtime(&self) -> bool {
        matches!(
            self,
            Self::Unreadable { .. } | Self::Invalid { .. } | Self::Default(_)
        )
    }
}

/// Go words an errno in lower case ("no such file or directory").
fn go_errno(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(errno) => {
            let desc = nix::errno::Errno::from_raw(errno).desc();
            let mut chars = desc.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => String::new(),
            }
        }
        None => e.to_string(),
    }
}

/// The kubelet's settings that the choice depends on.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `<root-dir>/seccomp`.
    pub profile_root: PathBuf,
    /// --seccomp-default / seccompDefault.
    pub default_runtime_default: bool,
}

impl Settings {
    pub fn new(root_dir: &Path, seccomp_default: bool) -> Self {
        Settings {
            profile_root: root_dir.join(PROFILE_DIR),
            default_runtime_default: seccomp_default,
        }
    }
}

/// The profile for `container` of `pod`, or for the pod's sandbox when `container` is None
/// (the sandbox reads only the pod's field), as the kubelet settles it.
pub fn choose(
    pod: &Pod,
    container: Option<&Container>,
    settings: &Settings,
) -> Result<Choice, SeccompError> {
    let own = container
        .and_then(|c| c.security_context.as_ref())
        .and_then(|s| s.seccomp_profile.as_ref())
        .map(|p| (p, "securityContext.seccompProfile.localhostProfile"));
    let pod_level = || {
        pod.spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref())
            .and_then(|s| s.seccomp_profile.as_ref())
            .map(|p| (p, "spec.securityContext.seccompProfile.localhostProfile"))
    };
    match own.or_else(pod_level) {
        Some((profile, field)) => from_field(profile, field, &settings.profile_root),
        None if settings.default_runtime_default => Ok(Choice::RuntimeDefault),
        None => Ok(Choice::Unconfined),
    }
}

fn from_field(p: &SeccompProfile, field: &str, root: &Path) -> Result<Choice, SeccompError> {
    match p.type_.as_str() {
        "RuntimeDefault" => Ok(Choice::RuntimeDefault),
        "Localhost" => {
            let name = p
                .localhost_profile
                .as_deref()
                .filter(|n| !n.is_empty())
                .ok_or(SeccompError::NoLocalhostProfile)?;
            let outside = |reason| SeccompError::OutsideRoot {
                field: field.to_string(),
                path: name.to_string(),
                reason,
            };
            // The API's validateLocalDescendingPath: relative, and no ".." element.
            let rel = Path::new(name);
            if rel.is_absolute() {
                return Err(outside("must be a relative path"));
            }
            if rel.components().any(|c| c == Component::ParentDir) {
                return Err(outside("must not contain '..'"));
            }
            Ok(Choice::Localhost(root.join(rel)))
        }
        // Unconfined, and (as upstream) any type the API would not have accepted.
        _ => Ok(Choice::Unconfined),
    }
}

/// Whether the pod has a privileged container of any kind, which makes its sandbox
/// privileged (upstream's HasPrivilegedContainer).
pub fn pod_has_privileged(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let privileged = |sc: Option<&k8s_openapi::api::core::v1::SecurityContext>| {
        sc.and_then(|s| s.privileged).unwrap_or(false)
    };
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| privileged(c.security_context.as_ref()))
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| privileged(c.security_context.as_ref()))
}

/// containerd's part: what the spec gets, reading a Localhost profile (file-system work: call
/// off the async runtime). A privileged container gets no filter and its profile is not read.
pub fn load(choice: &Choice, privileged: bool) -> Result<Seccomp, SeccompError> {
    if privileged {
        return Ok(Seccomp::Unconfined);
    }
    match choice {
        Choice::Unconfined => Ok(Seccomp::Unconfined),
        Choice::RuntimeDefault => Ok(Seccomp::RuntimeDefault),
        Choice::Localhost(path) => {
            let text = std::fs::read(path).map_err(|source| SeccompError::Unreadable {
                path: path.clone(),
                source,
            })?;
            let profile =
                serde_json::from_slice(&text).map_err(|source| SeccompError::Invalid {
                    path: path.clone(),
                    source,
                })?;
            Ok(Seccomp::Profile(profile))
        }
    }
}

/// Sets (or clears) the spec's filter. RuntimeDefault is fitted to the spec's bounding
/// capabilities, so this runs after they are final.
pub fn apply(spec: &mut Spec, seccomp: &Seccomp) -> Result<(), SeccompError> {
    let filter = match seccomp {
        Seccomp::Unconfined => None,
        Seccomp::Profile(p) => Some(p.clone()),
        Seccomp::RuntimeDefault => {
            let caps: HashSet<Capability> = spec
                .process()
                .as_ref()
                .and_then(|p| p.capabilities().as_ref())
                .and_then(|c| c.bounding().clone())
                .unwrap_or_default();
            Some(
                default_profile(&caps, std::env::consts::ARCH, kernel_version())
                    .map_err(|e| SeccompError::Default(e.to_string()))?,
            )
        }
    };
    if let Some(linux) = spec.linux_mut() {
        linux.set_seccomp(filter);
    }
    Ok(())
}

fn kernel_version() -> Option<(u32, u32)> {
    procfs::sys::kernel::Version::current()
        .ok()
        .map(|v| (u32::from(v.major), u32::from(v.minor)))
}

/// The profile data, in the project's own form (see the module comment).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProfileData {
    #[allow(dead_code)]
    about: String,
    default_action: LinuxSeccompAction,
    default_errno_ret: Option<u32>,
    /// Rust's architecture name (std::env::consts::ARCH) to the filter's architectures; an
    /// architecture not listed gets none (the native one only).
    architectures: std::collections::BTreeMap<String, Vec<Arch>>,
    rules: Vec<Rule>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Rule {
    #[allow(dead_code)]
    why: Option<String>,
    /// Syscalls allowed by this rule.
    #[serde(default)]
    allow: Vec<String>,
    /// Syscalls failed with `errno_ret` by this rule.
    #[serde(default)]
    errno: Vec<String>,
    errno_ret: Option<u32>,
    /// Only on these architectures.
    arch: Option<Vec<String>>,
    /// Only on a kernel at least this (major, minor) version; left out when the version is
    /// unknown, as containerd does.
    min_kernel: Option<(u32, u32)>,
    with_capability: Option<Capability>,
    without_capability: Option<Capability>,
    /// Only when the argument matches one of the values (one syscall entry per value, as
    /// entries are alternatives while conditions of one entry must all hold).
    arg_one_of: Option<ArgOneOf>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ArgOneOf {
    index: usize,
    /// Another argument index on some architectures (clone's flags on s390x).
    #[serde(default)]
    index_on_arch: std::collections::BTreeMap<String, usize>,
    op: LinuxSeccompOperator,
    /// SCMP_CMP_MASKED_EQ's mask (the OCI `value`; the compared value is `valueTwo`).
    mask: Option<u64>,
    values: Vec<u64>,
}

const PROFILE_JSON: &str = include_str!("seccomp_default.json");

fn data() -> &'static ProfileData {
    static DATA: OnceLock<ProfileData> = OnceLock::new();
    // The file is part of the binary and a test parses it, so this cannot fail at run time.
    DATA.get_or_init(|| serde_json::from_str(PROFILE_JSON).expect("seccomp_default.json"))
}

/// The RuntimeDefault profile for a process with bounding set `caps` on architecture `arch`
/// (Rust's name) and kernel `kernel` (major, minor).
fn default_profile(
    caps: &HashSet<Capability>,
    arch: &str,
    kernel: Option<(u32, u32)>,
) -> Result<LinuxSeccomp, OciSpecError> {
    let d = data();
    let mut syscalls: Vec<LinuxSyscall> = Vec::new();
    for rule in &d.rules {
        let applies = rule
            .arch
            .as_ref()
            .is_none_or(|a| a.iter().any(|a| a == arch))
            && rule
                .min_kernel
                .is_none_or(|min| kernel.is_some_and(|k| k >= min))
            && rule.with_capability.is_none_or(|c| caps.contains(&c))
            && rule.without_capability.is_none_or(|c| !caps.contains(&c));
        if !applies {
            continue;
        }
        for (names, action) in [
            (&rule.allow, LinuxSeccompAction::ScmpActAllow),
            (&rule.errno, LinuxSeccompAction::ScmpActErrno),
        ] {
            if names.is_empty() {
                continue;
            }
            let entry = || {
                let b = LinuxSyscallBuilder::default()
                    .names(names.clone())
                    .action(action);
                match (action, rule.errno_ret) {
                    (LinuxSeccompAction::ScmpActErrno, Some(n)) => b.errno_ret(n),
                    _ => b,
                }
            };
            match &rule.arg_one_of {
                None => syscalls.push(entry().build()?),
                Some(arg) => {
                    let index = arg.index_on_arch.get(arch).copied().unwrap_or(arg.index);
                    for v in &arg.values {
                        let cond = match arg.mask {
                            Some(mask) => LinuxSeccompArgBuilder::default()
                                .index(index)
                                .op(arg.op)
                                .value(mask)
                                .value_two(*v),
                            None => LinuxSeccompArgBuilder::default()
                                .index(index)
                                .op(arg.op)
                                .value(*v),
                        };
                        syscalls.push(entry().args(vec![cond.build()?]).build()?);
                    }
                }
            }
        }
    }
    let mut b = LinuxSeccompBuilder::default()
        .default_action(d.default_action)
        .syscalls(syscalls);
    if let Some(n) = d.default_errno_ret {
        b = b.default_errno_ret(n);
    }
    if let Some(arches) = d.architectures.get(arch) {
        b = b.architectures(arches.clone());
    }
    b.build()
}

#[cfg(test)]
mod tests;
