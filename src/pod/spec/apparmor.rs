//! AppArmor profiles of containers, as the upstream kubelet asks for them and containerd's
//! CRI plugin applies them on a host with AppArmor:
//! - the profile a container asks for is its own `securityContext.appArmorProfile`, else the
//!   pod's, else the deprecated `container.apparmor.security.beta.kubernetes.io/<name>`
//!   annotation (upstream's GetProfile);
//! - none, or RuntimeDefault: the runtime's default profile, here the project's own
//!   `kubelet-rs-default` (`apparmor_default.profile`), loaded by the agent when the kernel
//!   lacks it;
//! - Localhost: the named profile, which must already be loaded (a missing one is a
//!   CreateContainerError naming it, in containerd's words);
//! - Unconfined, and every privileged container: no profile.
//!
//! On a host without AppArmor nothing is applied; admission has already refused a pod that
//! asks for a profile other than Unconfined (`pod::admission::apparmor`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use k8s_openapi::api::core::v1::{AppArmorProfile, Pod};
use oci_spec::runtime::Spec;

/// The default profile's name, as the kernel and `/proc/<pid>/attr/current` show it.
pub const DEFAULT_PROFILE: &str = "kubelet-rs-default";
/// The default profile's text (the project's own data).
const DEFAULT_PROFILE_TEXT: &str = include_str!("apparmor_default.profile");
const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
/// The kernel's list of loaded profiles, one `name (mode)` per line.
const PROFILES_FILE: &str = "/sys/kernel/security/apparmor/profiles";

/// A profile a container asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    RuntimeDefault,
    Localhost(String),
    Unconfined,
}

#[derive(Debug, thiserror::Error)]
pub enum AppArmorError {
    /// containerd's words for a Localhost profile the kernel does not have.
    #[error("apparmor profile not found {0}")]
    NotFound(String),
    #[error("container {container:?}: {field}: {reason}")]
    Invalid {
        container: String,
        field: String,
        reason: String,
    },
    #[error("reading the loaded AppArmor profiles ({PROFILES_FILE}): {0}")]
    ReadProfiles(#[source] std::io::Error),
    #[error("loading the {DEFAULT_PROFILE} AppArmor profile with apparmor_parser: {0}")]
    Load(String),
    /// containerd's words for a profile asked for where it applies none.
    #[error("apparmor is not supported")]
    NotSupported,
}

/// Whether profiles can be applied here, as containerd's hostSupports decides: the kernel
/// enforces AppArmor (the securityfs folder, the module parameter saying Y), the parser that
/// loads profiles is installed, and the agent does not itself run in a container (the
/// `container` variable, which container managers set: a kind node, for one, cannot load
/// profiles). Read once, as containerd reads it at start.
pub fn host_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        Path::new("/sys/kernel/security/apparmor").exists()
            && std::fs::read("/sys/module/apparmor/parameters/enabled")
                .is_ok_and(|b| b.starts_with(b"Y"))
            && Path::new(PARSER).exists()
            && std::env::var_os("container").is_none_or(|v| v.is_empty())
    })
}

/// Where containerd looks for the profile parser.
const PARSER: &str = "/sbin/apparmor_parser";

