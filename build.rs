//! Links the agent as a position-dependent executable.
//!
//! The same binary runs once per container as its log writer (`kubelet-rs-cri-logger`). As a
//! PIE, its ~0.7 MB of relocated read-only data (`.data.rel.ro`: vtables, string tables) is
//! written at load time and so becomes private memory in every one of those processes; linked
//! at a fixed address the loader has nothing to relocate and those pages stay shared with the
//! file. The upstream kubelet (Go) is not a PIE either.
fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
}
