#![allow(dead_code)]
//! Shared helpers for the core's integration tests (real servers, never mocks).

pub mod cluster;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolock::{Client, ClientOptions, Lock};
pub use ferrolock_testkit::RedisServer;

/// A task waiting for a lock: when it returned, and what.
pub type Waiter = tokio::task::JoinHandle<(Instant, ferrolock::Result<ferrolock::Guard>)>;

/// Release `g`, which `waiter` waits behind: the waiter must get the lock well before any lease
/// bound (woken by the release's message), and its hold is released too.
pub async fn release_wakes(g: ferrolock::Guard, waiter: Waiter) {
    let released = Instant::now();
    g.release().await.unwrap();
    let (at, r) = waiter.await.unwrap();
    r.expect("the waiter gets the lock").release().await.unwrap();
    let took = at.duration_since(released);
    assert!(took < Duration::from_secs(3), "the waiter got the free lock {took:?} after its release");
}

pub async fn connect(server: &RedisServer) -> Client {
    connect_with(server, ClientOptions::default()).await
}

pub async fn connect_with(server: &RedisServer, opts: ClientOptions) -> Client {
    Client::connect(&server.url(), opts).await.expect("connect")
}

/// The harness's own connection for the resource the lock guards (read-modify-write counters).
/// No response timeout: on a loaded machine (test binaries run side by side) a reply can take
/// longer than redis-rs's default 500 ms, and that is not what these tests are about.
pub async fn data_conn(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    let c = redis::Client::open(server.url()).unwrap();
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    c.get_multiplexed_async_connection_with_config(&config).await.unwrap()
}

/// `holder` takes `{prefix}-0` … `{prefix}-4` (30 s leases, returned), and a waiter of `client`
/// on each gives up after `wait`: `client` stays subscribed to five release channels that nobody
/// waits on, until its sweep unsubscribes them after `subscription_linger`.
pub async fn idle_release_channels(
    holder: &Client,
    client: &Client,
    prefix: &str,
    wait: Duration,
) -> Vec<ferrolock::Guard> {
    let mut held = Vec::new();
    for i in 0..5 {
        let name = format!("{prefix}-{i}");
        let lock = holder.lock(&name, ferrolock::LockOptions::lease(Duration::from_secs(30))).unwrap();
        held.push(lock.acquire(Some(Duration::ZERO)).await.unwrap());
        let waiter = client.lock(&name, ferrolock::LockOptions::default()).unwrap();
        let e = waiter.acquire(Some(wait)).await.unwrap_err();
        assert_eq!(e.kind(), ferrolock::ErrorKind::AcquireTimeout);
    }
    held
}

/// Waits (at most 5 s) until `client`'s notifier and watchdog tables are empty: the sweep's
/// UNSUBSCRIBE replies are applied by their own tasks, after the server has run them.
pub async fn tables_emptied(client: &Client) {
    let t0 = Instant::now();
    while client.table_sizes_for_tests() != (0, 0, 0) {
        assert!(t0.elapsed() < Duration::from_secs(5), "tables left: {:?}", client.table_sizes_for_tests());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The lock release channels `server` has subscribers for.
pub fn release_channels(server: &RedisServer) -> Vec<String> {
    server.cmd(&["PUBSUB", "CHANNELS", "ferrolock:*"])
}

/// What [`churn`] workers count, and their stop flag.
#[derive(Clone, Default)]
pub struct Churn {
    pub done: Arc<AtomicU64>,
    pub errors: Arc<AtomicU64>,
    pub stop: Arc<AtomicBool>,
}

/// Acquire `lock` (waiting up to `wait`), hold it for `hold`, release, until `c.stop`: each
/// release counted in `c.done`, every error printed and counted in `c.errors` (the tests of
/// faults that users must not see).
pub async fn churn(lock: Lock, wait: Duration, hold: Duration, c: Churn) {
    while !c.stop.load(Ordering::SeqCst) {
        let tally = match lock.acquire(Some(wait)).await {
            Ok(g) => {
                tokio::time::sleep(hold).await;
                match g.release().await {
                    Ok(()) => &c.done,
                    Err(e) => {
                        eprintln!("release: {e}");
                        &c.errors
                    }
                }
            }
            Err(e) => {
                eprintln!("acquire: {e}");
                &c.errors
            }
        };
        tally.fetch_add(1, Ordering::SeqCst);
    }
}

pub fn fast_opts() -> ClientOptions {
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(200);
    o
}

pub fn evalsha_calls(server: &RedisServer) -> u64 {
    server.command_calls().get("evalsha").copied().unwrap_or(0)
}

/// Commands clients sent (commands run inside scripts are counted by Redis too; leave them out).
pub fn client_calls(server: &RedisServer) -> u64 {
    const CLIENT_SENT: &[&str] = &["evalsha", "eval", "script|load", "subscribe", "unsubscribe", "ping"];
    let stats = server.command_calls();
    CLIENT_SENT.iter().map(|k| stats.get(*k).copied().unwrap_or(0)).sum()
}

/// Every command the server runs, as `MONITOR` prints it, with the instant it was read (a
/// background thread reads them).
pub struct Monitor {
    pub lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Monitor {
    pub fn start(server: &RedisServer) -> Monitor {
        let mut s = TcpStream::connect(("127.0.0.1", server.port())).expect("monitor connection");
        s.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(s);
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim(), "+OK");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                sink.lock().unwrap().push((Instant::now(), line));
            }
        });
        Monitor { lines }
    }
}

/// A proxy's connection to the server on `port` for its accepted `client`, both without Nagle.
fn upstream_for(client: &TcpStream, port: u16) -> Option<TcpStream> {
    let upstream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
    Some(upstream)
}

