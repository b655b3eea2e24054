//! Command-line parsing with pflag's rules, which the kubelet uses: `--flag=value` and
//! `--flag value`; booleans as `--flag` or `--flag=true|false`; one-letter shorthands as
//! `-v 3`, `-v=3` or `-v3`.
//!
//! Hand-written rather than clap: pflag takes the next argument as a value even when it starts
//! with a dash, reads a bool's value only after `=`, and the occurrences must come out in
//! command-line order to be applied over the config file. Clap can be told each of these per
//! argument, which would restate the flag table below in clap's terms for no gain.

use super::codec::ValueError;
use super::error::ConfigError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlagKind {
    Bool,
    Value,
    /// pflag's NoOptDefVal: `--flag` alone means this value, `--flag=x` gives another, and
    /// the next argument is never taken (`--version`).
    Optional(&'static str),
}

/// Whether the agent acts on a flag. Upstream's flags it does not act on yet are still
/// parsed with upstream's value type (so a malformed value is refused as upstream would),
/// then named in one warning at start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Support {
    Implemented,
    NotYet(ValueType),
}

/// The value types of upstream's flags that the agent does not act on yet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ValueType {
    Bool,
    /// Go int32 or int, with the range upstream's validation allows.
    Int {
        min: i64,
        max: i64,
    },
    Duration,
    Str,
    /// One of these ("" allowed: upstream's default applies).
    Choice(&'static [&'static str]),
    /// `k=v,...` (mapStringString).
    StringMap,
    Quantity,
    /// `numa:type=quantity[,type=quantity][;...]` (--reserved-memory).
    ReservedMemory,
    /// `pattern=N,...` (--vmodule).
    Vmodule,
    /// A Linux CPU list, `0-3,8` (--reserved-cpus).
    CpuSet,
}

pub(crate) struct FlagSpec {
    pub name: &'static str,
    pub short: Option<char>,
    pub kind: FlagKind,
    pub value_name: &'static str,
    pub help: &'static str,
    pub support: Support,
}

const fn value(name: &'static str, value_name: &'static str, help: &'static str) -> FlagSpec {
    FlagSpec {
        name,
        short: None,
        kind: FlagKind::Value,
        value_name,
        help,
        support: Support::Implemented,
    }
}

const fn bool_flag(name: &'static str, help: &'static str) -> FlagSpec {
    FlagSpec {
        name,
        short: None,
        kind: FlagKind::Bool,
        value_name: "",
        help,
        support: Support::Implemented,
    }
}

const NOT_YET_HELP: &str =
    "upstream's flag, accepted and checked; not implemented yet (warned at start)";

/// An upstream flag the agent parses with upstream's type but does not act on yet.
const fn not_yet(name: &'static str, ty: ValueType) -> FlagSpec {
    let (kind, value_name) = match ty {
        ValueType::Bool => (FlagKind::Bool, ""),
        ValueType::Int { .. } => (FlagKind::Value, "N"),
        ValueType::Duration => (FlagKind::Value, "DURATION"),
        ValueType::Str | ValueType::Choice(_) => (FlagKind::Value, "STRING"),
        ValueType::CpuSet => (FlagKind::Value, "CPUS"),
        ValueType::StringMap => (FlagKind::Value, "K=V[,...]"),
        ValueType::Quantity => (FlagKind::Value, "QUANTITY"),
        ValueType::ReservedMemory => (FlagKind::Value, "NUMA:TYPE=QTY[,...]"),
        ValueType::Vmodule => (FlagKind::Value, "PATTERN=N[,...]"),
    };
    FlagSpec {
        name,
        short: None,
        kind,
        value_name,
        help: NOT_YET_HELP,
        support: Support::NotYet(ty),
    }
}

const INT32: ValueType = ValueType::Int {
    min: i32::MIN as i64,
    max: i32::MAX as i64,
};
const NON_NEGATIVE_INT32: ValueType = ValueType::Int {
    min: 0,
    max: i32::MAX as i64,
};
const INT: ValueType = ValueType::Int {
    min: i64::MIN,
    max: i64::MAX,
};

