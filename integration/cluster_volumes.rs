//! configMap, secret and projected volumes against a real control plane: the
//! `kube-api-access-*` volume the apiserver adds to every pod (a token bound to the pod, the
//! cluster CA, the namespace), a configMap and a secret volume with their modes and the pod's
//! fsGroup, a ConfigMap change reaching the running container (and not its subPath mount),
//! its deletion leaving the running pod alone, and a pod that waits in ContainerCreating with
//! a FailedMount event until its ConfigMap exists.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::cluster::ClusterNode;
use common::container_status;
use serde_json::Value;

/// The fsGroup the pod asks for.
const FS_GROUP: u32 = 2345;

/// A busybox pod pinned to `node` that keeps the default service-account token (no
/// `automountServiceAccountToken: false`), with `volumes` and `mounts` (YAML lists, indented
/// as the spec's and the container's fields).
fn pod_manifest(name: &str, node: &str, script: &str, mounts: &str, volumes: &str) -> String {
    let script = script.replace('\'', "''");
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  nodeSelector:
    kubernetes.io/hostname: {node}
  terminationGracePeriodSeconds: 2
  securityContext:
    fsGroup: {FS_GROUP}
  containers:
  - name: main
    image: {image}
    command: ['sh', '-c', '{script}']
    volumeMounts:
{mounts}
  volumes:
{volumes}",
        image = common::BUSYBOX,
    )
}

fn is_running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

/// The host directory of one of the pod's volumes.
fn volume_dir(n: &ClusterNode, pod: &Value, plugin: &str, volume: &str) -> PathBuf {
    let uid = pod["metadata"]["uid"].as_str().expect("a uid");
    n.root
        .path()
        .join("root/pods")
        .join(uid)
        .join("volumes")
        .join(plugin)
        .join(volume)
}

/// Mode bits and group of a file, through the volume's links.
fn mode_and_group(p: &Path) -> (u32, u32) {
    let m = std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.mode() & 0o7777, m.gid())
}

