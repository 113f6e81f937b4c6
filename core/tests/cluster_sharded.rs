//! Redis Cluster release notifications by sharded pub/sub (docs/GUARANTEES.md, Redis Cluster):
//! releases are `SPUBLISH`ed and waiters `SSUBSCRIBE` on the master of the lock's slot, over
//! per-node connections that carry no lock command. A slot migration or a replica promotion ends
//! those subscriptions (Redis sends an unsolicited `sunsubscribe`); the client resubscribes on the
//! new owner, so a waiter that subscribed before is still woken by the release — within a couple
//! of seconds, where the holder's 30 s lease is the only other bound; likewise after its
//! subscriber connection is killed. Control: a second client with resubscription turned off (a
//! test-only knob) is not woken, although the lock is free.
#![cfg(feature = "cluster")]

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use common::cluster::{SlotMove, calls, key, opts};
use ferrolock::{Client, LockOptions};
use ferrolock_testkit::RedisCluster;
use tokio::task::JoinHandle;

fn channel(name: &str) -> String {
    format!("{}:released", key(name))
}

/// Subscribers of `name`'s release channel on `node`: (sharded, classic).
fn subscribers(node: &RedisServer, name: &str) -> (i64, i64) {
    let count = |sub: &str| {
        let v: Vec<redis::Value> = node.cmd(&["PUBSUB", sub, &channel(name)]);
        match v.get(1) {
            Some(redis::Value::Int(n)) => *n,
            other => panic!("PUBSUB {sub}: {other:?}"),
        }
    };
    (count("SHARDNUMSUB"), count("NUMSUB"))
}

