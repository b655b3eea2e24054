//! Node identity as in production, against the real control plane (hack/cluster/up.sh:
//! bootstrap tokens, kubeadm's CSR bindings, the controller-manager's approver and signer):
//! a node that starts with only a bootstrap token gets its client certificate and joins as
//! system:node:<name>; with short certificates it rotates them and stays Ready; with
//! serverTLSBootstrap its 10250 serves a cluster-issued certificate once approved.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use base64::Engine;
use common::cluster::{Cluster, ClusterNode};
use serde_json::Value;

fn condition<'a>(obj: &'a Value, kind: &str) -> &'a Value {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn is_ready(n: &ClusterNode) -> bool {
    n.cluster
        .get(&["node", n.name()])
        .is_some_and(|o| condition(&o, "Ready")["status"] == "True")
}

/// The timestamped client pairs in the cert dir (not the `-current` link).
fn client_pairs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.file_name().unwrap().to_string_lossy().into_owned();
                    name.starts_with("kubelet-client-2") && name.ends_with(".pem")
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The leading certificate block of a pair file, as PEM.
fn leaf_pem(pair: &Path) -> String {
    let text = std::fs::read_to_string(pair).unwrap();
    let end = "-----END CERTIFICATE-----";
    let at = text.find(end).expect("a certificate in the pair") + end.len();
    format!("{}\n", &text[..at])
}

fn not_after(pair: &Path) -> SystemTime {
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(leaf_pem(pair).as_bytes()).unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    SystemTime::UNIX_EPOCH + Duration::from_secs(cert.validity().not_after.timestamp() as u64)
}

