//! `rediss://` against a local `redis-server --tls-port` with certificates made by the test:
//! the chain and the host name are verified by default, a custom CA replaces the system store,
//! client certificates work for mutual TLS, and every failure is a clear, typed error that never
//! shows a password. Each refusal has its control: the same server accepts the right settings.

mod common;

use std::time::Duration;

use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions, TlsOptions};
use ferrolock_testkit::{RedisServer, TlsCerts};

const SECRET: &str = "s3ntinel-tls-pw";

fn opts(tls: TlsOptions) -> ClientOptions {
    let mut o = ClientOptions::default();
    o.connect_timeout = Duration::from_millis(1500);
    o.tls = tls;
    o
}

fn trusting(ca: &std::path::Path) -> TlsOptions {
    TlsOptions::default().with_root_ca_file(ca).expect("read CA")
}

fn url(host: &str, port: u16) -> String {
    format!("rediss://:{SECRET}@{host}:{port}")
}

/// Connect and expect a typed failure whose texts never show the password.
async fn refused(url: &str, o: ClientOptions) -> ferrolock::Error {
    let e = Client::connect(url, o).await.expect_err("connection must be refused");
    for text in [e.to_string(), format!("{e:?}")] {
        assert!(!text.contains(SECRET), "password in {text}");
    }
    e
}

#[tokio::test]
async fn verified_by_default_custom_ca_hostname_and_plaintext() {
    let certs = TlsCerts::generate();
    let server = RedisServer::start_tls(&certs, &["--requirepass", SECRET]);
    let port = server.tls_port().expect("tls port");

    // Control: the right CA and host name give a working lock over TLS.
    let client =
        Client::connect(&url("localhost", port), opts(trusting(&certs.ca_crt))).await.expect("connect");
    let held =
        client.lock("tls", LockOptions::lease(Duration::from_secs(5))).unwrap().acquire(None).await.unwrap();
    assert!(held.fence() > 0);
    assert!(client.inspect("tls").await.unwrap().is_some());
    held.release().await.unwrap();
    assert!(!format!("{client:?}").contains(SECRET));

    // A CA that did not sign the server's certificate.
    let e = refused(&url("localhost", port), opts(trusting(&certs.other_ca_crt))).await;
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");

    // The system trust store (no CA given) does not know the test CA: verification is the default.
    let e = refused(&url("localhost", port), opts(TlsOptions::default())).await;
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");

    // The certificate names `localhost` only: 127.0.0.1 is the wrong host.
    let e = refused(&url("127.0.0.1", port), opts(trusting(&certs.ca_crt))).await;
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");

    // TLS to the plain-text port: the server reads the client hello as an unfinished command and
    // never answers; the timeout says what is likely wrong.
    let e = refused(&url("localhost", server.port()), opts(trusting(&certs.ca_crt))).await;
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.message().contains("plain-text port? (use redis://)"), "no hint in: {e}");

    // Plain text to the TLS port: refused promptly with a hint, not a hang.
    let started = std::time::Instant::now();
    let plain = format!("redis://:{SECRET}@localhost:{port}");
    let e = refused(&plain, opts(TlsOptions::default())).await;
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    assert!(e.message().contains("if it expects TLS, use rediss://"), "no hint in: {e}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // A wrong password over TLS is an authentication error that does not echo it either.
    let e =
        refused(&format!("rediss://:wrong-{SECRET}@localhost:{port}"), opts(trusting(&certs.ca_crt))).await;
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let certs = TlsCerts::generate();
    let server = RedisServer::start_tls(&certs, &["--tls-auth-clients", "yes"]);
    let port = server.tls_port().expect("tls port");
    let url = format!("rediss://localhost:{port}");

    let e = Client::connect(&url, opts(trusting(&certs.ca_crt))).await.expect_err("no client certificate");
    assert!(matches!(e.kind(), ErrorKind::Tls | ErrorKind::Connection), "{e}");

    let tls = trusting(&certs.ca_crt).with_client_cert_files(&certs.client_crt, &certs.client_key).unwrap();
    let shown = format!("{tls:?}");
    let key = std::fs::read_to_string(&certs.client_key).unwrap();
    let key_body = key.lines().nth(1).expect("key body");
    assert!(!shown.contains(key_body) && shown.contains("<redacted>"), "{shown}");
    let client = Client::connect(&url, opts(tls)).await.expect("mutual TLS");
    let held =
        client.lock("mtls", LockOptions::lease(Duration::from_secs(5))).unwrap().acquire(None).await.unwrap();
    held.release().await.unwrap();
}

#[tokio::test]
async fn redlock_over_tls() {
    let certs = TlsCerts::generate();
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_tls(&certs, &[])).collect();
    let urls: Vec<String> =
        servers.iter().map(|s| format!("rediss://localhost:{}", s.tls_port().unwrap())).collect();
    let client = Client::connect_redlock(&urls, opts(trusting(&certs.ca_crt))).await.expect("connect");
    let held =
        client.lock("rl", LockOptions::lease(Duration::from_secs(5))).unwrap().acquire(None).await.unwrap();
    held.release().await.unwrap();
    // Control: the same masters with a CA that did not sign them reach no quorum.
    let e = Client::connect_redlock(&urls, opts(trusting(&certs.other_ca_crt))).await.expect_err("wrong CA");
    assert!(matches!(e.kind(), ErrorKind::Tls | ErrorKind::QuorumNotReached), "{e}");
}

#[tokio::test]
async fn bad_tls_settings_are_refused_before_any_io() {
    let certs = TlsCerts::generate();
    // TLS options with a clear-text URL would silently send in clear: refused.
    let e = Client::connect("redis://localhost:1", opts(trusting(&certs.ca_crt))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    // Verification cannot be turned off through the URL.
    let e = Client::connect("rediss://localhost:1/#insecure", opts(TlsOptions::default())).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{e}");
    // A certificate without its key, and a file that is not PEM.
    let mut half = TlsOptions::default();
    half.client_cert_pem = Some(std::fs::read(&certs.client_crt).unwrap());
    let e = Client::connect("rediss://localhost:1", opts(half)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    let mut junk = TlsOptions::default();
    junk.root_certs_pem = Some(b"not a certificate".to_vec());
    let e = Client::connect("rediss://localhost:1", opts(junk)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    let e = TlsOptions::default().with_root_ca_file("/nonexistent/ca.crt").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    // Given /dev/zero by mistake: refused once past any real PEM file's size, not read until
    // memory runs out.
    let e = TlsOptions::default().with_root_ca_file("/dev/zero").unwrap_err();
    assert!(e.kind() == ErrorKind::InvalidConfig && e.message().contains("larger than"), "{e}");
    // A well-formed key of another certificate: the same TLS error as an unreadable key, before
    // any I/O (port 1 would answer Connection). Control: the matching pair gets as far as I/O.
    let mixed = trusting(&certs.ca_crt).with_client_cert_files(&certs.client_crt, &certs.server_key).unwrap();
    let e = Client::connect("rediss://localhost:1", opts(mixed)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
    assert!(e.to_string().contains("does not belong to the client certificate"), "{e}");
    let pair = trusting(&certs.ca_crt).with_client_cert_files(&certs.client_crt, &certs.client_key).unwrap();
    let e = Client::connect("rediss://localhost:1", opts(pair)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
}
