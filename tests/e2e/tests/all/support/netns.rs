//! Helpers of the `workers_netns` test (issue 14, item 7): machines of
//! their own, made inside this one with Linux network namespaces.
//!
//! - [`Netns::create`] makes `n` network namespaces, each joined to a bridge
//!   of the root namespace by a veth pair, with private addresses on one
//!   `10.199.X.0/24` subnet (the bridge `.1`, namespace `i` `.10+i`); names
//!   carry the test process's id and a counter (tests of one process may hold sets at once), and the subnet is one no other test
//!   process holds (a lock file per subnet) and no interface of the root
//!   namespace uses. Dropping it deletes the namespaces, the veths and the
//!   bridge, also when the test panics.
//! - [`Netns::cut_bridge_from`] / [`Netns::heal_bridge_from`]: cut the
//!   root namespace (the coordinator, on the bridge's address) off from
//!   namespace `i` and back, with bogus neighbour entries on both sides
//!   (no iptables): the namespaces still reach each other.
//! - [`coordhost_in`]: the `coordhost` command run inside a namespace
//!   (`ip netns exec`, which execs the binary: the child's pid is the
//!   binary's, so killing the child kills `coordhost`).
//!
//! Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2's `ip`; without
//! them [`Netns::create`] fails saying so (never skips).

use std::fs::File;
use std::process::{Command, Stdio};

use super::process::{coordhost_bin, with_test_env};

/// iproute2's `ip`: `/usr/sbin/ip` when it is there, else from `PATH`.
fn ip_binary() -> &'static str {
    if std::path::Path::new("/usr/sbin/ip").is_file() {
        "/usr/sbin/ip"
    } else {
        "ip"
    }
}

