//! `rediss+sentinel://`: TLS to the sentinels and to the masters they name, with real servers and
//! certificates made per run (testkit `TlsCerts`: the server certificate names `localhost` only).
//!
//! The master listens on TLS only (its plain port is closed once the replica has synced), the
//! sentinels serve TLS and reach the master, the replica and each other over TLS, and announce host
//! names (`announce-hostnames yes`) so that the master they report, `localhost:<tls port>`, matches
//! its certificate. Locks work through them and follow a failover to the TLS replica; the
//! sentinels' plain ports see none of the client's connections. The refusals, each with its
//! control: a CA that did not sign the certificates, the system trust store, a sentinel addressed
//! by a name its certificate lacks, and a master reported by IP (`announce-hostnames no`) all fail
//! promptly with `Tls`; TLS options with a plain `redis+sentinel://` URL are refused before any I/O;
//! a TLS/plain-text mix-up with the master or with a sentinel names the Sentinel scheme to use
//! in its hint.

mod common;

use std::time::{Duration, Instant};

use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions, TlsOptions};
use ferrolock_testkit::{RedisServer, TlsCerts};

const NAME: &str = "fl-tls-master";

fn opts(tls: TlsOptions) -> ClientOptions {
    let mut o = ClientOptions::default();
    o.connect_timeout = Duration::from_millis(1500);
    o.response_timeout = Duration::from_millis(500);
    o.tls = tls;
    o
}

fn trusting(ca: &std::path::Path) -> TlsOptions {
    TlsOptions::default().with_root_ca_file(ca).expect("read CA")
}

fn tls_port(s: &RedisServer) -> u16 {
    s.tls_port().expect("tls port")
}

/// `rediss+sentinel://host:<tls port>,…/NAME`.
fn url(host: &str, sentinels: &[&RedisServer]) -> String {
    let list: Vec<String> = sentinels.iter().map(|s| format!("{host}:{}", tls_port(s))).collect();
    format!("rediss+sentinel://{}/{NAME}", list.join(","))
}

/// `CLIENT LIST` entries of `server` on `port` that speak RESP3: the client's (ferrolock always
/// says `HELLO 3`; the harness, the sentinels and the replicas speak RESP2).
fn resp3_clients_on_port(server: &RedisServer, port: u16) -> Vec<String> {
    let list: String = server.cmd(&["CLIENT", "LIST"]);
    let laddr = format!("laddr=127.0.0.1:{port}");
    list.lines()
        .filter(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.contains(&laddr.as_str()) && fields.contains(&"resp=3")
        })
        .map(str::to_owned)
        .collect()
}

/// The master address the sentinel reports.
fn reported(sentinel: &RedisServer) -> (String, u16) {
    sentinel.cmd(&["SENTINEL", "get-master-addr-by-name", NAME])
}

