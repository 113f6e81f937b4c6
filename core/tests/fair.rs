//! Fair mode (docs/PROTOCOL.md "Fair mode") against real redis-server processes: a server-side
//! queue of waiters, each release handing the lock straight to the oldest one.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions, LockState};
use redis::AsyncCommands;

const LEASE: Duration = Duration::from_secs(10);

fn opts(fair: bool) -> LockOptions {
    LockOptions::lease(LEASE).with_fair(fair)
}

async fn queue_len(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> usize {
    conn.llen(format!("ferrolock:{{{name}}}:queue")).await.unwrap()
}

/// Wait (bounded) until `name`'s queue holds `n` waiters.
async fn until_queued(conn: &mut redis::aio::MultiplexedConnection, name: &str, n: usize) {
    let t0 = Instant::now();
    while queue_len(conn, name).await != n {
        assert!(t0.elapsed() < Duration::from_secs(5), "queue of {name} never reached {n}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Queue `token` on `name` with a raw acquire call, as a client that then died would have: its
/// entry stays for `stay_ms` (what was left of its wait) and a hand-over gives it a lease of
/// `lease_ms`.
async fn queue_dead_waiter(
    data: &mut redis::aio::MultiplexedConnection,
    name: &str,
    token: &str,
    (lease_ms, stay_ms): (u64, u64),
    offer_ms: Option<u64>,
) {
    let script = redis::Script::new(include_str!("../scripts/acquire.lua"));
    let mut inv = script.key(format!("ferrolock:{{{name}}}"));
    inv.key(format!("ferrolock:{{{name}}}:fence"))
        .key(format!("ferrolock:{{{name}}}:queue"))
        .key(format!("ferrolock:{{{name}}}:waiters"))
        .arg(token)
        .arg(lease_ms)
        .arg(60_000)
        .arg(10)
        .arg(stay_ms);
    if let Some(offer) = offer_ms {
        inv.arg("").arg("").arg(offer); // ARGV[8], as a current client sends it
    }
    let _: redis::Value = inv.invoke_async(data).await.unwrap();
}

/// A holder, then `k` waiters (one client each, leases of `lease`) started one after another;
/// returns the order in which they got the lock and the EVALSHA calls made from the holder's
/// release on.
async fn handoff_order(
    server: &RedisServer,
    name: &str,
    fair: bool,
    k: usize,
    lease: Duration,
) -> (Vec<usize>, u64) {
    let mut data = data_conn(server).await;
    let opts = |fair| LockOptions::lease(lease).with_fair(fair);
    let holder = connect(server).await.lock(name, opts(fair)).unwrap();
    let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..k {
        let lock = connect(server).await.lock(name, opts(fair)).unwrap();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock.acquire(Some(Duration::from_secs(20))).await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            g.release().await.unwrap();
        }));
        if fair {
            until_queued(&mut data, name, i + 1).await;
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await; // subscribed and waiting
        }
    }
    let before = evalsha_calls(server);
    g.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let calls = evalsha_calls(server) - before;
    let order = order.lock().unwrap().clone();
    (order, calls)
}

// Waiters of different clients get the lock in arrival order, each from the previous holder's
// release alone: the only scripts run after the first release are the releases (with leases no
// longer than the hand-over's offer), or the releases and one extend per grant confirming the
// offer (longer leases); never another try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_granted_in_arrival_order_without_another_try() {
    let server = RedisServer::start();
    let short = Duration::from_secs(2); // the offer (timing::GRANT_OFFER): nothing to confirm
    let (order, calls) = handoff_order(&server, "fifo", true, 5, short).await;
    assert_eq!(order, vec![0, 1, 2, 3, 4], "grants out of arrival order");
    assert_eq!(calls, 6, "{calls} scripts for 6 releases: a waiter tried again");
    let mut data = data_conn(&server).await;
    assert_eq!(queue_len(&mut data, "fifo").await, 0);
    let left: bool = data.exists("ferrolock:{fifo}:waiters").await.unwrap();
    assert!(!left, "the waiter table outlived its waiters");
    // The extend script cached first (a NOSCRIPT would count as one more EVALSHA).
    let extend = redis::Script::new(include_str!("../scripts/extend.lua"));
    let _: String = extend.prepare_invoke().load_async(&mut data).await.unwrap();
    let (order, calls) = handoff_order(&server, "fifo-long", true, 5, LEASE).await;
    assert_eq!(order, vec![0, 1, 2, 3, 4], "grants out of arrival order");
    assert_eq!(calls, 11, "{calls} scripts for 6 releases and 5 confirmations: a waiter tried again");

    // Control: without fair mode every grant costs its waiter a try after the release.
    let (_, calls) = handoff_order(&server, "nofifo", false, 5, LEASE).await;
    assert!(calls >= 11, "control: {calls} scripts; the count above cannot tell the modes apart");
}

