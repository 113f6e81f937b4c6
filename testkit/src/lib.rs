//! Real `redis-server` processes for tests: free loopback ports, pid files, fault injection
//! (SIGSTOP/SIGCONT, kill -9, restart), and guaranteed cleanup.
//!
//! Every server is a child of the test process, stopped by its pid in `Drop` (also when the test
//! panics), and asked by the kernel to die with the thread that started it (`PR_SET_PDEATHSIG`),
//! so an aborted test run leaves nothing behind. Never kill servers by name.

use std::collections::HashMap;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `redis-server` child process on 127.0.0.1.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// Sentinel mode: the config file's contents (written once; Sentinel rewrites it).
    sentinel_conf: Option<String>,
}

/// An argument that stands for "a free loopback port": each start attempt replaces it with a
/// fresh one, like the main port. A port picked once and kept across attempts could be the one
/// that made the attempt fail (taken meanwhile, e.g. as the local port of a connection to another
/// node), and every retry would fail the same way.
const FREE_PORT: &str = "{free-port}";

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

impl RedisServer {
    /// Start a server with no persistence.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Start a server with extra `redis-server` arguments (e.g. `["--appendonly", "yes"]`).
    ///
    /// With `--requirepass PW` among them, the harness's own connections (readiness, [`Self::cmd`])
    /// authenticate with `PW`; [`Self::url`] stays without it.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        Self::start_inner(extra, None)
    }

    /// Start a Sentinel (`redis-server <conf> --sentinel`) that monitors `master` under `name`
    /// with `quorum`, `down-after-milliseconds` 1000 and `failover-timeout` 10000.
    pub fn start_sentinel(master: &RedisServer, name: &str, quorum: u32) -> RedisServer {
        Self::start_sentinel_with(master, name, quorum, &[])
    }

    /// [`RedisServer::start_sentinel`] with more arguments (e.g. `--requirepass PW`, which the
    /// harness's own connections then use, as with [`RedisServer::start_with`]).
    pub fn start_sentinel_with(master: &RedisServer, name: &str, quorum: u32, extra: &[&str]) -> RedisServer {
        let conf = format!(
            "sentinel monitor {name} 127.0.0.1 {} {quorum}\n\
             sentinel down-after-milliseconds {name} 1000\n\
             sentinel failover-timeout {name} 10000\n",
            master.port
        );
        Self::start_inner(extra, Some(conf))
    }

    fn start_inner(extra: &[&str], sentinel_conf: Option<String>) -> RedisServer {
        for _ in 0..20 {
            let port = free_port();
            let extra: Vec<String> = extra
                .iter()
                .map(|a| if *a == FREE_PORT { free_port().to_string() } else { a.to_string() })
                .collect();
            let dir = std::env::temp_dir().join(format!("ferrolock-redis-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create server dir");
            let mut s = RedisServer { child: None, port, dir, extra, sentinel_conf: sentinel_conf.clone() };
            if s.spawn() {
                return s;
            }
        }
        panic!("could not start redis-server on a free port after 20 tries");
    }

    fn spawn(&mut self) -> bool {
        let mut cmd = Command::new("redis-server");
        if let Some(conf) = &self.sentinel_conf {
            let path = self.dir.join("sentinel.conf");
            if !path.exists() {
                std::fs::write(&path, conf).expect("write sentinel.conf");
            }
            cmd.arg(&path).arg("--sentinel");
        }
        cmd.args([
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&self.dir)
        .args(["--pidfile", &format!("{}/redis.pid", self.dir.display())])
        .args(["--enable-debug-command", "local", "--protected-mode", "no", "--daemonize", "no"])
        .args(["--loglevel", "warning"])
        .args(&self.extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
        // SAFETY: prctl is async-signal-safe and touches only the child's own state.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => panic!("cannot run redis-server (is it installed and on PATH?): {e}"),
        };
        let pid = child.id();
        self.child = Some(child);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None; // exited: port taken
                return false;
            }
            if self.answers_as(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill9();
        false
    }

    /// Whether the server on the port is process `pid`: ours, not one that already had the port
    /// (ours then fails to bind and exits, but a look in between would find the other).
    fn answers_as(&self, pid: u32) -> bool {
        redis::Client::open(self.admin_url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| redis::cmd("INFO").arg("server").query::<String>(&mut c))
            .is_ok_and(|info| info.lines().any(|l| l.trim_end() == format!("process_id:{pid}")))
    }

    /// The plain-text URL with the `--requirepass` password, if any, for the harness's own use.
    fn admin_url(&self) -> String {
        let pass = self.extra.iter().position(|a| a == "--requirepass").and_then(|i| self.extra.get(i + 1));
        match pass {
            Some(p) => {
                let p: String = p
                    .bytes()
                    .map(|b| match b {
                        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                            (b as char).to_string()
                        }
                        _ => format!("%{b:02X}"),
                    })
                    .collect();
                format!("redis://:{p}@127.0.0.1:{}", self.port)
            }
            None => self.url(),
        }
    }

    /// Start a server that also listens for TLS on a second port ([`Self::tls_port`]) with the
    /// server certificate of `certs`, trusting `certs`' CA for client certificates (optional
    /// unless `extra` says `--tls-auth-clients yes`). The plain port stays open for the harness.
    pub fn start_tls(certs: &TlsCerts, extra: &[&str]) -> RedisServer {
        let mut args = tls_server_args(certs, FREE_PORT);
        args.extend_from_slice(extra);
        Self::start_with(&args)
    }

    /// A Sentinel that serves TLS on a second port ([`Self::tls_port`], certificates as in
    /// [`Self::start_tls`]) and monitors `name` at `host:port` (a TLS port) over TLS
    /// (`tls-replication yes`, which Sentinel uses for every link: masters, replicas, other
    /// sentinels) with the client certificate of `certs`. `host` may be a host name
    /// (`resolve-hostnames yes`); with `announce_hostnames` the sentinel reports masters and
    /// replicas by the names they were given or announce (`replica-announce-ip`) rather than by
    /// IP. The plain port stays open for the harness; timings as in [`Self::start_sentinel`].
    pub fn start_tls_sentinel(
        certs: &TlsCerts,
        (host, port): (&str, u16),
        name: &str,
        quorum: u32,
        announce_hostnames: bool,
    ) -> RedisServer {
        let announce = if announce_hostnames { "yes" } else { "no" };
        let conf = format!(
            "sentinel resolve-hostnames yes\n\
             sentinel announce-hostnames {announce}\n\
             sentinel monitor {name} {host} {port} {quorum}\n\
             sentinel down-after-milliseconds {name} 1000\n\
             sentinel failover-timeout {name} 10000\n"
        );
        let mut args = tls_server_args(certs, FREE_PORT);
        args.extend(tls_peer_args(certs));
        Self::start_inner(&args, Some(conf))
    }

    /// The TLS port of a server made by [`Self::start_tls`].
    pub fn tls_port(&self) -> Option<u16> {
        let i = self.extra.iter().position(|a| a == "--tls-port")?;
        self.extra.get(i + 1)?.parse().ok()
    }

    /// Start a replica of `master` (plus `extra` arguments) and wait until its replication link
    /// is up, i.e. the initial sync is done. Panics after 10 s.
    pub fn start_replica_of(master: &RedisServer, extra: &[&str]) -> RedisServer {
        let port = master.port.to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", port.as_str()];
        args.extend_from_slice(extra);
        let replica = Self::start_with(&args);
        replica.wait_for(Duration::from_secs(10), "the replication link to come up", |s| {
            s.info_field("replication", "master_link_status").as_deref() == Some("up")
        });
        replica
    }

    /// One `field:value` line of `INFO <section>` (e.g. `("replication", "role")`).
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let mut c = self.conn().ok()?;
        let info: String = redis::cmd("INFO").arg(section).query(&mut c).ok()?;
        info.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':').map(|v| v.trim().to_owned()))
    }

    /// Poll `ok` every 20 ms until it holds; panics after `limit` naming `what`.
    pub fn wait_for(&self, limit: Duration, what: &str, ok: impl Fn(&RedisServer) -> bool) {
        let start = Instant::now();
        while !ok(self) {
            assert!(start.elapsed() < limit, "port {}: timed out waiting for {what}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid (panics if it is not running).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server not running").id()
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(c) = &self.child {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as libc::pid_t, sig);
            }
        }
    }

    /// SIGSTOP: the server stops answering but keeps its sockets.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// kill -9 and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            self.signal_child(&c, libc::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn signal_child(&self, c: &Child, sig: libc::c_int) {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(c.id() as libc::pid_t, sig);
        }
    }

    /// Start again on the same port with the same arguments (after [`Self::kill9`] or
    /// [`Self::shutdown_nosave`]); data is whatever persistence kept (none by default).
    pub fn restart(&mut self) {
        self.kill9();
        let start = Instant::now();
        while !self.spawn() {
            assert!(start.elapsed() < Duration::from_secs(10), "restart on port {} failed", self.port);
            std::thread::sleep(Duration::from_millis(50));
        }
        // It answers PING while it loads what persistence kept, and refuses the rest (LOADING).
        self.wait_for(Duration::from_secs(10), "the data to load", |s| {
            s.info_field("persistence", "loading").as_deref() == Some("0")
        });
    }

    /// `SHUTDOWN NOSAVE` and reap.
    pub fn shutdown_nosave(&mut self) {
        if let Ok(mut c) = self.conn() {
            let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut c);
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }

    /// A plain synchronous connection for test assertions and fault commands.
    pub fn conn(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.admin_url())?.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// Run one command and return its reply.
    pub fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut c = self.conn().expect("connect to test server");
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Calls per command name from `INFO commandstats` (e.g. `"evalsha"`, `"subscribe"`).
    pub fn command_calls(&self) -> HashMap<String, u64> {
        let info: String = self.cmd(&["INFO", "commandstats"]);
        let mut out = HashMap::new();
        for line in info.lines() {
            let Some(rest) = line.strip_prefix("cmdstat_") else { continue };
            let Some((name, stats)) = rest.split_once(':') else { continue };
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            out.insert(name.to_string(), calls);
        }
        out
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TLS listener on `tls_port` with the server certificate of `certs`, trusting its CA for
/// (optional) client certificates.
fn tls_server_args<'a>(certs: &'a TlsCerts, tls_port: &'a str) -> Vec<&'a str> {
    vec![
        "--tls-port",
        tls_port,
        "--tls-cert-file",
        certs.server_crt.to_str().expect("utf-8 path"),
        "--tls-key-file",
        certs.server_key.to_str().expect("utf-8 path"),
        "--tls-ca-cert-file",
        certs.ca_crt.to_str().expect("utf-8 path"),
        "--tls-auth-clients",
        "optional",
    ]
}

/// Links this server opens itself (to its master, to other sentinels or cluster nodes) use TLS and
/// present the client certificate of `certs` (the server one is for serverAuth only).
fn tls_peer_args(certs: &TlsCerts) -> [&str; 6] {
    [
        "--tls-replication",
        "yes",
        "--tls-client-cert-file",
        certs.client_crt.to_str().expect("utf-8 path"),
        "--tls-client-key-file",
        certs.client_key.to_str().expect("utf-8 path"),
    ]
}

/// `n` independent servers (for Redlock).
pub fn start_many(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// A Redis Cluster of `masters` masters with `replicas` replicas each, on loopback
/// (`redis-server --cluster-enabled yes` per node, then `redis-cli --cluster create`). Every node
/// is a [`RedisServer`], stopped by pid on drop.
#[derive(Debug)]
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Start the nodes, create the cluster and wait until every node reports `cluster_state:ok`
    /// and sees every replica attached. Panics after 30 s.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        Self::start_inner(None, masters, replicas)
    }

    /// [`Self::start`] over TLS: every node serves clients on a TLS port ([`RedisServer::tls_port`],
    /// certificates as in [`RedisServer::start_tls`]), speaks TLS on the cluster bus and to its
    /// master (`tls-cluster`, `tls-replication`, with the client certificate of `certs`), and
    /// announces itself as `localhost` (`cluster-announce-hostname`,
    /// `cluster-preferred-endpoint-type hostname`), the name the server certificate carries, so
    /// `CLUSTER SLOTS` names `localhost` and the TLS ports. The plain ports stay open for the
    /// harness only (readiness, [`RedisServer::cmd`]); clients get [`Self::tls_url`].
    pub fn start_tls(certs: &TlsCerts, masters: usize, replicas: usize) -> RedisCluster {
        Self::start_inner(Some(certs), masters, replicas)
    }

    fn start_inner(certs: Option<&TlsCerts>, masters: usize, replicas: usize) -> RedisCluster {
        let n = masters * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..n)
            .map(|_| {
                let cluster_args = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-port",
                    FREE_PORT,
                ];
                match certs {
                    None => RedisServer::start_with(&cluster_args),
                    Some(certs) => {
                        let mut args = cluster_args.to_vec();
                        args.extend(tls_peer_args(certs));
                        args.extend_from_slice(&[
                            "--tls-cluster",
                            "yes",
                            "--cluster-announce-hostname",
                            "localhost",
                            "--cluster-preferred-endpoint-type",
                            "hostname",
                        ]);
                        RedisServer::start_tls(certs, &args)
                    }
                }
            })
            .collect();
        let mut cmd = Command::new("redis-cli");
        if let Some(certs) = certs {
            cmd.arg("--tls").arg("--cacert").arg(&certs.ca_crt);
            cmd.arg("--cert").arg(&certs.client_crt).arg("--key").arg(&certs.client_key);
        }
        cmd.arg("--cluster").arg("create");
        for node in &nodes {
            cmd.arg(format!("127.0.0.1:{}", node.tls_port().unwrap_or(node.port)));
        }
        let out = cmd
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli: {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes };
        for node in &cluster.nodes {
            node.wait_for(Duration::from_secs(30), "the cluster to be ready", |s| {
                s.info_field("cluster", "cluster_enabled").as_deref() == Some("1")
                    && cluster_info(s, "cluster_state").as_deref() == Some("ok")
                    && cluster_info(s, "cluster_known_nodes").as_deref() == Some(n.to_string().as_str())
            });
        }
        for node in &cluster.nodes {
            if node.info_field("replication", "role").as_deref() == Some("slave") {
                node.wait_for(Duration::from_secs(30), "replicas to sync", |s| {
                    s.info_field("replication", "master_link_status").as_deref() == Some("up")
                });
            }
        }
        cluster
    }

    /// `redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,…` over the first `seeds` nodes.
    pub fn url(&self, seeds: usize) -> String {
        let list: Vec<String> =
            self.nodes.iter().take(seeds).map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", list.join(","))
    }

    /// `rediss+cluster://localhost:<tls port 1>,…` over the first `seeds` nodes of a
    /// [`Self::start_tls`] cluster.
    pub fn tls_url(&self, seeds: usize) -> String {
        let list: Vec<String> = self
            .nodes
            .iter()
            .take(seeds)
            .map(|n| format!("localhost:{}", n.tls_port().expect("a TLS cluster node")))
            .collect();
        format!("rediss+cluster://{}", list.join(","))
    }

    /// The node that is master of `key`'s slot now.
    pub fn master_of(&self, key: &str) -> &RedisServer {
        let slot: i64 = self.nodes[0].cmd(&["CLUSTER", "KEYSLOT", key]);
        self.nodes
            .iter()
            .find(|n| n.info_field("replication", "role").as_deref() == Some("master") && owns_slot(n, slot))
            .unwrap_or_else(|| panic!("no master owns slot {slot}"))
    }

    /// A replica of `master`.
    pub fn replica_of(&self, master: &RedisServer) -> &RedisServer {
        let port = master.port.to_string();
        self.nodes
            .iter()
            .find(|n| n.info_field("replication", "master_port").as_deref() == Some(port.as_str()))
            .unwrap_or_else(|| panic!("no replica of port {port}"))
    }
}

