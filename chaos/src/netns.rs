//! Kernel partitions (N5, the `-k` scenarios): every client process runs in a network namespace
//! of its own, joined to the host's namespace by a veth pair, and a partition is a set of
//! `iptables -j DROP` rules inside that client's namespace, both directions, per master port.
//!
//! ```text
//!   host namespace                                   client namespace ferrolock-chaos-<pid>-<run>-c<k>
//!   redis-servers, resource: 127.0.0.1 + 198.19.X.1  ┌──────────────────────────────────────────┐
//!   (198.19.X.1/32 on a veth pair fc-<pid>-<run>-s0/s1) │ 198.18.X.(4k+2)/30, default via (4k+1)   │
//!   fc-<pid>-<run>-c<k>: 198.18.X.(4k+1)/30 ◄── veth ──►│ chain CHAOS (from INPUT and OUTPUT):      │
//!                                                   │  -d 198.19.X.1 --dport <master> -j DROP  │
//!                                                   │  -s 198.19.X.1 --sport <master> -j DROP  │
//!                                                   └──────────────────────────────────────────┘
//! ```
//!
//! The masters listen on 127.0.0.1 (probes and fault commands, never cut) and on the server
//! address; the fenced resource listens on the server address and is never cut. A cut rewrites
//! the client's `CHAOS` chain in one `iptables-restore --noflush` (atomic for that client).
//!
//! Everything is named with the orchestrator's pid and deleted when the [`Fabric`] is dropped,
//! and at exit (`atexit`, which `std::process::exit` runs); what a killed orchestrator left
//! behind is deleted by the next one (names whose pid is no longer alive).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Namespaces and links this process created and has not deleted yet (for the `atexit` hook).
static LIVE: Mutex<Vec<Resource>> = Mutex::new(Vec::new());

#[derive(Clone, Debug, PartialEq)]
enum Resource {
    Netns(String),
    Link(String),
}

const NS_PREFIX: &str = "ferrolock-chaos-";
const LINK_PREFIX: &str = "fc-";

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn run_stdin(args: &[&str], input: &str) -> Result<(), String> {
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(input.as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn remove(r: &Resource) {
    let _ = match r {
        Resource::Netns(n) => run(&["ip", "netns", "delete", n]),
        Resource::Link(l) => run(&["ip", "link", "delete", l]),
    };
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).retain(|x| x != r);
}

fn track(r: Resource) {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        extern "C" fn cleanup() {
            let left: Vec<Resource> = LIVE.lock().map(|v| v.clone()).unwrap_or_default();
            for r in left.iter().rev() {
                remove(r);
            }
        }
        // SAFETY: registers a plain function without arguments.
        unsafe {
            libc::atexit(cleanup);
        }
    });
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).push(r);
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 || *libc::__errno_location() != libc::ESRCH }
}

/// Delete namespaces and links that an orchestrator which no longer runs left behind.
fn sweep_stale() {
    if let Ok(list) = run(&["ip", "netns", "list"]) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            let Some(rest) = name.strip_prefix(NS_PREFIX) else { continue };
            if let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok())
                && !pid_alive(pid)
            {
                let _ = run(&["ip", "netns", "delete", name]);
            }
        }
    }
    if let Ok(list) = run(&["ip", "-o", "link", "show"]) {
        for l in list.lines() {
            let Some(name) = l.split(": ").nth(1).map(|n| n.split('@').next().unwrap_or(n)) else { continue };
            let Some(rest) = name.strip_prefix(LINK_PREFIX) else { continue };
            if let Some(pid) = rest.split('-').next().and_then(|p| i32::from_str_radix(p, 16).ok())
                && !pid_alive(pid)
            {
                let _ = run(&["ip", "link", "delete", name]);
            }
        }
    }
}

