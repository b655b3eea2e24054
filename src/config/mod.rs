//! Flags with the kubelet's names, the KubeletConfiguration file, defaults and validation.
//!
//! Precedence is upstream's: built-in defaults, then the `--config` file, then flags given on
//! the command line (a flag always wins over the file).

mod codec;
mod configz;
#[macro_use]
mod declare;
mod dropin;
mod duration;
mod error;
mod features;
mod file;
mod flags;
pub mod node;
mod schema;
mod settings;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use configz::configz_json;
pub use duration::{format_duration, parse_duration, DurationError};
pub use error::ConfigError;
pub use features::{FeatureGates, Gate};

pub use node::NodeSettingError;
pub use settings::Config;

use codec::ValueError;
use file::FileSettings;
use flags::FlagValue;

/// memorySwap.swapBehavior (upstream's kubelet types.SwapBehavior).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SwapBehavior {
    /// No container swaps (upstream's default, also for "").
    #[default]
    NoSwap,
    /// Burstable pods' containers may swap in proportion to their memory request.
    LimitedSwap,
}

impl SwapBehavior {
    pub(crate) fn parse(text: &str) -> Option<SwapBehavior> {
        match text {
            "" | "NoSwap" => Some(SwapBehavior::NoSwap),
            "LimitedSwap" => Some(SwapBehavior::LimitedSwap),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SwapBehavior::NoSwap => "NoSwap",
            SwapBehavior::LimitedSwap => "LimitedSwap",
        }
    }
}

/// How requests to the main server are authorized (authorization.mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationMode {
    AlwaysAllow,
    /// SubjectAccessReview against the API server.
    Webhook,
}

impl AuthorizationMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthorizationMode::AlwaysAllow => "AlwaysAllow",
            AuthorizationMode::Webhook => "Webhook",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<AuthorizationMode, ValueError> {
        match text {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "Webhook" => Ok(AuthorizationMode::Webhook),
            _ => Err(ValueError::Expected("expected AlwaysAllow or Webhook")),
        }
    }
}

/// tlsMinVersion values the kubelet accepts (Go's crypto/tls names).
pub const TLS_VERSIONS: &[&str] = &[
    "VersionTLS10",
    "VersionTLS11",
    "VersionTLS12",
    "VersionTLS13",
];

/// tlsCipherSuites names (Go's crypto/tls names) that the TLS library here implements.
/// Go's CBC, RC4 and 3DES suites are refused: rustls has none of them.
pub const TLS_CIPHER_SUITES: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

pub const DEFAULT_ROOT_DIR: &str = "/var/lib/kubelet-rs";
pub const DEFAULT_CONTAINER_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
pub const DEFAULT_POD_INFRA_CONTAINER_IMAGE: &str = "registry.k8s.io/pause:3.10";
pub const DEFAULT_CONTAINERD_NAMESPACE: &str = "kubelet-rs";
/// The kubelet's legacy command-line default for --read-only-port (ports.KubeletReadOnlyPort).
pub const LEGACY_READ_ONLY_PORT: u16 = 10255;
/// Upstream's ImageGCPeriod.
pub const DEFAULT_IMAGE_GC_PERIOD: Duration = Duration::from_secs(300);
pub const DEFAULT_IMAGE_FS_PATH: &str = "/var/lib/containerd";

