//! Network configs: the first file of the conf dir (as go-cni with `max_conf_num=1` picks
//! it), the built-in loopback network, and the per-plugin config each exec gets on stdin.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::network::NetworkError;

/// What is wrong in a CNI config file (the file is named by [`NetworkError::InvalidConfig`]).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("not a JSON object")]
    NotObject,
    #[error("no \"{0}\"")]
    Missing(&'static str),
    #[error("\"{0}\" is empty")]
    Empty(&'static str),
    #[error("\"{0}\" is not a string")]
    NotString(&'static str),
    #[error("no \"plugins\" list")]
    NoPlugins,
    #[error("\"plugins\" is not a list")]
    PluginsNotList,
    #[error("\"plugins\" is empty")]
    PluginsEmpty,
    #[error("plugins[{index}] is not an object")]
    PluginNotObject { index: usize },
    #[error("plugins[{index}]: {source}")]
    Plugin {
        index: usize,
        #[source]
        source: Box<ConfigError>,
    },
    #[error("plugin type {0:?} is not a file name")]
    PluginType(String),
    #[error("\"capabilities\" is not an object")]
    CapabilitiesNotObject,
    #[error("holds a plugin list, which only a .conflist file may")]
    PluginList,
}

/// File kinds libcni reads from a conf dir.
const CONF_EXTENSIONS: [&str; 3] = ["conf", "conflist", "json"];

/// The loopback network containerd attaches first (go-cni's `WithLoNetwork`): runc does not
/// bring `lo` up in a namespace it is handed by path.
const LOOPBACK_CONFIG: &str =
    r#"{"cniVersion":"0.3.1","name":"cni-loopback","plugins":[{"type":"loopback"}]}"#;

/// A network as a list of plugins run in order on ADD and in reverse on DEL.
#[derive(Debug, Clone)]
pub(crate) struct NetworkList {
    pub name: String,
    /// "" when the file has none; plugins then read it as 0.1.0, as with libcni.
    pub cni_version: String,
    pub plugins: Vec<PluginConfig>,
    /// The file it came from, for error messages ("built-in" for loopback).
    pub source: PathBuf,
}

#[derive(Debug, Clone)]
pub(crate) struct PluginConfig {
    pub plugin_type: String,
    /// Capabilities the plugin declares as `true`; only these get `runtimeConfig` entries.
    pub capabilities: BTreeSet<String>,
    pub raw: Map<String, Value>,
}

impl NetworkList {
    pub fn loopback() -> Self {
        Self::from_conflist_bytes(LOOPBACK_CONFIG.as_bytes(), Path::new("built-in loopback"))
            .expect("the built-in loopback config parses")
    }

    /// The first config file of `dir` by file name. An unreadable or invalid first file is an
    /// error naming it rather than a silent fall-through to the next one, as in containerd.
    pub fn load_first(dir: &Path) -> Result<Self, NetworkError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(NetworkError::NoConfig {
                    dir: dir.to_path_buf(),
                })
            }
            Err(source) => {
                return Err(NetworkError::ConfigIo {
                    path: dir.to_path_buf(),
                    source,
                })
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .and_then(|x| x.to_str())
                    .is_some_and(|x| CONF_EXTENSIONS.contains(&x))
                    // metadata() follows symlinks, which config managers like to use.
                    && std::fs::metadata(p).is_ok_and(|m| m.is_file())
            })
            .collect();
        files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
        let Some(first) = files.into_iter().next() else {
            return Err(NetworkError::NoConfig {
                dir: dir.to_path_buf(),
            });
        };
        let bytes = std::fs::read(&first).map_err(|source| NetworkError::ConfigIo {
            path: first.clone(),
            source,
        })?;
        if first.extension().is_some_and(|x| x == "conflist") {
            Self::from_conflist_bytes(&bytes, &first)
        } else {
            Self::from_single_conf_bytes(&bytes, &first)
        }
    }

    pub fn from_conflist_bytes(bytes: &[u8], file: &Path) -> Result<Self, NetworkError> {
        let invalid = |source: ConfigError| NetworkError::InvalidConfig {
            file: file.to_path_buf(),
            source: Box::new(source),
        };
        let top = parse_object(bytes).map_err(invalid)?;
        let name = required_string(&top, "name").map_err(invalid)?;
        let cni_version = optional_string(&top, "cniVersion").map_err(invalid)?;
        let plugins = match top.get("plugins") {
            Some(Value::Array(items)) if !items.is_empty() => items,
            Some(Value::Array(_)) => return Err(invalid(ConfigError::PluginsEmpty)),
            Some(_) => return Err(invalid(ConfigError::PluginsNotList)),
            None => return Err(invalid(ConfigError::NoPlugins)),
        };
        let plugins = plugins
            .iter()
            .enumerate()
            .map(|(i, p)| match p {
                Value::Object(raw) => PluginConfig::new(raw.clone()).map_err(|source| {
                    invalid(ConfigError::Plugin {
                        index: i,
                        source: Box::new(source),
                    })
                }),
                _ => Err(invalid(ConfigError::PluginNotObject { index: i })),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            name,
            cni_version,
            plugins,
            source: file.to_path_buf(),
        })
    }

    /// A `.conf`/`.json` holds one plugin; it becomes a one-plugin list with its own name and
    /// version, its config passed on unchanged.
    pub fn from_single_conf_bytes(bytes: &[u8], file: &Path) -> Result<Self, NetworkError> {
        let invalid = |source: ConfigError| NetworkError::InvalidConfig {
            file: file.to_path_buf(),
            source: Box::new(source),
        };
        let raw = parse_object(bytes).map_err(invalid)?;
        if !raw.contains_key("type") && raw.contains_key("plugins") {
            return Err(invalid(ConfigError::PluginList));
        }
        let name = required_string(&raw, "name").map_err(invalid)?;
        let cni_version = optional_string(&raw, "cniVersion").map_err(invalid)?;
        let plugin = PluginConfig::new(raw).map_err(invalid)?;
        Ok(Self {
            name,
            cni_version,
            plugins: vec![plugin],
            source: file.to_path_buf(),
        })
    }

    /// The list as conflist JSON, as kept in the result cache so DEL runs what ADD ran.
    pub fn to_conflist(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "cniVersion": self.cni_version,
            "plugins": self.plugins.iter().map(|p| Value::Object(p.raw.clone())).collect::<Vec<_>>(),
        })
    }

    /// CNI 0.4.0 added prevResult on DEL; older plugins must not be sent one.
    pub fn del_takes_prev_result(&self) -> bool {
        version_at_least(&self.cni_version, (0, 4, 0))
    }
}

