//! The machine facts cAdvisor's machine collector reports (`machine_*` and
//! `cadvisor_version_info`), read from the same files cAdvisor reads: /proc/cpuinfo for
//! cores and sockets, /proc/meminfo for memory and swap, machine-id, the DMI product UUID
//! and the boot id for the labels. They do not change while the node runs (the boot id
//! changes only with a reboot, which restarts the agent), so the collector reads them once.

use std::collections::BTreeSet;
use std::path::Path;

use super::cadvisor::{MachineInfo, VersionInfo};
use super::error::{Result, StatsError};
use super::parse::read_string;

fn first_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.lines().next().unwrap_or("").trim().to_string())
}

/// (logical cores, physical cores, sockets) from /proc/cpuinfo: `processor` entries, distinct
/// (`physical id`, `core id`) pairs and distinct `physical id`s, as cAdvisor counts them.
pub fn parse_cpuinfo(text: &str) -> (u64, u64, u64) {
    let mut logical = 0;
    let mut cores = BTreeSet::new();
    let mut sockets = BTreeSet::new();
    let mut physical_id = None::<String>;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_string();
        match key.trim() {
            "processor" => {
                logical += 1;
                physical_id = None;
            }
            "physical id" => {
                sockets.insert(value.clone());
                physical_id = Some(value);
            }
            "core id" => {
                cores.insert((physical_id.clone().unwrap_or_default(), value));
            }
            _ => {}
        }
    }
    (logical, cores.len() as u64, sockets.len() as u64)
}

/// A `Key:   N kB` line of /proc/meminfo, in bytes.
fn meminfo_bytes(path: &Path, text: &str, key: &str) -> Result<u64> {
    text.lines()
        .find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            let kb: u64 = rest.split_whitespace().next()?.parse().ok()?;
            Some(kb * 1024)
        })
        .ok_or_else(|| StatsError::parse(path, format!("no {key} line")))
}

/// Reads the machine facts. `proc_root`, `sys_root` and `etc_root` are /proc, /sys and /etc
/// (tests pass fixtures). Only /proc/cpuinfo and /proc/meminfo are required: the label files
/// are missing on some VMs and then read as empty, as cAdvisor leaves them.
pub fn read_machine_info(
    proc_root: &Path,
    sys_root: &Path,
    etc_root: &Path,
    taken_at_ms: i64,
) -> Result<MachineInfo> {
    let cpuinfo = read_string(&proc_root.join("cpuinfo"))?;
    let (cores, physical_cores, sockets) = parse_cpuinfo(&cpuinfo);
    let meminfo_path = proc_root.join("meminfo");
    let meminfo = read_string(&meminfo_path)?;
    Ok(MachineInfo {
        machine_id: first_line(&etc_root.join("machine-id")).unwrap_or_default(),
        system_uuid: first_line(&sys_root.join("class/dmi/id/product_uuid")).unwrap_or_default(),
        boot_id: first_line(&proc_root.join("sys/kernel/random/boot_id")).unwrap_or_default(),
        cores,
        physical_cores,
        sockets,
        memory_bytes: meminfo_bytes(&meminfo_path, &meminfo, "MemTotal")?,
        swap_bytes: meminfo_bytes(&meminfo_path, &meminfo, "SwapTotal").unwrap_or(0),
        taken_at_ms,
    })
}

/// The kernel release and the OS's PRETTY_NAME, as cAdvisor's version info has them.
pub fn read_version_info(proc_root: &Path, etc_root: &Path) -> VersionInfo {
    let os_version = std::fs::read_to_string(etc_root.join("os-release"))
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let v = l.strip_prefix("PRETTY_NAME=")?;
                Some(v.trim().trim_matches('"').to_string())
            })
        })
        .unwrap_or_else(|| "Linux".to_string());
    VersionInfo {
        kernel_version: first_line(&proc_root.join("sys/kernel/osrelease")).unwrap_or_default(),
        os_version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_counts_threads_cores_and_sockets() {
        // Two sockets, two cores each, two threads per core.
        let mut text = String::new();
        let mut n = 0;
        for socket in 0..2 {
            for core in 0..2 {
                for _thread in 0..2 {
                    text.push_str(&format!(
                        "processor\t: {n}\nmodel name\t: X\nphysical id\t: {socket}\ncore id\t\t: {core}\n\n"
                    ));
                    n += 1;
                }
            }
        }
        assert_eq!(parse_cpuinfo(&text), (8, 4, 2));
        // A VM kernel that names no sockets or cores (some arm64 guests).
        assert_eq!(parse_cpuinfo("processor : 0\n\nprocessor : 1\n"), (2, 0, 0));
    }

    #[test]
    fn machine_info_from_fixture_files() {
        let tmp = tempfile::tempdir().unwrap();
        let (proc_root, sys_root, etc_root) = (
            tmp.path().join("proc"),
            tmp.path().join("sys"),
            tmp.path().join("etc"),
        );
        std::fs::create_dir_all(proc_root.join("sys/kernel/random")).unwrap();
        std::fs::create_dir_all(sys_root.join("class/dmi/id")).unwrap();
        std::fs::create_dir_all(&etc_root).unwrap();
        std::fs::write(
            proc_root.join("cpuinfo"),
            "processor : 0\nphysical id : 0\ncore id : 0\n\nprocessor : 1\nphysical id : 0\ncore id : 1\n",
        )
        .unwrap();
        std::fs::write(
            proc_root.join("meminfo"),
            "MemTotal:        2000 kB\nMemFree: 10 kB\nSwapTotal:       512 kB\n",
        )
        .unwrap();
        std::fs::write(proc_root.join("sys/kernel/random/boot_id"), "b-1\n").unwrap();
        std::fs::write(proc_root.join("sys/kernel/osrelease"), "6.1.0-57-amd64\n").unwrap();
        std::fs::write(sys_root.join("class/dmi/id/product_uuid"), "u-1\n").unwrap();
        std::fs::write(etc_root.join("machine-id"), "m-1\n").unwrap();
        std::fs::write(
            etc_root.join("os-release"),
            "NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n",
        )
        .unwrap();
        let m = read_machine_info(&proc_root, &sys_root, &etc_root, 7).unwrap();
        assert_eq!(
            m,
            MachineInfo {
                machine_id: "m-1".into(),
                system_uuid: "u-1".into(),
                boot_id: "b-1".into(),
                cores: 2,
                physical_cores: 2,
                sockets: 1,
                memory_bytes: 2000 * 1024,
                swap_bytes: 512 * 1024,
                taken_at_ms: 7,
            }
        );
        let v = read_version_info(&proc_root, &etc_root);
        assert_eq!(v.kernel_version, "6.1.0-57-amd64");
        assert_eq!(v.os_version, "Debian GNU/Linux 12 (bookworm)");
        // No cpuinfo: an error naming the file.
        std::fs::remove_file(proc_root.join("cpuinfo")).unwrap();
        let err = read_machine_info(&proc_root, &sys_root, &etc_root, 7).unwrap_err();
        assert!(err.to_string().contains("cpuinfo"), "{err}");
    }
}