impl Config {
    /// The start-up warnings about what was given but is not acted on, one line each
    /// (main logs them once logging is set up): upstream flags and config fields accepted
    /// but not implemented yet (one line for both), and unknown config fields dropped.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut parts = Vec::new();
        if !self.unimplemented_flags.is_empty() {
            parts.push(format!("flags {}", self.unimplemented_flags.join(", ")));
        }
        if !self.unimplemented_config_fields.is_empty() {
            parts.push(format!(
                "config fields {}",
                self.unimplemented_config_fields.join(", ")
            ));
        }
        let gates = self.feature_gates.not_acted_on();
        if !gates.is_empty() {
            parts.push(format!("feature gates {}", gates.join(", ")));
        }
        if !parts.is_empty() {
            out.push(format!(
                "accepted but not implemented yet, so without effect: {}",
                parts.join("; ")
            ));
        }
        if !self.unknown_config_fields.is_empty() {
            out.push(format!(
                "unknown config fields ignored (upstream's lenient decoding of \
                 kubelet.config.k8s.io/v1beta1): {}",
                self.unknown_config_fields.join(", ")
            ));
        }
        if self.cgroup_driver == crate::vocabulary::cgroup_names::CgroupDriver::Systemd
            && self.cgroup_root.split('/').any(|p| p.ends_with(".slice"))
        {
            out.push(format!(
                "cgroupRoot {:?} is read in the cgroupfs spelling with the systemd driver too, \
                 as upstream reads it: pods go under {}; write /NAME for NAME.slice",
                self.cgroup_root,
                crate::vocabulary::cgroup_names::CgroupName::parse_cgroup_root(&self.cgroup_root)
                    .child("kubepods")
                    .to_path(self.cgroup_driver)
            ));
        }
        out
    }
}

/// Loads the configuration from the process's command line.
pub fn load() -> Result<Config, ConfigError> {
    load_from_args(std::env::args_os().map(|a| a.to_string_lossy().into_owned()))
}

/// Loads the configuration from `args`, whose first item is the program name.
pub fn load_from_args<I, S>(args: I) -> Result<Config, ConfigError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let args: Vec<String> = args.into_iter().skip(1).map(Into::into).collect();
    let given = flags::parse_args(&args)?;
    for flag in given.iter().filter(|f| f.name == "help") {
        if flags::parse_bool(&flag.value).map_err(|reason| invalid_flag(flag, reason))? {
            return Err(ConfigError::Help(flags::help_text()));
        }
    }
    for flag in given.iter().filter(|f| f.name == "version") {
        if version_requested(flag)? {
            return Err(ConfigError::Help(format!(
                "kubelet-rs v{}",
                env!("CARGO_PKG_VERSION")
            )));
        }
    }
    let last_path = |name: &str| {
        given
            .iter()
            .rev()
            .find(|f| f.name == name)
            .map(|f| PathBuf::from(&f.value))
            .filter(|p| !p.as_os_str().is_empty())
    };
    let config_file = last_path("config");
    let config_dir = last_path("config-dir");

    // As upstream: the legacy command-line defaults unless a --config file is given; the
    // file, then the drop-ins over it; flags over both.
    let mut config = Config::defaults(config_file.is_some());
    if config_file.is_some() || config_dir.is_some() {
        let settings = load_files(config_file.as_deref(), config_dir.as_deref())?;
        apply_file(&mut config, settings)?;
        config.config_file = config_file;
        config.config_dir = config_dir;
    }
    apply_flags(&mut config, &given)?;
    // --cert-dir defaults under the root dir, wherever --root-dir put it.
    if !given.iter().any(|f| f.name == "cert-dir") {
        config.cert_dir = config.root_dir.join("pki");
    }
    if config.node_name.is_empty() {
        config.node_name = host_node_name()?;
    }
    validate(&config)?;
    Ok(config)
}

/// The `--config` file with the `--config-dir` drop-ins merged over it, read into settings.
/// Each drop-in is also read on its own first, so a bad value is reported against the file
/// that holds it.
fn load_files(
    config_file: Option<&Path>,
    config_dir: Option<&Path>,
) -> Result<FileSettings, ConfigError> {
    let read = |path: &Path| {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
            path: path.to_path_buf(),
            source,
        })?;
        file::read_document(path, &text)
    };
    let mut document = serde_json::Map::new();
    let mut settings = FileSettings::default();
    if let Some(path) = config_file {
        document = read(path)?;
        settings = file::parse_document(path, &document)?;
    }
    let Some(dir) = config_dir else {
        return Ok(settings);
    };
    for path in dropin::dropin_files(dir)? {
        let dropin = read(&path)?;
        file::parse_document(&path, &dropin)?;
        dropin::merge_patch(&mut document, dropin);
    }
    // Every file was checked on its own above, so an error here is unexpected; it names
    // the folder.
    file::parse_document(dir, &document)
}

