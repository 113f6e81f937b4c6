//! `--replica-acks` end to end against a real master and replica (`--replicaof`), with the
//! replica stopped (SIGSTOP) as the control; Sentinel and Cluster URLs reach the core.

mod common;

use common::*;

fn hold_exists(server: &RedisServer, name: &str) -> bool {
    server.cmd::<i64>(&["EXISTS", &format!("ferrolock:{{{name}}}")]) == 1
}

#[test]
fn replica_acks_flag() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master, &[]);
    let run = |extra: &[&str], tail: &[&str]| {
        let mut c = on(&master);
        c.args(extra).args(tail);
        output(&mut c)
    };
    let acks = ["--replica-acks", "1", "--replica-acks-timeout", "200ms"];
    let out = run(&acks, &["exec", "cli-acks", "--", "true"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));

    replica.pause();
    let out = run(&acks, &["exec", "--no-wait", "cli-acks", "--", "true"]);
    assert_eq!(code(&out), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("NOT_REPLICATED"), "{}", stderr(&out));
    assert!(!hold_exists(&master, "cli-acks"), "a refused grant left a hold");
    // With --wait it keeps trying (the kind is transient) until the wait ends: the conflict code.
    let out = run(&acks, &["exec", "--wait", "300ms", "cli-acks", "--", "true"]);
    assert_eq!(code(&out), Some(75), "{}", stderr(&out));
    // ... and says why: the lock was free, the grants were not replicated.
    assert!(
        stderr(&out).contains("not obtained within 300ms") && stderr(&out).contains("NOT_REPLICATED"),
        "{}",
        stderr(&out)
    );
    // Control: without the flag the stopped replica does not stop a grant.
    let out = run(&[], &["exec", "--no-wait", "cli-acks", "--", "true"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    replica.resume();

    // Bad values are usage errors.
    for bad in [
        &["--replica-acks", "0"][..],
        &["--replica-acks", "1", "--replica-acks-timeout", "5s"],
        &["--replica-acks-timeout", "10ms"],
    ] {
        let out = run(bad, &["status", "cli-acks"]);
        assert_eq!(code(&out), Some(2), "{bad:?}: {}", stderr(&out));
    }
}

#[test]
fn sentinel_and_cluster_urls_reach_the_core() {
    for (url, want) in [
        ("redis+sentinel://127.0.0.1:1", 2),     // no master name: a usage error
        ("redis+cluster://127.0.0.1:1/0", 2),    // a cluster has no db
        ("redis+sentinel://127.0.0.1:1/m", 125), // nobody answers
    ] {
        let out = output(ferrolock(&[url.to_owned()]).args(["status", "x"]));
        assert_eq!(code(&out), Some(want), "{url}: {}", stderr(&out));
    }
}

// `--redis` before and after the subcommand add up to one Redlock: a wrapper that sets some
// (an alias `ferrolock --redis A --redis B`) and a call that adds one more used to lock on the
// later ones alone (a global argument's subcommand values replaced the others).
#[test]
fn redis_urls_before_and_after_the_subcommand_add_up() {
    let servers = ferrolock_testkit::start_many(3);
    let mut c = ferrolock(&[servers[0].url(), servers[1].url()]);
    c.args(["exec", "--redis", &servers[2].url(), "cli-urls-add-up", "--", "sh", "-c"]);
    c.arg(format!("redis-cli -p {} EXISTS 'ferrolock:{{cli-urls-add-up}}'", servers[0].port()));
    let out = output(&mut c);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "1", "the first server's hold is missing");
    // The whole set, on either side, names the same Redlock: status sees the lock free again.
    let mut c = ferrolock(&[servers[0].url()]);
    c.args(["status", "--redis", &servers[1].url(), "--redis", &servers[2].url(), "cli-urls-add-up"]);
    let out = output(&mut c);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
}
