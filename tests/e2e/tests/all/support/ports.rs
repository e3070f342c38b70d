//! Listen ports for the processes a test or bench starts. Included by
//! `s3.rs` (which the benches include on their own), re-exported as
//! `support::ports`.

/// A port nobody listens on now, on `ip` (an address of this network
/// namespace), for a process started a moment later to listen on.
///
/// Taken from below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), never from it: a port the
/// kernel handed out for `:0` was free again once the probe closed, and a
/// worker listening on `:0` or any outgoing connection of a parallel test
/// could be given it before the process that was meant to listen on it
/// started ("Address already in use", seen in a full run). Calls in this
/// process walk the range from a start that differs per run.
///
/// # Panics
/// If no port of the range can be bound.
pub fn free_port_on(ip: &str) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let (low, high) = (10_000u32, ephemeral_low.max(10_001));
    let span = high - low;
    let start = std::process::id().wrapping_mul(7919)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = low + start.wrapping_add(n.wrapping_mul(101)) % span;
        let port = u16::try_from(port).expect("a port below 65536");
        if std::net::TcpListener::bind((ip, port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on {ip} in {low}..{high}");
}