/// 8 clients loop acquire → hold 1 ms → release on one name; returns who got each grant.
async fn take_turns(server: &RedisServer, name: &str, fair: bool) -> Vec<usize> {
    let inside = Arc::new(Mutex::new(0));
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let lock = connect(server).await.lock(name, opts(fair)).unwrap();
        let (inside, got) = (inside.clone(), got.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let g = lock.acquire(Some(Duration::from_secs(20))).await.unwrap();
                {
                    let mut n = inside.lock().unwrap();
                    *n += 1;
                    assert_eq!(*n, 1, "two holders at once");
                }
                got.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(1)).await;
                *inside.lock().unwrap() -= 1;
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 160);
    got
}

// 8 clients looping: no overlap, and each gets its turn: the releaser, trying again at once,
// queues behind the others instead of barging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_looping_take_turns() {
    let server = RedisServer::start();
    let got = take_turns(&server, "turns", true).await;
    // Once all 8 are queued, the order is a rotation: no client gets two turns in a row.
    let repeats = got.windows(2).skip(8).filter(|w| w[0] == w[1]).count();
    assert_eq!(repeats, 0, "a releaser barged ahead of the queue: {got:?}");

    // Control: without fair mode a releaser of one client races the others' woken waiters.
    let got = take_turns(&server, "barge", false).await;
    let repeats = got.windows(2).skip(8).filter(|w| w[0] == w[1]).count();
    eprintln!("without fair mode: {repeats} repeated turns of 152");
    assert!(repeats > 0, "control: no barging seen without fair mode");
}

// A waiter that gives up (its wait ends, or its future is dropped) leaves the queue, so the next
// release goes to a waiter that is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    let server = RedisServer::start();
    let mut data = data_conn(&server).await;
    let holder = connect(&server).await.lock("leave", opts(true)).unwrap();
    let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();

    let timed = connect(&server).await.lock("leave", opts(true)).unwrap();
    let err = timed.acquire(Some(Duration::from_millis(150))).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AcquireTimeout);
    assert_eq!(queue_len(&mut data, "leave").await, 0, "a timed-out waiter stayed queued");

    let cancelled = connect(&server).await.lock("leave", opts(true)).unwrap();
    let r = tokio::time::timeout(Duration::from_millis(150), cancelled.acquire(None)).await;
    assert!(r.is_err(), "the acquire should still be waiting");
    until_queued(&mut data, "leave", 0).await;

    let waiter = connect(&server).await.lock("leave", opts(true)).unwrap();
    let w = tokio::spawn(async move { waiter.acquire(Some(Duration::from_secs(5))).await?.release().await });
    until_queued(&mut data, "leave", 1).await;
    let t0 = Instant::now();
    g.release().await.unwrap();
    w.await.unwrap().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "the release went to a waiter that had left");

    // Control: a queued waiter that never leaves (a raw script call, as by a client that died)
    // is handed the lock, and the live waiter behind it does not get it within the same bound.
    let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
    queue_dead_waiter(&mut data, "leave", "dead-token", (10_000, 60_000), None).await;
    let waiter = connect(&server).await.lock("leave", opts(true)).unwrap();
    let w = tokio::spawn(async move { waiter.acquire(Some(Duration::from_secs(2))).await.map(|_| ()) });
    until_queued(&mut data, "leave", 2).await;
    g.release().await.unwrap();
    let owner: Option<String> = data.hget("ferrolock:{leave}", "owner").await.unwrap();
    assert_eq!(owner.as_deref(), Some("dead-token"), "control: the stale entry was not granted");
    let err = w.await.unwrap().unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::AcquireTimeout,
        "control: the waiter got a lock held by the dead entry"
    );
}