/// `--version` and `--version=raw` print the version; `--version=false` does nothing;
/// `--version=vX.Y.Z` (upstream: report that version instead) is accepted and not
/// implemented, so it prints the version too.
fn version_requested(flag: &FlagValue) -> Result<bool, ConfigError> {
    let v = flag.value.as_str();
    if v == "raw" || (v.len() > 1 && v.starts_with('v')) {
        return Ok(true);
    }
    flags::parse_bool(v).map_err(|_| invalid_flag(flag, "expected true, false, raw or vX.Y.Z"))
}

fn apply_file(config: &mut Config, file: FileSettings) -> Result<(), ConfigError> {
    let FileSettings {
        declared,
        static_pod_url_header,
        container_runtime_endpoint,
        verbosity,
        unimplemented_fields,
        unimplemented_values,
        unknown_fields,
        feature_gates,
        serialize_image_pulls,
        max_parallel_image_pulls,
        kube_reserved,
        system_reserved,
        eviction_hard,
        eviction_soft,
        eviction_soft_grace_period,
        eviction_minimum_reclaim,
        cluster_dns,
        cgroup_driver,
    } = file;
    fn set<T>(target: &mut T, value: Option<T>) {
        if let Some(v) = value {
            *target = v;
        }
    }
    // v1beta1 defaulting: a file that sets only the update frequency reports as often.
    if declared.node_status_report_frequency.is_none() {
        set(
            &mut config.node_status_report_frequency,
            declared.node_status_update_frequency,
        );
    }
    config.apply_declared_file(declared);
    set(&mut config.static_pod_url_header, static_pod_url_header);
    if let Some(endpoint) = container_runtime_endpoint {
        config.container_runtime_endpoint =
            socket_path(&endpoint).map_err(|reason| ConfigError::Invalid {
                setting: "containerRuntimeEndpoint (--container-runtime-endpoint)",
                value: endpoint.clone(),
                reason: reason.to_string(),
            })?;
    }
    set(&mut config.verbosity, verbosity);
    config.unimplemented_config_fields = unimplemented_fields;
    config.unimplemented_config_values = unimplemented_values;
    config.unknown_config_fields = unknown_fields;
    for (name, enabled) in feature_gates.into_iter().flatten() {
        config.feature_gates.set(&name, enabled);
    }
    config.max_parallel_image_pulls = max_parallel_image_pulls;
    // v1beta1 defaulting: asking for parallel pulls turns serialized pulls off unless the
    // file says otherwise, so one setting is enough.
    config.serialize_image_pulls =
        serialize_image_pulls.unwrap_or_else(|| max_parallel_image_pulls.is_none_or(|n| n < 2));
    set(&mut config.kube_reserved, kube_reserved);
    set(&mut config.system_reserved, system_reserved);
    set(&mut config.eviction_hard, eviction_hard);
    set(&mut config.eviction_soft, eviction_soft);
    set(
        &mut config.eviction_soft_grace_period,
        eviction_soft_grace_period,
    );
    set(
        &mut config.eviction_minimum_reclaim,
        eviction_minimum_reclaim,
    );
    set(&mut config.cluster_dns, cluster_dns);
    if let Some(driver) = cgroup_driver {
        config.cgroup_driver = crate::vocabulary::cgroup_names::CgroupDriver::parse(&driver)
            .map_err(|reason| ConfigError::Invalid {
                setting: "cgroupDriver (--cgroup-driver)",
                value: driver.clone(),
                reason: reason.to_string(),
            })?;
    }
    Ok(())
}

fn invalid_flag(flag: &FlagValue, reason: impl ToString) -> ConfigError {
    ConfigError::InvalidFlagValue {
        flag: flag.spelled.clone(),
        value: flag.value.clone(),
        reason: reason.to_string(),
    }
}

