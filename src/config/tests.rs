use super::*;
use std::io::Write;
use std::net::Ipv4Addr;

fn load(args: &[&str]) -> Result<Config, ConfigError> {
    let mut argv = vec!["kubelet-rs", "--hostname-override=Node-1"];
    argv.extend_from_slice(args);
    load_from_args(argv)
}

fn config_file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

#[test]
fn defaults_without_a_config_file() {
    let c = load(&[]).unwrap();
    assert_eq!(c.node_name, "node-1");
    assert_eq!(c.root_dir, PathBuf::from("/var/lib/kubelet-rs"));
    assert_eq!(c.file_check_frequency, Duration::from_secs(20));
    assert_eq!(c.http_check_frequency, Duration::from_secs(20));
    assert_eq!(c.sync_frequency, Duration::from_secs(60));
    assert_eq!(c.housekeeping_interval, Duration::from_secs(10));
    assert_eq!(c.max_pods, 110);
    assert_eq!(c.read_only_port, 10255, "legacy command-line default");
    assert_eq!(c.healthz_port, 10248);
    assert_eq!(c.healthz_bind_address, IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert_eq!(c.container_log_max_size, 10 * 1024 * 1024);
    assert_eq!(c.container_log_max_files, 5);
    assert_eq!(
        c.container_runtime_endpoint,
        PathBuf::from("/run/containerd/containerd.sock")
    );
    assert_eq!(c.containerd_namespace, "kubelet-rs");
    assert_eq!(c.pod_infra_container_image, "registry.k8s.io/pause:3.10");
    assert_eq!(c.pod_logs_dir, PathBuf::from("/var/log/pods"));
    assert_eq!(c.container_logs_dir, PathBuf::from("/var/log/containers"));
    assert_eq!(c.cni_conf_dir, PathBuf::from("/etc/cni/net.d"));
    assert_eq!(
        c.cni_bin_dirs,
        vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]
    );
    assert_eq!(c.logging_format, "text");
    assert_eq!(c.verbosity, 0);
    assert_eq!(c.port, 10250);
    assert!(c.static_pod_path.is_none() && c.static_pod_url.is_none());
}

#[test]
fn node_name_comes_from_the_host_when_not_overridden() {
    let c = load_from_args(["kubelet-rs"]).unwrap();
    let host = nix::unistd::gethostname().unwrap();
    assert_eq!(c.node_name, host.to_string_lossy().trim().to_lowercase());
    let c = load_from_args(["kubelet-rs", "--hostname-override", "  MyNode "]).unwrap();
    assert_eq!(c.node_name, "mynode");
}

#[test]
fn flags_in_both_forms() {
    let c = load(&[
        "--pod-manifest-path=/etc/kubernetes/manifests",
        "--manifest-url",
        "http://127.0.0.1:8080/pods",
        "--manifest-url-header",
        "a:hello,b:again",
        "--manifest-url-header=b:beautiful",
        "--root-dir",
        "/tmp/r",
        "--container-runtime-endpoint=/run/k.sock",
        "--pod-infra-container-image=pause:1",
        "--read-only-port=0",
        "--healthz-port",
        "0",
        "--healthz-bind-address=0.0.0.0",
        "--max-pods=12",
        "--sync-frequency=30s",
        "--housekeeping-interval=2s",
        "--file-check-frequency",
        "1s",
        "--http-check-frequency=1m30s",
        "--container-log-max-size=1Gi",
        "--container-log-max-files=2",
        "-v",
        "3",
        "--logging-format=json",
        "--containerd-namespace=ns1",
        "--cni-conf-dir=/cni/conf",
        "--cni-bin-dir=/a, /b",
        "--pod-logs-dir=/logs",
        "--address=127.0.0.2",
        "--port=11250",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
    ])
    .unwrap();
    assert_eq!(
        c.static_pod_path,
        Some(PathBuf::from("/etc/kubernetes/manifests"))
    );
    assert_eq!(
        c.static_pod_url.as_deref(),
        Some("http://127.0.0.1:8080/pods")
    );
    assert_eq!(c.static_pod_url_header["a"], vec!["hello"]);
    assert_eq!(c.static_pod_url_header["b"], vec!["again", "beautiful"]);
    assert_eq!(c.root_dir, PathBuf::from("/tmp/r"));
    assert_eq!(c.container_runtime_endpoint, PathBuf::from("/run/k.sock"));
    assert_eq!(c.pod_infra_container_image, "pause:1");
    assert_eq!(c.read_only_port, 0);
    assert_eq!(c.healthz_port, 0);
    assert_eq!(c.healthz_bind_address, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    assert_eq!(c.max_pods, 12);
    assert_eq!(c.sync_frequency, Duration::from_secs(30));
    assert_eq!(c.housekeeping_interval, Duration::from_secs(2));
    assert_eq!(c.file_check_frequency, Duration::from_secs(1));
    assert_eq!(c.http_check_frequency, Duration::from_secs(90));
    assert_eq!(c.container_log_max_size, 1 << 30);
    assert_eq!(c.container_log_max_files, 2);
    assert_eq!(c.verbosity, 3);
    assert_eq!(c.logging_format, "json");
    assert_eq!(c.containerd_namespace, "ns1");
    assert_eq!(c.cni_conf_dir, PathBuf::from("/cni/conf"));
    assert_eq!(
        c.cni_bin_dirs,
        vec![PathBuf::from("/a"), PathBuf::from("/b")]
    );
    assert_eq!(c.pod_logs_dir, PathBuf::from("/logs"));
    assert_eq!(c.address, "127.0.0.2".parse::<IpAddr>().unwrap());
    assert_eq!(c.port, 11250);
    assert_eq!(
        c.kubeconfig,
        Some(PathBuf::from("/etc/kubernetes/kubelet.conf"))
    );
}

#[test]
fn runtime_endpoint_accepts_unix_scheme_or_plain_path() {
    let c = load(&[
        "--container-runtime-endpoint",
        "unix:///run/x/containerd.sock",
    ])
    .unwrap();
    assert_eq!(
        c.container_runtime_endpoint,
        PathBuf::from("/run/x/containerd.sock")
    );
    let err = load(&["--container-runtime-endpoint=tcp://1.2.3.4:5"]).unwrap_err();
    assert!(
        err.to_string().contains("--container-runtime-endpoint"),
        "{err}"
    );
    assert!(err.to_string().contains("tcp://"), "{err}");
}

#[test]
fn config_file_then_flags_win() {
    let file = config_file(&format!(
        "{HEADER}staticPodPath: /from/file\nmaxPods: 50\nsyncFrequency: 2m\n\
         containerRuntimeEndpoint: unix:///file.sock\nlogging:\n  format: json\n  verbosity: 2\n\
         staticPodURLHeader:\n  X-File: [f]\nprotectKernelDefaults: true\n"
    ));
    let path = file.path().to_str().unwrap();
    let c = load(&["--config", path]).unwrap();
    assert_eq!(c.static_pod_path, Some(PathBuf::from("/from/file")));
    assert_eq!(c.max_pods, 50);
    assert_eq!(c.sync_frequency, Duration::from_secs(120));
    assert_eq!(c.container_runtime_endpoint, PathBuf::from("/file.sock"));
    assert_eq!(c.logging_format, "json");
    assert_eq!(c.verbosity, 2);
    assert_eq!(
        c.read_only_port, 0,
        "v1beta1 default when a config file is used"
    );
    assert_eq!(c.file_check_frequency, Duration::from_secs(20));
    assert_eq!(c.config_file.as_deref(), Some(file.path()));
    assert_eq!(
        c.unimplemented_config_fields,
        vec!["protectKernelDefaults".to_string()]
    );
    assert_eq!(c.static_pod_url_header["X-File"], vec!["f"]);

    // Flags win, whether they come before or after --config.
    let c = load(&[
        "--max-pods=7",
        "--config",
        path,
        "--pod-manifest-path",
        "/from/flag",
        "--v=5",
        "--manifest-url-header=X-Flag:g",
    ])
    .unwrap();
    assert_eq!(c.max_pods, 7);
    assert_eq!(c.static_pod_path, Some(PathBuf::from("/from/flag")));
    assert_eq!(c.verbosity, 5);
    assert_eq!(c.sync_frequency, Duration::from_secs(120));
    assert!(!c.static_pod_url_header.contains_key("X-File"));
    assert_eq!(c.static_pod_url_header["X-Flag"], vec!["g"]);
}

#[test]
fn kubeadm_config_loads() {
    let file = config_file(file::tests::KUBEADM_CONFIG);
    let c = load(&["--config", file.path().to_str().unwrap()]).unwrap();
    assert_eq!(
        c.static_pod_path,
        Some(PathBuf::from("/etc/kubernetes/manifests"))
    );
    assert_eq!(c.file_check_frequency, Duration::from_secs(20));
    assert_eq!(c.sync_frequency, Duration::from_secs(60));
    assert_eq!(
        c.container_runtime_endpoint,
        PathBuf::from("/run/containerd/containerd.sock")
    );
    // kubeadm turns client certificate rotation on; the agent acts on it now.
    assert!(c.rotate_certificates);
    assert!(!c.server_tls_bootstrap);
    assert_eq!(c.cluster_domain, "cluster.local");
    assert_eq!(
        c.cluster_dns,
        vec![IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10))]
    );
    assert_eq!(
        c.resolv_conf,
        Some(PathBuf::from("/run/systemd/resolve/resolv.conf"))
    );
    assert!(c.unimplemented_config_fields.is_empty());
    assert!(!c
        .unimplemented_config_fields
        .contains(&"rotateCertificates".to_string()));
}