/// The CSRs in the cluster.
fn csrs(cluster: &Cluster) -> Vec<Value> {
    cluster
        .get(&["csr"])
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

fn issued_pem(csr: &Value) -> Option<String> {
    let b64 = csr["status"]["certificate"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    String::from_utf8(bytes).ok()
}

/// The agent's /metrics (its read-only port).
fn own_metrics(n: &ClusterNode) -> String {
    let (code, body) = common::http_get(n.port, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200, "{body}");
    body
}

/// The sum of the samples of `name` whose labels include each of `labels` (`code="200"`);
/// None when there is none.
fn sample_sum(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            (n == name && labels.iter().all(|x| rest.contains(x))).then(|| value.parse().ok())?
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

fn lease_renewed(cluster: &Cluster, node: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let lease = cluster.get(&["-n", "kube-node-lease", "lease", node])?;
    lease["spec"]["renewTime"].as_str()?.parse().ok()
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn a_node_with_only_a_bootstrap_token_joins_as_itself() {
    let test = "cluster-bootstrap";
    let mut n = ClusterNode::start_bootstrapped(Cluster::connect(test), test, &[]);
    let name = n.name().to_string();
    n.wait_api(90, "the bootstrapped Node is Ready", |_| is_ready(&n));

    // Upstream's file layout: a timestamped pair, the current link to it, the kubeconfig.
    let dir = n.cert_dir();
    let pairs = client_pairs(&dir);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    let current = dir.join("kubelet-client-current.pem");
    assert_eq!(std::fs::read_link(&current).unwrap(), pairs[0]);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&pairs[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(!dir.join("kubelet-client.key.tmp").exists());
    let kubeconfig = std::fs::read_to_string(&n.kubeconfig).unwrap();
    assert!(
        kubeconfig.contains(&format!("client-certificate: \"{}\"", current.display()))
            && kubeconfig.contains("current-context: default-context"),
        "{kubeconfig}"
    );

    // The kubeconfig it wrote is the node's own identity.
    let kc = n.kubeconfig.display().to_string();
    let whoami = n
        .cluster
        .ok(&["--kubeconfig", &kc, "auth", "whoami", "-o", "json"]);
    let who: Value = serde_json::from_str(&whoami).unwrap();
    assert_eq!(
        who["status"]["userInfo"]["username"],
        format!("system:node:{name}")
    );
    assert!(who["status"]["userInfo"]["groups"]
        .as_array()
        .unwrap()
        .contains(&Value::from("system:nodes")));

    // Its certificate came from a node-csr-<hash> request the bootstrap token made, approved
    // by the controller-manager through kubeadm's nodeclient binding.
    let issued = leaf_pem(&pairs[0]);
    let csr = csrs(&n.cluster)
        .into_iter()
        .find(|c| issued_pem(c).as_deref() == Some(issued.as_str()))
        .expect("the CSR that issued the node's certificate");
    assert!(csr["metadata"]["name"]
        .as_str()
        .unwrap()
        .starts_with("node-csr-"));
    assert_eq!(
        csr["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(
        csr["spec"]["usages"],
        serde_json::json!(["digital signature", "client auth"])
    );
    assert!(
        csr["spec"]["username"]
            .as_str()
            .unwrap()
            .starts_with("system:bootstrap:"),
        "{}",
        csr["spec"]
    );
    assert_eq!(condition(&csr, "Approved")["reason"], "AutoApproved");

    // The Node was registered with that identity: NodeRestriction lets only
    // system:node:<name> (or an admin, which this agent never has) create it, and the
    // bootstrap token cannot touch Nodes at all.
    let (allowed, _) = n.cluster.kubectl(&[
        "--kubeconfig",
        &n.cluster.bootstrap_kubeconfig(&name).display().to_string(),
        "get",
        "node",
        &name,
    ]);
    assert!(!allowed, "a bootstrap token may not read Nodes");

    // /metrics: the API client's requests, counted by code as client-go's; without client
    // certificate rotation there is no client certificate manager, so no TTL gauge.
    let m = own_metrics(&n);
    let ok = sample_sum(&m, "rest_client_requests_total", &["code=\"200\""]).unwrap_or(0.0);
    assert!(ok > 0.0, "no successful API request counted: {m}");
    assert!(
        sample_sum(
            &m,
            "rest_client_request_duration_seconds_count",
            &["verb=\"GET\""]
        )
        .is_some_and(|n| n > 0.0),
        "{m}"
    );
    assert!(
        !m.contains("kubelet_certificate_manager_client_ttl_seconds"),
        "{m}"
    );
    assert!(
        m.contains(&format!("kubelet_node_name{{node=\"{name}\"}} 1")),
        "{m}"
    );
    assert!(m.contains("\nkubernetes_build_info{"), "{m}");
    assert!(
        sample_sum(&m, "kubelet_working_pods", &["lifecycle=\"sync\""]).is_some(),
        "{m}"
    );

    // A restart finds a valid kubeconfig and uses it as it is: no new request, no new pair.
    n.kill9();
    n.launch();
    n.wait_until(60, "the restarted agent keeps its kubeconfig", || {
        n.log()
            .contains("kubeconfig exists and is valid, skipping bootstrap")
    });
    let before = lease_renewed(&n.cluster, &name).unwrap();
    n.wait_api(60, "the restarted agent renews its Lease", |c| {
        lease_renewed(c, &name).is_some_and(|t| t > before)
    });
    assert_eq!(client_pairs(&dir), pairs);
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn short_client_certificates_are_rotated_and_the_node_stays_ready() {
    let test = "cluster-bootstrap-rotation";
    // Certificates of 4 minutes: the signer backdates them 5 minutes, so their lifetime is
    // 9 minutes and the node renews at 70-90 % of it, 1.3 to 3.1 minutes after issue.
    let cluster = Cluster::private_with(test, 450, &["--signing-duration", "4m"]);
    let n = ClusterNode::start_bootstrapped((*cluster).clone(), test, &["--rotate-certificates"]);
    let name = n.name().to_string();
    n.wait_api(90, "the bootstrapped Node is Ready", |_| is_ready(&n));
    let dir = n.cert_dir();
    let first = client_pairs(&dir);
    assert_eq!(first.len(), 1, "{first:?}");
    let first_expiry = not_after(&first[0]);

    n.wait_api(300, "a second client certificate", |_| {
        client_pairs(&dir).len() >= 2
    });
    let current = std::fs::read_link(dir.join("kubelet-client-current.pem")).unwrap();
    assert_ne!(current, first[0], "the current link moved to the new pair");
    assert!(not_after(&current) > first_expiry);
    n.wait_until(30, "the API client switches to the new certificate", || {
        n.log()
            .contains("API client switched to the rotated client certificate")
    });
    // The client certificate manager's gauge: the new pair's time to live, at most its
    // 9 minutes; the API client's requests are counted.
    let m = own_metrics(&n);
    let ttl = sample_sum(&m, "kubelet_certificate_manager_client_ttl_seconds", &[])
        .unwrap_or_else(|| panic!("no client TTL gauge: {m}"));
    assert!(ttl > 0.0 && ttl <= 9.0 * 60.0, "client TTL {ttl}");
    assert!(
        m.contains("# TYPE kubelet_certificate_manager_client_expiration_renew_errors counter"),
        "{m}"
    );
    let ok = sample_sum(&m, "rest_client_requests_total", &["code=\"200\""]).unwrap_or(0.0);
    assert!(ok > 0.0, "{m}");
    // The renewal went through the node's own identity, approved by selfnodeclient.
    let renewal = csrs(&n.cluster)
        .into_iter()
        .find(|c| c["spec"]["username"] == format!("system:node:{name}"))
        .expect("a CSR made by the node itself");
    assert!(renewal["metadata"]["name"]
        .as_str()
        .unwrap()
        .starts_with("csr-"));
    assert_eq!(condition(&renewal, "Approved")["reason"], "AutoApproved");

    // Once the first certificate has expired the node still reaches the API: its Lease is
    // renewed later than that, and it stays Ready.
    let expired: chrono::DateTime<chrono::Utc> = first_expiry.into();
    n.wait_api(
        360,
        "the Lease renewed after the first certificate expired",
        |c| lease_renewed(c, &name).is_some_and(|t| t > expired + chrono::Duration::seconds(15)),
    );
    assert!(is_ready(&n), "{}", n.log());
}

/// curl's verdict on the node's 10250 as `name`, checked against the cluster CA: Ok with
/// the HTTP code once the handshake verifies, Err with curl's message before.
fn curl_verified(ca: &Path, name: &str, port: u16) -> Result<String, String> {
    let out = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
            "--cacert",
        ])
        .arg(ca)
        .arg(format!("https://{name}:{port}/healthz"))
        .output()
        .expect("curl runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The subject, issuer and names of the certificate the node serves.
fn served_certificate(name: &str, port: u16) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} -servername {name} </dev/null 2>/dev/null \
             | openssl x509 -noout -subject -issuer -ext subjectAltName"
        ))
        .output()
        .expect("openssl runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn server_tls_bootstrap_serves_the_cluster_issued_certificate_once_approved() {
    let test = "cluster-bootstrap-serving";
    let n = ClusterNode::start_bootstrapped(
        Cluster::connect(test),
        test,
        &["--rotate-server-certificates"],
    );
    let name = n.name().to_string();
    let user = format!("system:node:{name}");
    let mut pending = None;
    n.wait_api(60, "a kubelet-serving CSR from the node", |c| {
        pending = csrs(c).into_iter().find(|csr| {
            csr["spec"]["username"] == user
                && csr["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
        });
        pending.is_some()
    });
    let csr = pending.unwrap();
    assert_eq!(
        csr["spec"]["usages"],
        serde_json::json!(["digital signature", "server auth"])
    );
    // Nobody approves serving certificates on their own: until then there is no certificate
    // to serve, and the handshake fails (upstream: "no serving certificate available").
    assert!(condition(&csr, "Approved").is_null(), "{csr}");
    let ca = n.cluster.ca_file();
    let before = curl_verified(&ca, &name, n.secure_port);
    assert!(before.is_err(), "served before approval: {before:?}");
    // No serving pair yet: the serving TTL gauge is +Inf, as upstream's.
    let m = own_metrics(&n);
    assert_eq!(
        sample_sum(&m, "kubelet_certificate_manager_server_ttl_seconds", &[]),
        Some(f64::INFINITY),
        "{m}"
    );

    let csr_name = csr["metadata"]["name"].as_str().unwrap().to_string();
    n.cluster.ok(&["certificate", "approve", &csr_name]);
    n.wait_until(
        90,
        "10250 serves a certificate the cluster CA verifies",
        || curl_verified(&ca, &name, n.secure_port).is_ok(),
    );
    let served = served_certificate(&name, n.secure_port);
    assert!(
        served.contains(&format!("CN = system:node:{name}"))
            && served.contains("O = system:nodes")
            && served.contains("issuer=CN = kubelet-rs-cluster-ca")
            && served.contains(&format!("DNS:{name}")),
        "{served}"
    );
    // The issued pair's time to live (the signer's default is a year).
    n.wait_until(30, "the serving TTL gauge follows the issued pair", || {
        sample_sum(
            &own_metrics(&n),
            "kubelet_certificate_manager_server_ttl_seconds",
            &[],
        )
        .is_some_and(|t| t.is_finite() && t > 0.0)
    });
    let pair = n.cert_dir().join("kubelet-server-current.pem");
    assert!(
        std::fs::read_link(&pair)
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("kubelet-server-2"),
        "{}",
        pair.display()
    );
    assert!(is_ready(&n), "{}", n.log());
}

/// hack/cluster/SCRIPT with ARGS, its hosts file and lock pointed into `dir` when given (no
/// root, no wait for a resolver); (success, stdout, stderr).
fn hack_cluster(script: &str, args: &[&str], hosts_in: Option<&Path>) -> (bool, String, String) {
    let path = common::cluster::hack(script);
    let mut cmd = Command::new(&path);
    cmd.args(args);
    if let Some(dir) = hosts_in {
        cmd.env("KUBELET_RS_HOSTS_FILE", dir.join("hosts"))
            .env("KUBELET_RS_HOSTS_LOCK", dir.join("hosts.lock"))
            .env("KUBELET_RS_HOSTS_WAIT", "0");
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", path.display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `openssl x509 -noout ARGS` of a certificate file.
fn x509(cert: &Path, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-in"])
        .arg(cert)
        .args(args)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl x509 {args:?} of {}: {}",
        cert.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A cluster directory with only what node-kubeconfig.sh reads: the env file and the CA, made
/// by hack/cluster/pki.sh as up.sh makes it.
fn scratch_cluster_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -euo pipefail; source {root}/hack/lib.sh; source {root}/hack/cluster/pki.sh; pki_ca \"$1/pki\""
        ))
        .arg("pki")
        .arg(dir.path())
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "pki_ca: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        dir.path().join("env"),
        format!(
            "export KUBELET_RS_CLUSTER_SERVER=https://127.0.0.1:1\nexport KUBELET_RS_CLUSTER_DIR={}\n",
            dir.path().display()
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("hosts"), "127.0.0.1 localhost").unwrap();
    dir
}

/// The race a fresh CI machine hit: parallel tests made node certificates at the same moment,
/// openssl shared the CA's serial file, one certificate came out empty and its error was thrown
/// away. Here twelve nodes (and three of them twice more, at once) are set up together on one CA:
/// every certificate must be whole, signed by the CA, for its own name, with a serial of its
/// own, every kubeconfig must name its own files, and the hosts file must hold each name once,
/// a line each, after the line the file started with (which lacked its newline).
#[test]
fn node_identities_made_at_once_are_whole_distinct_and_listed_once() {
    let dir = scratch_cluster_dir();
    let d = dir.path().to_string_lossy().into_owned();
    let names: Vec<String> = (0..12).map(|i| format!("krs-pki-{i}")).collect();
    let runs: Vec<String> = names
        .iter()
        .cloned()
        .chain(names[..3].iter().cloned())
        .chain(names[..3].iter().cloned())
        .collect();
    let barrier = std::sync::Barrier::new(runs.len());
    let results: Vec<(String, bool, String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .map(|name| {
                let (barrier, d) = (&barrier, &d);
                s.spawn(move || {
                    barrier.wait();
                    let (ok, out, err) = hack_cluster(
                        "node-kubeconfig.sh",
                        &[name, "--dir", d],
                        Some(Path::new(d)),
                    );
                    (name.clone(), ok, out, err)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (name, ok, out, err) in &results {
        assert!(ok, "node-kubeconfig.sh {name}: {err}");
        assert_eq!(
            out.trim(),
            format!("{d}/nodes/{name}.kubeconfig"),
            "{name}: {err}"
        );
    }
    let pki = dir.path().join("pki");
    let mut serials = BTreeSet::new();
    for name in &names {
        let cert = pki.join(format!("node-{name}.crt"));
        let verify = Command::new("openssl")
            .args(["verify", "-CAfile"])
            .arg(pki.join("ca.crt"))
            .arg(&cert)
            .output()
            .unwrap();
        assert!(
            verify.status.success(),
            "{name}: {}{}",
            String::from_utf8_lossy(&verify.stdout),
            String::from_utf8_lossy(&verify.stderr)
        );
        let subject = x509(&cert, &["-subject", "-nameopt", "RFC2253"]);
        assert_eq!(
            subject,
            format!("subject=CN=system:node:{name},O=system:nodes"),
            "{name}"
        );
        // The key is the certificate's.
        let key_pub = Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(pki.join(format!("node-{name}.key")))
            .output()
            .unwrap();
        assert!(key_pub.status.success(), "{name}: its key does not load");
        assert_eq!(
            String::from_utf8_lossy(&key_pub.stdout).trim(),
            x509(&cert, &["-pubkey"]),
            "{name}: the key is not the certificate's"
        );
        assert!(
            serials.insert(x509(&cert, &["-serial"])),
            "{name}: a serial given twice"
        );
        let kubeconfig =
            std::fs::read_to_string(dir.path().join(format!("nodes/{name}.kubeconfig"))).unwrap();
        assert!(
            kubeconfig.contains(&format!("client-certificate: {}", cert.display()))
                && kubeconfig.contains("current-context: local"),
            "{name}: {kubeconfig}"
        );
    }
    assert!(!pki.join("ca.srl").exists(), "no serial file is shared");
    let hosts = std::fs::read_to_string(dir.path().join("hosts")).unwrap();
    let lines: Vec<&str> = hosts.lines().collect();
    assert_eq!(lines[0], "127.0.0.1 localhost", "{hosts}");
    assert_eq!(lines.len(), names.len() + 1, "{hosts}");
    for name in &names {
        let line = format!("127.0.0.1 {name}");
        assert_eq!(
            lines.iter().filter(|l| **l == line).count(),
            1,
            "{name} once in:\n{hosts}"
        );
    }
}

/// A failed openssl says why: with the CA's key spoilt, node-kubeconfig.sh fails and its error
/// carries openssl's own words and the file it could not use, not an empty line.
#[test]
fn a_failed_signing_shows_openssls_words() {
    let dir = scratch_cluster_dir();
    let d = dir.path().to_string_lossy().into_owned();
    std::fs::write(dir.path().join("pki/ca.key"), "not a key\n").unwrap();
    let (ok, _, err) = hack_cluster(
        "node-kubeconfig.sh",
        &["krs-pki-broken", "--dir", &d],
        Some(dir.path()),
    );
    assert!(!ok, "signed with a spoilt CA key");
    assert!(
        err.contains(&format!(
            "signing {d}/pki/node-krs-pki-broken with {d}/pki/ca failed"
        )),
        "{err}"
    );
    // openssl 3 says "Could not read CA private key"; older ones "unable to load CA private key".
    assert!(
        err.to_lowercase().contains("ca private key"),
        "openssl's own words are kept: {err}"
    );
    assert!(
        !dir.path().join("pki/node-krs-pki-broken.crt").exists(),
        "no certificate is left that looks made"
    );
}

/// On the real control plane: node identities made from several threads at once all
/// authenticate as their own node.
#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn node_kubeconfigs_made_at_once_authenticate_as_their_nodes() {
    let test = "cluster-pki-parallel";
    let cluster = Cluster::connect(test);
    let names: Vec<String> = (0..6)
        .map(|i| format!("krs-pki-{}-{i}", std::process::id()))
        .collect();
    let kubeconfigs: Vec<PathBuf> = std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|n| {
                let cluster = &cluster;
                s.spawn(move || cluster.node_kubeconfig(n))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (name, kubeconfig) in names.iter().zip(&kubeconfigs) {
        let out = Command::new(&cluster.kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("system:node:{name}")
        );
    }
}