/// One `field:value` line of `CLUSTER INFO`.
pub fn cluster_info(s: &RedisServer, field: &str) -> Option<String> {
    let mut c = s.conn().ok()?;
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).ok()?;
    info.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':').map(|v| v.trim().to_owned()))
}

/// Whether `node` serves `slot` (from its `CLUSTER NODES` line marked `myself`).
fn owns_slot(node: &RedisServer, slot: i64) -> bool {
    let Ok(mut c) = node.conn() else { return false };
    let Ok(nodes) = redis::cmd("CLUSTER").arg("NODES").query::<String>(&mut c) else { return false };
    let Some(me) = nodes.lines().find(|l| l.contains("myself")) else { return false };
    me.split_whitespace().skip(8).any(|range| match range.split_once('-') {
        Some((a, b)) => {
            a.parse::<i64>().is_ok_and(|a| a <= slot) && b.parse::<i64>().is_ok_and(|b| slot <= b)
        }
        None => range.parse::<i64>() == Ok(slot),
    })
}

/// Certificates made with `openssl` for TLS tests: a CA, a server certificate for `localhost`
/// only (so `127.0.0.1` is a wrong host name), a client certificate from the same CA, and a
/// second, unrelated CA. EC P-256 keys, valid for two days.
#[derive(Debug)]
pub struct TlsCerts {
    dir: PathBuf,
    pub ca_crt: PathBuf,
    pub server_crt: PathBuf,
    pub server_key: PathBuf,
    pub client_crt: PathBuf,
    pub client_key: PathBuf,
    pub other_ca_crt: PathBuf,
}