impl PluginConfig {
    fn new(raw: Map<String, Value>) -> Result<Self, ConfigError> {
        let plugin_type = required_string(&raw, "type")?;
        // The type is joined onto a bin dir: it must stay a plain file name.
        if plugin_type.contains('/') || plugin_type == "." || plugin_type == ".." {
            return Err(ConfigError::PluginType(plugin_type));
        }
        let capabilities = match raw.get("capabilities") {
            None | Some(Value::Null) => BTreeSet::new(),
            Some(Value::Object(caps)) => caps
                .iter()
                .filter(|(_, on)| on.as_bool() == Some(true))
                .map(|(k, _)| k.clone())
                .collect(),
            Some(_) => return Err(ConfigError::CapabilitiesNotObject),
        };
        Ok(Self {
            plugin_type,
            capabilities,
            raw,
        })
    }

    /// The JSON the plugin gets on stdin: its own config plus the list's `name` and
    /// `cniVersion`, the previous plugin's result, and `runtimeConfig` holding only the
    /// capability args it declared (replacing any `runtimeConfig` in the file, as libcni does).
    pub fn stdin_config(
        &self,
        list: &NetworkList,
        prev_result: Option<&Value>,
        capability_args: &Map<String, Value>,
    ) -> Value {
        let mut conf = self.raw.clone();
        conf.insert("name".into(), Value::String(list.name.clone()));
        conf.insert("cniVersion".into(), Value::String(list.cni_version.clone()));
        if let Some(prev) = prev_result {
            conf.insert("prevResult".into(), prev.clone());
        }
        let runtime: Map<String, Value> = capability_args
            .iter()
            .filter(|(cap, _)| self.capabilities.contains(*cap))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !runtime.is_empty() {
            conf.insert("runtimeConfig".into(), Value::Object(runtime));
        }
        Value::Object(conf)
    }
}

fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ConfigError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ConfigError::NotObject),
        Err(e) => Err(ConfigError::Json(e)),
    }
}

fn required_string(map: &Map<String, Value>, key: &'static str) -> Result<String, ConfigError> {
    match map.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(ConfigError::Empty(key)),
        Some(_) => Err(ConfigError::NotString(key)),
        None => Err(ConfigError::Missing(key)),
    }
}

fn optional_string(map: &Map<String, Value>, key: &'static str) -> Result<String, ConfigError> {
    match map.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => Ok(String::new()),
        Some(_) => Err(ConfigError::NotString(key)),
    }
}

