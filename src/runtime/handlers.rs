//! RuntimeClass handlers and the containerd runtimes they name.
//!
//! Upstream's kubelet hands a RuntimeClass's `handler` to the CRI, and containerd's CRI
//! plugin looks it up in its own config file: `[plugins."io.containerd.grpc.v1.cri".
//! containerd.runtimes.<handler>]` with a `runtime_type` (the shim) and `options` (for runc:
//! BinaryName, Root, ...). The empty handler is the plugin's `default_runtime_name`
//! (`runc` unless set). This agent drives containerd's native API, which has no such table,
//! so it reads the same file (`--containerd-config`, default /etc/containerd/config.toml):
//! a node's runtimes are configured once, in the place its operators already keep them, and
//! a node moved from the upstream kubelet to this agent serves the same RuntimeClasses.
//!
//! What is taken from an entry, as containerd's CRI passes it on: `runtime_type` becomes the
//! container's runtime name; for the runc shims the options become runc's own
//! `containerd.runc.v1.Options` on the container record, which the shim reads when it
//! creates each container (so `BinaryName = "/usr/bin/crun"` runs crun); for other shims
//! the CRI plugin's generic `TypeUrl`/`ConfigPath` options (gVisor's runsc reads them).
//! `SystemdCgroup` is not passed: this agent writes the pods' cgroups itself and gives runc
//! plain cgroup paths under either cgroup driver, which runc's systemd mode cannot take.
//! Keys the agent does not apply (runtime_path, base_runtime_spec, ...) are logged once at
//! start, so nobody believes them in effect. `imports` are not followed.
//!
//! A missing file is containerd's default configuration: one `runc` runtime, the runc v2
//! shim without options, which is what every pod got before RuntimeClasses were served.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use prost::Message;
use prost_types::Any;
use toml::{Table, Value};
use tracing::warn;

/// The runc v2 shim: containerd's default runtime, and every pod's before RuntimeClasses.
pub const RUNC_V2: &str = "io.containerd.runc.v2";
const RUNC_V1: &str = "io.containerd.runc.v1";
const RUNC_LEGACY: &str = "io.containerd.runtime.v1.linux";
/// containerd's CRI plugin's default `default_runtime_name`.
const DEFAULT_RUNTIME_NAME: &str = "runc";
const RUNC_OPTIONS_TYPE_URL: &str = "containerd.runc.v1.Options";
const CRI_OPTIONS_TYPE_URL: &str = "cri.runtimeoptions.v1.Options";

/// runc's shim options (containerd's api/types/runc/options/oci.proto, package
/// containerd.runc.v1). containerd-client does not compile that file, and these few
/// fields are all the shim reads, so the message is declared here with the proto's tags.
#[derive(Clone, PartialEq, Message)]
struct RuncOptions {
    #[prost(bool, tag = "1")]
    no_pivot_root: bool,
    #[prost(bool, tag = "2")]
    no_new_keyring: bool,
    #[prost(string, tag = "3")]
    shim_cgroup: String,
    #[prost(uint32, tag = "4")]
    io_uid: u32,
    #[prost(uint32, tag = "5")]
    io_gid: u32,
    #[prost(string, tag = "6")]
    binary_name: String,
    #[prost(string, tag = "7")]
    root: String,
    #[prost(string, tag = "10")]
    criu_image_path: String,
    #[prost(string, tag = "11")]
    criu_work_path: String,
}

/// The CRI plugin's options for shims other than runc (pkg/runtimeoptions/v1, package
/// cri.runtimeoptions.v1), declared here for the same reason.
#[derive(Clone, PartialEq, Message)]
struct CriRuntimeOptions {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(string, tag = "2")]
    config_path: String,
}

/// What a container record is created with: containerd's runtime name and its options;
/// and what a privileged container of the runtime gets of the host's devices.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerRuntime {
    pub name: String,
    pub options: Option<Any>,
    pub privileged_devices: PrivilegedDevices,
}

/// A runtime's `privileged_without_host_devices` and
/// `privileged_without_host_devices_all_devices_allowed`, as containerd's CRI plugin applies
/// them to privileged containers: by default every device node of the host's /dev and every
/// device allowed in the cgroup; without host devices, neither (a VM-based runtime must not
/// hand the host's devices to its guest), unless all devices are still allowed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrivilegedDevices {
    pub without_host_devices: bool,
    pub all_devices_allowed: bool,
}