pub(crate) const FLAGS: &[FlagSpec] = &[
    value("config", "FILE", "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1, YAML or JSON); flags override it"),
    value("manifest-url-header", "K:V[,K:V]", "header sent with --manifest-url requests; repeatable (staticPodURLHeader)"),
    value("hostname-override", "NAME", "node name to use instead of the host name"),
    value("container-runtime-endpoint", "ENDPOINT", "containerd socket, unix:///path or /path (default unix:///run/containerd/containerd.sock)"),
    FlagSpec {
        name: "v",
        short: Some('v'),
        kind: FlagKind::Value,
        value_name: "LEVEL",
        help: "log verbosity (logging.verbosity)",
        support: Support::Implemented,
    },
    value("feature-gates", "K=BOOL[,...]", "feature gates to turn on or off; the agent acts on KubeletPSI (default true) and NodeLogQuery (default false), and warns about the others (featureGates)"),
    bool_flag("serialize-image-pulls", "pull images one at a time (serializeImagePulls, default true)"),
    value("insecure-registry", "HOST[:PORT]", "kubelet-rs only: a registry (host, host:port or CIDR) that may be reached over plain HTTP; repeatable; loopback registries need none"),
    value("node-labels", "K=V[,K=V]", "labels added to the Node at registration; kubernetes.io/k8s.io keys only from the kubelet's allowed set"),
    value("kube-reserved", "NAME=QUANTITY[,...]", "cpu, memory, ephemeral-storage, pid held back for Kubernetes daemons (kubeReserved)"),
    value("system-reserved", "NAME=QUANTITY[,...]", "cpu, memory, ephemeral-storage, pid held back for the OS (systemReserved)"),
    value("eviction-hard", "SIGNAL<VALUE[,...]", "hard eviction thresholds, e.g. memory.available<100Mi,nodefs.available<10% (evictionHard)"),
    value("cluster-dns", "IP[,IP]", "the DNS servers of pods with dnsPolicy ClusterFirst (clusterDNS)"),
    value("eviction-soft", "SIGNAL<VALUE[,...]", "soft eviction thresholds, each acted on once crossed for its grace period (evictionSoft)"),
    value("eviction-soft-grace-period", "SIGNAL=DURATION[,...]", "how long each soft threshold must be crossed before pods are evicted (evictionSoftGracePeriod)"),
    value("eviction-minimum-reclaim", "SIGNAL=VALUE[,...]", "how much more than the threshold must be free before pressure ends (evictionMinimumReclaim)"),
    value("cgroup-driver", "DRIVER", "cgroup naming, cgroupfs or systemd (cgroupDriver, default cgroupfs; written through cgroupfs either way)"),
    value("config-dir", "PATH", "folder of drop-in KubeletConfiguration files (*.conf, in lexical order, subfolders included) merged over --config; flags override both"),
    FlagSpec {
        name: "version",
        short: None,
        kind: FlagKind::Optional("true"),
        value_name: "[=true|raw]",
        help: "print the version and exit",
        support: Support::Implemented,
    },
    FlagSpec {
        name: "help",
        short: Some('h'),
        kind: FlagKind::Bool,
        value_name: "",
        help: "print this help and exit",
        support: Support::Implemented,
    },
    // Upstream's (1.34) remaining flags, deprecated ones included.
    not_yet("application-metrics-count-limit", INT),
    not_yet("boot-id-file", ValueType::Str),
    not_yet("cloud-provider", ValueType::Choice(&["external"])),
    not_yet("container-hints", ValueType::Str),
    not_yet("containerd", ValueType::Str),
    not_yet("contention-profiling", ValueType::Bool),
    not_yet("cpu-cfs-quota", ValueType::Bool),
    not_yet("cpu-cfs-quota-period", ValueType::Duration),
    not_yet("cpu-manager-policy", ValueType::Choice(&["none", "static"])),
    not_yet("cpu-manager-policy-options", ValueType::StringMap),
    not_yet("cpu-manager-reconcile-period", ValueType::Duration),
    not_yet("enable-controller-attach-detach", ValueType::Bool),
    not_yet("enable-load-reader", ValueType::Bool),
    not_yet("event-burst", NON_NEGATIVE_INT32),
    not_yet("event-qps", NON_NEGATIVE_INT32),
    not_yet("event-storage-age-limit", ValueType::Str),
    not_yet("event-storage-event-limit", ValueType::Str),
    not_yet("exit-on-lock-contention", ValueType::Bool),
    not_yet("experimental-allocatable-ignore-eviction", ValueType::Bool),
    not_yet("experimental-mounter-path", ValueType::Str),
    not_yet("fail-cgroupv1", ValueType::Bool),
    not_yet("global-housekeeping-interval", ValueType::Duration),
    not_yet("hairpin-mode", ValueType::Choice(&["promiscuous-bridge", "hairpin-veth", "none"])),
    not_yet("image-credential-provider-bin-dir", ValueType::Str),
    not_yet("image-credential-provider-config", ValueType::Str),
    not_yet("image-service-endpoint", ValueType::Str),
    not_yet("kernel-memcg-notification", ValueType::Bool),
    not_yet("kube-api-burst", NON_NEGATIVE_INT32),
    not_yet("kube-api-content-type", ValueType::Str),
    not_yet("kube-api-qps", NON_NEGATIVE_INT32),
    not_yet("kubelet-cgroups", ValueType::Str),
    not_yet("lock-file", ValueType::Str),
    not_yet("log-cadvisor-usage", ValueType::Bool),
    not_yet("log-flush-frequency", ValueType::Duration),
    not_yet("log-json-info-buffer-size", ValueType::Quantity),
    not_yet("log-json-split-stream", ValueType::Bool),
    not_yet("log-text-info-buffer-size", ValueType::Quantity),
    not_yet("log-text-split-stream", ValueType::Bool),
    not_yet("machine-id-file", ValueType::Str),
    not_yet("make-iptables-util-chains", ValueType::Bool),
    not_yet("max-open-files", ValueType::Int { min: 0, max: i64::MAX }),
    not_yet("maximum-dead-containers", INT32),
    not_yet("maximum-dead-containers-per-container", INT32),
    not_yet("memory-manager-policy", ValueType::Choice(&["None", "Static"])),
    not_yet("minimum-container-ttl-duration", ValueType::Duration),
    not_yet("node-status-max-images", ValueType::Int { min: -1, max: i32::MAX as i64 }),
    not_yet("oom-score-adj", ValueType::Int { min: -1000, max: 1000 }),
    not_yet("pod-cidr", ValueType::Str),
    not_yet("pods-per-core", NON_NEGATIVE_INT32),
    not_yet("protect-kernel-defaults", ValueType::Bool),
    not_yet("provider-id", ValueType::Str),
    not_yet("qos-reserved", ValueType::StringMap),
    not_yet("registry-burst", NON_NEGATIVE_INT32),
    not_yet("registry-qps", NON_NEGATIVE_INT32),
    not_yet("reserved-cpus", ValueType::CpuSet),
    not_yet("reserved-memory", ValueType::ReservedMemory),
    not_yet("runonce", ValueType::Bool),
    not_yet("runtime-cgroups", ValueType::Str),
    not_yet("runtime-request-timeout", ValueType::Duration),
    not_yet("storage-driver-buffer-duration", ValueType::Duration),
    not_yet("storage-driver-db", ValueType::Str),
    not_yet("storage-driver-host", ValueType::Str),
    not_yet("storage-driver-password", ValueType::Str),
    not_yet("storage-driver-secure", ValueType::Bool),
    not_yet("storage-driver-table", ValueType::Str),
    not_yet("storage-driver-user", ValueType::Str),
    not_yet("streaming-connection-idle-timeout", ValueType::Duration),
    not_yet("system-cgroups", ValueType::Str),
    not_yet("topology-manager-policy", ValueType::Choice(&["none", "best-effort", "restricted", "single-numa-node"])),
    not_yet("topology-manager-policy-options", ValueType::StringMap),
    not_yet("topology-manager-scope", ValueType::Choice(&["container", "pod"])),
    not_yet("vmodule", ValueType::Vmodule),
    not_yet("volume-plugin-dir", ValueType::Str),
];

