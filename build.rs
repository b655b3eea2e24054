//! Links the agent as a position-dependent executable, and compiles the protocol files of
//! `proto/` (the CSI node and identity services, the kubelet's plugin registration API).
//!
//! The same binary runs once per container as its log writer (`kubelet-rs-cri-logger`). As a
//! PIE, its ~0.7 MB of relocated read-only data (`.data.rel.ro`: vtables, string tables) is
//! written at load time and so becomes private memory in every one of those processes; linked
//! at a fixed address the loader has nothing to relocate and those pages stay shared with the
//! file. The upstream kubelet (Go) is not a PIE either.
fn main() -> std::io::Result<()> {
    println!("cargo:rustc-link-arg-bins=-no-pie");
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        // Servers too: the unit tests stand in for a plugin and a driver with them.
        .build_server(true)
        // Stage and publish requests carry the volume's secrets: never in a Debug string.
        .skip_debug([
            "csi.v1.NodeStageVolumeRequest",
            "csi.v1.NodePublishVolumeRequest",
        ])
        .compile_protos(
            &["proto/csi.proto", "proto/pluginregistration.proto"],
            &["proto"],
        )
}