/// Polls `cond` every half second for up to `secs`; panics with `what` and the agent's log.
fn wait_for(n: &ClusterNode, secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "{}: never true within {secs}s: {what}\nagent log:\n{}",
            n.test,
            n.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Deletes the pod and waits until the agent tore its volumes down (tmpfs unmounted,
/// directory removed) and the API dropped it.
fn delete_pod_and_wait(n: &ClusterNode, name: &str, pod_dir: &Path) {
    n.cluster
        .ok(&["-n", "default", "delete", "pod", name, "--wait=false"]);
    wait_for(n, 120, "the pod's volumes are torn down", || {
        !pod_dir.join("volumes").exists()
    });
    n.wait_api(120, "the pod is gone from the API", |_| {
        n.api_pod(name).is_none()
    });
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn token_config_map_and_secret_volumes_reach_the_container() {
    let n = ClusterNode::start("cluster-volumes", &[]);
    let node = n.name().to_string();
    let (cm, secret) = (format!("cfg-{node}"), format!("creds-{node}"));
    n.cluster.apply(&format!(
        "apiVersion: v1
kind: ConfigMap
metadata: {{name: {cm}, namespace: default}}
data: {{app.conf: v1, other: o}}
---
apiVersion: v1
kind: Secret
metadata: {{name: {secret}, namespace: default}}
stringData: {{password: hunter2}}
"
    ));
    let name = format!("vols-{node}");
    // The container shows what it reads, once a second: the whole volume and the subPath
    // mount of the same key.
    let script = "while true; do echo \"cfg=$(cat /etc/cfg/app.conf) sub=$(cat /etc/app.conf)\"; sleep 1; done";
    let mounts = "    - {name: cfg, mountPath: /etc/cfg}
    - {name: cfg, mountPath: /etc/app.conf, subPath: app.conf}
    - {name: creds, mountPath: /etc/creds}";
    let volumes = format!(
        "  - name: cfg
    configMap:
      name: {cm}
      defaultMode: 0400
      items:
      - {{key: app.conf, path: app.conf}}
      - {{key: other, path: sub/other, mode: 0600}}
  - name: creds
    secret: {{secretName: {secret}, defaultMode: 0440}}"
    );
    n.cluster
        .apply(&pod_manifest(&name, &node, script, mounts, &volumes));
    let pod = n.wait_api_pod(&name, 120, "Running", is_running);
    // For the issue's figure: creation to Running, as the API's timestamps say (seconds).
    let created = pod["metadata"]["creationTimestamp"].as_str().unwrap_or("?");
    let started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        .as_str()
        .unwrap_or("?");
    eprintln!("{name}: created {created}, container running since {started}");

    // The apiserver added the token volume; the agent set it up as upstream lays it out.
    let api_access = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|v| {
            v["name"]
                .as_str()
                .filter(|n| n.starts_with("kube-api-access-"))
        })
        .expect("the apiserver adds kube-api-access-*")
        .to_string();
    let projected = volume_dir(&n, &pod, "kubernetes.io~projected", &api_access);
    let cfg = volume_dir(&n, &pod, "kubernetes.io~configmap", "cfg");
    let creds = volume_dir(&n, &pod, "kubernetes.io~secret", "creds");
    let pod_dir = cfg.ancestors().nth(3).unwrap().to_path_buf();
    let fs_type = |p: &Path| {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let real = std::fs::canonicalize(p).unwrap();
        table.lines().rev().find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            (Path::new(f[4]) == real).then(|| f[sep + 1].to_string())
        })
    };
    assert_eq!(fs_type(&projected).as_deref(), Some("tmpfs"));
    assert_eq!(fs_type(&creds).as_deref(), Some("tmpfs"));
    assert_eq!(fs_type(&cfg), None, "a configMap volume lives on disk");

    // Modes as configured, plus the group bits and group the fsGroup asks for.
    assert_eq!(mode_and_group(&cfg.join("app.conf")), (0o440, FS_GROUP));
    assert_eq!(mode_and_group(&cfg.join("sub/other")), (0o640, FS_GROUP));
    assert_eq!(mode_and_group(&cfg.join("sub")).0 & 0o2000, 0o2000);
    assert_eq!(mode_and_group(&creds.join("password")), (0o440, FS_GROUP));
    assert_eq!(
        std::fs::read_to_string(creds.join("password")).unwrap(),
        "hunter2"
    );
    // kube-api-access asks for 0644; with an fsGroup upstream makes the token 0640.
    assert_eq!(mode_and_group(&projected.join("token")), (0o640, FS_GROUP));
    assert_eq!(mode_and_group(&projected.join("ca.crt")), (0o644, FS_GROUP));
    assert_eq!(
        std::fs::read_to_string(projected.join("namespace")).unwrap(),
        "default"
    );
    let ca = std::fs::read_to_string(projected.join("ca.crt")).unwrap();
    assert!(ca.contains("BEGIN CERTIFICATE"), "{ca}");

    // The token is the apiserver's, bound to this pod.
    let token = std::fs::read_to_string(projected.join("token")).unwrap();
    let review = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token.trim()}
    });
    let (ok, out) = n.cluster.kubectl_stdin(
        &["create", "-f", "-", "-o", "json"],
        Some(&review.to_string()),
    );
    assert!(ok, "TokenReview: {out}");
    let review: Value = serde_json::from_str(&out).unwrap();
    let status = &review["status"];
    assert_eq!(status["authenticated"], true, "{status}");
    assert_eq!(
        status["user"]["username"],
        "system:serviceaccount:default:default"
    );
    let extra = &status["user"]["extra"];
    assert_eq!(
        extra["authentication.kubernetes.io/pod-name"][0],
        name.as_str()
    );
    assert_eq!(
        extra["authentication.kubernetes.io/pod-uid"][0],
        pod["metadata"]["uid"]
    );

    // The container reads the ConfigMap; a change reaches it within the sync period (and the
    // watch's delay), never its subPath mount, which keeps the version it started with.
    let logs = || {
        n.cluster
            .kubectl(&["-n", "default", "logs", &name, "--tail=5"])
            .1
    };
    wait_for(&n, 60, "the container prints v1", || {
        logs().contains("cfg=v1 sub=v1")
    });
    n.cluster.ok(&[
        "-n",
        "default",
        "patch",
        "configmap",
        &cm,
        "-p",
        r#"{"data":{"app.conf":"v2"}}"#,
    ]);
    wait_for(&n, 120, "the container reads v2 from its volume", || {
        logs().contains("cfg=v2 sub=v1")
    });
    let now = n.api_pod(&name).unwrap();
    let c = container_status(&now, "main");
    assert_eq!(c["restartCount"], 0, "{c}");

    // The ConfigMap deleted under the running pod: upstream keeps the volume as it was and
    // reports the failed refresh; the pod runs on.
    n.cluster.ok(&["-n", "default", "delete", "configmap", &cm]);
    let selector = format!("involvedObject.name={name},reason=FailedMount");
    let wanted =
        format!("MountVolume.SetUp failed for volume \"cfg\" : configmap \"{cm}\" not found");
    n.wait_api(60, "a FailedMount event for the deleted ConfigMap", |c| {
        c.get(&["-n", "default", "events", "--field-selector", &selector])
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .any(|e| e["message"] == wanted.as_str())
    });
    let now = n.api_pod(&name).unwrap();
    assert!(is_running(&now), "{now}");
    assert_eq!(container_status(&now, "main")["restartCount"], 0);
    assert_eq!(std::fs::read_to_string(cfg.join("app.conf")).unwrap(), "v2");

    delete_pod_and_wait(&n, &name, &pod_dir);
    n.cluster
        .kubectl(&["-n", "default", "delete", "secret", &secret, "--wait=false"]);
}

