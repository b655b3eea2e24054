//! Every setting of the agent, declared once: its `Config` field and default, and for most
//! its flag (name, value name, help line, parser), its KubeletConfiguration field (dotted
//! path, reader, /configz rendering) and its own rule. `declare.rs` turns this into the
//! struct, the defaults, the flag table, the file reading, /configz and validation.
//!
//! To add a setting: one entry here, then the code that uses it. A setting whose flag and
//! field do not map one-to-one goes under `others` and is applied in `mod.rs` by hand.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;

use super::codec::{arg, read, rule, show};
use super::error::ConfigError;
use super::features::FeatureGates;
use super::node::{self, EvictionThresholds};
use super::{
    AuthorizationMode, SwapBehavior, DEFAULT_CONTAINERD_NAMESPACE, DEFAULT_IMAGE_FS_PATH,
    DEFAULT_IMAGE_GC_PERIOD, DEFAULT_POD_INFRA_CONTAINER_IMAGE, DEFAULT_ROOT_DIR,
    LEGACY_READ_ONLY_PORT,
};
use crate::vocabulary::quantity::Quantity;

declare_config! {
    defaults(with_config_file);
    settings {
        /// --pod-manifest-path / staticPodPath.
        pub static_pod_path: Option<PathBuf> = None,
            flag("pod-manifest-path", "PATH", "folder (or file) of static pod manifests (staticPodPath)", arg::optional_path),
            file("staticPodPath", read::optional_path, show::optional_path);
        /// --manifest-url / staticPodURL.
        pub static_pod_url: Option<String> = None,
            flag("manifest-url", "URL", "URL to poll for static pods, a Pod or a PodList (staticPodURL; http:// only)", arg::optional_text),
            file("staticPodURL", read::optional_text, show::optional),
            check(rule::manifest_url);
        /// --root-dir (default /var/lib/kubelet-rs).
        pub root_dir: PathBuf = PathBuf::from(DEFAULT_ROOT_DIR),
            flag("root-dir", "PATH", "directory for the agent's state (default /var/lib/kubelet-rs)", arg::path);
        /// --kubeconfig: API server credentials; None runs standalone.
        pub kubeconfig: Option<PathBuf> = None,
            flag("kubeconfig", "FILE", "kubeconfig for the API server (cluster mode)", arg::optional_path);
        /// --bootstrap-kubeconfig.
        pub bootstrap_kubeconfig: Option<PathBuf> = None,
            flag("bootstrap-kubeconfig", "FILE", "bootstrap kubeconfig used to obtain a client certificate", arg::optional_path);
        /// containerd namespace the agent works in (--containerd-namespace).
        pub containerd_namespace: String = DEFAULT_CONTAINERD_NAMESPACE.to_string(),
            flag("containerd-namespace", "NAME", "containerd namespace the agent works in: letters and digits joined by single . _ or - (default kubelet-rs)", arg::containerd_namespace);
        pub pod_infra_container_image: String = DEFAULT_POD_INFRA_CONTAINER_IMAGE.to_string(),
            flag("pod-infra-container-image", "IMAGE", "sandbox (pause) image (default registry.k8s.io/pause:3.10)", arg::non_empty_text);
        /// --address / address: the main (10250) server's listen address (default 0.0.0.0).
        pub address: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            flag("address", "IP", "IP address the main server listens on (default 0.0.0.0)", arg::ip),
            file("address", read::ip, show::displayed);
        /// --port / port: the main server's port (default 10250).
        pub port: u16 = 10250,
            flag("port", "PORT", "port of the main server (default 10250)", arg::port),
            file("port", read::port_or_default, show::plain),
            check(rule::serving_port);
        /// 0 = disabled.
        ///
        /// Default as upstream: 10255 when no `--config` file is given (the kubelet's legacy
        /// command-line default, still applied by its `applyLegacyDefaults`), 0 (disabled) when a
        /// config file is given and does not set `readOnlyPort` (the v1beta1 default).
        pub read_only_port: u16 = if with_config_file { 0 } else { LEGACY_READ_ONLY_PORT },
            flag("read-only-port", "PORT", "read-only port, 0 disables (default 10255 without --config, else 0)", arg::port),
            file("readOnlyPort", read::port_or_default, show::plain);
        /// 0 = disabled.
        pub healthz_port: u16 = 10248,
            flag("healthz-port", "PORT", "healthz port, 0 disables (default 10248)", arg::port),
            file("healthzPort", read::port, show::plain);
        pub healthz_bind_address: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST),
            flag("healthz-bind-address", "IP", "healthz listen address (default 127.0.0.1)", arg::ip),
            file("healthzBindAddress", read::ip, show::displayed);
        pub max_pods: u32 = 110,
            flag("max-pods", "N", "most pods this node runs (default 110)", arg::max_pods),
            file("maxPods", read::count_or_default, show::plain),
            check(rule::positive_count);
        pub sync_frequency: Duration = Duration::from_secs(60),
            flag("sync-frequency", "DURATION", "max period between pod syncs (default 1m0s)", arg::duration),
            file("syncFrequency", read::duration, show::duration),
            check(rule::positive_duration);
        /// How often the stats collector samples cgroups and /proc (cAdvisor's housekeeping).
        pub housekeeping_interval: Duration = Duration::from_secs(10),
            flag("housekeeping-interval", "DURATION", "interval between container stats samples (default 10s)", arg::duration),
            check(rule::positive_duration);
        pub file_check_frequency: Duration = Duration::from_secs(20),
            flag("file-check-frequency", "DURATION", "period of the manifest folder re-read (default 20s)", arg::duration),
            file("fileCheckFrequency", read::duration, show::duration),
            check(rule::positive_duration);
        pub http_check_frequency: Duration = Duration::from_secs(20),
            flag("http-check-frequency", "DURATION", "period of the manifest URL poll (default 20s)", arg::duration),
            file("httpCheckFrequency", read::duration, show::duration),
            check(rule::positive_duration);
        pub container_log_max_size: u64 = 10 * 1024 * 1024,
            flag("container-log-max-size", "QUANTITY", "size at which a container log is rotated (default 10Mi)", arg::size),
            file("containerLogMaxSize", read::size, show::size),
            check(rule::positive_size);
        pub container_log_max_files: u32 = 5,
            flag("container-log-max-files", "N", "most log files kept per container, >= 2 (default 5)", arg::log_files),
            file("containerLogMaxFiles", read::count, show::plain),
            check(rule::at_least_two);
        /// podLogsDir (default /var/log/pods).
        pub pod_logs_dir: PathBuf = PathBuf::from("/var/log/pods"),
            flag("pod-logs-dir", "PATH", "where pod logs are written (podLogsDir, default /var/log/pods)", arg::path),
            file("podLogsDir", read::path, show::path),
            check(rule::absolute);
        pub cni_conf_dir: PathBuf = PathBuf::from("/etc/cni/net.d"),
            flag("cni-conf-dir", "PATH", "CNI network configuration folder (default /etc/cni/net.d)", arg::path);
        pub cni_bin_dirs: Vec<PathBuf> = vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")],
            flag("cni-bin-dir", "PATHS", "comma-separated CNI plugin folders (default /opt/cni/bin,/usr/lib/cni)", arg::folders);
        /// "text" or "json".
        pub logging_format: String = "text".to_string(),
            flag("logging-format", "FORMAT", "log format, text or json (logging.format, default text)", arg::text),
            file("logging.format", read::text, show::plain),
            check(rule::logging_format);
        /// --tls-cert-file / tlsCertFile: the serving certificate (chain) of the main server.
        pub tls_cert_file: Option<PathBuf> = None,
            flag("tls-cert-file", "FILE", "serving certificate (chain) of the main server (tlsCertFile); else a self-signed one in --cert-dir", arg::optional_path),
            file("tlsCertFile", read::optional_path);
        /// --tls-private-key-file / tlsPrivateKeyFile.
        pub tls_private_key_file: Option<PathBuf> = None,
            flag("tls-private-key-file", "FILE", "private key of --tls-cert-file (tlsPrivateKeyFile)", arg::optional_path),
            file("tlsPrivateKeyFile", read::optional_path);
        /// --cert-dir: where the certificates are kept (default `<root-dir>/pki`): the self-signed
        /// serving pair when no certificate file is given, and the pairs obtained through the
        /// certificates API (`kubelet-client-current.pem`, `kubelet-server-current.pem`).
        pub cert_dir: PathBuf = PathBuf::from(DEFAULT_ROOT_DIR).join("pki"),
            flag("cert-dir", "PATH", "where the TLS certificates are kept: the self-signed or bootstrapped serving one and the bootstrapped client one (default <root-dir>/pki)", arg::path);
        /// --rotate-certificates / rotateCertificates: renew the client certificate through the
        /// certificates API before it expires (default false, as upstream).
        pub rotate_certificates: bool = false,
            flag("rotate-certificates", "", "renew the client certificate through the certificates.k8s.io API as it nears expiry (rotateCertificates)", arg::boolean),
            file("rotateCertificates", read::boolean, show::when_true);
        /// --rotate-server-certificates / serverTLSBootstrap: the serving certificate comes from
        /// a kubernetes.io/kubelet-serving CSR (and is renewed) instead of a file or self-signed.
        pub server_tls_bootstrap: bool = false,
            flag("rotate-server-certificates", "", "request the serving certificate through the certificates.k8s.io API and renew it (serverTLSBootstrap)", arg::boolean),
            file("serverTLSBootstrap", read::boolean, show::when_true);
        /// --tls-min-version / tlsMinVersion (`VersionTLS12`, ...); None = the TLS library default.
        pub tls_min_version: Option<String> = None,
            flag("tls-min-version", "VERSION", "lowest TLS version: VersionTLS12 or VersionTLS13 (tlsMinVersion)", arg::optional_text),
            file("tlsMinVersion", read::optional_text, show::optional),
            check(rule::tls_version);
        /// --allowed-unsafe-sysctls / allowedUnsafeSysctls: sysctls (or prefixes ending in `*`)
        /// pods may set beyond the safe ones.
        pub allowed_unsafe_sysctls: Vec<String> = Vec::new(),
            flag("allowed-unsafe-sysctls", "NAMES", "comma-separated unsafe sysctls or prefixes ending in * that pods may set (allowedUnsafeSysctls)", arg::list),
            file("allowedUnsafeSysctls", read::list, show::non_empty_list),
            check(rule::unsafe_sysctls);
        /// --tls-cipher-suites / tlsCipherSuites: Go names of TLS 1.2 suites; empty = defaults.
        pub tls_cipher_suites: Vec<String> = Vec::new(),
            flag("tls-cipher-suites", "NAMES", "comma-separated TLS 1.2 cipher suites, Go names (tlsCipherSuites)", arg::list),
            file("tlsCipherSuites", read::list, show::non_empty_list),
            check(rule::cipher_suites);
        /// --client-ca-file / authentication.x509.clientCAFile.
        pub client_ca_file: Option<PathBuf> = None,
            flag("client-ca-file", "FILE", "CA bundle that client certificates are verified against (authentication.x509.clientCAFile)", arg::optional_path),
            file("authentication.x509.clientCAFile", read::optional_path, show::optional_path);
        /// --anonymous-auth / authentication.anonymous.enabled.
        pub anonymous_auth: bool = !with_config_file,
            flag("anonymous-auth", "", "let unauthenticated requests in as system:anonymous (default true without --config)", arg::boolean),
            file("authentication.anonymous.enabled", read::boolean, show::plain);
        /// --authentication-token-webhook / authentication.webhook.enabled.
        pub authentication_token_webhook: bool = with_config_file,
            flag("authentication-token-webhook", "", "check bearer tokens with TokenReview (default false without --config)", arg::boolean),
            file("authentication.webhook.enabled", read::boolean, show::plain);
        /// --authentication-token-webhook-cache-ttl / authentication.webhook.cacheTTL.
        pub authentication_token_webhook_cache_ttl: Duration = Duration::from_secs(120),
            flag("authentication-token-webhook-cache-ttl", "DURATION", "how long TokenReview answers are cached (default 2m0s)", arg::duration),
            file("authentication.webhook.cacheTTL", read::duration, show::duration);
        /// --authorization-mode / authorization.mode.
        pub authorization_mode: AuthorizationMode = if with_config_file {
            AuthorizationMode::Webhook
        } else {
            AuthorizationMode::AlwaysAllow
        },
            flag("authorization-mode", "MODE", "AlwaysAllow or Webhook (SubjectAccessReview) (default AlwaysAllow without --config)", arg::authorization_mode),
            file("authorization.mode", read::authorization_mode, show::authorization_mode);
        /// --authorization-webhook-cache-authorized-ttl / authorization.webhook.cacheAuthorizedTTL.
        pub authorization_webhook_cache_authorized_ttl: Duration = Duration::from_secs(300),
            flag("authorization-webhook-cache-authorized-ttl", "DURATION", "how long 'allowed' answers are cached (default 5m0s)", arg::duration),
            file("authorization.webhook.cacheAuthorizedTTL", read::duration, show::duration);
        /// --authorization-webhook-cache-unauthorized-ttl / authorization.webhook.cacheUnauthorizedTTL.
        pub authorization_webhook_cache_unauthorized_ttl: Duration = Duration::from_secs(30),
            flag("authorization-webhook-cache-unauthorized-ttl", "DURATION", "how long 'denied' answers are cached (default 30s)", arg::duration),
            file("authorization.webhook.cacheUnauthorizedTTL", read::duration, show::duration);
        /// --image-gc-high-threshold / imageGCHighThresholdPercent: image-fs use (percent) at
        /// which image GC starts; 100 disables it. A pointer upstream: an explicit 0 is kept.
        pub image_gc_high_threshold_percent: i32 = 85,
            flag("image-gc-high-threshold", "PERCENT", "image-fs use at which image GC starts, 100 disables (imageGCHighThresholdPercent, default 85)", arg::int32),
            file("imageGCHighThresholdPercent", read::int32, show::plain),
            check(rule::percent);
        /// --image-gc-low-threshold / imageGCLowThresholdPercent: the use image GC frees down to.
        pub image_gc_low_threshold_percent: i32 = 80,
            flag("image-gc-low-threshold", "PERCENT", "image-fs use image GC frees down to, below the high threshold (imageGCLowThresholdPercent, default 80)", arg::int32),
            file("imageGCLowThresholdPercent", read::int32, show::plain),
            check(rule::percent);
        /// --minimum-image-ttl-duration / imageMinimumGCAge: how long after the agent first sees
        /// an unused image it may be collected.
        pub image_minimum_gc_age: Duration = Duration::from_secs(120),
            flag("minimum-image-ttl-duration", "DURATION", "least age of an unused image before GC may remove it (imageMinimumGCAge, default 2m0s)", arg::duration),
            file("imageMinimumGCAge", read::duration, show::duration);
        /// imageMaximumGCAge: an image unused for longer than this is removed whatever the disk
        /// use; zero (the default) turns that off.
        pub image_maximum_gc_age: Duration = Duration::ZERO,
            file("imageMaximumGCAge", read::duration, show::duration);
        /// --image-gc-period (kubelet-rs only): upstream's fixed ImageGCPeriod, a flag so tests
        /// can shorten it.
        pub image_gc_period: Duration = DEFAULT_IMAGE_GC_PERIOD,
            flag("image-gc-period", "DURATION", "kubelet-rs only: period of image GC (upstream's fixed 5m0s)", arg::duration),
            check(rule::positive_duration);
        /// --image-fs-path (kubelet-rs only): a path on the filesystem holding containerd's
        /// content and snapshots, whose statvfs drives image GC (upstream asks the CRI instead).
        pub image_fs_path: PathBuf = PathBuf::from(DEFAULT_IMAGE_FS_PATH),
            flag("image-fs-path", "PATH", "kubelet-rs only: a path on the filesystem holding containerd's images, measured for image GC (default /var/lib/containerd)", arg::path),
            check(rule::absolute);
        /// --containerd-config (kubelet-rs only): containerd's config file, read for the runtimes
        /// RuntimeClass handlers name (`runtime::handlers`), as containerd's CRI plugin reads
        /// it; the default is containerd's own.
        pub containerd_config: PathBuf = PathBuf::from("/etc/containerd/config.toml"),
            flag("containerd-config", "PATH", "kubelet-rs only: containerd's config file, whose CRI runtimes are the RuntimeClass handlers this node serves (default /etc/containerd/config.toml)", arg::path);
        /// --enable-debugging-handlers / enableDebuggingHandlers: exec, attach, portForward, run,
        /// containerLogs, runningpods and configz are served (default true); off, upstream's
        /// debugging paths answer 405 and /configz is not there. A pointer upstream: an
        /// explicit false is kept.
        pub enable_debugging_handlers: bool = true,
            flag("enable-debugging-handlers", "", "serve exec, attach, portForward, run, containerLogs, runningpods and configz (enableDebuggingHandlers, default true)", arg::boolean),
            file("enableDebuggingHandlers", read::boolean, show::plain);
        /// enableSystemLogHandler (file only, as upstream): `/logs/` serves the node's /var/log
        /// (default true; only with the debugging handlers, as upstream).
        pub enable_system_log_handler: bool = true,
            file("enableSystemLogHandler", read::boolean, show::plain);
        /// enableSystemLogQuery (file only): `/logs/?query=` reads services' journals and log
        /// files (default false; needs enableSystemLogHandler and the NodeLogQuery gate).
        pub enable_system_log_query: bool = false,
            file("enableSystemLogQuery", read::boolean, show::when_true);
        /// --enable-server / enableServer: the main server (10250) is started (default true); off,
        /// only the read-only and healthz servers can be, as upstream.
        pub enable_server: bool = true,
            flag("enable-server", "", "start the main server on --port (enableServer, default true)", arg::boolean),
            file("enableServer", read::boolean, show::plain);
        /// --seccomp-default / seccompDefault: a container (and the pod sandbox) whose pod and
        /// container set no seccompProfile runs with the runtime's default profile rather than
        /// unconfined.
        pub seccomp_default: bool = false,
            flag("seccomp-default", "", "containers that ask for no seccomp profile get the runtime's default one (seccompDefault, default false)", arg::boolean),
            file("seccompDefault", read::boolean, show::plain);
        /// --register-with-taints / registerWithTaints.
        pub register_with_taints: Vec<Taint> = Vec::new(),
            flag("register-with-taints", "K=V:EFFECT[,...]", "taints the Node is registered with (registerWithTaints)", arg::taints),
            file("registerWithTaints", read::taints, show::non_empty_list);
        /// --node-ip: the node's InternalIP; None = the host's default-route address.
        pub node_ip: Option<IpAddr> = None,
            flag("node-ip", "IP", "the node's InternalIP (default: the address of the default route's interface)", arg::optional_ip),
            check(rule::node_ip);
        /// --fail-swap-on / failSwapOn (default true): refuse to start while the node has swap
        /// on (`cm::swap`).
        pub fail_swap_on: bool = true,
            flag("fail-swap-on", "", "refuse to start while the node has swap on (failSwapOn, default true)", arg::boolean),
            file("failSwapOn", read::boolean, show::plain);
        /// --local-storage-capacity-isolation / localStorageCapacityIsolation (default true):
        /// the eviction manager enforces emptyDir sizeLimits and ephemeral-storage limits.
        pub local_storage_capacity_isolation: bool = true,
            flag("local-storage-capacity-isolation", "", "evict pods past their emptyDir sizeLimit or ephemeral-storage limits (localStorageCapacityIsolation, default true)", arg::boolean),
            file("localStorageCapacityIsolation", read::boolean, show::plain);
        /// --volume-stats-agg-period / volumeStatsAggPeriod (default 1m): how long a measured
        /// directory usage (volumes, writable layers, logs) is reused before it is walked again.
        pub volume_stats_agg_period: Duration = Duration::from_secs(60),
            flag("volume-stats-agg-period", "DURATION", "how long a measured directory usage (volumes, writable layers, logs) is reused before it is measured again (volumeStatsAggPeriod, default 1m0s)", arg::duration),
            file("volumeStatsAggPeriod", read::duration, show::duration);
        /// --register-node / registerNode: create the Node object (default true). A pointer
        /// upstream: an explicit false is kept.
        pub register_node: bool = true,
            flag("register-node", "", "register the Node with the API server (registerNode, default true)", arg::boolean),
            file("registerNode", read::boolean, show::plain);
        /// --cluster-domain / clusterDomain: the cluster's DNS domain, searched by those pods.
        pub cluster_domain: String = String::new(),
            flag("cluster-domain", "DOMAIN", "the cluster's DNS domain, searched by those pods (clusterDomain)", arg::text),
            file("clusterDomain", read::text, show::non_empty_text);
        /// --resolv-conf / resolvConf: the host resolver file of pods with dnsPolicy Default
        /// (default /etc/resolv.conf; None when set to "": no host resolver).
        pub resolv_conf: Option<PathBuf> = Some(PathBuf::from("/etc/resolv.conf")),
            flag("resolv-conf", "PATH", "the host resolver file of pods with dnsPolicy Default; \"\" for none (resolvConf, default /etc/resolv.conf)", arg::resolv_conf),
            file("resolvConf", read::resolv_conf, show::resolv_conf);
        /// --eviction-pressure-transition-period (default 5m): how long a pressure condition
        /// stays after its threshold was last crossed.
        pub eviction_pressure_transition_period: Duration = Duration::from_secs(300),
            flag("eviction-pressure-transition-period", "DURATION", "how long a pressure condition stays after its threshold is no longer crossed (evictionPressureTransitionPeriod, default 5m)", arg::duration),
            file("evictionPressureTransitionPeriod", read::duration, show::duration);
        /// --eviction-max-pod-grace-period: the longest grace period of a soft eviction.
        /// Not a pointer upstream: 0 is the default (no cap from the agent).
        pub eviction_max_pod_grace_period: i32 = 0,
            flag("eviction-max-pod-grace-period", "SECONDS", "the longest grace period a soft eviction gives a pod; 0 or less: the pod's own (evictionMaxPodGracePeriod)", arg::seconds),
            file("evictionMaxPodGracePeriod", read::int32, show::plain);
        /// --cgroups-per-qos / cgroupsPerQOS: kubepods, the QoS parents and limited pod cgroups
        /// (default true). A pointer upstream: an explicit false is kept.
        pub cgroups_per_qos: bool = true,
            flag("cgroups-per-qos", "", "create kubepods, the QoS class cgroups and a limited cgroup per pod (cgroupsPerQOS, default true)", arg::boolean),
            file("cgroupsPerQOS", read::boolean, show::plain);
        /// --cgroup-root / cgroupRoot: where kubepods goes (default the hierarchy's root, "/").
        /// Shown in /configz even as "/": the agent always has a root (upstream's "" means
        /// the same), and the node e2e runner sets "/" and reads it back from there.
        pub cgroup_root: String = "/".to_string(),
            flag("cgroup-root", "PATH", "the cgroup kubepods goes under (cgroupRoot, default /)", arg::text),
            file("cgroupRoot", read::text, show::non_empty_text);
        /// --enforce-node-allocatable / enforceNodeAllocatable (default ["pods"]). An explicit
        /// empty list in the file is kept (nothing enforced), as upstream.
        pub enforce_node_allocatable: Vec<String> = vec![crate::config::ENFORCE_PODS.to_string()],
            flag("enforce-node-allocatable", "LIST", "comma-separated: pods, system-reserved, kube-reserved, system-reserved-compressible, kube-reserved-compressible, or none (enforceNodeAllocatable, default pods)", arg::list),
            file("enforceNodeAllocatable", read::list_kept, show::plain);
        /// --pod-max-pids / podPidsLimit: pids.max of each pod's cgroup; -1 (default) or 0 is
        /// no limit. A pointer upstream: an explicit 0 is kept.
        pub pod_pids_limit: i64 = -1,
            flag("pod-max-pids", "N", "pids.max of each pod's cgroup, -1 for none (podPidsLimit, default -1)", arg::int64),
            file("podPidsLimit", read::int64, show::plain);
        /// --kube-reserved-cgroup / kubeReservedCgroup: the cgroup kubeReserved is enforced on.
        pub kube_reserved_cgroup: String = String::new(),
            flag("kube-reserved-cgroup", "PATH", "the existing cgroup kubeReserved is enforced on (kubeReservedCgroup)", arg::text),
            file("kubeReservedCgroup", read::text, show::non_empty_text);
        /// --system-reserved-cgroup / systemReservedCgroup.
        pub system_reserved_cgroup: String = String::new(),
            flag("system-reserved-cgroup", "PATH", "the existing cgroup systemReserved is enforced on (systemReservedCgroup)", arg::text),
            file("systemReservedCgroup", read::text, show::non_empty_text);
        /// --node-status-update-frequency / nodeStatusUpdateFrequency: how often the node's
        /// status is computed (default 10s).
        pub node_status_update_frequency: Duration = Duration::from_secs(10),
            flag("node-status-update-frequency", "DURATION", "how often the node's status is computed (nodeStatusUpdateFrequency, default 10s)", arg::duration),
            file("nodeStatusUpdateFrequency", read::duration, show::duration),
            check(rule::positive_duration);
        /// nodeStatusReportFrequency: longest time between status reports when nothing changed
        /// (default 5m, or nodeStatusUpdateFrequency when the file sets only that).
        pub node_status_report_frequency: Duration = Duration::from_secs(300),
            file("nodeStatusReportFrequency", read::duration, show::duration),
            check(rule::positive_duration);
        /// nodeLeaseDurationSeconds: the Lease's duration; it is renewed every quarter of it.
        /// Not a pointer upstream: 0 means the default.
        pub node_lease_duration_seconds: i32 = 40,
            file("nodeLeaseDurationSeconds", read::int32_or_default, show::plain),
            check(rule::positive_int32);
        /// memorySwap.swapBehavior: what swap containers may use.
        pub swap_behavior: SwapBehavior = SwapBehavior::NoSwap,
            file("memorySwap.swapBehavior", read::swap_behavior, show::swap_behavior);
    }
    others {
        /// Node name: --hostname-override, else the host name, lower-cased.
        pub node_name: String = String::new();
        /// --manifest-url-header / staticPodURLHeader: the first flag replaces the file's
        /// headers, later ones add to them.
        pub static_pod_url_header: BTreeMap<String, Vec<String>> = BTreeMap::new();
        /// Path of containerd's socket (the unix:// prefix stripped); a bad file value is
        /// reported against the setting, not the field.
        pub container_runtime_endpoint: PathBuf = PathBuf::from("/run/containerd/containerd.sock");
        /// Where the /var/log/containers symlinks go.
        pub container_logs_dir: PathBuf = PathBuf::from("/var/log/containers");
        /// -v / logging.verbosity: the only flag with a one-letter form.
        pub verbosity: u8 = 0;
        /// --config: the KubeletConfiguration file that was loaded, if any.
        pub config_file: Option<PathBuf> = None;
        /// --config-dir: the folder of drop-in files merged over it, if any.
        pub config_dir: Option<PathBuf> = None;
        /// Upstream flags given on the command line that the agent accepts but does not act on
        /// yet ("--runtime-cgroups"), in command-line order, once each.
        pub unimplemented_flags: Vec<String> = Vec::new();
        /// Upstream KubeletConfiguration fields (dotted paths) set to a non-default value that
        /// the agent accepts but does not act on yet.
        pub unimplemented_config_fields: Vec<String> = Vec::new();
        /// Fields of the configuration files that upstream's type does not have: dropped, as
        /// upstream's lenient decoding drops them.
        pub unknown_config_fields: Vec<String> = Vec::new();
        /// The not-implemented fields' values as the files set them, for /configz.
        pub(crate) unimplemented_config_values: serde_json::Map<String, serde_json::Value> = serde_json::Map::new();
        /// featureGates / --feature-gates: the gates set; `feature_gates.enabled(Gate::..)`
        /// gives upstream's default for the rest. Every flag adds over the file's gates.
        pub feature_gates: FeatureGates = FeatureGates::default();
        /// The folder `/logs/` serves (/var/log; not a flag, tests point it elsewhere).
        pub(crate) node_log_dir: PathBuf = PathBuf::from("/var/log");
        /// The journalctl the node log query runs (found on PATH; tests use a fake).
        pub(crate) journalctl: PathBuf = PathBuf::from("journalctl");
        /// --serialize-image-pulls / serializeImagePulls: one image pull at a time. The file's
        /// maxParallelImagePulls turns it off unless the file says otherwise.
        pub serialize_image_pulls: bool = true;
        /// maxParallelImagePulls (file only, as upstream has no flag): with serialized pulls
        /// off, at most this many at once; None is no limit.
        pub max_parallel_image_pulls: Option<i32> = None;
        /// --insecure-registry (kubelet-rs only, repeatable): registries other than loopback
        /// ones that may be reached over plain HTTP (`host[:port]`, a bare host, or a CIDR).
        /// Upstream leaves this to the CRI runtime's configuration.
        pub insecure_registries: Vec<String> = Vec::new();
        /// --node-labels (flag only, as upstream): labels added to the Node at registration.
        pub node_labels: BTreeMap<String, String> = BTreeMap::new();
        /// --kube-reserved / kubeReserved: resource name (cpu, memory, ephemeral-storage, pid)
        /// to the amount held back for Kubernetes daemons.
        pub kube_reserved: BTreeMap<String, Quantity> = BTreeMap::new();
        /// --system-reserved / systemReserved: the same for the OS's daemons.
        pub system_reserved: BTreeMap<String, Quantity> = BTreeMap::new();
        /// --eviction-hard / evictionHard: signal to threshold (upstream's Linux defaults).
        pub eviction_hard: EvictionThresholds = node::default_eviction_hard();
        /// --eviction-soft / evictionSoft: thresholds acted on once crossed for their grace period.
        pub eviction_soft: EvictionThresholds = EvictionThresholds::new();
        /// --eviction-soft-grace-period / evictionSoftGracePeriod: signal to how long its soft
        /// threshold must be crossed.
        pub eviction_soft_grace_period: BTreeMap<String, Duration> = BTreeMap::new();
        /// --eviction-minimum-reclaim / evictionMinimumReclaim: signal to how much more than its
        /// threshold must be available before its pressure ends.
        pub eviction_minimum_reclaim: EvictionThresholds = EvictionThresholds::new();
        /// --cluster-dns / clusterDNS: the DNS servers of pods with dnsPolicy ClusterFirst.
        pub cluster_dns: Vec<IpAddr> = Vec::new();
        /// --cgroup-driver / cgroupDriver: how cgroups are named (default cgroupfs); a bad
        /// file value is reported against the setting, not the field.
        pub cgroup_driver: crate::vocabulary::cgroup_names::CgroupDriver = crate::vocabulary::cgroup_names::CgroupDriver::Cgroupfs;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::io::Write;

    use serde_json::{json, Value};

    use super::*;
    use crate::config::{configz_json, flags, load_from_args, schema};

    /// The value at a dotted path of a /configz document.
    fn at<'v>(doc: &'v Value, path: &str) -> Option<&'v Value> {
        path.split('.').try_fold(doc, |v, key| v.get(key))
    }

    fn load(args: &[&str]) -> Config {
        let mut argv = vec!["kubelet-rs", "--hostname-override=n"];
        argv.extend_from_slice(args);
        load_from_args(argv).unwrap()
    }

    #[test]
    fn every_declared_setting_has_its_own_field_flag_and_file_field() {
        let mut fields = BTreeSet::new();
        let mut files = BTreeSet::new();
        for d in DECLARED {
            assert!(fields.insert(d.field), "{} declared twice", d.field);
            if let Some(file) = d.file {
                assert!(files.insert(file), "{file} declared twice");
                let top = file.split('.').next().unwrap_or(file);
                assert!(
                    schema::FIELDS.iter().any(|f| f.name == top),
                    "{file} is not a KubeletConfiguration field"
                );
            }
            assert!(
                d.flag.is_some() || d.file.is_some(),
                "{} has neither flag nor file field",
                d.field
            );
            assert!(
                !d.configz || d.file.is_some(),
                "{}: /configz needs the file's name",
                d.field
            );
        }
        let mut all: Vec<&str> = flags::all_flags().map(|f| f.name).collect();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "a flag declared and in the table");
    }

    /// The schema table (upstream's fields, for what the agent does not read) must mark a
    /// declared field as read, or a file setting it would also be warned about.
    #[test]
    fn every_declared_file_field_is_marked_read_in_the_schema() {
        for file in DECLARED.iter().filter_map(|d| d.file) {
            let mut fields = schema::FIELDS;
            let mut parts = file.split('.').peekable();
            while let Some(part) = parts.next() {
                let field = fields
                    .iter()
                    .find(|f| f.name == part)
                    .unwrap_or_else(|| panic!("{file}: no {part} in the schema"));
                match (field.kind, parts.peek()) {
                    (schema::Kind::Implemented, None) => {}
                    (schema::Kind::Object(children), Some(_)) => fields = children,
                    _ => panic!("{file} is not marked read (done) in the schema"),
                }
            }
        }
    }

    #[test]
    fn every_declared_flag_is_parsed_and_applied_by_its_declaration() {
        for d in DECLARED {
            let Some(flag) = d.flag else { continue };
            let spec = flags::spec(flag).unwrap_or_else(|| panic!("--{flag} not parsed"));
            assert_eq!(spec.support, flags::Support::Implemented, "--{flag}");
            let mut config = Config::defaults(false);
            assert!(
                config.apply_declared_flag(flag, "").is_some(),
                "--{flag} not applied"
            );
        }
        let mut config = Config::defaults(false);
        assert!(config
            .apply_declared_flag("hostname-override", "x")
            .is_none());
    }

    #[test]
    fn a_declared_boolean_flag_takes_no_separate_value() {
        let c = load(&["--rotate-certificates", "--fail-swap-on=false"]);
        assert!(c.rotate_certificates);
        assert!(!c.fail_swap_on);
    }

    #[test]
    fn declared_rules_name_the_field_and_the_flag() {
        for (args, message) in [
            (
                &["--max-pods=0"][..],
                "invalid maxPods (--max-pods): 0: must be greater than 0",
            ),
            (
                &["--housekeeping-interval=0s"][..],
                "invalid --housekeeping-interval: 0s: must be greater than 0",
            ),
            (
                &["--image-gc-high-threshold=101"][..],
                "invalid imageGCHighThresholdPercent (--image-gc-high-threshold): 101: \
                 must be between 0 and 100, inclusive",
            ),
        ] {
            let mut argv = vec!["kubelet-rs", "--hostname-override=n"];
            argv.extend_from_slice(args);
            let err = load_from_args(argv).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
    }

    /// /configz written back as a KubeletConfiguration file loads into the same values of
    /// every declared setting, from the defaults and from non-default values.
    #[test]
    fn declared_settings_round_trip_through_configz() {
        for start in [
            load(&[]),
            load(&[
                "--max-pods=7",
                "--sync-frequency=3s",
                "--port=11250",
                "--read-only-port=10255",
                "--healthz-port=0",
                "--address=127.0.0.1",
                "--container-log-max-size=20Mi",
                "--container-log-max-files=3",
                "--pod-logs-dir=/logs",
                "--logging-format=json",
                "--rotate-certificates",
                "--rotate-server-certificates",
                "--tls-min-version=VersionTLS12",
                "--tls-cipher-suites=TLS_AES_128_GCM_SHA256",
                "--allowed-unsafe-sysctls=net.core.*",
                "--client-ca-file=/ca.crt",
                "--anonymous-auth=false",
                "--authentication-token-webhook",
                "--authorization-mode=Webhook",
                "--authorization-webhook-cache-authorized-ttl=1m",
                "--image-gc-high-threshold=90",
                "--image-gc-low-threshold=70",
                "--minimum-image-ttl-duration=10m",
                "--enable-debugging-handlers=false",
                "--seccomp-default",
                "--register-with-taints=a=b:NoSchedule",
                "--pod-manifest-path=/manifests",
                "--manifest-url=http://127.0.0.1/pods",
                "--cluster-domain=cluster.local",
                "--resolv-conf=",
                "--cgroup-root=/custom",
                "--enforce-node-allocatable=",
                "--cgroups-per-qos=false",
                "--pod-max-pids=100",
                "--eviction-max-pod-grace-period=30",
                "--node-status-update-frequency=20s",
            ]),
        ] {
            let first = configz_json(&start);
            let mut document = first["kubeletconfig"].clone();
            document["apiVersion"] = json!("kubelet.config.k8s.io/v1beta1");
            document["kind"] = json!("KubeletConfiguration");
            let mut file = tempfile::Builder::new().suffix(".json").tempfile().unwrap();
            file.write_all(document.to_string().as_bytes()).unwrap();
            let again = configz_json(&load(&["--config", file.path().to_str().unwrap()]));
            for d in DECLARED.iter().filter(|d| d.configz) {
                let path = format!("kubeletconfig.{}", d.file.unwrap());
                assert_eq!(at(&again, &path), at(&first, &path), "{path}");
            }
        }
    }
}