/// Copies what arrives on `from` to `to` on a thread of its own; when `from` ends (or `to`
/// fails), shuts `to` down (`how`).
fn pump(from: &TcpStream, to: &TcpStream, how: std::net::Shutdown) {
    let (mut from, mut to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(how);
    });
}

/// A TCP proxy on a free loopback port to `server`: what the client sends on its connection
/// number `held_conn` (0-based, in accept order) is held back while [`HoldProxy::hold`] is on,
/// then delivered in order; everything else flows. A slow or lossy path on that one connection:
/// two TCP connections have no order between them, which pausing the server cannot show (it
/// runs what both delivered in arrival order).
pub struct HoldProxy {
    pub url: String,
    hold: Arc<std::sync::atomic::AtomicBool>,
}

impl HoldProxy {
    pub fn start(server: &RedisServer, held_conn: usize) -> HoldProxy {
        use std::io::Read;
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let hold = Arc::new(AtomicBool::new(false));
        let (h, target) = (hold.clone(), server.port());
        std::thread::spawn(move || {
            for (idx, c) in listener.incoming().enumerate() {
                let Ok(client) = c else { return };
                let Some(upstream) = upstream_for(&client, target) else { return };
                pump(&upstream, &client, std::net::Shutdown::Write);
                let (mut from_client, mut to_server, hold) = (client, upstream, h.clone());
                std::thread::spawn(move || {
                    from_client.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
                    let (mut pending, mut buf) = (Vec::new(), [0u8; 16384]);
                    loop {
                        match from_client.read(&mut buf) {
                            Ok(0) => break,
                            Ok(k) => pending.extend_from_slice(&buf[..k]),
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                ) => {}
                            Err(_) => break,
                        }
                        let held = idx == held_conn && hold.load(Ordering::SeqCst);
                        if !held && !pending.is_empty() {
                            if to_server.write_all(&pending).is_err() {
                                break;
                            }
                            pending.clear();
                        }
                    }
                    let _ = to_server.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        HoldProxy { url, hold }
    }

    pub fn hold(&self, on: bool) {
        self.hold.store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A TCP proxy on a free loopback port to `server` that can be cut: [`CutProxy::cut`] closes
/// every connection it carries and fills its accept queue, so that from then on a connect to it
/// gets no answer at all (a server gone behind a firewall: a reconnect waits out its timeout).
pub struct CutProxy {
    pub url: String,
    addr: std::net::SocketAddr,
    cut: Arc<std::sync::atomic::AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl CutProxy {
    pub fn start(server: &RedisServer) -> CutProxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (cut, open) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
        let (c, o, target) = (cut.clone(), open.clone(), server.port());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if c.load(Ordering::SeqCst) {
                    // Accept no more (the listener stays open): the queue fills up.
                    let _kept = (client, listener);
                    loop {
                        std::thread::park();
                    }
                }
                let Ok(client) = client else { return };
                let Some(upstream) = upstream_for(&client, target) else { return };
                pump(&client, &upstream, std::net::Shutdown::Both);
                pump(&upstream, &client, std::net::Shutdown::Both);
                o.lock().unwrap().extend([client, upstream]);
            }
        });
        CutProxy { url: format!("redis://{addr}"), addr, cut, open }
    }

    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        for s in open.drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // Connects complete (into the accept queue) until it is full; after that the kernel
        // drops their SYNs, and a connect hangs.
        for n in 0.. {
            assert!(n < 10_000, "the accept queue never filled up");
            match TcpStream::connect_timeout(&self.addr, Duration::from_millis(300)) {
                Ok(s) => open.push(s),
                Err(_) => break,
            }
        }
    }
}

/// Options that outlast a server held back for most of a second: a reply delayed by
/// `CLIENT PAUSE` is slow, not failed.
pub fn patient_opts() -> ClientOptions {
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_secs(3);
    o.redlock_node_timeout = Duration::from_secs(2);
    o
}

/// Hold back every client's commands on each server for `ms` (`CLIENT PAUSE … ALL`).
pub fn pause_all(servers: &[&RedisServer], ms: u64) {
    for s in servers {
        let _: () = s.cmd(&["CLIENT", "PAUSE", &ms.to_string(), "ALL"]);
    }
}

/// DESIGN §4: validity runs from a timestamp taken before the request is sent, so the time a
/// delayed reply took is gone from it. (A check against the servers' PTTL cannot tell: each
/// server's lease also starts only when its script runs.)
pub async fn check_validity_counts_from_the_send(client: &Client, servers: &[&RedisServer]) {
    let lease = Duration::from_millis(3000);
    let lock = client.lock("validity-from-send", ferrolock::LockOptions::lease(lease)).unwrap();
    pause_all(servers, 600);
    let t0 = Instant::now();
    let g = lock.acquire(Some(Duration::from_secs(5))).await.unwrap();
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(500), "control: the pause did not delay the grant ({took:?})");
    let left = g.remaining();
    assert!(
        left <= lease - took + Duration::from_millis(5),
        "remaining {left:?} after a grant that took {took:?}"
    );
    g.release().await.unwrap();
}

/// DESIGN §4: a grant whose validity is used up by the time its reply arrives is never returned
/// as success.
pub async fn check_a_spent_grant_is_not_returned(client: &Client, servers: &[&RedisServer]) {
    let lock = client.lock("spent-grant", ferrolock::LockOptions::lease(Duration::from_millis(300))).unwrap();
    pause_all(servers, 600);
    match lock.acquire(Some(Duration::ZERO)).await {
        Ok(g) => {
            panic!("a grant whose validity was used up was returned: {:?}, {:?}", g.state(), g.remaining())
        }
        Err(e) => assert!(
            matches!(e.kind(), ferrolock::ErrorKind::AcquireTimeout | ferrolock::ErrorKind::QuorumNotReached),
            "{e}"
        ),
    }
}
