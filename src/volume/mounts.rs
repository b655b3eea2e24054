//! A container's volumeMounts as OCI bind mounts: readOnly, subPath and subPathExpr
//! (created inside the volume when missing, never leading out of it), mount propagation
//! and recursiveReadOnly.
//!
//! Upstream closes the window between checking a subPath and the runtime mounting it by
//! bind-mounting an fd it opened into `volume-subpaths/`. Here the checked path is handed
//! to runc fully resolved (no symlink left in it), which leaves only a narrow race: a
//! container that swaps a directory of its own volume for a symlink between this check
//! and its sibling's start. Closing it needs the fd bind mount, not built yet.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, VolumeMount};
use oci_spec::runtime::Mount;

use super::{PodVolumes, VolumeError, VolumeKind};
use crate::runtime::spec::{bind_mount, expand};

/// The bind mounts for one container's volumeMounts, in their order. `env` is the
/// container's final environment (for subPathExpr).
pub fn container_mounts(
    c: &Container,
    vols: &PodVolumes,
    env: &[(String, String)],
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
            one_mount(m, vols, env, privileged).map_err(|(field, reason)| VolumeError::Mount {
                pod: vols.pod.clone(),
                container: c.name.clone(),
                index: i,
                volume: m.name.clone(),
                field,
                reason,
            })
        })
        .collect()
}

