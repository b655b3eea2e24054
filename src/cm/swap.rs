//! Swap, as upstream's container manager checks it at start: with failSwapOn (the default)
//! the agent refuses to start while /proc/swaps lists any swap area; with it off, the agent
//! runs and memorySwap.swapBehavior decides what containers may swap (`pod::spec`).

use std::path::Path;

use crate::cgroups::Version;
use crate::config::SwapBehavior;
use crate::vocabulary::swap::ContainerSwap;

/// Where the kernel lists the active swap areas.
pub const PROC_SWAPS: &str = "/proc/swaps";

#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// Upstream's wording, with the file's lines as Go prints a string slice.
    #[error(
        "running with swap on is not supported, please disable swap! or set --fail-swap-on \
         flag to false. {path} contained: [{}]",
        lines.join(" ")
    )]
    SwapOn { path: String, lines: Vec<String> },
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Whether the text of /proc/swaps lists a swap area: more than its header line.
fn swap_lines(text: &str) -> Option<Vec<String>> {
    let lines: Vec<String> = text.trim().lines().map(str::to_string).collect();
    (lines.len() > 1).then_some(lines)
}

/// Upstream's start-up check on the file's text (None: the file does not exist, which
/// upstream takes as swap off).
pub fn validate(swaps: Option<&str>, fail_swap_on: bool, path: &str) -> Result<(), SwapError> {
    if !fail_swap_on {
        return Ok(());
    }
    match swaps.and_then(swap_lines) {
        Some(lines) => Err(SwapError::SwapOn {
            path: path.to_string(),
            lines,
        }),
        None => Ok(()),
    }
}

/// The check against the node's /proc/swaps.
pub fn check_node(fail_swap_on: bool) -> Result<(), SwapError> {
    if !fail_swap_on {
        return Ok(());
    }
    let text = match std::fs::read_to_string(Path::new(PROC_SWAPS)) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(
                path = PROC_SWAPS,
                "file does not exist, assuming swap is off"
            );
            None
        }
        Err(source) => {
            return Err(SwapError::Read {
                path: PROC_SWAPS.to_string(),
                source,
            })
        }
    };
    validate(text.as_deref(), fail_swap_on, PROC_SWAPS)
}

/// What containers get for swap (upstream's configureContainerSwapResources): nothing
/// without a swap controller; otherwise NoSwap, which upstream also applies for
/// LimitedSwap to every container it does not give swap to. LimitedSwap's share of swap
/// for Burstable containers (their memory request over the node's memory, times the
/// node's swap) is not implemented: those containers get NoSwap too.
pub(crate) fn container_swap(
    available: bool,
    version: Version,
    behavior: SwapBehavior,
) -> ContainerSwap {
    if !available {
        return ContainerSwap::Unmanaged;
    }
    if behavior == SwapBehavior::LimitedSwap {
        tracing::warn!(
            "memorySwap.swapBehavior LimitedSwap is not implemented: containers get NoSwap"
        );
    }
    match version {
        Version::V1 => ContainerSwap::NoSwapV1,
        Version::V2 => ContainerSwap::NoSwapV2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_get_no_swap_wherever_a_swap_controller_exists() {
        assert_eq!(
            container_swap(false, Version::V2, SwapBehavior::NoSwap),
            ContainerSwap::Unmanaged
        );
        assert_eq!(
            container_swap(true, Version::V2, SwapBehavior::NoSwap),
            ContainerSwap::NoSwapV2
        );
        assert_eq!(
            container_swap(true, Version::V1, SwapBehavior::LimitedSwap),
            ContainerSwap::NoSwapV1
        );
    }

    const HEADER: &str =
        "Filename                                Type            Size            Used            Priority\n";

    #[test]
    fn swap_on_refuses_the_start_only_with_fail_swap_on() {
        let on = format!(
            "{HEADER}/dev/dm-1                               partition       16760828        0               -2\n"
        );
        let err = validate(Some(&on), true, PROC_SWAPS).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(
                "running with swap on is not supported, please disable swap! or set \
                 --fail-swap-on flag to false. /proc/swaps contained: [Filename"
            ),
            "{text}"
        );
        assert!(text.contains("/dev/dm-1"), "{text}");
        assert!(
            validate(Some(&on), false, PROC_SWAPS).is_ok(),
            "failSwapOn false runs"
        );
    }

    #[test]
    fn a_header_alone_or_no_file_is_swap_off() {
        assert!(validate(Some(HEADER), true, PROC_SWAPS).is_ok());
        assert!(validate(Some(&format!("\n{HEADER}\n\n")), true, PROC_SWAPS).is_ok());
        assert!(validate(None, true, PROC_SWAPS).is_ok());
        assert!(validate(Some(""), true, PROC_SWAPS).is_ok());
    }
}