// A grant whose message never reached the waiter (here: made by hand, without a message) is
// found by the waiter's next try (at the holder's lease bound) and counted once.
#[tokio::test]
async fn a_grant_the_waiter_never_heard_of_is_taken_once() {
    let server = RedisServer::start();
    let mut data = data_conn(&server).await;
    let holder = connect(&server)
        .await
        .lock("quiet", LockOptions::lease(Duration::from_millis(400)).with_fair(true))
        .unwrap();
    let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
    let waiter = connect(&server).await.lock("quiet", opts(true)).unwrap();
    let w = tokio::spawn(async move {
        let g = waiter.acquire(Some(Duration::from_secs(5))).await.unwrap();
        let count = g.count();
        g.release().await.unwrap();
        count
    });
    until_queued(&mut data, "quiet", 1).await;
    let token: String = data.lindex("ferrolock:{quiet}:queue", 0).await.unwrap();
    let _: () = redis::pipe()
        .atomic()
        .del("ferrolock:{quiet}:queue")
        .del("ferrolock:{quiet}:waiters")
        .hset_multiple("ferrolock:{quiet}", &[("owner", token.as_str()), ("count", "1"), ("fence", "9")])
        .pexpire("ferrolock:{quiet}", 10_000)
        .query_async(&mut data)
        .await
        .unwrap();
    assert_eq!(w.await.unwrap(), 1, "the unseen grant was counted twice");
    let held: bool = data.exists("ferrolock:{quiet}").await.unwrap();
    assert!(!held, "one release did not free the lock");
    drop(g);
}

// A grant message can reach a waiter late: it travels on the subscriber connection, its try's
// reply on another. One announcing an earlier grant to the waiter's token (released since, and
// the lock passed on) and read after a newer try found another holder must not be taken: the
// waiter would hold the lock beside that holder. Published by hand here, as that late copy.
#[tokio::test]
async fn a_late_message_of_an_earlier_grant_is_not_taken() {
    let server = RedisServer::start();
    let (a, b) = (connect(&server).await, connect(&server).await);
    let mine = a.lock("late-grant", opts(true)).unwrap();
    let first = mine.acquire(Some(Duration::ZERO)).await.unwrap();
    let (token, old_fence) = (a.inspect("late-grant").await.unwrap().unwrap().owner, first.fence());
    first.release().await.unwrap();
    let theirs = b.lock("late-grant", opts(true)).unwrap().acquire(Some(Duration::ZERO)).await.unwrap();
    let waiting = tokio::spawn(async move { mine.acquire(Some(Duration::from_millis(1500))).await });
    let mut data = data_conn(&server).await;
    until_queued(&mut data, "late-grant", 1).await;
    let late = [b"G:".as_slice(), &token, format!(":{old_fence}:10000").as_bytes()].concat();
    let _: i64 = data.publish("ferrolock:{late-grant}:released", late).await.unwrap();
    match waiting.await.unwrap() {
        Ok(g) => {
            panic!("took a stale grant (fence {}) while fence {} holds the lock", g.fence(), theirs.fence())
        }
        Err(e) => assert_eq!(e.kind(), ErrorKind::AcquireTimeout, "{e}"),
    }
    theirs.release().await.unwrap();
}