/// Applies the flags in command-line order: a declared setting's flag through its
/// declaration (`settings.rs`), the others here.
fn apply_flags(config: &mut Config, given: &[FlagValue]) -> Result<(), ConfigError> {
    // Like upstream's ColonSeparatedMultimapStringString: the first use on the command line
    // replaces what the file set, later uses add to it.
    let mut headers_from_flags: Option<BTreeMap<String, Vec<String>>> = None;
    // The same rule for the other map flags: the first use replaces, later ones add.
    let mut map_flags: BTreeMap<&str, BTreeMap<String, String>> = BTreeMap::new();
    // --cluster-dns is a string slice upstream: the first use replaces the file's list,
    // later ones add to it.
    let mut cluster_dns_from_flags: Option<Vec<IpAddr>> = None;
    for flag in given {
        let v = flag.value.as_str();
        let bad = |reason: &dyn std::fmt::Display| invalid_flag(flag, reason);
        if let Some(flags::Support::NotYet(ty)) = flags::spec(flag.name).map(|s| s.support) {
            flags::check_value(ty, v).map_err(|r| bad(&r))?;
            let name = format!("--{}", flag.name);
            if !config.unimplemented_flags.contains(&name) {
                config.unimplemented_flags.push(name);
            }
            continue;
        }
        if let Some(applied) = config.apply_declared_flag(flag.name, v) {
            applied.map_err(|r| bad(&r))?;
            continue;
        }
        match flag.name {
            "config" | "config-dir" | "help" | "version" => {}
            "manifest-url-header" => {
                let headers = headers_from_flags.get_or_insert_with(BTreeMap::new);
                parse_header_pairs(v, headers).map_err(|r| bad(&r))?;
            }
            "hostname-override" => config.node_name = normalize_node_name(v),
            "container-runtime-endpoint" => {
                config.container_runtime_endpoint = socket_path(v).map_err(|r| bad(&r))?
            }
            "v" => {
                config.verbosity = v
                    .parse()
                    .map_err(|_| bad(&"expected an integer from 0 to 255"))?
            }
            "feature-gates" => {
                // mapStringBool: every use adds its gates over the file's and earlier ones.
                for (name, value) in flags::bool_pairs(v).map_err(|r| bad(&r))? {
                    config.feature_gates.set(&name, value);
                }
            }
            "serialize-image-pulls" => {
                config.serialize_image_pulls = flags::parse_bool(v).map_err(|r| bad(&r))?
            }
            "insecure-registry" => {
                let entry = v.trim();
                if entry.is_empty() {
                    return Err(bad(&"expected HOST[:PORT] or a CIDR range"));
                }
                // Repeatable: every use adds one registry.
                config.insecure_registries.push(entry.to_string());
            }
            "node-labels"
            | "kube-reserved"
            | "system-reserved"
            | "eviction-hard"
            | "eviction-soft"
            | "eviction-soft-grace-period"
            | "eviction-minimum-reclaim" => {
                let separator = if matches!(flag.name, "eviction-hard" | "eviction-soft") {
                    '<'
                } else {
                    '='
                };
                let entries = map_flags.entry(flag.name).or_default();
                node::parse_key_value_list(v, separator, entries).map_err(|r| bad(&r))?;
                match flag.name {
                    "node-labels" => config.node_labels = entries.clone(),
                    "eviction-hard" => {
                        config.eviction_hard =
                            node::parse_eviction_thresholds(entries).map_err(|r| bad(&r))?
                    }
                    "eviction-soft" => {
                        config.eviction_soft =
                            node::parse_eviction_thresholds(entries).map_err(|r| bad(&r))?
                    }
                    "eviction-soft-grace-period" => {
                        config.eviction_soft_grace_period =
                            node::parse_grace_periods(entries).map_err(|r| bad(&r))?
                    }
                    "eviction-minimum-reclaim" => {
                        config.eviction_minimum_reclaim =
                            node::parse_eviction_thresholds(entries).map_err(|r| bad(&r))?
                    }
                    "kube-reserved" => {
                        config.kube_reserved =
                            node::parse_resource_list(entries).map_err(|r| bad(&r))?
                    }
                    _ => {
                        config.system_reserved =
                            node::parse_resource_list(entries).map_err(|r| bad(&r))?
                    }
                }
            }
            "cluster-dns" => {
                let list = cluster_dns_from_flags.get_or_insert_with(Vec::new);
                for ip in comma_list(v) {
                    let parsed = ip
                        .parse()
                        .map_err(|_| bad(&format!("{ip:?} is not a valid IP address")))?;
                    list.push(parsed);
                }
            }
            "cgroup-driver" => {
                config.cgroup_driver =
                    crate::vocabulary::cgroup_names::CgroupDriver::parse(v).map_err(|r| bad(&r))?
            }
            other => unreachable!("flag --{other} is in the table but not applied"),
        }
    }
    if let Some(headers) = headers_from_flags {
        config.static_pod_url_header = headers;
    }
    if let Some(servers) = cluster_dns_from_flags {
        config.cluster_dns = servers;
    }
    Ok(())
}