/// What `container` of `pod` asks for (upstream's GetProfile), `None` when nothing. A
/// Localhost field without its `localhostProfile`, or a type upstream does not know, is an
/// error naming the field.
pub fn requested(pod: &Pod, container: &str) -> Result<Option<Requested>, AppArmorError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(None);
    };
    let invalid = |field: String, reason: String| AppArmorError::Invalid {
        container: container.to_string(),
        field,
        reason,
    };
    let from_field = |p: &AppArmorProfile, field: &str| -> Result<Requested, AppArmorError> {
        match p.type_.as_str() {
            "RuntimeDefault" => Ok(Requested::RuntimeDefault),
            "Unconfined" => Ok(Requested::Unconfined),
            "Localhost" => match p.localhost_profile.as_deref().filter(|n| !n.is_empty()) {
                Some(name) => Ok(Requested::Localhost(name.to_string())),
                None => Err(invalid(
                    format!("{field}.localhostProfile"),
                    "required with type Localhost".into(),
                )),
            },
            other => Err(invalid(
                format!("{field}.type"),
                format!("unknown profile type {other:?}"),
            )),
        }
    };
    let own = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .find(|c| c.name == container)
        .and_then(|c| c.security_context.as_ref())
        .and_then(|s| s.app_armor_profile.as_ref())
        .or_else(|| {
            spec.ephemeral_containers
                .iter()
                .flatten()
                .find(|c| c.name == container)
                .and_then(|c| c.security_context.as_ref())
                .and_then(|s| s.app_armor_profile.as_ref())
        });
    if let Some(p) = own {
        return from_field(p, "securityContext.appArmorProfile").map(Some);
    }
    if let Some(p) = spec
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.as_ref())
    {
        return from_field(p, "spec.securityContext.appArmorProfile").map(Some);
    }
    let key = format!("{ANNOTATION_PREFIX}{container}");
    let Some(value) = pod.metadata.annotations.as_ref().and_then(|a| a.get(&key)) else {
        return Ok(None);
    };
    match value.as_str() {
        "runtime/default" => Ok(Some(Requested::RuntimeDefault)),
        "unconfined" => Ok(Some(Requested::Unconfined)),
        v => match v.strip_prefix("localhost/").filter(|n| !n.is_empty()) {
            Some(name) => Ok(Some(Requested::Localhost(name.to_string()))),
            None => Err(invalid(
                format!("metadata.annotations[{key}]"),
                format!("{v:?} is not runtime/default, unconfined or localhost/<profile>"),
            )),
        },
    }
}

/// The profile the container's process runs under, `None` for unconfined: containerd's
/// choice on an AppArmor host, with a Localhost profile checked against `loaded` (the
/// kernel's profile list). A privileged container gets no default profile; a Localhost one
/// it names is still applied, as containerd applies it.
pub fn profile_for(
    requested: Option<&Requested>,
    privileged: bool,
    loaded: &str,
) -> Result<Option<String>, AppArmorError> {
    match requested {
        None | Some(Requested::RuntimeDefault) if privileged => Ok(None),
        None | Some(Requested::RuntimeDefault) => Ok(Some(DEFAULT_PROFILE.to_string())),
        Some(Requested::Unconfined) => Ok(None),
        Some(Requested::Localhost(name)) if is_loaded(loaded, name) => Ok(Some(name.clone())),
        Some(Requested::Localhost(name)) => Err(AppArmorError::NotFound(name.clone())),
    }
}

/// Whether the kernel's profile list (`name (mode)` lines) holds `name`.
pub fn is_loaded(profiles: &str, name: &str) -> bool {
    profiles
        .lines()
        .any(|l| l.rsplit_once(" (").map_or(l, |(n, _)| n) == name)
}

/// Sets the process's profile.
pub fn apply(spec: &mut Spec, profile: Option<String>) {
    if let Some(process) = spec.process_mut().as_mut() {
        process.set_apparmor_profile(profile);
    }
}

/// The container's profile on this host: where profiles cannot be applied (no AppArmor, or
/// containerd's `disable_apparmor`), none, and a profile asked for is containerd's error;
/// else the choice, with the default profile loaded first when it is the one. Blocking
/// (reads the kernel's list, may run apparmor_parser).
pub fn profile_on_host(
    requested: Option<&Requested>,
    privileged: bool,
    disabled: bool,
) -> Result<Option<String>, AppArmorError> {
    if disabled || !host_enabled() {
        return match requested {
            None | Some(Requested::Unconfined) => Ok(None),
            Some(_) => Err(AppArmorError::NotSupported),
        };
    }
    let loaded = std::fs::read_to_string(PROFILES_FILE).map_err(AppArmorError::ReadProfiles)?;
    let profile = profile_for(requested, privileged, &loaded)?;
    if profile.as_deref() == Some(DEFAULT_PROFILE) && !is_loaded(&loaded, DEFAULT_PROFILE) {
        load_default()?;
    }
    Ok(profile)
}