/// Compares a "major.minor.patch" version; an empty or unparsable one counts as 0.1.0,
/// the version CNI assumes when a config states none.
pub(crate) fn version_at_least(version: &str, min: (u32, u32, u32)) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>());
    let parsed = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b)), Some(Ok(c)), None) => (a, b, c),
        _ => (0, 1, 0),
    };
    parsed >= min
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(dir: &Path, name: &str, body: &str) {
        std::fs::write(dir.join(name), body).unwrap();
    }

    #[test]
    fn missing_or_empty_dir_is_no_config() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        assert!(matches!(
            NetworkList::load_first(&missing),
            Err(NetworkError::NoConfig { dir }) if dir == missing
        ));
        write(dir.path(), "README", "not a config");
        write(dir.path(), "10-x.conf.bak", "{}");
        std::fs::create_dir(dir.path().join("sub.conf")).unwrap();
        let err = NetworkList::load_first(dir.path()).unwrap_err();
        assert!(matches!(err, NetworkError::NoConfig { .. }), "{err}");
        assert!(err.to_string().contains("network not ready"), "{err}");
    }

    #[test]
    fn first_file_by_name_wins_and_single_confs_are_wrapped() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "20-b.conflist",
            r#"{"cniVersion":"1.0.0","name":"b","plugins":[{"type":"bridge"}]}"#,
        );
        write(
            dir.path(),
            "10-a.conf",
            r#"{"cniVersion":"0.4.0","name":"a","type":"bridge","bridge":"br9","capabilities":{"portMappings":true,"bandwidth":false}}"#,
        );
        let list = NetworkList::load_first(dir.path()).unwrap();
        assert_eq!(list.name, "a");
        assert_eq!(list.cni_version, "0.4.0");
        assert_eq!(list.plugins.len(), 1);
        assert_eq!(list.plugins[0].plugin_type, "bridge");
        assert_eq!(list.plugins[0].raw["bridge"], "br9");
        assert_eq!(
            list.plugins[0].capabilities,
            BTreeSet::from(["portMappings".to_string()])
        );
        assert!(list.source.ends_with("10-a.conf"));
    }

    #[test]
    fn invalid_first_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "00-broken.json", "{not json");
        write(
            dir.path(),
            "10-ok.conflist",
            r#"{"cniVersion":"1.0.0","name":"ok","plugins":[{"type":"bridge"}]}"#,
        );
        let err = NetworkList::load_first(dir.path()).unwrap_err();
        assert!(err.to_string().contains("00-broken.json"), "{err}");

        let cases = [
            (
                "a.conf",
                r#"{"name":"n","plugins":[{"type":"x"}]}"#,
                "only a .conflist",
            ),
            ("a.conf", r#"{"name":"n"}"#, "no \"type\""),
            ("a.conflist", r#"{"name":"n","plugins":[]}"#, "empty"),
            ("a.conflist", r#"{"plugins":[{"type":"x"}]}"#, "no \"name\""),
            (
                "a.conflist",
                r#"{"name":"n","plugins":[{"type":"../x"}]}"#,
                "plugins[0]",
            ),
        ];
        for (file, body, expected) in cases {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), file, body);
            let err = NetworkList::load_first(dir.path()).unwrap_err();
            assert!(
                err.to_string().contains(expected) && err.to_string().contains(file),
                "{body}: {err}"
            );
        }
    }

    #[test]
    fn stdin_config_injects_name_version_prev_result_and_declared_capabilities_only() {
        let list = NetworkList::from_conflist_bytes(
            br#"{"cniVersion":"1.0.0","name":"net","plugins":[
                {"type":"bridge","name":"ignored","runtimeConfig":{"stale":1}},
                {"type":"portmap","capabilities":{"portMappings":true,"bandwidth":false}}]}"#,
            Path::new("x.conflist"),
        )
        .unwrap();
        let mut caps = Map::new();
        caps.insert("portMappings".into(), json!([{"hostPort": 80}]));
        caps.insert("bandwidth".into(), json!({"ingressRate": 1}));
        let prev = json!({"cniVersion": "1.0.0", "ips": []});

        let first = list.plugins[0].stdin_config(&list, None, &caps);
        assert_eq!(first["name"], "net");
        assert_eq!(first["cniVersion"], "1.0.0");
        assert!(first.get("prevResult").is_none());
        // No capabilities declared: the file's runtimeConfig is left as it is.
        assert_eq!(first["runtimeConfig"], json!({"stale": 1}));

        let second = list.plugins[1].stdin_config(&list, Some(&prev), &caps);
        assert_eq!(second["prevResult"], prev);
        assert_eq!(
            second["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 80}]})
        );
    }

    #[test]
    fn prev_result_on_del_only_from_0_4_0() {
        assert!(!version_at_least("0.3.1", (0, 4, 0)));
        assert!(version_at_least("0.4.0", (0, 4, 0)));
        assert!(version_at_least("1.0.0", (0, 4, 0)));
        assert!(!version_at_least("", (0, 4, 0)));
        assert!(!version_at_least("garbage", (0, 4, 0)));
        assert!(!NetworkList::loopback().del_takes_prev_result());
    }
}