impl PrivilegedDevices {
    /// Whether a privileged container gets the host's device nodes.
    pub fn host_devices(&self) -> bool {
        !self.without_host_devices
    }

    /// Whether a privileged container's device cgroup allows every device.
    pub fn allow_all(&self) -> bool {
        !self.without_host_devices || self.all_devices_allowed
    }
}

impl ContainerRuntime {
    /// The runc v2 shim with runc's defaults.
    pub fn runc_v2() -> Self {
        ContainerRuntime {
            name: RUNC_V2.into(),
            options: None,
            privileged_devices: PrivilegedDevices::default(),
        }
    }

    /// The runc binary this runtime runs, when it names one (`BinaryName`).
    pub fn binary_name(&self) -> Option<String> {
        let any = self.options.as_ref()?;
        if any.type_url != RUNC_OPTIONS_TYPE_URL {
            return None;
        }
        let o = RuncOptions::decode(any.value.as_slice()).ok()?;
        (!o.binary_name.is_empty()).then_some(o.binary_name)
    }
}

/// A handler this node has no runtime for. The text is what the upstream kubelet's event
/// carries from containerd's CRI plugin (its gRPC status included), so what users search
/// for and what upstream's e2e tests match reads the same.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for \"{handler}\" is configured"
)]
pub struct UnknownHandler {
    pub handler: String,
}

#[derive(Debug, thiserror::Error)]
pub enum HandlersError {
    #[error("containerd config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("containerd config {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("containerd config {path}: {field}: {reason}")]
    Field {
        path: PathBuf,
        field: String,
        reason: String,
    },
    /// `field` is the runtime's table, `plugins."<cri>".containerd.runtimes.<name>`.
    #[error("containerd config {path}: {field}: {source}")]
    Runtime {
        path: PathBuf,
        field: String,
        #[source]
        source: RuntimeEntryError,
    },
}

/// What is wrong with one `runtimes.<name>` entry; `key` is relative to the entry
/// (`runtime_type`, `options.BinaryName`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeEntryError {
    #[error("expected a table")]
    NotTable,
    #[error("{key}: expected {expected}, got {got}")]
    Type {
        key: String,
        expected: &'static str,
        got: &'static str,
    },
    #[error("{key}: {value} is not a valid id")]
    Id { key: String, value: i64 },
}

impl RuntimeEntryError {
    fn wrong_type(key: impl Into<String>, expected: &'static str, got: &Value) -> Self {
        RuntimeEntryError::Type {
            key: key.into(),
            expected,
            got: got.type_str(),
        }
    }
}

/// The handlers this node serves, each with its containerd runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeHandlers {
    /// `default_runtime_name`: what the empty handler means.
    default: String,
    runtimes: BTreeMap<String, ContainerRuntime>,
    /// The CRI plugin's `enable_selinux` (off by default): containerd labels containers only
    /// with it on.
    enable_selinux: bool,
    /// The CRI plugin's `disable_apparmor`: containerd applies no profile with it on.
    disable_apparmor: bool,
}

impl Default for RuntimeHandlers {
    /// containerd's defaults: `runc`, the runc v2 shim, the default.
    fn default() -> Self {
        RuntimeHandlers {
            default: DEFAULT_RUNTIME_NAME.into(),
            runtimes: BTreeMap::from([(DEFAULT_RUNTIME_NAME.into(), ContainerRuntime::runc_v2())]),
            enable_selinux: false,
            disable_apparmor: false,
        }
    }
}

