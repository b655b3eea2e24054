//! The pod's files on the node: its directory under the root dir (the pod object as last
//! seen, the pinned netns path, /etc/hosts, /etc/hostname, /etc/resolv.conf (`dns`) for its
//! containers), and clean-up of what a removed pod leaves (directories, log links; its
//! cgroups are `cgroups::remove`'s).

use std::io;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

/// What must survive an agent crash between pinning a netns and recording it in containerd.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SandboxState {
    pub netns: Option<String>,
}

#[derive(Debug, Clone)]
pub struct PodDir {
    pub dir: PathBuf,
}

impl PodDir {
    pub fn new(root_dir: &Path, uid: &str) -> Self {
        PodDir {
            dir: root_dir.join("pods").join(uid),
        }
    }

    pub fn hosts(&self) -> PathBuf {
        self.dir.join("etc-hosts")
    }
    pub fn hostname(&self) -> PathBuf {
        self.dir.join("etc-hostname")
    }
    pub fn resolv(&self) -> PathBuf {
        self.dir.join("resolv.conf")
    }
    fn pod_file(&self) -> PathBuf {
        self.dir.join("pod.json")
    }
    fn state_file(&self) -> PathBuf {
        self.dir.join("sandbox.json")
    }

    /// The pod's folder (and the pods dir above it), closed to other users: its volumes,
    /// secrets and tokens are below (see `data_dirs`).
    pub fn create(&self) -> io::Result<()> {
        if let Some(pods) = self.dir.parent() {
            crate::data_dirs::ensure_private_dir(pods)?;
        }
        crate::data_dirs::ensure_private_dir(&self.dir)?;
        Ok(())
    }

    /// Saves the pod object, so that a pod whose manifest disappears while the agent is
    /// down is still stopped with its own grace period and names.
    pub fn save_pod(&self, pod: &Pod) -> io::Result<()> {
        write_atomic(
            &self.pod_file(),
            &serde_json::to_vec(pod).map_err(io::Error::other)?,
        )
    }

    pub fn load_pod(&self) -> Option<Pod> {
        serde_json::from_slice(&std::fs::read(self.pod_file()).ok()?).ok()
    }

    pub fn save_state(&self, s: &SandboxState) -> io::Result<()> {
        write_atomic(
            &self.state_file(),
            &serde_json::to_vec(s).map_err(io::Error::other)?,
        )
    }

