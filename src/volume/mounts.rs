//! A container's volumeMounts as OCI bind mounts: readOnly, subPath and subPathExpr, mount
//! propagation and recursiveReadOnly.
//!
//! A subPath is never handed to runc as a path into the volume, which a container writing
//! the volume could swap for a symlink between the check and runc's mount (the
//! CVE-2017-1002101 and CVE-2021-25741 class): `subpath` opens it component by component
//! without following symlinks (making missing directories inside the volume) and
//! bind-mounts the opened descriptor onto the agent's own
//! `<pod_dir>/volume-subpaths/<volume>/<container>/<index>`, and runc gets that path.
//! Mounting blocks: callers run this on a blocking thread.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::DirBuilderExt;

use k8s_openapi::api::core::v1::{Container, VolumeMount};
use oci_spec::runtime::Mount;

use super::mounter::{Mounter, SysMounter};
use super::subpath::{self, SubPathError};
use super::{PodVolumes, VolumeError, VolumeKind};
use crate::pod::spec::{bind_mount, expand};

/// The bind mounts for one container's volumeMounts, in their order. `env` is the
/// container's final environment (for subPathExpr). Blocking (subPath bind mounts).
pub fn container_mounts(
    c: &Container,
    vols: &PodVolumes,
    env: &[(String, String)],
) -> Result<Vec<Mount>, VolumeError> {
    container_mounts_with(c, vols, env, &SysMounter)
}

pub(crate) fn container_mounts_with(
    c: &Container,
    vols: &PodVolumes,
    env: &[(String, String)],
    mounter: &dyn Mounter,
) -> Result<Vec<Mount>, VolumeError> {
    let privileged = c
        .security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false);
    c.volume_mounts
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, m)| {
            let at = Target {
                container: &c.name,
                index: i,
                mounter,
            };
            one_mount(m, vols, env, privileged, &at).map_err(|e| match e {
                MountErr::Spec(field, reason) => VolumeError::Mount {
                    pod: vols.pod.clone(),
                    container: c.name.clone(),
                    index: i,
                    volume: m.name.clone(),
                    field,
                    reason,
                },
                MountErr::SubPath(field, source) => VolumeError::SubPath {
                    pod: vols.pod.clone(),
                    container: c.name.clone(),
                    index: i,
                    volume: m.name.clone(),
                    field,
                    source: Box::new(source),
                },
            })
        })
        .collect()
}

