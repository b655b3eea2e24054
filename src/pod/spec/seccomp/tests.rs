use super::*;
use crate::pod::spec::{container_env, container_spec, sandbox_spec, EnvObjects};
use crate::runtime::accounts::Accounts;
use crate::runtime::images::ImageConfig;
use serde_json::{json, Value};

fn pod(spec: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": spec
    }))
    .unwrap()
}

fn image() -> ImageConfig {
    ImageConfig {
        entrypoint: Some(vec!["/bin/sh".into()]),
        cmd: None,
        env: None,
        working_dir: None,
        user: None,
        stop_signal: None,
    }
}

fn settings(root: &Path, default: bool) -> Settings {
    Settings::new(root, default)
}

/// The first container's spec as the worker builds it: the spec, then its seccomp.
fn built(p: &Pod, s: &Settings) -> Result<Spec, SeccompError> {
    let c = &p.spec.as_ref().unwrap().containers[0];
    let ctx = crate::pod::spec::tests::ctx();
    let env = container_env(p, c, &image(), &ctx, &EnvObjects::default()).unwrap();
    let mut spec = container_spec(p, c, &image(), &ctx, &env, &[], &Accounts::default()).unwrap();
    let privileged = c
        .security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false);
    let seccomp = load(&choose(p, Some(c), s)?, privileged)?;
    apply(&mut spec, &seccomp)?;
    Ok(spec)
}

fn filter(spec: &Spec) -> Option<LinuxSeccomp> {
    spec.linux().as_ref().unwrap().seccomp().clone()
}

/// The action the filter takes for `name` called with first argument `arg0` (None: the
/// entries with argument conditions do not count), as libseccomp would pick: an entry
/// without conditions, else one whose condition holds.
fn action_for(
    f: &LinuxSeccomp,
    name: &str,
    arg0: Option<u64>,
) -> (LinuxSeccompAction, Option<u32>) {
    for s in f.syscalls().as_ref().unwrap() {
        if !s.names().iter().any(|n| n == name) {
            continue;
        }
        let holds = match s.args().as_deref() {
            None | Some([]) => true,
            Some(conds) => arg0.is_some_and(|v| {
                conds.iter().all(|c| {
                    assert_eq!(c.index(), 0, "{name}: only first-argument conditions here");
                    match c.op() {
                        LinuxSeccompOperator::ScmpCmpEq => v == c.value(),
                        LinuxSeccompOperator::ScmpCmpLt => v < c.value(),
                        LinuxSeccompOperator::ScmpCmpGt => v > c.value(),
                        LinuxSeccompOperator::ScmpCmpMaskedEq => {
                            v & c.value() == c.value_two().unwrap_or(0)
                        }
                        op => panic!("{op:?} not modelled"),
                    }
                })
            }),
        };
        if holds {
            return (s.action(), s.errno_ret());
        }
    }
    (f.default_action(), f.default_errno_ret())
}

const ALLOW: (LinuxSeccompAction, Option<u32>) = (LinuxSeccompAction::ScmpActAllow, None);
const EPERM: (LinuxSeccompAction, Option<u32>) = (LinuxSeccompAction::ScmpActErrno, Some(1));

#[test]
fn the_default_profile_data_parses_and_names_known_capabilities() {
    let d: ProfileData = serde_json::from_str(PROFILE_JSON).unwrap();
    assert!(!d.rules.is_empty());
    for r in &d.rules {
        assert!(
            r.allow.is_empty() != r.errno.is_empty(),
            "a rule allows or fails: {r:?}"
        );
        assert!(r.errno.is_empty() || r.errno_ret.is_some(), "{r:?}");
    }
}

