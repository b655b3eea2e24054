//! Ports for the servers a test starts.
//!
//! Binding port 0 and releasing it is not enough: the kernel hands the same port to the next
//! bind at once, so two calls in one test could return the same port (the agent's main and
//! read-only servers then collide), and the port lies in the ephemeral range, where any
//! outgoing connection on the machine may take it before the agent binds it. So ports come
//! from a range below the ephemeral one and above the control planes' (hack/cluster moves
//! 2379/6443/10250.. by offsets under 1000), each handed out once per process, starting at
//! a place set by the process id so test binaries run one after another do not reuse a port
//! a previous binary's agent may still hold.

use std::sync::atomic::{AtomicU32, Ordering};

const FIRST: u32 = 20_000;
const COUNT: u32 = 12_000;

/// A port no earlier call in this process returned, free on every address right now.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7919) % COUNT;
    for _ in 0..COUNT {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (FIRST + (start + n) % COUNT) as u16;
        // The agent binds 0.0.0.0; a listener there fails if anything holds the port.
        if std::net::TcpListener::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + COUNT);
}