// A grant message read long after the waiter's last try has its lease restarted before it is
// taken (an owner-checked extend); when that extend finds another owner, the waiter tries again
// (it used to take the grant anyway while the bound from its try had not run out).
#[tokio::test]
async fn a_grant_the_restart_finds_gone_is_not_taken() {
    let server = RedisServer::start();
    let (a, b) = (connect(&server).await, connect(&server).await);
    let mine = a.lock("gone-grant", LockOptions::lease(Duration::from_millis(900)).with_fair(true)).unwrap();
    let first = mine.acquire(Some(Duration::ZERO)).await.unwrap();
    let token = a.inspect("gone-grant").await.unwrap().unwrap().owner;
    first.release().await.unwrap();
    let theirs = b.lock("gone-grant", opts(true)).unwrap().acquire(Some(Duration::ZERO)).await.unwrap();
    let waiting = tokio::spawn(async move { mine.acquire(Some(Duration::from_millis(1500))).await });
    let mut data = data_conn(&server).await;
    until_queued(&mut data, "gone-grant", 1).await;
    tokio::time::sleep(Duration::from_millis(400)).await; // past a third of the waiter's lease
    let grant = [b"G:".as_slice(), &token, format!(":{}:900", theirs.fence() + 1).as_bytes()].concat();
    let _: i64 = data.publish("ferrolock:{gone-grant}:released", grant).await.unwrap();
    match waiting.await.unwrap() {
        Ok(g) => panic!("took a grant (fence {}) while fence {} holds the lock", g.fence(), theirs.fence()),
        Err(e) => assert_eq!(e.kind(), ErrorKind::AcquireTimeout, "{e}"),
    }
    theirs.release().await.unwrap();
}

/// A holds (6 s renewing lease, renewed at 2 s); B queues; an administrator force-unlocks, which
/// hands the lock to B. Then, if `reenter`, A re-enters with a wait that is cancelled after
/// 300 ms. B releases. Returns A's queue entries before B's release, the owner after it (is it
/// A?), and A's original guard's state at 2.6 s (after its first renewal).
async fn reentry_after_a_forced_unlock(name: &str, reenter: bool) -> (usize, bool, LockState) {
    let server = RedisServer::start();
    let mut data = data_conn(&server).await;
    let (ca, cb, admin) = (connect(&server).await, connect(&server).await, connect(&server).await);
    let a = ca.lock(name, LockOptions::renewing(Duration::from_secs(6)).with_fair(true)).unwrap();
    let b = cb.lock(name, LockOptions::lease(Duration::from_secs(10)).with_fair(true)).unwrap();
    let t0 = Instant::now();
    let ga = a.acquire(Some(Duration::ZERO)).await.unwrap();
    let a_token = ca.inspect(name).await.unwrap().unwrap().owner;
    let wb = tokio::spawn(async move { b.acquire(Some(Duration::from_secs(10))).await.unwrap() });
    until_queued(&mut data, name, 1).await;
    admin.force_unlock(name).await.unwrap().expect("A held it");
    let gb = wb.await.unwrap(); // handed to B by the forced unlock
    if reenter {
        let r = tokio::time::timeout(Duration::from_millis(300), a.acquire(None)).await;
        assert!(r.is_err(), "the re-entry should still be waiting for B");
        tokio::time::sleep(Duration::from_millis(200)).await; // its leave, if any, is done
    }
    let queued = queue_len(&mut data, name).await;
    gb.release().await.unwrap();
    let owner = admin.inspect(name).await.unwrap().map(|i| i.owner);
    let owner_is_a = owner.as_deref() == Some(a_token.as_slice());
    assert!(t0.elapsed() < Duration::from_millis(1900), "too slow: A's first renewal came first");
    tokio::time::sleep((t0 + Duration::from_millis(2600)).saturating_duration_since(Instant::now())).await;
    (queued, owner_is_a, ga.state())
}

// A fair re-entry (the handle still counts a live hold) whose try finds another owner (here: its
// hold was force-unlocked and handed to a queued waiter) does not join the queue: given up, it
// used to stay queued, the next release handed the lock to its token with nobody waiting for it,
// and the old hold's watchdog renewed that grant as its own (Held for good). Control: no re-entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_reentry_that_finds_another_owner_does_not_queue() {
    let (queued, owner_is_a, state) = reentry_after_a_forced_unlock("fw-noreenter", false).await;
    assert_eq!((queued, owner_is_a, state), (0, false, LockState::Lost), "control");
    let (queued, owner_is_a, state) = reentry_after_a_forced_unlock("fw-reenter", true).await;
    assert_eq!(
        (queued, owner_is_a, state),
        (0, false, LockState::Lost),
        "(A's entries left in the queue, B's release handed the lock to A whose acquire had \
         given up, A's force-unlocked hold's state after its renewal)"
    );
}