impl RuntimeHandlers {
    /// Reads containerd's config file; a missing file is containerd's defaults.
    pub fn load(path: &Path) -> Result<Self, HandlersError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(HandlersError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// The runtimes of a config file's text (`path` names it in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Self, HandlersError> {
        let field_err = |field: String, reason: String| HandlersError::Field {
            path: path.to_path_buf(),
            field,
            reason,
        };
        let doc: Table = text.parse().map_err(|e| HandlersError::Parse {
            path: path.to_path_buf(),
            source: Box::new(e),
        })?;
        let version = match doc.get("version") {
            None => 1,
            Some(Value::Integer(v)) => *v,
            Some(other) => {
                return Err(field_err(
                    "version".into(),
                    format!("expected an integer, got {}", other.type_str()),
                ))
            }
        };
        // Where the CRI plugin's `containerd` table lives in each config version.
        let plugin = match version {
            1 => "cri",
            2 => "io.containerd.grpc.v1.cri",
            3 => "io.containerd.cri.v1.runtime",
            v => {
                return Err(field_err(
                    "version".into(),
                    format!("unknown config version {v}"),
                ))
            }
        };
        if doc.contains_key("imports") {
            warn!(path = %path.display(), "containerd config: imports are not read for runtime handlers; runtimes defined in imported files are not served");
        }
        let mut handlers = Self::default();
        let cri = doc.get("plugins").and_then(|p| p.get(plugin));
        for (key, slot) in [
            ("enable_selinux", &mut handlers.enable_selinux),
            ("disable_apparmor", &mut handlers.disable_apparmor),
        ] {
            match cri.and_then(|c| c.get(key)) {
                None => {}
                Some(Value::Boolean(b)) => *slot = *b,
                Some(other) => {
                    return Err(field_err(
                        format!("plugins.\"{plugin}\".{key}"),
                        format!("expected a boolean, got {}", other.type_str()),
                    ))
                }
            }
        }
        let section = format!("plugins.\"{plugin}\".containerd");
        let Some(containerd) = cri.and_then(|p| p.get("containerd")) else {
            return Ok(handlers);
        };
        let containerd = containerd
            .as_table()
            .ok_or_else(|| field_err(section.clone(), "expected a table".into()))?;
        if let Some(name) = containerd.get("default_runtime_name") {
            handlers.default = name
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    field_err(
                        format!("{section}.default_runtime_name"),
                        "expected a runtime's name".into(),
                    )
                })?
                .to_string();
        }
        if let Some(runtimes) = containerd.get("runtimes") {
            let runtimes = runtimes.as_table().ok_or_else(|| {
                field_err(format!("{section}.runtimes"), "expected a table".into())
            })?;
            for (name, entry) in runtimes {
                let at = format!("{section}.runtimes.{name}");
                let runtime = runtime_of(&at, entry).map_err(|source| HandlersError::Runtime {
                    path: path.to_path_buf(),
                    field: at,
                    source,
                })?;
                handlers.runtimes.insert(name.clone(), runtime);
            }
        }
        // containerd refuses to start with a default that names no runtime.
        if !handlers.runtimes.contains_key(&handlers.default) {
            return Err(field_err(
                format!("{section}.default_runtime_name"),
                format!(
                    "no runtime {:?} is configured in {section}.runtimes",
                    handlers.default
                ),
            ));
        }
        Ok(handlers)
    }

    /// The runtime for a handler (`""`: the default one), as containerd's CRI plugin finds it.
    pub fn resolve(&self, handler: &str) -> Result<&ContainerRuntime, UnknownHandler> {
        let name = if handler.is_empty() {
            &self.default
        } else {
            handler
        };
        self.runtimes.get(name).ok_or_else(|| UnknownHandler {
            handler: handler.to_string(),
        })
    }

    /// Whether containerd's CRI plugin would label containers (`enable_selinux`).
    pub fn selinux_enabled(&self) -> bool {
        self.enable_selinux
    }

    /// Whether containerd's CRI plugin applies no AppArmor profile (`disable_apparmor`).
    pub fn apparmor_disabled(&self) -> bool {
        self.disable_apparmor
    }

    /// The handlers as a CRI runtime reports them (containerd 2's Status): the default as
    /// `""`, then every configured runtime by name.
    pub fn names(&self) -> Vec<String> {
        std::iter::once(String::new())
            .chain(self.runtimes.keys().cloned())
            .collect()
    }
}

/// Keys of a runtime entry the agent does not apply (containerd's CRI plugin reads them).
const NOT_APPLIED: &[&str] = &[
    "runtime_path",
    "runtime_engine",
    "runtime_root",
    "pod_annotations",
    "container_annotations",
    "base_runtime_spec",
    "cni_conf_dir",
    "cni_max_conf_num",
    "snapshotter",
    "sandbox_mode",
    "sandboxer",
    "io_type",
];

