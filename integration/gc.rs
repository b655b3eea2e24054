//! Image GC against the real containerd. The image filesystem the agent measures is a small
//! loop-mounted ext4 filled past the high threshold with a plain file; since the images do
//! not live on it, removing them frees nothing there, so the agent removes every candidate
//! and then stops with nothing left to remove. The tests assert on image records: the
//! unused one goes, the busybox image of a running pod and the pinned pause image stay, and
//! the pod is untouched.
//!
//! Runs only with KUBELET_RS_INTEGRATION=1, as root; then a missing mkfs.ext4, losetup or
//! loop device is a failure, never a skip.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    busybox_pod, container_status, ctr, purge_namespace, require_integration, Node, BUSYBOX, SOCKET,
};
use kubelet_rs::gc::policy::Candidate;
use kubelet_rs::gc::ImageRuntime;
use kubelet_rs::runtime::pull::{PullOptions, Puller};
use kubelet_rs::runtime::Containerd;
use kubelet_rs::runtime::{ContainerdRuntime, Runtime};
use sha2::{Digest, Sha256};

const PAUSE: &str = "registry.k8s.io/pause:3.10";
const UNUSED: &str = "docker.io/library/krs-gc-unused:1";
const HIGH: u64 = 50;

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd} (needed by the GC tests): {e}"));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd} {args:?} failed: {text}");
    text
}

/// A 32 MiB ext4 on a loop device, mounted on a temporary folder; unmounted and detached on
/// drop, also when the test fails.
struct LoopFs {
    /// Holds the image file and mount point; removed once Drop has unmounted.
    _dir: tempfile::TempDir,
    mount: PathBuf,
    device: Option<String>,
    mounted: bool,
}

impl LoopFs {
    fn new() -> LoopFs {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("fs.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        let mut fs = LoopFs {
            _dir: dir,
            mount,
            device: None,
            mounted: false,
        };
        let image = image.to_str().unwrap();
        run("truncate", &["-s", "32M", image]);
        run("mkfs.ext4", &["-q", image]);
        fs.device = Some(run("losetup", &["-f", "--show", image]).trim().to_string());
        run(
            "mount",
            &[fs.device.as_deref().unwrap(), fs.mount.to_str().unwrap()],
        );
        fs.mounted = true;
        fs
    }

    /// Writes a plain file until use is at least `percent`.
    fn fill_to(&self, percent: u64) {
        let chunk = vec![0x5au8; 1 << 20];
        let mut file = std::fs::File::create(self.mount.join("filler")).unwrap();
        while used_percent(&self.mount) < percent {
            std::io::Write::write_all(&mut file, &chunk).unwrap();
            file.sync_all().unwrap();
        }
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let clean = Command::new("umount").arg(&self.mount).status();
            if !clean.is_ok_and(|s| s.success()) {
                let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
            }
        }
        if let Some(dev) = &self.device {
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
    }
}

/// As upstream and the agent count it: 100 - available*100/capacity.
fn used_percent(path: &Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(path).unwrap();
    let capacity = s.blocks() as u64 * s.fragment_size() as u64;
    let available = s.blocks_available() as u64 * s.fragment_size() as u64;
    100 - available * 100 / capacity
}

fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn put_blob(layout: &Path, bytes: &[u8]) -> (String, usize) {
    let hex = hex::encode(Sha256::digest(bytes));
    std::fs::write(layout.join("blobs/sha256").join(&hex), bytes).unwrap();
    (format!("sha256:{hex}"), bytes.len())
}

