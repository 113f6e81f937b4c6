//! Replica acknowledgement on Redis Cluster (`replica_acks` with `redis+cluster://`), on a local
//! 3-master + 3-replica cluster (testkit). Each acquire and its `WAIT` go to the master of the
//! lock's slot as one pipeline (core/src/replicas.rs): a grant is returned only once the slot's
//! replica has it; too few acknowledgements (more asked than exist, the replica stopped) give
//! `NotReplicated` and leave the lock free for another client at once; a stale slot map (MOVED)
//! sends the pair to the new master; a connection killed while the `WAIT` is pending never ends in
//! a success; a re-entry the driver resends after a lost connection counts one level. Control:
//! with the undo switched off (test-only knob) the "lock left free" check fails.
#![cfg(feature = "cluster")]

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use common::cluster::{SlotMove, calls, key};
use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions, ReplicaAcks};
use ferrolock_testkit::RedisCluster;

/// The knob of the control is process-wide: the tests of this file run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn opts() -> ClientOptions {
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(2000);
    o
}

fn acks_opts(replicas: u32, timeout_ms: u64) -> ClientOptions {
    let mut o = opts();
    o.replica_acks = Some(ReplicaAcks::new(replicas, Duration::from_millis(timeout_ms)));
    o
}

fn exists(server: &RedisServer, name: &str) -> bool {
    server.cmd::<i64>(&["EXISTS", &key(name)]) == 1
}

/// A field of the hold as a cluster replica has it (replicas answer reads after `READONLY`).
fn replica_field(replica: &RedisServer, name: &str, field: &str) -> Option<String> {
    let mut c = replica.conn().expect("connect to the replica");
    let ((), v): ((), Option<String>) =
        redis::pipe().cmd("READONLY").cmd("HGET").arg(key(name)).arg(field).query(&mut c).expect("HGET");
    v
}