/// Every flag: the declared settings' (`settings.rs`), then this table's.
pub(crate) fn all_flags() -> impl Iterator<Item = &'static FlagSpec> {
    super::settings::DECLARED_FLAGS.iter().chain(FLAGS)
}

/// The table entry of a parsed flag.
pub(crate) fn spec(name: &str) -> Option<&'static FlagSpec> {
    all_flags().find(|f| f.name == name)
}

/// One flag occurrence, in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FlagValue {
    pub name: &'static str,
    /// As the user spelled it, for error messages ("-v" or "--v").
    pub spelled: String,
    pub value: String,
}

/// Splits argv (without argv[0]) into flag occurrences. Only syntax is checked here; values are
/// checked where they are applied, so the error can name the flag and the expected type.
pub(crate) fn parse_args(args: &[String]) -> Result<Vec<FlagValue>, ConfigError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            if let Some(extra) = args.get(i) {
                return Err(ConfigError::UnexpectedArgument(extra.clone()));
            }
            break;
        }
        let (spec, spelled, inline) = if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = split_inline(long);
            // pflag's WordSepNormalizeFunc, which the kubelet installs: --root_dir is
            // --root-dir.
            let name = name.replace('_', "-");
            let spec = spec(&name).ok_or_else(|| ConfigError::UnknownFlag(format!("--{name}")))?;
            (spec, format!("--{name}"), inline)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let letter = short.chars().next().unwrap_or('-');
            let spec = all_flags()
                .find(|f| f.short == Some(letter))
                .ok_or_else(|| ConfigError::UnknownFlag(format!("-{letter}")))?;
            let after = &short[letter.len_utf8()..];
            let inline = match after.strip_prefix('=') {
                Some(v) => Some(v.to_string()),
                None if after.is_empty() => None,
                // pflag reads "-v3" as "-v" with value "3"; a bool has no glued value.
                None if spec.kind != FlagKind::Bool => Some(after.to_string()),
                None => return Err(ConfigError::UnknownFlag(arg.clone())),
            };
            (spec, format!("-{letter}"), inline)
        } else {
            return Err(ConfigError::UnexpectedArgument(arg.clone()));
        };
        let value = match (spec.kind, inline) {
            (_, Some(v)) => v,
            (FlagKind::Bool, None) => "true".to_string(),
            (FlagKind::Optional(default), None) => default.to_string(),
            (FlagKind::Value, None) => match args.get(i) {
                Some(next) => {
                    i += 1;
                    next.clone()
                }
                None => return Err(ConfigError::MissingValue(spelled)),
            },
        };
        out.push(FlagValue {
            name: spec.name,
            spelled,
            value,
        });
    }
    Ok(out)
}

