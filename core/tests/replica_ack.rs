//! Replica acknowledgement (`ClientOptions::replica_acks`): a real master with a real replica
//! (`--replicaof`). A grant is returned only after the replica acknowledged it; with the replica
//! stopped (SIGSTOP) the grant is undone and `NotReplicated` returned, leaving no hold behind.
//! The control: the same stopped replica without the option lets the grant through. A connection
//! lost while the WAIT is pending fails the call and leaves no hold.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions, ReplicaAcks};

fn acks_opts(replicas: u32, timeout_ms: u64) -> ClientOptions {
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(1000);
    o.replica_acks = Some(ReplicaAcks::new(replicas, Duration::from_millis(timeout_ms)));
    o
}

fn hold_exists(server: &RedisServer, name: &str) -> bool {
    server.cmd::<i64>(&["EXISTS", &format!("ferrolock:{{{name}}}")]) == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_is_returned_once_the_replica_has_it() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master, &[]);
    let client = Client::connect(&master.url(), acks_opts(1, 200)).await.unwrap();
    let lock = client.lock("acked", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let g = lock.try_acquire().await.unwrap().expect("free lock");
    // WAIT returned only after the replica applied the grant: it is readable there at once.
    let owner: Option<String> = replica.cmd(&["HGET", "ferrolock:{acked}", "fence"]);
    assert_eq!(owner.as_deref(), Some(g.fence().to_string().as_str()));
    // Re-entry is acknowledged too.
    let g2 = lock.acquire(Some(Duration::from_secs(1))).await.unwrap();
    assert_eq!(g2.count(), 2);
    assert_eq!(replica.cmd::<Option<String>>(&["HGET", "ferrolock:{acked}", "count"]).as_deref(), Some("2"));
    g2.release().await.unwrap();
    g.release().await.unwrap();
    assert!(!hold_exists(&master, "acked"));
    // Asking for more replicas than exist is refused the same way, and leaves nothing.
    let greedy = Client::connect(&master.url(), acks_opts(2, 50)).await.unwrap();
    let e = greedy.lock("acked", LockOptions::default()).unwrap().try_acquire().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotReplicated, "{e}");
    assert!(e.message().contains("1 of 2"), "{e}");
    assert!(!hold_exists(&master, "acked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_acknowledgements_undo_the_grant() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master, &[]);
    let acked = Client::connect(&master.url(), acks_opts(1, 100)).await.unwrap();
    let plain = Client::connect(&master.url(), ClientOptions::default()).await.unwrap();

    replica.pause();
    // try_acquire: one attempt, refused, and the hold it made on the master is gone.
    let lock = acked.lock("stopped", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let e = lock.try_acquire().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotReplicated, "{e}");
    assert!(e.kind().is_transient());
    assert!(!hold_exists(&master, "stopped"), "a refused grant left a hold");

    // acquire(wait) retries (the kind is transient) until its wait ends.
    let t = Instant::now();
    let e = lock.acquire(Some(Duration::from_millis(400))).await.unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::AcquireTimeout | ErrorKind::NotReplicated), "{e}");
    assert!(t.elapsed() >= Duration::from_millis(400));
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(!hold_exists(&master, "stopped"));

    // Cancelled while WAIT is pending: the undo still happens.
    let slow = Client::connect(&master.url(), acks_opts(1, 600)).await.unwrap();
    let lock2 = slow.lock("cancelled", LockOptions::lease(Duration::from_secs(10))).unwrap();
    assert!(tokio::time::timeout(Duration::from_millis(100), lock2.try_acquire()).await.is_err());
    let start = Instant::now();
    while hold_exists(&master, "cancelled") {
        assert!(start.elapsed() < Duration::from_secs(3), "a cancelled acknowledged grant left a hold");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Control: without replica_acks the same stopped replica does not stop a grant, so the
    // refusal above came from the acknowledgement check.
    let g = plain.lock("stopped", LockOptions::lease(Duration::from_secs(10))).unwrap().try_acquire().await;
    let g = g.unwrap().expect("granted without acknowledgement");
    assert!(hold_exists(&master, "stopped"));
    g.release().await.unwrap();

    // The replica comes back: acknowledged grants work again.
    replica.resume();
    let g = lock.acquire(Some(Duration::from_secs(5))).await.unwrap();
    assert!(hold_exists(&master, "stopped"));
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acks_are_validated() {
    let bad = |r: u32, ms: u64| {
        let mut o = acks_opts(r, ms);
        o.response_timeout = Duration::from_millis(500);
        o
    };
    let master = RedisServer::start();
    for (o, kind) in [
        (bad(0, 100), ErrorKind::InvalidConfig),
        (bad(1, 0), ErrorKind::InvalidDuration),
        (bad(1, 500), ErrorKind::InvalidDuration),
        (bad(1, 1500), ErrorKind::InvalidDuration),
    ] {
        let e = Client::connect(&master.url(), o).await.unwrap_err();
        assert_eq!(e.kind(), kind, "{e}");
    }
    let e = Client::connect_redlock([master.url()], acks_opts(1, 100)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
}

/// The acquire and its WAIT are one pipeline on one connection (core/src/replicas.rs): a
/// connection lost while the WAIT is pending fails the call (it is never answered by a WAIT on the
/// rebuilt connection), and the grant it may have made is undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_during_the_wait_never_reports_a_grant() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master, &[]);
    let acked = Client::connect(&master.url(), acks_opts(1, 600)).await.unwrap();
    replica.pause();
    let lock = acked.lock("killed", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let killer = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _: i64 = master.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    };
    let (r, ()) = tokio::join!(lock.try_acquire(), killer);
    let e = r.err().unwrap_or_else(|| panic!("granted without the stopped replica"));
    assert!(e.kind().is_transient(), "{e}");
    let start = Instant::now();
    while hold_exists(&master, "killed") {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "a grant refused after a lost connection left a hold"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    replica.resume();
    let g = lock.acquire(Some(Duration::from_secs(5))).await.unwrap();
    assert!(hold_exists(&master, "killed"));
    g.release().await.unwrap();
}
