//! `--config-dir`: drop-in KubeletConfiguration files merged over the `--config` file, as
//! upstream's mergeKubeletConfigurations does: every file whose name ends in `.conf`, found by
//! walking the folder the way Go's filepath.WalkDir does (entries in lexical order, subfolders
//! entered where they sort, symbolic links not followed into folders), each applied as a JSON
//! merge patch (RFC 7386) over what came before. Later files win; flags win over all.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::error::ConfigError;

/// The suffix upstream selects drop-ins by (filepath.Ext(name) == ".conf").
const DROPIN_SUFFIX: &str = ".conf";

/// The drop-in files under `dir`, in the order upstream applies them.
pub(crate) fn dropin_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let mut out = Vec::new();
    walk(dir, &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
    let read_error = |source| ConfigError::ReadConfigDir {
        path: dir.to_path_buf(),
        source,
    };
    let mut entries = std::fs::read_dir(dir)
        .map_err(read_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_error)?;
    // WalkDir sorts by name, byte-wise.
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        // The entry's own type: a symbolic link is not a folder, as with WalkDir.
        let file_type = entry.file_type().map_err(read_error)?;
        if file_type.is_dir() {
            walk(&path, out)?;
        } else if entry.file_name().to_string_lossy().ends_with(DROPIN_SUFFIX) {
            out.push(path);
        }
    }
    Ok(())
}

/// RFC 7386 JSON merge patch, what upstream's jsonpatch.MergePatch applies: objects merge key
/// by key, a null removes the key, anything else replaces.
pub(crate) fn merge_patch(target: &mut Map<String, Value>, patch: Map<String, Value>) {
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.remove(&key);
            }
            Value::Object(patch_obj) => {
                let entry = target
                    .entry(key)
                    .or_insert_with(|| Value::Object(Map::new()));
                if !entry.is_object() {
                    *entry = Value::Object(Map::new());
                }
                if let Value::Object(target_obj) = entry {
                    merge_patch(target_obj, patch_obj);
                }
            }
            other => {
                target.insert(key, other);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("test input is an object"),
        }
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut target = obj(json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1, 2], "f": "x"}));
        merge_patch(
            &mut target,
            obj(json!({"a": 5, "b": {"c": null, "g": 4}, "e": [3], "f": null, "h": {"i": 1}})),
        );
        assert_eq!(
            Value::Object(target),
            json!({"a": 5, "b": {"d": 3, "g": 4}, "e": [3], "h": {"i": 1}})
        );
    }

    #[test]
    fn walks_conf_files_in_lexical_order_into_subfolders() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("20-sub")).unwrap();
        for name in [
            "30-last.conf",
            "10-first.conf",
            "20-sub/05-inner.conf",
            "15-skip.yaml",
            "25-skip.conf.bak",
        ] {
            std::fs::write(root.join(name), "").unwrap();
        }
        let found: Vec<String> = dropin_files(root)
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect();
        assert_eq!(
            found,
            vec!["10-first.conf", "20-sub/05-inner.conf", "30-last.conf"]
        );
    }

    #[test]
    fn a_missing_folder_is_an_error_naming_it() {
        let err = dropin_files(Path::new("/nonexistent/kubelet.conf.d")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("config dir /nonexistent/kubelet.conf.d: cannot read it"),
            "{err}"
        );
    }
}