/// `key:value` pairs separated by commas, as the kubelet's --manifest-url-header takes them.
fn parse_header_pairs(
    text: &str,
    headers: &mut BTreeMap<String, Vec<String>>,
) -> Result<(), HeaderPairError> {
    for pair in text.split(',') {
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair
            .split_once(':')
            .ok_or_else(|| HeaderPairError::NoColon(pair.to_string()))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(HeaderPairError::EmptyName(pair.to_string()));
        }
        headers
            .entry(key.to_string())
            .or_default()
            .push(value.trim().to_string());
    }
    Ok(())
}

/// Why a --manifest-url-header value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderPairError {
    #[error("malformed pair {0:?}, expected key:value")]
    NoColon(String),
    #[error("malformed pair {0:?}, the header name is empty")]
    EmptyName(String),
}

/// Why a container runtime endpoint was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("scheme {0}:// is not supported; use unix:///path/to/containerd.sock")]
    Scheme(String),
    #[error("expected an absolute socket path, e.g. unix:///run/containerd/containerd.sock")]
    NotAbsolute,
}

/// Accepts `unix:///path` or `/path`; the agent talks to containerd over a unix socket only.
fn socket_path(endpoint: &str) -> Result<PathBuf, EndpointError> {
    let path = match endpoint.split_once("://") {
        Some(("unix", path)) => path,
        Some((scheme, _)) => return Err(EndpointError::Scheme(scheme.to_string())),
        None => endpoint,
    };
    if !path.starts_with('/') {
        return Err(EndpointError::NotAbsolute);
    }
    Ok(PathBuf::from(path))
}

/// The items of a flag's comma-separated list (pflag's stringSlice): trimmed, empty ones
/// dropped.
pub(crate) fn comma_list(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Why a name is not a containerd identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentifierError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {max} characters (containerd's limit), got {len}")]
    TooLong { len: usize, max: usize },
    #[error(
        "must be ASCII letters and digits, joined by single '.', '_' or '-' \
         (containerd's identifier rule [A-Za-z0-9]+([._-][A-Za-z0-9]+)*)"
    )]
    Characters,
}

/// containerd's own rule for a namespace (identifiers.Validate): at most 76 characters, runs
/// of ASCII letters and digits joined by single `.`, `_` or `-`. Checked up front because the
/// name also goes into gRPC metadata, where a control character or non-ASCII byte used to
/// stop the agent with a panic instead of a usage error.
pub fn check_containerd_namespace(name: &str) -> Result<(), IdentifierError> {
    const MAX_LENGTH: usize = 76;
    if name.is_empty() {
        return Err(IdentifierError::Empty);
    }
    if name.len() > MAX_LENGTH {
        return Err(IdentifierError::TooLong {
            len: name.len(),
            max: MAX_LENGTH,
        });
    }
    let separator = |c: char| matches!(c, '.' | '_' | '-');
    let runs_ok = name
        .split(separator)
        .all(|run| !run.is_empty() && run.chars().all(|c| c.is_ascii_alphanumeric()));
    if !runs_ok {
        return Err(IdentifierError::Characters);
    }
    Ok(())
}

fn normalize_node_name(name: &str) -> String {
    name.trim().to_lowercase()
}

fn host_node_name() -> Result<String, ConfigError> {
    let raw = nix::unistd::gethostname().map_err(|e| ConfigError::Hostname(e.to_string()))?;
    let name = normalize_node_name(&raw.to_string_lossy());
    if name.is_empty() {
        return Err(ConfigError::Hostname("the host name is empty".into()));
    }
    Ok(name)
}

