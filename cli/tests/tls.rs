//! `--cacert`, `--cert` and `--key` for `rediss://`, end to end against a TLS redis-server.

mod common;

use common::*;
use ferrolock_testkit::TlsCerts;

#[test]
fn tls_flags_reach_the_server_and_verification_is_on_by_default() {
    let certs = TlsCerts::generate();
    let server = RedisServer::start_tls(&certs, &["--tls-auth-clients", "yes"]);
    let url = format!("rediss://localhost:{}", server.tls_port().expect("tls port"));

    let mut ok = ferrolock(std::slice::from_ref(&url));
    ok.arg("--cacert")
        .arg(&certs.ca_crt)
        .arg("--cert")
        .arg(&certs.client_crt)
        .arg("--key")
        .arg(&certs.client_key);
    ok.args(["exec", "tls", "--", "sh", "-c", "test -n \"$FERROLOCK_FENCE\""]);
    let out = output(&mut ok);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));

    // Control: the same command without the CA is refused by verification, with a clear line.
    let mut no_ca = ferrolock(std::slice::from_ref(&url));
    no_ca.args(["exec", "tls", "--", "true"]);
    let out = output(&mut no_ca);
    assert_eq!(code(&out), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("TLS"), "{}", stderr(&out));

    // Half a client certificate, and TLS files with a redis:// URL, are usage errors.
    let mut half = ferrolock(std::slice::from_ref(&url));
    half.arg("--cert").arg(&certs.client_crt).args(["status", "tls"]);
    assert_eq!(code(&output(&mut half)), Some(2));
    let mut plain = on(&server);
    plain.arg("--cacert").arg(&certs.ca_crt).args(["status", "tls"]);
    let out = output(&mut plain);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
}