/// Names whose slots are served by at least two different masters.
fn spread_names(cluster: &RedisCluster) -> Vec<String> {
    let names: Vec<String> = (0..6).map(|i| format!("acked-{i}")).collect();
    let masters: std::collections::BTreeSet<u16> =
        names.iter().map(|n| cluster.master_of(&key(n)).port()).collect();
    assert!(masters.len() >= 2, "the names should spread over several masters");
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_on_a_cluster_wait_for_their_slots_replica() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start(3, 1);
    let acked = Client::connect(&cluster.url(2), acks_opts(1, 500)).await.expect("replica_acks on a cluster");
    let plain = Client::connect(&cluster.url(2), opts()).await.unwrap();

    for name in spread_names(&cluster) {
        let master = cluster.master_of(&key(&name));
        let replica = cluster.replica_of(master);
        let waits = calls(master, "wait");
        let lock = acked.lock(&name, LockOptions::lease(Duration::from_secs(10))).unwrap();
        let g = lock.try_acquire().await.unwrap().expect("free lock");
        // The WAIT went to the slot's master, and returned only after its replica applied the
        // grant: the replica has it at once.
        // (two on a master's first grant: EVALSHA's NOSCRIPT, then EVAL, each with its WAIT)
        assert!(calls(master, "wait") > waits, "{name}: the WAIT did not go to the slot's master");
        assert_eq!(replica_field(replica, &name, "fence"), Some(g.fence().to_string()), "{name}");
        // Re-entry is acknowledged too.
        let g2 = lock.acquire(Some(Duration::from_secs(1))).await.unwrap();
        assert_eq!(g2.count(), 2);
        assert_eq!(replica_field(replica, &name, "count").as_deref(), Some("2"), "{name}");
        g2.release().await.unwrap();
        g.release().await.unwrap();
        assert!(!exists(master, &name));
    }

    // More replicas asked for than the slot's master has: refused with the single-node kind, and
    // the lock is left free: another client takes it at once.
    let greedy = Client::connect(&cluster.url(2), acks_opts(2, 50)).await.unwrap();
    let name = "greedy";
    let master = cluster.master_of(&key(name));
    let e = greedy.lock(name, LockOptions::lease(Duration::from_secs(10))).unwrap().try_acquire().await;
    let e = e.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotReplicated, "{e}");
    assert!(e.kind().is_transient());
    assert!(e.message().contains("1 of 2"), "{e}");
    assert!(!exists(master, name), "a refused grant left a hold");
    let other = plain.lock(name, LockOptions::lease(Duration::from_secs(10))).unwrap();
    let g = other.try_acquire().await.unwrap().expect("a refused grant must leave the lock free");
    g.release().await.unwrap();

    // acquire(wait) keeps trying (the kind is transient) until its wait ends.
    let t = Instant::now();
    let e =
        greedy.lock(name, LockOptions::default()).unwrap().acquire(Some(Duration::from_millis(300))).await;
    let e = e.unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::AcquireTimeout | ErrorKind::NotReplicated), "{e}");
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(!exists(master, name));

    // Control: with the undo switched off, the same refusal leaves the grant behind, and the
    // check above ("another client takes it at once") fails, so it would catch a leftover.
    ferrolock::keep_refused_grants_for_tests(true);
    let e = greedy.lock(name, LockOptions::lease(Duration::from_secs(10))).unwrap().try_acquire().await;
    ferrolock::keep_refused_grants_for_tests(false);
    assert_eq!(e.unwrap_err().kind(), ErrorKind::NotReplicated);
    assert!(exists(master, name), "control: the grant should have been left behind");
    assert!(other.try_acquire().await.unwrap().is_none(), "control: the leftover grant went unnoticed");
    plain.force_unlock(name).await.unwrap().expect("the leftover hold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_replica_undoes_grants_in_its_slots_only() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start(3, 1);
    let acked = Client::connect(&cluster.url(2), acks_opts(1, 100)).await.unwrap();
    let plain = Client::connect(&cluster.url(2), opts()).await.unwrap();
    let names = spread_names(&cluster);
    let stopped_master = cluster.master_of(&key(&names[0]));
    let replica = cluster.replica_of(stopped_master);
    let elsewhere = names
        .iter()
        .find(|n| cluster.master_of(&key(n)).port() != stopped_master.port())
        .expect("a name on another master");

    replica.pause();
    let name = &names[0];
    let lock = acked.lock(name, LockOptions::lease(Duration::from_secs(10))).unwrap();
    let e = lock.try_acquire().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotReplicated, "{e}");
    assert!(e.message().contains("0 of 1"), "{e}");
    assert!(!exists(stopped_master, name), "a refused grant left a hold");
    let g = plain.lock(name, LockOptions::lease(Duration::from_secs(10))).unwrap().try_acquire().await;
    g.unwrap().expect("a refused grant must leave the lock free").release().await.unwrap();

    // Slots whose replica runs are not affected (acquire with a wait: on a loaded machine a
    // 100 ms WAIT can miss once, which is retried like any NotReplicated).
    let g = acked.lock(elsewhere, LockOptions::lease(Duration::from_secs(10))).unwrap();
    g.acquire(Some(Duration::from_secs(3))).await.expect("a lock on another master").release().await.unwrap();

    // Cancelled while the WAIT is pending: the grant is undone all the same.
    let slow = Client::connect(&cluster.url(2), acks_opts(1, 800)).await.unwrap();
    let cancelled = slow.lock(name, LockOptions::lease(Duration::from_secs(10))).unwrap();
    assert!(tokio::time::timeout(Duration::from_millis(150), cancelled.try_acquire()).await.is_err());
    let start = Instant::now();
    while exists(stopped_master, name) {
        assert!(start.elapsed() < Duration::from_secs(5), "a cancelled acknowledged grant left a hold");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The client's connection to the master is killed while the WAIT is pending: whatever the
    // driver retries, it is the script and its WAIT together, so the answer is never a success.
    // (No control here: the hazard the pipeline removes, a WAIT retried alone on a rebuilt
    // connection, cannot be shown on Redis 7.0, which sets a connection's write offset to the
    // global one after *every* command, so such a WAIT is conservative there: tried, it answered
    // 0 after its full timeout. Servers that move it only on the connection's own writes would
    // answer at once with every replica.)
    let killer = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _: i64 = stopped_master.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    };
    let killed = slow.lock(name, LockOptions::lease(Duration::from_secs(10))).unwrap();
    let (r, ()) = tokio::join!(killed.try_acquire(), killer);
    let e = r.err().unwrap_or_else(|| panic!("granted without the stopped replica"));
    assert!(e.kind().is_transient(), "{e}");
    let start = Instant::now();
    while exists(stopped_master, name) {
        assert!(start.elapsed() < Duration::from_secs(5), "a grant refused after a reconnection left a hold");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The replica comes back: acknowledged grants work again in its slots.
    replica.resume();
    let g = lock.acquire(Some(Duration::from_secs(5))).await.unwrap();
    assert_eq!(replica_field(replica, name, "fence"), Some(g.fence().to_string()));
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_slot_takes_the_grant_and_its_wait_to_the_new_master() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start(3, 1);
    let acked = Client::connect(&cluster.url(2), acks_opts(1, 500)).await.unwrap();
    let name = "moved";
    // The client learns the slot map, then the slot moves to another master.
    let g = acked.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await;
    g.unwrap().expect("free").release().await.unwrap();
    let moving = SlotMove::new(&cluster, cluster.master_of(&key(name)), &key(name));
    let (source, target, slot) = (moving.source, moving.target, &moving.slot);
    moving.begin();
    // The slot holds the lock's retained fence key: move it along.
    let keys = moving.keys();
    assert!(!keys.is_empty());
    moving.migrate(&keys);
    moving.finish();

    // The pipeline goes to the old master (stale map), gets MOVED, and is resent whole to the
    // new one: the grant is there, and its replica had it when the grant was returned.
    let (waits, stale) = (calls(target, "wait"), calls(source, "wait"));
    let g = acked.lock(name, LockOptions::lease(Duration::from_secs(10))).unwrap().try_acquire().await;
    let g = g.unwrap().expect("granted on the new master");
    assert!(exists(target, name));
    assert_eq!(source.cmd::<i64>(&["CLUSTER", "COUNTKEYSINSLOT", slot]), 0);
    assert!(calls(source, "wait") > stale, "the first pipeline should have gone to the old master");
    assert!(calls(target, "wait") > waits, "the WAIT did not follow the grant to the new master");
    assert_eq!(replica_field(cluster.replica_of(target), name, "fence"), Some(g.fence().to_string()));
    g.release().await.unwrap();
}