async fn wait_for_subscribers(node: &RedisServer, name: &str, sharded: i64, what: &str) {
    let start = Instant::now();
    while subscribers(node, name).0 < sharded {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}: {:?}", subscribers(node, name));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A waiter that acquires `name`, notes when, and releases at once (so that a woken control
/// waiter could take it).
fn waiter(client: &Client, name: &str) -> JoinHandle<(Instant, ferrolock::Result<()>)> {
    let lock = client.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap();
    tokio::spawn(async move {
        match lock.acquire(Some(Duration::from_secs(60))).await {
            Ok(g) => {
                let at = Instant::now();
                (at, g.release().await)
            }
            Err(e) => (Instant::now(), Err(e)),
        }
    })
}

/// After the release at `released_at`: the resubscribing client's waiter gets the lock within
/// 2 s (its PTTL bound is ~30 s); the control's waiter is still asleep 4 s later, with the lock
/// free all that time.
async fn check_wakes(
    on: JoinHandle<(Instant, ferrolock::Result<()>)>,
    mut off: JoinHandle<(Instant, ferrolock::Result<()>)>,
    released_at: Instant,
    what: &str,
) {
    let (got_at, r) = tokio::time::timeout(Duration::from_secs(5), on)
        .await
        .unwrap_or_else(|_| panic!("{what}: the waiter was not woken by the release"))
        .unwrap();
    r.unwrap_or_else(|e| panic!("{what}: the waiter failed: {e}"));
    assert!(got_at - released_at < Duration::from_secs(2), "{what}: woken late: {:?}", got_at - released_at);
    let control = tokio::time::timeout(Duration::from_secs(4), &mut off).await;
    assert!(control.is_err(), "{what}: control: a waiter without resubscription was woken: {control:?}");
    off.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_waiters_survive_a_slot_migration_and_a_failover() {
    let cluster = RedisCluster::start(3, 1);
    let client = Client::connect(&cluster.url(2), opts()).await.expect("connect to the cluster");
    let control = Client::connect(&cluster.url(2), opts()).await.expect("connect to the cluster");
    control.set_cluster_resubscription_for_tests(false);

    // (1) Sharded pub/sub: while a waiter waits, the slot's master has a sharded subscriber and
    // no classic one, and the release that wakes it is an SPUBLISH (no PUBLISH).
    let g = client.lock("plain", LockOptions::lease(Duration::from_secs(30))).unwrap().try_acquire().await;
    let g = g.unwrap().expect("free");
    let node = cluster.master_of(&key("plain"));
    let on = waiter(&client, "plain");
    wait_for_subscribers(node, "plain", 1, "the waiter never subscribed on the slot's master").await;
    assert_eq!(subscribers(node, "plain"), (1, 0), "(sharded, classic) subscribers");
    for other in cluster.nodes.iter().filter(|n| n.port() != node.port()) {
        assert_eq!(subscribers(other, "plain"), (0, 0), "subscribed on another node {}", other.port());
    }
    let (spublish, publish) = (calls(node, "spublish"), calls(node, "publish"));
    let released_at = Instant::now();
    g.release().await.unwrap();
    let (got_at, r) = tokio::time::timeout(Duration::from_secs(5), on).await.expect("woken").unwrap();
    r.unwrap();
    assert!(got_at - released_at < Duration::from_secs(2), "woken by the lease, not the release");
    assert!(calls(node, "spublish") >= spublish + 2, "the releases did not SPUBLISH");
    assert_eq!(calls(node, "publish"), publish, "a release used classic PUBLISH");
    // force_unlock announces with SPUBLISH too.
    let _g = client.lock("plain", LockOptions::lease(Duration::from_secs(30))).unwrap().try_acquire().await;
    let before = calls(node, "spublish");
    assert!(client.force_unlock("plain").await.unwrap().is_some());
    assert_eq!(calls(node, "spublish"), before + 1);

    // (2) Slot migration of the lock's slot with two waiters subscribed on the source.
    let name = "moving";
    let guard = client.lock(name, LockOptions::lease(Duration::from_secs(30))).unwrap().try_acquire().await;
    let guard = guard.unwrap().expect("free");
    let (on, off) = (waiter(&client, name), waiter(&control, name));
    let source = cluster.master_of(&key(name));
    wait_for_subscribers(source, name, 2, "both waiters subscribe on the source").await;
    let moving = SlotMove::new(&cluster, source, &key(name));
    let target = moving.target;
    moving.begin();
    let keys = moving.keys();
    assert!(keys.contains(&key(name)), "{keys:?}");
    moving.migrate(&keys);
    moving.finish();
    // The source dropped both sharded subscriptions; the client resubscribed on the target.
    wait_for_subscribers(target, name, 1, "no resubscription on the new owner").await;
    assert_eq!(subscribers(source, name).0, 0, "the source kept a subscription");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(subscribers(target, name), (1, 0), "only the resubscribing client, sharded");
    let released_at = Instant::now();
    guard.release().await.unwrap();
    check_wakes(on, off, released_at, "after the slot migration").await;

    // (3) Replica promotion (CLUSTER FAILOVER) of the lock's master, two waiters subscribed.
    let name = "promoted";
    let guard = client.lock(name, LockOptions::lease(Duration::from_secs(30))).unwrap().try_acquire().await;
    let guard = guard.unwrap().expect("free");
    let (on, off) = (waiter(&client, name), waiter(&control, name));
    let old_master = cluster.master_of(&key(name));
    let replica = cluster.replica_of(old_master);
    wait_for_subscribers(old_master, name, 2, "both waiters subscribe on the master").await;
    let _: String = replica.cmd(&["CLUSTER", "FAILOVER"]);
    replica.wait_for(Duration::from_secs(15), "the replica to be promoted", |r| {
        r.info_field("replication", "role").as_deref() == Some("master")
    });
    // Both subscriptions end (the old master, now a replica, drops them); the client subscribes
    // again on the new master, not on the old one (a replica accepts SSUBSCRIBE for its master's
    // slots but does not deliver the master's SPUBLISH: a stale slot map must not leave it there).
    wait_for_subscribers(replica, name, 1, "no resubscription on the promoted replica").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(subscribers(replica, name), (1, 0), "only the resubscribing client, sharded");
    assert_eq!(subscribers(old_master, name), (0, 0), "a subscription left on the old master");
    let released_at = Instant::now();
    guard.release().await.unwrap();
    check_wakes(on, off, released_at, "after the replica promotion").await;
    assert_eq!(replica.cmd::<i64>(&["EXISTS", &key(name)]), 0, "released on the new master");

    // (4) Lost subscriber connections (killed on the server): the client reconnects to the node
    // and subscribes again; the control does not.
    let name = "cut";
    let guard = client.lock(name, LockOptions::lease(Duration::from_secs(30))).unwrap().try_acquire().await;
    let guard = guard.unwrap().expect("free");
    let (on, off) = (waiter(&client, name), waiter(&control, name));
    let node = cluster.master_of(&key(name));
    wait_for_subscribers(node, name, 2, "both waiters subscribe").await;
    let list: String = node.cmd(&["CLIENT", "LIST"]);
    let subscribers_ids: Vec<&str> = list
        .lines()
        .filter(|l| l.contains(" ssub=") && !l.contains(" ssub=0 "))
        .filter_map(|l| l.split_whitespace().find_map(|f| f.strip_prefix("id=")))
        .collect();
    assert_eq!(subscribers_ids.len(), 2, "{list}");
    for id in subscribers_ids {
        let _: redis::Value = node.cmd(&["CLIENT", "KILL", "ID", id]);
    }
    let start = Instant::now();
    while subscribers(node, name).0 == 2 {
        assert!(start.elapsed() < Duration::from_secs(5), "the subscriber connections were not killed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_for_subscribers(node, name, 1, "no resubscription after the connection was lost").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(subscribers(node, name), (1, 0), "only the resubscribing client, sharded");
    let released_at = Instant::now();
    guard.release().await.unwrap();
    check_wakes(on, off, released_at, "after a lost subscriber connection").await;

    // The clients still lock normally on both moved slots.
    for name in ["moving", "promoted"] {
        let g = client.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap();
        let g = g.acquire(Some(Duration::from_secs(5))).await.unwrap();
        g.release().await.unwrap();
        let e = control.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await;
        e.unwrap().expect("free").release().await.unwrap();
    }
}