/// What the kernel variant needs and this machine lacks, if anything (one line).
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces and iptables need root)".into());
    }
    if run(&["ip", "-V"]).is_err() {
        return Some("no `ip` command (iproute2)".into());
    }
    if run(&["iptables-restore", "--version"]).is_err() {
        return Some("no `iptables-restore` (apt-get install iptables)".into());
    }
    let f = match Fabric::new() {
        Ok(f) => f,
        Err(e) => return Some(format!("cannot build a namespace fabric: {e}")),
    };
    // A namespace, its rules and a connection through its link, then everything deleted.
    let l = match std::net::TcpListener::bind((f.server_ip.as_str(), 0)) {
        Ok(l) => l,
        Err(e) => return Some(format!("cannot listen on {}: {e}", f.server_ip)),
    };
    let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
    let ns = match f.add_client() {
        Ok(ns) => ns,
        Err(e) => return Some(format!("cannot create a network namespace: {e}")),
    };
    if let Err(e) = ns.connect(&f.server_ip, port, Duration::from_millis(1000)) {
        return Some(format!("no connection from a namespace to {}: {e}", f.server_ip));
    }
    if let Err(e) = ns.set_cut(&[port]) {
        return Some(format!("iptables in a namespace: {e}"));
    }
    if ns.connect(&f.server_ip, port, Duration::from_millis(300)).is_ok() {
        return Some("an iptables DROP rule in a namespace did not stop a connection".into());
    }
    if let Err(e) = ns.set_cut(&[]) {
        return Some(format!("iptables in a namespace: {e}"));
    }
    None
}

/// The namespaces and links of one run.
#[derive(Debug)]
pub struct Fabric {
    /// Where the masters and the resource listen for the namespaced clients.
    pub server_ip: String,
    net: u8,
    tag: String,
    run: u32,
    made: Mutex<Vec<Resource>>,
    clients: Mutex<usize>,
}

impl Fabric {
    /// A fresh fabric: the server address on a veth pair of its own in the host namespace.
    /// Clients are added with [`Fabric::add_client`] (at most 63).
    pub fn new() -> Result<Fabric, String> {
        static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        sweep_stale();
        let pid = std::process::id();
        let used = run(&["ip", "-o", "-4", "addr", "show"]).unwrap_or_default();
        let net = (0..=255u32)
            .map(|i| ((pid + i * 37 + seq * 11) % 256) as u8)
            .find(|x| !used.contains(&format!("198.18.{x}.")) && !used.contains(&format!("198.19.{x}.")))
            .ok_or("no free 198.18.X.0/24 + 198.19.X.1 pair")?;
        let f = Fabric {
            server_ip: format!("198.19.{net}.1"),
            net,
            tag: format!("{LINK_PREFIX}{pid:x}-{}", std::char::from_digit(seq % 36, 36).unwrap_or('0')),
            run: seq,
            made: Mutex::new(Vec::new()),
            clients: Mutex::new(0),
        };
        let (a, b) = (format!("{}-s0", f.tag), format!("{}-s1", f.tag));
        run(&["ip", "link", "add", &a, "type", "veth", "peer", "name", &b])?;
        f.made(Resource::Link(a.clone()));
        run(&["ip", "link", "set", &a, "up"])?;
        run(&["ip", "link", "set", &b, "up"])?;
        run(&["ip", "addr", "add", &format!("{}/32", f.server_ip), "dev", &a])?;
        Ok(f)
    }

    fn made(&self, r: Resource) {
        track(r.clone());
        self.made.lock().unwrap_or_else(|p| p.into_inner()).push(r);
    }

