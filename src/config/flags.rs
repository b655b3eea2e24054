//! Command-line parsing with pflag's rules, which the kubelet uses: `--flag=value` and
//! `--flag value`; booleans as `--flag` or `--flag=true|false`; one-letter shorthands as
//! `-v 3`, `-v=3` or `-v3`.
//!
//! Hand-written rather than clap: pflag takes the next argument as a value even when it starts
//! with a dash, reads a bool's value only after `=`, and the occurrences must come out in
//! command-line order to be applied over the config file. Clap can be told each of these per
//! argument, which would restate the flag table below in clap's terms for no gain.

use super::error::ConfigError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlagKind {
    Bool,
    Value,
}

pub(crate) struct FlagSpec {
    pub name: &'static str,
    pub short: Option<char>,
    pub kind: FlagKind,
    pub value_name: &'static str,
    pub help: &'static str,
}

const fn value(name: &'static str, value_name: &'static str, help: &'static str) -> FlagSpec {
    FlagSpec {
        name,
        short: None,
        kind: FlagKind::Value,
        value_name,
        help,
    }
}

const fn bool_flag(name: &'static str, help: &'static str) -> FlagSpec {
    FlagSpec {
        name,
        short: None,
        kind: FlagKind::Bool,
        value_name: "",
        help,
    }
}