/// The cluster driver resends a pipeline whose connection was lost, so the acquire script can run
/// twice. A re-entry resent that way must still count one level, or releasing every guard would
/// leave a level held. (Run against the code before the fix, this failed: `count()` was 3.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_reentry_is_counted_once() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::start(3, 1);
    let acked = Client::connect(&cluster.url(2), acks_opts(1, 900)).await.unwrap();
    let name = "resent";
    let master = cluster.master_of(&key(name));
    let replica = cluster.replica_of(master);
    let lock = acked.lock(name, LockOptions::lease(Duration::from_secs(20))).unwrap();
    let g1 = lock.try_acquire().await.unwrap().expect("free");
    let evals = calls(master, "evalsha") + calls(master, "eval");

    // The re-entry's WAIT is pending (replica stopped) when its connection is killed; the
    // replica comes back at once, so the resent script and WAIT succeed.
    replica.pause();
    let killer = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _: i64 = master.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
        replica.resume();
    };
    let (r, ()) = tokio::join!(lock.try_acquire(), killer);
    let g2 = r.unwrap().expect("the re-entry is granted once the replica is back");
    assert!(
        calls(master, "evalsha") + calls(master, "eval") >= evals + 2,
        "the acquire was not resent: this test did not exercise the resend"
    );
    assert_eq!(g2.count(), 2);
    assert_eq!(master.cmd::<Option<String>>(&["HGET", &key(name), "count"]).as_deref(), Some("2"));
    g2.release().await.unwrap();
    g1.release().await.unwrap();
    assert!(!exists(master, name), "a resent re-entry left a level held");
}
