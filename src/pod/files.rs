//! The pod's files on the node: its directory under the root dir (the pod object as last
//! seen, the pinned netns path, /etc/hosts, /etc/hostname, /etc/resolv.conf (`dns`) for its
//! containers), and clean-up of what a removed pod leaves (directories, log links, cgroups).

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

    pub fn create(&self) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)
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
    /// returns the pod's resolver configuration (see `dns::pod_dns`).
    pub fn write_etc(
        &self,
        pod: &Pod,
        hostname: &str,
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
            format!("# Kubernetes-managed hosts file (host network).\n{host}")
        } else {
            managed_hosts(pod, hostname, pod_ip, &dns.cluster_domain)
        };
        write_atomic(&self.hosts(), hosts.as_bytes())?;
        write_atomic(&self.hostname(), format!("{hostname}\n").as_bytes())?;
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
        let spec = pod.spec.as_ref();
        let fqdn = spec
            .and_then(|s| s.subdomain.as_ref())
            .filter(|sub| !sub.is_empty() && !cluster_domain.is_empty())
            .map(|sub| {
                let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
                format!("{hostname}.{sub}.{ns}.svc.{cluster_domain}")
            });
        match fqdn {
            Some(f) => s.push_str(&format!("{ip}\t{f}\t{hostname}\n")),
            None => s.push_str(&format!("{ip}\t{hostname}\n")),
        }
    }
    for alias in pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.as_ref())
        .into_iter()
        .flatten()
    {
        let names = alias.hostnames.clone().unwrap_or_default().join("\t");
        s.push_str(&format!(
            "\n# Entries added by HostAliases.\n{}\t{}\n",
            alias.ip, names
        ));
    }
    s
}

/// Removes the pod's cgroup directories in every hierarchy (v1 controllers or the v2
/// unified tree) under /sys/fs/cgroup. Blocking. See `remove_cgroup_everywhere`.
pub fn remove_pod_cgroups(cgroup_parent: &str) {
    remove_cgroup_everywhere(Path::new("/sys/fs/cgroup"), cgroup_parent);
}

/// Removes the cgroup `cgroup` (an absolute path within a hierarchy) from the hierarchy
/// mounted at `root` and from every hierarchy mounted in a folder of `root` (the v1
/// controllers). Leaf containers' cgroups are removed by runc; this takes the pod level
/// (and any leaf runc left). A cgroup whose last process was only just killed stays busy
/// for a moment, so a busy directory is tried again for up to two seconds; what still
/// exists after that is returned. Blocking.
pub(crate) fn remove_cgroup_everywhere(root: &Path, cgroup: &str) -> Vec<PathBuf> {
    let rel = cgroup.trim_start_matches('/');
    if rel.is_empty() {
        // Never the hierarchy's root.
        return Vec::new();
    }
    let mut dirs = vec![root.join(rel)];
    if let Ok(entries) = std::fs::read_dir(root) {
        for e in entries.flatten() {
            dirs.push(e.path().join(rel));
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut delay = std::time::Duration::from_millis(20);
    loop {
        dirs.retain(|d| !remove_cgroup_tree(d));
        if dirs.is_empty() || std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(std::time::Duration::from_millis(400));
    }
    dirs
}

/// Removes a cgroup directory, its child directories first; true when it is gone.
fn remove_cgroup_tree(dir: &Path) -> bool {
    if !dir.is_dir() {
        return true;
    }
    if let Ok(children) = std::fs::read_dir(dir) {
        for c in children.flatten() {
            if c.path().is_dir() {
                remove_cgroup_tree(&c.path());
            }
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// Removes the /var/log/containers links of a pod (names start with `<pod>_<ns>_`).
pub fn remove_log_links(containers_dir: &Path, pod_name: &str, namespace: &str) {
    let prefix = format!("{pod_name}_{namespace}_");
    if let Ok(entries) = std::fs::read_dir(containers_dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
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
}
