//! Secret scan (RELIABILITY.md "No secrets in logs/errors", peer bug B20): a sentinel password
//! in `--redis` (and in FERROLOCK_REDIS) goes through success (`status`, `unlock`, `exec`, whose
//! child's environment is printed too), WRONGPASS, a refused and a timed-out connection, a TLS
//! failure and bad URLs, with RUST_LOG=trace and RUST_BACKTRACE=full; the whole stdout and stderr
//! of each run is grepped for the password: 0 hits. A control shows the same grep finds it in a
//! run that prints it (`sh -c 'echo URL'` under `exec`).

mod common;

use std::net::TcpListener;
use std::process::{Command, Output};

use common::*;
use ferrolock_testkit::TlsCerts;

const SENTINEL: &str = "Sentinel-Secret-7f3a";

fn url(scheme: &str, host: &str, user: &str, pass: &str, port: u16) -> String {
    format!("{scheme}://{user}:{pass}@{host}:{port}")
}

/// Everything a run shows: stdout then stderr.
fn shown(out: &Output) -> String {
    format!("{}\n{}", stdout(out), stderr(out))
}

fn hits(text: &str) -> usize {
    text.matches(SENTINEL).count()
}

fn verbose(mut c: Command) -> Command {
    c.env("RUST_LOG", "trace").env("RUST_BACKTRACE", "full");
    c
}

/// `ferrolock --redis <url> <args>` (FERROLOCK_REDIS cleared) and via FERROLOCK_REDIS; both
/// outputs, each checked for `expect_code`.
fn runs(url: &str, args: &[&str], expect_code: i32) -> Vec<Output> {
    let mut flag = verbose(ferrolock(&[url.to_owned()]));
    flag.args(args);
    let mut env = verbose(ferrolock(&[]));
    env.env("FERROLOCK_REDIS", url).args(args);
    let outs = vec![output(&mut flag), output(&mut env)];
    for o in &outs {
        assert_eq!(code(o), Some(expect_code), "{args:?}: {}", shown(o));
    }
    outs
}

fn assert_clean(outs: &[Output], must_show: &str) {
    for o in outs {
        let text = shown(o);
        assert!(text.contains(must_show), "expected {must_show:?} in: {text}");
        assert_eq!(hits(&text), 0, "the password leaked: {text}");
    }
}

#[test]
fn control_the_scan_finds_the_password_where_it_is() {
    let server = RedisServer::start_with(&["--requirepass", SENTINEL]);
    let u = url("redis", "127.0.0.1", "", SENTINEL, server.port());
    assert_eq!(hits(&u), 1);
    // The same capture path as every other run: a child that prints the URL does show it.
    let mut c = verbose(ferrolock(std::slice::from_ref(&u)));
    c.args(["exec", "ctl", "--", "sh", "-c", &format!("echo '{u}'; echo '{u}' >&2")]);
    let out = output(&mut c);
    assert_eq!(code(&out), Some(0), "{}", shown(&out));
    assert_eq!(hits(&shown(&out)), 2, "{}", shown(&out));
}

#[test]
fn success_shows_no_password() {
    let server = RedisServer::start_with(&["--requirepass", SENTINEL]);
    for user in ["", "default"] {
        let u = url("redis", "127.0.0.1", user, SENTINEL, server.port());
        // exec: the child's environment is printed (the URL must not be passed down by --redis).
        let mut c = verbose(ferrolock(std::slice::from_ref(&u)));
        c.args(["exec", "--ttl", "5s", "scan", "--", "sh", "-c", "env"]);
        let out = output(&mut c);
        assert_eq!(code(&out), Some(0), "{}", shown(&out));
        assert!(stdout(&out).contains("FERROLOCK_FENCE="), "{}", shown(&out));
        assert_eq!(hits(&shown(&out)), 0, "the password leaked: {}", shown(&out));

        let mut outs = runs(&u, &["status", "scan"], 0);
        outs.extend(runs(&u, &["status", "--json", "scan"], 0));
        outs.extend(runs(&u, &["unlock", "--force", "scan"], 0));
        for o in &outs {
            assert_eq!(hits(&shown(o)), 0, "the password leaked: {}", shown(o));
        }
    }
}

