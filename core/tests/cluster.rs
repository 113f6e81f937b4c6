//! Redis Cluster (feature `cluster`): a local 3-master + 3-replica cluster made by the harness
//! (`redis-server --cluster-enabled yes` × 6, `redis-cli --cluster create --cluster-replicas 1`).
//! Locks in every slot, waiting by release messages (sharded pub/sub; tests/cluster_sharded.rs
//! covers its resubscription after a slot move and a failover), watchdog
//! renewals of locks in different slots, a slot migration under a renewing lock (ASK, then MOVED),
//! and replica promotions under a held lock (`CLUSTER FAILOVER`, then `kill -9` of a master): the
//! holder keeps it or sees InDoubt/Lost, never Held with the hold gone.
#![cfg(feature = "cluster")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::cluster::{SlotMove, calls, key, opts};
use ferrolock::{Client, ErrorKind, LockOptions, LockState, ReplicaAcks};
use ferrolock_testkit::{RedisCluster, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_a_cluster_with_a_replica_promotion() {
    let mut cluster = RedisCluster::start(3, 1);
    let client = Client::connect(&cluster.url(2), opts()).await.expect("connect to the cluster");

    // Locks whose slots are spread over the masters: each hold lives on its slot's master.
    let names: Vec<String> = (0..9).map(|i| format!("spread-{i}")).collect();
    let mut masters = std::collections::BTreeSet::new();
    for name in &names {
        let g = client.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await;
        let g = g.unwrap().expect("free");
        let m = cluster.master_of(&key(name));
        assert_eq!(m.cmd::<i64>(&["EXISTS", &key(name)]), 1);
        masters.insert(m.port());
        g.release().await.unwrap();
        assert_eq!(m.cmd::<i64>(&["EXISTS", &key(name)]), 0);
    }
    assert!(masters.len() >= 2, "the names should spread over several masters");

    // Binary names work, but one that starts with '}' would leave its keys an empty hash tag
    // (different slots, CROSSSLOT): refused up front. '}' further in is fine.
    for name in [&b"}"[..], b"}x", b"}\x00\xff"] {
        assert_eq!(client.lock(name, LockOptions::default()).unwrap_err().kind(), ErrorKind::InvalidName);
        assert_eq!(client.inspect(name).await.unwrap_err().kind(), ErrorKind::InvalidName);
    }
    for name in [&b"a}b"[..], b"a{b", b"{x}", b"\x00\xff"] {
        let lock = client.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap();
        lock.try_acquire().await.unwrap().expect("free").release().await.unwrap();
    }

    // Waiting is woken by the release message, long before the holder's lease ends.
    let holder = client.lock("waited", LockOptions::lease(Duration::from_secs(20))).unwrap();
    let g = holder.try_acquire().await.unwrap().expect("free");
    let node = cluster.master_of(&key("waited"));
    let publish_before = calls(node, "spublish");
    let waiter = {
        let lock = client.lock("waited", LockOptions::lease(Duration::from_secs(5))).unwrap();
        tokio::spawn(async move {
            let g = lock.acquire(Some(Duration::from_secs(10))).await;
            (Instant::now(), g)
        })
    };
    let start = Instant::now();
    while node
        .cmd::<Vec<redis::Value>>(&["PUBSUB", "SHARDNUMSUB", &format!("{}:released", key("waited"))])
        .get(1)
        .is_none_or(|v| *v == redis::Value::Int(0))
    {
        assert!(start.elapsed() < Duration::from_secs(5), "the waiter never subscribed on the lock's node");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released_at = Instant::now();
    g.release().await.unwrap();
    let (woke_at, g2) = waiter.await.unwrap();
    let g2 = g2.expect("the waiter gets the lock");
    assert!(woke_at - released_at < Duration::from_secs(2), "woken by the lease, not the release message");
    assert!(calls(node, "spublish") > publish_before, "the release did not SPUBLISH");

    // Control: a hold deleted without a release message leaves the waiter to its lease bound,
    // so the quick wake above came from the message.
    let waiter = {
        let lock = client.lock("waited", LockOptions::lease(Duration::from_secs(5))).unwrap();
        tokio::spawn(async move { lock.acquire(Some(Duration::from_millis(1500))).await.map(|_| ()) })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _: i64 = node.cmd(&["PEXPIRE", &key("waited"), "20000"]);
    drop(g2);
    let _: i64 = node.cmd(&["DEL", &key("waited")]);
    let r = waiter.await.unwrap();
    assert_eq!(r.unwrap_err().kind(), ErrorKind::AcquireTimeout, "woken without a release message");

    // Renewals of locks in different slots (one pipeline on a single server) keep every hold.
    let renewing: Vec<_> = {
        let mut v = Vec::new();
        for name in &names[..4] {
            let lock = client.lock(name, LockOptions::renewing(Duration::from_millis(600))).unwrap();
            v.push(lock.try_acquire().await.unwrap().expect("free"));
        }
        v
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for g in &renewing {
        assert_eq!(g.state(), LockState::Held, "a renewal in another slot failed");
    }
    for g in renewing {
        g.release().await.unwrap();
    }

    // Slot migration under a held, renewing lock, with a waiter: renewals follow ASK/MOVED to the
    // new owner, the hold keeps its fence there, and the waiter is woken by the release.
    let migrated = client.lock("migrated", LockOptions::renewing(Duration::from_millis(900))).unwrap();
    let guard = migrated.try_acquire().await.unwrap().expect("free");
    let waiter = {
        let lock = client.lock("migrated", LockOptions::lease(Duration::from_secs(5))).unwrap();
        tokio::spawn(async move {
            let g = lock.acquire(Some(Duration::from_secs(20))).await;
            (Instant::now(), g)
        })
    };
    let moving = SlotMove::new(&cluster, cluster.master_of(&key("migrated")), &key("migrated"));
    let target = moving.target;
    moving.begin();
    tokio::time::sleep(Duration::from_millis(400)).await; // renewals while MIGRATING
    let keys = moving.keys();
    assert!(keys.contains(&key("migrated")), "{keys:?}");
    moving.migrate(&keys);
    tokio::time::sleep(Duration::from_millis(700)).await; // renewals by ASK to the importing node
    assert!(calls(target, "asking") > 0, "no renewal went by ASK");
    moving.finish();
    tokio::time::sleep(Duration::from_millis(800)).await; // renewals after the MOVED
    assert_eq!(guard.state(), LockState::Held, "a renewal failed across the slot migration");
    assert_eq!(target.cmd::<i64>(&["EXISTS", &key("migrated")]), 1);
    let info = client.inspect("migrated").await.unwrap().expect("held on the new owner");
    assert_eq!(info.fence, guard.fence());
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (woke_at, g) = waiter.await.unwrap();
    g.expect("the waiter gets the lock after the migration").release().await.unwrap();
    assert!(woke_at - released_at < Duration::from_secs(2), "woken by the lease, not the release message");

    // Replica promotion under a held lock.
    let held = client.lock("promoted", LockOptions::renewing(Duration::from_secs(3))).unwrap();
    let guard = held.try_acquire().await.unwrap().expect("free");
    let old_master = cluster.master_of(&key("promoted"));
    let replica = cluster.replica_of(old_master);
    let waiter = {
        let lock = client.lock("promoted", LockOptions::lease(Duration::from_secs(5))).unwrap();
        tokio::spawn(async move { lock.acquire(Some(Duration::from_secs(20))).await })
    };
    let _: String = replica.cmd(&["CLUSTER", "FAILOVER"]);
    replica.wait_for(Duration::from_secs(15), "the replica to be promoted", |r| {
        r.info_field("replication", "role").as_deref() == Some("master")
    });
    // Two renewal periods later the holder still holds it on the new master, or says it may not.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    match guard.state() {
        LockState::Held => {
            let info = client.inspect("promoted").await.unwrap();
            let info = info.expect("Held, but the hold is gone after the promotion");
            assert_eq!(info.fence, guard.fence());
            assert_eq!(replica.cmd::<i64>(&["EXISTS", &key("promoted")]), 1);
        }
        LockState::InDoubt | LockState::Lost => eprintln!("holder reports {:?}", guard.state()),
        other => panic!("unexpected state {other:?}"),
    }
    // A coordinated failover loses no write: the lock is in fact kept.
    assert_eq!(guard.state(), LockState::Held);
    // The waiter subscribed before the promotion still gets the lock after the release.
    guard.release().await.unwrap();
    let g = waiter.await.unwrap().expect("the waiter gets the lock after the promotion");
    g.release().await.unwrap();
    // And new locks in that slot work on the new master.
    let g = client.lock("promoted", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let g = g.acquire(Some(Duration::from_secs(5))).await.unwrap();
    assert_eq!(replica.cmd::<i64>(&["EXISTS", &key("promoted")]), 1);
    g.release().await.unwrap();
    let info = client.force_unlock("promoted").await.unwrap();
    assert!(info.is_none());

    // An uncoordinated failover: kill -9 the master of a held lock; its replica takes over after
    // the node timeout. Writes it had not received are lost, so the holder may keep the lock or
    // learn it may not — never Held with the hold gone.
    let held = client.lock("killed", LockOptions::renewing(Duration::from_secs(3))).unwrap();
    let guard = held.try_acquire().await.unwrap().expect("free");
    let (dead, heir) = {
        let m = cluster.master_of(&key("killed"));
        (m.port(), cluster.replica_of(m).port())
    };
    let i = cluster.nodes.iter().position(|n| n.port() == dead).unwrap();
    cluster.nodes[i].kill9();
    let heir = cluster.nodes.iter().find(|n| n.port() == heir).unwrap();
    heir.wait_for(Duration::from_secs(20), "the replica to take over", |r| {
        r.info_field("replication", "role").as_deref() == Some("master")
    });
    tokio::time::sleep(Duration::from_millis(2200)).await; // two renewal periods on the heir
    match guard.state() {
        LockState::Held => {
            let info = client.inspect("killed").await.unwrap();
            assert_eq!(info.expect("Held, but the hold is gone after the failover").fence, guard.fence());
        }
        LockState::InDoubt | LockState::Lost => eprintln!("holder reports {:?}", guard.state()),
        other => panic!("unexpected state {other:?}"),
    }
    let _ = guard.release().await;
    let g = client.lock("killed", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let g = g.acquire(Some(Duration::from_secs(10))).await.expect("the slot works on the heir");
    assert_eq!(heir.cmd::<i64>(&["EXISTS", &key("killed")]), 1);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_urls_and_options_are_checked() {
    for url in ["redis+cluster://127.0.0.1", "redis+cluster://127.0.0.1:1/0", "redis+cluster://:1"] {
        let e = Client::connect(url, opts()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{url}: {e}");
    }
    // replica_acks is accepted on a cluster (tests/cluster_replica_ack.rs) and validated before
    // any I/O like everywhere else.
    let mut o = opts();
    o.replica_acks = Some(ReplicaAcks::new(1, o.response_timeout));
    let e = Client::connect("redis+cluster://127.0.0.1:1", o).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidDuration, "{e}");
    let mut o = opts();
    o.connect_timeout = Duration::from_millis(200);
    let e = Client::connect("redis+cluster://:s3cret-pw@127.0.0.1:1", o).await.unwrap_err();
    assert!(e.kind().is_transient(), "{e}");
    assert!(!format!("{e} {e:?}").contains("s3cret-pw"));
    // A single server given a cluster URL says so (it used to read as a SCRIPT error).
    let single = RedisServer::start();
    let url = single.url().replacen("redis://", "redis+cluster://", 1);
    let e = Client::connect(&url, opts()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.message().contains("not part of a Redis Cluster"), "{e}");
}

/// Regression: redis 1.8.1 resubscribes a cluster node to all its tracked channels as one
/// `SUBSCRIBE c1 … cN` that expects one reply; the N−1 extra confirmations were read as the
/// replies of the next commands on that node's connection. Two waiters subscribe to two channels
/// of one master, the client's connections to it are killed (the driver reconnects and
/// resubscribes), and locks on that master keep being acquired and released meanwhile: every
/// reply must be the script's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubscription_does_not_shift_script_replies() {
    let cluster = RedisCluster::start(3, 0);
    let client = Client::connect(&cluster.url(1), opts()).await.expect("connect to the cluster");
    // Lock names whose slots share one master: two waited on, four busy.
    let port = cluster.master_of(&key("resub-0")).port();
    let names: Vec<String> = (0..200)
        .map(|i| format!("resub-{i}"))
        .filter(|n| cluster.master_of(&key(n)).port() == port)
        .take(6)
        .collect();
    assert_eq!(names.len(), 6);
    let node = cluster.master_of(&key(&names[0]));
    let mut held = Vec::new();
    let mut waiters = Vec::new();
    for name in &names[..2] {
        let g = client.lock(name, LockOptions::lease(Duration::from_secs(30))).unwrap().try_acquire().await;
        held.push(g.unwrap().expect("free"));
        let lock = client.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap();
        waiters
            .push(tokio::spawn(async move { lock.acquire(Some(Duration::from_secs(60))).await.map(|_| ()) }));
    }
    let start = Instant::now();
    while node.cmd::<Vec<String>>(&["PUBSUB", "SHARDCHANNELS", "ferrolock:*"]).len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(5), "the waiters never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut busy = Vec::new();
    for name in &names[2..] {
        let (client, stop, name) = (client.clone(), stop.clone(), name.clone());
        busy.push(tokio::spawn(async move {
            let lock = client.lock(&name, LockOptions::lease(Duration::from_secs(5))).unwrap();
            let mut rounds = 0u32;
            while !stop.load(Ordering::Relaxed) {
                // The connection kills may fail a command (transient), make a release's outcome
                // unknown (a retry then finds the hold gone: LOST) or leave a hold to its lease
                // (busy); a reply read for another command shows up as PROTOCOL.
                let released = match lock.try_acquire().await {
                    Ok(Some(g)) => g.release().await,
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                };
                if let Err(e) = released {
                    assert_ne!(e.kind(), ErrorKind::Protocol, "{name}: a shifted reply: {e}");
                }
                rounds += 1;
            }
            rounds
        }));
    }
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let _: redis::Value = node.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
        let _: redis::Value = node.cmd(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    for b in busy {
        assert!(b.await.expect("a busy task panicked") > 0);
    }
    for g in held {
        let _ = g.release().await;
    }
    for w in waiters {
        if let Err(e) = w.await.unwrap() {
            assert_ne!(e.kind(), ErrorKind::Protocol, "a waiter: a shifted reply: {e}");
        }
    }
}

// Fair mode on a cluster: the waiters queue on the lock's master and each release hands the
// lock on with a sharded message, so the waiters of two other clients get it in arrival order
// with no try after the release. (The waiters' leases are no longer than a hand-over's offer, so
// they take their grants without confirming them: fair.rs counts the confirmations.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_mode_hands_on_over_sharded_messages() {
    let cluster = RedisCluster::start(3, 0);
    let fair = LockOptions::lease(Duration::from_secs(10)).with_fair(true);
    let waiter_fair = LockOptions::lease(Duration::from_secs(2)).with_fair(true);
    let node = cluster.master_of(&key("fair"));
    let holder = Client::connect(&cluster.url(1), opts()).await.unwrap().lock("fair", fair).unwrap();
    // Once free and released first, so the release script is cached on the node (a first
    // EVALSHA would count twice: NOSCRIPT, then EVAL).
    holder.try_acquire().await.unwrap().expect("free").release().await.unwrap();
    let g = holder.try_acquire().await.unwrap().expect("free");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..2 {
        let lock = Client::connect(&cluster.url(2), opts()).await.unwrap().lock("fair", waiter_fair).unwrap();
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let g = lock.acquire(Some(Duration::from_secs(10))).await.unwrap();
            order.lock().unwrap().push(i);
            g.release().await.unwrap();
        }));
        let start = Instant::now();
        while node.cmd::<i64>(&["LLEN", &format!("{}:queue", key("fair"))]) != i as i64 + 1 {
            assert!(start.elapsed() < Duration::from_secs(5), "waiter {i} never queued");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let scripts_before = calls(node, "evalsha") + calls(node, "eval");
    let spublish_before = calls(node, "spublish");
    g.release().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1], "grants out of arrival order");
    let scripts = calls(node, "evalsha") + calls(node, "eval") - scripts_before;
    assert_eq!(scripts, 3, "{scripts} scripts for 3 releases: a waiter tried again");
    assert_eq!(calls(node, "spublish") - spublish_before, 3, "each release sends one sharded message");
}

// A slot master that hangs with its connections open (SIGSTOP; a partition dropping packets
// looks the same) is failed over by the cluster; it sends no `sunsubscribe` and nothing closes.
// The driver never rebuilds its slot map on a timeout, so every command for that slot kept going
// to the hung node: the holder could not release, the waiter timed out with the lock free on the
// new master. A timeout now makes the client check the slot's master and rebuild the map, and
// every subscription left on a node that no longer serves its slot moves (checked after such a
// timeout and once a second while anything is subscribed): waiters in the holder's client
// (`control`, `own`: a lock whose release did not time out) and in another client that sent
// nothing meanwhile (`subject`) get the lock at once, not at the holder's 30 s bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_master_failed_over_is_left_for_its_heir() {
    let cluster = RedisCluster::start(3, 1);
    // Two locks whose slots the same master serves.
    let first = "hung-0";
    let master = cluster.master_of(&key(first));
    let mut same =
        (1..400).map(|i| format!("hung-{i}")).filter(|n| cluster.master_of(&key(n)).port() == master.port());
    let other = same.next().expect("a second name on the same master");
    let third = same.next().expect("a third name on the same master");
    let heir = cluster.replica_of(master);
    let holder_c = Client::connect(&cluster.url(3), opts()).await.unwrap();
    let waiter_c = Client::connect(&cluster.url(3), opts()).await.unwrap();
    let lease = LockOptions::lease(Duration::from_secs(30));
    // `control`: held and waited on in holder_c; `subject`: held in holder_c, waited on in waiter_c.
    let (control, subject) = (first.to_owned(), other);
    let g_control = holder_c.lock(&control, lease).unwrap().try_acquire().await.unwrap().unwrap();
    let g_subject = holder_c.lock(&subject, lease).unwrap().try_acquire().await.unwrap().unwrap();
    // `own`: held and waited on in holder_c too, like `control`, but released after it.
    let own = third;
    let g_own = holder_c.lock(&own, lease).unwrap().try_acquire().await.unwrap().unwrap();
    let _: i64 = master.cmd(&["WAIT", "1", "1000"]);

    let wait = Some(Duration::from_secs(60));
    let short = LockOptions::lease(Duration::from_secs(5));
    let l = holder_c.lock(&control, short).unwrap();
    let control_waiter = tokio::spawn(async move {
        let r = l.acquire(wait).await;
        (Instant::now(), r.map(|g| g.fence()))
    });
    let l = holder_c.lock(&own, short).unwrap();
    let own_waiter = tokio::spawn(async move {
        let r = l.acquire(wait).await;
        (Instant::now(), r.map(|g| g.fence()))
    });
    let l = waiter_c.lock(&subject, short).unwrap();
    let subject_waiter = tokio::spawn(async move {
        let r = l.acquire(wait).await;
        (Instant::now(), r.map(|g| g.fence()))
    });
    for name in [&control, &subject, &own] {
        let channel = format!("{}:released", key(name));
        let start = Instant::now();
        while master.cmd::<Vec<redis::Value>>(&["PUBSUB", "SHARDNUMSUB", &channel]).get(1)
            != Some(&redis::Value::Int(1))
        {
            assert!(start.elapsed() < Duration::from_secs(5), "a waiter never subscribed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // both waiters asleep on the 30 s PTTL

    master.pause();
    let start = Instant::now();
    while heir.info_field("replication", "role").as_deref() != Some("master") {
        assert!(start.elapsed() < Duration::from_secs(30), "no failover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Release the control first: its timeout makes holder_c check the slot and move its
    // subscription; then the subject (the map is fixed by then).
    let mut release_times = Vec::new();
    for g in [&g_control, &g_subject, &g_own] {
        let mut ok = false;
        for _ in 0..6 {
            match g.release().await {
                Ok(()) => {
                    ok = true;
                    break;
                }
                Err(e) => eprintln!("release: {e}"),
            }
        }
        assert!(ok, "the holder never released on the heir");
        release_times.push(Instant::now());
    }
    eprintln!("released after {:?}", release_times.iter().map(|t| *t - start).collect::<Vec<_>>());

    let (t_control, r_control) =
        tokio::time::timeout(Duration::from_secs(10), control_waiter).await.expect("control waiter").unwrap();
    assert!(r_control.is_ok(), "{r_control:?}");
    let control_delay = t_control.saturating_duration_since(release_times[0]);
    eprintln!("control waiter (holder's client) got the lock {control_delay:?} after the release");

    let (t_subject, r_subject) = subject_waiter.await.unwrap();
    let (t_own, r_own) = own_waiter.await.unwrap();
    master.resume();
    let subject_delay = t_subject.saturating_duration_since(release_times[1]);
    let own_delay = t_own.saturating_duration_since(release_times[2]);
    eprintln!(
        "subject waiter (another client) got the lock {subject_delay:?} after the release: {r_subject:?}"
    );
    eprintln!(
        "own waiter (holder's client, 2nd lock) got the lock {own_delay:?} after the release: {r_own:?}"
    );
    assert!(control_delay < Duration::from_secs(3), "control: {control_delay:?}");
    assert!(r_subject.is_ok() && r_own.is_ok());
    assert!(
        subject_delay < Duration::from_secs(3) && own_delay < Duration::from_secs(3),
        "waiters slept with the lock free on the new master: another client's {subject_delay:?}, \
         a second lock of the holder's client {own_delay:?}"
    );
}

// A repair of a sharded subscription checks that the channel is still wanted, then connects to
// the node and subscribes there. The sweep may unsubscribe the idle channel in between (here:
// with the node's subscriber connection lost, there is nothing to send it on): the repair's
// SSUBSCRIBE then lands after it and stays on the server with nobody wanting it (the notifier
// has forgotten the channel), for the client's life. A test knob holds the repair in that window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_overtaken_by_the_sweep_leaves_no_subscription() {
    let cluster = RedisCluster::start(3, 0);
    let mut o = opts();
    o.subscription_linger = Duration::from_millis(200);
    let client = Client::connect(&cluster.url(1), o).await.expect("connect to the cluster");
    let name = "repair-vs-sweep";
    let channel = format!("{}:released", key(name));
    let node = cluster.master_of(&key(name));
    let shard_subs = |s: &RedisServer| -> i64 {
        let v: Vec<redis::Value> = s.cmd(&["PUBSUB", "SHARDNUMSUB", &channel]);
        match v.get(1) {
            Some(redis::Value::Int(n)) => *n,
            other => panic!("PUBSUB SHARDNUMSUB: {other:?}"),
        }
    };
    let holder = Client::connect(&cluster.url(1), opts()).await.unwrap();
    let guard = holder.lock(name, LockOptions::lease(Duration::from_secs(30))).unwrap().try_acquire().await;
    let guard = guard.unwrap().expect("free");
    let lock = client.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap();
    let waiter = tokio::spawn(async move { lock.acquire(Some(Duration::from_secs(60))).await.map(|_| ()) });
    let start = Instant::now();
    while shard_subs(node) != 1 {
        assert!(start.elapsed() < Duration::from_secs(10), "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Lose the subscriber connection: the repair starts and waits at the knob, its node picked.
    client.set_cluster_subscribe_pause_for_tests(true);
    let list: String = node.cmd(&["CLIENT", "LIST"]);
    let ids: Vec<&str> = list
        .lines()
        .filter(|l| l.contains(" ssub=") && !l.contains(" ssub=0 "))
        .filter_map(|l| l.split_whitespace().find_map(|f| f.strip_prefix("id=")))
        .collect();
    assert_eq!(ids.len(), 1, "{list}");
    let _: redis::Value = node.cmd(&["CLIENT", "KILL", "ID", ids[0]]);
    let start = Instant::now();
    while client.cluster_repairs_for_tests() != (1, 1) {
        assert!(start.elapsed() < Duration::from_secs(10), "no repair reached the pause");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The waiter leaves; the sweep unsubscribes the idle channel.
    waiter.abort();
    let _ = waiter.await;
    let start = Instant::now();
    while client.table_sizes_for_tests().0 != 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "the sweep never took the channel back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The repair goes on.
    client.set_cluster_subscribe_pause_for_tests(false);
    let start = Instant::now();
    while client.cluster_repairs_for_tests() != (0, 0) {
        assert!(start.elapsed() < Duration::from_secs(10), "the repair never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(client.table_sizes_for_tests().0, 0);
    for m in &cluster.nodes {
        assert_eq!(shard_subs(m), 0, "a subscription nobody wants is left on {}", m.port());
    }
    guard.release().await.unwrap();
}

// One master hangs: the same client's renewing locks on the other masters stay held. The
// watchdog renewed a cluster's locks as one concurrent batch that failed as a whole on one
// command's timeout, so every lock of the round went InDoubt and, at its local deadline, Lost,
// and its healthy master let it expire (cluster review). The lock on the hung master is the
// control: it is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_master_costs_only_its_own_locks_their_renewal() {
    let cluster = RedisCluster::start(3, 0);
    for n in &cluster.nodes {
        let _: String = n.cmd(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let name_on = |node: &RedisServer, prefix: &str| {
        (0..2000)
            .map(|i| format!("{prefix}-{i}"))
            .find(|x| cluster.master_of(&key(x)).port() == node.port())
            .unwrap()
    };
    let hung = cluster.master_of(&key("hung-renewal"));
    let healthy = cluster.nodes.iter().find(|n| n.port() != hung.port()).unwrap();
    let (on_hung, on_healthy) = (name_on(hung, "renew-h"), name_on(healthy, "renew-ok"));
    let client = Client::connect(&cluster.url(3), opts()).await.unwrap();
    let ttl = Duration::from_millis(2000);
    let g_hung =
        client.lock(&on_hung, LockOptions::renewing(ttl)).unwrap().try_acquire().await.unwrap().unwrap();
    let g_ok =
        client.lock(&on_healthy, LockOptions::renewing(ttl)).unwrap().try_acquire().await.unwrap().unwrap();
    hung.pause();
    let t0 = Instant::now();
    let mut worst = LockState::Held;
    while t0.elapsed() < Duration::from_millis(4500) {
        if g_ok.state() != LockState::Held {
            worst = g_ok.state();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let hung_state = g_hung.state();
    hung.resume();
    assert_eq!(hung_state, LockState::Lost, "control: the lock on the hung master");
    assert_eq!(worst, LockState::Held, "the lock on a healthy master was given up");
    let pttl: i64 = healthy.cmd(&["PTTL", &key(&on_healthy)]);
    assert!(pttl > 0, "the healthy master's hold expired (PTTL {pttl})");
    g_ok.release().await.unwrap();
}

// Idle release channels on a master that hangs do not hold up waiters on the other masters.
// The sweep that unsubscribes idle channels holds the lock every new subscription needs, and on
// a cluster it unsubscribed them one at a time, each waiting out a response timeout: with 8
// idle channels, waiters on a healthy master woke seconds after the release, or timed out
// "before the lock was free" (cluster review).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_channels_on_a_hung_master_do_not_hold_up_waiters_elsewhere() {
    let cluster = RedisCluster::start(3, 0);
    for n in &cluster.nodes {
        let _: String = n.cmd(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let names_on = |node: &RedisServer, prefix: &str, n: usize| -> Vec<String> {
        (0..4000)
            .map(|i| format!("{prefix}-{i}"))
            .filter(|x| cluster.master_of(&key(x)).port() == node.port())
            .take(n)
            .collect()
    };
    let hung = cluster.master_of(&key("idle-hung"));
    let healthy = cluster.nodes.iter().find(|n| n.port() != hung.port()).unwrap();
    let holder = Client::connect(&cluster.url(3), opts()).await.unwrap();
    let mut o = opts();
    o.subscription_linger = Duration::from_millis(1000);
    let client = Client::connect(&cluster.url(3), o).await.unwrap();
    let mut held = Vec::new();
    for n in names_on(hung, "idle-a", 8) {
        held.push(
            holder
                .lock(&n, LockOptions::lease(Duration::from_secs(60)))
                .unwrap()
                .try_acquire()
                .await
                .unwrap()
                .unwrap(),
        );
        // Waited on once (subscribed), then idle.
        assert!(
            client
                .lock(&n, LockOptions::default())
                .unwrap()
                .acquire(Some(Duration::from_millis(50)))
                .await
                .is_err()
        );
    }
    let on_healthy = names_on(healthy, "idle-b", 40); // before the pause: it asks every node
    hung.pause();
    let stopped = Instant::now();
    let mut slowest = Duration::ZERO;
    for name in on_healthy {
        if stopped.elapsed() > Duration::from_secs(6) {
            break;
        }
        let g = holder
            .lock(&name, LockOptions::lease(Duration::from_secs(30)))
            .unwrap()
            .try_acquire()
            .await
            .unwrap()
            .unwrap();
        let l = client.lock(&name, LockOptions::lease(Duration::from_secs(5))).unwrap();
        let w = tokio::spawn(async move {
            (l.acquire(Some(Duration::from_secs(4))).await.map(|g| g.fence()), Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        g.release().await.unwrap();
        let (r, at) = w.await.unwrap();
        r.unwrap_or_else(|e| {
            panic!("{:?} after the stop: a waiter on a healthy master: {e}", released - stopped)
        });
        slowest = slowest.max(at.saturating_duration_since(released));
    }
    hung.resume();
    assert!(
        slowest < Duration::from_millis(1500),
        "a waiter on a healthy master woke {slowest:?} after the release"
    );
}

// An idle release channel is unsubscribed on its node (SUNSUBSCRIBE), not only forgotten by the
// client: the node would keep the subscription, and send its messages, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_sharded_channel_is_unsubscribed_on_its_node() {
    let cluster = RedisCluster::start(3, 0);
    let mut o = opts();
    o.subscription_linger = Duration::from_millis(200);
    let client = Client::connect(&cluster.url(1), o).await.unwrap();
    let holder = Client::connect(&cluster.url(1), opts()).await.unwrap();
    let name = "idle-unsub";
    let (channel, node) = (format!("{}:released", key(name)), cluster.master_of(&key(name)));
    let subs = || shard_subscribers(node, &channel);
    let held = holder.lock(name, LockOptions::lease(Duration::from_secs(30))).unwrap();
    let _g = held.try_acquire().await.unwrap().expect("free");
    let lock = client.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap();
    let waiter =
        tokio::spawn(async move { lock.acquire(Some(Duration::from_millis(800))).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(subs(), 1, "control: the waiter is subscribed on the node");
    assert!(waiter.await.unwrap().is_err());
    let start = Instant::now();
    while client.table_sizes_for_tests().0 != 0 || subs() != 0 {
        let table = client.table_sizes_for_tests().0;
        assert!(start.elapsed() < Duration::from_secs(5), "left subscribed: table {table}, node {}", subs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `PUBSUB SHARDNUMSUB channel` on `node`.
fn shard_subscribers(node: &RedisServer, channel: &str) -> i64 {
    let v: Vec<redis::Value> = node.cmd(&["PUBSUB", "SHARDNUMSUB", channel]);
    match v.get(1) {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("SHARDNUMSUB replied {other:?}"),
    }
}

// A client that only takes locks (no waiter, nothing subscribed) follows a hung master's
// failover: a command's timeout makes it look up the slot's master (the once-a-second look runs
// only while a channel is subscribed), and so does the next hung master's, on another slot (a
// flag left set after the first look used to stop every later one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_master_failovers_are_followed_by_a_client_without_waiters() {
    let cluster = RedisCluster::start(3, 1);
    let first = "hung-twice-0";
    let m0 = cluster.master_of(&key(first)).port();
    let second = (1..400)
        .map(|i| format!("hung-twice-{i}"))
        .find(|n| cluster.master_of(&key(n)).port() != m0)
        .expect("a name on another master");
    let client = Client::connect(&cluster.url(3), opts()).await.unwrap();
    for name in [first.to_owned(), second] {
        let master = cluster.master_of(&key(&name));
        let heir = cluster.replica_of(master);
        let lock = client.lock(&name, LockOptions::lease(Duration::from_secs(5))).unwrap();
        lock.try_acquire().await.unwrap().expect("free").release().await.unwrap();
        master.pause();
        let start = Instant::now();
        while heir.info_field("replication", "role").as_deref() != Some("master") {
            assert!(start.elapsed() < Duration::from_secs(30), "no failover");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let r = lock.acquire(Some(Duration::from_secs(8))).await;
        master.resume();
        let g = r.unwrap_or_else(|e| panic!("{name}: the slot did not move to the heir: {e}"));
        assert_eq!(heir.cmd::<i64>(&["EXISTS", &key(&name)]), 1, "{name}: not held on the heir");
        g.release().await.unwrap();
    }
}

// A release published while the waiter's subscription is being repaired (its connection was
// killed) is not missed: once subscribed again, the repair wakes the channel's waiters, whose
// try finds the lock free. Missed, the waiter slept on the holder's 30 s lease, past its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_a_subscription_repair_is_not_missed() {
    let cluster = RedisCluster::start(3, 0);
    let client = Client::connect(&cluster.url(1), opts()).await.unwrap();
    let holder = Client::connect(&cluster.url(1), opts()).await.unwrap();
    let name = "release-in-gap";
    let (channel, node) = (format!("{}:released", key(name)), cluster.master_of(&key(name)));
    let held = holder.lock(name, LockOptions::lease(Duration::from_secs(30))).unwrap();
    let g = held.try_acquire().await.unwrap().expect("free");
    let lock = client.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap();
    let waiter = tokio::spawn(async move { lock.acquire(Some(Duration::from_secs(25))).await.map(|_| ()) });
    let start = Instant::now();
    while shard_subscribers(node, &channel) != 1 {
        assert!(start.elapsed() < Duration::from_secs(10), "never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // asleep on the 30 s lease
    client.set_cluster_subscribe_pause_for_tests(true);
    let list: String = node.cmd(&["CLIENT", "LIST"]);
    let id = list
        .lines()
        .filter(|l| l.contains(" ssub=") && !l.contains(" ssub=0 "))
        .find_map(|l| l.split_whitespace().find_map(|f| f.strip_prefix("id=")).map(str::to_owned))
        .expect("the subscriber's connection");
    let _: redis::Value = node.cmd(&["CLIENT", "KILL", "ID", &id]);
    let start = Instant::now();
    while client.cluster_repairs_for_tests() != (1, 1) {
        assert!(start.elapsed() < Duration::from_secs(10), "no repair reached the pause");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    g.release().await.unwrap(); // its SPUBLISH reaches no subscriber of `client`
    tokio::time::sleep(Duration::from_millis(200)).await;
    client.set_cluster_subscribe_pause_for_tests(false);
    waiter.await.unwrap().expect("the waiter gets the lock once subscribed again");
}

// On a cluster a lock name must not start with '}': `<prefix>{}…` is an empty hash tag, so the
// lock's keys would hash to different slots and every script fail with CROSSSLOT. It is refused
// before any I/O (INVALID_NAME); a name that starts with '{', or has '}' further on, is an
// ordinary name (the check looked at the wrong brace and no test noticed: mutation review).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_name_starting_with_a_closing_brace_is_refused_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let client = Client::connect(&cluster.url(1), opts()).await.unwrap();
    for name in ["}", "}x", "}{y}"] {
        let e = client.lock(name, LockOptions::default()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{name}: {e}");
        assert_eq!(client.inspect(name).await.unwrap_err().kind(), ErrorKind::InvalidName, "{name}");
    }
    for name in ["{", "{x", "x}", "a}b"] {
        let lock = client.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap();
        let g = lock.acquire(Some(Duration::ZERO)).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        g.release().await.unwrap();
    }
}