#[test]
fn certificate_settings_default_off_and_flags_override_the_file() {
    let c = load(&[]).unwrap();
    assert!(!c.rotate_certificates, "upstream's default is false");
    assert!(!c.server_tls_bootstrap);
    let file = config_file(&format!(
        "{HEADER}rotateCertificates: true\nserverTLSBootstrap: true\n"
    ));
    let path = file.path().to_str().unwrap();
    let c = load(&["--config", path]).unwrap();
    assert!(c.rotate_certificates && c.server_tls_bootstrap);
    let c = load(&[
        "--config",
        path,
        "--rotate-certificates=false",
        "--rotate-server-certificates=false",
    ])
    .unwrap();
    assert!(!c.rotate_certificates && !c.server_tls_bootstrap);
}

#[test]
fn a_bootstrap_kubeconfig_needs_a_kubeconfig_to_write() {
    let err = load(&["--bootstrap-kubeconfig", "/b"]).unwrap_err();
    assert!(
        err.to_string().contains("--bootstrap-kubeconfig")
            && err.to_string().contains("--kubeconfig"),
        "{err}"
    );
    let c = load(&["--bootstrap-kubeconfig", "/b", "--kubeconfig", "/k"]).unwrap();
    assert_eq!(c.bootstrap_kubeconfig, Some(PathBuf::from("/b")));
}

#[test]
fn file_errors_name_the_file_and_exit_2() {
    // An unknown field is not an error: upstream's lenient v1beta1 decoding drops it with a
    // warning, and so does the agent.
    let file = config_file(&format!("{HEADER}staticPodPaths: /x\n"));
    let c = load(&["--config", file.path().to_str().unwrap()]).unwrap();
    assert_eq!(c.unknown_config_fields, vec!["staticPodPaths"]);
    assert_eq!(c.static_pod_path, None);
    assert_eq!(
        c.warnings(),
        vec![
            "unknown config fields ignored (upstream's lenient decoding of \
              kubelet.config.k8s.io/v1beta1): staticPodPaths"
        ]
    );
    let file = config_file(&format!("{HEADER}maxPods: lots\n"));
    let err = load(&["--config", file.path().to_str().unwrap()]).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert_eq!(
        err.to_string(),
        format!(
            "config file {}: invalid value \"lots\" for field maxPods: expected an integer",
            file.path().display()
        )
    );
    let err = load(&["--config=/nonexistent/kubelet.yaml"]).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("config file /nonexistent/kubelet.yaml: cannot read it"),
        "{err}"
    );
    let file = config_file("apiVersion: [unclosed\n");
    let err = load(&["--config", file.path().to_str().unwrap()]).unwrap_err();
    assert!(err.to_string().contains("not valid YAML or JSON"), "{err}");
    assert!(!err.to_string().contains('\n'), "one line: {err}");
}

#[test]
fn flag_errors_are_one_line_and_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--bogus"], "unknown flag: --bogus (see --help)"),
        (&["--max-pods"], "flag needs an argument: --max-pods"),
        (
            &["--max-pods=many"],
            "invalid value \"many\" for flag --max-pods: expected an integer",
        ),
        (
            &["--sync-frequency=10"],
            "invalid value \"10\" for flag --sync-frequency: missing unit (one of ns, us, ms, s, m, h)",
        ),
        (
            &["--read-only-port=70000"],
            "invalid value \"70000\" for flag --read-only-port: must be between 0 and 65535",
        ),
        (
            &["--healthz-bind-address=localhost"],
            "invalid value \"localhost\" for flag --healthz-bind-address: expected an IP address",
        ),
        (
            &["--container-log-max-size=10MB"],
            "invalid value \"10MB\" for flag --container-log-max-size: invalid quantity \"10MB\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        (
            &["-v=loud"],
            "invalid value \"loud\" for flag -v: expected an integer from 0 to 255",
        ),
        (
            &["--manifest-url-header=novalue"],
            "invalid value \"novalue\" for flag --manifest-url-header: malformed pair \"novalue\", expected key:value",
        ),
        (
            &["--max-pods=0"],
            "invalid maxPods (--max-pods): 0: must be greater than 0",
        ),
        (
            &["--file-check-frequency=0s"],
            "invalid fileCheckFrequency (--file-check-frequency): 0s: must be greater than 0",
        ),
        (
            &["--container-log-max-files=1"],
            "invalid containerLogMaxFiles (--container-log-max-files): 1: must be at least 2",
        ),
        (
            &["--container-log-max-size=0"],
            "invalid containerLogMaxSize (--container-log-max-size): 0: must be greater than 0",
        ),
        (
            &["--logging-format=xml"],
            "invalid logging.format (--logging-format): \"xml\": must be \"text\" or \"json\"",
        ),
        (
            &["--manifest-url=ftp://example.invalid/pods"],
            "invalid staticPodURL (--manifest-url): ftp://example.invalid/pods: expected an http:// or https:// URL",
        ),
        (&["extra"], "unexpected argument \"extra\": kubelet-rs takes only flags (see --help)"),
    ];
    for (args, expected) in cases {
        let err = load(args).unwrap_err();
        assert_eq!(err.to_string(), *expected, "args {args:?}");
        assert_eq!(err.exit_code(), 2);
    }
}

#[test]
fn file_values_are_validated_too() {
    let file = config_file(&format!("{HEADER}containerLogMaxFiles: 1\n"));
    let err = load(&["--config", file.path().to_str().unwrap()]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid containerLogMaxFiles (--container-log-max-files): 1: must be at least 2"
    );
    let file = config_file(&format!("{HEADER}logging:\n  format: xml\n"));
    assert!(load(&["--config", file.path().to_str().unwrap()]).is_err());
}

#[test]
fn help_is_exit_code_0() {
    for flag in ["--help", "-h"] {
        let err = load(&[flag]).unwrap_err();
        assert_eq!(err.exit_code(), 0);
        assert!(err.to_string().contains("--pod-manifest-path"));
    }
    assert!(load(&["--help=false"]).is_ok());
}

#[test]
fn auth_and_tls_defaults_differ_between_cli_and_config_file() {
    let c = load(&[]).unwrap();
    assert!(c.anonymous_auth, "legacy CLI default");
    assert!(!c.authentication_token_webhook);
    assert_eq!(c.authorization_mode, AuthorizationMode::AlwaysAllow);
    assert_eq!(c.cert_dir, PathBuf::from("/var/lib/kubelet-rs/pki"));
    assert_eq!(
        c.authentication_token_webhook_cache_ttl,
        Duration::from_secs(120)
    );
    assert_eq!(
        c.authorization_webhook_cache_authorized_ttl,
        Duration::from_secs(300)
    );
    assert_eq!(
        c.authorization_webhook_cache_unauthorized_ttl,
        Duration::from_secs(30)
    );

    let file = config_file(HEADER);
    let c = load(&[&format!("--config={}", file.path().display())]).unwrap();
    assert!(!c.anonymous_auth, "v1beta1 default");
    assert!(c.authentication_token_webhook);
    assert_eq!(c.authorization_mode, AuthorizationMode::Webhook);
}

