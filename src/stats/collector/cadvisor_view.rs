//! The collector's half of `/metrics/cadvisor`: which cgroups get series, with which labels,
//! read at the same tick as the Summary (so a scrape never reads a file).
//!
//! The cgroups are the ones upstream's cAdvisor watches on a kubelet node: the root, the
//! kubelet's and the runtime's cgroups, the pods' root and its QoS levels, every pod's cgroup,
//! its sandbox and its containers.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use super::{is_ignored_interface, Collector, PodInfo, Tick};
use crate::cgroups::ProcessCgroup;
use crate::stats::cadvisor::{
    CadvisorContainer, CadvisorSnapshot, ContainerLabels, FsDevice, MachineInfo, NamedDeviceIo,
    VersionInfo,
};
use crate::stats::disk::statvfs;
use crate::stats::machine::{read_machine_info, read_version_info};
use crate::stats::parse::{parse_net_dev, read_string, InterfaceCounters};

/// Facts read once, at the first tick.
pub(super) struct MachineFacts {
    machine: Option<MachineInfo>,
    version: VersionInfo,
    /// `/dev/<name>` of every block device under /sys/block, by major:minor, as cAdvisor's
    /// machine info names the devices of its I/O series (a partition stays unnamed there).
    block_devices: HashMap<(u32, u32), String>,
}

fn block_devices(sys_root: &Path) -> HashMap<(u32, u32), String> {
    let Ok(entries) = std::fs::read_dir(sys_root.join("block")) else {
        return HashMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let dev = std::fs::read_to_string(e.path().join("dev")).ok()?;
            let (maj, min) = dev.trim().split_once(':')?;
            Some((
                (maj.parse().ok()?, min.parse().ok()?),
                format!("/dev/{name}"),
            ))
        })
        .collect()
}

/// The mount source (`/dev/vda1`) of the filesystem holding `dir`, from /proc/self/mountinfo
/// matched on the device number, as cAdvisor labels filesystem series.
fn mount_source(proc_root: &Path, dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (maj, min) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let text = std::fs::read_to_string(proc_root.join("self/mountinfo")).ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(2)? != &format!("{maj}:{min}") {
            return None;
        }
        let sep = fields.iter().position(|f| *f == "-")?;
        Some(fields.get(sep + 2)?.to_string())
    })
}