#[test]
fn runtime_default_allows_the_allowlist_and_fails_the_rest_with_eperm() {
    let p = pod(json!({"containers": [{"name": "c", "image": "i",
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}]}));
    let spec = built(&p, &settings(Path::new("/var/lib/kubelet"), false)).unwrap();
    let f = filter(&spec).expect("RuntimeDefault sets a filter");
    assert_eq!(f.default_action(), LinuxSeccompAction::ScmpActErrno);
    assert_eq!(f.default_errno_ret(), Some(1), "EPERM");
    for allowed in ["read", "write", "execve", "mkdir", "exit_group", "futex"] {
        assert_eq!(action_for(&f, allowed, None), ALLOW, "{allowed}");
    }
    for denied in [
        "kexec_load",
        "mount",
        "unshare",
        "setns",
        "reboot",
        "init_module",
        "bpf",
    ] {
        assert_eq!(action_for(&f, denied, None), EPERM, "{denied}");
    }
    if std::env::consts::ARCH == "x86_64" {
        assert_eq!(
            f.architectures().clone().unwrap(),
            [Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
        );
        assert_eq!(action_for(&f, "arch_prctl", None), ALLOW);
    }
    // The document runc reads spells the OCI names.
    let doc = serde_json::to_value(&spec).unwrap();
    assert_eq!(doc["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(doc["linux"]["seccomp"]["defaultErrnoRet"], 1);
}

#[test]
fn runtime_default_filters_arguments() {
    let p = pod(
        json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "i"}]}),
    );
    let f = filter(&built(&p, &settings(Path::new("/r"), false)).unwrap()).unwrap();
    // personality: the Linux personas and the query only.
    assert_eq!(action_for(&f, "personality", Some(0)), ALLOW);
    assert_eq!(action_for(&f, "personality", Some(0xffff_ffff)), ALLOW);
    assert_eq!(
        action_for(&f, "personality", Some(0x0040_0000)),
        EPERM,
        "READ_IMPLIES_EXEC"
    );
    // socket: every family but AF_ALG (38) and AF_VSOCK (40).
    for (family, want) in [
        (1, ALLOW),
        (2, ALLOW),
        (10, ALLOW),
        (16, ALLOW),
        (38, EPERM),
        (39, ALLOW),
        (40, EPERM),
        (44, ALLOW),
    ] {
        assert_eq!(
            action_for(&f, "socket", Some(family)),
            want,
            "family {family}"
        );
    }
    if std::env::consts::ARCH != "s390x" {
        // clone without CAP_SYS_ADMIN: a thread or a fork, never a namespace.
        assert_eq!(
            action_for(&f, "clone", Some(0x0001_0f00)),
            ALLOW,
            "a thread"
        );
        assert_eq!(
            action_for(&f, "clone", Some(0x0002_0000 | 17)),
            EPERM,
            "CLONE_NEWNS"
        );
        assert_eq!(
            action_for(&f, "clone", Some(0x1000_0000)),
            EPERM,
            "CLONE_NEWUSER"
        );
    }
    // clone3 fails with ENOSYS so C libraries fall back to clone.
    assert_eq!(
        action_for(&f, "clone3", None),
        (LinuxSeccompAction::ScmpActErrno, Some(38))
    );
}

#[test]
fn runtime_default_follows_the_containers_capabilities() {
    let with = |caps: Value| {
        let p = pod(json!({"containers": [{"name": "c", "image": "i",
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"},
                                "capabilities": caps}}]}));
        filter(&built(&p, &settings(Path::new("/r"), false)).unwrap()).unwrap()
    };
    let plain = with(json!({}));
    let admin = with(json!({"add": ["SYS_ADMIN"]}));
    let ptrace = with(json!({"add": ["CAP_SYS_PTRACE", "SYS_TIME"]}));
    let no_chroot = with(json!({"drop": ["SYS_CHROOT"]}));

    assert_eq!(
        action_for(&plain, "chroot", None),
        ALLOW,
        "in the default set"
    );
    assert_eq!(action_for(&no_chroot, "chroot", None), EPERM);

    for call in [
        "mount",
        "umount2",
        "unshare",
        "setns",
        "sethostname",
        "clone3",
    ] {
        assert_eq!(
            action_for(&plain, call, None).0,
            LinuxSeccompAction::ScmpActErrno,
            "{call}"
        );
        assert_eq!(
            action_for(&admin, call, None),
            ALLOW,
            "{call} with SYS_ADMIN"
        );
    }
    assert_eq!(
        action_for(&admin, "clone", Some(0x1000_0000)),
        ALLOW,
        "namespaces"
    );
    assert!(
        !admin
            .syscalls()
            .as_ref()
            .unwrap()
            .iter()
            .any(|s| s.names().iter().any(|n| n == "clone3")
                && s.action() == LinuxSeccompAction::ScmpActErrno),
        "no ENOSYS rule with SYS_ADMIN"
    );

    // (ptrace itself is allowed to all on kernels from 4.8.)
    for call in ["kcmp", "pidfd_getfd", "process_madvise"] {
        assert_eq!(action_for(&plain, call, None), EPERM, "{call}");
        assert_eq!(
            action_for(&ptrace, call, None),
            ALLOW,
            "{call} with SYS_PTRACE"
        );
    }
    assert_eq!(action_for(&plain, "settimeofday", None), EPERM);
    assert_eq!(action_for(&ptrace, "settimeofday", None), ALLOW);
}