/// Runs `ip ARGS`; `Err` with the command and its stderr when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new(ip_binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("`{} {}` could not run: {e}", ip_binary(), args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{} {}` failed ({}): {}",
            ip_binary(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs `ip ARGS` and panics with the command and its stderr if it fails.
fn ip_ok(args: &[&str]) {
    if let Err(e) = ip(args) {
        panic!("setting up the network namespaces: {e}");
    }
}

/// Network namespaces joined by a bridge; torn down when dropped.
#[derive(Debug)]
pub struct Netns {
    /// Third byte of the subnet `10.199.X.0/24`.
    subnet: u8,
    /// The namespaces created so far.
    names: Vec<String>,
    /// The root-namespace ends of the veth pairs created so far.
    veths: Vec<String>,
    /// The bridge, once created.
    bridge: Option<String>,
    /// Held (`flock`) while the subnet is in use by this process.
    _lock: Option<File>,
    /// `<pid><set letter>`: what this set's names carry.
    tag: String,
}

impl Netns {
    /// Creates `n` namespaces (at most 100) joined by a bridge.
    ///
    /// # Panics
    /// If `ip netns add` fails (not root, or no iproute2): one message
    /// saying what the test needs; or if a later step fails (the command and
    /// its error).
    pub fn create(n: usize) -> Self {
        assert!(n <= 100, "at most 100 namespaces");
        // Tests of one process run in parallel: each set of namespaces gets
        // a letter of its own after the pid.
        static SETS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
        let set = SETS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        assert!(set < 26, "at most 26 sets of namespaces per test process");
        let pid = format!("{}{}", std::process::id(), char::from(b'a' + set));
        let mut net = Self {
            subnet: 0,
            names: Vec::new(),
            veths: Vec::new(),
            bridge: None,
            _lock: None,
            tag: pid.clone(),
        };
        // Interface names (`chbr<pid><set>`, `chv<pid><set>x<i>`,
        // `chp<pid><set>x<i>`) stay within 15 bytes: a pid has at most 7
        // digits, the set is one letter.
        for i in 0..n {
            let name = format!("coordhost-{pid}-{i}");
            if let Err(e) = ip(&["netns", "add", &name]) {
                panic!(
                    "this test needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2 \
                     (`ip`, e.g. /usr/sbin/ip) to create network namespaces; {e}"
                );
            }
            net.names.push(name);
        }
        let (subnet, lock) = free_subnet();
        net.subnet = subnet;
        net._lock = Some(lock);
        let bridge = format!("chbr{pid}");
        ip_ok(&["link", "add", &bridge, "type", "bridge"]);
        net.bridge = Some(bridge.clone());
        ip_ok(&[
            "addr",
            "add",
            &format!("{}/24", net.bridge_ip()),
            "dev",
            &bridge,
        ]);
        ip_ok(&["link", "set", &bridge, "up"]);
        for i in 0..n {
            let ns = net.names[i].clone();
            let outer = format!("chv{pid}x{i}");
            let inner = format!("chp{pid}x{i}");
            ip_ok(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner, "netns", &ns,
            ]);
            net.veths.push(outer.clone());
            ip_ok(&["link", "set", &outer, "master", &bridge]);
            ip_ok(&["link", "set", &outer, "up"]);
            let cidr = format!("{}/24", net.ip(i));
            ip_ok(&["-n", &ns, "addr", "add", &cidr, "dev", &inner]);
            ip_ok(&["-n", &ns, "link", "set", &inner, "up"]);
            ip_ok(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        net.wait_until_each_reaches_the_bridge();
        net
    }

    /// Waits until a TCP connection from inside every namespace reaches a
    /// listener on the bridge's address. A new veth's carrier and its
    /// bridge port come up asynchronously (the kernel's link watch may
    /// defer the change by up to a second, longer on a loaded machine):
    /// until then frames and the ARP request are dropped, and a process
    /// started at once (a coordinator's first etcd request with a 2 s
    /// connect timeout) can time out. Tries every 200 ms per namespace
    /// (`bash`'s `/dev/tcp`, under `timeout 2`), for at most 30 s.
    ///
    /// # Panics
    /// If a namespace still cannot connect after 30 s (the namespace and
    /// the last error).
    fn wait_until_each_reaches_the_bridge(&self) {
        let listener = std::net::TcpListener::bind((self.bridge_ip().as_str(), 0))
            .unwrap_or_else(|e| panic!("listening on the bridge {}: {e}", self.bridge_ip()));
        let port = listener.local_addr().expect("listener address").port();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let script = format!("exec 3<>/dev/tcp/{}/{port}", self.bridge_ip());
        for name in &self.names {
            for tries in 1.. {
                let out = Command::new(ip_binary())
                    .args(["netns", "exec", name, "timeout", "2", "bash", "-c", &script])
                    .stdin(Stdio::null())
                    .output()
                    .expect("run `ip netns exec ... bash`");
                if out.status.success() {
                    if tries > 1 {
                        eprintln!("namespace {name} reached the bridge at try {tries}");
                    }
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "namespace {name} cannot reach {}:{port} on the bridge after 30 s ({}): {}\n{}",
                    self.bridge_ip(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim(),
                    self.links_and_neighbours(name)
                );
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
        // Connections the backlog took are dropped with the listener.
        drop(listener);
    }

    /// What `ip` says of namespace `name`'s links and neighbours and of the
    /// bridge's ports: for the message of a namespace that cannot reach the
    /// bridge.
    fn links_and_neighbours(&self, name: &str) -> String {
        describe(&self.bridge.clone().unwrap_or_default(), &[name.to_owned()])
    }

    /// A function that says what `ip` shows of every namespace's links and
    /// neighbours and of the bridge's ports when it is called (for a test's
    /// failure message: the state at the failure).
    pub fn describer(&self) -> impl Fn() -> String + 'static {
        let bridge = self.bridge.clone().unwrap_or_default();
        let names = self.names.clone();
        move || describe(&bridge, &names)
    }

    /// The bridge's address (in the root namespace).
    pub fn bridge_ip(&self) -> String {
        format!("10.199.{}.1", self.subnet)
    }

    /// Namespace `i`'s address.
    pub fn ip(&self, i: usize) -> String {
        format!("10.199.{}.{}", self.subnet, 10 + i)
    }

    /// Namespace `i`'s name.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Cuts the root namespace off from namespace `i` (both ways) while
    /// the namespaces still reach each other: each side's neighbour entry
    /// for the other's address is replaced by a permanent one naming a MAC
    /// address no interface has, so frames between the two are dropped by
    /// the bridge's ports (nothing is refused: a connection just hangs).
    ///
    /// # Panics
    /// If `ip neigh replace` fails.
    pub fn cut_bridge_from(&self, i: usize) {
        let bridge = self.bridge.clone().expect("the bridge exists");
        let inner = format!("chp{}x{i}", self.tag);
        ip_ok(&[
            "neigh",
            "replace",
            &self.ip(i),
            "lladdr",
            BOGUS_MAC,
            "dev",
            &bridge,
            "nud",
            "permanent",
        ]);
        ip_ok(&[
            "-n",
            &self.names[i],
            "neigh",
            "replace",
            &self.bridge_ip(),
            "lladdr",
            BOGUS_MAC,
            "dev",
            &inner,
            "nud",
            "permanent",
        ]);
    }

    /// Undoes [`Netns::cut_bridge_from`]: the bogus neighbour entries are
    /// deleted, and the next packets resolve the real addresses again.
    ///
    /// # Panics
    /// If `ip neigh del` fails.
    pub fn heal_bridge_from(&self, i: usize) {
        let bridge = self.bridge.clone().expect("the bridge exists");
        let inner = format!("chp{}x{i}", self.tag);
        ip_ok(&["neigh", "del", &self.ip(i), "dev", &bridge]);
        ip_ok(&[
            "-n",
            &self.names[i],
            "neigh",
            "del",
            &self.bridge_ip(),
            "dev",
            &inner,
        ]);
    }

    /// The interface of namespace `i` (its end of the veth pair).
    fn inner(&self, i: usize) -> String {
        format!("chp{}x{i}", self.tag)
    }

    /// Cuts what namespace `i` sends to `ip` (an address on the bridge:
    /// another namespace's, or the bridge's own) without a firewall: a
    /// permanent neighbour entry with a MAC nobody has, so its frames to
    /// `ip` go nowhere. Nothing answers a refusal: TCP to `ip` stalls as on
    /// a cut cable. One direction; cut both to isolate two namespaces.
    ///
    /// # Panics
    /// If `ip neigh replace` fails.
    pub fn cut(&self, i: usize, ip: &str) {
        ip_ok(&[
            "-n",
            self.name(i),
            "neigh",
            "replace",
            ip,
            "lladdr",
            "00:00:00:00:00:01",
            "nud",
            "permanent",
            "dev",
            &self.inner(i),
        ]);
    }

    /// Undoes [`Netns::cut`]: the entry is deleted and ARP finds `ip` again.
    ///
    /// # Panics
    /// If `ip neigh del` fails.
    pub fn heal(&self, i: usize, ip: &str) {
        ip_ok(&[
            "-n",
            self.name(i),
            "neigh",
            "del",
            ip,
            "dev",
            &self.inner(i),
        ]);
    }
}

/// A locally administered unicast MAC address no interface here has.
const BOGUS_MAC: &str = "02:00:00:c0:ff:ee";

/// A subnet `10.199.X.0/24` that no other process running this helper holds
/// (an exclusive `flock` on a file per subnet, released when the process
/// dies) and that no address of the root namespace is in.
fn free_subnet() -> (u8, File) {
    let used = Command::new(ip_binary())
        .args(["-o", "-4", "addr", "show"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let start = std::process::id() % 200;
    for k in 0..200 {
        let x = (20 + (start + k) % 200) as u8;
        if used.contains(&format!("10.199.{x}.")) {
            continue;
        }
        let path = std::env::temp_dir().join(format!("coordhost-netns-10.199.{x}.lock"));
        let Ok(file) = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        else {
            continue;
        };
        if file.try_lock().is_ok() {
            return (x, file);
        }
    }
    panic!("no free subnet 10.199.20-219.0/24 for the network namespaces");
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace destroys the veth end inside it and so its
        // peer; the explicit delete covers a peer still being torn down.
        for name in &self.names {
            let _ = ip(&["netns", "delete", name]);
        }
        for veth in &self.veths {
            let _ = ip(&["link", "delete", veth]);
        }
        if let Some(bridge) = &self.bridge {
            let _ = ip(&["link", "delete", bridge]);
        }
    }
}

/// What `ip` shows of the links and neighbours of namespaces `names` and
/// of `bridge` and its ports.
fn describe(bridge: &str, names: &[String]) -> String {
    let mut commands: Vec<Vec<&str>> = Vec::new();
    for name in names {
        commands.push(vec!["-n", name, "-d", "link"]);
        commands.push(vec!["-n", name, "neigh"]);
    }
    commands.push(vec!["-d", "link", "show", "master", bridge]);
    commands.push(vec!["-d", "link", "show", bridge]);
    commands.push(vec!["neigh", "show", "dev", bridge]);
    commands
        .iter()
        .map(|args| {
            let out = Command::new(ip_binary())
                .args(args)
                .stdin(Stdio::null())
                .output();
            let text = out.map_or_else(
                |e| e.to_string(),
                |o| String::from_utf8_lossy(&o.stdout).into_owned(),
            );
            format!("\n--- ip {} ---\n{text}", args.join(" "))
        })
        .collect()
}

/// The `coordhost` binary run inside namespace `ns`, as
/// [`super::coordhost`] runs it (in [`with_test_env`]).
pub fn coordhost_in(ns: &str) -> Command {
    let mut c = Command::new(ip_binary());
    c.args(["netns", "exec", ns]).arg(coordhost_bin());
    with_test_env(&mut c);
    c
}