type MountErr = (&'static str, String);

fn one_mount(
    m: &VolumeMount,
    vols: &PodVolumes,
    env: &[(String, String)],
    privileged: bool,
) -> Result<Mount, MountErr> {
    if !m.mount_path.starts_with('/') {
        return Err((
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
            return Err((
                "subPathExpr",
                "subPath and subPathExpr are mutually exclusive".into(),
            ))
        }
        (Some(s), None) => Some(s.to_string()),
        (None, Some(e)) => Some(expand_sub_path(e, env).map_err(|r| ("subPathExpr", r))?),
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
    let source = match &sub_path {
        Some(sub) => resolve_sub_path(&vol.path, sub).map_err(|r| (field, r))?,
        None => fs::canonicalize(&vol.path).map_err(|e| {
            (
                "name",
                format!("volume path {} is not usable: {e}", vol.path.display()),
            )
        })?,
    };

    let read_only = m.read_only.unwrap_or(false) || vol.read_only;
    let propagation = match m.mount_propagation.as_deref().unwrap_or("None") {
        "None" | "" => "rprivate",
        "HostToContainer" => "rslave",
        "Bidirectional" if privileged => "rshared",
        "Bidirectional" => {
            return Err((
                "mountPropagation",
                "Bidirectional mount propagation is available only to privileged containers".into(),
            ))
        }
        other => return Err(("mountPropagation", format!("unknown mode {other:?}"))),
    };
    let mut options = vec![propagation, if read_only { "ro" } else { "rw" }];
    match m.recursive_read_only.as_deref().unwrap_or("Disabled") {
        "Disabled" | "" => {}
        rro @ ("Enabled" | "IfPossible") => {
            if !m.read_only.unwrap_or(false) {
                return Err((
                    "recursiveReadOnly",
                    format!("{rro} requires readOnly: true"),
                ));
            }
            if propagation != "rprivate" {
                return Err((
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
        other => return Err(("recursiveReadOnly", format!("unknown mode {other:?}"))),
    }
    bind_mount(&m.mount_path, source, &options).map_err(|e| ("mountPath", e.to_string()))
}

/// `$(VAR)` expansion of subPathExpr; like upstream, a variable that is unset or empty is an
/// error naming every such variable.
fn expand_sub_path(expr: &str, env: &[(String, String)]) -> Result<String, String> {
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
        Err(format!(
            "missing value for {}",
            missing.into_iter().collect::<Vec<_>>().join(", ")
        ))
    }
}

/// `base/sub`, resolved and checked to stay inside `base`; missing directories are made
/// with the volume root's mode (so a group-writable volume stays so), as upstream does.
pub fn resolve_sub_path(base: &Path, sub: &str) -> Result<PathBuf, String> {
    if sub.starts_with('/') {
        return Err(format!("{sub:?} must not be an absolute path"));
    }
    let rel = Path::new(sub);
    if rel.components().any(|c| c == Component::ParentDir) {
        return Err(format!("{sub:?} must not contain '..'"));
    }
    let base_real = fs::canonicalize(base)
        .map_err(|e| format!("volume path {} is not usable: {e}", base.display()))?;
    let base_mode = fs::metadata(&base_real)
        .map_err(|e| format!("cannot read volume path {}: {e}", base_real.display()))?
        .permissions()
        .mode()
        & 0o7777;
    let parts: Vec<_> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s),
            _ => None,
        })
        .collect();
    let mut cur = base_real.clone();
    for (i, part) in parts.iter().enumerate() {
        let next = cur.join(part);
        match fs::symlink_metadata(&next) {
            Ok(_) => {
                let real = fs::canonicalize(&next)
                    .map_err(|e| format!("{sub:?}: cannot resolve {}: {e}", next.display()))?;
                if !real.starts_with(&base_real) {
                    return Err(format!(
                        "{sub:?} leads outside the volume (through {})",
                        next.display()
                    ));
                }
                if i + 1 < parts.len() && !real.is_dir() {
                    return Err(format!("{sub:?}: {} is not a directory", next.display()));
                }
                cur = real;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // mkdir does not follow a symlink planted meanwhile: it fails instead.
                fs::DirBuilder::new()
                    .mode(base_mode)
                    .create(&next)
                    .map_err(|e| format!("{sub:?}: cannot create {}: {e}", next.display()))?;
                fs::set_permissions(&next, fs::Permissions::from_mode(base_mode))
                    .map_err(|e| format!("{sub:?}: cannot set mode of {}: {e}", next.display()))?;
                cur = next;
            }
            Err(e) => return Err(format!("{sub:?}: cannot read {}: {e}", next.display())),
        }
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::HostVolume;
    use serde_json::{json, Value};
    use std::os::unix::fs::symlink;

    /// The mounts as the JSON runc reads.
    fn as_json(m: &[Mount]) -> Vec<Value> {
        m.iter().map(|m| serde_json::to_value(m).unwrap()).collect()
    }

    fn vols(dir: &Path) -> PodVolumes {
        let mut v = PodVolumes::new("p_ns(u)");
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
        let m = as_json(&container_mounts(&c, &v, &[]).unwrap());
        let made = tmp.path().join("data/a/b");
        assert!(made.is_dir());
        assert_eq!(
            fs::metadata(&made).unwrap().permissions().mode() & 0o777,
            0o777
        );
        assert_eq!(m[0]["source"], json!(fs::canonicalize(made).unwrap()));
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
            let e = container_mounts(&c, &v, &[]).unwrap_err().to_string();
            assert!(e.contains("subPath"), "{sub}: {e}");
        }
        assert!(!outside.join("x").exists(), "nothing created outside");
        let c = container(json!([{"name": "data", "mountPath": "/x", "subPath": "good"}]));
        let m = as_json(&container_mounts(&c, &v, &[]).unwrap());
        let inner = fs::canonicalize(tmp.path().join("data/inner")).unwrap();
        assert_eq!(
            m[0]["source"],
            json!(inner),
            "a link staying inside is fine"
        );
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
        container_mounts(&c, &v, &env).unwrap();
        assert!(tmp.path().join("data/logs/web-1").is_dir());
        let c = container(
            json!([{"name": "data", "mountPath": "/x", "subPathExpr": "$(NOPE)/$(EMPTY)"}]),
        );
        let e = container_mounts(&c, &v, &env).unwrap_err().to_string();
        assert!(
            e.contains("subPathExpr: missing value for EMPTY, NOPE"),
            "{e}"
        );
        let c =
            container(json!([{"name": "data", "mountPath": "/x", "subPathExpr": "$(POD)/../.."}]));
        assert!(container_mounts(&c, &v, &env).is_err());
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
