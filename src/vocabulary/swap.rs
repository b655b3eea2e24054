//! What a container gets for swap, decided by the container manager (`cm::swap`) and
//! written into the OCI spec by the runtime.

/// What a container's cgroup says about swap (upstream's swap configuration helper).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContainerSwap {
    /// No swap controller: nothing is set (the runtime's default).
    #[default]
    Unmanaged,
    /// NoSwap on cgroup v1: memory+swap limited to the memory limit.
    NoSwapV1,
    /// NoSwap on cgroup v2: memory.swap.max = 0.
    NoSwapV2,
}
