//! SELinux labels of a pod's sandbox and containers, as containerd's CRI plugin with SELinux
//! on gives them: the host's default container labels (the policy's `lxc_contexts`, as
//! go-selinux reads them) with the pod's or container's `seLinuxOptions` laid over them
//! (user, role, type and level on the process label; user and level on the mount label), and
//! one MCS level for the whole pod unless the options name one, so the pod's containers can
//! share its files and nobody else's.
//!
//! Where the host has SELinux off, containerd runs the pod without labels and says nothing;
//! the worker says once, in an event, that the labels it asked for are not applied.
//!
//! Hand-written: the only crate that speaks SELinux (`selinux`) links libselinux, which a
//! node without SELinux lacks, and what is needed here is reading two small files.

use std::path::Path;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Container, Pod, SELinuxOptions};
use oci_spec::runtime::Spec;

/// The host's default labels for containers, when SELinux is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelinuxHost {
    pub process: Context,
    pub file: Context,
}

/// An SELinux context `user:role:type:level` (the level may hold colons itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    pub user: String,
    pub role: String,
    pub type_: String,
    pub level: String,
}

impl Context {
    pub fn parse(text: &str) -> Option<Context> {
        let mut parts = text.trim().splitn(4, ':');
        let mut next = || parts.next().filter(|p| !p.is_empty()).map(str::to_string);
        Some(Context {
            user: next()?,
            role: next()?,
            type_: next()?,
            level: next()?,
        })
    }
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}:{}",
            self.user, self.role, self.type_, self.level
        )
    }
}

/// The labels one sandbox or container runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    pub process: String,
    pub mount: String,
}

/// The host's SELinux state, read once at first use (as containerd reads it at start).
pub fn host() -> Option<&'static SelinuxHost> {
    static HOST: OnceLock<Option<SelinuxHost>> = OnceLock::new();
    HOST.get_or_init(|| host_from(Path::new("/"))).as_ref()
}

/// SELinux is on when selinuxfs is mounted (its `enforce` file exists) and the policy
/// names default container labels; `root` is `/` but for tests.
pub fn host_from(root: &Path) -> Option<SelinuxHost> {
    if !root.join("sys/fs/selinux/enforce").exists() {
        return None;
    }
    let config = std::fs::read_to_string(root.join("etc/selinux/config")).ok()?;
    let policy = config.lines().find_map(|l| {
        l.trim()
            .strip_prefix("SELINUXTYPE=")
            .map(|v| v.trim().trim_matches('"').to_string())
    })?;
    let contexts = std::fs::read_to_string(
        root.join("etc/selinux")
            .join(policy)
            .join("contexts/lxc_contexts"),
    )
    .ok()?;
    let value = |key: &str| {
        contexts.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| Context::parse(v.trim().trim_matches('"')))?
        })
    };
    Some(SelinuxHost {
        process: value("process")?,
        file: value("file")?,
    })
}

/// The options a container runs with (upstream's effective security context: the
/// container's own, else the pod's, as a whole); with `None`, the sandbox's (the pod's).
/// Options with every field empty are none.
pub fn requested<'p>(pod: &'p Pod, container: Option<&'p Container>) -> Option<&'p SELinuxOptions> {
    let own = container
        .and_then(|c| c.security_context.as_ref())
        .and_then(|s| s.se_linux_options.as_ref());
    let pod_level = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.se_linux_options.as_ref());
    own.or(pod_level).filter(|o| !is_empty(o))
}

fn is_empty(o: &SELinuxOptions) -> bool {
    [&o.user, &o.role, &o.type_, &o.level]
        .iter()
        .all(|f| f.as_deref().unwrap_or_default().is_empty())
}

/// The MCS level of a pod that names none: two distinct categories of 1024 from the pod's
/// uid, so an agent that restarts gives the pod's new containers the level its running ones
/// have. (go-selinux draws them at random and keeps them in memory, which a restart loses.)
pub fn pod_level(pod_uid: &str) -> String {
    // FNV-1a: stable across builds and versions, unlike std's hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in pod_uid.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let a = h % 1024;
    let mut b = (h >> 32) % 1023;
    if b >= a {
        b += 1;
    }
    let (lo, hi) = (a.min(b), a.max(b));
    format!("s0:c{lo},c{hi}")
}

/// The labels for `options` on `host` (go-selinux's InitContainerLabels, with containerd's
/// option list): the defaults at `level` unless the options name one; user, role, type and
/// level replace the process label's, user and level the mount label's.
pub fn labels(host: &SelinuxHost, options: Option<&SELinuxOptions>, level: &str) -> Labels {
    let mut process = host.process.clone();
    let mut mount = host.file.clone();
    process.level = level.to_string();
    mount.level = level.to_string();
    if let Some(o) = options {
        let field = |f: &Option<String>| f.clone().filter(|v| !v.is_empty());
        if let Some(user) = field(&o.user) {
            process.user = user.clone();
            mount.user = user;
        }
        if let Some(role) = field(&o.role) {
            process.role = role;
        }
        if let Some(type_) = field(&o.type_) {
            process.type_ = type_;
        }
        if let Some(level) = field(&o.level) {
            process.level = level.clone();
            mount.level = level;
        }
    }
    Labels {
        process: process.to_string(),
        mount: mount.to_string(),
    }
}

/// Puts the labels into the spec: the process label and the mount label of its mounts.
pub fn apply(spec: &mut Spec, labels: &Labels) {
    if let Some(process) = spec.process_mut().as_mut() {
        process.set_selinux_label(Some(labels.process.clone()));
    }
    if let Some(linux) = spec.linux_mut().as_mut() {
        linux.set_mount_label(Some(labels.mount.clone()));
    }
}