fn split_inline(long: &str) -> (&str, Option<String>) {
    match long.split_once('=') {
        Some((name, value)) => (name, Some(value.to_string())),
        None => (long, None),
    }
}

/// Parses a pflag boolean value (Go's strconv.ParseBool spellings).
pub(crate) fn parse_bool(text: &str) -> Result<bool, ValueError> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(ValueError::Expected("expected true or false")),
    }
}

/// Why a value of a flag the agent does not act on yet (or a feature-gate list) was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FlagCheckError {
    #[error("{key}: {source}")]
    Gate {
        key: String,
        #[source]
        source: Box<ValueError>,
    },
    #[error("must be between {min} and {max}, inclusive")]
    Range { min: i64, max: i64 },
    #[error("expected one of {}", .0.join(", "))]
    Choice(&'static [&'static str]),
    #[error("{entry:?}: expected NUMA:TYPE=QUANTITY[,...]")]
    ReservedMemoryForm { entry: String },
    #[error("{entry:?}: the NUMA node {numa:?} is not an integer")]
    NumaNode { entry: String, numa: String },
    #[error("{entry:?}: no memory limits")]
    NoMemoryLimits { entry: String },
    #[error("{entry:?}: {kind}: {source}")]
    MemoryLimit {
        entry: String,
        kind: String,
        #[source]
        source: crate::vocabulary::quantity::QuantityError,
    },
    #[error("{pattern}: verbosity {level:?} is not a number")]
    Verbosity { pattern: String, level: String },
}

