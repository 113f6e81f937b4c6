//! Sentinel: 1 master, 1 replica and 3 sentinels on loopback, with `SENTINEL FAILOVER` forced
//! while locks are in use. The client follows the failover (locks keep working on the promoted
//! replica); a holder across the failover keeps its lock or sees InDoubt/Lost, never Held with
//! the hold gone. The control: a client pinned to the old master's address stops working.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{CutProxy, RedisServer};
use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions, LockState, ReplicaAcks};

const NAME: &str = "fl-master";

struct Topology {
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<RedisServer>,
}

impl Topology {
    fn start() -> Topology {
        let master = RedisServer::start();
        let replica = RedisServer::start_replica_of(&master, &[]);
        let sentinels: Vec<RedisServer> =
            (0..3).map(|_| RedisServer::start_sentinel(&master, NAME, 2)).collect();
        // A forced failover needs a sentinel that knows the replica and the other sentinels.
        for s in &sentinels {
            s.wait_for(Duration::from_secs(15), "the sentinel to see the replica and its peers", |s| {
                let Ok(mut c) = s.conn() else { return false };
                let replicas: redis::RedisResult<Vec<redis::Value>> =
                    redis::cmd("SENTINEL").arg("replicas").arg(NAME).query(&mut c);
                let peers: redis::RedisResult<Vec<redis::Value>> =
                    redis::cmd("SENTINEL").arg("sentinels").arg(NAME).query(&mut c);
                matches!((replicas, peers), (Ok(r), Ok(p)) if r.len() == 1 && p.len() == 2)
            });
        }
        Topology { master, replica, sentinels }
    }

