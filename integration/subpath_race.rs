//! The subPath symlink-swap escape (CVE-2017-1002101, CVE-2021-25741) against the real
//! containerd and runc: one container swaps a directory of a shared emptyDir for a symlink
//! to a host folder and back, as fast as it can, while its siblings start with that
//! directory as their subPath. A sibling that ever sees the host folder's marker escaped.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

/// Siblings per pod: they start one after another while the swapper runs.
const CHECKERS: usize = 6;
/// How long pods are run back to back; the checks are counted, never timed.
const RACE_FOR: Duration = Duration::from_secs(20);
/// At least this many sibling starts must have looked, or the test proved nothing.
const MIN_STARTS: usize = 12;
/// The name of the marker in the host folder the symlink points to.
const MARKER: &str = "HOST-MARKER-must-never-be-seen";

/// A pod: `swap` turns `/v/x` into a symlink to `host` and back for `swap_secs`, then leaves
/// it a directory; `check-<i>` mounts `x` as its subPath and writes what it sees to the
/// report folder (a hostPath), one file per start.
fn race_pod(name: &str, host: &Path, report: &Path, swap_secs: u64) -> String {
    let host = host.display();
    let mut m = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  volumes:
  - {{name: shared, emptyDir: {{}}}}
  - {{name: report, hostPath: {{path: {report}, type: Directory}}}}
  containers:
  - name: swap
    image: {BUSYBOX}
    command:
    - sh
    - -c
    - |
      cd /v
      end=$(( $(date +%s) + {swap_secs} ))
      while [ "$(date +%s)" -lt "$end" ]; do
        for i in 1 2 3 4 5 6 7 8 9 10; do
          rm -rf x; mkdir x; touch x/in-volume
          rm -rf x; ln -s {host} x
        done
      done
      rm -rf x; mkdir x; touch x/in-volume
    volumeMounts:
    - {{name: shared, mountPath: /v}}
"#,
        report = report.display(),
    );
    for i in 0..CHECKERS {
        m.push_str(&format!(
            r#"  - name: check-{i}
    image: {BUSYBOX}
    command: ["sh", "-c", "ls -a /sub > /report/{name}-{i}.tmp; mv /report/{name}-{i}.tmp /report/{name}-{i}"]
    volumeMounts:
    - {{name: shared, mountPath: /sub, subPath: x}}
    - {{name: report, mountPath: /report}}
"#
        ));
    }
    m
}

/// Mount points at or below `dir` in the host's mount table.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap();
    let dir = dir.to_str().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|p| p.starts_with(dir))
        .collect()
}

#[test]
#[ignore = "needs root and containerd: run hack/test.sh"]
fn a_swapped_sub_path_never_leads_to_the_host() {
    let node = Node::start("subpath-race");
    let scratch = tempfile::tempdir().unwrap();
    let host = scratch.path().join("host-root");
    let report = scratch.path().join("report");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::create_dir_all(&report).unwrap();
    std::fs::write(host.join(MARKER), "host").unwrap();

    let started = Instant::now();
    let mut pods = 0;
    let mut starts = 0;
    // Back to back until the time is up and enough starts looked; the upper bound only
    // stops a broken agent.
    while started.elapsed() < RACE_FOR || starts < MIN_STARTS {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "only {starts} checks in 10 minutes\n{}",
            node.log()
        );
        let name = format!("race-{pods}");
        let file = format!("{name}.yaml");
        node.write_manifest(&file, &race_pod(&name, &host, &report, 4));
        let p = node.wait_pod(&name, 120, "every container ran", |p| {
            p["status"]["phase"] == "Succeeded" || p["status"]["phase"] == "Failed"
        });
        // A checker whose directory the swapper had just deleted fails in runc (a deleted
        // directory cannot be bind-mounted): a failed start, not a look; counted below
        // from the reports.
        let ended: Vec<String> = (0..CHECKERS)
            .map(|i| {
                let c = container_status(&p, &format!("check-{i}"));
                let s = &c["state"];
                s["terminated"]["reason"]
                    .as_str()
                    .or(s["waiting"]["reason"].as_str())
                    .unwrap_or("?")
                    .to_string()
            })
            .collect();
        eprintln!("{name}: checkers {ended:?}");
        node.remove_manifest(&file);
        node.wait_gone(&name, 60);
        pods += 1;
        starts = std::fs::read_dir(&report)
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().ends_with(".tmp"))
            .count();
    }

    let mut escaped = Vec::new();
    let mut in_volume = 0;
    for e in std::fs::read_dir(&report).unwrap().flatten() {
        let seen = std::fs::read_to_string(e.path()).unwrap();
        if seen.contains(MARKER) {
            escaped.push(e.file_name());
        }
        if seen.contains("in-volume") {
            in_volume += 1;
        }
    }
    let refused = node.log().matches("became a symlink").count()
        + node.log().matches("leads outside the volume").count();
    eprintln!(
        "{pods} pods, {starts} checker starts ({in_volume} saw the volume's file), \
         {refused} refused starts logged"
    );
    assert!(
        escaped.is_empty(),
        "checkers saw the host folder through their subPath: {escaped:?}"
    );
    assert!(starts >= MIN_STARTS);
    assert_eq!(
        std::fs::read_dir(&host).unwrap().count(),
        1,
        "nothing was made in the host folder"
    );
    // The pods are gone: none of their subPath binds is left mounted.
    let left = mounts_under(&node.root.path().join("root/pods"));
    assert!(left.is_empty(), "mounts left behind: {left:?}");
}
