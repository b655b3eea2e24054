//! Cluster-mode harness: an agent joined to the real control plane hack/test.sh starts
//! (hack/cluster/up.sh), and kubectl against it. Each test's node has its own name (its own
//! identity `system:node:<name>`, resolving to 127.0.0.1), containerd namespace, root dir and
//! ports, so cluster tests run in parallel; pods are pinned to their test's node.
//!
//! The control plane is found through KUBELET_RS_CLUSTER_DIR. Without it, or when the
//! apiserver does not answer, a cluster test fails: it never passes without a cluster.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{require_integration, Node};

/// The control plane, as hack/cluster/up.sh left it.
#[derive(Clone)]
pub struct Cluster {
    pub dir: PathBuf,
    pub kubectl: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Cluster {
    /// The running control plane; panics (naming what is missing) when there is none.
    pub fn connect(test: &str) -> Cluster {
        require_integration(test);
        let dir = std::env::var_os("KUBELET_RS_CLUSTER_DIR").map(PathBuf::from);
        let dir = dir.unwrap_or_else(|| {
            panic!(
                "{test}: KUBELET_RS_CLUSTER_DIR is not set: cluster tests need the control plane \
                 hack/cluster/up.sh starts (hack/test.sh starts it)"
            )
        });
        Cluster::in_dir(test, dir)
    }

    fn in_dir(test: &str, dir: PathBuf) -> Cluster {
        let env = std::fs::read_to_string(dir.join("env")).unwrap_or_else(|e| {
            panic!(
                "{test}: no control plane in {}: {e}; run hack/cluster/up.sh",
                dir.display()
            )
        });
        let var = |name: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(PathBuf::from)
                .unwrap_or_else(|| panic!("{test}: {} has no {name}", dir.join("env").display()))
        };
        let cluster = Cluster {
            kubectl: var("KUBECTL"),
            kubeconfig: var("KUBECONFIG"),
            dir,
        };
        let (ok, out) = cluster.kubectl(&["get", "--raw", "/readyz"]);
        assert!(ok, "{test}: the apiserver is not ready: {out}");
        cluster
    }

    /// A control plane of the test's own (for faults that would disturb other tests: the
    /// apiserver stopped), in a fresh directory, ports moved by `port_offset`; stopped with
    /// `PrivateCluster`'s drop.
    pub fn private(test: &str, port_offset: u16) -> PrivateCluster {
        require_integration(test);
        let dir = tempfile::Builder::new()
            .prefix("krs-cluster-")
            .tempdir()
            .unwrap();
        let out = Command::new(hack("up.sh"))
            .arg("--dir")
            .arg(dir.path())
            .arg("--port-offset")
            .arg(port_offset.to_string())
            .output()
            .expect("hack/cluster/up.sh runs");
        let mut down = PrivateCluster { cluster: None, dir };
        assert!(
            out.status.success(),
            "{test}: hack/cluster/up.sh failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        down.cluster = Some(Cluster::in_dir(test, down.dir.path().to_path_buf()));
        down
    }

    /// Stops (`stop`) or starts one component of this control plane (hack/cluster/component.sh).
    pub fn component(&self, action: &str, name: &str) {
        let out = Command::new(hack("component.sh"))
            .args([action, name, "--dir"])
            .arg(&self.dir)
            .output()
            .expect("hack/cluster/component.sh runs");
        assert!(
            out.status.success(),
            "component.sh {action} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs kubectl as the cluster admin; returns (success, stdout, or stderr on failure).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String) {
        self.kubectl_stdin(args, None)
    }

    pub fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--request-timeout", "30s"])
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl runs");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            (true, String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            (false, String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// kubectl that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, out) = self.kubectl(args);
        assert!(ok, "kubectl {}: {out}", args.join(" "));
        out
    }

    /// `kubectl apply -f -` of a manifest.
    pub fn apply(&self, manifest: &str) {
        let (ok, out) = self.kubectl_stdin(&["apply", "-f", "-"], Some(manifest));
        assert!(ok, "kubectl apply: {out}\n{manifest}");
    }

    /// An object as JSON, or None when it does not exist.
    pub fn get(&self, args: &[&str]) -> Option<Value> {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend(["-o", "json"]);
        let (ok, out) = self.kubectl(&a);
        if !ok {
            assert!(out.contains("NotFound"), "kubectl {}: {out}", a.join(" "));
            return None;
        }
        Some(serde_json::from_str(&out).expect("kubectl prints JSON"))
    }

    /// The node's kubeconfig (identity system:node:<name>), made by hack/cluster/node-kubeconfig.sh,
    /// which also points the name at 127.0.0.1 in /etc/hosts.
    pub fn node_kubeconfig(&self, name: &str) -> PathBuf {
        self.kubeconfig_for("node-kubeconfig.sh", name)
    }

    /// Runs hack/cluster/SCRIPT NAME --dir DIR, which prints the path of the kubeconfig it made.
    fn kubeconfig_for(&self, script: &str, name: &str) -> PathBuf {
        let out = Command::new(hack(script))
            .arg(name)
            .arg("--dir")
            .arg(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("{script} runs: {e}"));
        assert!(
            out.status.success(),
            "{script} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("pki/ca.crt")
    }
}

/// hack/cluster/SCRIPT of this checkout.
pub fn hack(script: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("hack/cluster")
        .join(script)
}

/// A control plane started for one test; stopped (hack/cluster/down.sh) when dropped.
pub struct PrivateCluster {
    cluster: Option<Cluster>,
    dir: tempfile::TempDir,
}

impl std::ops::Deref for PrivateCluster {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        self.cluster.as_ref().expect("started")
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = Command::new(hack("down.sh"))
            .arg("--dir")
            .arg(self.dir.path())
            .output();
    }
}

/// An agent joined to the cluster; derefs to the standalone harness's `Node`.
pub struct ClusterNode {
    pub cluster: Cluster,
    pub node: Node,
    pub kubeconfig: PathBuf,
}

impl std::ops::Deref for ClusterNode {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.node
    }
}

