//! upstream's sysctl admit handler: a pod's `securityContext.sysctls` must each be on the
//! allowlist, the safe sysctls (namespaced and isolated; some only from the kernel version
//! that namespaces them) plus the node's allowedUnsafeSysctls (names or prefixes ending in
//! `*`, each known to be namespaced). A network sysctl is refused for a host-network pod and
//! an IPC one for a host-IPC pod. A refused pod fails with reason SysctlForbidden.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;

use super::Rejection;

/// The kernel namespace a sysctl belongs to (upstream's component-helpers table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    fn name(self) -> &'static str {
        match self {
            Namespace::Ipc => "IPC",
            Namespace::Net => "Net",
        }
    }

    fn of(sysctl: &str) -> Option<Namespace> {
        const IPC: &[&str] = &[
            "kernel.sem",
            "kernel.shmall",
            "kernel.shmmax",
            "kernel.shmmni",
            "kernel.shm_rmid_forced",
            "kernel.shm",
            "kernel.msgmax",
            "kernel.msgmnb",
            "kernel.msgmni",
            "kernel.msg",
        ];
        if IPC.contains(&sysctl) {
            Some(Namespace::Ipc)
        } else if sysctl.starts_with("net.") {
            Some(Namespace::Net)
        } else if sysctl.starts_with("fs.mqueue.") {
            Some(Namespace::Ipc)
        } else {
            None
        }
    }
}

/// The safe sysctls, each with the kernel version (major, minor) that namespaces it.
const SAFE: &[(&str, (u32, u32))] = &[
    ("kernel.shm_rmid_forced", (0, 0)),
    ("net.ipv4.ip_local_port_range", (0, 0)),
    ("net.ipv4.tcp_syncookies", (0, 0)),
    ("net.ipv4.ping_group_range", (0, 0)),
    ("net.ipv4.ip_unprivileged_port_start", (0, 0)),
    ("net.ipv4.ip_local_reserved_ports", (3, 16)),
    ("net.ipv4.tcp_keepalive_time", (4, 5)),
    ("net.ipv4.tcp_fin_timeout", (4, 6)),
    ("net.ipv4.tcp_keepalive_intvl", (4, 5)),
    ("net.ipv4.tcp_keepalive_probes", (4, 5)),
    ("net.ipv4.tcp_rmem", (4, 15)),
    ("net.ipv4.tcp_wmem", (4, 15)),
];

/// A sysctl name with `/` as its separator written with `.` (upstream's NormalizeName:
/// `net/ipv4/conf/eno2.100/rp_filter` is `net.ipv4.conf.eno2/100.rp_filter`).
pub(crate) fn normalize(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// An allowedUnsafeSysctls entry outside the namespaces a pod can hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the sysctls {name:?} are not known to be namespaced")]
pub struct NotNamespaced {
    pub name: String,
}

/// Why a pod's sysctl is refused (upstream's wording, after "forbidden sysctl: ").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Forbidden {
    #[error("{0:?} not allowlisted")]
    NotAllowlisted(String),
    #[error("{sysctl:?} not allowed with host {namespace} enabled")]
    HostNamespace {
        sysctl: String,
        namespace: &'static str,
    },
}

/// The sysctls a node admits.
#[derive(Debug, Clone, Default)]
pub struct SysctlAllowlist {
    names: HashMap<String, Namespace>,
    prefixes: Vec<(String, Namespace)>,
}

impl SysctlAllowlist {
    /// The safe sysctls this kernel (`kernel`: major and minor; None when unknown, which
    /// drops the version-bound ones as upstream does) namespaces, and `allowed_unsafe`.
    /// An unsafe entry not known to be namespaced is an error naming it.
    pub fn new(
        allowed_unsafe: &[String],
        kernel: Option<(u32, u32)>,
    ) -> Result<Self, NotNamespaced> {
        let mut list = SysctlAllowlist::default();
        for (name, since) in SAFE {
            let available = *since == (0, 0) || kernel.is_some_and(|k| k >= *since);
            if available {
                list.add(name)?;
            }
        }
        for pattern in allowed_unsafe {
            list.add(pattern)?;
        }
        Ok(list)
    }