#[test]
fn ptrace_on_an_old_kernel_needs_the_capability() {
    let none = HashSet::new();
    let old = default_profile(&none, "x86_64", Some((4, 4))).unwrap();
    let new = default_profile(&none, "x86_64", Some((4, 8))).unwrap();
    let unknown = default_profile(&none, "x86_64", None).unwrap();
    assert_eq!(action_for(&old, "ptrace", None), EPERM);
    assert_eq!(action_for(&unknown, "ptrace", None), EPERM);
    assert_eq!(action_for(&new, "ptrace", None), ALLOW);
    // s390x passes clone's flags second, and has its own calls.
    let s390 = default_profile(&none, "s390x", Some((6, 1))).unwrap();
    let clone = s390
        .syscalls()
        .as_ref()
        .unwrap()
        .iter()
        .find(|s| s.names() == &["clone"])
        .unwrap()
        .clone();
    assert_eq!(clone.args().as_ref().unwrap()[0].index(), 1);
    assert_eq!(action_for(&s390, "s390_runtime_instr", None), ALLOW);
    assert_eq!(action_for(&new, "s390_runtime_instr", None), EPERM);
    assert_eq!(
        s390.architectures().clone().unwrap(),
        [Arch::ScmpArchS390, Arch::ScmpArchS390x]
    );
}

#[test]
fn the_container_wins_over_the_pod_and_unconfined_sets_nothing() {
    let s = settings(Path::new("/r"), false);
    let p = pod(
        json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "i",
            "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]}),
    );
    assert_eq!(filter(&built(&p, &s).unwrap()), None);
    let p = pod(
        json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}},
        "containers": [{"name": "c", "image": "i",
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}]}),
    );
    assert!(filter(&built(&p, &s).unwrap()).is_some());
    // Nothing asked, no seccompDefault: unconfined, as upstream.
    let p = pod(json!({"containers": [{"name": "c", "image": "i"}]}));
    assert_eq!(filter(&built(&p, &s).unwrap()), None);
}

#[test]
fn the_deprecated_annotations_are_not_read() {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "annotations": {
            "seccomp.security.alpha.kubernetes.io/pod": "runtime/default",
            "container.seccomp.security.alpha.kubernetes.io/c": "runtime/default"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}
    }))
    .unwrap();
    assert_eq!(
        filter(&built(&p, &settings(Path::new("/r"), false)).unwrap()),
        None
    );
}

#[test]
fn seccomp_default_applies_to_containers_that_ask_for_nothing() {
    let s = settings(Path::new("/r"), true);
    let p = pod(json!({"containers": [{"name": "c", "image": "i"}]}));
    let f = filter(&built(&p, &s).unwrap()).expect("seccompDefault: RuntimeDefault");
    assert_eq!(action_for(&f, "kexec_load", None), EPERM);
    // An explicit Unconfined still wins.
    let p = pod(json!({"containers": [{"name": "c", "image": "i",
        "securityContext": {"seccompProfile": {"type": "Unconfined"}}}]}));
    assert_eq!(filter(&built(&p, &s).unwrap()), None);
}

#[test]
fn privileged_containers_get_no_filter_and_their_profile_is_not_read() {
    let s = settings(Path::new("/nonexistent-root"), true);
    for profile in [
        json!({"type": "RuntimeDefault"}),
        json!({"type": "Localhost", "localhostProfile": "missing.json"}),
    ] {
        let p = pod(json!({"containers": [{"name": "c", "image": "i",
            "securityContext": {"privileged": true, "seccompProfile": profile}}]}));
        assert_eq!(filter(&built(&p, &s).unwrap()), None, "{profile}");
    }
    let p = pod(json!({"containers": [{"name": "c", "image": "i",
        "securityContext": {"privileged": true}}]}));
    assert_eq!(filter(&built(&p, &s).unwrap()), None, "seccompDefault");
}

#[test]
fn localhost_profiles_are_read_from_the_seccomp_root() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("seccomp/profiles")).unwrap();
    let profile = json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}],
        "comment": "fields the OCI type lacks are ignored, as Go's decoder does"
    });
    std::fs::write(
        root.path().join("seccomp/profiles/no-mkdir.json"),
        profile.to_string(),
    )
    .unwrap();
    let s = settings(root.path(), false);
    let p = pod(json!({"containers": [{"name": "c", "image": "i",
        "securityContext": {"seccompProfile": {"type": "Localhost",
            "localhostProfile": "profiles/no-mkdir.json"}}}]}));
    let f = filter(&built(&p, &s).unwrap()).unwrap();
    assert_eq!(f.default_action(), LinuxSeccompAction::ScmpActAllow);
    assert_eq!(
        action_for(&f, "mkdir", None),
        (LinuxSeccompAction::ScmpActErrno, Some(13))
    );
    assert_eq!(f.architectures().clone().unwrap(), [Arch::ScmpArchX86_64]);
    // The pod's Localhost profile applies to a container without one.
    let p = pod(
        json!({"securityContext": {"seccompProfile": {"type": "Localhost",
            "localhostProfile": "profiles/no-mkdir.json"}},
        "containers": [{"name": "c", "image": "i"}]}),
    );
    assert!(filter(&built(&p, &s).unwrap()).is_some());
}

