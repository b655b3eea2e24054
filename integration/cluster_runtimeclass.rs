//! RuntimeClasses against the real control plane (hack/cluster/up.sh) and containerd: the
//! agent reads its handlers from a containerd config file of the test's own, where the
//! handler `recorded` is the runc v2 shim with `BinaryName` set to a wrapper around runc
//! that writes down every call (crun, the production example, refuses this host's hybrid
//! cgroups). A pod whose RuntimeClass names that handler runs through the wrapper, its
//! containerd records carry the runtime and runc's options as containerd's CRI plugin
//! writes them, and its pod cgroup includes the RuntimeClass's overhead (set on the pod by
//! the apiserver's RuntimeClass admission). A RuntimeClass whose handler the node has no
//! runtime for gets upstream's FailedCreatePodSandBox event in containerd's words and the
//! pod never runs. The Node lists the handlers it serves in status.runtimeHandlers.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::cluster::{api_busybox_pod, Cluster, ClusterNode};
use common::{container_status, ctr};
use serde_json::Value;

/// RuntimeClasses and pods this test made, deleted when it ends (however it ends).
struct Made {
    cluster: Cluster,
    objects: Vec<(String, String)>,
}

impl Drop for Made {
    fn drop(&mut self) {
        for (kind, name) in self.objects.iter().rev() {
            let mut args = vec!["delete", kind.as_str(), name.as_str(), "--wait=false"];
            if kind == "pod" {
                args.extend(["-n", "default"]);
            }
            self.cluster.kubectl(&args);
        }
    }
}

fn runtime_class(name: &str, handler: &str, overhead: Option<(&str, &str)>) -> String {
    let overhead = overhead
        .map(|(cpu, memory)| {
            format!("overhead:\n  podFixed:\n    cpu: {cpu}\n    memory: {memory}\n")
        })
        .unwrap_or_default();
    format!("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: {name}\nhandler: {handler}\n{overhead}")
}

/// The wrapper runc the `recorded` handler names: appends its arguments to `calls`, then
/// runs the real runc.
fn write_wrapper(dir: &Path) -> (PathBuf, PathBuf) {
    let calls = dir.join("calls");
    let wrapper = dir.join("runc-recorded");
    let runc = [
        "/usr/sbin/runc",
        "/usr/bin/runc",
        "/usr/local/sbin/runc",
        "/usr/local/bin/runc",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists())
    .expect("runc is installed");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> {calls}\nexec {runc} \"$@\"\n",
            calls = calls.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    (wrapper, calls)
}

/// `ctr containers info` of every record of the pod, as JSON.
fn records_of(n: &ClusterNode, pod: &str) -> Vec<Value> {
    let filter = format!("labels.\"io.kubernetes.pod.name\"=={pod}");
    let (ok, ids) = ctr(&["containers", "ls", "-q", &filter], &n.ns);
    assert!(ok, "ctr containers ls: {ids}");
    ids.split_whitespace()
        .map(|id| {
            let (ok, info) = ctr(&["containers", "info", id], &n.ns);
            assert!(ok, "ctr containers info {id}: {info}");
            serde_json::from_str(&info).unwrap_or_else(|e| panic!("{id}: {e}: {info}"))
        })
        .collect()
}

/// A number from the pod cgroup's file, on cgroup v1 or v2.
fn cgroup_value(cgroup: &str, v1: (&str, &str), v2: &str) -> String {
    let rel = cgroup.trim_start_matches('/');
    let v1_path = Path::new("/sys/fs/cgroup").join(v1.0).join(rel).join(v1.1);
    if let Ok(text) = std::fs::read_to_string(&v1_path) {
        return text.trim().to_string();
    }
    let v2_path = Path::new("/sys/fs/cgroup").join(rel).join(v2);
    std::fs::read_to_string(&v2_path)
        .unwrap_or_else(|e| {
            panic!(
                "neither {} nor {}: {e}",
                v1_path.display(),
                v2_path.display()
            )
        })
        .trim()
        .to_string()
}

fn sandbox_failures(c: &Cluster, pod: &str) -> String {
    let selector = format!("involvedObject.name={pod},reason=FailedCreatePodSandBox");
    c.kubectl(&[
        "-n",
        "default",
        "get",
        "events",
        "--field-selector",
        &selector,
        "-o",
        "jsonpath={range .items[*]}{.type} {.message}{\"\\n\"}{end}",
    ])
    .1
}