    fn add(&mut self, pattern: &str) -> Result<(), NotNamespaced> {
        let normal = normalize(pattern);
        let (name, prefixed) = match normal.find('*') {
            Some(i) => (&normal[..i], true),
            None => (normal.as_str(), false),
        };
        let ns = Namespace::of(name).ok_or_else(|| NotNamespaced {
            name: name.to_string(),
        })?;
        if prefixed {
            self.prefixes.push((name.to_string(), ns));
        } else {
            self.names.insert(name.to_string(), ns);
        }
        Ok(())
    }

    fn allows(&self, sysctl: &str, host_net: bool, host_ipc: bool) -> Result<(), Forbidden> {
        let sysctl = normalize(sysctl);
        let ns = self.names.get(&sysctl).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| sysctl.starts_with(p.as_str()))
                .map(|(_, ns)| *ns)
        });
        match ns {
            None => Err(Forbidden::NotAllowlisted(sysctl)),
            Some(ns @ Namespace::Ipc) if host_ipc => Err(Forbidden::HostNamespace {
                sysctl,
                namespace: ns.name(),
            }),
            Some(ns @ Namespace::Net) if host_net => Err(Forbidden::HostNamespace {
                sysctl,
                namespace: ns.name(),
            }),
            Some(_) => Ok(()),
        }
    }

    /// Refuses a pod with a sysctl off the list.
    pub(crate) fn check(&self, pod: &Pod) -> Result<(), Rejection> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.as_ref());
        let (host_net, host_ipc) = (
            spec.host_network.unwrap_or(false),
            spec.host_ipc.unwrap_or(false),
        );
        for s in sysctls.into_iter().flatten() {
            self.allows(&s.name, host_net, host_ipc)
                .map_err(|e| Rejection::new("SysctlForbidden", format!("forbidden sysctl: {e}")))?;
        }
        Ok(())
    }
}

/// This kernel's major and minor version, from uname.
pub fn kernel_version() -> Option<(u32, u32)> {
    let uts = nix::sys::utsname::uname().ok()?;
    let release = uts.release().to_string_lossy().into_owned();
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(sysctls: serde_json::Value, host_network: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"hostNetwork": host_network, "containers": [{"name": "c"}],
                     "securityContext": {"sysctls": sysctls}}
        }))
        .unwrap()
    }

    #[test]
    fn safe_sysctls_pass_and_unsafe_ones_need_the_allowlist() {
        let safe = SysctlAllowlist::new(&[], Some((6, 1))).unwrap();
        let ok = pod(
            json!([{"name": "kernel.shm_rmid_forced", "value": "1"},
                            {"name": "net/ipv4/tcp_rmem", "value": "4096 87380 6291456"}]),
            false,
        );
        assert!(safe.check(&ok).is_ok());
        let unsafe_one = pod(
            json!([{"name": "kernel.msgmax", "value": "10000000"}]),
            false,
        );
        let r = safe.check(&unsafe_one).unwrap_err();
        assert_eq!(r.reason, "SysctlForbidden");
        assert_eq!(
            r.message,
            "forbidden sysctl: \"kernel.msgmax\" not allowlisted"
        );
        let allowed =
            SysctlAllowlist::new(&["kernel.msg*".into(), "net.core.somaxconn".into()], None)
                .unwrap();
        assert!(allowed.check(&unsafe_one).is_ok());
        // A network sysctl with the host's network namespace is refused.
        let host = pod(
            json!([{"name": "net.ipv4.tcp_syncookies", "value": "1"}]),
            true,
        );
        assert_eq!(
            safe.check(&host).unwrap_err().message,
            "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host Net enabled"
        );
    }

    #[test]
    fn version_bound_safe_sysctls_and_unknown_namespaces() {
        let old = SysctlAllowlist::new(&[], Some((4, 4))).unwrap();
        let keepalive = pod(
            json!([{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]),
            false,
        );
        assert!(old.check(&keepalive).is_err());
        assert!(SysctlAllowlist::new(&[], Some((4, 5)))
            .unwrap()
            .check(&keepalive)
            .is_ok());
        assert_eq!(
            SysctlAllowlist::new(&["vm.swappiness".into()], None)
                .unwrap_err()
                .to_string(),
            "the sysctls \"vm.swappiness\" are not known to be namespaced"
        );
        assert_eq!(
            normalize("net/ipv4/conf/eno2.100/rp_filter"),
            "net.ipv4.conf.eno2/100.rp_filter"
        );
        assert_eq!(normalize("net.ipv4.ip_forward"), "net.ipv4.ip_forward");
    }
}
