//! What the host says about itself: the capacity facts (cores, memory, the root dir's
//! filesystem, huge pages, PIDs) and the system identity for nodeInfo. Read from /proc,
//! /sys and statvfs, on a blocking thread (`read_host`); everything downstream is pure.
//! (The pressure signals are the eviction manager's, from the stats collector.)

use std::net::IpAddr;
use std::path::Path;

use crate::stats::disk::statvfs;

/// The capacity the node reports, in whole units (cores, bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Machine {
    pub cpu_cores: i64,
    pub memory_bytes: i64,
    /// Size of the filesystem holding the root dir; None when statvfs failed.
    pub ephemeral_storage_bytes: Option<i64>,
    /// Resource name (`hugepages-2Mi`) and bytes reserved as pages of that size.
    pub hugepages: Vec<(String, i64)>,
}

/// What the host allows beyond its capacity; None when unreadable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Readings {
    /// min(pid_max, threads-max), upstream's MaxPID.
    pub max_pid: Option<i64>,
}

/// The identity fields of nodeInfo that come from the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SystemInfo {
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
}

/// Everything read from the host in one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostFacts {
    pub machine: Machine,
    pub readings: Readings,
    pub system: SystemInfo,
    /// The default route's IPv4 address (the InternalIP when --node-ip is not given).
    pub default_ip: Option<IpAddr>,
    /// Every address of the host's interfaces (to check --node-ip against).
    pub interface_ips: Vec<IpAddr>,
}

/// Reads the host. Blocking: call it from `spawn_blocking`.
pub(crate) fn read_host(root_dir: &Path) -> HostFacts {
    let nodefs = statvfs(root_dir).ok();
    let meminfo = {
        use procfs::Current;
        procfs::Meminfo::current().ok()
    };
    let bytes = |b: u64| i64::try_from(b).ok();
    HostFacts {
        machine: Machine {
            cpu_cores: online_cpus(),
            memory_bytes: meminfo
                .as_ref()
                .and_then(|m| bytes(m.mem_total))
                .unwrap_or(0),
            ephemeral_storage_bytes: nodefs.map(|f| f.capacity as i64),
            hugepages: hugepages(Path::new("/sys/kernel/mm/hugepages")),
        },
        readings: Readings { max_pid: max_pid() },
        system: SystemInfo {
            machine_id: read_trimmed("/etc/machine-id"),
            system_uuid: read_trimmed("/sys/class/dmi/id/product_uuid"),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            kernel_version: nix::sys::utsname::uname()
                .map(|u| u.release().to_string_lossy().into_owned())
                .unwrap_or_default(),
            os_image: os_image(&std::fs::read_to_string("/etc/os-release").unwrap_or_default()),
        },
        default_ip: default_route_ip(),
        interface_ips: interface_ips(),
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Online CPUs, as cAdvisor's NumCores (not the agent's own affinity or quota).
fn online_cpus() -> i64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1)
}

/// PRETTY_NAME of os-release, unquoted; upstream falls back to "Linux".
pub(crate) fn os_image(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').trim_matches('\'').to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "Linux".to_string())
}

/// `hugepages-<size>` for each page size the kernel offers, with the bytes reserved in it
/// (nr_hugepages × size), as cAdvisor reports them and upstream names them.
pub(crate) fn hugepages(dir: &Path) -> Vec<(String, i64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, i64)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let kib: i64 = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let pages: i64 = std::fs::read_to_string(e.path().join("nr_hugepages"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some((
                format!(
                    "hugepages-{}",
                    crate::vocabulary::quantity::binary_size(kib * 1024)
                ),
                pages * kib * 1024,
            ))
        })
        .collect();
    out.sort();
    out
}

fn max_pid() -> Option<i64> {
    let read = |p: &str| -> Option<i64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    match (
        read("/proc/sys/kernel/pid_max"),
        read("/proc/sys/kernel/threads-max"),
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The IPv4 address of the interface holding the default route, else the first
/// non-loopback IPv4 address.
pub(crate) fn default_route_ip() -> Option<IpAddr> {
    let default_if = procfs::net::route()
        .unwrap_or_default()
        .into_iter()
        .find(|r| r.destination.is_unspecified())
        .map(|r| r.iface);
    let addrs: Vec<(String, IpAddr)> = nix::ifaddrs::getifaddrs()
        .ok()?
        .filter_map(|a| {
            let ip = a.address?.as_sockaddr_in()?.ip();
            Some((a.interface_name, IpAddr::V4(ip)))
        })
        .filter(|(_, ip)| !ip.is_loopback())
        .collect();
    default_if
        .and_then(|d| addrs.iter().find(|(n, _)| *n == d).map(|(_, ip)| *ip))
        .or_else(|| addrs.first().map(|(_, ip)| *ip))
}

fn interface_ips() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter_map(|a| {
            let addr = a.address?;
            if let Some(v4) = addr.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                addr.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .collect()
}

/// Go's GOARCH name for the architecture the agent was built for.
pub(crate) fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_image_is_the_pretty_name() {
        assert_eq!(
            os_image("NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
            "Debian GNU/Linux 12 (bookworm)"
        );
        assert_eq!(os_image("NAME=x\n"), "Linux");
    }

    #[test]
    fn hugepage_sizes_are_named_as_upstream() {
        let dir = tempfile::tempdir().unwrap();
        for (size, pages) in [("2048kB", "3"), ("1048576kB", "0")] {
            let d = dir.path().join(format!("hugepages-{size}"));
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("nr_hugepages"), format!("{pages}\n")).unwrap();
        }
        assert_eq!(
            hugepages(dir.path()),
            vec![
                ("hugepages-1Gi".to_string(), 0),
                ("hugepages-2Mi".to_string(), 3 * 2 * 1024 * 1024)
            ]
        );
        assert!(hugepages(&dir.path().join("missing")).is_empty());
    }
}