    fn url(&self) -> String {
        let list: Vec<String> = self.sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port())).collect();
        format!("redis+sentinel://{}/{NAME}", list.join(","))
    }

    fn master_port(&self) -> u16 {
        let (_, port): (String, u16) = self.sentinels[0].cmd(&["SENTINEL", "get-master-addr-by-name", NAME]);
        port
    }

    /// `SENTINEL FAILOVER` (retried while the sentinel has no good replica yet), then wait until
    /// the sentinels name the replica and it says it is a master.
    fn failover(&self) {
        let start = Instant::now();
        loop {
            let mut c = self.sentinels[0].conn().expect("sentinel");
            match redis::cmd("SENTINEL").arg("FAILOVER").arg(NAME).query::<String>(&mut c) {
                Ok(_) => break,
                Err(e) => {
                    assert!(start.elapsed() < Duration::from_secs(15), "SENTINEL FAILOVER: {e}");
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        let replica_port = self.replica.port();
        self.sentinels[0].wait_for(Duration::from_secs(20), "the sentinels to name the replica", |_| {
            self.sentinels.iter().all(|s| {
                s.cmd::<(String, u16)>(&["SENTINEL", "get-master-addr-by-name", NAME]).1 == replica_port
            })
        });
        self.replica.wait_for(Duration::from_secs(10), "the replica to be promoted", |r| {
            r.info_field("replication", "role").as_deref() == Some("master")
        });
    }
}

fn opts() -> ClientOptions {
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(500);
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_follow_a_sentinel_failover() {
    let topo = Topology::start();
    assert_eq!(topo.master_port(), topo.master.port());
    let client = Client::connect(&topo.url(), opts()).await.expect("connect through sentinel");
    assert_eq!(client.sentinel_master(), Some(format!("127.0.0.1:{}", topo.master.port())));
    // The holder's grant reached the replica before the failover (replica_acks), and its lease
    // is longer than the failover takes (renewals sent to the old master between the promotion
    // and the announcement are lost), so it must survive it.
    let mut acked = opts();
    acked.replica_acks = Some(ReplicaAcks::new(1, Duration::from_millis(200)));
    let holder_client = Client::connect(&topo.url(), acked).await.unwrap();
    let held = holder_client.lock("across", LockOptions::renewing(Duration::from_millis(4500))).unwrap();
    let guard = held.try_acquire().await.unwrap().expect("free");
    let fence = guard.fence();
    // A second holder whose lease (1.5 s) is about as long as the failover takes: its hold may
    // expire on the promoted replica before this client switches; then it must say so.
    let short = holder_client.lock("short", LockOptions::renewing(Duration::from_millis(1500))).unwrap();
    let short_guard = short.try_acquire().await.unwrap().expect("free");
    // A waiter that waits across the failover, behind a fixed 20 s lease: only the release
    // message, on the new master, can wake it in time (its channel must be subscribed there).
    let waited = holder_client.lock("waited", LockOptions::lease(Duration::from_secs(20))).unwrap();
    let waited_guard = waited.try_acquire().await.unwrap().expect("free");
    let waiter = {
        let lock = client.lock("waited", LockOptions::lease(Duration::from_secs(5))).unwrap();
        tokio::spawn(async move { lock.acquire(Some(Duration::from_secs(25))).await })
    };
    // A worker takes and releases a lock in a loop through the failover.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok_total, ok_after) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let switched = Arc::new(AtomicBool::new(false));
    let worker = {
        let (client, stop, ok_total, ok_after, switched) =
            (client.clone(), stop.clone(), ok_total.clone(), ok_after.clone(), switched.clone());
        tokio::spawn(async move {
            let lock = client.lock("busy", LockOptions::lease(Duration::from_secs(2))).unwrap();
            while !stop.load(Ordering::Acquire) {
                if let Ok(g) = lock.acquire(Some(Duration::from_millis(300))).await
                    && g.release().await.is_ok()
                {
                    ok_total.fetch_add(1, Ordering::Relaxed);
                    if switched.load(Ordering::Acquire) {
                        ok_after.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ok_total.load(Ordering::Relaxed) > 0, "the worker made no progress before the failover");

    // Control: a plain client pinned to the old master's address.
    let pinned = Client::connect(&topo.master.url(), opts()).await.unwrap();

    let t = Instant::now();
    // Runs the blocking failover on this thread: the runtime's other worker drives the clients.
    tokio::task::block_in_place(|| topo.failover());
    switched.store(true, Ordering::Release);
    eprintln!("failover done in {:?}", t.elapsed());

    // The client moves to the promoted replica.
    let new_master = format!("127.0.0.1:{}", topo.replica.port());
    let start = Instant::now();
    while client.sentinel_master().as_deref() != Some(new_master.as_str()) {
        assert!(start.elapsed() < Duration::from_secs(10), "the client did not follow the failover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // New locks work there, and the hold is on the new master.
    let fresh = client.lock("after", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let g = fresh.acquire(Some(Duration::from_secs(5))).await.expect("lock after failover");
    assert_eq!(topo.replica.cmd::<i64>(&["EXISTS", "ferrolock:{after}"]), 1);
    g.release().await.unwrap();
    let start = Instant::now();
    while ok_after.load(Ordering::Relaxed) < 3 {
        assert!(start.elapsed() < Duration::from_secs(10), "the worker made no progress after the failover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Release);
    worker.await.unwrap();

    // The waiter across the failover is woken by the release on the new master.
    assert!(!waiter.is_finished(), "control: the waiter got the lock before its release");
    waited_guard.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(3), waiter).await;
    got.expect("the waiter was not woken by the release on the new master")
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();

    // The holder across the failover: after a few renewal periods it is Held with its hold on
    // the new master, or it knows it is not (InDoubt/Lost). Never Held with the hold gone.
    tokio::time::sleep(Duration::from_millis(3200)).await; // two renewals on the new master
    let state = guard.state();
    let on_new_master = holder_client.inspect("across").await.unwrap();
    match state {
        LockState::Held => {
            let info = on_new_master.expect("Held, but the hold is gone from the new master");
            assert_eq!(info.fence, fence);
        }
        LockState::InDoubt | LockState::Lost => eprintln!("holder reports {state:?}"),
        other => panic!("unexpected state {other:?}"),
    }
    match short_guard.state() {
        LockState::Held => {
            let info = holder_client.inspect("short").await.unwrap();
            assert_eq!(
                info.expect("Held, but the hold is gone from the new master").fence,
                short_guard.fence()
            );
        }
        LockState::InDoubt | LockState::Lost => {}
        other => panic!("unexpected state {other:?}"),
    }
    // With the grant replicated before the failover, the lock is in fact kept.
    assert_eq!(state, LockState::Held, "an acknowledged hold should survive a coordinated failover");
    guard.release().await.unwrap();

    // Control: the pinned client still talks to the old master, which is (or is about to be)
    // a replica or a stale master: its grant does not exist on the new master.
    let pinned_lock = pinned.lock("after", LockOptions::lease(Duration::from_secs(5))).unwrap();
    match pinned_lock.try_acquire().await {
        Ok(Some(g)) => {
            // The old master has not been demoted yet: a split-brain grant the new master
            // knows nothing about — what following the sentinels avoids.
            assert_eq!(topo.replica.cmd::<i64>(&["EXISTS", "ferrolock:{after}"]), 0);
            drop(g);
        }
        Ok(None) => panic!("the pinned client saw a holder it should not know about"),
        Err(e) => {
            assert!(matches!(e.kind(), ErrorKind::Script | ErrorKind::Connection | ErrorKind::Timeout), "{e}")
        }
    }
}

/// The switch without `+switch-master`: the master is demoted by hand and the sentinel told to
/// monitor the new one (no announcement). The client's next write gets READONLY, a transient
/// error that makes it ask the sentinel again; a waiting acquire then succeeds on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readonly_reply_makes_the_client_ask_again() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master, &[]);
    let sentinel = RedisServer::start_sentinel(&master, NAME, 1);
    let url = format!("redis+sentinel://127.0.0.1:{}/{NAME}", sentinel.port());
    let client = Client::connect(&url, opts()).await.unwrap();
    assert_eq!(client.sentinel_master(), Some(format!("127.0.0.1:{}", master.port())));

    let port = replica.port().to_string();
    let _: String = replica.cmd(&["REPLICAOF", "NO", "ONE"]);
    let _: String = master.cmd(&["REPLICAOF", "127.0.0.1", &port]);
    let _: String = sentinel.cmd(&["SENTINEL", "REMOVE", NAME]);
    let _: String = sentinel.cmd(&["SENTINEL", "MONITOR", NAME, "127.0.0.1", &port, "1"]);

    let lock = client.lock("readonly", LockOptions::lease(Duration::from_secs(5))).unwrap();
    // One attempt reaches the demoted master: refused as a transient error, not a grant.
    match lock.try_acquire().await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Connection, "{e}"),
        Ok(g) => assert!(g.is_some() && client.sentinel_master() == Some(format!("127.0.0.1:{port}"))),
    }
    let g =
        lock.acquire(Some(Duration::from_secs(5))).await.expect("acquire after asking the sentinel again");
    assert_eq!(client.sentinel_master(), Some(format!("127.0.0.1:{port}")));
    assert_eq!(replica.cmd::<i64>(&["EXISTS", "ferrolock:{readonly}"]), 1);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_urls_are_checked() {
    for url in [
        "redis+sentinel://127.0.0.1:1",
        "redis+sentinel://127.0.0.1:x/m",
        "redis+sentinel:///m",
        "redis+sentinel://127.0.0.1:1/",
    ] {
        let e = Client::connect(url, opts()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{url}: {e}");
    }
    // A password whose '@' was left out: refused, not echoed in a lookup failure of its host.
    let e = Client::connect("redis+sentinel://admin:Hunter2pw127.0.0.1:26379/m", opts()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{e}");
    assert!(!format!("{e} {e:?}").contains("Hunter2pw"), "{e}");
    // No sentinel answers: a connection error that names neither the URL nor its password.
    let mut o = opts();
    o.connect_timeout = Duration::from_millis(200);
    let e = Client::connect("redis+sentinel://:s3cret-pw@127.0.0.1:1/m", o).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Connection, "{e}");
    assert!(!format!("{e} {e:?}").contains("s3cret-pw"));
    // A sentinel that does not know the name.
    let master = RedisServer::start();
    let s = RedisServer::start_sentinel(&master, NAME, 1);
    let e =
        Client::connect(&format!("redis+sentinel://127.0.0.1:{}/other", s.port()), opts()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    // A server that is no Sentinel (it read SCRIPT).
    let e = Client::connect(&format!("redis+sentinel://127.0.0.1:{}/{NAME}", master.port()), opts())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{e}");
    let c =
        Client::connect(&format!("redis+sentinel://127.0.0.1:{}/{NAME}", s.port()), opts()).await.unwrap();
    let g = c.lock("x", LockOptions::lease(Duration::from_secs(1))).unwrap().try_acquire().await.unwrap();
    g.expect("free").release().await.unwrap();
    assert!(format!("{c:?}").contains(NAME));
}

// Sentinels that require a password: `sentinel_password` (and `sentinel_username`) in the query
// are used for the sentinels only; the userinfo stays the master's. Without them, or with a
// wrong one, the sentinel refuses (`Auth`); no error or Debug output shows either password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_protected_sentinels() {
    const SENTINEL_PW: &str = "s3ntinel/pw?&=x";
    const MASTER_PW: &str = "m4ster-pw";
    let master = RedisServer::start_with(&["--requirepass", MASTER_PW]);
    let s = RedisServer::start_sentinel_with(&master, NAME, 1, &["--requirepass", SENTINEL_PW]);
    let encoded = "s3ntinel%2Fpw%3F%26%3Dx";
    let base = format!("redis+sentinel://:{MASTER_PW}@127.0.0.1:{}/{NAME}", s.port());
    let mut texts = Vec::new();

    let c = Client::connect(&format!("{base}?sentinel_password={encoded}"), opts()).await.expect("connect");
    let g = c.lock("pw", LockOptions::lease(Duration::from_secs(1))).unwrap().try_acquire().await.unwrap();
    g.expect("free").release().await.unwrap();
    texts.push(format!("{c:?}"));
    let named = format!("{base}?sentinel_username=default&sentinel_password={encoded}");
    Client::connect(&named, opts()).await.expect("connect with a sentinel username");

    for url in [base.clone(), format!("{base}?sentinel_password=wrong-{encoded}")] {
        let e = Client::connect(&url, opts()).await.expect_err("the sentinel must refuse");
        assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
        texts.push(format!("{e} {e:?}"));
    }
    // Bad query parameters are refused before any I/O, echoing nothing of the URL.
    for query in [
        format!("sentinel_pasword={encoded}"),
        format!("sentinel_password={encoded}&sentinel_password=x"),
        "sentinel_username=default".to_owned(),
    ] {
        let e = Client::connect(&format!("{base}?{query}"), opts()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{query}: {e}");
        texts.push(format!("{e} {e:?}"));
    }
    // The control: the scan below finds the passwords where they are.
    assert!(base.contains(MASTER_PW) && SENTINEL_PW.contains("s3ntinel/pw"));
    for t in &texts {
        for secret in [SENTINEL_PW, encoded, MASTER_PW] {
            assert!(!t.contains(secret), "{secret} leaked: {t}");
        }
    }
}

// A sentinel with a stale view (it still names a master that is gone) does not stop the client:
// the next sentinel's master is used, at connect and when the client asks again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_naming_a_dead_master_is_passed_over() {
    let master = RedisServer::start();
    let mut gone = RedisServer::start();
    let stale = RedisServer::start_sentinel(&gone, NAME, 1);
    let good = RedisServer::start_sentinel(&master, NAME, 1);
    gone.kill9();
    let url = format!("redis+sentinel://127.0.0.1:{},127.0.0.1:{}/{NAME}", stale.port(), good.port());
    let client = Client::connect(&url, opts()).await.expect("the second sentinel names a live master");
    assert_eq!(client.sentinel_master(), Some(format!("127.0.0.1:{}", master.port())));
    let g = client.lock("stale", LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await;
    g.unwrap().expect("free").release().await.unwrap();
    // Control: with the stale sentinel alone, connecting fails (it names nothing usable).
    let alone = format!("redis+sentinel://127.0.0.1:{}/{NAME}", stale.port());
    let e = Client::connect(&alone, opts()).await.unwrap_err();
    assert!(e.kind().is_transient(), "{e}");
}

// A sentinel that hangs with its connection open (SIGSTOP; a partition dropping packets looks the
// same) announces nothing and never disconnects. The client's watch for `+switch-master` was on
// it for good: a failover run by the other sentinels went unnoticed until a command failed, and
// a client that only waits sends none. Now the watch moves on once its sentinel stops answering,
// looks the master up there, and the client follows the failover without sending anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_sentinel_does_not_hide_a_failover() {
    let topo = Topology::start();
    let client = Client::connect(&topo.url(), opts()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await; // the watch is on the first sentinel
    topo.sentinels[0].pause();
    let start = Instant::now();
    loop {
        let mut c = topo.sentinels[1].conn().expect("sentinel");
        match redis::cmd("SENTINEL").arg("FAILOVER").arg(NAME).query::<String>(&mut c) {
            Ok(_) => break,
            Err(e) => {
                assert!(start.elapsed() < Duration::from_secs(15), "SENTINEL FAILOVER: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let new_master = format!("127.0.0.1:{}", topo.replica.port());
    let start = Instant::now();
    while client.sentinel_master().as_deref() != Some(new_master.as_str()) {
        if start.elapsed() > Duration::from_secs(20) {
            topo.sentinels[0].resume();
            panic!("the client did not follow the failover: still on {:?}", client.sentinel_master());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    topo.sentinels[0].resume();
}

// On a master switch the client subscribes, on the new master, every release channel of a list
// copied at the start. A channel the sweep takes back meanwhile gets its UNSUBSCRIBE on the old
// master, yet is subscribed on the new one afterwards, and stays there with nobody wanting it
// (the notifier has forgotten it). A test knob holds the switch after the copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_swept_during_a_master_switch_is_not_left_on_the_new_master() {
    let topo = Topology::start();
    let mut o = opts();
    o.subscription_linger = Duration::from_millis(200);
    let client = Client::connect(&topo.url(), o).await.expect("connect through sentinel");
    let holder = Client::connect(&topo.url(), opts()).await.unwrap();
    let name = "switch-vs-sweep";
    let channel = format!("ferrolock:{{{name}}}:released");
    let numsub = |s: &RedisServer| -> i64 {
        let v: Vec<redis::Value> = s.cmd(&["PUBSUB", "NUMSUB", &channel]);
        match v.get(1) {
            Some(redis::Value::Int(n)) => *n,
            other => panic!("PUBSUB NUMSUB: {other:?}"),
        }
    };
    let guard = holder.lock(name, LockOptions::lease(Duration::from_secs(60))).unwrap().try_acquire().await;
    let guard = guard.unwrap().expect("free");
    let lock = client.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap();
    let waiter = tokio::spawn(async move { lock.acquire(Some(Duration::from_secs(60))).await.map(|_| ()) });
    let start = Instant::now();
    while numsub(&topo.master) != 1 {
        assert!(start.elapsed() < Duration::from_secs(10), "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    client.set_sentinel_switch_pause_for_tests(true);
    tokio::task::block_in_place(|| topo.failover());
    let start = Instant::now();
    while !client.sentinel_switch_paused_for_tests() {
        assert!(start.elapsed() < Duration::from_secs(10), "the client's switch never reached the pause");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The waiter leaves while the switch waits; give the sweep time to take the channel back
    // (a fix may make it wait for the switch instead: not asserted here).
    waiter.abort();
    let _ = waiter.await;
    let start = Instant::now();
    while client.table_sizes_for_tests().0 != 0 && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    client.set_sentinel_switch_pause_for_tests(false);
    let new_master = format!("127.0.0.1:{}", topo.replica.port());
    let start = Instant::now();
    while client.sentinel_master().as_deref() != Some(new_master.as_str()) {
        assert!(start.elapsed() < Duration::from_secs(10), "the client did not follow the failover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nobody waits on the lock: once the linger has passed, the channel is gone from the client
    // and from the master it uses.
    let start = Instant::now();
    while client.table_sizes_for_tests().0 != 0 || numsub(&topo.replica) != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "a channel nobody wants: client table {}, subscribers on the new master {}",
            client.table_sizes_for_tests().0,
            numsub(&topo.replica)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(guard);
}

// A Sentinel whose view is stale names a live replica as the master: the client checks ROLE and
// passes it over (settled on the replica, every write got READONLY, and the lookup asked the
// same Sentinel first again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_naming_a_replica_is_passed_over() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master, &[]);
    let stale = RedisServer::start_sentinel(&replica, NAME, 1);
    let good = RedisServer::start_sentinel(&master, NAME, 1);
    let named: (String, u16) = stale.cmd(&["SENTINEL", "get-master-addr-by-name", NAME]);
    assert_eq!(named.1, replica.port(), "control: the stale Sentinel names the replica");
    let url = format!("redis+sentinel://127.0.0.1:{},127.0.0.1:{}/{NAME}", stale.port(), good.port());
    let client = Client::connect(&url, opts()).await.expect("connect");
    assert_eq!(client.sentinel_master(), Some(format!("127.0.0.1:{}", master.port())));
    let g = client.lock("role", LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await;
    g.unwrap().expect("free").release().await.unwrap();
}

// Two switches without a +switch-master announcement: each READONLY makes the client ask again,
// not only the first one (a flag left set after the first lookup stopped every later one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_readonly_switch_is_followed() {
    let a = RedisServer::start();
    let b = RedisServer::start_replica_of(&a, &[]);
    let sentinel = RedisServer::start_sentinel(&a, NAME, 1);
    let url = format!("redis+sentinel://127.0.0.1:{}/{NAME}", sentinel.port());
    let client = Client::connect(&url, opts()).await.unwrap();
    let lock = client.lock("twice", LockOptions::lease(Duration::from_secs(5))).unwrap();
    for (new, old) in [(&b, &a), (&a, &b)] {
        let port = new.port().to_string();
        let _: String = new.cmd(&["REPLICAOF", "NO", "ONE"]);
        let _: String = old.cmd(&["REPLICAOF", "127.0.0.1", &port]);
        let _: String = sentinel.cmd(&["SENTINEL", "REMOVE", NAME]);
        let _: String = sentinel.cmd(&["SENTINEL", "MONITOR", NAME, "127.0.0.1", &port, "1"]);
        let g = lock.acquire(Some(Duration::from_secs(5))).await.expect("acquire after the switch");
        assert_eq!(client.sentinel_master(), Some(format!("127.0.0.1:{port}")));
        assert_eq!(new.cmd::<i64>(&["EXISTS", "ferrolock:{twice}"]), 1);
        g.release().await.unwrap();
    }
}

// A hold the promoted replica never got (deleted there by hand) is gone after the failover, and
// nobody releases it: a waiter asleep on the holder's 30 s lease tries again on the new master
// once the client switched, and gets it within its 25 s wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_try_again_after_a_switch() {
    let topo = Topology::start();
    let holder = Client::connect(&topo.url(), opts()).await.unwrap();
    let client = Client::connect(&topo.url(), opts()).await.unwrap();
    let held = holder.lock("lost-hold", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let g = held.try_acquire().await.unwrap().expect("free");
    let lock = client.lock("lost-hold", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let waiter = tokio::spawn(async move { lock.acquire(Some(Duration::from_secs(25))).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _: String = topo.replica.cmd(&["CONFIG", "SET", "replica-read-only", "no"]);
    let _: i64 = topo.replica.cmd(&["DEL", "ferrolock:{lost-hold}"]);
    tokio::task::block_in_place(|| topo.failover());
    waiter.await.unwrap().expect("the waiter gets the lock on the new master");
    drop(g);
}

// A master gone behind a firewall (its connections closed, a reconnect gets no answer): each
// command fails within the response timeout, not after the reconnects' connect timeouts (one
// try took 36 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firewalled_master_fails_commands_within_the_response_timeout() {
    let master = RedisServer::start();
    let proxy = CutProxy::start(&master);
    let port: u16 = proxy.url.rsplit(':').next().unwrap().parse().unwrap();
    let sentinel = RedisServer::start_sentinel(&master, NAME, 1);
    let _: String = sentinel.cmd(&["SENTINEL", "REMOVE", NAME]);
    let _: String = sentinel.cmd(&["SENTINEL", "MONITOR", NAME, "127.0.0.1", &port.to_string(), "1"]);
    let mut o = opts();
    o.connect_timeout = Duration::from_secs(5);
    let url = format!("redis+sentinel://127.0.0.1:{}/{NAME}", sentinel.port());
    let client = Client::connect(&url, o.clone()).await.unwrap();
    assert_eq!(client.sentinel_master(), Some(format!("127.0.0.1:{port}")));
    let lock = client.lock("cut", LockOptions::lease(Duration::from_secs(5))).unwrap();
    lock.try_acquire().await.unwrap().expect("free").release().await.unwrap();
    proxy.cut();
    for i in 0..3 {
        let t0 = Instant::now();
        let r = lock.try_acquire().await;
        let took = t0.elapsed();
        assert!(r.is_err(), "try {i}: the master is cut off");
        assert!(took < o.connect_timeout, "try {i} took {took:?}, a reconnect's connect timeout");
    }
}