// Fair and non-fair contenders on one name stay mutually exclusive (fairness aside).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_and_non_fair_contenders_never_overlap() {
    let server = RedisServer::start();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let client = connect(&server).await;
        let mut data = data_conn(&server).await;
        tasks.push(tokio::spawn(async move {
            let lock = client.lock("mixed", opts(i % 2 == 0)).unwrap();
            for _ in 0..30 {
                let g = lock.acquire(Some(Duration::from_secs(20))).await.unwrap();
                let v: i64 = data.get("ctr").await.unwrap_or(0);
                tokio::time::sleep(Duration::from_micros(300)).await;
                let _: () = data.set("ctr", v + 1).await.unwrap();
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut data = data_conn(&server).await;
    let n: i64 = data.get("ctr").await.unwrap();
    assert_eq!(n, 180, "lost updates: two holders overlapped");

    // Control: the same read-modify-write without the lock loses updates.
    let _: () = data.set("ctr2", 0).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let mut data = data_conn(&server).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..30 {
                let v: i64 = data.get("ctr2").await.unwrap_or(0);
                tokio::time::sleep(Duration::from_micros(300)).await;
                let _: () = data.set("ctr2", v + 1).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n: i64 = data.get("ctr2").await.unwrap();
    assert!(n < 180, "control: no update was lost without the lock");
}

// Where a handed-over grant cannot be trusted, fair mode is refused up front.
#[tokio::test]
async fn fair_mode_is_refused_with_redlock_and_replica_acks() {
    let server = RedisServer::start();
    let redlock = Client::connect_redlock(&[server.url()], ClientOptions::default()).await.unwrap();
    let err = redlock.lock("r", opts(true)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    let mut o = ClientOptions::default();
    o.replica_acks = Some(ferrolock::ReplicaAcks::new(1, Duration::from_millis(100)));
    let acks = connect_with(&server, o).await;
    assert_eq!(acks.lock("r", opts(true)).unwrap_err().kind(), ErrorKind::InvalidConfig);
    // Control: the same clients accept the lock without fair mode.
    redlock.lock("r", opts(false)).unwrap();
    acks.lock("r", opts(false)).unwrap();
}

// A waiter queued for long since its last try gets a grant whose conservative deadline (from
// that try) would leave less than the watchdog's first renewal needs: the lease is restarted
// before the grant is returned, so the hold reports its real validity and stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_a_long_queue_restarts_the_lease() {
    let server = RedisServer::start();
    let mut data = data_conn(&server).await;
    let holder = connect(&server).await.lock("long", opts(true)).unwrap();
    let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
    g.extend(LEASE).await.unwrap(); // the extend script is cached: one EVALSHA per extend below
    let ttl = Duration::from_millis(600);
    let waiter = connect(&server).await.lock("long", LockOptions::renewing(ttl).with_fair(true)).unwrap();
    let w = tokio::spawn(async move { waiter.acquire(Some(Duration::from_secs(10))).await.unwrap() });
    until_queued(&mut data, "long", 1).await;
    tokio::time::sleep(Duration::from_millis(400)).await; // most of the waiter's lease
    let tries = evalsha_calls(&server);
    g.release().await.unwrap();
    let got = w.await.unwrap();
    assert!(
        got.remaining() > Duration::from_millis(400),
        "validity {:?} counted from the old try",
        got.remaining()
    );
    assert!(evalsha_calls(&server) - tries <= 2, "more than the release and one extend");
    tokio::time::sleep(Duration::from_millis(1000)).await; // renewed by the watchdog meanwhile
    assert_eq!(got.state(), ferrolock::LockState::Held, "the hold was reported lost");
    got.release().await.unwrap();
}

// A queued waiter that died is handed the lock for its lease: the waiters behind it learn that
// lease from the grant's message and try when it ends, not at their own bound (the previous
// holder's lease: here longer than their whole wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_behind_a_dead_grantee_try_when_its_lease_ends() {
    let server = RedisServer::start();
    let mut data = data_conn(&server).await;
    let holder = connect(&server).await.lock("dead", opts(true)).unwrap();
    let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
    let dead = "dead00000000000000000000000000ff";
    queue_dead_waiter(&mut data, "dead", dead, (500, 60_000), None).await;
    let waiter = connect(&server).await.lock("dead", opts(true)).unwrap();
    let w = tokio::spawn(async move { waiter.acquire(Some(Duration::from_secs(5))).await });
    until_queued(&mut data, "dead", 2).await;
    g.release().await.unwrap();
    let owner: Option<String> = data.hget("ferrolock:{dead}", "owner").await.unwrap();
    assert_eq!(owner.as_deref(), Some(dead), "the dead waiter was not handed the lock");
    let got = w.await.unwrap().expect("the live waiter was not granted within its wait");
    got.release().await.unwrap();
}

// An administrator's force-unlock hands the lock on like a release: the queued waiters get it in
// arrival order (it used to wake them all to race for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlock_keeps_the_queue_order() {
    let server = RedisServer::start();
    let mut data = data_conn(&server).await;
    let holder = connect(&server).await.lock("forced", opts(true)).unwrap();
    let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let lock = connect(&server).await.lock("forced", opts(true)).unwrap();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock.acquire(Some(Duration::from_secs(20))).await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            g.release().await.unwrap();
        }));
        until_queued(&mut data, "forced", i + 1).await;
    }
    // The message the force-unlock publishes: a hand-over to the oldest waiter ("G:..."), not
    // the plain release message that wakes every waiter to race.
    let mut sub = redis::Client::open(server.url()).unwrap().get_connection().unwrap();
    let mut sub = sub.as_pubsub();
    sub.subscribe("ferrolock:{forced}:released").unwrap();
    let removed = connect(&server).await.force_unlock("forced").await.unwrap();
    assert_eq!(removed.map(|r| r.fence), Some(g.fence()));
    let message: Vec<u8> = sub.get_message().unwrap().get_payload().unwrap();
    assert!(message.starts_with(b"G:"), "{}", String::from_utf8_lossy(&message));
    drop(sub);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..6).collect::<Vec<_>>(), "the queue order was not kept");
    assert_eq!(g.release().await.unwrap_err().kind(), ErrorKind::Lost);
}