#[test]
fn auth_and_tls_settings_from_file_then_flags() {
    let file = config_file(&format!(
        "{HEADER}authentication:\n  x509:\n    clientCAFile: /ca.pem\n  webhook:\n    enabled: false\n    cacheTTL: 10s\n  anonymous:\n    enabled: true\n\
         authorization:\n  mode: AlwaysAllow\n  webhook:\n    cacheAuthorizedTTL: 1m\n    cacheUnauthorizedTTL: 5s\n\
         tlsCertFile: /c.crt\ntlsPrivateKeyFile: /c.key\ntlsMinVersion: VersionTLS13\n"
    ));
    let c = load(&[&format!("--config={}", file.path().display())]).unwrap();
    assert_eq!(c.client_ca_file, Some(PathBuf::from("/ca.pem")));
    assert!(!c.authentication_token_webhook && c.anonymous_auth);
    assert_eq!(
        c.authentication_token_webhook_cache_ttl,
        Duration::from_secs(10)
    );
    assert_eq!(c.authorization_mode, AuthorizationMode::AlwaysAllow);
    assert_eq!(
        c.authorization_webhook_cache_authorized_ttl,
        Duration::from_secs(60)
    );
    assert_eq!(
        c.authorization_webhook_cache_unauthorized_ttl,
        Duration::from_secs(5)
    );
    assert_eq!(c.tls_cert_file, Some(PathBuf::from("/c.crt")));
    assert_eq!(c.tls_min_version.as_deref(), Some("VersionTLS13"));

    let c = load(&[
        &format!("--config={}", file.path().display()),
        "--anonymous-auth=false",
        "--authorization-mode=Webhook",
        "--authentication-token-webhook",
        "--root-dir=/r",
        "--tls-min-version=VersionTLS12",
        "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ])
    .unwrap();
    assert!(!c.anonymous_auth && c.authentication_token_webhook);
    assert_eq!(c.authorization_mode, AuthorizationMode::Webhook);
    assert_eq!(c.cert_dir, PathBuf::from("/r/pki"));
    assert_eq!(c.tls_cipher_suites.len(), 2);
}

#[test]
fn allowed_unsafe_sysctls_from_the_file_or_the_flag_and_unknown_namespaces_refused() {
    let file = config_file(&format!(
        "{HEADER}allowedUnsafeSysctls:\n- kernel.msg*\n- net.core.somaxconn\n"
    ));
    let c = load(&[&format!("--config={}", file.path().display())]).unwrap();
    assert_eq!(
        c.allowed_unsafe_sysctls,
        ["kernel.msg*", "net.core.somaxconn"]
    );
    let c = load(&["--allowed-unsafe-sysctls=kernel.sem, net.*"]).unwrap();
    assert_eq!(c.allowed_unsafe_sysctls, ["kernel.sem", "net.*"]);
    let err = load(&["--allowed-unsafe-sysctls=vm.swappiness"]).unwrap_err();
    assert!(err.to_string().contains("allowedUnsafeSysctls"), "{err}");
    assert!(
        err.to_string().contains("not known to be namespaced"),
        "{err}"
    );
}

#[test]
fn auth_and_tls_mistakes_are_usage_errors() {
    let err = load(&["--authorization-mode=RBAC"]).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("--authorization-mode"), "{err}");
    let err = load(&["--tls-cipher-suites=TLS_RSA_WITH_RC4_128_SHA"]).unwrap_err();
    assert!(
        err.to_string().contains("TLS_RSA_WITH_RC4_128_SHA"),
        "{err}"
    );
    assert_eq!(err.exit_code(), 2);
    let err = load(&["--tls-min-version=TLS1.2"]).unwrap_err();
    assert!(err.to_string().contains("tlsMinVersion"), "{err}");
    let err = load(&["--tls-cert-file=/a.crt"]).unwrap_err();
    assert!(err.to_string().contains("both or neither"), "{err}");

    let file = config_file(&format!(
        "{HEADER}authentication:\n  webhook:\n    enable: true\n"
    ));
    let c = load(&[&format!("--config={}", file.path().display())]).unwrap();
    assert_eq!(
        c.unknown_config_fields,
        vec!["authentication.webhook.enable"]
    );
    let file = config_file(&format!("{HEADER}authorization:\n  mode: Node\n"));
    let err = load(&[&format!("--config={}", file.path().display())]).unwrap_err();
    assert!(err.to_string().contains("authorization.mode"), "{err}");
    let file = config_file(&format!(
        "{HEADER}authentication:\n  anonymous:\n    enabled: yes please\n"
    ));
    let err = load(&[&format!("--config={}", file.path().display())]).unwrap_err();
    assert!(
        err.to_string().contains("authentication.anonymous.enabled"),
        "{err}"
    );
}

#[test]
fn image_gc_defaults_file_and_flags() {
    let c = load(&[]).unwrap();
    assert_eq!(c.image_gc_high_threshold_percent, 85);
    assert_eq!(c.image_gc_low_threshold_percent, 80);
    assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
    assert_eq!(c.image_gc_period, Duration::from_secs(300));
    assert_eq!(c.image_fs_path, PathBuf::from("/var/lib/containerd"));

    // imageMinimumGCAge is not a pointer upstream: "0s" (as kubeadm writes it) means 2m.
    let file = config_file(&format!(
        "{HEADER}imageGCHighThresholdPercent: 70\nimageGCLowThresholdPercent: 0\nimageMinimumGCAge: 0s\n"
    ));
    let path = format!("--config={}", file.path().display());
    let c = load(&[&path]).unwrap();
    assert_eq!(c.image_gc_high_threshold_percent, 70);
    assert_eq!(c.image_gc_low_threshold_percent, 0, "a pointer: 0 is kept");
    assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
    assert!(!c
        .unimplemented_config_fields
        .iter()
        .any(|f| f.starts_with("imageGC") || f == "imageMinimumGCAge"));

    let c = load(&[
        &path,
        "--image-gc-high-threshold=100",
        "--image-gc-low-threshold",
        "90",
        "--minimum-image-ttl-duration=0s",
        "--image-gc-period=1s",
        "--image-fs-path=/mnt/images",
    ])
    .unwrap();
    assert_eq!(c.image_gc_high_threshold_percent, 100);
    assert_eq!(c.image_gc_low_threshold_percent, 90);
    assert_eq!(c.image_minimum_gc_age, Duration::ZERO, "a flag may set 0");
    assert_eq!(c.image_gc_period, Duration::from_secs(1));
    assert_eq!(c.image_fs_path, PathBuf::from("/mnt/images"));
}

#[test]
fn image_maximum_gc_age_is_read_validated_and_no_longer_warned_about() {
    assert_eq!(load(&[]).unwrap().image_maximum_gc_age, Duration::ZERO);
    let file = config_file(&format!("{HEADER}imageMaximumGCAge: 168h\n"));
    let path = format!("--config={}", file.path().display());
    let c = load(&[&path]).unwrap();
    assert_eq!(c.image_maximum_gc_age, Duration::from_secs(168 * 3600));
    assert!(!c
        .unimplemented_config_fields
        .iter()
        .any(|f| f == "imageMaximumGCAge"));
    let file = config_file(&format!("{HEADER}imageMaximumGCAge: 1m\n"));
    let err = load(&[&format!("--config={}", file.path().display())]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid imageMaximumGCAge: 1m0s: must be greater than imageMinimumGCAge (--minimum-image-ttl-duration) 2m0s"
    );
}

#[test]
fn image_gc_mistakes_are_one_line_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--image-gc-high-threshold=101"],
            "invalid imageGCHighThresholdPercent (--image-gc-high-threshold): 101: must be between 0 and 100, inclusive",
        ),
        (
            &["--image-gc-low-threshold=-1"],
            "invalid imageGCLowThresholdPercent (--image-gc-low-threshold): -1: must be between 0 and 100, inclusive",
        ),
        (
            &["--image-gc-high-threshold=80"],
            "invalid imageGCLowThresholdPercent (--image-gc-low-threshold): 80: must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80",
        ),
        (
            &["--image-gc-high-threshold=high"],
            "invalid value \"high\" for flag --image-gc-high-threshold: expected an integer",
        ),
        (
            &["--minimum-image-ttl-duration=2"],
            "invalid value \"2\" for flag --minimum-image-ttl-duration: missing unit (one of ns, us, ms, s, m, h)",
        ),
        (
            &["--image-gc-period=0s"],
            "invalid --image-gc-period: 0s: must be greater than 0",
        ),
        (
            &["--image-fs-path=containerd"],
            "invalid --image-fs-path: containerd: must be an absolute path",
        ),
    ];
    for (args, expected) in cases {
        let err = load(args).unwrap_err();
        assert_eq!(err.to_string(), *expected, "args {args:?}");
        assert_eq!(err.exit_code(), 2);
    }
    let file = config_file(&format!(
        "{HEADER}imageGCHighThresholdPercent: 50\nimageGCLowThresholdPercent: 60\n"
    ));
    let err = load(&[&format!("--config={}", file.path().display())]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid imageGCLowThresholdPercent (--image-gc-low-threshold): 60: must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 50"
    );
    let file = config_file(&format!("{HEADER}imageGCHighThresholdPercent: \"85\"\n"));
    let err = load(&[&format!("--config={}", file.path().display())]).unwrap_err();
    assert!(
        err.to_string()
            .contains("field imageGCHighThresholdPercent: expected an integer"),
        "{err}"
    );
}

