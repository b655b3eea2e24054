//! Image pulls against real registries (Debian's docker-registry on loopback, filled with
//! skopeo) into the real containerd. Runs only with KUBELET_RS_INTEGRATION=1, as root; then
//! a missing docker-registry, skopeo or containerd is a failure. Each test owns a registry
//! (its own port and storage) and a containerd namespace `krs-pull-test-<case>-<pid>`, purged
//! before and after.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::registry::{
    b64, busybox_tar, require, run, Auth, Registry, TokenServer, TOKEN_SERVICE,
};
use common::{ctr, free_port, purge_namespace, test_namespace, SOCKET};
use kubelet_rs::runtime::pull::{
    import_archive, PullError, PullOptions, Puller, RegistryCredential,
};
use kubelet_rs::runtime::Containerd;

/// A namespace of this test's own, purged now and on drop.
struct Namespace(String);

impl Namespace {
    fn new(case: &str) -> Namespace {
        let ns = test_namespace(&format!("pull-test-{case}"));
        Namespace(ns)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        purge_namespace(&self.0);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn puller(ns: &str, opts: PullOptions) -> Puller {
    let rt = Containerd::connect(Path::new(SOCKET), ns)
        .await
        .expect("containerd");
    Puller::new(rt, opts)
}

/// Options whose node docker config (in `dir`) holds test:test for the registry.
fn node_config_opts(dir: &Path, reg: &Registry) -> PullOptions {
    let cfg = dir.join("config.json");
    let auth = format!(
        r#"{{"auths":{{"http://{}":{{"auth":"dGVzdDp0ZXN0"}}}}}}"#,
        reg.host()
    );
    std::fs::write(&cfg, auth).unwrap();
    PullOptions {
        docker_config: Some(cfg),
        ..Default::default()
    }
}

/// Options that read no docker config of the machine running the tests.
fn isolated_opts(dir: &Path) -> PullOptions {
    PullOptions {
        docker_config: Some(dir.join("no-such-config.json")),
        serialize: false,
        ..Default::default()
    }
}

/// Runs /bin/echo from the image in a throwaway container; it must exit 0.
fn assert_runs(ns: &str, image: &str) {
    let id = format!("pull-smoke-{}", rand::random::<u32>());
    let (ok, out) = ctr(
        &[
            "run",
            "--rm",
            "--snapshotter",
            "overlayfs",
            image,
            &id,
            "/bin/echo",
            "image-ok",
        ],
        ns,
    );
    // ctr's status is the task's; its output is not checked: `ctr run` can lose a
    // short-lived task's output (its copy from the fifo races the task's exit), which
    // failed this test once with an empty output on a loaded machine.
    assert!(ok, "running {image} in {ns}: {out}");
}

fn busybox_manifest_digest() -> String {
    std::fs::read_to_string(busybox_tar().with_file_name("busybox.digest"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn pulls_by_tag_and_digest_then_only_checks() {
    require("pulls_by_tag_and_digest_then_only_checks");
    let reg = Registry::start(Auth::Open);
    reg.push_busybox("library/busybox:1.36", None);
    let ns = Namespace::new("tag");
    let tmp = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let p = puller(&ns.0, isolated_opts(tmp.path())).await;
        let image = format!("{}/library/busybox:1.36", reg.host());
        let first = p.pull(&image, &[]).await.expect("first pull");
        assert!(first.pulled, "{first:?}");
        assert!(
            first.bytes > 100_000,
            "busybox layer was fetched: {first:?}"
        );
        assert_eq!(first.image.name, image);
        let digest = busybox_manifest_digest();
        assert_eq!(
            first.image.image_ref,
            format!("{}/library/busybox@{digest}", reg.host())
        );
        assert_eq!(
            first.image.config.cmd.as_deref(),
            Some(&["sh".to_string()][..])
        );
        assert_runs(&ns.0, &image);

        let again = p.pull(&image, &[]).await.expect("second pull");
        assert!(!again.pulled, "second pull should only check the manifest");
        assert_eq!(again.image.chain_id, first.image.chain_id);

        // By digest: a new image record, nothing to download.
        let by_digest = format!("{}/library/busybox@{digest}", reg.host());
        let d = p.pull(&by_digest, &[]).await.expect("pull by digest");
        assert!(d.pulled);
        assert_eq!(d.bytes, 0, "blobs were already in containerd");
        assert_eq!(d.image.chain_id, first.image.chain_id);
        assert_runs(&ns.0, &by_digest);
        // A complete digest reference needs no registry at all.
        drop(reg);
        let offline = p.pull(&by_digest, &[]).await.expect("offline digest pull");
        assert!(!offline.pulled);
    });
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn concurrent_pulls_of_one_image_are_merged() {
    require("concurrent_pulls_of_one_image_are_merged");
    let reg = Registry::start(Auth::Open);
    reg.push_busybox("library/busybox:merge", None);
    let ns = Namespace::new("merge");
    let tmp = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let p = puller(&ns.0, isolated_opts(tmp.path())).await;
        let image = format!("{}/library/busybox:merge", reg.host());
        let pulls: Vec<_> = (0..4)
            .map(|_| {
                let p = p.clone();
                let image = image.clone();
                tokio::spawn(async move { p.pull(&image, &[]).await })
            })
            .collect();
        let mut outcomes = Vec::new();
        for t in pulls {
            outcomes.push(t.await.unwrap().expect("pull"));
        }
        // One pull ran: every caller sees the same fetched bytes and duration.
        assert!(outcomes.iter().all(|o| o.pulled));
        assert!(outcomes
            .iter()
            .all(|o| o.duration == outcomes[0].duration && o.bytes == outcomes[0].bytes));
    });
}

/// Pushes a fake linux/<other arch> manifest and an index listing it before the real one.
async fn push_multi_platform(reg: &Registry, repo: &str, tag: &str) -> String {
    use kubelet_rs::runtime::pull::install_crypto_provider;
    use oci_client::client::{ClientConfig, ClientProtocol};
    use sha2::Digest;
    install_crypto_provider();
    let sha = |b: &[u8]| format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)));
    reg.push_busybox(&format!("{repo}:native"), None);
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..Default::default()
    });
    let r: oci_client::Reference = format!("{}/{repo}:{tag}", reg.host()).parse().unwrap();
    // A layer that is not a tar and a config with a diff ID nothing matches: picking this
    // manifest would fail the unpack.
    let layer = b"not a layer".to_vec();
    let config = br#"{"architecture":"other","os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:0000000000000000000000000000000000000000000000000000000000000000"]}}"#.to_vec();
    client
        .push_blob(&r, layer.clone(), &sha(&layer))
        .await
        .unwrap();
    client
        .push_blob(&r, config.clone(), &sha(&config))
        .await
        .unwrap();
    let other = if std::env::consts::ARCH == "x86_64" {
        "arm64"
    } else {
        "amd64"
    };
    let native = if std::env::consts::ARCH == "x86_64" {
        "amd64"
    } else {
        "arm64"
    };
    let fake = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{}","size":{}}}]}}"#,
        sha(&config),
        config.len(),
        sha(&layer),
        layer.len()
    );
    let mt = |s: &'static str| hyper::header::HeaderValue::from_static(s);
    let fake_ref = r.clone_with_digest(sha(fake.as_bytes()));
    client
        .push_manifest_raw(
            &fake_ref,
            fake.clone().into_bytes(),
            mt("application/vnd.oci.image.manifest.v1+json"),
        )
        .await
        .unwrap();
    let native_digest = busybox_manifest_digest();
    let native_size = {
        let out = run(
            "curl",
            &[
                "-sf",
                "-H",
                "Accept: application/vnd.oci.image.manifest.v1+json",
                &format!("http://{}/v2/{repo}/manifests/{native_digest}", reg.host()),
            ],
        );
        out.len()
    };
    let index = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{}","size":{},"platform":{{"architecture":"{other}","os":"linux"}}}},{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{native_digest}","size":{native_size},"platform":{{"architecture":"{native}","os":"linux"}}}}]}}"#,
        sha(fake.as_bytes()),
        fake.len()
    );
    client
        .push_manifest_raw(
            &r,
            index.clone().into_bytes(),
            mt("application/vnd.oci.image.index.v1+json"),
        )
        .await
        .unwrap();
    sha(index.as_bytes())
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn multi_platform_index_picks_the_node_platform() {
    require("multi_platform_index_picks_the_node_platform");
    let reg = Registry::start(Auth::Open);
    let ns = Namespace::new("index");
    let tmp = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let index_digest = push_multi_platform(&reg, "library/multi", "1").await;
        let p = puller(&ns.0, isolated_opts(tmp.path())).await;
        let image = format!("{}/library/multi:1", reg.host());
        let o = p.pull(&image, &[]).await.expect("pull from index");
        assert!(o.pulled);
        // The record targets the index, as containerd's own pull does.
        assert!(o.image.image_ref.ends_with(&index_digest), "{:?}", o.image);
        assert_runs(&ns.0, &image);
        assert!(!p.pull(&image, &[]).await.unwrap().pulled);
    });
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn basic_auth_from_node_config_and_pod_secrets() {
    require("basic_auth_from_node_config_and_pod_secrets");
    let reg = Registry::start(Auth::Htpasswd);
    reg.push_busybox("private/busybox:1", Some("test:test"));
    let ns = Namespace::new("auth");
    let tmp = tempfile::tempdir().unwrap();
    let image = format!("{}/private/busybox:1", reg.host());
    runtime().block_on(async {
        // Anonymous: refused, and the error names image and registry.
        let anon = puller(&ns.0, isolated_opts(tmp.path())).await;
        let e = anon.pull(&image, &[]).await.unwrap_err();
        assert!(matches!(e, PullError::Unauthorized { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(&image) && msg.contains(&reg.host()), "{msg}");

        // Wrong password from a pod secret: refused.
        let wrong = RegistryCredential {
            key: reg.host(),
            username: "test".into(),
            password: "wrong".into(),
            registry_token: None,
            source: "secret default/wrong".into(),
        };
        println!("anonymous: {e}");
        let e = anon
            .pull(&image, std::slice::from_ref(&wrong))
            .await
            .unwrap_err();
        println!("wrong password: {e}");
        assert!(matches!(e, PullError::Unauthorized { .. }), "{e}");
        assert!(e.to_string().contains("secret default/wrong"), "{e}");

        // The node's docker config (auth = base64 "test:test"): pulled, even after a wrong
        // pod secret, which is tried first.
        let node = puller(&ns.0, node_config_opts(tmp.path(), &reg)).await;
        let o = node
            .pull(&image, &[wrong])
            .await
            .expect("pull with node credentials");
        assert!(o.pulled);
        assert_runs(&ns.0, &image);

        // Pod secret with the right password (username/password form).
        let right = RegistryCredential {
            key: reg.host(),
            username: "test".into(),
            password: "test".into(),
            registry_token: None,
            source: "secret default/right".into(),
        };
        let o = anon
            .pull(&image, &[right])
            .await
            .expect("pull with pod secret");
        assert!(!o.pulled);
    });
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn bearer_token_flow_with_node_credentials() {
    require("bearer_token_flow_with_node_credentials");
    let tokens = TokenServer::start();
    let reg = Registry::start(Auth::Token(&tokens));
    reg.push_busybox("private/busybox:1", Some("test:test"));
    assert!(
        tokens.take_requests().iter().any(|r| r.granted),
        "skopeo's push went through the token server"
    );
    let ns = Namespace::new("token");
    let tmp = tempfile::tempdir().unwrap();
    let image = format!("{}/private/busybox:1", reg.host());
    let basic_test = format!("Basic {}", b64(b"test:test", false));
    runtime().block_on(async {
        let node = puller(&ns.0, node_config_opts(tmp.path(), &reg)).await;
        let o = node
            .pull(&image, &[])
            .await
            .expect("pull through the token flow");
        assert!(o.pulled);
        assert_runs(&ns.0, &image);
        let seen = tokens.take_requests();
        assert!(
            seen.iter().any(|r| r.granted
                && r.scopes == ["repository:private/busybox:pull"]
                && r.service.as_deref() == Some(TOKEN_SERVICE)
                && r.authorization.as_deref() == Some(basic_test.as_str())),
            "no pull-scoped token request with test:test: {seen:?}"
        );

        // Wrong password: the token server refuses, and the error says so.
        let anon = puller(&ns.0, isolated_opts(tmp.path())).await;
        let wrong = RegistryCredential {
            key: reg.host(),
            username: "test".into(),
            password: "wrong".into(),
            registry_token: None,
            source: "secret default/wrong".into(),
        };
        let e = anon.pull(&image, &[wrong]).await.unwrap_err();
        println!("wrong password: {e}");
        assert!(matches!(e, PullError::Unauthorized { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&image)
                && msg.contains(&format!("registry {} answered unauthorized", reg.host()))
                && msg.contains("token request refused")
                && msg.contains("UNAUTHORIZED")
                && msg.contains("secret default/wrong"),
            "{msg}"
        );
        let seen = tokens.take_requests();
        assert!(
            !seen.is_empty()
                && seen
                    .iter()
                    .all(|r| !r.granted && r.authorization.as_deref() != Some(basic_test.as_str())),
            "{seen:?}"
        );

        // No credentials: the anonymous token request is refused too.
        let e = anon.pull(&image, &[]).await.unwrap_err();
        println!("anonymous: {e}");
        assert!(matches!(e, PullError::Unauthorized { .. }), "{e}");
        assert!(e.to_string().contains("token request refused"), "{e}");
        let seen = tokens.take_requests();
        assert!(
            !seen.is_empty() && seen.iter().all(|r| !r.granted && r.authorization.is_none()),
            "{seen:?}"
        );
    });
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn failures_name_the_registry_answer() {
    require("failures_name_the_registry_answer");
    let reg = Registry::start(Auth::Open);
    reg.push_busybox("library/busybox:1.36", None);
    let ns = Namespace::new("fail");
    let tmp = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let p = puller(&ns.0, isolated_opts(tmp.path())).await;
        let e = p
            .pull(&format!("{}/library/busybox:nope", reg.host()), &[])
            .await
            .unwrap_err();
        println!("unknown tag: {e}");
        assert!(matches!(e, PullError::NotFound { .. }), "{e}");
        assert!(
            e.to_string().contains("not found") && e.to_string().contains(":nope"),
            "{e}"
        );

        let e = p
            .pull(&format!("{}/library/nothing:1", reg.host()), &[])
            .await
            .unwrap_err();
        assert!(matches!(e, PullError::NotFound { .. }), "{e}");

        // Nothing listens on a port we just freed.
        let closed = free_port();
        let e = p
            .pull(&format!("127.0.0.1:{closed}/library/busybox:1.36"), &[])
            .await
            .unwrap_err();
        println!("closed port: {e}");
        assert!(matches!(e, PullError::Unreachable { .. }), "{e}");
        assert!(
            e.to_string().contains(&format!("127.0.0.1:{closed}")),
            "{e}"
        );

        // A registry serving a corrupted layer: the digest check stops it before commit.
        let digest_file = tmp.path().join("layer");
        let layer = {
            let out = run(
                "curl",
                &[
                    "-sf",
                    "-H",
                    "Accept: application/vnd.oci.image.manifest.v1+json",
                    &format!("http://{}/v2/library/busybox/manifests/1.36", reg.host()),
                ],
            );
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            v["layers"][0]["digest"].as_str().unwrap().to_string()
        };
        let data = reg.blob_data(&layer);
        let mut bytes = std::fs::read(&data).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&data, &bytes).unwrap();
        std::fs::write(&digest_file, &layer).unwrap();
        let e = p
            .pull(&format!("{}/library/busybox:1.36", reg.host()), &[])
            .await
            .unwrap_err();
        println!("corrupt layer: {e}");
        assert!(matches!(e, PullError::BadDigest { .. }), "{e}");
        assert!(e.to_string().contains(&layer), "{e}");
    });
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn imports_oci_and_docker_archives() {
    require("imports_oci_and_docker_archives");
    let ns = Namespace::new("import");
    let tmp = tempfile::tempdir().unwrap();
    let docker_tar = tmp.path().join("busybox-docker.tar");
    run(
        "skopeo",
        &[
            "copy",
            "--quiet",
            &format!("oci-archive:{}", busybox_tar().display()),
            &format!(
                "docker-archive:{}:example.com/test/busybox:docker",
                docker_tar.display()
            ),
        ],
    );
    runtime().block_on(async {
        let rt = Containerd::connect(Path::new(SOCKET), &ns.0).await.unwrap();
        let names = import_archive(&rt, &busybox_tar(), "overlayfs")
            .await
            .expect("OCI import");
        assert_eq!(names, ["docker.io/library/busybox:1.36"]);
        let info = rt.resolve_image(&names[0]).await.unwrap();
        assert!(info.image_ref.ends_with(&busybox_manifest_digest()));
        assert_runs(&ns.0, &names[0]);

        let names = import_archive(&rt, &docker_tar, "overlayfs")
            .await
            .expect("docker import");
        assert_eq!(names, ["example.com/test/busybox:docker"]);
        let d = rt.resolve_image(&names[0]).await.unwrap();
        assert_eq!(d.chain_id, info.chain_id, "same layers, same snapshot");
        assert_runs(&ns.0, &names[0]);

        let junk = tmp.path().join("junk.tar");
        std::fs::write(&junk, vec![1u8; 4096]).unwrap();
        let e = import_archive(&rt, &junk, "overlayfs")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("junk.tar") && e.contains("not a tar"), "{e}");
    });
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn image_pull_command_pulls_into_the_namespace() {
    require("image_pull_command_pulls_into_the_namespace");
    let reg = Registry::start(Auth::Open);
    reg.push_busybox("cmd/busybox:1", None);
    let ns = Namespace::new("cmd");
    let image = format!("{}/cmd/busybox:1", reg.host());
    let bin = env!("CARGO_BIN_EXE_kubelet-rs");
    let out = run(bin, &["image", "pull", &image, "--namespace", &ns.0]);
    let digest = busybox_manifest_digest();
    assert!(
        out.contains(&format!("{}/cmd/busybox@{digest}", reg.host())),
        "{out}"
    );
    assert_runs(&ns.0, &image);
    // A reference the registry does not have: exit 1 and the registry's answer.
    let missing = Command::new(bin)
        .args(["image", "pull", &format!("{}/cmd/none:1", reg.host())])
        .args(["--namespace", &ns.0])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("kubelet-rs image pull") && err.contains("cmd/none"),
        "{err}"
    );
    // No operand is a usage error.
    let usage = Command::new(bin).args(["image", "pull"]).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
    // A flag without its value is a usage error that names the flag.
    let no_value = Command::new(bin)
        .args(["image", "pull", "x/y:1", "--root-dir"])
        .output()
        .unwrap();
    assert_eq!(no_value.status.code(), Some(2));
    let err = String::from_utf8_lossy(&no_value.stderr);
    assert!(err.contains("--root-dir needs a value"), "{err}");
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn image_pull_command_reads_the_docker_config_in_its_root_dir() {
    require("image_pull_command_reads_the_docker_config_in_its_root_dir");
    let reg = Registry::start(Auth::Htpasswd);
    reg.push_busybox("cmd/private:1", Some("test:test"));
    let ns = Namespace::new("cmdauth");
    let image = format!("{}/cmd/private:1", reg.host());
    let bin = env!("CARGO_BIN_EXE_kubelet-rs");
    let root = tempfile::tempdir().unwrap();
    let pull = |root_dir: &Path| {
        Command::new(bin)
            .args(["image", "pull", &image, "--namespace", &ns.0])
            .arg("--root-dir")
            .arg(root_dir)
            .output()
            .unwrap()
    };
    let denied = pull(root.path());
    assert_eq!(denied.status.code(), Some(1));
    let err = String::from_utf8_lossy(&denied.stderr);
    assert!(err.to_lowercase().contains("unauthorized"), "{err}");

    node_config_opts(root.path(), &reg);
    let allowed = pull(root.path());
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    assert_runs(&ns.0, &image);
}

/// A pod with one container `c` running `sleep` from `image`.
fn sleep_pod(name: &str, image: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {image}
    command: ["sleep", "3600"]
"#
    )
}

fn waiting(p: &serde_json::Value) -> (String, String) {
    let w = &common::container_status(p, "c")["state"]["waiting"];
    (
        w["reason"].as_str().unwrap_or_default().to_string(),
        w["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn agent_pulls_from_a_registry_then_finds_the_image_present() {
    let test = "agent_pulls_from_a_registry_then_finds_the_image_present";
    require(test);
    let reg = Registry::start(Auth::Open);
    reg.push_busybox("e2e/busybox:1", None);
    let node = common::Node::start_with_images(
        test,
        &[
            "--serialize-image-pulls=false",
            "--insecure-registry=registry.lan:5000",
        ],
        &["pause"],
    );
    let (ok, images) = ctr(&["images", "ls", "-q"], &node.ns);
    assert!(ok && !images.contains("busybox"), "{images}");
    let image = format!("{}/e2e/busybox:1", reg.host());

    node.write_manifest("pulled.yaml", &sleep_pod("pulled", &image));
    node.wait_pod("pulled", 120, "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    let log = node.log();
    let pulled = log
        .lines()
        .find(|l| l.contains(&format!("Successfully pulled image \"{image}\" in ")))
        .unwrap_or_else(|| panic!("no pull line in the agent log:\n{log}"));
    println!("{pulled}");
    assert!(
        pulled.contains(" including waiting). Image size: "),
        "{pulled}"
    );
    let size: u64 = pulled
        .split("Image size: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no size in {pulled}"));
    assert!(
        size > 100_000,
        "busybox is larger than {size} bytes: {pulled}"
    );
    assert!(
        log.contains("layer fetched"),
        "pull progress is logged:\n{log}"
    );
    // The settings reached the Puller (no traffic to a non-loopback address is made).
    let configured = log
        .lines()
        .find(|l| l.contains("image pulls configured"))
        .unwrap_or_else(|| panic!("no pull configuration line:\n{log}"));
    assert!(
        configured.contains("serialize=false") && configured.contains("registry.lan:5000"),
        "{configured}"
    );

    // IfNotPresent (a tag other than latest) with the image there: no pull.
    node.write_manifest("present.yaml", &sleep_pod("present", &image));
    node.wait_pod("present", 60, "Running", |p| {
        p["status"]["phase"] == "Running"
    });
    let present = format!("Container image \"{image}\" already present on machine");
    let log = node.log();
    assert!(
        log.lines()
            .any(|l| l.contains(&present) && l.contains(&node.pod_name("present"))),
        "no '{present}' line for the second pod:\n{log}"
    );
    assert_eq!(
        log.matches("Successfully pulled image").count(),
        1,
        "the second pod pulled again:\n{log}"
    );
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn missing_tag_is_err_image_pull_then_image_pull_back_off() {
    let test = "missing_tag_is_err_image_pull_then_image_pull_back_off";
    require(test);
    let reg = Registry::start(Auth::Open);
    reg.push_busybox("e2e/busybox:1", None);
    let node = common::Node::start_with_images(test, &[], &["pause"]);
    let image = format!("{}/e2e/busybox:missing", reg.host());
    node.write_manifest("missing.yaml", &sleep_pod("missing", &image));
    let first = node.wait_pod("missing", 60, "an image pull failure", |p| {
        matches!(waiting(p).0.as_str(), "ErrImagePull" | "ImagePullBackOff")
    });
    let (reason, message) = waiting(&first);
    assert_eq!(
        reason, "ErrImagePull",
        "the first failure is not a back-off: {message}"
    );
    assert!(
        message.contains(&image) && message.contains("not found"),
        "{message}"
    );
    assert!(!message.contains('\n'), "{message}");
    let later = node.wait_pod("missing", 90, "ImagePullBackOff", |p| {
        waiting(p).0 == "ImagePullBackOff"
    });
    let (_, message) = waiting(&later);
    assert!(
        message.starts_with(&format!("Back-off pulling image \"{image}\"")),
        "{message}"
    );
    assert!(message.contains("not found"), "{message}");
    assert_eq!(later["status"]["phase"], "Pending");
}

/// A TCP relay on loopback in front of a registry that holds every connection until opened,
/// counting arrivals: while it is shut, the number of connections shows how many pulls got
/// a turn, with no timing in the pulls themselves.
struct GatedProxy {
    port: u16,
    arrived: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    gate: std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

impl GatedProxy {
    fn start(upstream: u16) -> GatedProxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let arrived = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let gate = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let (count, shut) = (arrived.clone(), gate.clone());
        // Never joined: the threads end with their connections or with the test process.
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let shut = shut.clone();
                std::thread::spawn(move || {
                    let (lock, cv) = &*shut;
                    let mut open = lock.lock().unwrap();
                    while !*open {
                        open = cv.wait(open).unwrap();
                    }
                    drop(open);
                    let _ = relay(conn, upstream);
                });
            }
        });
        GatedProxy {
            port,
            arrived,
            gate,
        }
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn arrived(&self) -> usize {
        self.arrived.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn open(&self) {
        let (lock, cv) = &*self.gate;
        *lock.lock().unwrap() = true;
        cv.notify_all();
    }
}

fn relay(client: std::net::TcpStream, upstream: u16) -> std::io::Result<()> {
    let server = std::net::TcpStream::connect(("127.0.0.1", upstream))?;
    let (mut c_in, mut s_out) = (client.try_clone()?, server.try_clone()?);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c_in, &mut s_out);
        let _ = s_out.shutdown(std::net::Shutdown::Write);
    });
    let (mut s_in, mut c_out) = (server, client);
    let _ = std::io::copy(&mut s_in, &mut c_out);
    let _ = c_out.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
    Ok(())
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn max_parallel_image_pulls_limits_pulls_under_way() {
    require("max_parallel_image_pulls_limits_pulls_under_way");
    let reg = Registry::start(Auth::Open);
    reg.push_busybox("limit/busybox:1", None);
    // A second image with blobs of its own, so two pulls share no content writes.
    let pause_tar = busybox_tar().with_file_name("pause.oci.tar");
    run(
        "skopeo",
        &[
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            &format!("oci-archive:{}", pause_tar.display()),
            &format!("docker://{}/limit/pause:1", reg.host()),
        ],
    );
    let tmp = tempfile::tempdir().unwrap();
    for limit in [1usize, 2] {
        let ns = Namespace::new(&format!("limit{limit}"));
        let proxy = GatedProxy::start(reg.port);
        runtime().block_on(async {
            let opts = PullOptions {
                max_parallel: Some(limit),
                ..isolated_opts(tmp.path())
            };
            let p = puller(&ns.0, opts).await;
            let pulls: Vec<_> = ["limit/busybox:1", "limit/pause:1"]
                .iter()
                .map(|repo| {
                    let (p, image) = (p.clone(), format!("{}/{repo}", proxy.host()));
                    tokio::spawn(async move { p.pull(&image, &[]).await })
                })
                .collect();
            let deadline = Instant::now() + Duration::from_secs(10);
            while proxy.arrived() < limit {
                assert!(
                    Instant::now() < deadline,
                    "limit {limit}: only {} pulls reached the registry",
                    proxy.arrived()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Each pull holds its one connection open until the gate opens, so a pull
            // beyond the limit would show as one more arrival.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            assert_eq!(proxy.arrived(), limit, "limit {limit}: pulls under way");
            proxy.open();
            for t in pulls {
                let out = t.await.unwrap().expect("pull after the gate opened");
                assert!(out.pulled, "{out:?}");
            }
        });
    }
}