/// Wait until every sentinel sees `replicas` replicas and the other sentinels.
fn wait_for_peers(sentinels: &[&RedisServer], replicas: usize) {
    for s in sentinels {
        s.wait_for(Duration::from_secs(20), "the sentinel to see the replica and its peers", |s| {
            let Ok(mut c) = s.conn() else { return false };
            let r: redis::RedisResult<Vec<redis::Value>> =
                redis::cmd("SENTINEL").arg("replicas").arg(NAME).query(&mut c);
            let p: redis::RedisResult<Vec<redis::Value>> =
                redis::cmd("SENTINEL").arg("sentinels").arg(NAME).query(&mut c);
            matches!((r, p), (Ok(r), Ok(p)) if r.len() == replicas && p.len() == sentinels.len() - 1)
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_through_tls_sentinels_follow_a_failover() {
    let certs = TlsCerts::generate();
    let master = RedisServer::start_tls(&certs, &[]);
    let master_tls = tls_port(&master);
    // The replica replicates over TLS and announces itself as `localhost` (its TLS port is the
    // one it announces, with tls-replication).
    let replica = RedisServer::start_tls(
        &certs,
        &[
            "--replicaof",
            "localhost",
            &master_tls.to_string(),
            "--tls-replication",
            "yes",
            "--replica-announce-ip",
            "localhost",
            "--tls-client-cert-file",
            certs.client_crt.to_str().unwrap(),
            "--tls-client-key-file",
            certs.client_key.to_str().unwrap(),
        ],
    );
    replica.wait_for(Duration::from_secs(10), "the replication link over TLS", |s| {
        s.info_field("replication", "master_link_status").as_deref() == Some("up")
    });
    let replica_tls = tls_port(&replica);
    // From here on the master speaks TLS only: its plain port is closed.
    let _: String = master.cmd(&["CONFIG", "SET", "port", "0"]);
    let plain =
        redis::Client::open(master.url()).unwrap().get_connection_with_timeout(Duration::from_secs(1));
    assert!(plain.is_err(), "the master's plain port is still open");

    let sentinels: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_tls_sentinel(&certs, ("localhost", master_tls), NAME, 2, true))
        .collect();
    let refs: Vec<&RedisServer> = sentinels.iter().collect();
    wait_for_peers(&refs, 1);
    assert_eq!(reported(&sentinels[0]), ("localhost".to_owned(), master_tls));

    let url = url("localhost", &refs);
    let client =
        Client::connect(&url, opts(trusting(&certs.ca_crt))).await.expect("connect through TLS sentinels");
    assert_eq!(client.sentinel_master(), Some(format!("localhost:{master_tls}")));
    assert!(format!("{client:?}").contains("tls"), "{client:?}");
    // A direct TLS client on the master, to look at the holds there.
    let direct = Client::connect(&format!("rediss://localhost:{master_tls}"), opts(trusting(&certs.ca_crt)))
        .await
        .unwrap();

    let lock = client.lock("tls-sentinel", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let guard = lock.acquire(Some(Duration::from_secs(5))).await.expect("acquire through TLS sentinels");
    let info = direct.inspect("tls-sentinel").await.unwrap().expect("the hold is on the TLS-only master");
    assert_eq!(info.fence, guard.fence());
    // A waiter is woken by the release notification (a subscription over TLS on the master).
    let waiter = {
        let lock = client.lock("tls-sentinel", LockOptions::lease(Duration::from_secs(10))).unwrap();
        tokio::spawn(async move { lock.acquire(Some(Duration::from_secs(5))).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let second = waiter.await.unwrap().expect("the waiter acquires after the release");
    assert!(released.elapsed() < Duration::from_secs(2), "the waiter was not notified");
    second.release().await.unwrap();
    assert!(direct.inspect("tls-sentinel").await.unwrap().is_none());

    // The sentinels' plain ports carry none of the client's connections; its `+switch-master`
    // subscription is on one sentinel's TLS port.
    let mut subscribed = 0;
    for s in &sentinels {
        let on_plain = resp3_clients_on_port(s, s.port());
        assert!(on_plain.is_empty(), "client connections on the sentinel's plain port: {on_plain:?}");
        subscribed += resp3_clients_on_port(s, tls_port(s))
            .iter()
            .filter(|l| l.split_whitespace().any(|f| f == "cmd=subscribe"))
            .count();
    }
    assert!(subscribed >= 1, "no +switch-master subscription over TLS");

    // Failover to the TLS replica: the client follows it (sentinels announce `localhost`).
    let start = Instant::now();
    tokio::task::block_in_place(|| {
        loop {
            let mut c = sentinels[0].conn().expect("sentinel");
            match redis::cmd("SENTINEL").arg("FAILOVER").arg(NAME).query::<String>(&mut c) {
                Ok(_) => break,
                Err(e) => {
                    assert!(start.elapsed() < Duration::from_secs(15), "SENTINEL FAILOVER: {e}");
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        sentinels[0].wait_for(Duration::from_secs(20), "the sentinels to name the replica", |_| {
            sentinels.iter().all(|s| reported(s) == ("localhost".to_owned(), replica_tls))
        });
        replica.wait_for(Duration::from_secs(10), "the replica to be promoted", |r| {
            r.info_field("replication", "role").as_deref() == Some("master")
        });
    });
    let new_master = format!("localhost:{replica_tls}");
    while client.sentinel_master().as_deref() != Some(new_master.as_str()) {
        assert!(start.elapsed() < Duration::from_secs(30), "the client did not follow the failover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = client.lock("after-failover", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let g = after.acquire(Some(Duration::from_secs(5))).await.expect("lock after the failover");
    assert_eq!(replica.cmd::<i64>(&["EXISTS", "ferrolock:{after-failover}"]), 1);
    g.release().await.unwrap();
    // The client reached the promoted replica on its TLS port only.
    let on_plain = resp3_clients_on_port(&replica, replica.port());
    assert!(on_plain.is_empty(), "client connections on the new master's plain port: {on_plain:?}");
    assert!(!resp3_clients_on_port(&replica, replica_tls).is_empty(), "no client connection over TLS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_and_host_names_are_verified() {
    let certs = TlsCerts::generate();
    let master = RedisServer::start_tls(&certs, &[]);
    let master_tls = tls_port(&master);
    let by_name = RedisServer::start_tls_sentinel(&certs, ("localhost", master_tls), NAME, 1, true);
    let by_ip = RedisServer::start_tls_sentinel(&certs, ("localhost", master_tls), NAME, 1, false);
    let (ip, port) = reported(&by_ip);
    assert_eq!(port, master_tls);
    assert!(ip == "127.0.0.1" || ip == "::1", "{ip}");

    // Control: the right CA, the sentinel by the name on its certificate, the master by name.
    let good = url("localhost", &[&by_name]);
    let c = Client::connect(&good, opts(trusting(&certs.ca_crt))).await.expect("connect");
    let g = c.lock("v", LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await.unwrap();
    g.expect("free").release().await.unwrap();

    let refused = |url: String, tls: TlsOptions| async move {
        let started = Instant::now();
        let e = Client::connect(&url, opts(tls)).await.expect_err("must be refused");
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}: {e}", started.elapsed());
        e
    };
    // A CA that did not sign the sentinel's certificate: a TLS error, not a hang or a retry.
    let e = refused(good.clone(), trusting(&certs.other_ca_crt)).await;
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    // No CA given: the system trust store does not know the test CA (verification is the default).
    let e = refused(good.clone(), TlsOptions::default()).await;
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    // The sentinel addressed by IP: its certificate names `localhost` only.
    let e = refused(url("127.0.0.1", &[&by_name]), trusting(&certs.ca_crt)).await;
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    // The sentinel is fine, but reports the master by IP, which the master's certificate does not
    // name: the master's host name is verified too.
    let e = refused(url("localhost", &[&by_ip]), trusting(&certs.ca_crt)).await;
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    assert!(e.message().contains(&master_tls.to_string()), "does not name the master: {e}");
}

/// A TLS/plain-text mix-up behind a Sentinel URL, with the master or with the sentinel itself:
/// the hint names the Sentinel scheme to use
/// (`rediss+sentinel://`, `redis+sentinel://`), not `rediss://` or `redis://`, which would drop
/// the sentinels and their failovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_mix_up_hint_names_the_sentinel_scheme() {
    let certs = TlsCerts::generate();
    let master = RedisServer::start_tls(&certs, &[]);
    let master_tls = tls_port(&master);
    let sentinel = RedisServer::start_tls_sentinel(&certs, ("localhost", master_tls), NAME, 1, true);
    assert_eq!(reported(&sentinel), ("localhost".to_owned(), master_tls));

    // Control: the TLS scheme, the sentinel's TLS port, the CA.
    let good = url("localhost", &[&sentinel]);
    let c = Client::connect(&good, opts(trusting(&certs.ca_crt))).await.expect("connect");
    let g = c.lock("hint", LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await.unwrap();
    g.expect("free").release().await.unwrap();

    // The plain scheme on the sentinel's plain-text port: the sentinel answers and names the
    // master's TLS port, which closes the plain-text connection.
    let plain = format!("redis+sentinel://localhost:{}/{NAME}", sentinel.port());
    let e =
        Client::connect(&plain, opts(TlsOptions::default())).await.expect_err("plain text to a TLS master");
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    assert!(e.message().contains(&master_tls.to_string()), "does not name the master: {e}");
    assert!(
        e.message().contains("use rediss+sentinel://"),
        "the hint does not name the Sentinel TLS scheme: {e}"
    );

    // The reverse: TLS sentinels that name a master's plain-text port. TLS to it gets no
    // handshake reply.
    let to_plain = RedisServer::start_tls_sentinel(&certs, ("localhost", master.port()), NAME, 1, true);
    assert_eq!(reported(&to_plain), ("localhost".to_owned(), master.port()));
    let e = Client::connect(&url("localhost", &[&to_plain]), opts(trusting(&certs.ca_crt)))
        .await
        .expect_err("TLS to a plain-text master port");
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.message().contains("plain-text port"), "no hint in: {e}");
    assert!(
        e.message().contains("(use redis+sentinel://)"),
        "the hint does not name the Sentinel scheme: {e}"
    );

    // The same two mix-ups with the sentinel itself, before any master is known.
    // TLS to the sentinel's plain-text port: no handshake reply.
    let e = Client::connect(
        &format!("rediss+sentinel://localhost:{}/{NAME}", sentinel.port()),
        opts(trusting(&certs.ca_crt)),
    )
    .await
    .expect_err("TLS to a sentinel's plain-text port");
    assert!(
        e.message().contains(&format!("localhost:{}", sentinel.port())),
        "does not name the sentinel: {e}"
    );
    assert!(e.message().contains("plain-text port"), "no hint in: {e}");
    assert!(
        e.message().contains("(use redis+sentinel://)"),
        "the hint does not name the Sentinel scheme: {e}"
    );
    // Plain text to the sentinel's TLS port: the sentinel closes the connection.
    let e = Client::connect(
        &format!("redis+sentinel://localhost:{}/{NAME}", tls_port(&sentinel)),
        opts(TlsOptions::default()),
    )
    .await
    .expect_err("plain text to a sentinel's TLS port");
    assert!(
        e.message().contains(&format!("localhost:{}", tls_port(&sentinel))),
        "does not name the sentinel: {e}"
    );
    assert!(
        e.message().contains("use rediss+sentinel://"),
        "the hint does not name the Sentinel TLS scheme: {e}"
    );
}

#[tokio::test]
async fn tls_settings_are_checked_before_any_io() {
    let certs = TlsCerts::generate();
    // TLS options with a plain sentinel URL: refused, never sent in clear text.
    let e = Client::connect(&format!("redis+sentinel://localhost:1/{NAME}"), opts(trusting(&certs.ca_crt)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.message().contains("rediss+sentinel://"), "no hint in: {e}");
    // The scheme is case-insensitive, like the others; verification cannot be turned off.
    let e = Client::connect(
        &format!("REDISS+SENTINEL://localhost:1/{NAME}#insecure"),
        opts(TlsOptions::default()),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{e}");
    // Unusable certificates are refused before connecting.
    let mut junk = TlsOptions::default();
    junk.root_certs_pem =
        Some(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n".to_vec());
    let e = Client::connect(&format!("rediss+sentinel://localhost:1/{NAME}"), opts(junk)).await.unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Tls | ErrorKind::InvalidConfig), "{e}");
}
