//! `kubernetes_build_info`, which upstream's kubelet serves on /metrics (component-base's
//! version collector): a constant 1 labelled with the build. The agent reports the version
//! it announces in its Node status; the Go toolchain labels are left empty (there is none),
//! the compiler says rustc.

use std::sync::Arc;

use super::{Registry, Scalar, Stability};
use crate::vocabulary::version::KUBELET_VERSION;

pub(super) fn register(registry: &Registry) {
    let info = registry.register(Arc::new(Scalar::gauge(
        "kubernetes_build_info",
        "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
        Stability::Alpha,
        &[
            "major",
            "minor",
            "git_version",
            "git_commit",
            "git_tree_state",
            "build_date",
            "go_version",
            "compiler",
            "platform",
        ],
    )));
    let (major, minor) = major_minor(KUBELET_VERSION);
    let platform = platform();
    info.set(
        &[
            major,
            minor,
            KUBELET_VERSION,
            "",
            "",
            "",
            "",
            "rustc",
            &platform,
        ],
        1.0,
    );
}

/// "1" and "34" of "v1.34.4+kubelet-rs.0.1.0".
fn major_minor(version: &str) -> (&str, &str) {
    let mut parts = version.trim_start_matches('v').split(['.', '+', '-']);
    (parts.next().unwrap_or(""), parts.next().unwrap_or(""))
}

/// Go's `GOOS/GOARCH` spelling of the target (`linux/amd64`, `linux/arm64`).
fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_splits_as_upstreams_major_and_minor() {
        assert_eq!(major_minor("v1.34.4+kubelet-rs.0.1.0"), ("1", "34"));
        assert!(platform().starts_with("linux/"));
        let text = crate::metrics::registry().gather();
        let line = text
            .lines()
            .find(|l| l.starts_with("kubernetes_build_info{"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(line.contains("major=\"1\",minor=\"34\""), "{line}");
        assert!(
            line.contains(&format!("git_version=\"{KUBELET_VERSION}\"")),
            "{line}"
        );
        assert!(line.ends_with("} 1"), "{line}");
    }
}