#[test]
#[ignore = "needs root, containerd and the control plane (hack/test.sh)"]
fn runtime_classes_map_to_containerd_runtimes_with_their_overhead() {
    let dir = tempfile::tempdir().unwrap();
    let (wrapper, calls) = write_wrapper(dir.path());
    let config = dir.path().join("containerd.toml");
    std::fs::write(
        &config,
        format!(
            "version = 2\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.recorded]\n\
             \x20 runtime_type = \"io.containerd.runc.v2\"\n\
             \x20 [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.recorded.options]\n\
             \x20   BinaryName = \"{}\"\n",
            wrapper.display()
        ),
    )
    .unwrap();
    let flag = format!("--containerd-config={}", config.display());
    let n = ClusterNode::start("cluster_runtimeclass", &[&flag]);
    let mut made = Made {
        cluster: n.cluster.clone(),
        objects: Vec::new(),
    };

    // The Node lists the handlers it serves: the default, then each configured runtime.
    n.wait_api(60, "status.runtimeHandlers", |c| {
        c.get(&["node", n.name()])
            .is_some_and(|node| !node["status"]["runtimeHandlers"].is_null())
    });
    let node = n.node_object();
    let handlers: Vec<(String, Value)> = node["status"]["runtimeHandlers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap().to_string(),
                h["features"].clone(),
            )
        })
        .collect();
    let names: Vec<&str> = handlers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["", "recorded", "runc"], "{node}");
    for (_, features) in &handlers {
        assert_eq!(
            features,
            &serde_json::json!({"recursiveReadOnlyMounts": false, "userNamespaces": false})
        );
    }

    // A RuntimeClass with the handler and an overhead, and a Guaranteed pod using it.
    let class = format!("krs-rc-{}", n.name());
    n.cluster
        .apply(&runtime_class(&class, "recorded", Some(("250m", "64Mi"))));
    made.objects.push(("runtimeclass".into(), class.clone()));
    let pod = format!("rc-{}", n.name());
    n.cluster.apply(&api_busybox_pod(
        &pod,
        n.name(),
        "echo started; sleep 3600",
        &format!(
            "    resources:\n      limits:\n        cpu: 500m\n        memory: 128Mi\n  runtimeClassName: {class}\n"
        ),
    ));
    made.objects.push(("pod".into(), pod.clone()));
    let p = n.wait_api_pod(&pod, 120, "Running", |p| {
        p["status"]["phase"] == "Running" && container_status(p, "main")["ready"] == true
    });
    // The apiserver's RuntimeClass admission put the overhead on the pod.
    assert_eq!(p["spec"]["overhead"]["cpu"], "250m", "{p}");

    // Through containerd: the sandbox and the container run the handler's runtime, with
    // runc's options naming the wrapper, as containerd's CRI plugin would have made them.
    let records = records_of(&n, &pod);
    assert!(records.len() >= 2, "sandbox and container: {records:?}");
    for r in &records {
        let id = r["ID"].as_str().unwrap();
        assert_eq!(r["Runtime"]["Name"], "io.containerd.runc.v2", "{r}");
        let options = &r["Runtime"]["Options"];
        assert_eq!(
            options["type_url"], "containerd.runc.v1.Options",
            "{id}: {r}"
        );
        let value = options["value"].as_str().unwrap_or_default();
        let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, value)
            .unwrap_or_else(|e| panic!("{id}: options value {value:?}: {e}"));
        let wrapper_bytes = wrapper.to_str().unwrap().as_bytes();
        assert!(
            bytes
                .windows(wrapper_bytes.len())
                .any(|w| w == wrapper_bytes),
            "{id}: runc options do not name {}: {r}",
            wrapper.display()
        );
    }
    // ... and runc was run through it for each of them.
    let called = std::fs::read_to_string(&calls).unwrap_or_default();
    for r in &records {
        let id = r["ID"].as_str().unwrap();
        assert!(
            called
                .lines()
                .any(|l| l.contains(" create ") && l.contains(id)),
            "the wrapper did not create {id}; calls:\n{called}"
        );
    }

    // The pod cgroup: the container's limits plus the overhead (upstream's
    // ResourceConfigForPod: every container has limits, so the overhead is added to them).
    let sandbox = records
        .iter()
        .find(|r| r["Labels"]["kubelet-rs.io/kind"] == "sandbox")
        .expect("a sandbox record");
    assert_eq!(
        sandbox["Labels"]["kubelet-rs.io/runtime-handler"],
        "recorded"
    );
    let cgroup = sandbox["Labels"]["kubelet-rs.io/cgroup-parent"]
        .as_str()
        .expect("the sandbox names its pod cgroup")
        .to_string();
    let memory = cgroup_value(&cgroup, ("memory", "memory.limit_in_bytes"), "memory.max");
    assert_eq!(memory, ((128 + 64) << 20).to_string(), "{cgroup}");
    let quota = cgroup_value(&cgroup, ("cpu", "cpu.cfs_quota_us"), "cpu.max");
    assert_eq!(
        quota.split_whitespace().next().unwrap(),
        "75000",
        "{cgroup}: (500m + 250m) of a 100 ms period"
    );

    // A handler this node has no runtime for: upstream's event in containerd's words, and
    // the pod stays Pending in ContainerCreating with nothing made for it.
    let bad_class = format!("krs-rc-bad-{}", n.name());
    n.cluster
        .apply(&runtime_class(&bad_class, "no-such-handler", None));
    made.objects
        .push(("runtimeclass".into(), bad_class.clone()));
    let bad = format!("rc-bad-{}", n.name());
    n.cluster.apply(&api_busybox_pod(
        &bad,
        n.name(),
        "sleep 3600",
        &format!("  runtimeClassName: {bad_class}\n"),
    ));
    made.objects.push(("pod".into(), bad.clone()));
    let want = "Warning Failed to create pod sandbox: rpc error: code = Unknown desc = failed to \
                get sandbox runtime: no runtime for \"no-such-handler\" is configured";
    n.wait_api(90, "upstream's FailedCreatePodSandBox event", |c| {
        sandbox_failures(c, &bad).lines().any(|l| l == want)
    });
    let p = n.wait_api_pod(&bad, 30, "Pending in ContainerCreating", |p| {
        container_status(p, "main")["state"]["waiting"]["reason"] == "ContainerCreating"
    });
    assert_eq!(p["status"]["phase"], "Pending", "{p}");
    assert!(
        records_of(&n, &bad).is_empty(),
        "nothing is created for {bad}"
    );
}