enum MountErr {
    /// The field at fault and why.
    Spec(&'static str, String),
    /// `subPath` or `subPathExpr`, and what opening or binding it met.
    SubPath(&'static str, SubPathError),
}

impl From<(&'static str, String)> for MountErr {
    fn from((field, reason): (&'static str, String)) -> Self {
        MountErr::Spec(field, reason)
    }
}

/// Which volumeMount is being made, for its subPath's bind target.
struct Target<'a> {
    container: &'a str,
    index: usize,
    mounter: &'a dyn Mounter,
}

fn one_mount(
    m: &VolumeMount,
    vols: &PodVolumes,
    env: &[(String, String)],
    privileged: bool,
    at: &Target<'_>,
) -> Result<Mount, MountErr> {
    if !m.mount_path.starts_with('/') {
        return Err(MountErr::Spec(
            "mountPath",
            format!("{:?} must be an absolute path", m.mount_path),
        ));
    }
    let vol = vols.get(&m.name).ok_or_else(|| {
        (
            "name",
            format!(
                "no volume named {:?} among the pod's volumes ({})",
                m.name,
                vols.names().join(", ")
            ),
        )
    })?;
    let sub_path = match (
        m.sub_path.as_deref().filter(|s| !s.is_empty()),
        m.sub_path_expr.as_deref().filter(|s| !s.is_empty()),
    ) {
        (Some(_), Some(_)) => {
            return Err(MountErr::Spec(
                "subPathExpr",
                "subPath and subPathExpr are mutually exclusive".into(),
            ))
        }
        (Some(s), None) => Some(s.to_string()),
        (None, Some(e)) => {
            Some(expand_sub_path(e, env).map_err(|r| ("subPathExpr", r.to_string()))?)
        }
        (None, None) => None,
    };
    let field = if m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()) {
        "subPathExpr"
    } else {
        "subPath"
    };

    if matches!(vol.kind, VolumeKind::HostPath) && fs::symlink_metadata(&vol.path).is_err() {
        // An unchecked hostPath that does not exist: the runtime creates it as a
        // directory (containerd's CRI does, 0755) rather than failing the container.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&vol.path)
            .map_err(|e| {
                (
                    "name",
                    format!("cannot create hostPath {}: {e}", vol.path.display()),
                )
            })?;
    }
    let read_only = m.read_only.unwrap_or(false) || vol.read_only;
    let propagation = match m.mount_propagation.as_deref().unwrap_or("None") {
        "None" | "" => "rprivate",
        "HostToContainer" => "rslave",
        "Bidirectional" if privileged => "rshared",
        "Bidirectional" => {
            return Err(MountErr::Spec(
                "mountPropagation",
                "Bidirectional mount propagation is available only to privileged containers".into(),
            ))
        }
        other => {
            return Err(MountErr::Spec(
                "mountPropagation",
                format!("unknown mode {other:?}"),
            ))
        }
    };
    let mut options = vec![propagation, if read_only { "ro" } else { "rw" }];
    match m.recursive_read_only.as_deref().unwrap_or("Disabled") {
        "Disabled" | "" => {}
        rro @ ("Enabled" | "IfPossible") => {
            if !m.read_only.unwrap_or(false) {
                return Err(MountErr::Spec(
                    "recursiveReadOnly",
                    format!("{rro} requires readOnly: true"),
                ));
            }
            if propagation != "rprivate" {
                return Err(MountErr::Spec(
                    "recursiveReadOnly",
                    format!("{rro} requires mountPropagation None"),
                ));
            }
            // runc applies "rro" with mount_setattr (Linux 5.12+). IfPossible stays a
            // plain read-only mount: whether the runtime can do more is not probed yet.
            if rro == "Enabled" {
                options.push("rro");
            }
        }
        other => {
            return Err(MountErr::Spec(
                "recursiveReadOnly",
                format!("unknown mode {other:?}"),
            ))
        }
    }
    // Last, once the spec is known good: a subPath is bind-mounted here.
    let source = match &sub_path {
        Some(sub) => {
            let target = subpath::target_path(&vols.pod_dir, &m.name, at.container, at.index);
            subpath::bind_sub_path(&vol.path, sub, &target, at.mounter)
                .map_err(|e| MountErr::SubPath(field, e))?
        }
        None => fs::canonicalize(&vol.path).map_err(|e| {
            (
                "name",
                format!("volume path {} is not usable: {e}", vol.path.display()),
            )
        })?,
    };
    bind_mount(&m.mount_path, source, &options)
        .map_err(|e| MountErr::Spec("mountPath", e.to_string()))
}

/// `$(VAR)` expansion of subPathExpr; like upstream, a variable that is unset or empty is an
/// error naming every such variable.
fn expand_sub_path(expr: &str, env: &[(String, String)]) -> Result<String, MissingValues> {
    let missing = RefCell::new(BTreeSet::new());
    let out = expand(
        expr,
        &|name| match env.iter().rev().find(|(k, _)| k == name) {
            Some((_, v)) if !v.is_empty() => Some(v.clone()),
            _ => {
                missing.borrow_mut().insert(name.to_string());
                Some(String::new())
            }
        },
    );
    let missing = missing.into_inner();
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(MissingValues(missing.into_iter().collect()))
    }
}

