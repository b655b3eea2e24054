//! The mount table as the cgroup detection reads it (/proc/self/mountinfo).

use std::path::Path;

use procfs::FromBufRead;

use super::error::{CgroupError, Result};

/// One line of /proc/self/mountinfo, the fields the cgroup detection needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// The path inside the mounted filesystem that is the mount's root (not `/` inside a
    /// container whose cgroup namespace is not the host's).
    pub root: String,
    pub mount_point: String,
    pub fs_type: String,
    pub super_options: Vec<String>,
}

/// The cgroup2 mount at /sys/fs/cgroup: a unified host.
pub fn unified_at_sys_fs_cgroup(mounts: &[MountEntry]) -> Option<&MountEntry> {
    mounts
        .iter()
        .find(|m| m.fs_type == "cgroup2" && m.mount_point == "/sys/fs/cgroup")
}

/// The v1 hierarchy that carries `controller`.
pub fn v1_hierarchy<'a>(mounts: &'a [MountEntry], controller: &str) -> Option<&'a MountEntry> {
    mounts
        .iter()
        .find(|m| m.fs_type == "cgroup" && m.super_options.iter().any(|o| o == controller))
}

/// Any cgroup2 mount (a hybrid host's `unified`): the fallback when v1 lacks a controller.
pub fn any_unified(mounts: &[MountEntry]) -> Option<&MountEntry> {
    mounts.iter().find(|m| m.fs_type == "cgroup2")
}

pub fn parse_mountinfo(path: &Path, text: &str) -> Result<Vec<MountEntry>> {
    let mounts = procfs::process::MountInfos::from_buf_read(text.as_bytes())
        .map_err(|e| CgroupError::parse(path, e.to_string()))?;
    Ok(mounts
        .into_iter()
        .map(|m| MountEntry {
            // procfs leaves the kernel's octal escapes in place.
            root: unescape_octal(&m.root),
            mount_point: unescape_octal(&m.mount_point.to_string_lossy()),
            fs_type: m.fs_type,
            super_options: m.super_options.into_keys().collect(),
        })
        .collect())
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(oct, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::files::read_string;
    use crate::cgroups::testdata;

    #[test]
    fn mountinfo_hybrid_host() {
        let p = testdata("proc/mountinfo.hybrid");
        let m = parse_mountinfo(&p, &read_string(&p).unwrap()).unwrap();
        let mem = m
            .iter()
            .find(|e| e.mount_point == "/sys/fs/cgroup/memory")
            .unwrap();
        assert_eq!(mem.fs_type, "cgroup");
        assert!(mem.super_options.contains(&"memory".to_string()));
        assert!(m
            .iter()
            .any(|e| e.fs_type == "cgroup2" && e.mount_point == "/sys/fs/cgroup/unified"));
    }

    #[test]
    fn mountinfo_escapes() {
        let m = parse_mountinfo(
            Path::new("mountinfo"),
            "40 31 0:38 /a\\040b /mnt/with\\040space rw - cgroup2 cgroup2 rw\n",
        )
        .unwrap();
        assert_eq!(m[0].mount_point, "/mnt/with space");
        assert_eq!(m[0].root, "/a b");
    }
}