#[test]
fn seccomp_default_from_file_and_flag_is_implemented() {
    assert!(!load(&[]).unwrap().seccomp_default);

    let file = config_file(&format!("{HEADER}seccompDefault: true\n"));
    let path = format!("--config={}", file.path().display());
    let c = load(&[&path]).unwrap();
    assert!(c.seccomp_default);
    assert!(!c
        .unimplemented_config_fields
        .iter()
        .any(|f| f == "seccompDefault"));

    let c = load(&["--seccomp-default"]).unwrap();
    assert!(c.seccomp_default);
    assert!(
        c.unimplemented_flags.is_empty(),
        "{:?}",
        c.unimplemented_flags
    );
    // The flag wins over the file, as every flag does.
    let c = load(&[&path, "--seccomp-default=false"]).unwrap();
    assert!(!c.seccomp_default);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn image_pull_settings_defaults_file_and_flags() {
    let c = load(&[]).unwrap();
    assert!(c.serialize_image_pulls);
    assert_eq!(c.max_parallel_image_pulls, None);
    assert!(c.insecure_registries.is_empty());

    // v1beta1 defaulting: a limit of two or more alone turns serialized pulls off.
    let file = config_file(&format!("{HEADER}maxParallelImagePulls: 3\n"));
    let path = format!("--config={}", file.path().display());
    let c = load(&[&path]).unwrap();
    assert!(!c.serialize_image_pulls);
    assert_eq!(c.max_parallel_image_pulls, Some(3));
    assert!(!c
        .unimplemented_config_fields
        .iter()
        .any(|f| f == "serializeImagePulls" || f == "maxParallelImagePulls"));

    // A limit of one keeps the default.
    let file = config_file(&format!("{HEADER}maxParallelImagePulls: 1\n"));
    let c = load(&[&format!("--config={}", file.path().display())]).unwrap();
    assert!(c.serialize_image_pulls);
    assert_eq!(c.max_parallel_image_pulls, Some(1));

    let file = config_file(&format!(
        "{HEADER}serializeImagePulls: false\nmaxParallelImagePulls: 2\n"
    ));
    let path = format!("--config={}", file.path().display());
    let c = load(&[&path]).unwrap();
    assert!(!c.serialize_image_pulls);
    assert_eq!(c.max_parallel_image_pulls, Some(2));

    let c = load(&[
        "--serialize-image-pulls=false",
        "--insecure-registry=reg.lan:5000",
        "--insecure-registry",
        "10.1.0.0/16",
    ])
    .unwrap();
    assert!(!c.serialize_image_pulls);
    assert_eq!(c.max_parallel_image_pulls, None, "no flag upstream");
    assert_eq!(c.insecure_registries, ["reg.lan:5000", "10.1.0.0/16"]);
    let c = load(&["--serialize-image-pulls"]).unwrap();
    assert!(c.serialize_image_pulls);
}

#[test]
fn image_pull_mistakes_are_one_line_usage_errors() {
    let file_cases = [
        (
            "maxParallelImagePulls: 0\n",
            "invalid maxParallelImagePulls: 0: must be a positive number",
        ),
        (
            "serializeImagePulls: false\nmaxParallelImagePulls: -2\n",
            "invalid maxParallelImagePulls: -2: must be a positive number",
        ),
        (
            "serializeImagePulls: true\nmaxParallelImagePulls: 2\n",
            "invalid maxParallelImagePulls: 2: cannot be larger than 1 unless serializeImagePulls (--serialize-image-pulls) is false",
        ),
    ];
    for (body, expected) in file_cases {
        let file = config_file(&format!("{HEADER}{body}"));
        let err = load(&[&format!("--config={}", file.path().display())]).unwrap_err();
        assert_eq!(err.to_string(), expected, "file {body:?}");
        assert!(!err.to_string().contains('\n'));
        assert_eq!(err.exit_code(), 2);
    }
    // The flag wins over the file, and then the pair contradicts itself.
    let file = config_file(&format!("{HEADER}maxParallelImagePulls: 4\n"));
    let err = load(&[
        &format!("--config={}", file.path().display()),
        "--serialize-image-pulls=true",
    ])
    .unwrap_err();
    assert!(err.to_string().contains("cannot be larger than 1"), "{err}");
    assert_eq!(err.exit_code(), 2);

    let file = config_file(&format!("{HEADER}serializeImagePulls: \"no\"\n"));
    let err = load(&[&format!("--config={}", file.path().display())]).unwrap_err();
    assert!(
        err.to_string()
            .contains("field serializeImagePulls: expected true or false"),
        "{err}"
    );
    let cases: &[(&[&str], &str)] = &[
        (
            &["--serialize-image-pulls=maybe"],
            "invalid value \"maybe\" for flag --serialize-image-pulls:",
        ),
        (
            &["--insecure-registry="],
            "invalid value \"\" for flag --insecure-registry: expected HOST[:PORT] or a CIDR range",
        ),
        (
            &["--max-parallel-image-pulls=2"],
            "unknown flag: --max-parallel-image-pulls",
        ),
    ];
    for (args, expected) in cases {
        let err = load(args).unwrap_err();
        assert!(
            err.to_string().starts_with(expected),
            "args {args:?}: {err}"
        );
        assert_eq!(err.exit_code(), 2);
    }
}

#[test]
fn containerd_namespace_follows_containerds_identifier_rule() {
    for good in ["k8s.io", "kubelet-rs", "A_b.c-9", &"a".repeat(76)] {
        let c = load(&[&format!("--containerd-namespace={good}")]).unwrap();
        assert_eq!(c.containerd_namespace, good);
    }
    let rule = "must be ASCII letters and digits, joined by single '.', '_' or '-' \
                (containerd's identifier rule [A-Za-z0-9]+([._-][A-Za-z0-9]+)*)";
    // A control character or a non-ASCII byte used to reach the gRPC header and panic there.
    for bad in [
        "ns\u{1}x", "ns\nx", "názov", "a b", "a--b", "a..b", "-a", "a.", "a:b", "a/b",
    ] {
        let err = load(&[&format!("--containerd-namespace={bad}")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("invalid value {bad:?} for flag --containerd-namespace: {rule}")
        );
        assert_eq!(err.exit_code(), 2);
    }
    let long = "a".repeat(77);
    let err = load(&[&format!("--containerd-namespace={long}")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("invalid value {long:?} for flag --containerd-namespace: must be at most 76 characters (containerd's limit), got 77")
    );
    let err = load(&["--containerd-namespace="]).unwrap_err();
    assert!(err.to_string().ends_with(": must not be empty"), "{err}");
}

#[test]
fn node_settings_default_as_upstream() {
    let c = load(&[]).unwrap();
    assert!(c.register_node);
    assert!(c.node_labels.is_empty() && c.register_with_taints.is_empty());
    assert!(c.node_ip.is_none());
    assert!(c.kube_reserved.is_empty() && c.system_reserved.is_empty());
    assert_eq!(c.node_status_update_frequency, Duration::from_secs(10));
    assert_eq!(c.node_status_report_frequency, Duration::from_secs(300));
    assert_eq!(c.node_lease_duration_seconds, 40);
    let hard: Vec<(String, String)> = c
        .eviction_hard
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    assert_eq!(
        hard,
        [
            ("imagefs.available", "15%"),
            ("imagefs.inodesFree", "5%"),
            ("memory.available", "104857600"),
            ("nodefs.available", "10%"),
            ("nodefs.inodesFree", "5%"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
    );
}

#[test]
fn node_flags_parse_and_merge() {
    let c = load(&[
        "--node-labels=role=db,example.com/team=a",
        "--node-labels",
        "zone=z1",
        "--register-with-taints=dedicated=gpu:NoSchedule",
        "--node-ip=10.1.2.3",
        "--register-node=false",
        "--kube-reserved=cpu=100m,memory=256Mi",
        "--system-reserved=ephemeral-storage=1Gi",
        "--eviction-hard=memory.available<1Gi",
        "--node-status-update-frequency=4s",
    ])
    .unwrap();
    assert_eq!(
        c.node_labels.len(),
        3,
        "later uses add: {:?}",
        c.node_labels
    );
    assert_eq!(c.node_labels["role"], "db");
    assert_eq!(c.register_with_taints[0].key, "dedicated");
    assert_eq!(c.node_ip, Some("10.1.2.3".parse().unwrap()));
    assert!(!c.register_node);
    assert_eq!(c.kube_reserved["cpu"].milli_value(), 100);
    assert_eq!(c.system_reserved["ephemeral-storage"].value(), 1 << 30);
    assert_eq!(
        c.eviction_hard.len(),
        1,
        "a given map replaces the defaults"
    );
    assert_eq!(c.node_status_update_frequency, Duration::from_secs(4));
    assert_eq!(
        c.node_status_report_frequency,
        Duration::from_secs(300),
        "the flag alone leaves the report frequency"
    );
}

#[test]
fn node_flags_are_validated_as_upstream() {
    let err = load(&["--node-labels=node-role.kubernetes.io/worker="]).unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown 'kubernetes.io' or 'k8s.io' labels"),
        "{err}"
    );
    let err = load(&["--node-ip=127.0.0.1"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid --node-ip: 127.0.0.1: nodeIP can't be loopback address"
    );
    assert!(load(&["--register-with-taints=k=v"]).is_err());
    assert!(load(&["--kube-reserved=gpu=1"]).is_err());
    assert!(load(&["--eviction-hard=memory.available=1Gi"]).is_err());
    assert!(load(&["--node-status-update-frequency=0s"]).is_err());
}

#[test]
fn node_settings_from_the_file() {
    let file = config_file(&format!(
        "{HEADER}registerNode: false\nregisterWithTaints:\n- key: k\n  value: v\n  effect: NoExecute\n\
         kubeReserved:\n  cpu: 500m\nsystemReserved:\n  memory: 1Gi\n\
         evictionHard:\n  memory.available: 5%\n  pid.available: \"1000\"\n\
         nodeStatusUpdateFrequency: 20s\nnodeLeaseDurationSeconds: 60\n"
    ));
    let c = load(&["--config", file.path().to_str().unwrap()]).unwrap();
    assert!(
        c.unimplemented_config_fields.is_empty(),
        "{:?}",
        c.unimplemented_config_fields
    );
    assert!(!c.register_node);
    assert_eq!(c.register_with_taints[0].effect, "NoExecute");
    assert_eq!(c.register_with_taints[0].value.as_deref(), Some("v"));
    assert_eq!(c.kube_reserved["cpu"].milli_value(), 500);
    assert_eq!(c.system_reserved["memory"].value(), 1 << 30);
    assert_eq!(c.eviction_hard["pid.available"].amount(0), 1000);
    assert_eq!(c.node_status_update_frequency, Duration::from_secs(20));
    assert_eq!(
        c.node_status_report_frequency,
        Duration::from_secs(20),
        "v1beta1 defaulting follows an explicit update frequency"
    );
    assert_eq!(c.node_lease_duration_seconds, 60);

    let file = config_file(&format!(
        "{HEADER}registerWithTaints:\n- key: k\n  effect: Sometimes\n"
    ));
    let err = load(&["--config", file.path().to_str().unwrap()]).unwrap_err();
    assert!(err.to_string().contains("registerWithTaints[0]"), "{err}");
    let file = config_file(&format!("{HEADER}kubeReserved:\n  gpu: \"1\"\n"));
    assert!(load(&["--config", file.path().to_str().unwrap()]).is_err());
}

#[test]
fn container_manager_settings_default_as_upstream() {
    let c = load(&[]).unwrap();
    assert!(c.cgroups_per_qos);
    assert_eq!(
        c.cgroup_driver,
        crate::vocabulary::cgroup_names::CgroupDriver::Cgroupfs
    );
    assert_eq!(c.cgroup_root, "/");
    assert_eq!(c.enforce_node_allocatable, vec!["pods".to_string()]);
    assert_eq!(c.pod_pids_limit, -1);
    assert!(c.kube_reserved_cgroup.is_empty() && c.system_reserved_cgroup.is_empty());
    let z = configz_json(&c);
    assert_eq!(z["kubeletconfig"]["cgroupsPerQOS"], true);
    assert_eq!(z["kubeletconfig"]["cgroupDriver"], "cgroupfs");
    assert_eq!(z["kubeletconfig"]["enforceNodeAllocatable"][0], "pods");
    assert_eq!(z["kubeletconfig"]["podPidsLimit"], -1);
}

#[test]
fn container_manager_settings_from_file_and_flags() {
    let file = config_file(&format!(
        "{HEADER}cgroupDriver: systemd\ncgroupRoot: /krs.slice\npodPidsLimit: 1024\n\
         enforceNodeAllocatable: [pods, kube-reserved]\nkubeReservedCgroup: /krs.slice/krs-kube.slice\n"
    ));
    let path = file.path().to_str().unwrap();
    let c = load(&["--config", path]).unwrap();
    assert_eq!(
        c.cgroup_driver,
        crate::vocabulary::cgroup_names::CgroupDriver::Systemd
    );
    assert_eq!(c.cgroup_root, "/krs.slice");
    assert_eq!(c.pod_pids_limit, 1024);
    assert_eq!(c.enforce_node_allocatable, vec!["pods", "kube-reserved"]);
    assert!(
        c.unimplemented_config_fields.is_empty(),
        "{:?}",
        c.unimplemented_config_fields
    );
    assert_eq!(
        configz_json(&c)["kubeletconfig"]["kubeReservedCgroup"],
        "/krs.slice/krs-kube.slice"
    );
    // Flags win; an empty list enforces nothing, which cgroupsPerQOS off needs.
    let c = load(&[
        "--config",
        path,
        "--cgroup-driver=cgroupfs",
        "--cgroup-root=/krs",
        "--kube-reserved-cgroup=/kube",
        "--pod-max-pids=-1",
        "--enforce-node-allocatable=",
        "--cgroups-per-qos=false",
    ])
    .unwrap();
    assert_eq!(
        c.cgroup_driver,
        crate::vocabulary::cgroup_names::CgroupDriver::Cgroupfs
    );
    assert_eq!((c.cgroup_root.as_str(), c.pod_pids_limit), ("/krs", -1));
    assert!(c.enforce_node_allocatable.is_empty() && !c.cgroups_per_qos);
    // An explicit empty list in the file is kept, as upstream's defaulting keeps it.
    let file = config_file(&format!(
        "{HEADER}enforceNodeAllocatable: []\ncgroupsPerQOS: false\n"
    ));
    let c = load(&["--config", file.path().to_str().unwrap()]).unwrap();
    assert!(c.enforce_node_allocatable.is_empty() && !c.cgroups_per_qos);
}

#[test]
fn container_manager_settings_are_validated() {
    let err = |args: &[&str]| load(args).unwrap_err().to_string();
    assert!(err(&["--cgroup-driver=docker"]).contains("expected cgroupfs or systemd"));
    let e = err(&["--enforce-node-allocatable=pods,memory"]);
    assert!(
        e.contains("enforceNodeAllocatable") && e.contains("unknown option"),
        "{e}"
    );
    let e = err(&["--enforce-node-allocatable=none,pods"]);
    assert!(e.contains("must not be combined"), "{e}");
    let e = err(&["--enforce-node-allocatable=pods,system-reserved"]);
    assert!(
        e.contains("systemReservedCgroup") && e.contains("must be specified"),
        "{e}"
    );
    let e = err(&["--cgroups-per-qos=false"]);
    assert!(e.contains("cgroupsPerQOS"), "{e}");
    // cgroupRoot in the cgroupfs spelling with the systemd driver (kind, kubeadm): upstream
    // accepts it and names the slice after it.
    let c = load(&["--cgroup-driver=systemd", "--cgroup-root=/kubelet"]).unwrap();
    assert_eq!(
        crate::cm::Layout::from_config(&c)
            .kubepods()
            .to_path(c.cgroup_driver),
        "/kubelet.slice/kubelet-kubepods.slice"
    );
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    // Nested, as a path: a slice per level (systemd's own reading of a name would keep only
    // the last one).
    let c = load(&["--cgroup-driver=systemd", "--cgroup-root=/nodes/kubelet"]).unwrap();
    assert_eq!(
        crate::cm::Layout::from_config(&c)
            .kubepods()
            .to_path(c.cgroup_driver),
        "/nodes.slice/nodes-kubelet.slice/nodes-kubelet-kubepods.slice"
    );
    // A slice spelling is read as upstream reads it, with a warning that says where pods go.
    let c = load(&["--cgroup-driver=systemd", "--cgroup-root=/krs.slice"]).unwrap();
    let w = c.warnings().join("\n");
    assert!(
        w.contains("/krs.slice.slice/krs.slice-kubepods.slice"),
        "{w}"
    );
    let e = err(&[
        "--cgroup-driver=systemd",
        "--kube-reserved-cgroup=/a--b.slice",
    ]);
    assert!(
        e.contains("kubeReservedCgroup") && e.contains("slice"),
        "{e}"
    );
    assert!(err(&["--pod-max-pids=lots"]).contains("expected an integer"));
    assert!(load(&["--enforce-node-allocatable=none", "--cgroups-per-qos=false"]).is_ok());
}

/// The KubeletConfiguration upstream's node e2e runner writes (see the file's header).
const NODE_E2E_CONFIG: &str = include_str!("testdata/node-e2e-kubelet-config.yaml");

/// The runner's files in a temporary folder: `kubelet-config` and an empty
/// `kubelet.conf.d`, as services/kubelet.go lays them out.
fn node_e2e_files() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kubelet-config");
    std::fs::write(&config, NODE_E2E_CONFIG).unwrap();
    let dropins = dir.path().join("kubelet.conf.d");
    std::fs::create_dir(&dropins).unwrap();
    (
        dir,
        config.display().to_string(),
        dropins.display().to_string(),
    )
}

/// The runner's command line (services/kubelet.go, as run on this kind of machine).
fn node_e2e_args<'a>(config: &'a str, dropins: &'a str) -> Vec<&'a str> {
    vec![
        "kubelet",
        "--runtime-cgroups=/docker-daemon",
        "--kubeconfig",
        "/root/e2e/kubeconfig",
        "--root-dir",
        "/var/lib/kubelet",
        "--v",
        "4",
        "--config-dir",
        dropins,
        "--hostname-override",
        "e2e-node",
        "--container-runtime-endpoint",
        "unix:///run/containerd/containerd.sock",
        "--config",
        config,
    ]
}

#[test]
fn node_e2e_runner_command_line_and_config_load() {
    let (_dir, config, dropins) = node_e2e_files();
    let c = load_from_args(node_e2e_args(&config, &dropins)).unwrap();
    assert_eq!(c.node_name, "e2e-node");
    assert_eq!(c.kubeconfig, Some(PathBuf::from("/root/e2e/kubeconfig")));
    assert_eq!(c.root_dir, PathBuf::from("/var/lib/kubelet"));
    assert_eq!(c.verbosity, 4);
    assert_eq!(c.config_dir, Some(PathBuf::from(&dropins)));
    assert_eq!(
        c.static_pod_path,
        Some(PathBuf::from("/root/e2e/static-pods1234567"))
    );
    assert_eq!(c.read_only_port, 10255);
    assert!(c.anonymous_auth);
    assert!(!c.authentication_token_webhook);
    assert_eq!(c.authorization_mode, AuthorizationMode::AlwaysAllow);
    assert_eq!(c.cgroup_root, "/");
    assert_eq!(
        c.cgroup_driver,
        crate::vocabulary::cgroup_names::CgroupDriver::Cgroupfs
    );
    assert!(c.cgroups_per_qos);
    assert_eq!(c.file_check_frequency, Duration::from_secs(10));
    assert!(!c.serialize_image_pulls);
    assert_eq!(c.max_parallel_image_pulls, None);
    let expected_eviction: BTreeMap<String, String> = [
        ("memory.available", "250Mi"),
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(
        c.eviction_hard,
        node::parse_eviction_thresholds(&expected_eviction).unwrap()
    );
    assert_eq!(
        c.eviction_pressure_transition_period,
        Duration::from_secs(30)
    );
    assert_eq!(
        c.eviction_minimum_reclaim["nodefs.available"].to_string(),
        "5%"
    );
    assert_eq!(c.enforce_node_allocatable, vec!["pods"]);
    assert_eq!(c.pod_pids_limit, -1);
    assert_eq!(c.node_lease_duration_seconds, 40);
    assert_eq!(c.image_gc_high_threshold_percent, 85);
    assert_eq!(c.container_log_max_size, 10 << 20);
    assert_eq!(c.healthz_port, 10248);
    assert_eq!(c.address, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    assert!(
        c.unknown_config_fields.is_empty(),
        "{:?}",
        c.unknown_config_fields
    );

    // What /configz shows the suite: implemented fields, and the others as set.
    let configz = configz_json(&c);
    let k = &configz["kubeletconfig"];
    assert_eq!(k["staticPodPath"], "/root/e2e/static-pods1234567");
    assert_eq!(k["address"], "0.0.0.0");
    assert_eq!(k["readOnlyPort"], 10255);
    assert_eq!(k["cgroupsPerQOS"], true);
    assert_eq!(k["cgroupDriver"], "cgroupfs");
    assert_eq!(k["cgroupRoot"], "/");
    assert_eq!(k["kubeletCgroups"], "/kubelet");
    assert_eq!(k["systemCgroups"], "/system");
    assert_eq!(k["failSwapOn"], false);
    assert_eq!(k["volumeStatsAggPeriod"], "10s");
    assert_eq!(k["kubeAPIQPS"], 50, "upstream's default");
    assert_eq!(k["oomScoreAdj"], -999, "upstream's default");
}

#[test]
fn node_e2e_warning_names_exactly_what_is_not_implemented() {
    let (_dir, config, dropins) = node_e2e_files();
    let c = load_from_args(node_e2e_args(&config, &dropins)).unwrap();
    assert_eq!(c.unimplemented_flags, vec!["--runtime-cgroups"]);
    // Set in the file to something other than upstream's default, and not acted on.
    let fields = ["kubeletCgroups", "podCIDR", "systemCgroups"];
    assert_eq!(c.unimplemented_config_fields, fields);
    assert_eq!(
        c.warnings(),
        vec![format!(
            "accepted but not implemented yet, so without effect: flags --runtime-cgroups; \
             config fields {}",
            fields.join(", ")
        )]
    );

    // Nothing given that the agent lacks: no warning at all.
    assert!(load(&[]).unwrap().warnings().is_empty());
}

#[test]
fn every_not_implemented_flag_takes_a_value_of_its_type_and_is_warned_about() {
    use flags::{Support, ValueType};
    let sample = |ty: ValueType| -> String {
        match ty {
            ValueType::Bool => "true".into(),
            ValueType::Int { min, max } => min.max(0).min(max).to_string(),
            ValueType::Duration => "30s".into(),
            ValueType::Str => "x".into(),
            ValueType::Choice(choices) => choices[0].into(),
            ValueType::StringMap => "a=b,c=d".into(),
            ValueType::Quantity => "1Mi".into(),
            ValueType::ReservedMemory => "0:memory=1Gi,hugepages-1M=2Gi;1:memory=2Gi".into(),
            ValueType::Vmodule => "server=2,pod*=4".into(),
            ValueType::CpuSet => "0-1,3".into(),
        }
    };
    let mut args = vec!["kubelet".to_string(), "--hostname-override=n".to_string()];
    let mut expected = Vec::new();
    for spec in flags::FLAGS {
        if let Support::NotYet(ty) = spec.support {
            args.push(format!("--{}={}", spec.name, sample(ty)));
            expected.push(format!("--{}", spec.name));
        }
    }
    let c = load_from_args(args).unwrap();
    assert_eq!(c.unimplemented_flags, expected);
    assert_eq!(c.warnings().len(), 1);
}

#[test]
fn malformed_values_of_not_implemented_flags_are_refused_naming_the_flag() {
    for (arg, flag, reason) in [
        (
            "--oom-score-adj=abc",
            "--oom-score-adj",
            "expected an integer",
        ),
        (
            "--oom-score-adj=-2000",
            "--oom-score-adj",
            "between -1000 and 1000",
        ),
        ("--kube-api-qps=-1", "--kube-api-qps", "between 0 and"),
        (
            "--cpu-cfs-quota=maybe",
            "--cpu-cfs-quota",
            "expected true or false",
        ),
        (
            "--runtime-request-timeout=2",
            "--runtime-request-timeout",
            "",
        ),
        (
            "--cluster-dns=10.0.0.1,nope",
            "--cluster-dns",
            "not a valid IP address",
        ),
        (
            "--eviction-soft=memory.available<lots",
            "--eviction-soft",
            "",
        ),
        (
            "--eviction-soft=bogus.signal<1Gi",
            "--eviction-soft",
            "unsupported eviction signal",
        ),
        (
            "--feature-gates=A=maybe",
            "--feature-gates",
            "A: expected true or false",
        ),
        ("--hairpin-mode=bridge", "--hairpin-mode", "expected one of"),
        (
            "--reserved-memory=x:memory=1Gi",
            "--reserved-memory",
            "not an integer",
        ),
        (
            "--log-json-info-buffer-size=lots",
            "--log-json-info-buffer-size",
            "",
        ),
        ("--vmodule=server=high", "--vmodule", "not a number"),
        (
            "--cloud-provider=gce",
            "--cloud-provider",
            "expected one of external",
        ),
        (
            "--reserved-cpus=3-1",
            "--reserved-cpus",
            "start exceeds end",
        ),
    ] {
        let err = load(&[arg]).unwrap_err();
        match &err {
            ConfigError::InvalidFlagValue {
                flag: f, reason: r, ..
            } => {
                assert_eq!(f, flag, "{arg}: {err}");
                assert!(r.contains(reason), "{arg}: {err}");
            }
            other => panic!("{arg}: unexpected {other}"),
        }
    }
    // An underscore is a dash, as pflag normalizes the kubelet's flag names.
    let c = load(&["--runtime_cgroups=/rt", "--max_pods=3"]).unwrap();
    assert_eq!(c.unimplemented_flags, vec!["--runtime-cgroups"]);
    assert_eq!(c.max_pods, 3);
}

#[test]
fn malformed_not_implemented_field_in_a_dropin_is_refused_naming_the_file() {
    let (dir, config, dropins) = node_e2e_files();
    let bad = dir.path().join("kubelet.conf.d/50-bad.conf");
    std::fs::write(&bad, format!("{HEADER}oomScoreAdj: 5000\n")).unwrap();
    let err = load_from_args(node_e2e_args(&config, &dropins)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "config file {}: invalid value 5000 for field oomScoreAdj: must be between -1000 \
             and 1000, inclusive",
            bad.display()
        )
    );
}

#[test]
fn config_dir_dropins_override_in_lexical_order_and_flags_override_them() {
    let (dir, config, dropins) = node_e2e_files();
    let d = dir.path().join("kubelet.conf.d");
    std::fs::create_dir(d.join("20-sub")).unwrap();
    let write = |name: &str, body: &str| {
        std::fs::write(d.join(name), format!("{HEADER}{body}")).unwrap();
    };
    write("30-last.conf", "maxPods: 30\nkubeAPIQPS: 10\n");
    write(
        "10-first.conf",
        "maxPods: 10\nsyncFrequency: 2m\nhealthzPort: 0\n",
    );
    write("20-sub/50-inner.conf", "maxPods: 20\nsyncFrequency: 3m\n");
    // Not a drop-in: the suffix must be .conf.
    write("40-ignored.yaml", "maxPods: 40\n");
    // A null removes what came before (JSON merge patch): podCIDR goes back to unset.
    write(
        "35-null.conf",
        "podCIDR: null\nevictionHard:\n  memory.available: 500Mi\n",
    );

    let c = load_from_args(node_e2e_args(&config, &dropins)).unwrap();
    assert_eq!(c.max_pods, 30, "the last drop-in wins");
    assert_eq!(
        c.sync_frequency,
        Duration::from_secs(180),
        "subfolders sort in place"
    );
    assert_eq!(c.healthz_port, 0);
    assert!(c
        .unimplemented_config_fields
        .contains(&"kubeAPIQPS".to_string()));
    assert!(!c
        .unimplemented_config_fields
        .contains(&"podCIDR".to_string()));
    // Maps merge key by key.
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in [
        ("memory.available", "500Mi"),
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
    ] {
        expected.insert(k.into(), v.into());
    }
    assert_eq!(
        c.eviction_hard,
        node::parse_eviction_thresholds(&expected).unwrap()
    );

    // Flags win over the file and every drop-in.
    let mut args = node_e2e_args(&config, &dropins);
    args.push("--max-pods=99");
    let c = load_from_args(args).unwrap();
    assert_eq!(c.max_pods, 99);

    // --config-dir alone: drop-ins over the command-line defaults.
    let c = load(&["--config-dir", &dropins]).unwrap();
    assert_eq!(c.max_pods, 30);
    assert_eq!(c.read_only_port, LEGACY_READ_ONLY_PORT);

    // A drop-in must say what it is, as upstream's decoder requires.
    write("60-untyped.conf", "");
    std::fs::write(d.join("60-untyped.conf"), "maxPods: 5\n").unwrap();
    let err = load(&["--config-dir", &dropins]).unwrap_err();
    assert!(
        err.to_string()
            .contains("60-untyped.conf: apiVersion is \"\""),
        "{err}"
    );

    // A missing folder stops the agent, as upstream's walk does.
    let err = load(&["--config-dir", "/nonexistent/kubelet.conf.d"]).unwrap_err();
    assert!(
        err.to_string().starts_with("config dir /nonexistent"),
        "{err}"
    );
}

#[test]
fn version_flag_prints_and_exits() {
    for arg in ["--version", "--version=raw"] {
        let err = load(&[arg]).unwrap_err();
        assert!(matches!(&err, ConfigError::Help(text) if text.starts_with("kubelet-rs v")));
        assert_eq!(err.exit_code(), 0);
    }
    assert!(load(&["--version=false"]).is_ok());
    let err = load(&["--version=banana"]).unwrap_err();
    assert!(err.to_string().contains("for flag --version"), "{err}");
}

#[test]
fn dns_flags_replace_the_files_servers_and_add_up() {
    let file = config_file(&format!(
        "{HEADER}clusterDNS: [10.96.0.10]\nclusterDomain: cluster.local\nresolvConf: \"\"\n"
    ));
    let path = file.path().to_str().unwrap();
    let c = load(&["--config", path]).unwrap();
    assert_eq!(
        c.cluster_dns,
        vec![IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10))]
    );
    assert_eq!(c.cluster_domain, "cluster.local");
    assert_eq!(
        c.resolv_conf, None,
        "an explicit \"\" means no host resolver"
    );
    let c = load(&[
        "--config",
        path,
        "--cluster-dns=10.0.0.10",
        "--cluster-dns",
        "10.0.0.11,fd00::a",
        "--cluster-domain=k8s.example",
        "--resolv-conf=/run/resolv.conf",
    ])
    .unwrap();
    let servers: Vec<String> = c.cluster_dns.iter().map(|ip| ip.to_string()).collect();
    assert_eq!(servers, ["10.0.0.10", "10.0.0.11", "fd00::a"]);
    assert_eq!(c.cluster_domain, "k8s.example");
    assert_eq!(c.resolv_conf, Some(PathBuf::from("/run/resolv.conf")));
    assert_eq!(
        Config::defaults(true).resolv_conf,
        Some(PathBuf::from("/etc/resolv.conf"))
    );
    let err = load(&["--cluster-dns=10.0.0.300"]).unwrap_err().to_string();
    assert!(
        err.contains("--cluster-dns") && err.contains("10.0.0.300"),
        "{err}"
    );
}

#[test]
fn eviction_flags_and_fields_are_read_and_soft_thresholds_need_a_grace_period() {
    let c = load(&[
        "--eviction-soft=memory.available<1Gi",
        "--eviction-soft-grace-period=memory.available=90s",
        "--eviction-minimum-reclaim=memory.available=100Mi",
        "--eviction-pressure-transition-period=1m",
        "--eviction-max-pod-grace-period=30",
    ])
    .unwrap();
    assert_eq!(c.eviction_soft["memory.available"].amount(0), 1 << 30);
    assert_eq!(
        c.eviction_soft_grace_period["memory.available"],
        Duration::from_secs(90)
    );
    assert_eq!(
        c.eviction_minimum_reclaim["memory.available"].amount(0),
        100 << 20
    );
    assert_eq!(
        c.eviction_pressure_transition_period,
        Duration::from_secs(60)
    );
    assert_eq!(c.eviction_max_pod_grace_period, 30);
    assert!(
        c.unimplemented_flags.is_empty(),
        "{:?}",
        c.unimplemented_flags
    );
    let err = load(&["--eviction-soft=memory.available<1Gi"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("no grace period"), "{err}");
    let file = config_file(&format!(
        "{HEADER}evictionSoft:\n  nodefs.available: 15%\nevictionSoftGracePeriod:\n  nodefs.available: 2m\n\
         evictionPressureTransitionPeriod: 45s\n"
    ));
    let c = load(&["--config", file.path().to_str().unwrap()]).unwrap();
    assert_eq!(c.eviction_soft["nodefs.available"].to_string(), "15%");
    assert_eq!(
        c.eviction_pressure_transition_period,
        Duration::from_secs(45)
    );
    assert!(c.unimplemented_config_fields.is_empty());
}

#[test]
fn enable_server_from_the_file_and_the_flag() {
    assert!(load(&[]).unwrap().enable_server, "on by default");
    let file = config_file(&format!("{HEADER}enableServer: false\n"));
    let path = format!("--config={}", file.path().display());
    let c = load(&[&path]).unwrap();
    assert!(!c.enable_server);
    assert!(
        !c.unimplemented_config_fields
            .iter()
            .any(|f| f == "enableServer"),
        "implemented, not warned about"
    );
    assert_eq!(configz_json(&c)["kubeletconfig"]["enableServer"], false);
    // The flag wins over the file, as every flag does.
    assert!(load(&[&path, "--enable-server"]).unwrap().enable_server);
    let c = load(&["--enable-server=false"]).unwrap();
    assert!(!c.enable_server);
    assert!(!c.unimplemented_flags.iter().any(|f| f == "--enable-server"));
    assert!(load(&["--enable-server=maybe"]).is_err());
}

#[test]
fn swap_local_storage_and_volume_stats_settings_from_the_file_and_the_flags() {
    let c = load(&[]).unwrap();
    assert!(c.fail_swap_on, "upstream's default");
    assert_eq!(c.swap_behavior, SwapBehavior::NoSwap);
    assert!(c.local_storage_capacity_isolation);
    assert_eq!(c.volume_stats_agg_period, Duration::from_secs(60));

    let file = config_file(&format!(
        "{HEADER}failSwapOn: false\nmemorySwap:\n  swapBehavior: LimitedSwap\n\
         localStorageCapacityIsolation: false\nvolumeStatsAggPeriod: 5s\n"
    ));
    let path = file.path().to_str().unwrap();
    let c = load(&["--config", path]).unwrap();
    assert!(!c.fail_swap_on);
    assert_eq!(c.swap_behavior, SwapBehavior::LimitedSwap);
    assert!(!c.local_storage_capacity_isolation);
    assert_eq!(c.volume_stats_agg_period, Duration::from_secs(5));
    assert!(
        c.unimplemented_config_fields.is_empty(),
        "{:?}",
        c.unimplemented_config_fields
    );
    let k = &configz_json(&c)["kubeletconfig"];
    assert_eq!(k["failSwapOn"], false);
    assert_eq!(k["memorySwap"]["swapBehavior"], "LimitedSwap");
    assert_eq!(k["localStorageCapacityIsolation"], false);
    assert_eq!(k["volumeStatsAggPeriod"], "5s");

    let c = load(&[
        "--config",
        path,
        "--fail-swap-on=true",
        "--local-storage-capacity-isolation=true",
        "--volume-stats-agg-period=2s",
    ])
    .unwrap();
    assert!(c.fail_swap_on && c.local_storage_capacity_isolation);
    assert_eq!(c.volume_stats_agg_period, Duration::from_secs(2));
    assert!(
        c.unimplemented_flags.is_empty(),
        "{:?}",
        c.unimplemented_flags
    );

    // As upstream's v1beta1 defaulting: a zero period in the file is the default.
    let zero = config_file(&format!(
        "{HEADER}volumeStatsAggPeriod: 0s\nmemorySwap: {{}}\n"
    ));
    let c = load(&["--config", zero.path().to_str().unwrap()]).unwrap();
    assert_eq!(c.volume_stats_agg_period, Duration::from_secs(60));
    assert_eq!(c.swap_behavior, SwapBehavior::NoSwap);

    let bad = config_file(&format!("{HEADER}memorySwap:\n  swapBehavior: Unlimited\n"));
    let err = load(&["--config", bad.path().to_str().unwrap()]).unwrap_err();
    assert!(err.to_string().contains("memorySwap.swapBehavior"), "{err}");
    assert!(err.to_string().contains("NoSwap or LimitedSwap"), "{err}");
}

#[test]
fn containerd_config_defaults_to_containerds_own_file_and_is_a_flag() {
    let c = load(&[]).unwrap();
    assert_eq!(
        c.containerd_config,
        PathBuf::from("/etc/containerd/config.toml")
    );
    let c = load(&["--containerd-config=/etc/k8s/containerd.toml"]).unwrap();
    assert_eq!(
        c.containerd_config,
        PathBuf::from("/etc/k8s/containerd.toml")
    );
    let err = load(&["--containerd-config="]).unwrap_err();
    assert!(err.to_string().contains("--containerd-config"), "{err}");
}

/// featureGates from the file and --feature-gates over it (gate by gate), the two gates the
/// agent acts on with 1.34's defaults, the others warned about; enableSystemLogHandler and
/// enableSystemLogQuery read (no longer "not implemented"), the query refused without its gate
/// in upstream's words.
#[test]
fn feature_gates_and_the_system_log_switches() {
    let c = load(&[]).unwrap();
    assert!(c.enable_system_log_handler && !c.enable_system_log_query);
    assert!(c.feature_gates.enabled(Gate::KubeletPsi));
    assert!(!c.feature_gates.enabled(Gate::NodeLogQuery));

    let file = config_file(&format!(
        "{HEADER}enableSystemLogHandler: false\nfeatureGates:\n  KubeletPSI: false\n  NodeLogQuery: true\n  SomeGate: true\n"
    ));
    let path = file.path().to_str().unwrap();
    let c = load(&[
        "--config",
        path,
        "--feature-gates=NodeLogQuery=false,Other=1",
    ])
    .unwrap();
    assert!(!c.enable_system_log_handler);
    assert!(
        !c.feature_gates.enabled(Gate::KubeletPsi),
        "the file's value stays"
    );
    assert!(
        !c.feature_gates.enabled(Gate::NodeLogQuery),
        "the flag wins"
    );
    assert!(
        c.unimplemented_config_fields.is_empty(),
        "{:?}",
        c.unimplemented_config_fields
    );
    assert!(
        c.unimplemented_flags.is_empty(),
        "{:?}",
        c.unimplemented_flags
    );
    let warnings = c.warnings().join("\n");
    assert!(
        warnings.contains("feature gates Other, SomeGate"),
        "{warnings}"
    );
    let configz = configz_json(&c);
    assert_eq!(
        configz["kubeletconfig"]["featureGates"]["NodeLogQuery"],
        false
    );
    assert_eq!(configz["kubeletconfig"]["enableSystemLogHandler"], false);

    let file = config_file(&format!("{HEADER}enableSystemLogQuery: true\n"));
    let path = file.path().to_str().unwrap();
    let e = load(&["--config", path]).unwrap_err().to_string();
    assert!(
        e.contains("NodeLogQuery feature gate is required for enableSystemLogHandler"),
        "{e}"
    );
    let c = load(&["--config", path, "--feature-gates=NodeLogQuery=true"]).unwrap();
    assert!(c.enable_system_log_query);
    assert!(load(&["--feature-gates=NodeLogQuery=maybe"]).is_err());
}