#[test]
fn wrongpass_shows_no_password() {
    let server = RedisServer::start_with(&["--requirepass", SENTINEL]);
    let wrong = format!("wrong-{SENTINEL}");
    for (user, pass) in [("", wrong.as_str()), ("nobody", SENTINEL)] {
        let u = url("redis", "127.0.0.1", user, pass, server.port());
        assert_clean(&runs(&u, &["status", "scan"], 125), "WRONGPASS");
        assert_clean(&runs(&u, &["exec", "scan", "--", "true"], 125), "WRONGPASS");
    }
}

#[test]
fn refused_and_timed_out_connections_show_no_password() {
    let dead = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_port = dead.local_addr().expect("addr").port();
    drop(dead);
    let u = url("redis", "127.0.0.1", "", SENTINEL, dead_port);
    assert_clean(&runs(&u, &["status", "scan"], 125), "CONNECTION");
    // Accepts (the kernel completes the handshake) and never answers. `status` gives up after
    // one connection attempt (2 s) with its own message; an `exec` with a longer wait gets the
    // core's TIMEOUT after its four attempts (~8 s), so only the --redis form runs that.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let u = url("redis", "127.0.0.1", "", SENTINEL, silent.local_addr().expect("addr").port());
    let mut c = verbose(ferrolock(std::slice::from_ref(&u)));
    c.args(["status", "scan"]);
    let out = output(&mut c);
    assert_eq!(code(&out), Some(125), "{}", shown(&out));
    assert_clean(&[out], "no answer within");
    let mut c = verbose(ferrolock(std::slice::from_ref(&u)));
    c.args(["exec", "--wait", "30s", "scan", "--", "true"]);
    let out = output(&mut c);
    assert_eq!(code(&out), Some(125), "{}", shown(&out));
    assert_clean(&[out], "TIMEOUT");
}

#[test]
fn tls_failure_shows_no_password() {
    let certs = TlsCerts::generate();
    let server = RedisServer::start_tls(&certs, &["--requirepass", SENTINEL]);
    let port = server.tls_port().expect("tls port");
    // The server's CA is not trusted (no --cacert), and a CA that did not sign it.
    let u = url("rediss", "localhost", "", SENTINEL, port);
    assert_clean(&runs(&u, &["status", "scan"], 125), "TLS");
    let mut other = verbose(ferrolock(std::slice::from_ref(&u)));
    other.arg("--cacert").arg(&certs.other_ca_crt).args(["status", "scan"]);
    let out = output(&mut other);
    assert_eq!(code(&out), Some(125), "{}", shown(&out));
    assert_clean(&[out], "TLS");
    // Control of the setup: with the right CA the same URL works (so the failure above is TLS).
    let mut ok = verbose(ferrolock(std::slice::from_ref(&u)));
    ok.arg("--cacert").arg(&certs.ca_crt).args(["status", "scan"]);
    let out = output(&mut ok);
    assert_eq!(code(&out), Some(0), "{}", shown(&out));
    assert_eq!(hits(&shown(&out)), 0, "{}", shown(&out));
}

#[test]
fn bad_urls_show_no_password() {
    for u in [
        format!("redis://:{SENTINEL}@127.0.0.1:notaport"),
        format!("http://:{SENTINEL}@127.0.0.1:6379"),
        format!("redis://:{SENTINEL}@[::1/0"),
        format!("redis+sentinel://:{SENTINEL}@127.0.0.1:1"),
    ] {
        let mut flag = verbose(ferrolock(std::slice::from_ref(&u)));
        flag.args(["status", "scan"]);
        let mut env = verbose(ferrolock(&[]));
        env.env("FERROLOCK_REDIS", &u).args(["status", "scan"]);
        for out in [output(&mut flag), output(&mut env)] {
            assert_ne!(code(&out), Some(0), "{u}: {}", shown(&out));
            assert!(!stderr(&out).is_empty(), "{u}");
            assert_eq!(hits(&shown(&out)), 0, "{u}: the password leaked: {}", shown(&out));
        }
    }
}