/// Whether `token` is in `name`'s queue.
async fn is_queued(conn: &mut redis::aio::MultiplexedConnection, name: &str, token: &[u8]) -> bool {
    let queue: Vec<Vec<u8>> = conn.lrange(format!("ferrolock:{{{name}}}:queue"), 0, -1).await.unwrap();
    queue.iter().any(|t| t == token)
}

// A waiter whose leave never reached the server (its acquire cancelled with the leave skipped,
// as after a process that died, or a server that was paused or unreachable when it gave up)
// keeps its queue entry, and the next release hands the lock to it. The live waiter behind it
// must get the lock shortly after (the stale grant is only an offer its owner never confirms),
// not after the stale grantee's whole lease; fences keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_queue_entry_holds_the_lock_only_briefly() {
    let server = RedisServer::start();
    let mut data = data_conn(&server).await;
    let name = "stale-entry";
    let holder = connect(&server).await.lock(name, opts(true)).unwrap();
    let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
    let stale_lease = Duration::from_secs(12);
    // The entry a waiter with a 12 s lease leaves when it dies queued: its acquire call with the
    // 2 s offer a client sends (`a_handed_on_offer_is_confirmed_after_the_acquire_returns` shows
    // the client sends it). Made with a raw call: cancelling a live waiter can land while its
    // try is in flight, and that try's undo leaves the queue.
    let stale_token = "stale-token";
    queue_dead_waiter(&mut data, name, stale_token, (stale_lease.as_millis() as u64, 60_000), Some(2_000))
        .await;
    assert_eq!(queue_len(&mut data, name).await, 1, "the stale entry is not queued");

    let live = connect(&server).await.lock(name, opts(true)).unwrap();
    let w = tokio::spawn(async move { live.acquire(Some(Duration::from_secs(20))).await });
    until_queued(&mut data, name, 2).await;
    let t0 = Instant::now();
    g.release().await.unwrap();
    let (owner, stale_fence): (Option<String>, Option<u64>) = redis::cmd("HMGET")
        .arg(format!("ferrolock:{{{name}}}"))
        .arg("owner")
        .arg("fence")
        .query_async(&mut data)
        .await
        .unwrap();
    assert_eq!(owner.as_deref(), Some(stale_token), "the stale entry was not handed the lock");
    let got = w.await.unwrap().expect("the live waiter was not granted within its wait");
    let waited = t0.elapsed();
    assert!(
        waited < Duration::from_secs(6),
        "the live waiter got the lock {waited:?} after the release: the stale grant held it for \
         its whole lease ({stale_lease:?})"
    );
    assert!(got.fence() > stale_fence.unwrap(), "the fence did not increase past the stale grant's");
    got.release().await.unwrap();
}

