//! The files of a configMap or secret volume (or projection): every key of the object, or
//! only the listed `items` (key → path, each with its own mode), as upstream's MakePayload
//! builds them. A listed key the object lacks is an error unless the reference is optional,
//! with upstream's words.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, KeyToPath, Secret, Volume};

use super::downward::{check_mode, clean_path, FileProjection, Payload};
use super::source::{SetUp, VolumeSource};
use super::{
    downward, empty_dir, write_files, written_before, HostVolume, VolumeError, VolumeKind,
    CONFIG_MAP_PLUGIN, SECRET_PLUGIN,
};
use crate::objects::ObjectKind;

/// Why the files cannot be made.
#[derive(Debug, PartialEq, Eq)]
pub enum FilesError {
    /// The volume's spec is wrong: the field at fault and why.
    Field(String, String),
    /// A listed key is not in the object: upstream's message.
    MissingKey(String),
}

/// A ConfigMap's keys: `data` as UTF-8 bytes and `binaryData` as they are.
pub fn config_map_keys(cm: &ConfigMap) -> BTreeMap<&str, &[u8]> {
    let text = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_bytes()));
    let binary = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.0.as_slice()));
    // Upstream looks in data first; the API refuses a key in both anyway.
    binary.chain(text).collect()
}

/// A Secret's keys (`data`; `stringData` is write-only and never comes back from the API).
pub fn secret_keys(s: &Secret) -> BTreeMap<&str, &[u8]> {
    s.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.0.as_slice()))
        .collect()
}

/// Adds the object's files to `out`. `keys` is empty for a missing optional object.
/// `field` names the source in errors (e.g. `configMap`, `projected.sources[1].secret`).
pub fn collect(
    kind: ObjectKind,
    items: Option<&[KeyToPath]>,
    keys: &BTreeMap<&str, &[u8]>,
    default_mode: u32,
    optional: bool,
    field: &str,
    out: &mut Payload,
) -> Result<(), FilesError> {
    let file = |data: &[u8], mode| FileProjection {
        data: data.to_vec(),
        mode,
        uid: None,
    };
    let Some(items) = items.filter(|i| !i.is_empty()) else {
        for (k, v) in keys {
            // The API validates keys as file names; a bad one is still refused here
            // rather than written outside the volume.
            let path = clean_path(k)
                .map_err(|r| FilesError::Field(format!("{field} key"), r.to_string()))?;
            out.insert(path, file(v, default_mode));
        }
        return Ok(());
    };
    for (i, ktp) in items.iter().enumerate() {
        let f = format!("{field}.items[{i}]");
        let path = clean_path(&ktp.path)
            .map_err(|r| FilesError::Field(format!("{f}.path"), r.to_string()))?;
        let mode = match ktp.mode {
            Some(m) => {
                check_mode(m).map_err(|r| FilesError::Field(format!("{f}.mode"), r.to_string()))?
            }
            None => default_mode,
        };
        let Some(data) = keys.get(ktp.key.as_str()) else {
            if optional {
                continue;
            }
            return Err(FilesError::MissingKey(match kind {
                ObjectKind::ConfigMap => {
                    format!("configmap references non-existent config key: {}", ktp.key)
                }
                ObjectKind::Secret => format!("references non-existent secret key: {}", ktp.key),
            }));
        };
        out.insert(path, file(data, mode));
    }
    Ok(())
}

/// configMap volumes: the ConfigMap's keys as files, on the node's disk.
pub(super) struct ConfigMapSource;

impl VolumeSource for ConfigMapSource {
    fn field(&self) -> &'static str {
        "configMap"
    }

    fn set_up(&self, cx: &SetUp<'_>, vol: &Volume) -> Result<HostVolume, VolumeError> {
        let blame = cx.blame;
        let src = vol.config_map.clone().unwrap_or_default();
        if src.name.is_empty() {
            return Err(blame.invalid("configMap.name", "is required".into()));
        }
        let optional = src.optional.unwrap_or(false);
        let mode = cx.default_mode("configMap", src.default_mode)?;
        // The object first, as upstream: a missing one leaves no directory behind.
        let cm = cx
            .fetched
            .config_map(&src.name, optional)
            .ok_or_else(|| blame.not_read(ObjectKind::ConfigMap, &src.name))?
            .map_err(|e| blame.object(e))?;
        let keys = cm.as_deref().map(config_map_keys);
        let mut payload = Payload::new();
        collect(
            ObjectKind::ConfigMap,
            src.items.as_deref(),
            &keys.unwrap_or_default(),
            mode,
            optional,
            "configMap",
            &mut payload,
        )
        .map_err(|e| blame.files(e))?;
        downward::check_nesting(&payload)
            .map_err(|r| blame.invalid("configMap.items", r.to_string()))?;
        let own = cx.ownership()?;
        let dir = cx.volume_dir(CONFIG_MAP_PLUGIN)?;
        empty_dir::setup_dir(&dir)
            .map_err(|e| blame.failed(format!("cannot create {}: {e}", dir.display())))?;
        write_files(&dir, &payload, own, blame)?;
        Ok(HostVolume {
            path: dir,
            read_only: true,
            kind: VolumeKind::ConfigMap,
        })
    }

    fn set_up_before(&self, vol: &Volume, pod_dir: &Path) -> Option<HostVolume> {
        written_before(vol, pod_dir, CONFIG_MAP_PLUGIN, VolumeKind::ConfigMap)
    }

    fn plugin_of_spec(&self, _vol: &Volume) -> Option<String> {
        Some(VolumeKind::ConfigMap.plugin_name().to_string())
    }
}