impl TlsCerts {
    /// Make a fresh set in a temporary directory (removed on drop). Panics if `openssl` fails.
    pub fn generate() -> TlsCerts {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ferrolock-tls-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create cert dir");
        let p = |f: &str| dir.join(f);
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .unwrap_or_else(|e| panic!("cannot run openssl: {e}"));
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        let ca = |name: &str| {
            let (key, crt, subj) = (format!("{name}.key"), format!("{name}.crt"), format!("/CN={name}"));
            let mut a = vec!["req", "-x509", "-days", "2", "-subj", &subj, "-keyout", &key, "-out", &crt];
            a.extend_from_slice(&ec);
            a.extend_from_slice(&["-addext", "basicConstraints=critical,CA:TRUE"]);
            a.extend_from_slice(&["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
            openssl(&a);
        };
        ca("ca");
        ca("other-ca");
        let leaf = |name: &str, cn: &str, ext: &str| {
            let (key, csr, crt, extf) =
                (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"), format!("{name}.ext"));
            std::fs::write(dir.join(&extf), ext).expect("write ext file");
            let subj = format!("/CN={cn}");
            let mut a = vec!["req", "-subj", &subj, "-keyout", &key, "-out", &csr];
            a.extend_from_slice(&ec);
            openssl(&a);
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &crt,
                "-extfile",
                &extf,
            ]);
        };
        leaf("server", "localhost", "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n");
        leaf("client", "ferrolock-test-client", "extendedKeyUsage=clientAuth\n");
        TlsCerts {
            ca_crt: p("ca.crt"),
            server_crt: p("server.crt"),
            server_key: p("server.key"),
            client_crt: p("client.crt"),
            client_key: p("client.key"),
            other_ca_crt: p("other-ca.crt"),
            dir,
        }
    }
}

impl Drop for TlsCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