pub(crate) const FLAGS: &[FlagSpec] = &[
    value("config", "FILE", "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1, YAML or JSON); flags override it"),
    value("pod-manifest-path", "PATH", "folder (or file) of static pod manifests (staticPodPath)"),
    value("manifest-url", "URL", "URL to poll for static pods, a Pod or a PodList (staticPodURL; http:// only)"),
    value("manifest-url-header", "K:V[,K:V]", "header sent with --manifest-url requests; repeatable (staticPodURLHeader)"),
    value("hostname-override", "NAME", "node name to use instead of the host name"),
    value("root-dir", "PATH", "directory for the agent's state (default /var/lib/kubelet-rs)"),
    value("kubeconfig", "FILE", "kubeconfig for the API server (cluster mode)"),
    value("bootstrap-kubeconfig", "FILE", "bootstrap kubeconfig used to obtain a client certificate"),
    value("container-runtime-endpoint", "ENDPOINT", "containerd socket, unix:///path or /path (default unix:///run/containerd/containerd.sock)"),
    value("containerd-namespace", "NAME", "containerd namespace the agent works in: letters and digits joined by single . _ or - (default kubelet-rs)"),
    value("pod-infra-container-image", "IMAGE", "sandbox (pause) image (default registry.k8s.io/pause:3.10)"),
    value("address", "IP", "IP address the main server listens on (default 0.0.0.0)"),
    value("port", "PORT", "port of the main server (default 10250)"),
    value("read-only-port", "PORT", "read-only port, 0 disables (default 10255 without --config, else 0)"),
    value("healthz-port", "PORT", "healthz port, 0 disables (default 10248)"),
    value("healthz-bind-address", "IP", "healthz listen address (default 127.0.0.1)"),
    value("max-pods", "N", "most pods this node runs (default 110)"),
    value("sync-frequency", "DURATION", "max period between pod syncs (default 1m0s)"),
    value("housekeeping-interval", "DURATION", "interval between container stats samples (default 10s)"),
    value("file-check-frequency", "DURATION", "period of the manifest folder re-read (default 20s)"),
    value("http-check-frequency", "DURATION", "period of the manifest URL poll (default 20s)"),
    value("container-log-max-size", "QUANTITY", "size at which a container log is rotated (default 10Mi)"),
    value("container-log-max-files", "N", "most log files kept per container, >= 2 (default 5)"),
    value("pod-logs-dir", "PATH", "where pod logs are written (podLogsDir, default /var/log/pods)"),
    value("cni-conf-dir", "PATH", "CNI network configuration folder (default /etc/cni/net.d)"),
    value("cni-bin-dir", "PATHS", "comma-separated CNI plugin folders (default /opt/cni/bin,/usr/lib/cni)"),
    FlagSpec {
        name: "v",
        short: Some('v'),
        kind: FlagKind::Value,
        value_name: "LEVEL",
        help: "log verbosity (logging.verbosity)",
    },
    value("logging-format", "FORMAT", "log format, text or json (logging.format, default text)"),
    value("tls-cert-file", "FILE", "serving certificate (chain) of the main server (tlsCertFile); else a self-signed one in --cert-dir"),
    value("tls-private-key-file", "FILE", "private key of --tls-cert-file (tlsPrivateKeyFile)"),
    value("cert-dir", "PATH", "where the TLS certificates are kept: the self-signed or bootstrapped serving one and the bootstrapped client one (default <root-dir>/pki)"),
    bool_flag("rotate-certificates", "renew the client certificate through the certificates.k8s.io API as it nears expiry (rotateCertificates)"),
    bool_flag("rotate-server-certificates", "request the serving certificate through the certificates.k8s.io API and renew it (serverTLSBootstrap)"),
    value("tls-min-version", "VERSION", "lowest TLS version: VersionTLS12 or VersionTLS13 (tlsMinVersion)"),
    value("tls-cipher-suites", "NAMES", "comma-separated TLS 1.2 cipher suites, Go names (tlsCipherSuites)"),
    value("client-ca-file", "FILE", "CA bundle that client certificates are verified against (authentication.x509.clientCAFile)"),
    bool_flag("anonymous-auth", "let unauthenticated requests in as system:anonymous (default true without --config)"),
    bool_flag("authentication-token-webhook", "check bearer tokens with TokenReview (default false without --config)"),
    value("authentication-token-webhook-cache-ttl", "DURATION", "how long TokenReview answers are cached (default 2m0s)"),
    value("authorization-mode", "MODE", "AlwaysAllow or Webhook (SubjectAccessReview) (default AlwaysAllow without --config)"),
    value("authorization-webhook-cache-authorized-ttl", "DURATION", "how long 'allowed' answers are cached (default 5m0s)"),
    value("authorization-webhook-cache-unauthorized-ttl", "DURATION", "how long 'denied' answers are cached (default 30s)"),
    value("image-gc-high-threshold", "PERCENT", "image-fs use at which image GC starts, 100 disables (imageGCHighThresholdPercent, default 85)"),
    value("image-gc-low-threshold", "PERCENT", "image-fs use image GC frees down to, below the high threshold (imageGCLowThresholdPercent, default 80)"),
    value("minimum-image-ttl-duration", "DURATION", "least age of an unused image before GC may remove it (imageMinimumGCAge, default 2m0s)"),
    value("image-gc-period", "DURATION", "kubelet-rs only: period of image GC (upstream's fixed 5m0s)"),
    value("image-fs-path", "PATH", "kubelet-rs only: a path on the filesystem holding containerd's images, measured for image GC (default /var/lib/containerd)"),
    bool_flag("enable-debugging-handlers", "serve exec, attach, portForward and run (enableDebuggingHandlers, default true)"),
    bool_flag("serialize-image-pulls", "pull images one at a time (serializeImagePulls, default true)"),
    value("insecure-registry", "HOST[:PORT]", "kubelet-rs only: a registry (host, host:port or CIDR) that may be reached over plain HTTP; repeatable; loopback registries need none"),
    value("node-labels", "K=V[,K=V]", "labels added to the Node at registration; kubernetes.io/k8s.io keys only from the kubelet's allowed set"),
    value("register-with-taints", "K=V:EFFECT[,...]", "taints the Node is registered with (registerWithTaints)"),
    value("node-ip", "IP", "the node's InternalIP (default: the address of the default route's interface)"),
    bool_flag("register-node", "register the Node with the API server (registerNode, default true)"),
    value("kube-reserved", "NAME=QUANTITY[,...]", "cpu, memory, ephemeral-storage, pid held back for Kubernetes daemons (kubeReserved)"),
    value("system-reserved", "NAME=QUANTITY[,...]", "cpu, memory, ephemeral-storage, pid held back for the OS (systemReserved)"),
    value("eviction-hard", "SIGNAL<VALUE[,...]", "hard eviction thresholds, e.g. memory.available<100Mi,nodefs.available<10% (evictionHard)"),
    bool_flag("cgroups-per-qos", "create kubepods, the QoS class cgroups and a limited cgroup per pod (cgroupsPerQOS, default true)"),
    value("cgroup-driver", "DRIVER", "cgroup naming, cgroupfs or systemd (cgroupDriver, default cgroupfs; written through cgroupfs either way)"),
    value("cgroup-root", "PATH", "the cgroup kubepods goes under (cgroupRoot, default /)"),
    value("enforce-node-allocatable", "LIST", "comma-separated: pods, system-reserved, kube-reserved, system-reserved-compressible, kube-reserved-compressible, or none (enforceNodeAllocatable, default pods)"),
    value("pod-max-pids", "N", "pids.max of each pod's cgroup, -1 for none (podPidsLimit, default -1)"),
    value("kube-reserved-cgroup", "PATH", "the existing cgroup kubeReserved is enforced on (kubeReservedCgroup)"),
    value("system-reserved-cgroup", "PATH", "the existing cgroup systemReserved is enforced on (systemReservedCgroup)"),
    value("node-status-update-frequency", "DURATION", "how often the node's status is computed (nodeStatusUpdateFrequency, default 10s)"),
    FlagSpec {
        name: "help",
        short: Some('h'),
        kind: FlagKind::Bool,
        value_name: "",
        help: "print this help and exit",
    },
];

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
            let spec = FLAGS
                .iter()
                .find(|f| f.name == name)
                .ok_or_else(|| ConfigError::UnknownFlag(format!("--{name}")))?;
            (spec, format!("--{name}"), inline)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let letter = short.chars().next().unwrap_or('-');
            let spec = FLAGS
                .iter()
                .find(|f| f.short == Some(letter))
                .ok_or_else(|| ConfigError::UnknownFlag(format!("-{letter}")))?;
            let after = &short[letter.len_utf8()..];
            let inline = match after.strip_prefix('=') {
                Some(v) => Some(v.to_string()),
                None if after.is_empty() => None,
                // pflag reads "-v3" as "-v" with value "3"; a bool has no glued value.
                None if spec.kind == FlagKind::Value => Some(after.to_string()),
                None => return Err(ConfigError::UnknownFlag(arg.clone())),
            };
            (spec, format!("-{letter}"), inline)
        } else {
            return Err(ConfigError::UnexpectedArgument(arg.clone()));
        };
        let value = match (spec.kind, inline) {
            (_, Some(v)) => v,
            (FlagKind::Bool, None) => "true".to_string(),
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
pub(crate) fn parse_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err("expected true or false".to_string()),
    }
}

pub(crate) fn help_text() -> String {
    let mut text = String::from(
        "kubelet-rs: a Kubernetes node agent driving containerd, with the kubelet's flags.\n\n\
         Usage: kubelet-rs [flags]\n\nFlags:\n",
    );
    for flag in FLAGS {
        let mut left = match flag.short {
            Some(c) => format!("  -{c}, --{}", flag.name),
            None => format!("      --{}", flag.name),
        };
        if flag.kind == FlagKind::Value {
            left.push(' ');
            left.push_str(flag.value_name);
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
        assert_eq!(parse_bool("true"), Ok(true));
        assert_eq!(parse_bool("F"), Ok(false));
        assert!(parse_bool("yes").is_err());
    }

    #[test]
    fn help_lists_every_flag() {
        let help = help_text();
        for flag in FLAGS {
            assert!(help.contains(&format!("--{}", flag.name)), "{}", flag.name);
        }
    }
}