/// secret volumes: the Secret's keys as files, on a tmpfs.
pub(super) struct SecretSource;

impl VolumeSource for SecretSource {
    fn field(&self) -> &'static str {
        "secret"
    }

    fn set_up(&self, cx: &SetUp<'_>, vol: &Volume) -> Result<HostVolume, VolumeError> {
        let blame = cx.blame;
        let src = vol.secret.clone().unwrap_or_default();
        let Some(secret_name) = src.secret_name.as_deref().filter(|n| !n.is_empty()) else {
            return Err(blame.invalid("secret.secretName", "is required".into()));
        };
        let optional = src.optional.unwrap_or(false);
        let mode = cx.default_mode("secret", src.default_mode)?;
        let secret = cx
            .fetched
            .secret(secret_name, optional)
            .ok_or_else(|| blame.not_read(ObjectKind::Secret, secret_name))?
            .map_err(|e| blame.object(e))?;
        let keys = secret.as_deref().map(secret_keys);
        let mut payload = Payload::new();
        collect(
            ObjectKind::Secret,
            src.items.as_deref(),
            &keys.unwrap_or_default(),
            mode,
            optional,
            "secret",
            &mut payload,
        )
        .map_err(|e| blame.files(e))?;
        downward::check_nesting(&payload)
            .map_err(|r| blame.invalid("secret.items", r.to_string()))?;
        let own = cx.ownership()?;
        let dir = cx.volume_dir(SECRET_PLUGIN)?;
        cx.memory(&dir)?;
        write_files(&dir, &payload, own, blame)?;
        Ok(HostVolume {
            path: dir,
            read_only: true,
            kind: VolumeKind::Secret,
        })
    }

    fn set_up_before(&self, vol: &Volume, pod_dir: &Path) -> Option<HostVolume> {
        written_before(vol, pod_dir, SECRET_PLUGIN, VolumeKind::Secret)
    }

    fn plugin_of_spec(&self, _vol: &Volume) -> Option<String> {
        Some(VolumeKind::Secret.plugin_name().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm() -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": "cfg", "namespace": "ns"},
            "data": {"app.conf": "x=1", "other": "o"},
            "binaryData": {"blob": "AAEC"}
        }))
        .unwrap()
    }

    fn items(v: serde_json::Value) -> Vec<KeyToPath> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn every_key_with_the_default_mode_without_items() {
        let cm = cm();
        let mut out = Payload::new();
        collect(
            ObjectKind::ConfigMap,
            None,
            &config_map_keys(&cm),
            0o644,
            false,
            "configMap",
            &mut out,
        )
        .unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out["app.conf"].data, b"x=1");
        assert_eq!(out["blob"].data, [0, 1, 2]);
        assert!(out.values().all(|f| f.mode == 0o644 && f.uid.is_none()));
    }

    #[test]
    fn items_choose_keys_paths_and_modes() {
        let cm = cm();
        let mut out = Payload::new();
        let it = items(json!([
            {"key": "app.conf", "path": "conf/app.conf", "mode": 0o600},
            {"key": "blob", "path": "b"}
        ]));
        collect(
            ObjectKind::ConfigMap,
            Some(&it),
            &config_map_keys(&cm),
            0o444,
            false,
            "configMap",
            &mut out,
        )
        .unwrap();
        assert_eq!(out.keys().collect::<Vec<_>>(), ["b", "conf/app.conf"]);
        assert_eq!(out["conf/app.conf"].mode, 0o600);
        assert_eq!(out["b"].mode, 0o444);
    }

    #[test]
    fn a_missing_key_fails_unless_optional() {
        let cm = cm();
        let keys = config_map_keys(&cm);
        let it = items(json!([{"key": "nope", "path": "n"}, {"key": "other", "path": "o"}]));
        let run = |kind, optional| {
            let mut out = Payload::new();
            collect(kind, Some(&it), &keys, 0o644, optional, "f", &mut out).map(|_| out)
        };
        assert_eq!(
            run(ObjectKind::ConfigMap, false).unwrap_err(),
            FilesError::MissingKey("configmap references non-existent config key: nope".into())
        );
        assert_eq!(
            run(ObjectKind::Secret, false).unwrap_err(),
            FilesError::MissingKey("references non-existent secret key: nope".into())
        );
        let out = run(ObjectKind::ConfigMap, true).unwrap();
        assert_eq!(out.keys().collect::<Vec<_>>(), ["o"]);
    }

    #[test]
    fn bad_items_name_their_field() {
        let cm = cm();
        let keys = config_map_keys(&cm);
        let bad = |v| {
            let mut out = Payload::new();
            match collect(
                ObjectKind::Secret,
                Some(&items(v)),
                &keys,
                0o644,
                false,
                "secret",
                &mut out,
            ) {
                Err(FilesError::Field(f, _)) => f,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            bad(json!([{"key": "other", "path": "../x"}])),
            "secret.items[0].path"
        );
        assert_eq!(
            bad(
                json!([{"key": "other", "path": "x"}, {"key": "other", "path": "y", "mode": 0o1000}])
            ),
            "secret.items[1].mode"
        );
    }

    #[test]
    fn secret_data_is_taken_as_bytes() {
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": "s"}, "data": {"password": "aHVudGVyMg=="}
        }))
        .unwrap();
        assert_eq!(secret_keys(&s)["password"], b"hunter2");
    }
}
