//! Seccomp on a real containerd and runc: RuntimeDefault filters the process (the kernel
//! reports mode 2), Unconfined does not (mode 0), a Localhost profile under
//! `<root-dir>/seccomp/` is what the kernel enforces (its ERRNO for mkdir makes mkdir
//! fail), the pod-level profile reaches the pause container, a missing profile fails the
//! create naming the file, and --seccomp-default confines containers that ask for nothing.

mod common;

use common::*;
use serde_json::Value;

/// A static pod with one busybox container per (name, container securityContext) running
/// `script`, and `pod_sc` as the pod's securityContext.
fn pod(name: &str, pod_sc: &str, containers: &[(&str, &str)], script: &str) -> String {
    let mut text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  \
         terminationGracePeriodSeconds: 2\n  securityContext: {pod_sc}\n  containers:\n"
    );
    for (c, sc) in containers {
        text.push_str(&format!(
            "  - name: {c}\n    image: {BUSYBOX}\n    securityContext: {sc}\n    \
             command: [\"sh\", \"-c\", {script:?}]\n"
        ));
    }
    text
}

/// What the container's process reports, then whether mkdir works, then it sleeps.
const PROBE: &str = "grep '^Seccomp:' /proc/self/status; \
    if mkdir /tmp/made; then echo mkdir=ok; else echo mkdir=failed; fi; exec sleep 3600";

fn seccomp_mode_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:").map(|v| v.trim().to_string()))
        .unwrap()
}

fn log_has(pod: &Value, container: &str, want: &[&str]) -> bool {
    let log = read_log(pod, container, 0);
    want.iter().all(|w| log.contains(w))
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn profiles_are_enforced_by_the_kernel() {
    let node = Node::start("seccomp-profiles");
    // The Localhost profile: everything allowed but mkdir, which fails with EPERM.
    let profiles = node.root.path().join("root").join("seccomp").join("test");
    std::fs::create_dir_all(&profiles).unwrap();
    std::fs::write(
        profiles.join("no-mkdir.json"),
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    node.write_manifest(
        "confined.yaml",
        &pod(
            "confined",
            "{seccompProfile: {type: RuntimeDefault}}",
            &[
                ("default", "{seccompProfile: {type: RuntimeDefault}}"),
                ("unconfined", "{seccompProfile: {type: Unconfined}}"),
                (
                    "local",
                    "{seccompProfile: {type: Localhost, localhostProfile: test/no-mkdir.json}}",
                ),
            ],
            PROBE,
        ),
    );
    node.write_manifest(
        "missing.yaml",
        &pod(
            "missing",
            "{}",
            &[(
                "main",
                "{seccompProfile: {type: Localhost, localhostProfile: test/absent.json}}",
            )],
            PROBE,
        ),
    );

    let pod = node.wait_pod("confined", 90, "every container has probed", |p| {
        p["status"]["phase"] == "Running"
            && ["default", "unconfined", "local"]
                .iter()
                .all(|c| read_log(p, c, 0).contains("mkdir="))
    });
    assert!(
        log_has(&pod, "default", &["Seccomp:\t2", "mkdir=ok"]),
        "{}",
        read_log(&pod, "default", 0)
    );
    assert!(
        log_has(&pod, "unconfined", &["Seccomp:\t0", "mkdir=ok"]),
        "{}",
        read_log(&pod, "unconfined", 0)
    );
    assert!(
        log_has(
            &pod,
            "local",
            &["Seccomp:\t2", "Operation not permitted", "mkdir=failed"]
        ),
        "{}",
        read_log(&pod, "local", 0)
    );

    // The pause container runs under the pod-level RuntimeDefault too.
    let app_ids: Vec<String> = ["default", "unconfined", "local"]
        .iter()
        .map(|c| {
            container_status(&pod, c)["containerID"]
                .as_str()
                .unwrap()
                .trim_start_matches("containerd://")
                .to_string()
        })
        .collect();
    let pod_uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    let pause: Vec<u32> = node
        .tasks()
        .into_iter()
        .filter(|(id, pid, _)| {
            !app_ids.contains(id)
                && std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                    .is_ok_and(|c| c.contains(&pod_uid))
        })
        .map(|(_, pid, _)| pid)
        .collect();
    assert_eq!(
        pause.len(),
        1,
        "one pause task of the pod: {:?}",
        node.tasks()
    );
    assert_eq!(seccomp_mode_of(pause[0]), "2");

    // A profile that is not there fails the create, naming the file.
    let absent = node
        .root
        .path()
        .join("root/seccomp/test/absent.json")
        .display()
        .to_string();
    let missing = node.wait_pod("missing", 60, "CreateContainerError", |p| {
        container_status(p, "main")["state"]["waiting"]["reason"] == "CreateContainerError"
    });
    let message = container_status(&missing, "main")["state"]["waiting"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains(&format!(
            "cannot load seccomp profile \"{absent}\": open {absent}: no such file or directory"
        )),
        "{message}"
    );
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn seccomp_default_confines_containers_that_ask_for_nothing() {
    let node = Node::start_with("seccomp-default", &["--seccomp-default"]);
    node.write_manifest(
        "plain.yaml",
        &pod(
            "plain",
            "{}",
            &[
                ("main", "{}"),
                ("opted-out", "{seccompProfile: {type: Unconfined}}"),
            ],
            PROBE,
        ),
    );
    let pod = node.wait_pod("plain", 90, "both containers have probed", |p| {
        ["main", "opted-out"]
            .iter()
            .all(|c| read_log(p, c, 0).contains("mkdir="))
    });
    assert!(
        log_has(&pod, "main", &["Seccomp:\t2", "mkdir=ok"]),
        "{}",
        read_log(&pod, "main", 0)
    );
    assert!(
        log_has(&pod, "opted-out", &["Seccomp:\t0"]),
        "{}",
        read_log(&pod, "opted-out", 0)
    );
}