/// The declared settings' own rules (`settings.rs`), then the rules across settings.
fn validate(config: &Config) -> Result<(), ConfigError> {
    fn invalid(setting: &'static str, value: impl ToString, reason: &str) -> ConfigError {
        ConfigError::Invalid {
            setting,
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }
    config.validate_declared()?;
    // Upstream's validation (its words, which name the wrong field).
    if config.enable_system_log_query && !config.feature_gates.enabled(Gate::NodeLogQuery) {
        return Err(invalid(
            "enableSystemLogQuery",
            true,
            "NodeLogQuery feature gate is required for enableSystemLogHandler",
        ));
    }
    // The bootstrap writes the kubeconfig the agent then runs with: it needs a place for it.
    if let (Some(bootstrap), None) = (&config.bootstrap_kubeconfig, &config.kubeconfig) {
        return Err(invalid(
            "--bootstrap-kubeconfig",
            bootstrap.display(),
            "needs --kubeconfig, the file the bootstrapped credentials are written to",
        ));
    }
    if config.tls_cert_file.is_some() != config.tls_private_key_file.is_some() {
        return Err(invalid(
            "tlsCertFile/tlsPrivateKeyFile (--tls-cert-file, --tls-private-key-file)",
            format!(
                "{:?}/{:?}",
                config.tls_cert_file.as_deref().unwrap_or(Path::new("")),
                config
                    .tls_private_key_file
                    .as_deref()
                    .unwrap_or(Path::new(""))
            ),
            "both or neither must be given",
        ));
    }
    if config.tls_min_version.as_deref() == Some("VersionTLS13")
        && !config.tls_cipher_suites.is_empty()
    {
        return Err(invalid(
            "tlsCipherSuites (--tls-cipher-suites)",
            config.tls_cipher_suites.join(","),
            "cannot be set when tlsMinVersion is VersionTLS13",
        ));
    }
    validate_image_gc(config)?;
    validate_image_pulls(config)?;
    validate_node(config)?;
    validate_eviction(config)?;
    validate_cgroups(config)?;
    Ok(())
}

/// Upstream's ParseThresholdConfig rules: every soft threshold has a grace period.
fn validate_eviction(config: &Config) -> Result<(), ConfigError> {
    for signal in config.eviction_soft.keys() {
        if !config.eviction_soft_grace_period.contains_key(signal) {
            return Err(ConfigError::Invalid {
                setting: "evictionSoft (--eviction-soft)",
                value: signal.clone(),
                reason: format!("no grace period specified for soft eviction threshold {signal} (evictionSoftGracePeriod)"),
            });
        }
    }
    Ok(())
}

/// enforceNodeAllocatable values (upstream's names).
pub const ENFORCE_PODS: &str = "pods";
pub const ENFORCE_SYSTEM_RESERVED: &str = "system-reserved";
pub const ENFORCE_KUBE_RESERVED: &str = "kube-reserved";
pub const ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE: &str = "system-reserved-compressible";
pub const ENFORCE_KUBE_RESERVED_COMPRESSIBLE: &str = "kube-reserved-compressible";
pub const ENFORCE_NONE: &str = "none";

/// Upstream's rules for the container manager's settings: known enforcement keys, `none`
/// alone, a reserved cgroup named for each reservation enforced on one, no enforcement
/// without cgroupsPerQOS, and cgroup paths in the driver's spelling.
fn validate_cgroups(config: &Config) -> Result<(), ConfigError> {
    const SETTING: &str = "enforceNodeAllocatable (--enforce-node-allocatable)";
    let invalid = |setting: &'static str, value: String, reason: String| ConfigError::Invalid {
        setting,
        value,
        reason,
    };
    let list = &config.enforce_node_allocatable;
    let keys = [
        ENFORCE_PODS,
        ENFORCE_SYSTEM_RESERVED,
        ENFORCE_KUBE_RESERVED,
        ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
        ENFORCE_KUBE_RESERVED_COMPRESSIBLE,
        ENFORCE_NONE,
    ];
    for key in list {
        if !keys.contains(&key.as_str()) {
            return Err(invalid(
                SETTING,
                key.clone(),
                format!("unknown option; valid options are {}", keys.join(", ")),
            ));
        }
    }
    if list.iter().any(|k| k == ENFORCE_NONE) && list.len() > 1 {
        return Err(invalid(
            SETTING,
            list.join(","),
            "none must not be combined with any other entries".into(),
        ));
    }
    let enforcing = list.iter().any(|k| k != ENFORCE_NONE);
    if enforcing && !config.cgroups_per_qos {
        return Err(invalid(
            SETTING,
            list.join(","),
            "is not supported unless cgroupsPerQOS (--cgroups-per-qos) is true; set it to none or empty".into(),
        ));
    }
    for (keys, cgroup, setting) in [
        (
            [
                ENFORCE_SYSTEM_RESERVED,
                ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
            ],
            &config.system_reserved_cgroup,
            "systemReservedCgroup (--system-reserved-cgroup)",
        ),
        (
            [ENFORCE_KUBE_RESERVED, ENFORCE_KUBE_RESERVED_COMPRESSIBLE],
            &config.kube_reserved_cgroup,
            "kubeReservedCgroup (--kube-reserved-cgroup)",
        ),
    ] {
        if let Some(key) = keys.iter().find(|k| list.iter().any(|e| e == *k)) {
            if cgroup.is_empty() {
                return Err(invalid(
                    setting,
                    String::new(),
                    format!("must be specified when {key} is in {SETTING}"),
                ));
            }
        }
        if !cgroup.is_empty() {
            crate::vocabulary::cgroup_names::CgroupName::parse(config.cgroup_driver, cgroup)
                .map_err(|reason| invalid(setting, cgroup.clone(), reason.to_string()))?;
        }
    }
    // cgroupRoot: any path, read in the cgroupfs spelling for either driver as upstream
    // reads it (`vocabulary::cgroup_names::CgroupName::parse_cgroup_root`); nothing to refuse.
    Ok(())
}