impl std::ops::DerefMut for ClusterNode {
    fn deref_mut(&mut self) -> &mut Node {
        &mut self.node
    }
}

impl ClusterNode {
    /// Starts an agent that registers as its own node (with the busybox and pause images in its
    /// namespace) and waits until the Node object exists.
    pub fn start(test: &str, extra: &[&str]) -> ClusterNode {
        Self::start_in(Cluster::connect(test), test, extra)
    }

    /// As `start`, on the given control plane.
    pub fn start_in(cluster: Cluster, test: &str, extra: &[&str]) -> ClusterNode {
        let node = Node::prepare(test, extra, &["pause", "busybox"]);
        let kubeconfig = cluster.node_kubeconfig(&node.node_name);
        let identity = vec![format!("--kubeconfig={}", kubeconfig.display())];
        Self::launch(cluster, node, identity, kubeconfig, 60)
    }

    /// Starts the prepared agent with its identity flags and the cluster's usual ones, and
    /// waits (up to `wait_secs`) until its Node exists.
    fn launch(
        cluster: Cluster,
        mut node: Node,
        identity: Vec<String>,
        kubeconfig: PathBuf,
        wait_secs: u64,
    ) -> ClusterNode {
        // Leftovers of an earlier run of this test (same node name) would be adopted: start clean.
        cluster.kubectl(&["delete", "node", &node.node_name, "--wait=false"]);
        let mut flags = identity;
        flags.extend([
            format!("--client-ca-file={}", cluster.ca_file().display()),
            "--authorization-mode=Webhook".to_string(),
            "--authentication-token-webhook".to_string(),
            // The test machine's disk may well be fuller than upstream's defaults allow
            // (nodefs.available<10%): DiskPressure would taint the node and the scheduler
            // would place nothing on it.
            "--eviction-hard=memory.available<100Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%"
                .to_string(),
        ]);
        flags.append(&mut node.extra_args);
        node.extra_args = flags;
        node.launch();
        let cn = ClusterNode {
            cluster,
            node,
            kubeconfig,
        };
        let name = cn.name().to_string();
        cn.wait_api(wait_secs, "the Node is registered", |c| {
            c.get(&["node", &name]).is_some()
        });
        cn
    }

    pub fn name(&self) -> &str {
        &self.node.node_name
    }

    /// The Node object.
    pub fn node_object(&self) -> Value {
        self.cluster
            .get(&["node", self.name()])
            .expect("the Node exists")
    }

    /// A pod in `default` as the API holds it.
    pub fn api_pod(&self, name: &str) -> Option<Value> {
        self.cluster.get(&["-n", "default", "pod", name])
    }

    /// A busybox pod pinned to this node (through the scheduler: a nodeSelector on the node's
    /// hostname label), named `<name>-<node>`; returns the full name.
    pub fn create_pod(&self, name: &str, script: &str, extra_spec: &str) -> String {
        let full = format!("{name}-{}", self.name());
        self.cluster
            .apply(&api_busybox_pod(&full, self.name(), script, extra_spec));
        full
    }