/// One `runtimes.<name>` entry.
fn runtime_of(at: &str, entry: &Value) -> Result<ContainerRuntime, RuntimeEntryError> {
    let entry = entry.as_table().ok_or(RuntimeEntryError::NotTable)?;
    let runtime_type = match entry.get("runtime_type") {
        None => RUNC_V2,
        Some(Value::String(t)) if t.is_empty() => RUNC_V2,
        Some(Value::String(t)) => t.as_str(),
        Some(other) => {
            return Err(RuntimeEntryError::wrong_type(
                "runtime_type",
                "a string",
                other,
            ))
        }
    };
    for key in entry.keys().filter(|k| NOT_APPLIED.contains(&k.as_str())) {
        warn!(runtime = %at, key = %key, "containerd config: this runtime setting is not applied by kubelet-rs");
    }
    let options = match entry.get("options") {
        None => None,
        Some(Value::Table(o)) if o.is_empty() => None,
        Some(Value::Table(o)) => options_of(at, runtime_type, o)?,
        Some(other) => return Err(RuntimeEntryError::wrong_type("options", "a table", other)),
    };
    let flag = |key: &str| -> Result<bool, RuntimeEntryError> {
        match entry.get(key) {
            None => Ok(false),
            Some(Value::Boolean(b)) => Ok(*b),
            Some(other) => Err(RuntimeEntryError::wrong_type(key, "a boolean", other)),
        }
    };
    Ok(ContainerRuntime {
        name: runtime_type.to_string(),
        options,
        privileged_devices: PrivilegedDevices {
            without_host_devices: flag("privileged_without_host_devices")?,
            all_devices_allowed: flag("privileged_without_host_devices_all_devices_allowed")?,
        },
    })
}