/// What the worker does with a sandbox's or container's SELinux options on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Labels to put into the spec.
    Apply(Labels),
    /// Options were asked for, but the host has SELinux off: run without them, and say so.
    NotApplied,
    /// Nothing asked for and SELinux off: nothing to do.
    Nothing,
}

/// Decides for one sandbox (`container` None) or container of `pod`.
pub fn decide(host: Option<&SelinuxHost>, pod: &Pod, container: Option<&Container>) -> Decision {
    let options = requested(pod, container);
    match host {
        Some(host) => {
            let uid = pod
                .metadata
                .uid
                .as_deref()
                .or(pod.metadata.name.as_deref())
                .unwrap_or_default();
            Decision::Apply(labels(host, options, &pod_level(uid)))
        }
        None if options.is_some() => Decision::NotApplied,
        None => Decision::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fixture_host(dir: &Path) {
        std::fs::create_dir_all(dir.join("sys/fs/selinux")).unwrap();
        std::fs::write(dir.join("sys/fs/selinux/enforce"), "1").unwrap();
        std::fs::create_dir_all(dir.join("etc/selinux/targeted/contexts")).unwrap();
        std::fs::write(
            dir.join("etc/selinux/config"),
            "SELINUX=enforcing\nSELINUXTYPE=targeted\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("etc/selinux/targeted/contexts/lxc_contexts"),
            "process = \"system_u:system_r:container_t:s0\"\n\
             content = \"system_u:object_r:virt_var_lib_t:s0\"\n\
             file = \"system_u:object_r:container_file_t:s0\"\n",
        )
        .unwrap();
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_host_is_read_from_selinuxfs_and_the_policys_lxc_contexts() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(host_from(tmp.path()), None, "no selinuxfs: off");
        fixture_host(tmp.path());
        let host = host_from(tmp.path()).unwrap();
        assert_eq!(host.process.to_string(), "system_u:system_r:container_t:s0");
        assert_eq!(host.file.type_, "container_file_t");
        assert_eq!(
            Context::parse("u:r:t:s0:c1,c2").unwrap().level,
            "s0:c1,c2",
            "a level keeps its colons"
        );
    }

    /// The options laid over the defaults as go-selinux does: user and level on both
    /// labels, role and type on the process label only; the pod's level unless named.
    #[test]
    fn options_reach_the_process_and_mount_labels() {
        let tmp = tempfile::tempdir().unwrap();
        fixture_host(tmp.path());
        let host = host_from(tmp.path()).unwrap();
        let p = pod(json!({
            "metadata": {"name": "p", "uid": "u-1"},
            "spec": {
                "securityContext": {"seLinuxOptions": {"level": "s0:c1,c2"}},
                "containers": [
                    {"name": "own", "securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "staff_u"}}},
                    {"name": "inherits"}
                ]
            }
        }));
        let spec = p.spec.as_ref().unwrap();
        let (own, inherits) = (&spec.containers[0], &spec.containers[1]);
        let level = pod_level("u-1");
        assert_eq!(
            decide(Some(&host), &p, Some(own)),
            Decision::Apply(Labels {
                process: format!("staff_u:system_r:spc_t:{level}"),
                mount: format!("staff_u:object_r:container_file_t:{level}"),
            })
        );
        assert_eq!(
            decide(Some(&host), &p, Some(inherits)),
            Decision::Apply(Labels {
                process: "system_u:system_r:container_t:s0:c1,c2".into(),
                mount: "system_u:object_r:container_file_t:s0:c1,c2".into(),
            })
        );
        // The sandbox takes the pod's options.
        assert_eq!(
            decide(Some(&host), &p, None),
            decide(Some(&host), &p, Some(inherits))
        );

        let mut s = crate::pod::spec::tests::spec_of(
            &p,
            &serde_json::from_value(json!({"name": "inherits", "image": "i"})).unwrap(),
        )
        .unwrap();
        let Decision::Apply(l) = decide(Some(&host), &p, Some(inherits)) else {
            unreachable!()
        };
        apply(&mut s, &l);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["process"]["selinuxLabel"], l.process);
        assert_eq!(v["linux"]["mountLabel"], l.mount);
    }

    /// With SELinux off, options asked for are reported, not applied; none asked for (or
    /// only empty ones), nothing.
    #[test]
    fn with_selinux_off_options_are_reported_not_applied() {
        let asked = pod(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "securityContext": {"seLinuxOptions": {"level": "s0:c5"}}}]}
        }));
        let c = &asked.spec.as_ref().unwrap().containers[0];
        assert_eq!(decide(None, &asked, Some(c)), Decision::NotApplied);
        assert_eq!(
            decide(None, &asked, None),
            Decision::Nothing,
            "the pod asked nothing"
        );
        let empty = pod(json!({
            "metadata": {"name": "p"},
            "spec": {"securityContext": {"seLinuxOptions": {}}, "containers": [{"name": "c"}]}
        }));
        let c = &empty.spec.as_ref().unwrap().containers[0];
        assert_eq!(decide(None, &empty, Some(c)), Decision::Nothing);
    }

    #[test]
    fn a_pods_level_is_two_distinct_categories_and_stable() {
        for uid in [
            "",
            "a",
            "0b9f3c1e-5d2a-4f6b-9c1d-2e3f4a5b6c7d",
            "x".repeat(300).as_str(),
        ] {
            let l = pod_level(uid);
            assert_eq!(l, pod_level(uid));
            let (a, b) = l
                .strip_prefix("s0:c")
                .and_then(|r| r.split_once(",c"))
                .unwrap();
            let (a, b): (u32, u32) = (a.parse().unwrap(), b.parse().unwrap());
            assert!(a < b && b < 1024, "{l}");
        }
        assert_ne!(pod_level("a"), pod_level("b"));
    }
}
