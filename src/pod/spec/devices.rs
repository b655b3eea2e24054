//! Host devices for a container (a raw block volume's device, at its `devicePath`), added
//! to the OCI spec as containerd's CRI plugin adds a CRI container's `devices`: the host
//! path's symlinks resolved, the node's type, major and minor, permission bits and owner
//! read from it, runc told to make the node at the container path, and the device cgroup
//! opened to that device with the given permissions only.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    LinuxDevice, LinuxDeviceBuilder, LinuxDeviceCgroupBuilder, LinuxDeviceType,
    LinuxResourcesBuilder, Spec,
};
use oci_spec::OciSpecError;

use super::{built, spec_err};
use crate::runtime::handlers::PrivilegedDevices;
use crate::runtime::RuntimeError;

/// One device for a container: upstream's kubecontainer.DeviceInfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// On the host; symlinks are followed.
    pub host_path: PathBuf,
    pub container_path: String,
    /// Device cgroup access: "mrw", or "r" for a read-only claim.
    pub permissions: &'static str,
}

/// Why a volume's device cannot be handed to the container (the reason of the spec error
/// that names the container and `volumeDevices`).
#[derive(Debug, thiserror::Error)]
enum DeviceError {
    #[error("cannot stat {}: {source}", path.display())]
    Stat {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a device node", path.display())]
    NotDevice { path: PathBuf },
    #[error(transparent)]
    Build(#[from] OciSpecError),
}

/// The device node at `path` as containerd's DeviceFromPath reads it (lstat: the path must
/// already be resolved), its `Path` set to where the container sees it.
fn device_from_path(d: &DeviceInfo, resolved: &Path) -> Result<LinuxDevice, DeviceError> {
    let md = std::fs::symlink_metadata(resolved).map_err(|source| DeviceError::Stat {
        path: resolved.to_path_buf(),
        source,
    })?;
    let node =
        device_from_metadata(&d.container_path, &md).ok_or_else(|| DeviceError::NotDevice {
            path: resolved.to_path_buf(),
        })?;
    Ok(node?)
}

/// A device node from what lstat said of it; `None` when it is no device node.
fn device_from_metadata(
    container_path: &str,
    md: &std::fs::Metadata,
) -> Option<Result<LinuxDevice, OciSpecError>> {
    let ft = md.file_type();
    let typ = if ft.is_block_device() {
        LinuxDeviceType::B
    } else if ft.is_char_device() {
        LinuxDeviceType::C
    } else if ft.is_fifo() {
        LinuxDeviceType::P
    } else {
        return None;
    };
    let rdev = md.rdev();
    Some(
        LinuxDeviceBuilder::default()
            .path(container_path)
            .typ(typ)
            .major(i64::from(nix::sys::stat::major(rdev) as u32))
            .minor(i64::from(nix::sys::stat::minor(rdev) as u32))
            // Permission bits only (containerd: mode &^ S_IFMT).
            .file_mode(md.mode() & 0o7777)
            .uid(md.uid())
            .gid(md.gid())
            .build(),
    )
}

/// Adds `devices` to the container's spec (containerd's WithDevices). Blocking: it reads
/// the host's device nodes.
pub fn add_devices(
    spec: &mut Spec,
    container: &str,
    devices: &[DeviceInfo],
) -> Result<(), RuntimeError> {
    if devices.is_empty() {
        return Ok(());
    }
    let oci = built(container);
    let linux = spec
        .linux_mut()
        .as_mut()
        .ok_or_else(|| spec_err(container, "spec", "the spec has no linux section"))?;
    let mut nodes = linux.devices().clone().unwrap_or_default();
    let mut resources = match linux.resources().clone() {
        Some(r) => r,
        None => LinuxResourcesBuilder::default().build().map_err(&oci)?,
    };
    let mut rules = resources.devices().clone().unwrap_or_default();
    for d in devices {
        let field = "volumeDevices";
        let resolved = std::fs::canonicalize(&d.host_path).map_err(|e| {
            spec_err(
                container,
                field,
                format!("cannot resolve {}: {e}", d.host_path.display()),
            )
        })?;
        let node = device_from_path(d, &resolved)
            .map_err(|r| spec_err(container, field, r.to_string()))?;
        rules.push(
            LinuxDeviceCgroupBuilder::default()
                .allow(true)
                .typ(node.typ())
                .major(node.major())
                .minor(node.minor())
                .access(d.permissions)
                .build()
                .map_err(&oci)?,
        );
        nodes.push(node);
    }
    resources.set_devices(Some(rules));
    linux.set_resources(Some(resources));
    linux.set_devices(Some(nodes));
    Ok(())
}

/// Folders of /dev whose contents are no host devices to hand over (the container gets its
/// own pts, shm and mqueue; fd is a link farm), as containerd's HostDevices skips them.
const SKIPPED_DEV_DIRS: &[&str] = &["pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"];

/// Every block and character device node below `dev` (the host's /dev), each made at the same
/// path in the container, as containerd's HostDevices lists them for a privileged container:
/// symlinks, FIFOs and other files are passed over, as are `console` (the container's own is
/// its terminal) and the folders of [`SKIPPED_DEV_DIRS`]. Blocking.
pub fn host_devices(dev: &Path) -> std::io::Result<Vec<LinuxDevice>> {
    let mut out = Vec::new();
    let mut todo = vec![(dev.to_path_buf(), PathBuf::from("/dev"))];
    while let Some((dir, in_container)) = todo.pop() {
        let listed = std::fs::read_dir(&dir).and_then(|d| d.collect::<Result<Vec<_>, _>>());
        let mut entries = match listed {
            Ok(entries) => entries,
            // A folder gone since it was seen (udev at work): nothing left in it.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && dir != dev => continue,
            Err(err) => return Err(err),
        };
        // One order for one host: specs compare equal across restarts.
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            let (host, inside) = (e.path(), in_container.join(&name));
            let md = match std::fs::symlink_metadata(&host) {
                Ok(md) => md,
                // Gone between listing and reading (udev at work), as containerd skips it.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => return Err(err),
            };
            let ft = md.file_type();
            if ft.is_dir() {
                if !SKIPPED_DEV_DIRS.iter().any(|s| name == *s) {
                    todo.push((host, inside));
                }
                continue;
            }
            if name == "console" || !(ft.is_block_device() || ft.is_char_device()) {
                continue;
            }
            // From the lstat above: a node removed since cannot fail the container.
            if let Some(node) = device_from_metadata(&inside.display().to_string(), &md) {
                out.push(node.map_err(std::io::Error::other)?);
            }
        }
    }
    Ok(out)
}

/// A privileged container's devices under its runtime's settings, as containerd's CRI plugin
/// gives them: the host's device nodes of `dev` unless the runtime is without host devices,
/// and a device cgroup that allows everything or (without host devices, and not told to
/// allow all) only what runc allows any container. Called after [`add_devices`], as
/// containerd adds a container's own devices first: a host node never takes the place of a
/// volume's device at the same path, and the volume devices' rules stay after the first.
/// Blocking when host devices are added.
pub fn set_privileged_devices(
    spec: &mut Spec,
    container: &str,
    policy: PrivilegedDevices,
    dev: &Path,
) -> Result<(), RuntimeError> {
    let oci = built(container);
    let host = if policy.host_devices() {
        host_devices(dev).map_err(|e| {
            spec_err(
                container,
                "securityContext.privileged",
                format!("cannot list the host's devices in {}: {e}", dev.display()),
            )
        })?
    } else {
        Vec::new()
    };
    let linux = spec
        .linux_mut()
        .as_mut()
        .ok_or_else(|| spec_err(container, "spec", "the spec has no linux section"))?;
    let mut nodes = linux.devices().clone().unwrap_or_default();
    for d in host {
        if !nodes.iter().any(|n| n.path() == d.path()) {
            nodes.push(d);
        }
    }
    linux.set_devices((!nodes.is_empty()).then_some(nodes));
    let mut resources = match linux.resources().clone() {
        Some(r) => r,
        None => LinuxResourcesBuilder::default().build().map_err(&oci)?,
    };
    // The first rule, for every device, decides by the runtime; the rules for single devices
    // (a block volume's) follow it.
    let mut rules = vec![LinuxDeviceCgroupBuilder::default()
        .allow(policy.allow_all())
        .access("rwm")
        .build()
        .map_err(&oci)?];
    rules.extend(
        resources
            .devices()
            .iter()
            .flatten()
            .filter(|r| r.typ().is_some() || r.major().is_some() || r.minor().is_some())
            .cloned(),
    );
    resources.set_devices(Some(rules));
    linux.set_resources(Some(resources));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn a_device_is_made_at_its_container_path_and_allowed_in_the_cgroup_as_containerd_does() {
        // /dev/null: a device node every host has (a block device needs root to make).
        let tmp = tempfile::tempdir().unwrap();
        let link = tmp.path().join("pv-1");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let (p, c) = super::super::tests::pod(json!({"name": "c", "image": "i"}));
        let mut spec = super::super::tests::spec_of(&p, &c).unwrap();
        let devices = [
            DeviceInfo {
                host_path: link.clone(),
                container_path: "/dev/xvda".into(),
                permissions: "mrw",
            },
            DeviceInfo {
                host_path: link,
                container_path: "/dev/xvdb".into(),
                permissions: "r",
            },
        ];
        add_devices(&mut spec, "c", &devices).unwrap();
        let v: Value = serde_json::to_value(&spec).unwrap();
        let md = std::fs::metadata("/dev/null").unwrap();
        let (major, minor) = (
            nix::sys::stat::major(md.rdev()),
            nix::sys::stat::minor(md.rdev()),
        );
        assert_eq!(
            v["linux"]["devices"],
            json!([
                {"path": "/dev/xvda", "type": "c", "major": major, "minor": minor,
                 "fileMode": md.mode() & 0o7777, "uid": md.uid(), "gid": md.gid()},
                {"path": "/dev/xvdb", "type": "c", "major": major, "minor": minor,
                 "fileMode": md.mode() & 0o7777, "uid": md.uid(), "gid": md.gid()},
            ])
        );
        // After the deny-all rule the spec starts with: the device, with the permissions.
        assert_eq!(
            v["linux"]["resources"]["devices"],
            json!([
                {"allow": false, "access": "rwm"},
                {"allow": true, "type": "c", "major": major, "minor": minor, "access": "mrw"},
                {"allow": true, "type": "c", "major": major, "minor": minor, "access": "r"},
            ])
        );
    }

    #[test]
    fn a_path_that_is_no_device_names_the_container_and_field() {
        let tmp = tempfile::tempdir().unwrap();
        let (p, c) = super::super::tests::pod(json!({"name": "c", "image": "i"}));
        let mut spec = super::super::tests::spec_of(&p, &c).unwrap();
        let e = add_devices(
            &mut spec,
            "c",
            &[DeviceInfo {
                host_path: tmp.path().into(),
                container_path: "/dev/xvda".into(),
                permissions: "mrw",
            }],
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            spec_err(
                "c",
                "volumeDevices",
                format!(
                    "{} is not a device node",
                    tmp.path().canonicalize().unwrap().display()
                )
            )
            .to_string()
        );
    }

    fn privileged_spec() -> Spec {
        let (p, c) = super::super::tests::pod(
            json!({"name": "c", "image": "i", "securityContext": {"privileged": true}}),
        );
        super::super::tests::spec_of(&p, &c).unwrap()
    }

    fn paths(devices: &[LinuxDevice]) -> Vec<String> {
        devices
            .iter()
            .map(|d| d.path().display().to_string())
            .collect()
    }

    /// The host's own /dev: its device nodes by their paths, never a symlink, a terminal of
    /// pts, or the console.
    #[test]
    fn the_hosts_devices_are_its_device_nodes() {
        let found = host_devices(Path::new("/dev")).unwrap();
        let found = paths(&found);
        assert!(found.iter().any(|p| p == "/dev/null"), "{found:?}");
        for p in &found {
            assert!(
                !p.starts_with("/dev/pts/") && !p.starts_with("/dev/fd/") && p != "/dev/console",
                "{p}"
            );
            // A node another test removed since (a loop device) is no longer there to check.
            if let Ok(md) = std::fs::symlink_metadata(p) {
                assert!(
                    md.file_type().is_block_device() || md.file_type().is_char_device(),
                    "{p}"
                );
            }
        }
        assert!(!found.iter().any(|p| p == "/dev/stdin"), "a symlink");
    }

    /// A made-up /dev (device nodes need root to make; without it only the listing's other
    /// rules are shown): nested nodes are found at their container paths, the rest skipped.
    #[test]
    fn a_dev_folder_is_walked_as_containerd_walks_it() {
        use nix::sys::stat::{makedev, mknod, Mode, SFlag};
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for dir in ["pts", "shm", "sub"] {
            std::fs::create_dir(d.join(dir)).unwrap();
        }
        nix::unistd::mkfifo(&d.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        std::os::unix::fs::symlink("/dev/null", d.join("link")).unwrap();
        std::fs::write(d.join("plain"), "").unwrap();
        let null = makedev(1, 3);
        let mut made = true;
        for node in ["null2", "pts/0", "shm/x", "sub/y", "console"] {
            match mknod(
                &d.join(node),
                SFlag::S_IFCHR,
                Mode::from_bits_truncate(0o666),
                null,
            ) {
                Ok(()) => {}
                Err(nix::errno::Errno::EPERM) => made = false,
                Err(e) => panic!("mknod {node}: {e}"),
            }
        }
        let found = host_devices(d).unwrap();
        if made {
            assert_eq!(paths(&found), ["/dev/null2", "/dev/sub/y"]);
            assert_eq!((found[0].major(), found[0].minor()), (1, 3));
        } else {
            assert!(found.is_empty(), "{found:?}");
        }
    }

    /// Privileged under a default runtime: the host's devices and every device allowed.
    /// Without host devices: none, and the cgroup denies (runc adds its usual few), unless
    /// all devices stay allowed. Before, a privileged container got no host device under
    /// any runtime and everything allowed under every runtime.
    #[test]
    fn privileged_containers_get_devices_as_their_runtime_says() {
        let rules = |spec: &Spec| -> Value {
            serde_json::to_value(
                spec.linux()
                    .as_ref()
                    .unwrap()
                    .resources()
                    .as_ref()
                    .unwrap()
                    .devices(),
            )
            .unwrap()
        };
        let nodes = |spec: &Spec| {
            paths(
                &spec
                    .linux()
                    .as_ref()
                    .unwrap()
                    .devices()
                    .clone()
                    .unwrap_or_default(),
            )
        };
        let mut spec = privileged_spec();
        set_privileged_devices(
            &mut spec,
            "c",
            PrivilegedDevices::default(),
            Path::new("/dev"),
        )
        .unwrap();
        assert!(nodes(&spec).contains(&"/dev/null".to_string()));
        assert_eq!(rules(&spec), json!([{"allow": true, "access": "rwm"}]));

        let mut spec = privileged_spec();
        let without = PrivilegedDevices {
            without_host_devices: true,
            all_devices_allowed: false,
        };
        set_privileged_devices(&mut spec, "c", without, Path::new("/dev")).unwrap();
        assert!(nodes(&spec).is_empty(), "{:?}", nodes(&spec));
        assert_eq!(rules(&spec), json!([{"allow": false, "access": "rwm"}]));

        let mut spec = privileged_spec();
        let all = PrivilegedDevices {
            without_host_devices: true,
            all_devices_allowed: true,
        };
        set_privileged_devices(&mut spec, "c", all, Path::new("/nonexistent")).unwrap();
        assert!(nodes(&spec).is_empty());
        assert_eq!(rules(&spec), json!([{"allow": true, "access": "rwm"}]));
    }

    /// A volume's device keeps its path against a host node of the same name, and its cgroup
    /// rule stays after the runtime's first rule (containerd adds a container's own devices
    /// before the host's).
    #[test]
    fn a_volume_device_wins_over_a_host_node_at_its_path() {
        let tmp = tempfile::tempdir().unwrap();
        let link = tmp.path().join("pv");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let volume = [DeviceInfo {
            host_path: link,
            container_path: "/dev/null".into(),
            permissions: "r",
        }];
        let zero = std::fs::metadata("/dev/zero").unwrap().rdev();
        let zero_minor = i64::from(nix::sys::stat::minor(zero) as u32);
        for policy in [
            PrivilegedDevices::default(),
            PrivilegedDevices {
                without_host_devices: true,
                all_devices_allowed: false,
            },
        ] {
            let mut spec = privileged_spec();
            add_devices(&mut spec, "c", &volume).unwrap();
            set_privileged_devices(&mut spec, "c", policy, Path::new("/dev")).unwrap();
            let linux = spec.linux().as_ref().unwrap();
            let nulls: Vec<_> = linux
                .devices()
                .iter()
                .flatten()
                .filter(|d| d.path() == Path::new("/dev/null"))
                .collect();
            assert_eq!(nulls.len(), 1, "{policy:?}");
            assert_eq!(
                nulls[0].minor(),
                zero_minor,
                "the volume's device: {policy:?}"
            );
            let rules =
                serde_json::to_value(linux.resources().as_ref().unwrap().devices()).unwrap();
            assert_eq!(
                rules[0],
                json!({"allow": policy.allow_all(), "access": "rwm"})
            );
            assert_eq!(rules[1]["access"], "r", "{rules}");
            assert_eq!(rules.as_array().unwrap().len(), 2, "{rules}");
        }
    }
}
