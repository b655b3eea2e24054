//! Bad input and the other pod sources, against the real binary and containerd: each bad
//! manifest or container gives a clear error or upstream's waiting reason, and the other
//! pods run on.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;

use common::*;
use serde_json::Value;

fn running(p: &Value) -> bool {
    p["status"]["phase"] == "Running" && condition(p, "Ready")["status"] == "True"
}

fn waiting_reason(p: &Value, c: &str) -> String {
    container_status(p, c)["state"]["waiting"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn broken_manifests_are_reported_and_the_others_run() {
    let node = Node::start("bad-manifests");
    node.write_manifest(
        "good.yaml",
        &busybox_pod("good", "Always", "exec sleep 3600"),
    );
    node.write_manifest(
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x\n  bad: [\n",
    );
    node.write_manifest(
        "empty.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: nocontainers}\nspec: {containers: []}\n",
    );
    node.write_manifest(
        "dup.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: dup}}\nspec:\n  containers:\n  - {{name: a, image: {BUSYBOX}}}\n  - {{name: a, image: {BUSYBOX}}}\n"
        ),
    );
    node.write_manifest(
        "badname.yaml",
        &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: Bad_Name}}\nspec:\n  containers:\n  - {{name: a, image: {BUSYBOX}}}\n"),
    );
    // A UID that would name a folder outside the pods dir.
    node.write_manifest(
        "baduid.yaml",
        &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: escape, uid: ../../../escape}}\nspec:\n  containers:\n  - {{name: a, image: {BUSYBOX}}}\n"),
    );
    node.wait_pod("good", 60, "Running", running);
    node.wait_until(20, "errors logged", || {
        let log = node.log();
        log.contains("broken.yaml")
            && log.contains("dup.yaml")
            && log.contains("badname.yaml")
            && log.contains("empty.yaml")
            && log.contains("baduid.yaml")
    });
    let log = node.log();
    assert!(log.contains("spec.containers: Required value"), "{log}");
    assert!(
        log.contains("spec.containers[1].name: Duplicate value: \"a\""),
        "{log}"
    );
    assert!(
        log.contains("metadata.name: Invalid value: \"Bad_Name\""),
        "{log}"
    );
    assert!(
        log.contains("metadata.uid: Invalid value: \"../../../escape\""),
        "{log}"
    );
    assert_eq!(node.pods().len(), 1, "only the good pod runs");
    // The pods dir and the running pod's dir are closed to other users.
    use std::os::unix::fs::MetadataExt;
    let pods_dir = node.root.path().join("root/pods");
    let mut dirs = vec![pods_dir.clone()];
    dirs.extend(
        std::fs::read_dir(&pods_dir)
            .unwrap()
            .map(|e| e.unwrap().path()),
    );
    assert!(dirs.len() >= 2, "the good pod's folder: {dirs:?}");
    for dir in dirs {
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode & 0o027, 0, "{} is {mode:o}", dir.display());
    }
    let mut n = node;
    assert!(
        n.is_running(),
        "the agent must not exit on broken manifests"
    );
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn missing_images_and_commands_give_upstream_reasons() {
    let node = Node::start("bad-containers");
    let pod = |name: &str, image: &str, policy: &str, cmd: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {image}\n    imagePullPolicy: {policy}\n    command: [{cmd}]\n"
        )
    };
    node.write_manifest(
        "never.yaml",
        &pod("never", "127.0.0.1:1/none:1", "Never", "\"sleep\", \"1\""),
    );
    node.write_manifest(
        "pull.yaml",
        &pod(
            "pull",
            "127.0.0.1:1/none:1",
            "IfNotPresent",
            "\"sleep\", \"1\"",
        ),
    );
    node.write_manifest(
        "nocmd.yaml",
        &pod("nocmd", BUSYBOX, "IfNotPresent", "\"/no/such/binary\""),
    );
    node.write_manifest(
        "fine.yaml",
        &busybox_pod("fine", "Always", "exec sleep 3600"),
    );

    let p = node.wait_pod("never", 60, "ErrImageNeverPull", |p| {
        waiting_reason(p, "c") == "ErrImageNeverPull"
    });
    let msg = container_status(&p, "c")["state"]["waiting"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("127.0.0.1:1/none:1") && msg.contains("Never"),
        "{msg}"
    );
    assert_eq!(p["status"]["phase"], "Pending");

    let p = node.wait_pod("pull", 60, "ErrImagePull", |p| {
        matches!(
            waiting_reason(p, "c").as_str(),
            "ErrImagePull" | "ImagePullBackOff"
        )
    });
    assert!(container_status(&p, "c")["state"]["waiting"]["message"]
        .as_str()
        .unwrap()
        .contains("127.0.0.1:1/none:1"));

    let p = node.wait_pod("nocmd", 60, "RunContainerError or its back-off", |p| {
        matches!(
            waiting_reason(p, "c").as_str(),
            "RunContainerError" | "CrashLoopBackOff"
        )
    });
    let c = container_status(&p, "c");
    let text = c.to_string();
    assert!(text.contains("/no/such/binary"), "{text}");

    node.wait_pod("fine", 60, "Running", running);
    let mut n = node;
    assert!(n.is_running(), "the agent must not exit on bad pods");
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn run_as_non_root_on_a_root_image_is_a_config_error() {
    let node = Node::start("nonroot");
    // The busybox image names no user, so it would run as root.
    node.write_manifest(
        "nonroot.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: nonroot}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX}\n    command: [sleep, \"3600\"]\n    securityContext: {{runAsNonRoot: true}}\n"
        ),
    );
    node.write_manifest(
        "fine.yaml",
        &busybox_pod("fine", "Always", "exec sleep 3600"),
    );
    let p = node.wait_pod("nonroot", 60, "CreateContainerConfigError", |p| {
        waiting_reason(p, "c") == "CreateContainerConfigError"
    });
    let msg = container_status(&p, "c")["state"]["waiting"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains("container has runAsNonRoot and image will run as root"),
        "{msg}"
    );
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(container_status(&p, "c")["restartCount"], 0);
    // Nothing of the refused container reached containerd: only the two sandboxes and the
    // good pod's container exist.
    node.wait_pod("fine", 60, "Running", running);
    assert_eq!(node.containers().len(), 3, "{:?}", node.containers());
    let mut n = node;
    assert!(n.is_running());
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn image_users_are_looked_up_in_the_image() {
    let node = Node::start("image-users");
    // nobody (65534) is in busybox's /etc/passwd; the extra layer makes it a member of staff.
    let group = (
        "etc/group",
        "root:x:0:\nnobody:x:65534:\nstaff:x:50:nobody\n",
    );
    let named = "example.com/test/busybox:nobody";
    let ghost = "example.com/test/busybox:ghost";
    import_busybox_variant(&node.ns, named, "nobody", &[group]);
    import_busybox_variant(&node.ns, ghost, "ghost", &[group]);
    let pod = |name: &str, image: &str, sc: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {image}\n    command: [sh, -c, 'echo ids=$(id -u):$(id -g) groups=$(id -G); exec sleep 3600']\n    securityContext: {{{sc}}}\n"
        )
    };
    node.write_manifest("named.yaml", &pod("named", named, ""));
    node.write_manifest("uid.yaml", &pod("uid", BUSYBOX, "runAsUser: 65534"));
    node.write_manifest("ghost.yaml", &pod("ghost", ghost, ""));
    node.write_manifest("strict.yaml", &pod("strict", named, "runAsNonRoot: true"));

    // A user name: its uid, its primary group and its supplementary group.
    let p = node.wait_pod("named", 60, "Running", running);
    node.wait_until(20, "output", || read_log(&p, "c", 0).contains("ids="));
    let log = read_log(&p, "c", 0);
    assert!(log.contains("ids=65534:65534 groups=65534 50\n"), "{log}");
    // runAsUser alone: the group comes from the image's passwd entry for that uid.
    let p = node.wait_pod("uid", 60, "Running", running);
    node.wait_until(20, "output", || read_log(&p, "c", 0).contains("ids="));
    let log = read_log(&p, "c", 0);
    assert!(log.contains("ids=65534:65534"), "{log}");
    // A name the image does not define fails container creation, as containerd's does.
    let p = node.wait_pod("ghost", 60, "CreateContainerError", |p| {
        waiting_reason(p, "c") == "CreateContainerError"
    });
    let msg = container_status(&p, "c")["state"]["waiting"]["message"].to_string();
    assert!(msg.contains("unable to find user ghost"), "{msg}");
    // runAsNonRoot cannot be verified for a name: the kubelet's refusal.
    let p = node.wait_pod("strict", 60, "CreateContainerConfigError", |p| {
        waiting_reason(p, "c") == "CreateContainerConfigError"
    });
    let msg = container_status(&p, "c")["state"]["waiting"]["message"].to_string();
    assert!(
        msg.contains("image has non-numeric user (nobody), cannot verify user is non-root"),
        "{msg}"
    );
    let mut n = node;
    assert!(n.is_running());
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn json_logging_gives_one_object_per_line_with_pod_fields() {
    let node = Node::start_with("json-logs", &["--logging-format=json"]);
    node.write_manifest("js.yaml", &busybox_pod("js", "Always", "exec sleep 3600"));
    node.wait_pod("js", 60, "Running", running);
    let full = node.pod_name("js");
    // tracing's JSON layout keeps event fields under "fields"; a flat layout is fine too.
    let field = |v: &Value, key: &str| -> Option<String> {
        v["fields"][key]
            .as_str()
            .or_else(|| v[key].as_str())
            .map(str::to_string)
    };
    let about_the_pod = |v: &Value| field(v, "pod").is_some_and(|p| p.contains(&full));
    node.wait_until(20, "a log line about the pod", || {
        node.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| about_the_pod(&v))
    });
    let log = node.log();
    let mut lines = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n{log}"));
        assert!(v.is_object(), "{line}");
        assert!(
            matches!(
                v["level"].as_str(),
                Some("TRACE" | "DEBUG" | "INFO" | "WARN" | "ERROR")
            ),
            "level in {line}"
        );
        assert!(field(&v, "message").is_some(), "message in {line}");
        lines += 1;
    }
    assert!(lines > 1, "{log}");
    let sandbox_line = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| {
            about_the_pod(v) && field(v, "message").is_some_and(|m| m.contains("sandbox started"))
        });
    assert!(sandbox_line.is_some(), "no sandbox line for {full}:\n{log}");
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn pod_infra_container_image_names_the_sandbox_image() {
    // A loopback registry name: should the agent try to pull it, the pull stays on this host
    // and fails, and the test with it.
    const INFRA: &str = "127.0.0.1:1/test/infra-pause:custom";
    let flag = format!("--pod-infra-container-image={INFRA}");
    let node = Node::start_with("infra-image", &[&flag]);
    let pause = image_by_prefix(&node.ns, "registry.k8s.io/pause");
    let (ok, out) = ctr(&["images", "tag", &pause, INFRA], &node.ns);
    assert!(ok, "tagging {pause} as {INFRA}: {out}");
    node.write_manifest(
        "infra.yaml",
        &busybox_pod("infra", "Always", "exec sleep 3600"),
    );
    let p = node.wait_pod("infra", 60, "Running", running);
    let app = container_status(&p, "main")["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let images: Vec<(String, String)> = node
        .containers()
        .into_iter()
        .map(|id| {
            let (ok, out) = ctr(&["containers", "info", &id], &node.ns);
            assert!(ok, "{out}");
            let info: Value = serde_json::from_str(&out).expect("containers info is JSON");
            (id, info["Image"].as_str().unwrap_or_default().to_string())
        })
        .collect();
    assert_eq!(images.len(), 2, "{images:?}");
    let sandbox: Vec<&(String, String)> = images.iter().filter(|(id, _)| *id != app).collect();
    assert_eq!(sandbox.len(), 1, "{images:?}");
    assert_eq!(sandbox[0].1, INFRA, "sandbox image: {images:?}");
}

/// The one image in `ns` whose name starts with `prefix`.
fn image_by_prefix(ns: &str, prefix: &str) -> String {
    let (ok, out) = ctr(&["images", "ls", "-q"], ns);
    assert!(ok, "{out}");
    let found: Vec<&str> = out.lines().filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(found.len(), 1, "images named {prefix}* in {ns}: {out}");
    found[0].to_string()
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn manifest_folder_that_appears_later() {
    require_integration("late-folder");
    let mut node = Node::start("late-folder");
    // Point a second agent run at a folder that does not exist yet.
    node.kill9();
    let late = node.root.path().join("later");
    node.extra_args
        .push(format!("--pod-manifest-path={}", late.display()));
    node.launch();
    node.wait_until(20, "missing folder reported", || {
        node.log().contains(&late.display().to_string())
    });
    std::fs::create_dir_all(&late).unwrap();
    std::fs::write(
        late.join("p.yaml"),
        busybox_pod("late", "Always", "exec sleep 3600"),
    )
    .unwrap();
    node.wait_pod("late", 60, "Running", running);
    std::fs::remove_file(late.join("p.yaml")).unwrap();
    node.wait_gone("late", 60);
    assert!(node.is_running());
}

/// A tiny HTTP server on loopback answering every GET with the current `body`; returns its URL.
fn serve_manifest(body: std::sync::Arc<std::sync::Mutex<String>>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/pods", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut s = s;
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            let status = if req.to_ascii_lowercase().contains("x-test: yes") {
                "200 OK"
            } else {
                "403 Forbidden"
            };
            let body = body.lock().unwrap().clone();
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn pods_from_a_manifest_url() {
    require_integration("http-source");
    let body = std::sync::Arc::new(std::sync::Mutex::new(busybox_pod(
        "fromurl",
        "Always",
        "exec sleep 3600",
    )));
    let url = serve_manifest(body.clone());
    let node = Node::start_with(
        "http-source",
        &[
            &format!("--manifest-url={url}"),
            "--manifest-url-header=X-Test:yes",
            "--http-check-frequency=1s",
        ],
    );
    let p = node.wait_pod("fromurl", 60, "Running", running);
    assert_eq!(
        p["metadata"]["annotations"]["kubernetes.io/config.source"],
        "http"
    );

    // The URL now answers with a PodList that lists two other pods: both run from the list,
    // and the pod the URL no longer lists is stopped and removed.
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "PodList",
        "items": [url_pod("lista"), url_pod("listb")],
    });
    *body.lock().unwrap() = list.to_string();
    for name in ["lista", "listb"] {
        let p = node.wait_pod(name, 60, "Running from the PodList", running);
        assert_eq!(
            p["metadata"]["annotations"]["kubernetes.io/config.source"],
            "http"
        );
    }
    node.wait_gone("fromurl", 60);
    let names: Vec<String> = node
        .pods()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2, "only the listed pods are left: {names:?}");
}

