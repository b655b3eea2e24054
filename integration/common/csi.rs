//! What the CSI cluster tests share: hack/csi's binaries (built by hack/csi/build.sh), their
//! processes, the driver's requests log and the host's mount table.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::cluster::ClusterNode;

/// A helper process stopped (SIGTERM, then SIGKILL after 5 s) with its test.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        for _ in 0..50 {
            if self.0.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where hack/csi/build.sh put the binaries.
pub struct Bins {
    /// krs-csi-driver, krs-csi-registrar, krs-csi-provisioner.
    pub ours: PathBuf,
    /// Upstream's csi-attacher.
    pub attacher: PathBuf,
}

impl Bins {
    /// hack/csi/build.sh's binaries (hack/test.sh builds them); missing ones fail the test.
    pub fn get() -> Bins {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(root.join("hack/csi/build.sh"))
            .arg("--print")
            .output()
            .expect("hack/csi/build.sh runs");
        assert!(
            out.status.success(),
            "hack/csi/build.sh --print failed (run hack/test.sh, which builds them): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let mut dirs = text.lines().map(PathBuf::from);
        let bins = Bins {
            ours: dirs.next().expect("our bin dir"),
            attacher: dirs.next().expect("the attacher's bin dir"),
        };
        for bin in [
            bins.driver(),
            bins.registrar(),
            bins.provisioner(),
            bins.attacher(),
        ] {
            assert!(
                bin.exists(),
                "{} is not built: run hack/csi/build.sh",
                bin.display()
            );
        }
        bins
    }

    pub fn driver(&self) -> PathBuf {
        self.ours.join("krs-csi-driver")
    }

    pub fn registrar(&self) -> PathBuf {
        self.ours.join("krs-csi-registrar")
    }

    pub fn provisioner(&self) -> PathBuf {
        self.ours.join("krs-csi-provisioner")
    }

    pub fn attacher(&self) -> PathBuf {
        self.attacher.join("csi-attacher")
    }
}

/// Starts `bin` with its stderr in `log`.
pub fn spawn(bin: &Path, args: &[String], log: &Path) -> Proc {
    let log = std::fs::File::create(log).unwrap();
    Proc(
        Command::new(bin)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", bin.display())),
    )
}

/// hack/csi's driver for one node, registered by the registrar through the agent's
/// plugins_registry, with upstream's external-attacher when the driver needs attaching; each
/// process stopped when this is dropped. The registrar may be dropped alone, to deregister.
pub struct NodeDriver {
    pub name: String,
    /// Its socket, folder of volumes and requests log (`requests`).
    pub sock: PathBuf,
    pub data: PathBuf,
    pub reqs: PathBuf,
    pub registrar: Option<Proc>,
    _attacher: Option<Proc>,
    _driver: Proc,
    /// Holds the socket, the volumes and each process's log (`<name>.log`).
    pub work: tempfile::TempDir,
}

impl NodeDriver {
    /// Starts the driver named `name` for `n`'s node with `extra` arguments, its registrar,
    /// and the attacher when `attach`.
    pub fn start(
        bins: &Bins,
        n: &ClusterNode,
        name: &str,
        attach: bool,
        extra: &[String],
    ) -> NodeDriver {
        let work = tempfile::tempdir().unwrap();
        let (sock, data, reqs) = (
            work.path().join("csi.sock"),
            work.path().join("data"),
            work.path().join("requests.jsonl"),
        );
        let s = |p: &Path| p.display().to_string();
        let mut args = vec![
            format!("--endpoint={}", s(&sock)),
            format!("--driver-name={name}"),
            format!("--node-id={}", n.name()),
            format!("--data-dir={}", s(&data)),
            format!("--attach-required={attach}"),
            format!("--requests-log={}", s(&reqs)),
        ];
        args.extend_from_slice(extra);
        let driver = spawn(&bins.driver(), &args, &work.path().join("driver.log"));
        n.wait_until(30, "the driver's socket", || sock.exists());
        let registration = n.root.path().join("root/plugins_registry");
        let registrar = spawn(
            &bins.registrar(),
            &[
                format!("--csi-address={}", s(&sock)),
                format!("--plugin-registration-dir={}", s(&registration)),
            ],
            &work.path().join("registrar.log"),
        );
        let attacher = attach.then(|| {
            spawn(
                &bins.attacher(),
                &[
                    format!("--csi-address={}", s(&sock)),
                    format!("--kubeconfig={}", s(&n.cluster.kubeconfig)),
                    "--leader-election=false".into(),
                    "--timeout=30s".into(),
                ],
                &work.path().join("attacher.log"),
            )
        });
        NodeDriver {
            name: name.to_string(),
            sock,
            data,
            reqs,
            registrar: Some(registrar),
            _attacher: attacher,
            _driver: driver,
            work,
        }
    }
}

impl NodeDriver {
    /// Waits until the node's CSINode lists the driver: the agent registered it.
    pub fn wait_listed(&self, n: &ClusterNode) {
        let node = n.name().to_string();
        n.wait_api(60, "the CSINode lists the driver", |c| {
            c.get(&["csinode", &node]).is_some_and(|cn| {
                cn["spec"]["drivers"]
                    .as_array()
                    .is_some_and(|ds| ds.iter().any(|x| x["name"] == self.name.as_str()))
            })
        });
    }
}

/// The driver's requests log (--requests-log): (method, request) in order.
pub fn requests(log: &Path) -> Vec<(String, Value)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            (
                v["method"].as_str().unwrap_or("").to_string(),
                v["request"].clone(),
            )
        })
        .collect()
}

/// The requests of one method (its last path element, e.g. "NodeStageVolume").
pub fn requests_of(log: &Path, method: &str) -> Vec<Value> {
    requests(log)
        .into_iter()
        .filter(|(m, _)| m.rsplit('/').next() == Some(method))
        .map(|(_, r)| r)
        .collect()
}

pub fn count(log: &Path, method: &str) -> usize {
    requests_of(log, method).len()
}