    pub fn load_state(&self) -> SandboxState {
        std::fs::read(self.state_file())
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Writes /etc/hosts, /etc/hostname and /etc/resolv.conf for the pod's containers;
    /// returns the pod's resolver configuration (see `dns::pod_dns`). `hostname` is the pod's
    /// name for /etc/hosts, `uts_hostname` the sandbox's (the FQDN under setHostnameAsFQDN),
    /// which /etc/hostname holds as containerd's CRI writes it.
    pub fn write_etc(
        &self,
        pod: &Pod,
        hostname: &str,
        uts_hostname: &str,
        pod_ip: Option<&str>,
        dns: &super::dns::DnsSettings,
    ) -> io::Result<super::dns::PodDns> {
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let hosts = if host_network {
            let host = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
            format!(
                "# Kubernetes-managed hosts file (host network).\n{host}{}",
                host_alias_entries(pod)
            )
        } else {
            managed_hosts(pod, hostname, pod_ip, &dns.cluster_domain)
        };
        write_atomic(&self.hosts(), hosts.as_bytes())?;
        write_atomic(&self.hostname(), format!("{uts_hostname}\n").as_bytes())?;
        let host_resolver = match &dns.resolv_conf {
            Some(path) => std::fs::read_to_string(path).unwrap_or_default(),
            None => String::new(),
        };
        let resolver = super::dns::pod_dns(pod, dns, &host_resolver);
        write_atomic(&self.resolv(), resolver.resolv_conf().as_bytes())?;
        Ok(resolver)
    }

    pub fn remove(&self) -> io::Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

/// The pod's domain, `<subdomain>.<namespace>.svc.<cluster domain>`, when it has a subdomain
/// (upstream's GeneratePodHostNameAndDomain: with no cluster domain it ends in "svc.").
fn pod_domain(pod: &Pod, cluster_domain: &str) -> Option<String> {
    let sub = pod.spec.as_ref()?.subdomain.as_deref()?;
    if sub.is_empty() {
        return None;
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    Some(format!("{sub}.{ns}.svc.{cluster_domain}"))
}

/// A pod's FQDN past what the kernel holds as a hostname (upstream's words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long \
     ({max} characters is the max, {} characters requested)",
    fqdn.len()
)]
pub struct FqdnTooLong {
    pub fqdn: String,
    pub max: usize,
}

/// The kernel hostname of a pod's sandbox (upstream's GetNodenameForKernel): the FQDN under
/// setHostnameAsFQDN when the pod has a domain, refused past the 64 bytes the kernel holds
/// (the sandbox is then not created, and the pod stays Pending); else `hostname`.
pub fn kernel_hostname(
    pod: &Pod,
    hostname: &str,
    cluster_domain: &str,
) -> Result<String, FqdnTooLong> {
    const FQDN_MAX: usize = 64;
    let as_fqdn = pod.spec.as_ref().and_then(|s| s.set_hostname_as_fqdn) == Some(true);
    match pod_domain(pod, cluster_domain).filter(|_| as_fqdn) {
        Some(domain) => {
            let fqdn = format!("{hostname}.{domain}");
            if fqdn.len() > FQDN_MAX {
                return Err(FqdnTooLong {
                    fqdn,
                    max: FQDN_MAX,
                });
            }
            Ok(fqdn)
        }
        None => Ok(hostname.to_string()),
    }
}

/// upstream's managed /etc/hosts for a pod on the pod network: with a subdomain and a
/// cluster domain, the pod's name in it too.
pub fn managed_hosts(
    pod: &Pod,
    hostname: &str,
    pod_ip: Option<&str>,
    cluster_domain: &str,
) -> String {
    let mut s = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    if let Some(ip) = pod_ip {
        let fqdn = pod_domain(pod, cluster_domain).map(|d| format!("{hostname}.{d}"));
        match fqdn {
            Some(f) => s.push_str(&format!("{ip}\t{f}\t{hostname}\n")),
            None => s.push_str(&format!("{ip}\t{hostname}\n")),
        }
    }
    s.push_str(&host_alias_entries(pod));
    s
}

/// The pod's hostAliases as upstream appends them to either hosts file (the pod network's or
/// the node's copy): one header, then a line per IP with all its names.
fn host_alias_entries(pod: &Pod) -> String {
    let aliases = pod.spec.as_ref().and_then(|s| s.host_aliases.as_ref());
    let Some(aliases) = aliases.filter(|a| !a.is_empty()) else {
        return String::new();
    };
    let mut s = String::from("\n# Entries added by HostAliases.\n");
    for alias in aliases {
        let names = alias.hostnames.clone().unwrap_or_default().join("\t");
        s.push_str(&format!("{}\t{}\n", alias.ip, names));
    }
    s
}

/// Removes a stopped pod's /var/log/containers links: the link of each of its containers
/// (`containers`: name and container ID, as the runtime listed them), and any other link of
/// the pod's name and namespace that points into this pod's own log folder (`pod_log_dir`,
/// which holds the UID) — one whose record is already gone. A link is never removed for its
/// name alone: a static pod edited in place has the same name and namespace with a new UID,
/// and the new pod's links must survive the old one's clean-up. Blocking.
pub fn remove_log_links(
    containers_dir: &Path,
    pod_name: &str,
    namespace: &str,
    containers: &[(String, String)],
    pod_log_dir: &Path,
) {
    for (name, id) in containers {
        let link =
            crate::logs::container_log_symlink(containers_dir, pod_name, namespace, name, id);
        let _ = std::fs::remove_file(link);
    }
    let prefix = format!("{pod_name}_{namespace}_");
    let Ok(entries) = std::fs::read_dir(containers_dir) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let points_here = std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(pod_log_dir));
        if points_here {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_file_names_the_pod() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "hostAliases": [{"ip": "10.0.0.9", "hostnames": ["a", "b"]}]}
        }))
        .unwrap();
        let h = managed_hosts(&pod, "p", Some("10.88.0.3"), "cluster.local");
        assert!(h.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(h.contains("10.88.0.3\tp\n"));
        assert!(h.contains("10.0.0.9\ta\tb\n"));
        let mut sub = pod.clone();
        sub.spec.as_mut().unwrap().subdomain = Some("t".into());
        let h = managed_hosts(&sub, "p", Some("10.88.0.3"), "");
        assert!(h.contains("10.88.0.3\tp.t.ns.svc.\tp\n"), "{h}");
    }

    /// A host-network pod gets the node's hosts file and, after it, its hostAliases under one
    /// header (upstream's e2e reads them there).
    #[test]
    fn host_network_hosts_file_keeps_the_host_aliases() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "hostNetwork": true, "hostAliases": [
                {"ip": "123.45.67.89", "hostnames": ["foo", "bar"]},
                {"ip": "10.0.0.9", "hostnames": ["baz"]}
            ]}
        }))
        .unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let d = PodDir::new(tmp.path(), "u1");
        d.create().unwrap();
        d.write_etc(
            &pod,
            "node",
            "node",
            None,
            &crate::pod::dns::DnsSettings::default(),
        )
        .unwrap();
        let h = std::fs::read_to_string(d.hosts()).unwrap();
        let node = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        assert_eq!(
            h,
            format!(
                "# Kubernetes-managed hosts file (host network).\n{node}\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\n10.0.0.9\tbaz\n"
            )
        );
    }

    #[test]
    fn set_hostname_as_fqdn_makes_the_kernel_hostname_the_fqdn_up_to_64_bytes() {
        let pod = |name: &str, fqdn: bool| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "t"},
                "spec": {"containers": [], "subdomain": "t", "setHostnameAsFQDN": fqdn}
            }))
            .unwrap()
        };
        let short = pod("web-0", true);
        assert_eq!(
            kernel_hostname(&short, "web-0", "cluster.local").unwrap(),
            "web-0.t.t.svc.cluster.local"
        );
        // No cluster domain: the domain still ends in "svc." (the node e2e specs expect it).
        assert_eq!(
            kernel_hostname(&short, "web-0", "").unwrap(),
            "web-0.t.t.svc."
        );
        assert_eq!(
            kernel_hostname(&pod("web-0", false), "web-0", "cluster.local").unwrap(),
            "web-0"
        );
        // The e2e spec's name: 55 characters and the domain are past 64.
        let long = "hostfqdnveryveryveryverylongforfqdntobemorethan64bytes-1";
        let e = kernel_hostname(&pod(long, true), long, "cluster.local")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("failed to construct FQDN from pod hostname and cluster domain, FQDN "),
            "{e}"
        );
        assert!(
            e.ends_with("(64 characters is the max, 78 characters requested)"),
            "{e}"
        );
    }

    #[test]
    fn pod_dir_roundtrip() {
        let tmp = tempfile::tempdir().unwrap();
        let d = PodDir::new(tmp.path(), "u1");
        d.create().unwrap();
        let s = SandboxState {
            netns: Some("/var/run/netns/cni-1".into()),
        };
        d.save_state(&s).unwrap();
        assert_eq!(d.load_state(), s);
        d.remove().unwrap();
        assert!(!d.dir.exists());
        d.remove().unwrap();
    }

    /// A static pod edited in place: the old and the new pod share name and namespace and
    /// differ in UID and container IDs. Removing the old pod's links keeps the new pod's.
    #[test]
    fn removing_a_pods_log_links_keeps_those_of_a_pod_with_the_same_name() {
        let tmp = tempfile::tempdir().unwrap();
        let links = tmp.path().join("containers");
        let pods = tmp.path().join("pods");
        std::fs::create_dir_all(&links).unwrap();
        let link_for = |uid: &str, container: &str, id: &str| {
            let log_dir = crate::logs::pod_log_dir(&pods, "ns", "web-node", uid);
            let target = crate::logs::container_log_path(&log_dir, container, 0);
            let link = crate::logs::container_log_symlink(&links, "web-node", "ns", container, id);
            std::os::unix::fs::symlink(&target, &link).unwrap();
            (log_dir, link)
        };
        let (old_dir, old_app) = link_for("uid-old", "app", "aaa111");
        // The old pod's second container has no record any more, only its link.
        let (_, old_lost) = link_for("uid-old", "side", "aaa222");
        let (_, new_app) = link_for("uid-new", "app", "bbb111");
        let (_, new_side) = link_for("uid-new", "side", "bbb222");
        remove_log_links(
            &links,
            "web-node",
            "ns",
            &[("app".to_string(), "aaa111".to_string())],
            &old_dir,
        );
        assert!(std::fs::symlink_metadata(&old_app).is_err());
        assert!(std::fs::symlink_metadata(&old_lost).is_err());
        assert!(
            std::fs::symlink_metadata(&new_app).is_ok(),
            "the new pod's link went"
        );
        assert!(
            std::fs::symlink_metadata(&new_side).is_ok(),
            "the new pod's link went"
        );
    }

    /// The pods dir and the pod's dir are closed to other users (upstream's 0750).
    #[test]
    fn pod_dirs_are_closed_to_other_users() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let d = PodDir::new(tmp.path(), "u1");
        d.create().unwrap();
        for dir in [tmp.path().join("pods"), d.dir.clone()] {
            let mode = std::fs::metadata(&dir).unwrap().mode() & 0o7777;
            assert_eq!(mode & 0o027, 0, "{} is {mode:o}", dir.display());
        }
    }
}