    /// Waits until `cond` holds, checking every half second; panics with the agent's log.
    pub fn wait_api(&self, timeout_secs: u64, what: &str, mut cond: impl FnMut(&Cluster) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(timeout_secs);
        while !cond(&self.cluster) {
            assert!(
                Instant::now() < deadline,
                "{}: never true within {timeout_secs}s: {what}\nagent log:\n{}",
                self.node.test,
                self.node.log()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Waits until the API pod exists and `pred` holds; returns it.
    pub fn wait_api_pod(
        &self,
        name: &str,
        timeout_secs: u64,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let label = format!("{}: API pod {name}", self.node.test);
        super::wait_object(
            &label,
            timeout_secs,
            what,
            || self.api_pod(name),
            pred,
            |p| serde_json::to_string_pretty(p).unwrap(),
            || self.node.log(),
        )
    }

    /// The pods the API has bound to this node.
    pub fn api_pods(&self) -> Vec<Value> {
        let selector = format!("spec.nodeName={}", self.name());
        self.cluster
            .get(&["pods", "-A", "--field-selector", &selector])
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        // Pods from the API go when the API drops them: force-delete this node's pods while the
        // agent still runs, so it stops their containers (the standalone harness then checks
        // that nothing stays), then remove the Node and its Lease.
        if self.node.is_running() {
            let selector = format!("spec.nodeName={}", self.name());
            self.cluster.kubectl(&[
                "delete",
                "pods",
                "-A",
                "--field-selector",
                &selector,
                "--grace-period=0",
                "--force",
                "--wait=false",
            ]);
        }
        let name = self.name().to_string();
        self.cluster
            .kubectl(&["delete", "node", &name, "--wait=false"]);
        self.cluster.kubectl(&[
            "-n",
            "kube-node-lease",
            "delete",
            "lease",
            &name,
            "--wait=false",
        ]);
    }
}

/// A busybox pod for the API: pinned to `node` by its hostname label, no service-account token
/// (the tests of that volume are in cluster_volumes.rs; the others keep to what they test), `extra_spec` appended to its spec (indented 2).
pub fn api_busybox_pod(name: &str, node: &str, script: &str, extra_spec: &str) -> String {
    let script = script.replace('\'', "''");
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels:
    test-node: {node}
spec:
  nodeSelector:
    kubernetes.io/hostname: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 5
  containers:
  - name: main
    image: {image}
    command: ['sh', '-c', '{script}']
{extra_spec}",
        image = super::BUSYBOX,
    )
}

impl Cluster {
    /// As `private`, with more arguments for hack/cluster/up.sh (`--signing-duration 4m`).
    pub fn private_with(test: &str, port_offset: u16, up_args: &[&str]) -> PrivateCluster {
        require_integration(test);
        let dir = tempfile::Builder::new()
            .prefix("krs-cluster-")
            .tempdir()
            .unwrap();
        let out = Command::new(hack("up.sh"))
            .arg("--dir")
            .arg(dir.path())
            .arg("--port-offset")
            .arg(port_offset.to_string())
            .args(up_args)
            .output()
            .expect("hack/cluster/up.sh runs");
        let mut down = PrivateCluster { cluster: None, dir };
        assert!(
            out.status.success(),
            "{test}: hack/cluster/up.sh failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        down.cluster = Some(Cluster::in_dir(test, down.dir.path().to_path_buf()));
        down
    }

    /// A bootstrap kubeconfig (a fresh bootstrap token) for node `name`, made by
    /// hack/cluster/bootstrap-kubeconfig.sh, which also points the name at 127.0.0.1.
    pub fn bootstrap_kubeconfig(&self, name: &str) -> PathBuf {
        self.kubeconfig_for("bootstrap-kubeconfig.sh", name)
    }
}

impl ClusterNode {
    /// An agent that joins as a kubeadm node does: with only a bootstrap kubeconfig
    /// (`--bootstrap-kubeconfig`), its `--kubeconfig` (`kubeconfig` here, under the node's
    /// root) written by the agent's TLS bootstrap. Waits until the Node object exists.
    pub fn start_bootstrapped(cluster: Cluster, test: &str, extra: &[&str]) -> ClusterNode {
        let node = Node::prepare(test, extra, &["pause", "busybox"]);
        let bootstrap = cluster.bootstrap_kubeconfig(&node.node_name);
        let kubeconfig = node.root.path().join("kubelet.conf");
        let identity = vec![
            format!("--bootstrap-kubeconfig={}", bootstrap.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
        ];
        // Longer than a plain start: the CSR waits for the controller-manager's approval.
        Self::launch(cluster, node, identity, kubeconfig, 90)
    }

    /// The agent's cert dir (the default, `<root-dir>/pki`).
    pub fn cert_dir(&self) -> PathBuf {
        self.node.root.path().join("root/pki")
    }
}

impl Cluster {
    /// Deploys metrics-server on `node` (hack/cluster/metrics-server.sh: upstream's manifests
    /// plus this loopback-only machine's patch) and waits, up to `timeout_secs`, until the
    /// metrics API answers `kubectl top node <node>`; returns the script's output.
    pub fn deploy_metrics_server(&self, node: &str, timeout_secs: u64) -> String {
        let timeout = timeout_secs.to_string();
        let (ok, text) = super::run_text(
            Command::new(hack("metrics-server.sh"))
                .arg("--dir")
                .arg(&self.dir)
                .args(["--node", node, "--timeout", &timeout]),
        );
        assert!(ok, "hack/cluster/metrics-server.sh --node {node}:\n{text}");
        text
    }

    /// Removes metrics-server and its APIService (hack/cluster/metrics-server.sh --delete), so
    /// later tests on the shared control plane see no aggregated API; (success, output).
    pub fn delete_metrics_server(&self) -> (bool, String) {
        super::run_text(
            Command::new(hack("metrics-server.sh"))
                .arg("--dir")
                .arg(&self.dir)
                .arg("--delete"),
        )
    }
}