/// The variables a subPathExpr names that are unset or empty.
#[derive(Debug, thiserror::Error)]
#[error("missing value for {}", .0.join(", "))]
struct MissingValues(Vec<String>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::mounter::FakeMounter;
    use crate::volume::HostVolume;
    use serde_json::{json, Value};
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::{Path, PathBuf};

    /// The mounts with subPaths bound by a fake mounter (no root needed), and that mounter.
    fn mounts(
        c: &Container,
        v: &PodVolumes,
        env: &[(String, String)],
    ) -> (Result<Vec<Mount>, VolumeError>, FakeMounter) {
        let m = FakeMounter::default();
        (container_mounts_with(c, v, env, &m), m)
    }

    /// What the fake bound: (the path the opened fd stood for, the target).
    fn binds(m: &FakeMounter) -> Vec<(PathBuf, PathBuf)> {
        m.binds.lock().unwrap().clone()
    }

    /// The mounts as the JSON runc reads.
    fn as_json(m: &[Mount]) -> Vec<Value> {
        m.iter().map(|m| serde_json::to_value(m).unwrap()).collect()
    }

    fn vols(dir: &Path) -> PodVolumes {
        let mut v = PodVolumes::new("p_ns(u)", dir.join("pod"));
        fs::create_dir_all(dir.join("data")).unwrap();
        fs::create_dir_all(dir.join("info")).unwrap();
        v.insert(
            "data",
            HostVolume {
                path: dir.join("data"),
                read_only: false,
                kind: VolumeKind::EmptyDir,
            },
        );
        v.insert(
            "info",
            HostVolume {
                path: dir.join("info"),
                read_only: true,
                kind: VolumeKind::DownwardApi,
            },
        );
        v.insert(
            "host",
            HostVolume {
                path: dir.join("host/new"),
                read_only: false,
                kind: VolumeKind::HostPath,
            },
        );
        v
    }

    fn container(mounts: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "c", "image": "i", "volumeMounts": mounts})).unwrap()
    }

    #[test]
    fn plain_mounts_and_read_only() {
        let tmp = tempfile::tempdir().unwrap();
        let v = vols(tmp.path());
        let c = container(json!([
            {"name": "data", "mountPath": "/data"},
            {"name": "data", "mountPath": "/ro", "readOnly": true},
            {"name": "info", "mountPath": "/info"},
            {"name": "host", "mountPath": "/host", "mountPropagation": "HostToContainer"},
        ]));
        let m = as_json(&container_mounts(&c, &v, &[]).unwrap());
        let real = fs::canonicalize(tmp.path()).unwrap();
        assert_eq!(
            m[0],
            json!({"destination": "/data", "type": "bind",
                   "source": real.join("data"), "options": ["rbind", "rprivate", "rw"]})
        );
        assert_eq!(m[1]["options"][2], "ro");
        assert_eq!(
            m[2]["options"][2], "ro",
            "downwardAPI is read-only by nature"
        );
        assert_eq!(m[3]["options"][1], "rslave");
        assert!(
            tmp.path().join("host/new").is_dir(),
            "unchecked hostPath created"
        );
    }

    #[test]
    fn mount_errors_name_container_mount_and_field() {
        let tmp = tempfile::tempdir().unwrap();
        let v = vols(tmp.path());
        let e = container_mounts(
            &container(json!([{"name": "nope", "mountPath": "/x"}])),
            &v,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("container \"c\"") && e.contains("volumeMounts[0]"),
            "{e}"
        );
        assert!(e.contains("no volume named \"nope\""), "{e}");
        let e = container_mounts(
            &container(json!([{"name": "data", "mountPath": "rel"}])),
            &v,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("mountPath") && e.contains("absolute"), "{e}");
        let e = container_mounts(
            &container(
                json!([{"name": "data", "mountPath": "/x", "mountPropagation": "Bidirectional"}]),
            ),
            &v,
            &[],
        )
        .unwrap_err();
        assert_eq!(e.waiting_reason(), "CreateContainerConfigError");
    }

    #[test]
    fn sub_path_is_created_inside_the_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let v = vols(tmp.path());
        fs::set_permissions(tmp.path().join("data"), fs::Permissions::from_mode(0o777)).unwrap();
        let c = container(json!([{"name": "data", "mountPath": "/x", "subPath": "a/b"}]));
        let (got, fake) = mounts(&c, &v, &[]);
        let m = as_json(&got.unwrap());
        let made = tmp.path().join("data/a/b");
        assert!(made.is_dir());
        for dir in [tmp.path().join("data/a"), made.clone()] {
            assert_eq!(
                fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
                0o777,
                "{dir:?} has the volume root's mode, whatever the umask"
            );
        }
        let target = tmp.path().join("pod/volume-subpaths/data/c/0");
        assert_eq!(
            m[0]["source"],
            json!(target),
            "runc gets the agent's target"
        );
        assert_eq!(
            binds(&fake),
            vec![(fs::canonicalize(made).unwrap(), target.clone())]
        );
        assert!(target.is_dir(), "a directory target for a directory");
    }

    #[test]
    fn sub_path_escapes_are_rejected() {
        let tmp = tempfile::tempdir().unwrap();
        let v = vols(tmp.path());
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        symlink(&outside, tmp.path().join("data/evil")).unwrap();
        symlink("../../outside", tmp.path().join("data/rel-evil")).unwrap();
        fs::create_dir(tmp.path().join("data/inner")).unwrap();
        symlink("inner", tmp.path().join("data/good")).unwrap();
        for sub in [
            "../outside",
            "/etc",
            "evil",
            "evil/x",
            "rel-evil",
            "a/../../x",
        ] {
            let c = container(json!([{"name": "data", "mountPath": "/x", "subPath": sub}]));
            let (got, fake) = mounts(&c, &v, &[]);
            let e = got.unwrap_err();
            assert!(
                matches!(
                    e,
                    VolumeError::SubPath {
                        field: "subPath",
                        ..
                    }
                ),
                "{sub}: {e}"
            );
            assert_eq!(e.waiting_reason(), "CreateContainerConfigError");
            assert!(binds(&fake).is_empty(), "{sub}: nothing bound");
        }
        assert!(!outside.join("x").exists(), "nothing created outside");
        let c = container(json!([{"name": "data", "mountPath": "/x", "subPath": "good"}]));
        let (got, fake) = mounts(&c, &v, &[]);
        got.unwrap();
        let inner = fs::canonicalize(tmp.path().join("data/inner")).unwrap();
        assert_eq!(binds(&fake)[0].0, inner, "a link staying inside is fine");
    }

    #[test]
    fn sub_path_expr_expands_env() {
        let tmp = tempfile::tempdir().unwrap();
        let v = vols(tmp.path());
        let env = vec![
            ("POD".to_string(), "web-1".to_string()),
            ("EMPTY".to_string(), String::new()),
        ];
        let c =
            container(json!([{"name": "data", "mountPath": "/x", "subPathExpr": "logs/$(POD)"}]));
        mounts(&c, &v, &env).0.unwrap();
        assert!(tmp.path().join("data/logs/web-1").is_dir());
        let c = container(
            json!([{"name": "data", "mountPath": "/x", "subPathExpr": "$(NOPE)/$(EMPTY)"}]),
        );
        let e = mounts(&c, &v, &env).0.unwrap_err().to_string();
        assert!(
            e.contains("subPathExpr: missing value for EMPTY, NOPE"),
            "{e}"
        );
        let c =
            container(json!([{"name": "data", "mountPath": "/x", "subPathExpr": "$(POD)/../.."}]));
        let e = mounts(&c, &v, &env).0.unwrap_err().to_string();
        assert!(
            e.contains("subPathExpr: \"web-1/../..\" must not contain '..'"),
            "{e}"
        );
    }

    #[test]
    fn recursive_read_only() {
        let tmp = tempfile::tempdir().unwrap();
        let v = vols(tmp.path());
        let c = container(
            json!([{"name": "data", "mountPath": "/x", "readOnly": true, "recursiveReadOnly": "Enabled"}]),
        );
        let m = as_json(&container_mounts(&c, &v, &[]).unwrap());
        assert_eq!(m[0]["options"], json!(["rbind", "rprivate", "ro", "rro"]));
        let c =
            container(json!([{"name": "data", "mountPath": "/x", "recursiveReadOnly": "Enabled"}]));
        assert!(container_mounts(&c, &v, &[]).is_err());
    }
}