/// A one-container busybox pod as JSON, for PodList bodies.
fn url_pod(name: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": BUSYBOX, "command": ["sleep", "3600"]}],
        },
    })
}

#[test]
fn invalid_flags_and_config_exit_2() {
    let bin = env!("CARGO_BIN_EXE_kubelet-rs");
    let out = Command::new(bin).arg("--no-such-flag").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--no-such-flag"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    let out = Command::new(bin).arg("--max-pods=zero").output().unwrap();
    assert_eq!(out.status.code(), Some(2));

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("kubelet.yaml");
    std::fs::write(
        &cfg,
        // A malformed value; an unknown field (`maxPod`) is only a warning, as upstream's
        // lenient decoding of v1beta1 has it (config::file's unit tests).
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: zero\n",
    )
    .unwrap();
    let out = Command::new(bin)
        .arg(format!("--config={}", cfg.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("maxPods") && err.contains("zero") && err.contains("kubelet.yaml"),
        "{err}"
    );

    let out = Command::new(bin).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--pod-manifest-path"));
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn host_network_pod_uses_the_node_address() {
    let node = Node::start("hostnet");
    let m = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: hn}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {{name: c, image: {BUSYBOX}, command: [sh, -c, 'ls /sys/class/net; exec sleep 3600']}}\n"
    );
    node.write_manifest("hn.yaml", &m);
    let p = node.wait_pod("hn", 60, "Running", running);
    assert_eq!(p["status"]["podIP"], p["status"]["hostIP"]);
    // The container sees the host's interfaces, not a pod eth0.
    let host_ifs: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    node.wait_until(20, "interfaces listed", || !read_log(&p, "c", 0).is_empty());
    let log = read_log(&p, "c", 0);
    let some_host_if = host_ifs.iter().find(|i| i.as_str() != "lo").unwrap();
    assert!(log.contains(some_host_if.as_str()), "{log}");
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn spec_translation_reaches_the_container() {
    let node = Node::start("spec");
    let m = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: sp}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    workingDir: /tmp
    command: ["sh", "-c"]
    args: ["echo uid=$(id -u) gid=$(id -g) pwd=$(pwd) greeting=$(GREETING) full=$FULL; touch /x 2>/dev/null && echo rw || echo ro; exec sleep 3600"]
    env:
    - {{name: GREETING, value: hello}}
    - {{name: FULL, value: "$(GREETING)-world"}}
    - {{name: POD, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    securityContext: {{runAsUser: 1234, runAsGroup: 4321, readOnlyRootFilesystem: true}}
    resources:
      limits: {{cpu: 250m, memory: 48Mi}}
      requests: {{cpu: 100m, memory: 32Mi}}
"#
    );
    node.write_manifest("sp.yaml", &m);
    let p = node.wait_pod("sp", 60, "Running", running);
    node.wait_until(20, "output", || read_log(&p, "c", 0).contains("uid="));
    let log = read_log(&p, "c", 0);
    assert!(
        log.contains("uid=1234 gid=4321 pwd=/tmp greeting=hello full=hello-world"),
        "{log}"
    );
    assert!(
        log.contains(" ro\n") || log.ends_with(" ro"),
        "read-only root: {log}"
    );
    assert_eq!(p["status"]["qosClass"], "Burstable");
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let cid = container_status(&p, "c")["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let base = format!("kubepods/burstable/pod{uid}/{cid}");
    let v1 = std::path::Path::new("/sys/fs/cgroup/memory").join(&base);
    if v1.exists() {
        let mem: u64 = std::fs::read_to_string(v1.join("memory.limit_in_bytes"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(mem, 48 << 20);
        let cpu = std::path::Path::new("/sys/fs/cgroup/cpu").join(&base);
        assert_eq!(
            std::fs::read_to_string(cpu.join("cpu.cfs_quota_us"))
                .unwrap()
                .trim(),
            "25000"
        );
        assert_eq!(
            std::fs::read_to_string(cpu.join("cpu.shares"))
                .unwrap()
                .trim(),
            "102"
        );
    } else {
        let v2 = std::path::Path::new("/sys/fs/cgroup").join(&base);
        assert_eq!(
            std::fs::read_to_string(v2.join("memory.max"))
                .unwrap()
                .trim(),
            (48u64 << 20).to_string()
        );
        assert_eq!(
            std::fs::read_to_string(v2.join("cpu.max")).unwrap().trim(),
            "25000 100000"
        );
    }
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn logs_rotate_by_size() {
    let node = Node::start_with(
        "rotate",
        &[
            "--container-log-max-size=4Ki",
            "--container-log-max-files=3",
        ],
    );
    node.write_manifest(
        "chatty.yaml",
        &busybox_pod("chatty", "Always", "i=0; while [ $i -lt 2000 ]; do echo line-$i-padding-padding-padding; i=$((i+1)); done; exec sleep 3600"),
    );
    let p = node.wait_pod("chatty", 60, "Running", running);
    let m = &p["metadata"];
    let dir = format!(
        "/var/log/pods/default_{}_{}/main",
        m["name"].as_str().unwrap(),
        m["uid"].as_str().unwrap()
    );
    node.wait_until(30, "rotated files", || {
        std::fs::read_dir(&dir)
            .map(|d| d.count() >= 3)
            .unwrap_or(false)
    });
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(files.len() <= 3, "{files:?}");
    assert!(files.contains(&"0.log".to_string()));
    assert!(files.iter().any(|f| f.starts_with("0.log.")), "{files:?}");
    for f in &files {
        let size = std::fs::metadata(format!("{dir}/{f}")).unwrap().len();
        assert!(size <= 4096 + 200, "{f} is {size} bytes");
    }
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn healthz_port_answers() {
    require_integration("healthz");
    let port = free_port();
    let node = Node::start_with("healthz", &[&format!("--healthz-port={port}")]);
    let (code, body) = http_get(port, "/healthz").expect("healthz answers");
    assert_eq!((code, body.as_str()), (200, "ok"));
    let (code, _) = http_get(node.port, "/pods").unwrap();
    assert_eq!(code, 200);
}