/// Where containerd keeps a blob (its default root).
fn blob_path(digest: &str) -> PathBuf {
    Path::new("/var/lib/containerd/io.containerd.content.v1.content/blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

/// Imports a one-layer image of its own content (so it shares nothing with busybox or with
/// the other test) named `UNUSED` into the namespace; returns its layer's digest.
fn import_unused_image(ns: &str) -> String {
    let work = tempfile::tempdir().unwrap();
    let rootfs = work.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    std::fs::write(
        rootfs.join("gc-marker"),
        format!("kubelet-rs image GC test {ns}\n"),
    )
    .unwrap();
    let layer = work.path().join("layer.tar");
    run(
        "tar",
        &[
            "-cf",
            layer.to_str().unwrap(),
            "-C",
            rootfs.to_str().unwrap(),
            "--owner=0",
            "--group=0",
            "gc-marker",
        ],
    );
    let layout = work.path().join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    let (layer_digest, layer_size) = put_blob(&layout, &std::fs::read(&layer).unwrap());
    let config = serde_json::json!({
        "architecture": oci_arch(), "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    });
    let (config_digest, config_size) = put_blob(&layout, config.to_string().as_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": layer_size}],
    });
    let (manifest_digest, manifest_size) = put_blob(&layout, manifest.to_string().as_bytes());
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": manifest_digest, "size": manifest_size,
                       "platform": {"architecture": oci_arch(), "os": "linux"},
                       "annotations": {"io.containerd.image.name": UNUSED,
                                       "org.opencontainers.image.ref.name": "1"}}],
    });
    std::fs::write(layout.join("index.json"), index.to_string()).unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let tar = work.path().join("unused.oci.tar");
    run(
        "tar",
        &[
            "-cf",
            tar.to_str().unwrap(),
            "-C",
            layout.to_str().unwrap(),
            "oci-layout",
            "index.json",
            "blobs",
        ],
    );
    let (ok, out) = ctr(
        &[
            "images",
            "import",
            "--snapshotter",
            "overlayfs",
            tar.to_str().unwrap(),
        ],
        ns,
    );
    assert!(ok, "importing {UNUSED} into {ns}: {out}");
    layer_digest
}

fn images(ns: &str) -> Vec<String> {
    let (ok, out) = ctr(&["images", "ls", "-q"], ns);
    assert!(ok, "{out}");
    out.lines().map(str::to_string).collect()
}

/// The agent with GC off runs a busybox pod; then the unused image is imported, the
/// filesystem filled past the high threshold and the agent restarted with GC on.
struct Setup {
    node: Node,
    fs: LoopFs,
    /// The pod's container id and pid before the agent restart.
    task: (String, u32),
    unused_layer: String,
}