// A hand-over's offer (2 s, shorter than the waiter's 10 s lease) is confirmed right after the
// acquire returns, by the watchdog, not before: the hand-over costs no round trip. Here the
// watchdog's rounds are held back 300 ms, so the acquire returns with the offer still in force on
// the server (a confirmation on the acquire's path would have set 10 s by then), and the lease
// becomes 10 s shortly after. A confirmation refused (an outsider deleted the grant first)
// reports the hold lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_on_offer_is_confirmed_after_the_acquire_returns() {
    let server = RedisServer::start();
    for (name, outsider) in [("offer-confirmed", false), ("offer-refused", true)] {
        let holder = connect(&server).await.lock(name, opts(true)).unwrap();
        let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
        let waiter_client = connect(&server).await;
        waiter_client.set_watchdog_test_knobs(Duration::from_millis(300), true);
        let waiter = waiter_client.lock(name, opts(true)).unwrap();
        let w = tokio::spawn(async move { waiter.acquire(Some(Duration::from_secs(10))).await });
        let mut data = data_conn(&server).await;
        until_queued(&mut data, name, 1).await;
        g.release().await.unwrap();
        let got = w.await.unwrap().unwrap();
        let key = format!("ferrolock:{{{name}}}");
        let pttl: i64 = server.cmd(&["PTTL", &key]);
        assert!((0..=2000).contains(&pttl), "{name}: PTTL {pttl} ms when the acquire returned");
        assert!(got.remaining() <= Duration::from_secs(2), "{name}: {:?}", got.remaining());
        if outsider {
            let _: () = server.cmd(&["DEL", &key]);
            tokio::time::timeout(Duration::from_secs(3), got.lost()).await.expect("loss not reported");
            continue;
        }
        let t0 = Instant::now();
        while server.cmd::<i64>(&["PTTL", &key]) <= 2000 {
            assert!(t0.elapsed() < Duration::from_secs(3), "the offer was never confirmed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(got.state(), LockState::Held);
        assert!(got.remaining() > Duration::from_secs(5), "confirmed, yet {:?} left", got.remaining());
        got.release().await.unwrap();
    }
}

// A fair re-entry (the handle counts a live hold) whose try finds its hold gone (force-unlocked,
// then taken by another owner) goes on as a fresh acquire: it joins the queue then, so a waiter
// that came after it does not get the lock first (it used to wait unqueued for the rest of its
// call, and the next release went to the later waiter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_reentry_that_finds_its_hold_gone_queues() {
    let server = RedisServer::start();
    let mut data = data_conn(&server).await;
    let name = "reentry-queues";
    let (ca, cc, cd, admin) =
        (connect(&server).await, connect(&server).await, connect(&server).await, connect(&server).await);
    let a = ca.lock(name, opts(true)).unwrap();
    let ga = a.acquire(Some(Duration::ZERO)).await.unwrap();
    let a_token = ca.inspect(name).await.unwrap().unwrap().owner;
    admin.force_unlock(name).await.unwrap().expect("A held it");
    let gc = cc.lock(name, opts(true)).unwrap().acquire(Some(Duration::ZERO)).await.unwrap();
    let wa = tokio::spawn({
        let a = a.clone();
        async move { a.acquire(Some(Duration::from_secs(20))).await }
    });
    // Bounded: with the fault, A never queues.
    let t = Instant::now();
    while !is_queued(&mut data, name, &a_token).await && t.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let a_queued = is_queued(&mut data, name, &a_token).await;
    let d = cd.lock(name, opts(true)).unwrap();
    let wd = tokio::spawn(async move { d.acquire(Some(Duration::from_secs(20))).await });
    until_queued(&mut data, name, if a_queued { 2 } else { 1 }).await;
    gc.release().await.unwrap();
    let owner = admin.inspect(name).await.unwrap().map(|i| i.owner);
    assert!(
        owner.as_deref() == Some(a_token.as_slice()),
        "a waiter that came after the re-entry got the lock first (the re-entry queued: {a_queued})"
    );
    let got_a = wa.await.unwrap().expect("A's acquire");
    assert_eq!(got_a.count(), 1, "a fresh hold, not a re-entry");
    assert_eq!(ga.state(), LockState::Lost);
    got_a.release().await.unwrap();
    wd.await.unwrap().expect("D's acquire").release().await.unwrap();
}