/// A mapStringBool flag value (`A=true,B=false`): each value in strconv.ParseBool's spellings.
pub(crate) fn bool_pairs(text: &str) -> Result<Vec<(String, bool)>, ValueError> {
    let mut map = std::collections::BTreeMap::new();
    super::node::parse_key_value_list(text, '=', &mut map)?;
    map.into_iter()
        .map(|(key, value)| {
            let enabled = parse_bool(&value).map_err(|source| FlagCheckError::Gate {
                key: key.clone(),
                source: Box::new(source),
            })?;
            Ok((key, enabled))
        })
        .collect()
}

/// Checks a value of a flag the agent does not act on yet as upstream's flag type (and the
/// simple range its validation applies) would.
pub(crate) fn check_value(ty: ValueType, text: &str) -> Result<(), ValueError> {
    use super::node::parse_key_value_list;
    use std::collections::BTreeMap;
    let pairs = |separator: char| -> Result<BTreeMap<String, String>, ValueError> {
        let mut map = BTreeMap::new();
        parse_key_value_list(text, separator, &mut map)?;
        Ok(map)
    };
    match ty {
        ValueType::Bool => parse_bool(text).map(|_| ()),
        ValueType::Int { min, max } => {
            let n: i64 = text
                .parse()
                .map_err(|_| ValueError::Expected("expected an integer"))?;
            if n < min || n > max {
                return Err(FlagCheckError::Range { min, max }.into());
            }
            Ok(())
        }
        ValueType::Duration => Ok(super::parse_duration(text).map(|_| ())?),
        ValueType::Str => Ok(()),
        ValueType::Choice(choices) => {
            if text.is_empty() || choices.contains(&text) {
                Ok(())
            } else {
                Err(FlagCheckError::Choice(choices).into())
            }
        }
        ValueType::StringMap => pairs('=').map(|_| ()),
        ValueType::Quantity => Ok(crate::vocabulary::quantity::Quantity::parse(text).map(|_| ())?),
        ValueType::ReservedMemory => {
            for entry in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                let (numa, limits) =
                    entry
                        .split_once(':')
                        .ok_or_else(|| FlagCheckError::ReservedMemoryForm {
                            entry: entry.to_string(),
                        })?;
                numa.trim()
                    .parse::<i32>()
                    .map_err(|_| FlagCheckError::NumaNode {
                        entry: entry.to_string(),
                        numa: numa.to_string(),
                    })?;
                let mut map = BTreeMap::new();
                parse_key_value_list(limits, '=', &mut map)?;
                if map.is_empty() {
                    return Err(FlagCheckError::NoMemoryLimits {
                        entry: entry.to_string(),
                    }
                    .into());
                }
                for (kind, qty) in map {
                    crate::vocabulary::quantity::Quantity::parse(&qty).map_err(|source| {
                        FlagCheckError::MemoryLimit {
                            entry: entry.to_string(),
                            kind,
                            source,
                        }
                    })?;
                }
            }
            Ok(())
        }
        ValueType::CpuSet => Ok(super::schema::check_cpu_set(text)?),
        ValueType::Vmodule => {
            for (pattern, level) in pairs('=')? {
                if level.parse::<u32>().is_err() {
                    return Err(FlagCheckError::Verbosity { pattern, level }.into());
                }
            }
            Ok(())
        }
    }
}