/// A runtime's `options` in the message its shim reads, as containerd's CRI plugin
/// builds it (`None` when nothing is set, as the runtime had before).
fn options_of(at: &str, runtime_type: &str, o: &Table) -> Result<Option<Any>, RuntimeEntryError> {
    let wrong = |key: &str, expected, got| {
        RuntimeEntryError::wrong_type(format!("options.{key}"), expected, got)
    };
    let string = |key: &str| -> Result<String, RuntimeEntryError> {
        match o.get(key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(wrong(key, "a string", other)),
        }
    };
    let boolean = |key: &str| -> Result<bool, RuntimeEntryError> {
        match o.get(key) {
            None => Ok(false),
            Some(Value::Boolean(b)) => Ok(*b),
            Some(other) => Err(wrong(key, "a boolean", other)),
        }
    };
    let id = |key: &str| -> Result<u32, RuntimeEntryError> {
        match o.get(key) {
            None => Ok(0),
            Some(Value::Integer(i)) => u32::try_from(*i).map_err(|_| RuntimeEntryError::Id {
                key: format!("options.{key}"),
                value: *i,
            }),
            Some(other) => Err(wrong(key, "an integer", other)),
        }
    };
    if matches!(runtime_type, RUNC_V2 | RUNC_V1 | RUNC_LEGACY) {
        const KNOWN: &[&str] = &[
            "NoPivotRoot",
            "NoNewKeyring",
            "ShimCgroup",
            "IoUid",
            "IoGid",
            "BinaryName",
            "Root",
            "CriuImagePath",
            "CriuWorkPath",
        ];
        for key in o.keys().filter(|k| !KNOWN.contains(&k.as_str())) {
            if key == "SystemdCgroup" && boolean(key)? {
                warn!(runtime = %at, "containerd config: SystemdCgroup is not applied: kubelet-rs writes the pods' cgroups itself and gives runc plain cgroup paths");
            } else if key != "SystemdCgroup" {
                warn!(runtime = %at, key = %key, "containerd config: this runc option is not applied by kubelet-rs");
            }
        }
        let opts = RuncOptions {
            no_pivot_root: boolean("NoPivotRoot")?,
            no_new_keyring: boolean("NoNewKeyring")?,
            shim_cgroup: string("ShimCgroup")?,
            io_uid: id("IoUid")?,
            io_gid: id("IoGid")?,
            binary_name: string("BinaryName")?,
            root: string("Root")?,
            criu_image_path: string("CriuImagePath")?,
            criu_work_path: string("CriuWorkPath")?,
        };
        if opts == RuncOptions::default() {
            return Ok(None);
        }
        return Ok(Some(Any {
            type_url: RUNC_OPTIONS_TYPE_URL.into(),
            value: opts.encode_to_vec(),
        }));
    }
    for key in o
        .keys()
        .filter(|k| !["TypeUrl", "ConfigPath"].contains(&k.as_str()))
    {
        warn!(runtime = %at, key = %key, "containerd config: this runtime option is not applied by kubelet-rs");
    }
    let opts = CriRuntimeOptions {
        type_url: string("TypeUrl")?,
        config_path: string("ConfigPath")?,
    };
    if opts == CriRuntimeOptions::default() {
        return Ok(None);
    }
    Ok(Some(Any {
        type_url: CRI_OPTIONS_TYPE_URL.into(),
        value: opts.encode_to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> RuntimeHandlers {
        RuntimeHandlers::parse(Path::new("/etc/containerd/config.toml"), text).unwrap()
    }

    fn runc_options(r: &ContainerRuntime) -> RuncOptions {
        let any = r.options.as_ref().expect("runc options");
        assert_eq!(any.type_url, "containerd.runc.v1.Options");
        RuncOptions::decode(any.value.as_slice()).unwrap()
    }

    #[test]
    fn without_a_config_the_default_and_runc_are_the_runc_v2_shim_without_options() {
        let missing = RuntimeHandlers::load(Path::new("/nonexistent/containerd.toml")).unwrap();
        assert_eq!(missing, RuntimeHandlers::default());
        // This machine's config: a CRI section with no runtimes.
        let h = parse(
            "version = 2\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    restrict_oom_score_adj = true\n",
        );
        for handler in ["", "runc"] {
            assert_eq!(h.resolve(handler), Ok(&ContainerRuntime::runc_v2()));
        }
        assert_eq!(h.names(), vec!["".to_string(), "runc".into()]);
    }

    #[test]
    fn handlers_map_to_their_runtime_type_and_runc_options() {
        let h = parse(
            r#"
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]
    BinaryName = "/usr/bin/crun"
    Root = "/run/crun-k8s"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
  runtime_type = "io.containerd.runsc.v1"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
    TypeUrl = "io.containerd.runsc.v1.options"
    ConfigPath = "/etc/containerd/runsc.toml"
"#,
        );
        // runc keeps no options: SystemdCgroup alone is not passed (plain cgroup paths).
        assert_eq!(h.resolve(""), Ok(&ContainerRuntime::runc_v2()));
        let crun = h.resolve("crun").unwrap();
        assert_eq!(crun.name, "io.containerd.runc.v2");
        let o = runc_options(crun);
        assert_eq!(o.binary_name, "/usr/bin/crun");
        assert_eq!(o.root, "/run/crun-k8s");
        assert_eq!(crun.binary_name().as_deref(), Some("/usr/bin/crun"));
        let runsc = h.resolve("runsc").unwrap();
        assert_eq!(runsc.name, "io.containerd.runsc.v1");
        let any = runsc.options.as_ref().unwrap();
        assert_eq!(any.type_url, "cri.runtimeoptions.v1.Options");
        let o = CriRuntimeOptions::decode(any.value.as_slice()).unwrap();
        assert_eq!(o.type_url, "io.containerd.runsc.v1.options");
        assert_eq!(o.config_path, "/etc/containerd/runsc.toml");
        assert_eq!(
            h.names(),
            vec!["".to_string(), "crun".into(), "runc".into(), "runsc".into()]
        );
    }

    #[test]
    fn the_default_handler_follows_default_runtime_name_in_every_config_version() {
        for (version, plugin) in [
            ("", "cri"),
            ("version = 2\n", "\"io.containerd.grpc.v1.cri\""),
            ("version = 3\n", "\"io.containerd.cri.v1.runtime\""),
        ] {
            let h = parse(&format!(
                "{version}[plugins.{plugin}.containerd]\n  default_runtime_name = \"crun\"\n\
                 [plugins.{plugin}.containerd.runtimes.crun.options]\n  BinaryName = \"crun\"\n"
            ));
            assert_eq!(
                h.resolve("").unwrap().binary_name().as_deref(),
                Some("crun"),
                "{version}"
            );
            assert_eq!(
                h.resolve("runc"),
                Ok(&ContainerRuntime::runc_v2()),
                "{version}"
            );
        }
    }

    #[test]
    fn an_unknown_handler_gets_containerds_words() {
        let h = RuntimeHandlers::default();
        let err = h.resolve("kata").unwrap_err();
        assert_eq!(
            err.to_string(),
            "rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for \"kata\" is configured"
        );
    }

    #[test]
    fn bad_configs_are_refused_naming_the_file_and_field() {
        let path = Path::new("/etc/containerd/config.toml");
        let cases = [
            ("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n default_runtime_name = \"kata\"\n",
             "containerd config /etc/containerd/config.toml: plugins.\"io.containerd.grpc.v1.cri\".containerd.default_runtime_name: no runtime \"kata\" is configured in plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes"),
            ("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun.options]\n BinaryName = 7\n",
             "containerd config /etc/containerd/config.toml: plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.crun: options.BinaryName: expected a string, got integer"),
            ("version = 9\n", "containerd config /etc/containerd/config.toml: version: unknown config version 9"),
            ("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata]\n privileged_without_host_devices = \"yes\"\n",
             "containerd config /etc/containerd/config.toml: plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata: privileged_without_host_devices: expected a boolean, got string"),
        ];
        for (text, want) in cases {
            let err = RuntimeHandlers::parse(path, text).unwrap_err();
            assert_eq!(err.to_string(), want);
        }
        let err = RuntimeHandlers::parse(path, "version = = 2").unwrap_err();
        assert!(matches!(err, HandlersError::Parse { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with("containerd config /etc/containerd/config.toml: "),
            "{err}"
        );
    }

    /// The two device settings are read per runtime, as containerd's CRI plugin reads them
    /// (before, they were only warned about, and privileged containers got no host devices
    /// under any runtime).
    #[test]
    fn privileged_device_settings_are_read_per_runtime() {
        let text = "version = 2\n\
            [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n\
            \x20 runtime_type = \"io.containerd.runc.v2\"\n\
            [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata]\n\
            \x20 runtime_type = \"io.containerd.kata.v2\"\n\
            \x20 privileged_without_host_devices = true\n\
            [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gvisor]\n\
            \x20 runtime_type = \"io.containerd.runsc.v1\"\n\
            \x20 privileged_without_host_devices = true\n\
            \x20 privileged_without_host_devices_all_devices_allowed = true\n";
        let h = RuntimeHandlers::parse(Path::new("c.toml"), text).unwrap();
        let devices = |name: &str| h.resolve(name).unwrap().privileged_devices;
        let default = devices("");
        assert!(default.host_devices() && default.allow_all());
        assert_eq!(default, devices("runc"));
        let kata = devices("kata");
        assert!(!kata.host_devices() && !kata.allow_all());
        let gvisor = devices("gvisor");
        assert!(!gvisor.host_devices() && gvisor.allow_all());
    }

    /// The CRI plugin's SELinux and AppArmor switches, containerd's defaults when unset.
    #[test]
    fn the_cri_plugins_selinux_and_apparmor_switches_are_read() {
        let none = RuntimeHandlers::parse(Path::new("c.toml"), "version = 2\n").unwrap();
        assert!(!none.selinux_enabled() && !none.apparmor_disabled());
        let both = RuntimeHandlers::parse(
            Path::new("c.toml"),
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n enable_selinux = true\n disable_apparmor = true\n",
        )
        .unwrap();
        assert!(both.selinux_enabled() && both.apparmor_disabled());
        let v3 = RuntimeHandlers::parse(
            Path::new("c.toml"),
            "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\"]\n enable_selinux = true\n",
        )
        .unwrap();
        assert!(v3.selinux_enabled());
        let bad = RuntimeHandlers::parse(
            Path::new("c.toml"),
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n enable_selinux = 1\n",
        )
        .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "containerd config c.toml: plugins.\"io.containerd.grpc.v1.cri\".enable_selinux: expected a boolean, got integer"
        );
    }
}