/// Upstream's rules (pkg/kubelet/apis/config/validation): low must stay below high, or GC
/// could never reach its target (each is a percentage by its declaration).
fn validate_image_gc(config: &Config) -> Result<(), ConfigError> {
    let (high, low) = (
        config.image_gc_high_threshold_percent,
        config.image_gc_low_threshold_percent,
    );
    if low >= high {
        return Err(ConfigError::Invalid {
            setting: "imageGCLowThresholdPercent (--image-gc-low-threshold)",
            value: low.to_string(),
            reason: format!(
                "must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {high}"
            ),
        });
    }
    let (min_age, max_age) = (config.image_minimum_gc_age, config.image_maximum_gc_age);
    if !max_age.is_zero() && max_age <= min_age {
        return Err(ConfigError::Invalid {
            setting: "imageMaximumGCAge",
            value: format_duration(max_age),
            reason: format!(
                "must be greater than imageMinimumGCAge (--minimum-image-ttl-duration) {}",
                format_duration(min_age)
            ),
        });
    }
    Ok(())
}

/// --node-labels' rules, as upstream's flag checks state them.
fn validate_node(config: &Config) -> Result<(), ConfigError> {
    node::validate_node_labels(&config.node_labels).map_err(|reason| ConfigError::Invalid {
        setting: "--node-labels",
        value: config
            .node_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
        reason: reason.to_string(),
    })?;
    Ok(())
}

/// Upstream's rules: a limit must be positive, and a limit above one contradicts pulling
/// one image at a time.
fn validate_image_pulls(config: &Config) -> Result<(), ConfigError> {
    match config.max_parallel_image_pulls {
        Some(n) if n < 1 => Err(ConfigError::Invalid {
            setting: "maxParallelImagePulls",
            value: n.to_string(),
            reason: "must be a positive number".into(),
        }),
        Some(n) if n > 1 && config.serialize_image_pulls => Err(ConfigError::Invalid {
            setting: "maxParallelImagePulls",
            value: n.to_string(),
            reason: "cannot be larger than 1 unless serializeImagePulls (--serialize-image-pulls) is false".into(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
