//! Host devices for a container (a raw block volume's device, at its `devicePath`), added
//! to the OCI spec as containerd's CRI plugin adds a CRI container's `devices`: the host
//! path's symlinks resolved, the node's type, major and minor, permission bits and owner
//! read from it, runc told to make the node at the container path, and the device cgroup
//! opened to that device with the given permissions only.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::PathBuf;

use oci_spec::runtime::{
    LinuxDevice, LinuxDeviceBuilder, LinuxDeviceCgroupBuilder, LinuxDeviceType,
    LinuxResourcesBuilder, Spec,
};

use super::{built, spec_err};
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

/// The device node at `path` as containerd's DeviceFromPath reads it (lstat: the path must
/// already be resolved), its `Path` set to where the container sees it.
fn device_from_path(d: &DeviceInfo, resolved: &std::path::Path) -> Result<LinuxDevice, String> {
    let md = std::fs::symlink_metadata(resolved)
        .map_err(|e| format!("cannot stat {}: {e}", resolved.display()))?;
    let ft = md.file_type();
    let typ = if ft.is_block_device() {
        LinuxDeviceType::B
    } else if ft.is_char_device() {
        LinuxDeviceType::C
    } else if ft.is_fifo() {
        LinuxDeviceType::P
    } else {
        return Err(format!("{} is not a device node", resolved.display()));
    };
    let rdev = md.rdev();
    LinuxDeviceBuilder::default()
        .path(&d.container_path)
        .typ(typ)
        .major(i64::from(nix::sys::stat::major(rdev) as u32))
        .minor(i64::from(nix::sys::stat::minor(rdev) as u32))
        // Permission bits only (containerd: mode &^ S_IFMT).
        .file_mode(md.mode() & 0o7777)
        .uid(md.uid())
        .gid(md.gid())
        .build()
        .map_err(|e| e.to_string())
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
        let node = device_from_path(d, &resolved).map_err(|r| spec_err(container, field, r))?;
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
}