fn node_with_full_image_fs(test: &str, min_age: &str) -> Setup {
    require_integration(test);
    let fs = LoopFs::new();
    // GC off while the pod starts: with a minimum age of 0 s, busybox would otherwise be
    // fair game until its container exists.
    let mut node = Node::start_with(test, &["--image-gc-high-threshold=100"]);
    node.write_manifest("a.yaml", &busybox_pod("a", "Always", "exec sleep 3600"));
    let pod = node.wait_pod("a", 90, "Running", |p| p["status"]["phase"] == "Running");
    let id = container_status(&pod, "main")["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let pid = node
        .tasks()
        .into_iter()
        .find(|(t, _, _)| *t == id)
        .map(|(_, pid, _)| pid)
        .expect("the pod's task");
    let unused_layer = import_unused_image(&node.ns);
    assert!(images(&node.ns).contains(&UNUSED.to_string()));
    assert!(blob_path(&unused_layer).exists());
    fs.fill_to(HIGH + 20);

    node.kill9();
    node.extra_args = vec![
        format!("--image-fs-path={}", fs.mount.display()),
        "--image-gc-period=1s".into(),
        format!("--minimum-image-ttl-duration={min_age}"),
        format!("--image-gc-high-threshold={HIGH}"),
        format!("--image-gc-low-threshold={}", HIGH - 10),
    ];
    node.launch();
    Setup {
        node,
        fs,
        task: (id, pid),
        unused_layer,
    }
}

fn assert_pod_untouched(node: &Node, (id, pid): &(String, u32)) {
    let pod = node.wait_pod("a", 30, "still Running", |p| {
        p["status"]["phase"] == "Running"
    });
    let status = container_status(&pod, "main");
    assert_eq!(status["restartCount"], 0, "{status}");
    assert_eq!(status["containerID"], format!("containerd://{id}"));
    assert!(
        node.tasks()
            .iter()
            .any(|(t, p, s)| t == id && p == pid && s == "RUNNING"),
        "the pod's task {id} (pid {pid}) is still running: {:?}",
        node.tasks()
    );
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn removes_the_unused_image_and_keeps_the_used_and_pinned_ones() {
    let Setup {
        mut node,
        fs,
        task,
        unused_layer,
    } = node_with_full_image_fs("gc removes unused", "0s");
    node.wait_until(60, "the unused image is removed", || {
        !images(&node.ns).contains(&UNUSED.to_string())
    });
    let left = images(&node.ns);
    assert!(
        left.contains(&BUSYBOX.to_string()),
        "busybox kept: {left:?}"
    );
    assert!(left.contains(&PAUSE.to_string()), "pause kept: {left:?}");
    assert_pod_untouched(&node, &task);
    let log = node.log();
    for line in log.lines().filter(|l| l.contains("kubelet_rs::gc")) {
        println!("{line}");
    }
    assert!(
        log.lines()
            .any(|l| l.contains("removed image") && l.contains(UNUSED) && l.contains("size_bytes")),
        "a log line names the removed image and its size:\n{log}"
    );
    // The line is written once the synchronous delete returned: containerd's GC has run.
    assert!(
        !blob_path(&unused_layer).exists(),
        "the layer blob is gone from containerd's content store"
    );
    // Still above the threshold with nothing left to remove: the pass ends, the agent lives.
    node.wait_until(30, "the pass reports nothing left to remove", || {
        node.log().contains("no unused image left to remove")
    });
    assert!(node.is_running(), "agent still running:\n{}", node.log());
    assert!(used_percent(&fs.mount) >= HIGH);
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn keeps_images_younger_than_the_minimum_age() {
    let Setup {
        mut node,
        task,
        unused_layer,
        fs: _fs,
    } = node_with_full_image_fs("gc minimum age", "1h");
    let passes = |log: &str| {
        log.matches("above the high threshold: removing unused images")
            .count()
    };
    node.wait_until(60, "three GC passes above the high threshold", || {
        passes(&node.log()) >= 3
    });
    let left = images(&node.ns);
    for image in [UNUSED, BUSYBOX, PAUSE] {
        assert!(left.contains(&image.to_string()), "{image} kept: {left:?}");
    }
    assert!(
        !node.log().contains("removed image"),
        "nothing removed:\n{}",
        node.log()
    );
    assert!(blob_path(&unused_layer).exists());
    assert_pod_untouched(&node, &task);
    assert!(node.is_running());
}

/// The image accounts cache (the users and groups read once per image) forgets an image the
/// GC removes, and, at the next listing, one removed by someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and containerd: run hack/test.sh"]
async fn removed_images_leave_the_accounts_cache() {
    require_integration("gc accounts cache");
    let ns = format!("krs-gc-accounts-{}", std::process::id());
    purge_namespace(&ns);
    let outcome =
        futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(accounts_cache_cases(&ns)))
            .await;
    purge_namespace(&ns);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

async fn accounts_cache_cases(ns: &str) {
    let c = Containerd::connect(Path::new(SOCKET), ns).await.unwrap();
    let gc: std::sync::Arc<dyn Runtime> = std::sync::Arc::new(ContainerdRuntime {
        containerd: c.clone(),
        puller: Puller::new(c.clone(), PullOptions::default()),
    });
    let cache_image = || async {
        import_unused_image(ns);
        let info = c.resolve_image(UNUSED).await.unwrap();
        c.image_accounts(&info).await.unwrap();
        assert_eq!(
            c.accounts_cache().chain_ids(),
            std::slice::from_ref(&info.chain_id)
        );
        let digest = info.image_ref.rsplit_once('@').unwrap().1.to_string();
        (info, digest)
    };

    // Removed by the GC: forgotten at once.
    let (_, digest) = cache_image().await;
    let candidate = Candidate {
        digest,
        names: vec![UNUSED.to_string()],
        size: 0,
    };
    gc.remove_image(&candidate).await.unwrap();
    assert!(!images(ns).contains(&UNUSED.to_string()));
    assert_eq!(c.accounts_cache().chain_ids(), Vec::<String>::new());

    // Removed behind the agent's back: forgotten at the GC's next listing.
    cache_image().await;
    let (ok, out) = ctr(&["images", "rm", "--sync", UNUSED], ns);
    assert!(ok, "{out}");
    let listed = gc.list_images().await.unwrap();
    assert!(listed.iter().all(|i| i.name != UNUSED), "{listed:?}");
    assert_eq!(c.accounts_cache().chain_ids(), Vec::<String>::new());

    // An image still there keeps its entry through a listing.
    let (info, _) = cache_image().await;
    gc.list_images().await.unwrap();
    assert_eq!(c.accounts_cache().chain_ids(), [info.chain_id]);
}