// A hand-over takes a fresh grant's fence rule: above the stored counter even when the counter
// is ahead of the server clock (a clock stepped back; a counter carried over from a faster
// host). Fair tests saw only fences that follow the clock, so a hand-over that ignored the
// counter passed them (mutation review). Both hand-overs: a release's and force_unlock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_fence_is_above_the_stored_counter() {
    let server = RedisServer::start();
    let mut data = data_conn(&server).await;
    let fair = || LockOptions::lease(Duration::from_secs(10)).with_fair(true);
    for forced in [false, true] {
        let name = format!("handover-fence-{forced}");
        let holder_client = connect(&server).await;
        let g = holder_client.lock(&name, fair()).unwrap().acquire(Some(Duration::ZERO)).await.unwrap();
        let ahead = (1u64 << 52) + 3;
        let _: () = data.set(format!("ferrolock:{{{name}}}:fence"), ahead.to_string()).await.unwrap();
        let waiter = connect(&server).await.lock(&name, fair()).unwrap();
        let t =
            tokio::spawn(
                async move { waiter.acquire(Some(Duration::from_secs(5))).await.map(|g| (g, waiter)) },
            );
        until_queued(&mut data, &name, 1).await;
        if forced {
            assert!(holder_client.force_unlock(&name).await.unwrap().is_some());
        } else {
            g.release().await.unwrap();
        }
        let (g2, _waiter) = t.await.unwrap().unwrap();
        assert_eq!(g2.fence(), ahead + 1, "forced: {forced}: not above the stored counter {ahead}");
        g2.release().await.unwrap();
    }
}

// A hand-over skips a queued waiter whose stay has run out (a waiter that queued with little of
// its wait left and vanished): the release hands the lock to the live waiter behind it. The
// dead waiters of the other tests stay 60 s, so only the short offer defended against them and
// a hand-over that ignored the stay passed every test (mutation review).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_stay_ran_out_is_not_handed_the_lock() {
    let server = RedisServer::start();
    let mut data = data_conn(&server).await;
    let name = "stay-out";
    let holder = connect(&server).await.lock(name, opts(true)).unwrap();
    let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
    let stale = "stale0000000000000000000000000ff";
    queue_dead_waiter(&mut data, name, stale, (10_000, 200), None).await;
    tokio::time::sleep(Duration::from_millis(400)).await; // its stay is over; the entry remains
    let entry: Option<String> = data.hget(format!("ferrolock:{{{name}}}:waiters"), stale).await.unwrap();
    assert!(entry.is_some(), "control: the expired entry is still in the table");
    let live = connect(&server).await.lock(name, opts(true)).unwrap();
    let w = tokio::spawn(async move { live.acquire(Some(Duration::from_secs(20))).await });
    until_queued(&mut data, name, 2).await;
    g.release().await.unwrap();
    let owner: Option<String> = data.hget(format!("ferrolock:{{{name}}}"), "owner").await.unwrap();
    assert_ne!(owner.as_deref(), Some(stale), "the hand-over went to a waiter whose stay had run out");
    let got = tokio::time::timeout(Duration::from_secs(1), w)
        .await
        .expect("the live waiter was not handed the lock");
    got.unwrap().unwrap().release().await.unwrap();
}
