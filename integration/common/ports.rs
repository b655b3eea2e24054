//! Ports for the servers a test starts.
//!
//! Binding port 0 and releasing it is not enough: the kernel hands the same port to the next
//! bind at once, so two calls in one test could return the same port (the agent's main and
//! read-only servers then collide), and the port lies in the ephemeral range, where any
//! outgoing connection on the machine may take it before the agent binds it. So ports come
//! from a range below the ephemeral one and above the control planes' (hack/cluster moves
//! 2379/6443/10250.. by offsets under 1000), handed out in turn from one counter that every
//! test process on the machine shares (a file under the temp dir, read and advanced under an
//! exclusive lock): hack/run-tests.sh runs several test binaries at once, and a port checked
//! free by one process could otherwise be handed to another's agent before the first binds it.
//! The counter goes on across runs, so a run does not reuse a port a previous run's agent may
//! still hold either.

use std::fs::OpenOptions;
use std::io::{Read, Seek, Write};
use std::path::PathBuf;

const FIRST: u32 = 20_000;
const COUNT: u32 = 12_000;

/// The counter file: per user, so a plain `cargo test` and a root run do not fight over it.
fn counter_path() -> PathBuf {
    std::env::temp_dir().join(format!(
        "kubelet-rs-test-ports-{}",
        nix::unistd::geteuid().as_raw()
    ))
}

/// The next value of the machine-wide counter.
fn next_ticket() -> u32 {
    let path = counter_path();
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .unwrap_or_else(|e| panic!("the port counter {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("locking the port counter {}: {e}", path.display()));
    let mut text = String::new();
    file.read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("reading the port counter {}: {e}", path.display()));
    // A missing or spoilt counter starts from the process id, as the counter did before.
    let n = text
        .trim()
        .parse::<u32>()
        .unwrap_or_else(|_| std::process::id().wrapping_mul(7919));
    let next = n.wrapping_add(1) % COUNT;
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(next.to_string().as_bytes()))
        .unwrap_or_else(|e| panic!("writing the port counter {}: {e}", path.display()));
    // The lock goes with the file.
    n % COUNT
}

/// A port no earlier call on this machine returned lately (the last 12,000 calls), free on
/// every address right now.
pub fn free_port() -> u16 {
    for _ in 0..COUNT {
        let port = (FIRST + next_ticket()) as u16;
        // The agent binds 0.0.0.0; a listener there fails if anything holds the port.
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + COUNT);
}