impl Collector {
    fn machine_facts<'t>(&self, tick: &'t mut Tick) -> &'t MachineFacts {
        let c = &self.config;
        if tick.state.machine.is_none() {
            let machine = match read_machine_info(
                &c.proc_root,
                &c.sys_root,
                &c.etc_root,
                tick.now.0.timestamp_millis(),
            ) {
                Ok(m) => Some(m),
                // machine_scrape_error says so; the Summary's own error gauge is not about it.
                Err(e) => {
                    tracing::warn!(error = %e, "machine info for /metrics/cadvisor");
                    None
                }
            };
            tick.state.machine = Some(MachineFacts {
                machine,
                version: read_version_info(&c.proc_root, &c.etc_root),
                block_devices: block_devices(&c.sys_root),
            });
        }
        tick.state.machine.as_ref().expect("set above")
    }

    /// One cgroup's record, or None when it is gone (or unreadable: then a tick error).
    fn cadvisor_container(
        &self,
        tick: &mut Tick,
        cg: &ProcessCgroup,
        labels: ContainerLabels,
    ) -> Option<CadvisorContainer> {
        let mut detail = match self.cgroups.read_detail(cg, &self.config.proc_root) {
            Ok(d) => d,
            Err(e) if e.is_not_found() => return None,
            Err(e) => {
                tick.error(e);
                return None;
            }
        };
        detail.pressure = self.pressure(tick, &cg.cpu);
        let names = &self.machine_facts(tick).block_devices;
        let io = detail
            .io
            .iter()
            .map(|io| NamedDeviceIo {
                device: names
                    .get(&(io.major, io.minor))
                    .cloned()
                    .unwrap_or_default(),
                io: io.clone(),
            })
            .collect();
        let start_time = self
            .cgroups
            .creation_time(&cg.memory)
            .map(|t| chrono::DateTime::<chrono::Utc>::from(t).timestamp())
            .unwrap_or(tick.now.0.timestamp());
        Some(CadvisorContainer {
            labels,
            start_time,
            detail,
            io,
            network: Vec::new(),
            fs: Vec::new(),
        })
    }

    fn net_dev(&self, tick: &mut Tick, pid: u32) -> Vec<InterfaceCounters> {
        let path = self.config.proc_root.join(pid.to_string()).join("net/dev");
        match read_string(&path).and_then(|t| parse_net_dev(&path, &t)) {
            Ok(c) => c
                .into_iter()
                .filter(|i| !is_ignored_interface(&i.name))
                .collect(),
            Err(e) if e.is_not_found() => Vec::new(),
            Err(e) => {
                tick.error(e);
                Vec::new()
            }
        }
    }

    /// The root container's filesystems: the node's and the image filesystem's devices.
    fn root_filesystems(&self) -> Vec<FsDevice> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for dir in [&self.config.node_fs_dir, &self.config.image_fs_dir] {
            let (Some(device), Ok(cap)) = (mount_source(&self.config.proc_root, dir), statvfs(dir))
            else {
                continue;
            };
            if seen.insert(device.clone()) {
                out.push(FsDevice {
                    device,
                    capacity: cap.capacity,
                    usage: cap.used,
                    inodes: cap.inodes,
                    inodes_free: cap.inodes_free,
                });
            }
        }
        out
    }

    pub(super) fn cadvisor_snapshot(&self, tick: &mut Tick, pods: &[PodInfo]) -> CadvisorSnapshot {
        let mut containers = Vec::new();
        let mut seen = BTreeSet::new();
        let mut push = |containers: &mut Vec<CadvisorContainer>, c: Option<CadvisorContainer>| {
            if let Some(c) = c {
                if seen.insert(c.labels.id.clone()) {
                    containers.push(c);
                }
            }
        };

        let pods_cgroup = self.config.pods_cgroup.trim_end_matches('/').to_string();
        let mut qos_levels = BTreeSet::new();
        for pod in pods {
            let pod_labels = |id: &str, name: &str, image: &str, container: &str| ContainerLabels {
                id: id.to_string(),
                name: name.to_string(),
                image: image.to_string(),
                pod: pod.name.clone(),
                namespace: pod.namespace.clone(),
                container: container.to_string(),
            };
            // Every level between the pods' root and the pod (`/kubepods/burstable`).
            let mut parent = Path::new(&pod.cgroup_parent).parent();
            while let Some(p) = parent.and_then(|p| p.to_str()) {
                if p.len() <= pods_cgroup.len() || !p.starts_with(&pods_cgroup) {
                    break;
                }
                qos_levels.insert(p.to_string());
                parent = Path::new(p).parent();
            }
            let c = self.cadvisor_container(
                tick,
                &ProcessCgroup::same(&pod.cgroup_parent),
                pod_labels(&pod.cgroup_parent, "", "", ""),
            );
            push(&mut containers, c);
            if let Some(sandbox) = &pod.sandbox {
                let id = format!("{}/{}", pod.cgroup_parent, sandbox.id);
                let mut c = self.cadvisor_container(
                    tick,
                    &ProcessCgroup::same(&id),
                    pod_labels(&id, &sandbox.id, &sandbox.image, ""),
                );
                if let (Some(c), Some(pid)) = (c.as_mut(), pod.pause_pid) {
                    c.network = self.net_dev(tick, pid);
                }
                push(&mut containers, c);
            }
            for ctr in &pod.containers {
                let c = self.cadvisor_container(
                    tick,
                    &ProcessCgroup::same(&ctr.cgroup_path),
                    pod_labels(&ctr.cgroup_path, &ctr.id, &ctr.image, &ctr.name),
                );
                push(&mut containers, c);
            }
        }

        let raw = |id: &str| ContainerLabels {
            id: id.to_string(),
            ..Default::default()
        };
        let mut root = self.cadvisor_container(tick, &ProcessCgroup::same("/"), raw("/"));
        if let Some(r) = root.as_mut() {
            r.network = self.net_dev(tick, 1);
            r.fs = self.root_filesystems();
        }
        push(&mut containers, root);
        let mut system: Vec<ProcessCgroup> = Vec::new();
        system.extend(self.kubelet_cgroup.clone());
        system.extend(self.runtime_cgroup());
        system.push(ProcessCgroup::same(&pods_cgroup));
        system.extend(qos_levels.iter().map(|p| ProcessCgroup::same(p)));
        for cg in system {
            let c = self.cadvisor_container(tick, &cg, raw(&cg.memory));
            push(&mut containers, c);
        }

        let taken_at = tick.now.0;
        let facts = self.machine_facts(tick);
        CadvisorSnapshot {
            taken_at: Some(taken_at),
            containers,
            machine: facts.machine.clone(),
            version: Some(facts.version.clone()),
        }
    }
}