pub(crate) fn help_text() -> String {
    let mut text = String::from(
        "kubelet-rs: a Kubernetes node agent driving containerd, with the kubelet's flags.\n\n\
         Usage: kubelet-rs [flags]\n\nFlags:\n",
    );
    for flag in all_flags() {
        let mut left = match flag.short {
            Some(c) => format!("  -{c}, --{}", flag.name),
            None => format!("      --{}", flag.name),
        };
        match flag.kind {
            FlagKind::Value => {
                left.push(' ');
                left.push_str(flag.value_name);
            }
            FlagKind::Optional(_) => left.push_str(flag.value_name),
            FlagKind::Bool => {}
        }
        text.push_str(&format!("{left:<50} {}\n", flag.help));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn pairs(list: &[&str]) -> Vec<(&'static str, String)> {
        parse_args(&args(list))
            .unwrap()
            .into_iter()
            .map(|f| (f.name, f.value))
            .collect()
    }

    #[test]
    fn accepts_both_value_forms_and_shorthands() {
        assert_eq!(
            pairs(&[
                "--max-pods=3",
                "--root-dir",
                "/r",
                "-v",
                "4",
                "-v=5",
                "-v6",
                "--v=7"
            ]),
            vec![
                ("max-pods", "3".to_string()),
                ("root-dir", "/r".to_string()),
                ("v", "4".to_string()),
                ("v", "5".to_string()),
                ("v", "6".to_string()),
                ("v", "7".to_string()),
            ]
        );
    }

    #[test]
    fn booleans_take_no_separate_value() {
        assert_eq!(pairs(&["--help"]), vec![("help", "true".to_string())]);
        assert_eq!(
            pairs(&["--help=false"]),
            vec![("help", "false".to_string())]
        );
        assert_eq!(pairs(&["-h"]), vec![("help", "true".to_string())]);
        // As in pflag, "--help false" leaves "false" as a stray argument.
        assert!(matches!(
            parse_args(&args(&["--help", "false"])),
            Err(ConfigError::UnexpectedArgument(a)) if a == "false"
        ));
    }

    #[test]
    fn value_may_start_with_a_dash_or_be_empty() {
        assert_eq!(
            pairs(&["--hostname-override", "-x", "--root-dir="]),
            vec![
                ("hostname-override", "-x".to_string()),
                ("root-dir", String::new())
            ]
        );
    }

    #[test]
    fn reports_unknown_and_incomplete_flags() {
        let err = parse_args(&args(&["--bogus=1"])).unwrap_err();
        assert_eq!(err.to_string(), "unknown flag: --bogus (see --help)");
        assert!(
            matches!(parse_args(&args(&["-x"])), Err(ConfigError::UnknownFlag(f)) if f == "-x")
        );
        let err = parse_args(&args(&["--max-pods"])).unwrap_err();
        assert_eq!(err.to_string(), "flag needs an argument: --max-pods");
        assert!(matches!(
            parse_args(&args(&["serve"])),
            Err(ConfigError::UnexpectedArgument(_))
        ));
        assert!(parse_args(&args(&["--"])).unwrap().is_empty());
    }

    #[test]
    fn parses_bool_spellings() {
        assert_eq!(parse_bool("true").ok(), Some(true));
        assert_eq!(parse_bool("F").ok(), Some(false));
        assert!(parse_bool("yes").is_err());
    }

    /// Every flag `kubelet --help` lists at v1.34.4 (the deprecated ones included; the
    /// kubelet has no hidden flags beyond these).
    const UPSTREAM_1_34_FLAGS: &[&str] = &[
        "address",
        "allowed-unsafe-sysctls",
        "anonymous-auth",
        "application-metrics-count-limit",
        "authentication-token-webhook",
        "authentication-token-webhook-cache-ttl",
        "authorization-mode",
        "authorization-webhook-cache-authorized-ttl",
        "authorization-webhook-cache-unauthorized-ttl",
        "boot-id-file",
        "bootstrap-kubeconfig",
        "cert-dir",
        "cgroup-driver",
        "cgroup-root",
        "cgroups-per-qos",
        "client-ca-file",
        "cloud-provider",
        "cluster-dns",
        "cluster-domain",
        "config",
        "config-dir",
        "container-hints",
        "container-log-max-files",
        "container-log-max-size",
        "container-runtime-endpoint",
        "containerd",
        "containerd-namespace",
        "contention-profiling",
        "cpu-cfs-quota",
        "cpu-cfs-quota-period",
        "cpu-manager-policy",
        "cpu-manager-policy-options",
        "cpu-manager-reconcile-period",
        "enable-controller-attach-detach",
        "enable-debugging-handlers",
        "enable-load-reader",
        "enable-server",
        "enforce-node-allocatable",
        "event-burst",
        "event-qps",
        "event-storage-age-limit",
        "event-storage-event-limit",
        "eviction-hard",
        "eviction-max-pod-grace-period",
        "eviction-minimum-reclaim",
        "eviction-pressure-transition-period",
        "eviction-soft",
        "eviction-soft-grace-period",
        "exit-on-lock-contention",
        "experimental-allocatable-ignore-eviction",
        "experimental-mounter-path",
        "fail-cgroupv1",
        "fail-swap-on",
        "feature-gates",
        "file-check-frequency",
        "global-housekeeping-interval",
        "hairpin-mode",
        "healthz-bind-address",
        "healthz-port",
        "help",
        "hostname-override",
        "housekeeping-interval",
        "http-check-frequency",
        "image-credential-provider-bin-dir",
        "image-credential-provider-config",
        "image-gc-high-threshold",
        "image-gc-low-threshold",
        "image-service-endpoint",
        "kernel-memcg-notification",
        "kube-api-burst",
        "kube-api-content-type",
        "kube-api-qps",
        "kube-reserved",
        "kube-reserved-cgroup",
        "kubeconfig",
        "kubelet-cgroups",
        "local-storage-capacity-isolation",
        "lock-file",
        "log-cadvisor-usage",
        "log-flush-frequency",
        "log-json-info-buffer-size",
        "log-json-split-stream",
        "log-text-info-buffer-size",
        "log-text-split-stream",
        "logging-format",
        "machine-id-file",
        "make-iptables-util-chains",
        "manifest-url",
        "manifest-url-header",
        "max-open-files",
        "max-pods",
        "maximum-dead-containers",
        "maximum-dead-containers-per-container",
        "memory-manager-policy",
        "minimum-container-ttl-duration",
        "minimum-image-ttl-duration",
        "node-ip",
        "node-labels",
        "node-status-max-images",
        "node-status-update-frequency",
        "oom-score-adj",
        "pod-cidr",
        "pod-infra-container-image",
        "pod-manifest-path",
        "pod-max-pids",
        "pods-per-core",
        "port",
        "protect-kernel-defaults",
        "provider-id",
        "qos-reserved",
        "read-only-port",
        "register-node",
        "register-with-taints",
        "registry-burst",
        "registry-qps",
        "reserved-cpus",
        "reserved-memory",
        "resolv-conf",
        "root-dir",
        "rotate-certificates",
        "rotate-server-certificates",
        "runonce",
        "runtime-cgroups",
        "runtime-request-timeout",
        "seccomp-default",
        "serialize-image-pulls",
        "storage-driver-buffer-duration",
        "storage-driver-db",
        "storage-driver-host",
        "storage-driver-password",
        "storage-driver-secure",
        "storage-driver-table",
        "storage-driver-user",
        "streaming-connection-idle-timeout",
        "sync-frequency",
        "system-cgroups",
        "system-reserved",
        "system-reserved-cgroup",
        "tls-cert-file",
        "tls-cipher-suites",
        "tls-min-version",
        "tls-private-key-file",
        "topology-manager-policy",
        "topology-manager-policy-options",
        "topology-manager-scope",
        "v",
        "version",
        "vmodule",
        "volume-plugin-dir",
        "volume-stats-agg-period",
    ];

    #[test]
    fn every_upstream_flag_is_in_the_table() {
        assert_eq!(UPSTREAM_1_34_FLAGS.len(), 150);
        for name in UPSTREAM_1_34_FLAGS {
            assert!(spec(name).is_some(), "--{name} is missing");
        }
        let mut names: Vec<&str> = all_flags().map(|f| f.name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "no flag twice");
    }

    #[test]
    fn optional_value_flags_never_take_the_next_argument() {
        assert_eq!(pairs(&["--version"]), vec![("version", "true".to_string())]);
        assert_eq!(
            pairs(&["--version=raw"]),
            vec![("version", "raw".to_string())]
        );
        assert!(matches!(
            parse_args(&args(&["--version", "raw"])),
            Err(ConfigError::UnexpectedArgument(a)) if a == "raw"
        ));
    }

    #[test]
    fn help_lists_every_flag() {
        let help = help_text();
        for flag in all_flags() {
            assert!(help.contains(&format!("--{}", flag.name)), "{}", flag.name);
        }
    }
}