/// Loads the default profile (once at a time: two containers starting together must not
/// race apparmor_parser against itself).
fn load_default() -> Result<(), AppArmorError> {
    static LOADING: Mutex<()> = Mutex::new(());
    let _one = LOADING.lock().unwrap_or_else(|e| e.into_inner());
    let loaded = std::fs::read_to_string(PROFILES_FILE).map_err(AppArmorError::ReadProfiles)?;
    if is_loaded(&loaded, DEFAULT_PROFILE) {
        return Ok(());
    }
    // -K: no cache files on the host; -r: replace what may be there under the name.
    let mut child = Command::new("apparmor_parser")
        .args(["-Kr"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| AppArmorError::Load(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(default_profile_text(Path::new("/etc/apparmor.d")).as_bytes())
            .map_err(|e| AppArmorError::Load(e.to_string()))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| AppArmorError::Load(e.to_string()))?;
    if !out.status.success() {
        return Err(AppArmorError::Load(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The default profile as the parser gets it: an `#include` whose file the host lacks is
/// left out (containerd includes them only when present), as the parser fails on it.
fn default_profile_text(profiles_dir: &Path) -> String {
    DEFAULT_PROFILE_TEXT
        .lines()
        .filter(|l| {
            let Some(name) = l
                .trim()
                .strip_prefix("#include <")
                .and_then(|r| r.strip_suffix('>'))
            else {
                return true;
            };
            profiles_dir.join(name).exists()
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    const LOADED: &str =
        "kubelet-rs-default (enforce)\nmy-profile (complain)\n/usr/bin/man (enforce)\n";

    /// The field wins over the pod's field, which wins over the annotation; the
    /// annotation's three spellings; malformed requests name their field.
    #[test]
    fn what_a_container_asks_for_is_read_as_upstream_reads_it() {
        let p = pod(json!({
            "metadata": {"name": "p", "annotations": {
                "container.apparmor.security.beta.kubernetes.io/a": "unconfined",
                "container.apparmor.security.beta.kubernetes.io/b": "localhost/my-profile",
                "container.apparmor.security.beta.kubernetes.io/c": "runtime/default",
                "container.apparmor.security.beta.kubernetes.io/bad": "mine"}},
            "spec": {"containers": [
                {"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "bad"},
                {"name": "own", "securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": "x"}}},
                {"name": "none"},
                {"name": "nameless", "securityContext": {"appArmorProfile": {"type": "Localhost"}}}
            ]}
        }));
        assert_eq!(requested(&p, "a").unwrap(), Some(Requested::Unconfined));
        assert_eq!(
            requested(&p, "b").unwrap(),
            Some(Requested::Localhost("my-profile".into()))
        );
        assert_eq!(requested(&p, "c").unwrap(), Some(Requested::RuntimeDefault));
        assert_eq!(
            requested(&p, "own").unwrap(),
            Some(Requested::Localhost("x".into()))
        );
        assert_eq!(requested(&p, "none").unwrap(), None);
        let e = requested(&p, "bad").unwrap_err().to_string();
        assert!(
            e.contains("container \"bad\"") && e.contains("annotations"),
            "{e}"
        );
        let e = requested(&p, "nameless").unwrap_err().to_string();
        assert!(e.contains("localhostProfile"), "{e}");

        let mut with_pod_level = p.clone();
        with_pod_level.spec.as_mut().unwrap().security_context = Some(
            serde_json::from_value(json!({"appArmorProfile": {"type": "RuntimeDefault"}})).unwrap(),
        );
        // The pod's field comes before any annotation.
        assert_eq!(
            requested(&with_pod_level, "a").unwrap(),
            Some(Requested::RuntimeDefault)
        );
    }

    /// On an AppArmor host: none and RuntimeDefault get the default profile, Localhost its
    /// loaded profile or containerd's error naming it, Unconfined and privileged nothing.
    #[test]
    fn the_profile_is_chosen_as_containerd_chooses_it() {
        let default = Some(DEFAULT_PROFILE.to_string());
        assert_eq!(profile_for(None, false, LOADED).unwrap(), default);
        assert_eq!(
            profile_for(Some(&Requested::RuntimeDefault), false, LOADED).unwrap(),
            default
        );
        assert_eq!(
            profile_for(Some(&Requested::Unconfined), false, LOADED).unwrap(),
            None
        );
        assert_eq!(
            profile_for(
                Some(&Requested::Localhost("my-profile".into())),
                false,
                LOADED
            )
            .unwrap(),
            Some("my-profile".into())
        );
        let missing =
            profile_for(Some(&Requested::Localhost("nope".into())), false, LOADED).unwrap_err();
        assert_eq!(missing.to_string(), "apparmor profile not found nope");
        for r in [
            None,
            Some(Requested::RuntimeDefault),
            Some(Requested::Unconfined),
        ] {
            assert_eq!(
                profile_for(r.as_ref(), true, LOADED).unwrap(),
                None,
                "{r:?}"
            );
        }
        // A privileged container keeps a Localhost profile it names (and its check).
        assert_eq!(
            profile_for(
                Some(&Requested::Localhost("my-profile".into())),
                true,
                LOADED
            )
            .unwrap(),
            Some("my-profile".into())
        );
        assert!(profile_for(Some(&Requested::Localhost("nope".into())), true, LOADED).is_err());
        assert!(is_loaded(LOADED, "/usr/bin/man"));
        assert!(!is_loaded(LOADED, "my"));
    }

    #[test]
    fn the_profile_reaches_the_spec_and_the_default_profile_is_named_as_loaded() {
        let (p, c) = crate::pod::spec::tests::pod(json!({"name": "c", "image": "i"}));
        let mut s = crate::pod::spec::tests::spec_of(&p, &c).unwrap();
        apply(&mut s, Some(DEFAULT_PROFILE.into()));
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["process"]["apparmorProfile"], DEFAULT_PROFILE);
        assert!(
            DEFAULT_PROFILE_TEXT.contains(&format!("profile {DEFAULT_PROFILE} ")),
            "the data file declares the profile the spec names"
        );
    }

    /// Where containerd applies no profile (`disable_apparmor`, or no AppArmor), a profile
    /// asked for is its error and nothing asked for runs as it is.
    #[test]
    fn without_apparmor_a_profile_asked_for_is_containerds_error() {
        for r in [None, Some(Requested::Unconfined)] {
            assert_eq!(profile_on_host(r.as_ref(), false, true).unwrap(), None);
        }
        for r in [Requested::RuntimeDefault, Requested::Localhost("x".into())] {
            let e = profile_on_host(Some(&r), false, true).unwrap_err();
            assert_eq!(e.to_string(), "apparmor is not supported");
        }
    }

    /// Includes whose files the host lacks are left out; the rest of the profile stays.
    #[test]
    fn includes_the_host_lacks_are_left_out() {
        let tmp = tempfile::tempdir().unwrap();
        let bare = default_profile_text(tmp.path());
        assert!(!bare.contains("#include"), "{bare}");
        assert!(bare.contains(&format!("profile {DEFAULT_PROFILE} ")));
        std::fs::create_dir_all(tmp.path().join("tunables")).unwrap();
        std::fs::write(tmp.path().join("tunables/global"), "").unwrap();
        let some = default_profile_text(tmp.path());
        assert!(some.contains("#include <tunables/global>"));
        assert!(!some.contains("#include <abstractions/base>"));
    }
}
