//! `rediss+cluster://` (feature `cluster`) against a local 3-master cluster that serves clients
//! on TLS ports only as far as the client can tell (`tls-cluster yes`: `CLUSTER SLOTS` names the
//! TLS ports) and announces its nodes as `localhost`, the only name the test certificates carry.
//! Locks on every master and a waiter woken by a release, all over verified TLS; a wrong CA and
//! a wrong host name fail promptly as `Tls`; TLS options with a plain `redis+cluster://` URL are
//! refused; a TLS/plain-text mix-up gets a hint naming the cluster scheme to use. Each refusal
//! has its control: the same cluster accepts the right settings.
#![cfg(feature = "cluster")]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions, TlsOptions};
use ferrolock_testkit::{RedisCluster, TlsCerts};

fn opts(tls: TlsOptions) -> ClientOptions {
    let mut o = ClientOptions::default();
    o.connect_timeout = Duration::from_millis(1500);
    o.response_timeout = Duration::from_millis(1000);
    o.tls = tls;
    o
}

fn trusting(ca: &std::path::Path) -> TlsOptions {
    TlsOptions::default().with_root_ca_file(ca).expect("read CA")
}

fn key(name: &str) -> String {
    format!("ferrolock:{{{name}}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_cluster_is_verified_tls_to_every_node() {
    let certs = TlsCerts::generate();
    let cluster = RedisCluster::start_tls(&certs, 3, 0);
    let url = cluster.tls_url(2);
    assert!(url.starts_with("rediss+cluster://localhost:"));

    // The nodes name themselves `localhost` (what the client will dial, and verify).
    let slots: redis::Value = cluster.nodes[0].cmd(&["CLUSTER", "SLOTS"]);
    let text = format!("{slots:?}");
    assert!(text.contains("localhost"), "nodes should announce localhost: {text}");

    // Refusals first, each before or at the handshake, and promptly (no retry loop, no hang).
    let t = Instant::now();
    let e = Client::connect(&url, opts(trusting(&certs.other_ca_crt))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tls, "wrong CA: {e}");
    assert!(t.elapsed() < Duration::from_secs(5), "wrong CA took {:?}", t.elapsed());

    // The certificate names localhost only: 127.0.0.1 is a wrong host name.
    let by_ip = url.replace("localhost", "127.0.0.1");
    let t = Instant::now();
    let e = Client::connect(&by_ip, opts(trusting(&certs.ca_crt))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tls, "wrong host name: {e}");
    assert!(t.elapsed() < Duration::from_secs(5), "wrong host name took {:?}", t.elapsed());

    // TLS options with a plain-text cluster URL: refused, never silently clear text.
    let plain = url.replacen("rediss+cluster://", "redis+cluster://", 1);
    let e = Client::connect(&plain, opts(trusting(&certs.ca_crt))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.message().contains("rediss+cluster://"), "no hint in: {e}");

    // A TLS/plain-text mix-up: the cluster client's own error says only that no seed could be
    // reached; the hint names the cluster scheme to use, like a `rediss://` URL's.
    let tls_to_plain = format!("rediss+cluster://localhost:{}", cluster.nodes[0].port());
    let t = Instant::now();
    let e = Client::connect(&tls_to_plain, opts(trusting(&certs.ca_crt))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.message().contains("plain-text port? (use redis+cluster://)"), "no hint in: {e}");
    assert!(t.elapsed() < Duration::from_secs(10), "TLS to a plain-text port took {:?}", t.elapsed());
    let t = Instant::now();
    let e = Client::connect(&plain, opts(TlsOptions::default())).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    assert!(e.message().contains("if it expects TLS, use rediss+cluster://"), "no hint in: {e}");
    assert!(t.elapsed() < Duration::from_secs(10), "plain text to a TLS port took {:?}", t.elapsed());

    // The control: right CA, with a client certificate (mutual TLS).
    let tls = trusting(&certs.ca_crt).with_client_cert_files(&certs.client_crt, &certs.client_key).unwrap();
    let client = Client::connect(&url, opts(tls)).await.expect("connect over TLS");
    assert!(format!("{client:?}").contains("tls"), "{client:?}");

    // Locks on all three masters (the client follows the slot map to the nodes it was not given).
    let mut masters = BTreeSet::new();
    for i in 0..60 {
        let name = format!("tls-spread-{i}");
        let m = cluster.master_of(&key(&name));
        if masters.contains(&m.port()) {
            continue;
        }
        let g = client.lock(&name, LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await;
        let g = g.unwrap().expect("free");
        assert_eq!(m.cmd::<i64>(&["EXISTS", &key(&name)]), 1);
        g.release().await.unwrap();
        assert_eq!(m.cmd::<i64>(&["EXISTS", &key(&name)]), 0);
        masters.insert(m.port());
        if masters.len() == 3 {
            break;
        }
    }
    assert_eq!(masters.len(), 3, "locks on every master");
    // Every master serves this client on its TLS port (TLS `CLUSTER SLOTS` names TLS ports).
    let on_tls = |node: &ferrolock_testkit::RedisServer, with: &str| {
        let list: String = node.cmd(&["CLIENT", "LIST"]);
        let tls_laddr = format!("laddr=127.0.0.1:{} ", node.tls_port().unwrap());
        list.lines().filter(|l| l.contains(&tls_laddr) && l.contains(with)).count()
    };
    for node in &cluster.nodes {
        assert!(on_tls(node, "") >= 1, "no client connection on the TLS port of {}", node.port());
    }

    // A waiter is woken by the release message, long before the holder's lease would end.
    let holder = client.lock("tls-waited", LockOptions::lease(Duration::from_secs(20))).unwrap();
    let g = holder.try_acquire().await.unwrap().expect("free");
    let waiter = {
        let lock = client.lock("tls-waited", LockOptions::lease(Duration::from_secs(5))).unwrap();
        tokio::spawn(async move {
            let g = lock.acquire(Some(Duration::from_secs(10))).await;
            (Instant::now(), g.map(|g| g.fence()))
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The sharded subscription has its own connection, to the TLS port as well.
    let node = cluster.master_of(&key("tls-waited"));
    assert_eq!(on_tls(node, " ssub=1 "), 1, "the subscriber connection is not on the TLS port");
    let released = Instant::now();
    g.release().await.unwrap();
    let (woke, fence) = waiter.await.unwrap();
    fence.expect("the waiter gets the lock");
    assert!(woke - released < Duration::from_secs(2), "woken after {:?}", woke - released);
}