#[test]
fn a_missing_or_invalid_localhost_profile_names_the_file() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("seccomp")).unwrap();
    std::fs::write(root.path().join("seccomp/bad.json"), "{not json").unwrap();
    std::fs::write(
        root.path().join("seccomp/no-action.json"),
        r#"{"syscalls": []}"#,
    )
    .unwrap();
    let s = settings(root.path(), false);
    let with = |name: &str| {
        pod(json!({"containers": [{"name": "c", "image": "i",
            "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": name}}}]}))
    };
    let missing = root.path().join("seccomp/missing.json");
    let e = built(&with("missing.json"), &s).unwrap_err();
    assert!(e.from_runtime());
    assert_eq!(
        e.to_string(),
        format!(
            "cannot load seccomp profile \"{0}\": open {0}: no such file or directory",
            missing.display()
        )
    );
    for name in ["bad.json", "no-action.json"] {
        let e = built(&with(name), &s).unwrap_err();
        assert!(e.from_runtime());
        let path = root.path().join("seccomp").join(name);
        assert!(
            e.to_string().starts_with(&format!(
                "decoding seccomp profile failed \"{}\": ",
                path.display()
            )),
            "{e}"
        );
    }
}

#[test]
fn a_localhost_profile_cannot_leave_the_seccomp_root() {
    let s = settings(Path::new("/var/lib/kubelet"), false);
    for (name, reason) in [
        ("../kubelet.conf", "must not contain '..'"),
        ("a/../../x.json", "must not contain '..'"),
        ("/etc/profile.json", "must be a relative path"),
    ] {
        let p = pod(json!({"containers": [{"name": "c", "image": "i",
            "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": name}}}]}));
        let e = built(&p, &s).unwrap_err();
        assert!(!e.from_runtime());
        assert_eq!(
            e.to_string(),
            format!("securityContext.seccompProfile.localhostProfile: {name:?}: {reason}")
        );
    }
    // A name with dots that are not a parent element is fine.
    let p = pod(json!({"containers": [{"name": "c", "image": "i",
        "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "a..b/c.json"}}}]}));
    assert_eq!(
        choose(&p, Some(&p.spec.as_ref().unwrap().containers[0]), &s).unwrap(),
        Choice::Localhost(PathBuf::from("/var/lib/kubelet/seccomp/a..b/c.json"))
    );
    // Localhost without a name is the kubelet's refusal.
    let p = pod(json!({"containers": [{"name": "c", "image": "i",
        "securityContext": {"seccompProfile": {"type": "Localhost"}}}]}));
    let e = built(&p, &s).unwrap_err();
    assert_eq!(
        e.to_string(),
        "localhostProfile must be set if seccompProfile type is Localhost."
    );
}

#[test]
fn the_sandbox_follows_the_pod_level_profile_unless_a_container_is_privileged() {
    let s = settings(Path::new("/r"), false);
    let sandbox = |p: &Pod, s: &Settings| {
        let ctx = crate::pod::spec::tests::ctx();
        let mut spec = sandbox_spec(&ctx, &image()).unwrap();
        let seccomp = load(&choose(p, None, s).unwrap(), pod_has_privileged(p)).unwrap();
        apply(&mut spec, &seccomp).unwrap();
        filter(&spec)
    };
    let p = pod(
        json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "i"}]}),
    );
    let f = sandbox(&p, &s).expect("RuntimeDefault for the pause container");
    assert_eq!(action_for(&f, "kexec_load", None), EPERM);
    // A container's own profile is not the sandbox's.
    let p = pod(json!({"containers": [{"name": "c", "image": "i",
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}]}));
    assert_eq!(sandbox(&p, &s), None);
    assert!(
        sandbox(&p, &settings(Path::new("/r"), true)).is_some(),
        "seccompDefault"
    );
    // A privileged init container makes the sandbox privileged.
    let p = pod(
        json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [{"name": "i", "image": "i", "securityContext": {"privileged": true}}],
        "containers": [{"name": "c", "image": "i"}]}),
    );
    assert_eq!(sandbox(&p, &s), None);
}