#[test]
#[ignore = "needs root, containerd and the control plane: run hack/test.sh"]
fn a_pod_waits_in_container_creating_until_its_config_map_exists() {
    let n = ClusterNode::start("cluster-volumes-missing", &[]);
    let node = n.name().to_string();
    let cm = format!("late-{node}");
    n.cluster.kubectl(&[
        "-n",
        "default",
        "delete",
        "configmap",
        &cm,
        "--ignore-not-found",
    ]);
    let name = format!("waits-{node}");
    let volumes = format!("  - name: cfg\n    configMap: {{name: {cm}}}");
    n.cluster.apply(&pod_manifest(
        &name,
        &node,
        "echo \"read $(cat /etc/cfg/k)\"; sleep 3600",
        "    - {name: cfg, mountPath: /etc/cfg}",
        &volumes,
    ));
    let pod = n.wait_api_pod(&name, 60, "ContainerCreating", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    });
    let selector = format!("involvedObject.name={name},reason=FailedMount");
    let wanted =
        format!("MountVolume.SetUp failed for volume \"cfg\" : configmap \"{cm}\" not found");
    n.wait_api(60, "a FailedMount event in upstream's words", |c| {
        c.get(&["-n", "default", "events", "--field-selector", &selector])
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .any(|e| e["message"] == wanted.as_str() && e["type"] == "Warning")
    });
    assert_ne!(pod["status"]["phase"], "Running");

    n.cluster.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {cm}, namespace: default}}\ndata: {{k: here}}\n"
    ));
    let pod = n.wait_api_pod(&name, 120, "Running once the ConfigMap exists", is_running);
    wait_for(&n, 60, "the container read the key", || {
        n.cluster
            .kubectl(&["-n", "default", "logs", &name])
            .1
            .contains("read here")
    });
    let pod_dir = volume_dir(&n, &pod, "kubernetes.io~configmap", "cfg")
        .ancestors()
        .nth(3)
        .unwrap()
        .to_path_buf();
    delete_pod_and_wait(&n, &name, &pod_dir);
    n.cluster
        .kubectl(&["-n", "default", "delete", "configmap", &cm, "--wait=false"]);
}