    /// A new client namespace with its link up and an empty `CHAOS` chain.
    pub fn add_client(&self) -> Result<Arc<ClientNs>, String> {
        let k = {
            let mut n = self.clients.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        if k > 63 {
            return Err("more than 63 client namespaces".into());
        }
        let name = format!("{NS_PREFIX}{}-{}-c{k}", std::process::id(), self.run);
        let (host, peer) = (format!("{}-c{k}", self.tag), format!("{}-p{k}", self.tag));
        let (host_ip, ip) =
            (format!("198.18.{}.{}", self.net, 4 * k + 1), format!("198.18.{}.{}", self.net, 4 * k + 2));
        run(&["ip", "netns", "add", &name])?;
        self.made(Resource::Netns(name.clone()));
        run(&["ip", "link", "add", &host, "type", "veth", "peer", "name", &peer])?;
        self.made(Resource::Link(host.clone()));
        run(&["ip", "link", "set", &peer, "netns", &name])?;
        run(&["ip", "addr", "add", &format!("{host_ip}/30"), "dev", &host])?;
        run(&["ip", "link", "set", &host, "up"])?;
        run(&["ip", "-n", &name, "addr", "add", &format!("{ip}/30"), "dev", &peer])?;
        run(&["ip", "-n", &name, "link", "set", &peer, "up"])?;
        run(&["ip", "-n", &name, "link", "set", "lo", "up"])?;
        run(&["ip", "-n", &name, "route", "add", "default", "via", &host_ip])?;
        let file = File::open(format!("/run/netns/{name}")).map_err(|e| format!("/run/netns/{name}: {e}"))?;
        run_stdin(
            &["ip", "netns", "exec", &name, "iptables-restore", "-w", "--noflush"],
            "*filter\n:CHAOS - [0:0]\n-A INPUT -j CHAOS\n-A OUTPUT -j CHAOS\nCOMMIT\n",
        )?;
        Ok(Arc::new(ClientNs {
            name,
            ip,
            server_ip: self.server_ip.clone(),
            file,
            cut: Mutex::new(BTreeSet::new()),
        }))
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|p| p.into_inner()));
        // Links first (deleting the host end of a veth deletes both ends at once), then the
        // namespaces (their rules go with them).
        for r in made.iter().rev().filter(|r| matches!(r, Resource::Link(_))) {
            remove(r);
        }
        for r in made.iter().rev().filter(|r| matches!(r, Resource::Netns(_))) {
            remove(r);
        }
    }
}

/// One client's namespace.
#[derive(Debug)]
pub struct ClientNs {
    pub name: String,
    /// The client's address (its side of the veth pair).
    pub ip: String,
    server_ip: String,
    file: File,
    /// The master ports currently cut from this client.
    cut: Mutex<BTreeSet<u16>>,
}

impl ClientNs {
    /// The namespace file (`/run/netns/NAME`) for `setns(2)` in a child before `exec`.
    pub fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    /// Cut this client from exactly the server `ports` (both directions); `&[]` heals all.
    /// Returns how many packets the rules being replaced dropped (the fault's evidence), or
    /// `None` when the cut was already exactly that.
    pub fn set_cut(&self, ports: &[u16]) -> Result<Option<u64>, String> {
        let mut cut = self.cut.lock().unwrap_or_else(|p| p.into_inner());
        let want: BTreeSet<u16> = ports.iter().copied().collect();
        if *cut == want {
            return Ok(None);
        }
        let dropped = if cut.is_empty() { 0 } else { self.dropped_packets() };
        let mut rules = String::from("*filter\n:CHAOS - [0:0]\n");
        for p in &want {
            let s = &self.server_ip;
            rules.push_str(&format!("-A CHAOS -d {s}/32 -p tcp --dport {p} -j DROP\n"));
            rules.push_str(&format!("-A CHAOS -s {s}/32 -p tcp --sport {p} -j DROP\n"));
        }
        rules.push_str("COMMIT\n");
        run_stdin(&["ip", "netns", "exec", &self.name, "iptables-restore", "-w", "--noflush"], &rules)?;
        *cut = want;
        Ok(Some(dropped))
    }

    /// Packets the current `CHAOS` rules dropped (their counters).
    fn dropped_packets(&self) -> u64 {
        let out =
            run(&["ip", "netns", "exec", &self.name, "iptables", "-w", "-n", "-v", "-x", "-L", "CHAOS"])
                .unwrap_or_default();
        out.lines().skip(2).filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok()).sum()
    }

    /// The ports currently cut.
    pub fn cut_ports(&self) -> Vec<u16> {
        self.cut.lock().unwrap_or_else(|p| p.into_inner()).iter().copied().collect()
    }

    /// Connect from inside the namespace (a thread that joins it), for the self-test.
    fn connect(&self, host: &str, port: u16, timeout: Duration) -> std::io::Result<()> {
        let fd = self.fd();
        let addr: std::net::SocketAddr = format!("{host}:{port}")
            .parse()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{e}")))?;
        std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: setns on this short-lived thread only; fd is the namespace file we own.
                if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                std::net::TcpStream::connect_timeout(&addr, timeout).map(|_| ())
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("connect thread panicked")))
        })
    }
}
