//! A small fault-injecting HTTP proxy for the object storage tests
//! (issue 30, docs/object-storage.md "The store failing mid-job"): it sits
//! on a loopback port between `coordhost` and a real S3 server
//! ([`super::s3::Seaweed`]) and, request by request, forwards (some after a
//! delay, some with the answer lost), answers `503 Slow Down`, or drops the
//! connection (the store "unreachable"), as the test sets it
//! ([`FaultProxy::set`]). It counts what it did, so a test can show that the
//! faults really happened.
//!
//! One request per connection: the proxy reads a request (its head and a
//! `Content-Length` body), acts, and closes the connection after the
//! answer (`Connection: close` both ways), so a change of [`Fault`] takes
//! effect at the client's very next request, pooled connections or not.
//! Plain `std` threads and sockets; no HTTP library.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Longest request head the proxy reads.
const MAX_HEAD: usize = 64 * 1024;

/// What the proxy does with the next requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward to the server.
    Pass,
    /// Answer `503 Slow Down` without asking the server.
    Unavailable,
    /// Close the connection without an answer (a store that is down).
    Drop,
    /// Answer 503 to `n` of every `m` requests (the first `n` of each
    /// `m`, counted over all requests), forward the others after `delay`;
    /// of those, every `lose_every`-th (by the same count; 0: none) is
    /// done by the server but its answer is lost (the connection closes
    /// instead): a create that happened although the client never heard.
    Flaky {
        /// Requests answered 503 out of each `m`.
        n: u64,
        /// The cycle's length.
        m: u64,
        /// Delay of the forwarded ones.
        delay: Duration,
        /// Forwarded requests whose answer is dropped: those whose count
        /// is 1 modulo this (0: none).
        lose_every: u64,
    },
}

/// What the proxy did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests forwarded to the server (delayed or not).
    pub forwarded: u64,
    /// Of those, delayed.
    pub delayed: u64,
    /// Requests answered 503.
    pub unavailable: u64,
    /// Connections dropped without an answer.
    pub dropped: u64,
    /// Requests the server answered but whose answer was dropped.
    pub lost: u64,
}

#[derive(Debug, Default)]
struct Shared {
    fault: Mutex<Option<(Fault, Option<Instant>)>>,
    requests: AtomicU64,
    forwarded: AtomicU64,
    delayed: AtomicU64,
    unavailable: AtomicU64,
    dropped: AtomicU64,
    lost: AtomicU64,
    stop: AtomicBool,
}

/// The proxy; dropping it stops accepting.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`
    /// (`host:port`).
    pub fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared::default());
        *shared.fault.lock().unwrap_or_else(PoisonError::into_inner) = Some((Fault::Pass, None));
        let accepting = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if accepting.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let shared = Arc::clone(&accepting);
                    std::thread::spawn(move || serve(conn, upstream, &shared));
                }
            })
            .expect("spawn the proxy");
        Self { addr, shared }
    }

    /// A proxy in front of `server`, and the variables a `coordhost`
    /// process needs to reach the server through it.
    pub fn in_front_of(server: &super::s3::Seaweed) -> (Self, Vec<(String, String)>) {
        let upstream = server
            .endpoint()
            .trim_start_matches("http://")
            .parse()
            .expect("the server's address");
        let proxy = Self::start(upstream);
        let mut env = server.env();
        env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
        env.push(("AWS_ENDPOINT_URL".into(), proxy.endpoint()));
        (proxy, env)
    }

    /// `http://127.0.0.1:<port>`: the endpoint to give the client.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, do `fault`; with `for_time`, only that long (then
    /// forward again).
    pub fn set(&self, fault: Fault, for_time: Option<Duration>) {
        *self
            .shared
            .fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner) =
            Some((fault, for_time.map(|d| Instant::now() + d)));
    }

    /// What the proxy did so far.
    pub fn counts(&self) -> Counts {
        let s = &self.shared;
        Counts {
            forwarded: s.forwarded.load(Ordering::SeqCst),
            delayed: s.delayed.load(Ordering::SeqCst),
            unavailable: s.unavailable.load(Ordering::SeqCst),
            dropped: s.dropped.load(Ordering::SeqCst),
            lost: s.lost.load(Ordering::SeqCst),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the stop.
        let _ = TcpStream::connect(self.addr);
    }
}

/// The fault for the request just read.
fn current(shared: &Shared) -> Fault {
    let mut guard = shared.fault.lock().unwrap_or_else(PoisonError::into_inner);
    let (fault, until) = guard.unwrap_or((Fault::Pass, None));
    if until.is_some_and(|t| Instant::now() >= t) {
        *guard = Some((Fault::Pass, None));
        return Fault::Pass;
    }
    fault
}

/// Reads one request: its head (through the blank line) and body.
fn read_request(conn: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
        let n = conn.read(&mut byte).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&byte[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    assert!(
        header("transfer-encoding").is_none(),
        "fault proxy: a chunked request body is not supported: {head}"
    );
    let len: usize = header("content-length").map_or(0, |v| v.parse().unwrap_or(0));
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = conn.read(&mut byte).ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&byte[..n]);
    }
    Some((head, body))
}

/// `head` with its `Connection` header replaced by `Connection: close`.
fn closing(head: &str) -> String {
    let mut out = String::new();
    for line in head.split("\r\n").filter(|l| !l.is_empty()) {
        if line
            .split_once(':')
            .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"))
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

fn serve(mut conn: TcpStream, upstream: SocketAddr, shared: &Shared) {
    let Some((head, body)) = read_request(&mut conn) else {
        return;
    };
    let n = shared.requests.fetch_add(1, Ordering::SeqCst);
    let (answer_503, delay, lose) = match current(shared) {
        Fault::Pass => (false, None, false),
        Fault::Unavailable => (true, None, false),
        Fault::Drop => {
            shared.dropped.fetch_add(1, Ordering::SeqCst);
            let _ = conn.shutdown(Shutdown::Both);
            return;
        }
        Fault::Flaky {
            n: bad,
            m,
            delay,
            lose_every,
        } => (
            n % m.max(1) < bad,
            Some(delay),
            lose_every > 0 && n % lose_every == 1,
        ),
    };
    if answer_503 {
        shared.unavailable.fetch_add(1, Ordering::SeqCst);
        let text = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>injected by the test's fault proxy</Message></Error>";
        let _ = write!(
            conn,
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        );
        let _ = conn.flush();
        let _ = conn.shutdown(Shutdown::Both);
        return;
    }
    if let Some(d) = delay.filter(|d| !d.is_zero()) {
        shared.delayed.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(d);
    }
    let Ok(mut server) = TcpStream::connect(upstream) else {
        let _ = conn.shutdown(Shutdown::Both);
        return;
    };
    if server.write_all(closing(&head).as_bytes()).is_err() || server.write_all(&body).is_err() {
        return;
    }
    let mut answer = Vec::new();
    if server.read_to_end(&mut answer).is_err() {
        return;
    }
    // The answer's head says `Connection: close` too, so the client never
    // sends a second request on this connection.
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(answer.len(), |at| at + 4);
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    shared.forwarded.fetch_add(1, Ordering::SeqCst);
    if lose {
        shared.lost.fetch_add(1, Ordering::SeqCst);
        let _ = conn.shutdown(Shutdown::Both);
        return;
    }
    let _ = conn.write_all(closing(&head).as_bytes());
    let _ = conn.write_all(&answer[split..]);
    let _ = conn.flush();
    let _ = conn.shutdown(Shutdown::Both);
}
