//! Flags with the kubelet's names, the KubeletConfiguration file, defaults and validation.
//!
//! Precedence is upstream's: built-in defaults, then the `--config` file, then flags given on
//! the command line (a flag always wins over the file).

mod configz;
mod dropin;
mod duration;
mod error;
mod features;
mod file;
mod flags;
pub mod node;
mod schema;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use configz::configz_json;
pub use duration::{format_duration, parse_duration};
pub use error::ConfigError;
pub use features::{FeatureGates, Gate};

use file::FileSettings;
use flags::FlagValue;
use k8s_openapi::api::core::v1::Taint;
use node::EvictionThresholds;

use crate::vocabulary::quantity::Quantity;

/// The agent's effective configuration: defaults, then the config file, then flags.
#[derive(Debug, Clone)]
pub struct Config {
    /// Node name: --hostname-override, else the host name, lower-cased.
    pub node_name: String,
    /// --root-dir (default /var/lib/kubelet-rs).
    pub root_dir: PathBuf,
    /// --pod-manifest-path / staticPodPath.
    pub static_pod_path: Option<PathBuf>,
    /// --manifest-url / staticPodURL.
    pub static_pod_url: Option<String>,
    /// --manifest-url-header / staticPodURLHeader.
    pub static_pod_url_header: BTreeMap<String, Vec<String>>,
    pub file_check_frequency: Duration,
    pub http_check_frequency: Duration,
    pub sync_frequency: Duration,
    /// How often the stats collector samples cgroups and /proc (cAdvisor's housekeeping).
    pub housekeeping_interval: Duration,
    pub max_pods: u32,
    /// 0 = disabled.
    ///
    /// Default as upstream: 10255 when no `--config` file is given (the kubelet's legacy
    /// command-line default, still applied by its `applyLegacyDefaults`), 0 (disabled) when a
    /// config file is given and does not set `readOnlyPort` (the v1beta1 default).
    pub read_only_port: u16,
    /// 0 = disabled.
    pub healthz_port: u16,
    pub healthz_bind_address: IpAddr,
    pub container_log_max_size: u64,
    pub container_log_max_files: u32,
    /// Path of containerd's socket (the unix:// prefix stripped).
    pub container_runtime_endpoint: PathBuf,
    /// containerd namespace the agent works in (--containerd-namespace).
    pub containerd_namespace: String,
    pub pod_infra_container_image: String,
    /// podLogsDir (default /var/log/pods).
    pub pod_logs_dir: PathBuf,
    /// Where the /var/log/containers symlinks go.
    pub container_logs_dir: PathBuf,
    pub cni_conf_dir: PathBuf,
    pub cni_bin_dirs: Vec<PathBuf>,
    /// "text" or "json".
    pub logging_format: String,
    pub verbosity: u8,
    /// --address / address: the main (10250) server's listen address (default 0.0.0.0).
    pub address: IpAddr,
    /// --port / port: the main server's port (default 10250).
    pub port: u16,
    /// --kubeconfig: API server credentials; None runs standalone.
    pub kubeconfig: Option<PathBuf>,
    /// --bootstrap-kubeconfig.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// --config: the KubeletConfiguration file that was loaded, if any.
    pub config_file: Option<PathBuf>,
    /// --config-dir: the folder of drop-in files merged over it, if any.
    pub config_dir: Option<PathBuf>,
    /// Upstream flags given on the command line that the agent accepts but does not act on
    /// yet ("--runtime-cgroups"), in command-line order, once each.
    pub unimplemented_flags: Vec<String>,
    /// Upstream KubeletConfiguration fields (dotted paths) set to a non-default value that
    /// the agent accepts but does not act on yet.
    pub unimplemented_config_fields: Vec<String>,
    /// Fields of the configuration files that upstream's type does not have: dropped, as
    /// upstream's lenient decoding drops them.
    pub unknown_config_fields: Vec<String>,
    /// The not-implemented fields' values as the files set them, for /configz.
    pub(crate) unimplemented_config_values: serde_json::Map<String, serde_json::Value>,
    /// --tls-cert-file / tlsCertFile: the serving certificate (chain) of the main server.
    pub tls_cert_file: Option<PathBuf>,
    /// --tls-private-key-file / tlsPrivateKeyFile.
    pub tls_private_key_file: Option<PathBuf>,
    /// --cert-dir: where the certificates are kept (default `<root-dir>/pki`): the self-signed
    /// serving pair when no certificate file is given, and the pairs obtained through the
    /// certificates API (`kubelet-client-current.pem`, `kubelet-server-current.pem`).
    pub cert_dir: PathBuf,
    /// --rotate-certificates / rotateCertificates: renew the client certificate through the
    /// certificates API before it expires (default false, as upstream).
    pub rotate_certificates: bool,
    /// --rotate-server-certificates / serverTLSBootstrap: the serving certificate comes from
    /// a kubernetes.io/kubelet-serving CSR (and is renewed) instead of a file or self-signed.
    pub server_tls_bootstrap: bool,
    /// --tls-min-version / tlsMinVersion (`VersionTLS12`, ...); None = the TLS library default.
    pub tls_min_version: Option<String>,
    /// --tls-cipher-suites / tlsCipherSuites: Go names of TLS 1.2 suites; empty = defaults.
    pub tls_cipher_suites: Vec<String>,
    /// --allowed-unsafe-sysctls / allowedUnsafeSysctls: sysctls (or prefixes ending in `*`)
    /// pods may set beyond the safe ones.
    pub allowed_unsafe_sysctls: Vec<String>,
    /// --client-ca-file / authentication.x509.clientCAFile.
    pub client_ca_file: Option<PathBuf>,
    /// --anonymous-auth / authentication.anonymous.enabled.
    pub anonymous_auth: bool,
    /// --authentication-token-webhook / authentication.webhook.enabled.
    pub authentication_token_webhook: bool,
    /// --authentication-token-webhook-cache-ttl / authentication.webhook.cacheTTL.
    pub authentication_token_webhook_cache_ttl: Duration,
    /// --authorization-mode / authorization.mode.
    pub authorization_mode: AuthorizationMode,
    /// --authorization-webhook-cache-authorized-ttl / authorization.webhook.cacheAuthorizedTTL.
    pub authorization_webhook_cache_authorized_ttl: Duration,
    /// --authorization-webhook-cache-unauthorized-ttl / authorization.webhook.cacheUnauthorizedTTL.
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
    /// --image-gc-high-threshold / imageGCHighThresholdPercent: image-fs use (percent) at
    /// which image GC starts; 100 disables it.
    pub image_gc_high_threshold_percent: i32,
    /// --image-gc-low-threshold / imageGCLowThresholdPercent: the use image GC frees down to.
    pub image_gc_low_threshold_percent: i32,
    /// --minimum-image-ttl-duration / imageMinimumGCAge: how long after the agent first sees
    /// an unused image it may be collected.
    pub image_minimum_gc_age: Duration,
    /// imageMaximumGCAge: an image unused for longer than this is removed whatever the disk
    /// use; zero (the default) turns that off.
    pub image_maximum_gc_age: Duration,
    /// --image-gc-period (kubelet-rs only): upstream's fixed ImageGCPeriod, a flag so tests
    /// can shorten it.
    pub image_gc_period: Duration,
    /// --image-fs-path (kubelet-rs only): a path on the filesystem holding containerd's
    /// content and snapshots, whose statvfs drives image GC (upstream asks the CRI instead).
    pub image_fs_path: PathBuf,
    /// --containerd-config (kubelet-rs only): containerd's config file, read for the runtimes
    /// RuntimeClass handlers name (`runtime::handlers`), as containerd's CRI plugin reads it.
    pub containerd_config: PathBuf,
    /// --enable-debugging-handlers / enableDebuggingHandlers: exec, attach, portForward, run,
    /// containerLogs, runningpods and configz are served (default true); off, upstream's
    /// debugging paths answer 405 and /configz is not there.
    pub enable_debugging_handlers: bool,
    /// enableSystemLogHandler (file only, as upstream): `/logs/` serves the node's /var/log
    /// (default true; only with the debugging handlers, as upstream).
    pub enable_system_log_handler: bool,
    /// enableSystemLogQuery (file only): `/logs/?query=` reads services' journals and log
    /// files (default false; needs enableSystemLogHandler and the NodeLogQuery gate).
    pub enable_system_log_query: bool,
    /// featureGates / --feature-gates: the gates set; `feature_gates.enabled(Gate::..)`
    /// gives upstream's default for the rest.
    pub feature_gates: FeatureGates,
    /// The folder `/logs/` serves (/var/log; not a flag, tests point it elsewhere).
    pub(crate) node_log_dir: PathBuf,
    /// The journalctl the node log query runs (found on PATH; tests use a fake).
    pub(crate) journalctl: PathBuf,
    /// --enable-server / enableServer: the main server (10250) is started (default true); off,
    /// only the read-only and healthz servers can be, as upstream.
    pub enable_server: bool,
    /// --serialize-image-pulls / serializeImagePulls: one image pull at a time.
    pub serialize_image_pulls: bool,
    /// --seccomp-default / seccompDefault: a container (and the pod sandbox) whose pod and
    /// container set no seccompProfile runs with the runtime's default profile rather than
    /// unconfined.
    pub seccomp_default: bool,
    /// maxParallelImagePulls (file only, as upstream has no flag): with serialized pulls
    /// off, at most this many at once; None is no limit.
    pub max_parallel_image_pulls: Option<i32>,
    /// --insecure-registry (kubelet-rs only, repeatable): registries other than loopback
    /// ones that may be reached over plain HTTP (`host[:port]`, a bare host, or a CIDR).
    /// Upstream leaves this to the CRI runtime's configuration.
    pub insecure_registries: Vec<String>,
    /// --node-labels (flag only, as upstream): labels added to the Node at registration.
    pub node_labels: BTreeMap<String, String>,
    /// --register-with-taints / registerWithTaints.
    pub register_with_taints: Vec<Taint>,
    /// --node-ip: the node's InternalIP; None = the host's default-route address.
    pub node_ip: Option<IpAddr>,
    /// --register-node / registerNode: create the Node object (default true).
    pub register_node: bool,
    /// --kube-reserved / kubeReserved: resource name (cpu, memory, ephemeral-storage, pid)
    /// to the amount held back for Kubernetes daemons.
    pub kube_reserved: BTreeMap<String, Quantity>,
    /// --system-reserved / systemReserved: the same for the OS's daemons.
    pub system_reserved: BTreeMap<String, Quantity>,
    /// --eviction-hard / evictionHard: signal to threshold (upstream's Linux defaults).
    pub eviction_hard: EvictionThresholds,
    /// --eviction-soft / evictionSoft: thresholds acted on once crossed for their grace period.
    pub eviction_soft: EvictionThresholds,
    /// --eviction-soft-grace-period / evictionSoftGracePeriod: signal to how long its soft
    /// threshold must be crossed.
    pub eviction_soft_grace_period: BTreeMap<String, Duration>,
    /// --eviction-minimum-reclaim / evictionMinimumReclaim: signal to how much more than its
    /// threshold must be available before its pressure ends.
    pub eviction_minimum_reclaim: EvictionThresholds,
    /// --eviction-pressure-transition-period (default 5m): how long a pressure condition
    /// stays after its threshold was last crossed.
    pub eviction_pressure_transition_period: Duration,
    /// --eviction-max-pod-grace-period: the longest grace period of a soft eviction.
    pub eviction_max_pod_grace_period: i32,
    /// --cluster-dns / clusterDNS: the DNS servers of pods with dnsPolicy ClusterFirst.
    pub cluster_dns: Vec<IpAddr>,
    /// --cluster-domain / clusterDomain: the cluster's DNS domain, searched by those pods.
    pub cluster_domain: String,
    /// --resolv-conf / resolvConf: the host resolver file of pods with dnsPolicy Default
    /// (default /etc/resolv.conf; None when set to "": no host resolver).
    pub resolv_conf: Option<PathBuf>,
    /// --node-status-update-frequency / nodeStatusUpdateFrequency: how often the node's
    /// status is computed (default 10s).
    pub node_status_update_frequency: Duration,
    /// nodeStatusReportFrequency: longest time between status reports when nothing changed
    /// (default 5m, or nodeStatusUpdateFrequency when the file sets only that).
    pub node_status_report_frequency: Duration,
    /// nodeLeaseDurationSeconds: the Lease's duration; it is renewed every quarter of it.
    pub node_lease_duration_seconds: i32,
    /// --cgroups-per-qos / cgroupsPerQOS: kubepods, the QoS parents and limited pod cgroups
    /// (default true).
    pub cgroups_per_qos: bool,
    /// --cgroup-driver / cgroupDriver: how cgroups are named (default cgroupfs).
    pub cgroup_driver: crate::cm::CgroupDriver,
    /// --cgroup-root / cgroupRoot: where kubepods goes (default the hierarchy's root, "/").
    pub cgroup_root: String,
    /// --enforce-node-allocatable / enforceNodeAllocatable (default ["pods"]).
    pub enforce_node_allocatable: Vec<String>,
    /// --pod-max-pids / podPidsLimit: pids.max of each pod's cgroup; -1 (default) or 0 is
    /// no limit.
    pub pod_pids_limit: i64,
    /// --kube-reserved-cgroup / kubeReservedCgroup: the cgroup kubeReserved is enforced on.
    pub kube_reserved_cgroup: String,
    /// --system-reserved-cgroup / systemReservedCgroup.
    pub system_reserved_cgroup: String,
    /// --fail-swap-on / failSwapOn (default true): refuse to start while the node has swap
    /// on (`cm::swap`).
    pub fail_swap_on: bool,
    /// memorySwap.swapBehavior: what swap containers may use.
    pub swap_behavior: SwapBehavior,
    /// --local-storage-capacity-isolation / localStorageCapacityIsolation (default true):
    /// the eviction manager enforces emptyDir sizeLimits and ephemeral-storage limits.
    pub local_storage_capacity_isolation: bool,
    /// --volume-stats-agg-period / volumeStatsAggPeriod (default 1m): how long a measured
    /// directory usage (volumes, writable layers, logs) is reused before it is walked again.
    pub volume_stats_agg_period: Duration,
}

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

    pub(crate) fn parse(text: &str) -> Result<AuthorizationMode, String> {
        match text {
            "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
            "Webhook" => Ok(AuthorizationMode::Webhook),
            _ => Err("expected AlwaysAllow or Webhook".to_string()),
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
    /// Upstream's v1beta1 defaults plus the agent's own; `node_name` is left empty.
    /// `with_config_file` selects between the v1beta1 defaults and the kubelet's legacy
    /// command-line defaults (`applyLegacyDefaults`): read-only port 10255, anonymous
    /// authentication on, token webhook off, authorization AlwaysAllow.
    pub fn defaults(with_config_file: bool) -> Config {
        Config {
            node_name: String::new(),
            root_dir: PathBuf::from(DEFAULT_ROOT_DIR),
            static_pod_path: None,
            static_pod_url: None,
            static_pod_url_header: BTreeMap::new(),
            file_check_frequency: Duration::from_secs(20),
            http_check_frequency: Duration::from_secs(20),
            sync_frequency: Duration::from_secs(60),
            housekeeping_interval: Duration::from_secs(10),
            max_pods: 110,
            read_only_port: if with_config_file {
                0
            } else {
                LEGACY_READ_ONLY_PORT
            },
            healthz_port: 10248,
            healthz_bind_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            container_log_max_size: 10 * 1024 * 1024,
            container_log_max_files: 5,
            container_runtime_endpoint: PathBuf::from("/run/containerd/containerd.sock"),
            containerd_namespace: DEFAULT_CONTAINERD_NAMESPACE.to_string(),
            pod_infra_container_image: DEFAULT_POD_INFRA_CONTAINER_IMAGE.to_string(),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            container_logs_dir: PathBuf::from("/var/log/containers"),
            cni_conf_dir: PathBuf::from("/etc/cni/net.d"),
            cni_bin_dirs: vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")],
            logging_format: "text".to_string(),
            verbosity: 0,
            address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 10250,
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            config_file: None,
            config_dir: None,
            unimplemented_flags: Vec::new(),
            unimplemented_config_fields: Vec::new(),
            unknown_config_fields: Vec::new(),
            unimplemented_config_values: serde_json::Map::new(),
            tls_cert_file: None,
            tls_private_key_file: None,
            cert_dir: PathBuf::from(DEFAULT_ROOT_DIR).join("pki"),
            rotate_certificates: false,
            server_tls_bootstrap: false,
            tls_min_version: None,
            tls_cipher_suites: Vec::new(),
            allowed_unsafe_sysctls: Vec::new(),
            client_ca_file: None,
            anonymous_auth: !with_config_file,
            authentication_token_webhook: with_config_file,
            authentication_token_webhook_cache_ttl: Duration::from_secs(120),
            authorization_mode: if with_config_file {
                AuthorizationMode::Webhook
            } else {
                AuthorizationMode::AlwaysAllow
            },
            authorization_webhook_cache_authorized_ttl: Duration::from_secs(300),
            authorization_webhook_cache_unauthorized_ttl: Duration::from_secs(30),
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            image_minimum_gc_age: Duration::from_secs(120),
            image_maximum_gc_age: Duration::ZERO,
            image_gc_period: DEFAULT_IMAGE_GC_PERIOD,
            image_fs_path: PathBuf::from(DEFAULT_IMAGE_FS_PATH),
            containerd_config: PathBuf::from(crate::runtime::handlers::DEFAULT_CONTAINERD_CONFIG),
            serialize_image_pulls: true,
            seccomp_default: false,
            enable_debugging_handlers: true,
            enable_system_log_handler: true,
            enable_system_log_query: false,
            feature_gates: FeatureGates::default(),
            node_log_dir: PathBuf::from("/var/log"),
            journalctl: PathBuf::from("journalctl"),
            enable_server: true,
            max_parallel_image_pulls: None,
            insecure_registries: Vec::new(),
            node_labels: BTreeMap::new(),
            register_with_taints: Vec::new(),
            node_ip: None,
            register_node: true,
            kube_reserved: BTreeMap::new(),
            system_reserved: BTreeMap::new(),
            eviction_hard: node::default_eviction_hard(),
            eviction_soft: EvictionThresholds::new(),
            eviction_soft_grace_period: BTreeMap::new(),
            eviction_minimum_reclaim: EvictionThresholds::new(),
            eviction_pressure_transition_period: Duration::from_secs(300),
            eviction_max_pod_grace_period: 0,
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            resolv_conf: Some(PathBuf::from("/etc/resolv.conf")),
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            node_lease_duration_seconds: 40,
            cgroups_per_qos: true,
            cgroup_driver: crate::cm::CgroupDriver::Cgroupfs,
            cgroup_root: "/".to_string(),
            enforce_node_allocatable: vec![crate::cm::ENFORCE_PODS.to_string()],
            pod_pids_limit: -1,
            kube_reserved_cgroup: String::new(),
            system_reserved_cgroup: String::new(),
            fail_swap_on: true,
            swap_behavior: SwapBehavior::NoSwap,
            local_storage_capacity_isolation: true,
            volume_stats_agg_period: Duration::from_secs(60),
        }
    }
}

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
        if self.cgroup_driver == crate::cm::CgroupDriver::Systemd
            && self.cgroup_root.split('/').any(|p| p.ends_with(".slice"))
        {
            out.push(format!(
                "cgroupRoot {:?} is read in the cgroupfs spelling with the systemd driver too, \
                 as upstream reads it: pods go under {}; write /NAME for NAME.slice",
                self.cgroup_root,
                crate::cm::CgroupName::parse_cgroup_root(&self.cgroup_root)
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
        static_pod_path,
        static_pod_url,
        static_pod_url_header,
        file_check_frequency,
        http_check_frequency,
        sync_frequency,
        max_pods,
        read_only_port,
        healthz_port,
        healthz_bind_address,
        container_log_max_size,
        container_log_max_files,
        pod_logs_dir,
        container_runtime_endpoint,
        address,
        port,
        logging_format,
        verbosity,
        unimplemented_fields,
        unimplemented_values,
        unknown_fields,
        tls_cert_file,
        tls_private_key_file,
        tls_min_version,
        tls_cipher_suites,
        allowed_unsafe_sysctls,
        rotate_certificates,
        server_tls_bootstrap,
        client_ca_file,
        anonymous_auth,
        authentication_token_webhook,
        authentication_token_webhook_cache_ttl,
        authorization_mode,
        authorization_webhook_cache_authorized_ttl,
        authorization_webhook_cache_unauthorized_ttl,
        image_gc_high_threshold_percent,
        image_gc_low_threshold_percent,
        image_minimum_gc_age,
        image_maximum_gc_age,
        serialize_image_pulls,
        seccomp_default,
        enable_debugging_handlers,
        enable_system_log_handler,
        enable_system_log_query,
        feature_gates,
        enable_server,
        max_parallel_image_pulls,
        register_with_taints,
        register_node,
        kube_reserved,
        system_reserved,
        eviction_hard,
        eviction_soft,
        eviction_soft_grace_period,
        eviction_minimum_reclaim,
        eviction_pressure_transition_period,
        eviction_max_pod_grace_period,
        cluster_dns,
        cluster_domain,
        resolv_conf,
        node_status_update_frequency,
        node_status_report_frequency,
        node_lease_duration_seconds,
        cgroups_per_qos,
        cgroup_driver,
        cgroup_root,
        enforce_node_allocatable,
        pod_pids_limit,
        kube_reserved_cgroup,
        system_reserved_cgroup,
        fail_swap_on,
        swap_behavior,
        local_storage_capacity_isolation,
        volume_stats_agg_period,
    } = file;
    fn set<T>(target: &mut T, value: Option<T>) {
        if let Some(v) = value {
            *target = v;
        }
    }
    config.static_pod_path = static_pod_path.or(config.static_pod_path.take());
    config.static_pod_url = static_pod_url.or(config.static_pod_url.take());
    set(&mut config.static_pod_url_header, static_pod_url_header);
    set(&mut config.file_check_frequency, file_check_frequency);
    set(&mut config.http_check_frequency, http_check_frequency);
    set(&mut config.sync_frequency, sync_frequency);
    set(&mut config.max_pods, max_pods);
    set(&mut config.read_only_port, read_only_port);
    set(&mut config.healthz_port, healthz_port);
    set(&mut config.healthz_bind_address, healthz_bind_address);
    set(&mut config.container_log_max_size, container_log_max_size);
    set(&mut config.container_log_max_files, container_log_max_files);
    set(&mut config.pod_logs_dir, pod_logs_dir);
    if let Some(endpoint) = container_runtime_endpoint {
        config.container_runtime_endpoint =
            socket_path(&endpoint).map_err(|reason| ConfigError::Invalid {
                setting: "containerRuntimeEndpoint (--container-runtime-endpoint)",
                value: endpoint.clone(),
                reason,
            })?;
    }
    set(&mut config.address, address);
    set(&mut config.port, port);
    set(&mut config.logging_format, logging_format);
    set(&mut config.verbosity, verbosity);
    config.unimplemented_config_fields = unimplemented_fields;
    config.unimplemented_config_values = unimplemented_values;
    config.unknown_config_fields = unknown_fields;
    config.tls_cert_file = tls_cert_file.or(config.tls_cert_file.take());
    config.tls_private_key_file = tls_private_key_file.or(config.tls_private_key_file.take());
    config.tls_min_version = tls_min_version.or(config.tls_min_version.take());
    set(&mut config.tls_cipher_suites, tls_cipher_suites);
    set(&mut config.allowed_unsafe_sysctls, allowed_unsafe_sysctls);
    set(&mut config.rotate_certificates, rotate_certificates);
    set(&mut config.server_tls_bootstrap, server_tls_bootstrap);
    config.client_ca_file = client_ca_file.or(config.client_ca_file.take());
    set(&mut config.anonymous_auth, anonymous_auth);
    set(
        &mut config.authentication_token_webhook,
        authentication_token_webhook,
    );
    set(
        &mut config.authentication_token_webhook_cache_ttl,
        authentication_token_webhook_cache_ttl,
    );
    set(&mut config.authorization_mode, authorization_mode);
    set(
        &mut config.authorization_webhook_cache_authorized_ttl,
        authorization_webhook_cache_authorized_ttl,
    );
    set(
        &mut config.authorization_webhook_cache_unauthorized_ttl,
        authorization_webhook_cache_unauthorized_ttl,
    );
    set(
        &mut config.image_gc_high_threshold_percent,
        image_gc_high_threshold_percent,
    );
    set(
        &mut config.image_gc_low_threshold_percent,
        image_gc_low_threshold_percent,
    );
    set(&mut config.image_minimum_gc_age, image_minimum_gc_age);
    set(&mut config.image_maximum_gc_age, image_maximum_gc_age);
    set(
        &mut config.enable_debugging_handlers,
        enable_debugging_handlers,
    );
    set(&mut config.enable_server, enable_server);
    set(
        &mut config.enable_system_log_handler,
        enable_system_log_handler,
    );
    set(&mut config.enable_system_log_query, enable_system_log_query);
    for (name, enabled) in feature_gates.into_iter().flatten() {
        config.feature_gates.set(&name, enabled);
    }
    config.max_parallel_image_pulls = max_parallel_image_pulls;
    // v1beta1 defaulting: asking for parallel pulls turns serialized pulls off unless the
    // file says otherwise, so one setting is enough.
    config.serialize_image_pulls =
        serialize_image_pulls.unwrap_or_else(|| max_parallel_image_pulls.is_none_or(|n| n < 2));
    set(&mut config.seccomp_default, seccomp_default);
    set(&mut config.register_with_taints, register_with_taints);
    set(&mut config.register_node, register_node);
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
    set(
        &mut config.eviction_pressure_transition_period,
        eviction_pressure_transition_period,
    );
    set(
        &mut config.eviction_max_pod_grace_period,
        eviction_max_pod_grace_period,
    );
    set(&mut config.cluster_dns, cluster_dns);
    set(&mut config.cluster_domain, cluster_domain);
    if let Some(path) = resolv_conf {
        // A pointer upstream: an explicit "" means no host resolver.
        config.resolv_conf = (!path.is_empty()).then(|| PathBuf::from(path));
    }
    // v1beta1 defaulting: a file that sets only the update frequency reports as often.
    config.node_status_report_frequency = node_status_report_frequency
        .or(node_status_update_frequency)
        .unwrap_or(config.node_status_report_frequency);
    set(
        &mut config.node_status_update_frequency,
        node_status_update_frequency,
    );
    set(
        &mut config.node_lease_duration_seconds,
        node_lease_duration_seconds,
    );
    set(&mut config.cgroups_per_qos, cgroups_per_qos);
    if let Some(driver) = cgroup_driver {
        config.cgroup_driver =
            crate::cm::CgroupDriver::parse(&driver).map_err(|reason| ConfigError::Invalid {
                setting: "cgroupDriver (--cgroup-driver)",
                value: driver.clone(),
                reason,
            })?;
    }
    set(&mut config.cgroup_root, cgroup_root);
    set(
        &mut config.enforce_node_allocatable,
        enforce_node_allocatable,
    );
    set(&mut config.pod_pids_limit, pod_pids_limit);
    set(&mut config.kube_reserved_cgroup, kube_reserved_cgroup);
    set(&mut config.system_reserved_cgroup, system_reserved_cgroup);
    set(&mut config.fail_swap_on, fail_swap_on);
    set(&mut config.swap_behavior, swap_behavior);
    set(
        &mut config.local_storage_capacity_isolation,
        local_storage_capacity_isolation,
    );
    set(&mut config.volume_stats_agg_period, volume_stats_agg_period);
    Ok(())
}

fn invalid_flag(flag: &FlagValue, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidFlagValue {
        flag: flag.spelled.clone(),
        value: flag.value.clone(),
        reason: reason.into(),
    }
}

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
        let bad = |reason: &str| invalid_flag(flag, reason);
        if let Some(flags::Support::NotYet(ty)) = flags::spec(flag.name).map(|s| s.support) {
            flags::check_value(ty, v).map_err(|r| bad(&r))?;
            let name = format!("--{}", flag.name);
            if !config.unimplemented_flags.contains(&name) {
                config.unimplemented_flags.push(name);
            }
            continue;
        }
        match flag.name {
            "config" | "config-dir" | "help" | "version" => {}
            "pod-manifest-path" => {
                config.static_pod_path = Some(PathBuf::from(v)).filter(|_| !v.is_empty())
            }
            "manifest-url" => config.static_pod_url = Some(v.to_string()).filter(|s| !s.is_empty()),
            "manifest-url-header" => {
                let headers = headers_from_flags.get_or_insert_with(BTreeMap::new);
                parse_header_pairs(v, headers).map_err(|r| bad(&r))?;
            }
            "hostname-override" => config.node_name = normalize_node_name(v),
            "root-dir" => config.root_dir = non_empty_path(v).map_err(|r| bad(&r))?,
            "kubeconfig" => config.kubeconfig = Some(PathBuf::from(v)).filter(|_| !v.is_empty()),
            "bootstrap-kubeconfig" => {
                config.bootstrap_kubeconfig = Some(PathBuf::from(v)).filter(|_| !v.is_empty())
            }
            "container-runtime-endpoint" => {
                config.container_runtime_endpoint = socket_path(v).map_err(|r| bad(&r))?
            }
            "containerd-namespace" => {
                check_containerd_namespace(v).map_err(|e| bad(&e.to_string()))?;
                config.containerd_namespace = v.to_string();
            }
            "pod-infra-container-image" => {
                if v.is_empty() {
                    return Err(bad("must not be empty"));
                }
                config.pod_infra_container_image = v.to_string();
            }
            "address" => config.address = parse_ip(v).map_err(|r| bad(&r))?,
            "port" => config.port = parse_port(v).map_err(|r| bad(&r))?,
            "read-only-port" => config.read_only_port = parse_port(v).map_err(|r| bad(&r))?,
            "healthz-port" => config.healthz_port = parse_port(v).map_err(|r| bad(&r))?,
            "healthz-bind-address" => {
                config.healthz_bind_address = parse_ip(v).map_err(|r| bad(&r))?
            }
            "max-pods" => {
                config.max_pods = v
                    .parse::<i64>()
                    .map_err(|_| bad("expected an integer"))?
                    .try_into()
                    .map_err(|_| bad("must be greater than 0"))?
            }
            "sync-frequency" => config.sync_frequency = parse_duration(v).map_err(|r| bad(&r))?,
            "housekeeping-interval" => {
                config.housekeeping_interval = parse_duration(v).map_err(|r| bad(&r))?
            }
            "file-check-frequency" => {
                config.file_check_frequency = parse_duration(v).map_err(|r| bad(&r))?
            }
            "http-check-frequency" => {
                config.http_check_frequency = parse_duration(v).map_err(|r| bad(&r))?
            }
            "container-log-max-size" => {
                config.container_log_max_size =
                    crate::vocabulary::quantity::size_bytes(v).map_err(|e| bad(&e.to_string()))?
            }
            "container-log-max-files" => {
                config.container_log_max_files = v
                    .parse::<i64>()
                    .map_err(|_| bad("expected an integer"))?
                    .try_into()
                    .map_err(|_| bad("must be at least 2"))?
            }
            "pod-logs-dir" => config.pod_logs_dir = non_empty_path(v).map_err(|r| bad(&r))?,
            "cni-conf-dir" => config.cni_conf_dir = non_empty_path(v).map_err(|r| bad(&r))?,
            "cni-bin-dir" => {
                config.cni_bin_dirs = comma_list(v).map(PathBuf::from).collect();
                if config.cni_bin_dirs.is_empty() {
                    return Err(bad("expected one or more comma-separated folders"));
                }
            }
            "v" => {
                config.verbosity = v
                    .parse()
                    .map_err(|_| bad("expected an integer from 0 to 255"))?
            }
            "logging-format" => config.logging_format = v.to_string(),
            "tls-cert-file" => config.tls_cert_file = optional_path(v),
            "tls-private-key-file" => config.tls_private_key_file = optional_path(v),
            "cert-dir" => config.cert_dir = non_empty_path(v).map_err(|r| bad(&r))?,
            "rotate-certificates" => {
                config.rotate_certificates = flags::parse_bool(v).map_err(|r| bad(&r))?
            }
            "rotate-server-certificates" => {
                config.server_tls_bootstrap = flags::parse_bool(v).map_err(|r| bad(&r))?
            }
            "tls-min-version" => {
                config.tls_min_version = Some(v.to_string()).filter(|s| !s.is_empty())
            }
            "allowed-unsafe-sysctls" => {
                config.allowed_unsafe_sysctls = comma_list(v).map(String::from).collect()
            }
            "tls-cipher-suites" => {
                config.tls_cipher_suites = comma_list(v).map(String::from).collect()
            }
            "client-ca-file" => config.client_ca_file = optional_path(v),
            "anonymous-auth" => {
                config.anonymous_auth = flags::parse_bool(v).map_err(|r| bad(&r))?
            }
            "authentication-token-webhook" => {
                config.authentication_token_webhook = flags::parse_bool(v).map_err(|r| bad(&r))?
            }
            "authentication-token-webhook-cache-ttl" => {
                config.authentication_token_webhook_cache_ttl =
                    parse_duration(v).map_err(|r| bad(&r))?
            }
            "authorization-mode" => {
                config.authorization_mode = AuthorizationMode::parse(v).map_err(|r| bad(&r))?
            }
            "authorization-webhook-cache-authorized-ttl" => {
                config.authorization_webhook_cache_authorized_ttl =
                    parse_duration(v).map_err(|r| bad(&r))?
            }
            "authorization-webhook-cache-unauthorized-ttl" => {
                config.authorization_webhook_cache_unauthorized_ttl =
                    parse_duration(v).map_err(|r| bad(&r))?
            }
            "image-gc-high-threshold" => {
                config.image_gc_high_threshold_percent =
                    v.parse().map_err(|_| bad("expected an integer"))?
            }
            "image-gc-low-threshold" => {
                config.image_gc_low_threshold_percent =
                    v.parse().map_err(|_| bad("expected an integer"))?
            }
            "minimum-image-ttl-duration" => {
                config.image_minimum_gc_age = parse_duration(v).map_err(|r| bad(&r))?
            }
            "image-gc-period" => config.image_gc_period = parse_duration(v).map_err(|r| bad(&r))?,
            "image-fs-path" => config.image_fs_path = non_empty_path(v).map_err(|r| bad(&r))?,
            "containerd-config" => {
                config.containerd_config = non_empty_path(v).map_err(|r| bad(&r))?
            }
            "enable-debugging-handlers" => {
                config.enable_debugging_handlers = flags::parse_bool(v).map_err(|r| bad(&r))?
            }
            "enable-server" => config.enable_server = flags::parse_bool(v).map_err(|r| bad(&r))?,
            "feature-gates" => {
                // mapStringBool: every use adds its gates over the file's and earlier ones.
                for (name, value) in flags::bool_pairs(v).map_err(|r| bad(&r))? {
                    config.feature_gates.set(&name, value);
                }
            }
            "seccomp-default" => {
                config.seccomp_default = flags::parse_bool(v).map_err(|r| bad(&r))?
            }
            "serialize-image-pulls" => {
                config.serialize_image_pulls = flags::parse_bool(v).map_err(|r| bad(&r))?
            }
            "insecure-registry" => {
                let entry = v.trim();
                if entry.is_empty() {
                    return Err(bad("expected HOST[:PORT] or a CIDR range"));
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
            "cluster-domain" => config.cluster_domain = v.to_string(),
            "resolv-conf" => config.resolv_conf = (!v.is_empty()).then(|| PathBuf::from(v)),
            "eviction-pressure-transition-period" => {
                config.eviction_pressure_transition_period =
                    parse_duration(v).map_err(|r| bad(&r))?
            }
            "eviction-max-pod-grace-period" => {
                config.eviction_max_pod_grace_period = v
                    .trim()
                    .parse()
                    .map_err(|_| bad("expected a 32-bit integer"))?
            }
            "register-with-taints" => {
                config.register_with_taints = node::parse_taints(v).map_err(|r| bad(&r))?
            }
            "node-ip" => {
                config.node_ip = if v.is_empty() {
                    None
                } else {
                    Some(parse_ip(v).map_err(|r| bad(&r))?)
                }
            }
            "register-node" => config.register_node = flags::parse_bool(v).map_err(|r| bad(&r))?,
            "cgroups-per-qos" => {
                config.cgroups_per_qos = flags::parse_bool(v).map_err(|r| bad(&r))?
            }
            "cgroup-driver" => {
                config.cgroup_driver = crate::cm::CgroupDriver::parse(v).map_err(|r| bad(&r))?
            }
            "cgroup-root" => config.cgroup_root = v.to_string(),
            "enforce-node-allocatable" => {
                config.enforce_node_allocatable = comma_list(v).map(String::from).collect()
            }
            "pod-max-pids" => {
                config.pod_pids_limit = v.parse().map_err(|_| bad("expected an integer"))?
            }
            "kube-reserved-cgroup" => config.kube_reserved_cgroup = v.to_string(),
            "system-reserved-cgroup" => config.system_reserved_cgroup = v.to_string(),
            "fail-swap-on" => config.fail_swap_on = flags::parse_bool(v).map_err(|r| bad(&r))?,
            "local-storage-capacity-isolation" => {
                config.local_storage_capacity_isolation =
                    flags::parse_bool(v).map_err(|r| bad(&r))?
            }
            "volume-stats-agg-period" => {
                config.volume_stats_agg_period = parse_duration(v).map_err(|r| bad(&r))?
            }
            "node-status-update-frequency" => {
                config.node_status_update_frequency = parse_duration(v).map_err(|r| bad(&r))?
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
) -> Result<(), String> {
    for pair in text.split(',') {
        if pair.is_empty() {
            continue;
        }
        let (key, value) = pair
            .split_once(':')
            .ok_or_else(|| format!("malformed pair {pair:?}, expected key:value"))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("malformed pair {pair:?}, the header name is empty"));
        }
        headers
            .entry(key.to_string())
            .or_default()
            .push(value.trim().to_string());
    }
    Ok(())
}

/// Accepts `unix:///path` or `/path`; the agent talks to containerd over a unix socket only.
fn socket_path(endpoint: &str) -> Result<PathBuf, String> {
    let path = match endpoint.split_once("://") {
        Some(("unix", path)) => path,
        Some((scheme, _)) => {
            return Err(format!(
                "scheme {scheme}:// is not supported; use unix:///path/to/containerd.sock"
            ))
        }
        None => endpoint,
    };
    if !path.starts_with('/') {
        return Err(
            "expected an absolute socket path, e.g. unix:///run/containerd/containerd.sock".into(),
        );
    }
    Ok(PathBuf::from(path))
}

/// The items of a flag's comma-separated list (pflag's stringSlice): trimmed, empty ones
/// dropped.
fn comma_list(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn optional_path(text: &str) -> Option<PathBuf> {
    Some(PathBuf::from(text)).filter(|_| !text.is_empty())
}

fn non_empty_path(text: &str) -> Result<PathBuf, String> {
    if text.is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(PathBuf::from(text))
    }
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

fn parse_port(text: &str) -> Result<u16, String> {
    let n: i64 = text
        .parse()
        .map_err(|_| "expected an integer".to_string())?;
    u16::try_from(n).map_err(|_| "must be between 0 and 65535".to_string())
}

fn parse_ip(text: &str) -> Result<IpAddr, String> {
    text.parse()
        .map_err(|_| "expected an IP address".to_string())
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

fn validate(config: &Config) -> Result<(), ConfigError> {
    fn invalid(setting: &'static str, value: impl ToString, reason: &str) -> ConfigError {
        ConfigError::Invalid {
            setting,
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }
    if config.port == 0 {
        return Err(invalid("port (--port)", 0, "must be between 1 and 65535"));
    }
    if config.max_pods == 0 {
        return Err(invalid("maxPods (--max-pods)", 0, "must be greater than 0"));
    }
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
    for (setting, value) in [
        ("syncFrequency (--sync-frequency)", config.sync_frequency),
        ("--housekeeping-interval", config.housekeeping_interval),
        ("--image-gc-period", config.image_gc_period),
        (
            "fileCheckFrequency (--file-check-frequency)",
            config.file_check_frequency,
        ),
        (
            "httpCheckFrequency (--http-check-frequency)",
            config.http_check_frequency,
        ),
    ] {
        if value.is_zero() {
            return Err(invalid(setting, "0s", "must be greater than 0"));
        }
    }
    if config.container_log_max_files < 2 {
        return Err(invalid(
            "containerLogMaxFiles (--container-log-max-files)",
            config.container_log_max_files,
            "must be at least 2",
        ));
    }
    if config.container_log_max_size == 0 {
        return Err(invalid(
            "containerLogMaxSize (--container-log-max-size)",
            0,
            "must be greater than 0",
        ));
    }
    if config.logging_format != "text" && config.logging_format != "json" {
        return Err(invalid(
            "logging.format (--logging-format)",
            format!("{:?}", config.logging_format),
            "must be \"text\" or \"json\"",
        ));
    }
    if !config.pod_logs_dir.is_absolute() {
        return Err(invalid(
            "podLogsDir (--pod-logs-dir)",
            config.pod_logs_dir.display(),
            "must be an absolute path",
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
    if let Some(version) = &config.tls_min_version {
        if !TLS_VERSIONS.contains(&version.as_str()) {
            return Err(invalid(
                "tlsMinVersion (--tls-min-version)",
                version,
                "expected one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13",
            ));
        }
    }
    for suite in &config.tls_cipher_suites {
        if !TLS_CIPHER_SUITES.contains(&suite.as_str()) {
            return Err(ConfigError::Invalid {
                setting: "tlsCipherSuites (--tls-cipher-suites)",
                value: suite.clone(),
                reason: format!(
                    "unknown or unsupported cipher suite; supported: {}",
                    TLS_CIPHER_SUITES.join(", ")
                ),
            });
        }
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
    if let Err(reason) =
        crate::pod::admission::SysctlAllowlist::new(&config.allowed_unsafe_sysctls, None)
    {
        return Err(invalid(
            "allowedUnsafeSysctls (--allowed-unsafe-sysctls)",
            config.allowed_unsafe_sysctls.join(","),
            &reason.to_string(),
        ));
    }
    validate_image_gc(config)?;
    validate_image_pulls(config)?;
    validate_node(config)?;
    validate_eviction(config)?;
    validate_cgroups(config)?;
    if let Some(url) = &config.static_pod_url {
        check_manifest_url(url).map_err(|reason| ConfigError::Invalid {
            setting: "staticPodURL (--manifest-url)",
            value: url.clone(),
            reason,
        })?;
    }
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

/// Upstream's rules for the container manager's settings: known enforcement keys, `none`
/// alone, a reserved cgroup named for each reservation enforced on one, no enforcement
/// without cgroupsPerQOS, and cgroup paths in the driver's spelling.
fn validate_cgroups(config: &Config) -> Result<(), ConfigError> {
    use crate::cm;
    const SETTING: &str = "enforceNodeAllocatable (--enforce-node-allocatable)";
    let invalid = |setting: &'static str, value: String, reason: String| ConfigError::Invalid {
        setting,
        value,
        reason,
    };
    let list = &config.enforce_node_allocatable;
    let keys = [
        cm::ENFORCE_PODS,
        cm::ENFORCE_SYSTEM_RESERVED,
        cm::ENFORCE_KUBE_RESERVED,
        cm::ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
        cm::ENFORCE_KUBE_RESERVED_COMPRESSIBLE,
        cm::ENFORCE_NONE,
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
    if list.iter().any(|k| k == cm::ENFORCE_NONE) && list.len() > 1 {
        return Err(invalid(
            SETTING,
            list.join(","),
            "none must not be combined with any other entries".into(),
        ));
    }
    let enforcing = list.iter().any(|k| k != cm::ENFORCE_NONE);
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
                cm::ENFORCE_SYSTEM_RESERVED,
                cm::ENFORCE_SYSTEM_RESERVED_COMPRESSIBLE,
            ],
            &config.system_reserved_cgroup,
            "systemReservedCgroup (--system-reserved-cgroup)",
        ),
        (
            [
                cm::ENFORCE_KUBE_RESERVED,
                cm::ENFORCE_KUBE_RESERVED_COMPRESSIBLE,
            ],
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
            cm::CgroupName::parse(config.cgroup_driver, cgroup)
                .map_err(|reason| invalid(setting, cgroup.clone(), reason))?;
        }
    }
    // cgroupRoot: any path, read in the cgroupfs spelling for either driver as upstream
    // reads it (`cm::CgroupName::parse_cgroup_root`); nothing to refuse.
    Ok(())
}

/// Upstream's rules (pkg/kubelet/apis/config/validation): both thresholds are percentages
/// and low must stay below high, or GC could never reach its target.
fn validate_image_gc(config: &Config) -> Result<(), ConfigError> {
    let (high, low) = (
        config.image_gc_high_threshold_percent,
        config.image_gc_low_threshold_percent,
    );
    for (setting, value) in [
        (
            "imageGCHighThresholdPercent (--image-gc-high-threshold)",
            high,
        ),
        ("imageGCLowThresholdPercent (--image-gc-low-threshold)", low),
    ] {
        if !(0..=100).contains(&value) {
            return Err(ConfigError::Invalid {
                setting,
                value: value.to_string(),
                reason: "must be between 0 and 100, inclusive".into(),
            });
        }
    }
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
    if !config.image_fs_path.is_absolute() {
        return Err(ConfigError::Invalid {
            setting: "--image-fs-path",
            value: config.image_fs_path.display().to_string(),
            reason: "must be an absolute path".into(),
        });
    }
    Ok(())
}

/// The node settings' rules, as upstream's validation and flag checks state them.
fn validate_node(config: &Config) -> Result<(), ConfigError> {
    node::validate_node_labels(&config.node_labels).map_err(|reason| ConfigError::Invalid {
        setting: "--node-labels",
        value: config
            .node_labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
        reason,
    })?;
    if let Some(ip) = config.node_ip {
        node::check_node_ip(ip).map_err(|reason| ConfigError::Invalid {
            setting: "--node-ip",
            value: ip.to_string(),
            reason,
        })?;
    }
    for (setting, value) in [
        (
            "nodeStatusUpdateFrequency (--node-status-update-frequency)",
            config.node_status_update_frequency,
        ),
        (
            "nodeStatusReportFrequency",
            config.node_status_report_frequency,
        ),
    ] {
        if value.is_zero() {
            return Err(ConfigError::Invalid {
                setting,
                value: "0s".into(),
                reason: "must be greater than 0".into(),
            });
        }
    }
    if config.node_lease_duration_seconds <= 0 {
        return Err(ConfigError::Invalid {
            setting: "nodeLeaseDurationSeconds",
            value: config.node_lease_duration_seconds.to_string(),
            reason: "must be greater than 0".into(),
        });
    }
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

/// The HTTP source fetches http:// and https:// URLs; catching others at start-up gives the
/// user an immediate, clear error instead of a log line every period.
fn check_manifest_url(url: &str) -> Result<(), String> {
    if !url.starts_with("http://") && !url.starts_with("https://") {
        return Err("expected an http:// or https:// URL".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
