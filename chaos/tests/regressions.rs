//! Regression tests named after the peer bugs of RELIABILITY.md (B1–B21) that apply to the core,
//! against real `redis-server` processes. Each safety assertion has a control showing that the
//! same observation does detect the failure it looks for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolock::{ClientOptions, ErrorKind, LockOptions, LockState, blocking};
use ferrolock_chaos::probe::parse_monitor_args;
use ferrolock_chaos::proxy::DelayProxy;
use ferrolock_chaos::resp::{Conn, Val};
use ferrolock_testkit::RedisServer;

fn opts() -> ClientOptions {
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(250);
    o.connect_timeout = Duration::from_millis(500);
    o
}

fn addr(s: &RedisServer) -> String {
    format!("127.0.0.1:{}", s.port())
}

fn pttl(s: &RedisServer, key: &str) -> i64 {
    s.cmd(&["PTTL", key])
}

/// Records every EVAL/EVALSHA the server runs (MONITOR), for "renewals after release".
struct Monitor {
    lines: Arc<Mutex<Vec<Vec<String>>>>,
    stop: Arc<AtomicBool>,
    th: Option<std::thread::JoinHandle<()>>,
}

impl Monitor {
    fn start(s: &RedisServer) -> Monitor {
        let mut c = Conn::connect(&addr(s), Duration::from_secs(2)).expect("monitor connect");
        assert_eq!(c.cmd(&["MONITOR"]).expect("MONITOR"), Val::Simple("OK".into()));
        c.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
        let (lines, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let (l, st) = (lines.clone(), stop.clone());
        let th = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                if let Ok(Val::Simple(line)) = c.read()
                    && !line.contains(" lua]")
                {
                    l.lock().unwrap().push(parse_monitor_args(&line));
                }
            }
        });
        Monitor { lines, stop, th: Some(th) }
    }

    /// Extend-shaped calls (docs/PROTOCOL.md: 1 key, 2 args) on `key` after a release to count 0
    /// by the same token, with no acquire by that token in between.
    fn renewals_after_release(&mut self, key: &str) -> usize {
        std::thread::sleep(Duration::from_millis(100));
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.th.take() {
            let _ = t.join();
        }
        let mut released: std::collections::HashMap<String, bool> = Default::default();
        let mut n = 0;
        for a in self.lines.lock().unwrap().iter() {
            let is_eval = a
                .first()
                .is_some_and(|c| c.eq_ignore_ascii_case("evalsha") || c.eq_ignore_ascii_case("eval"));
            if !is_eval || a.len() < 4 || a[3] != key {
                continue;
            }
            let nkeys: usize = a[2].parse().unwrap_or(0);
            let argv = &a[3 + nkeys.min(a.len() - 3)..];
            match (nkeys, argv.len()) {
                (2, 4) => {
                    released.insert(argv[0].clone(), false);
                }
                (1, 3) if argv[2] == "0" => {
                    released.insert(argv[0].clone(), true);
                }
                (1, 2) if released.get(&argv[0]) == Some(&true) => n += 1,
                _ => {}
            }
        }
        n
    }
}

const HOLD: &str = "ferrolock:{b}";

/// B1 (redisson #7272): cancelled acquires in a loop, then unlock: no renewal after release.
#[test]
fn b01_cancelled_acquires_then_release_no_renewal_after_release() {
    let server = RedisServer::start();
    let mut mon = Monitor::start(&server);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let c = ferrolock::Client::connect(&server.url(), opts()).await.unwrap();
        let other = ferrolock::Client::connect(&server.url(), opts()).await.unwrap();
        let lock = c.lock("b", LockOptions::renewing(Duration::from_millis(300))).unwrap();
        let blocker = other.lock("b", LockOptions::renewing(Duration::from_millis(300))).unwrap();
        for i in 0..40u64 {
            // Half of the time the lock is taken, so the acquire is cancelled while waiting;
            // otherwise it is cancelled at a random point of its round trip.
            let held = if i % 2 == 0 { Some(blocker.acquire(None).await.unwrap()) } else { None };
            if let Ok(Ok(g)) =
                tokio::time::timeout(Duration::from_micros(50 + i * 37), lock.acquire(None)).await
            {
                g.release().await.unwrap(); // the acquire won the race: release normally
            }
            if let Some(h) = held {
                h.release().await.unwrap();
            }
        }
        // Then a normal hold, renewed a few times, released.
        let g = lock.acquire(Some(Duration::from_secs(2))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(350)).await;
        g.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await; // > one renewal period
    });
    let exists: i64 = server.cmd(&["EXISTS", HOLD]);
    assert_eq!(exists, 0, "the lock must be free after release");
    assert_eq!(mon.renewals_after_release(HOLD), 0, "a renewal reached the server after the final release");
}

/// Control for B1: the MONITOR check does see an extend-shaped call after a release.
#[test]
fn b01_control_monitor_sees_a_renewal_after_release() {
    let server = RedisServer::start();
    let mut mon = Monitor::start(&server);
    let a = addr(&server);
    let script = "return 0";
    ferrolock_chaos::resp::once(&a, &["EVAL", script, "2", HOLD, "f", "tok", "1000", "1", "1"]).unwrap();
    ferrolock_chaos::resp::once(&a, &["EVAL", script, "1", HOLD, "tok", "chan", "0"]).unwrap();
    ferrolock_chaos::resp::once(&a, &["EVAL", script, "1", HOLD, "tok", "1000"]).unwrap();
    assert_eq!(mon.renewals_after_release(HOLD), 1);
}

/// B1, the race behind the one renewal round after a release in the long w2-n5c-k run: a renewal
/// taken for sending just before the release must reach the server before it, not after. The
/// client holds its renewal rounds back 300 ms, so the release always falls in that window.
/// Control: with releases not waiting for it, MONITOR sees the extend after the release.
#[test]
fn b01_a_renewal_on_its_way_lands_before_the_release() {
    for settle in [true, false] {
        let server = RedisServer::start();
        let mut mon = Monitor::start(&server);
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let mut o = opts();
            o.response_timeout = Duration::from_secs(2);
            let c = ferrolock::Client::connect(&server.url(), o).await.unwrap();
            c.set_watchdog_test_knobs(Duration::from_millis(300), settle);
            let lock = c.lock("b", LockOptions::renewing(Duration::from_millis(900))).unwrap();
            let g = lock.acquire(None).await.unwrap();
            // The renewal falls due at ttl / 3 = 300 ms and is sent at about 600 ms.
            tokio::time::sleep(Duration::from_millis(400)).await;
            g.release().await.unwrap();
            tokio::time::sleep(Duration::from_millis(1000)).await; // well past the late send
        });
        let n = mon.renewals_after_release(HOLD);
        if settle {
            assert_eq!(n, 0, "a renewal reached the server after the release");
        } else {
            assert!(n > 0, "control: the extend sent late was not seen after the release");
        }
    }
}

/// B2 (redisson #1626): the holder thread dies without releasing; the watchdog must stop and
/// the lock expire within TTL (+100 ms). Control: a live holder keeps it past the TTL.
#[test]
fn b02_dead_holder_thread_lock_expires_within_ttl() {
    let server = RedisServer::start();
    let c = blocking::Client::connect(&server.url(), opts()).unwrap();
    let ttl = Duration::from_millis(400);
    // Control: a live guard is renewed well past its TTL.
    let lock = c.lock("b", LockOptions::renewing(ttl)).unwrap();
    let g = lock.acquire(None).unwrap();
    std::thread::sleep(ttl * 2);
    assert!(pttl(&server, HOLD) > 0, "control: the watchdog keeps a live hold");
    g.release().unwrap();
    // The holder thread panics while holding (the guard is dropped during unwinding).
    let l2 = c.lock("b", LockOptions::renewing(ttl)).unwrap();
    let r = std::thread::spawn(move || {
        let _g = l2.acquire(None).unwrap();
        panic!("holder thread dies");
    })
    .join();
    assert!(r.is_err());
    let t0 = Instant::now();
    while pttl(&server, HOLD) > 0 {
        assert!(
            t0.elapsed() < ttl + Duration::from_millis(100),
            "lock still held {:?} after the holder died",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// B4 (redisson #775): the master restarts without persistence under a renewed hold, so the
/// hold is gone. The holder must be told LOST by its next renewal (refused by the server), well
/// before its local deadline would say so anyway: a failed renewal is retried, not dropped.
/// Controls: without the fault the renewed hold stays HELD past its TTL; a lease hold (no
/// renewal) across the same restart stays HELD with its key gone: the silent loss this test
/// would catch.
#[test]
fn b04_master_restart_during_renewed_hold_reports_lost() {
    let mut server = RedisServer::start();
    let c = blocking::Client::connect(&server.url(), opts()).unwrap();
    let ttl = Duration::from_millis(1500);
    let g = c.lock("b4", LockOptions::renewing(ttl)).unwrap().acquire(None).unwrap();
    let (tx, lost) = std::sync::mpsc::channel();
    g.on_lost(move |e| {
        let _ = tx.send((Instant::now(), e));
    });
    // Control: no fault, the hold is renewed past its TTL and nothing reports a loss.
    std::thread::sleep(ttl + ttl / 3);
    assert_eq!(g.state(), LockState::Held, "control: a renewed hold without a fault stays held");
    assert!(pttl(&server, "ferrolock:{b4}") > 0);
    assert!(lost.try_recv().is_err(), "control: LOST without a fault");
    let lease =
        c.lock("b4-lease", LockOptions::lease(Duration::from_secs(4))).unwrap().acquire(None).unwrap();

    let deadline_at_fault = Instant::now() + g.remaining();
    server.restart(); // kill -9, start again on the same port: no persistence, the hold is gone
    assert!(g.wait_lost(Duration::from_secs(3)), "the holder was never told its hold is gone");
    let (lost_at, why) = lost.recv_timeout(Duration::from_secs(1)).expect("on_lost did not fire");
    assert_eq!(why.kind(), ErrorKind::Lost);
    eprintln!(
        "LOST {:?} before the local deadline: {why}",
        deadline_at_fault.saturating_duration_since(lost_at)
    );
    assert!(
        lost_at + Duration::from_millis(100) < deadline_at_fault,
        "LOST came {:?} before the local deadline only: renewal did not resume after the fault ({why})",
        deadline_at_fault.saturating_duration_since(lost_at)
    );
    assert_eq!(g.state(), LockState::Lost);
    assert_eq!(g.ensure(Duration::ZERO).unwrap_err().kind(), ErrorKind::Lost);
    // Control: nothing tells a lease holder; it believes it holds a lock that is gone.
    assert_eq!(lease.state(), LockState::Held, "control: the lease hold's loss is silent");
    assert_eq!(pttl(&server, "ferrolock:{b4-lease}"), -2);
    std::thread::sleep(ttl / 2); // the watchdog must not re-create the lost hold
    assert_eq!(pttl(&server, "ferrolock:{b4}"), -2, "a lost hold was re-created");
    assert_eq!(g.release().unwrap_err().kind(), ErrorKind::Lost);
}

const SENTINEL_NAME: &str = "fl-regress";

/// 1 master, 1 replica, 1 sentinel: the minimal shape of core/tests/sentinel.rs's `Topology`
/// (a forced `SENTINEL FAILOVER` needs no quorum, so one sentinel is enough).
struct Failover {
    _master: RedisServer,
    replica: RedisServer,
    sentinel: RedisServer,
}

impl Failover {
    fn start() -> Failover {
        // No 5 s diskless-sync delay before the replica's first sync.
        let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
        let replica = RedisServer::start_replica_of(&master, &[]);
        let sentinel = RedisServer::start_sentinel(&master, SENTINEL_NAME, 1);
        sentinel.wait_for(Duration::from_secs(15), "the sentinel to see the replica", |s| {
            let Ok(mut c) = s.conn() else { return false };
            let r: redis::RedisResult<Vec<redis::Value>> =
                redis::cmd("SENTINEL").arg("replicas").arg(SENTINEL_NAME).query(&mut c);
            matches!(r, Ok(r) if r.len() == 1)
        });
        Failover { _master: master, replica, sentinel }
    }

    fn url(&self) -> String {
        format!("redis+sentinel://127.0.0.1:{}/{SENTINEL_NAME}", self.sentinel.port())
    }

    /// `SENTINEL FAILOVER` (retried while the sentinel has no good replica yet), then wait until
    /// the sentinel names the replica and the replica says it is a master.
    fn failover(&self) {
        let start = Instant::now();
        loop {
            let mut c = self.sentinel.conn().expect("sentinel");
            match redis::cmd("SENTINEL").arg("FAILOVER").arg(SENTINEL_NAME).query::<String>(&mut c) {
                Ok(_) => break,
                Err(e) => {
                    assert!(start.elapsed() < Duration::from_secs(10), "SENTINEL FAILOVER: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        let port = self.replica.port();
        self.sentinel.wait_for(Duration::from_secs(15), "the sentinel to name the replica", |s| {
            s.cmd::<(String, u16)>(&["SENTINEL", "get-master-addr-by-name", SENTINEL_NAME]).1 == port
        });
        self.replica.wait_for(Duration::from_secs(10), "the replica to be promoted", |r| {
            r.info_field("replication", "role").as_deref() == Some("master")
        });
    }
}

/// B5 (redisson #4822, #4706, #5205): after a Sentinel failover any client can take the lock,
/// not only its old holder. A holder (renewing, TTL 3 s: longer than the failover, so its hold
/// survives it) and a waiter of another client that started before the failover; after it the
/// holder stops without releasing (a crash): the waiter gets the lock within TTL + retry, on the
/// new master; then a client connected after the failover and the old holder's handle acquire
/// too. If the hold did expire on the new master during the failover (asynchronous replication:
/// renewals sent to the old master in the switch are lost), the old holder must be told LOST.
/// Controls: before the failover the other client cannot take the held lock; and a hold that
/// never expires on the new master (the stuck state of the bug) fails a bounded acquire.
#[test]
fn b05_after_failover_any_client_acquires_within_ttl_and_retry() {
    let t0 = Instant::now();
    let topo = Failover::start();
    eprintln!("topology up in {:?}", t0.elapsed());
    let ttl = Duration::from_millis(3000);
    let retry = Duration::from_millis(500);
    let holder = blocking::Client::connect(&topo.url(), opts()).unwrap();
    let other = blocking::Client::connect(&topo.url(), opts()).unwrap();
    let held = holder.lock("b5", LockOptions::renewing(ttl)).unwrap();
    let g = held.acquire(None).unwrap();
    let theirs = other.lock("b5", LockOptions::lease(Duration::from_secs(5))).unwrap();
    assert!(theirs.try_acquire().unwrap().is_none(), "control: the held lock is not free");
    let waiter = {
        let theirs = theirs.clone();
        std::thread::spawn(move || {
            let r = theirs.acquire(Some(Duration::from_secs(9)));
            (r, Instant::now())
        })
    };
    let t = Instant::now();
    topo.failover();
    eprintln!("failover done in {:?}", t.elapsed());
    let new_master = format!("127.0.0.1:{}", topo.replica.port());
    let start = Instant::now();
    while holder.as_async().sentinel_master().as_deref() != Some(new_master.as_str()) {
        assert!(start.elapsed() < Duration::from_secs(5), "the holder's client did not follow the failover");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("holder after the failover: {:?}", g.state());
    if waiter.is_finished() {
        eprintln!("the hold expired on the new master during the failover");
        assert!(g.wait_lost(ttl), "another client holds the lock and the old holder was not told LOST");
    }
    let t_crash = Instant::now();
    drop(g); // the holder stops renewing without releasing
    let (r, acquired_at) = waiter.join().unwrap();
    let got = r.expect("the other client's waiter never got the lock after the failover");
    let waited = acquired_at.saturating_duration_since(t_crash);
    eprintln!("the other client acquired {waited:?} after the holder stopped");
    assert!(waited <= ttl + retry, "the other client waited {waited:?} > TTL + retry");
    assert_eq!(
        topo.replica.cmd::<i64>(&["EXISTS", "ferrolock:{b5}"]),
        1,
        "the grant is not on the new master"
    );
    got.release().unwrap();
    // A client connected after the failover, and the old holder's handle: the lock is free now.
    let fresh = blocking::Client::connect(&topo.url(), opts()).unwrap();
    let fl = fresh.lock("b5", LockOptions::lease(Duration::from_secs(5))).unwrap();
    fl.acquire(Some(retry)).expect("a client connected after the failover").release().unwrap();
    held.acquire(Some(retry)).expect("the old holder's handle").release().unwrap();
    // Control: a hold that never expires on the new master fails a bounded acquire (here TTL
    // 500 ms + retry).
    let _: i64 =
        topo.replica.cmd(&["HSET", "ferrolock:{b5-stuck}", "owner", "nobody", "count", "1", "fence", "1"]);
    let short = Duration::from_millis(500);
    let e =
        fresh.lock("b5-stuck", LockOptions::lease(short)).unwrap().acquire(Some(short + retry)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AcquireTimeout, "control: {e}");
}

/// B6 (redisson #3636): the holder alone is cut off (blackholed proxy); it must read LOST once
/// another client has acquired, and be told. Control: without the cut the other client cannot
/// acquire.
#[test]
fn b06_partitioned_holder_is_lost_before_another_acquires() {
    let server = RedisServer::start();
    let proxy = DelayProxy::start(addr(&server)).unwrap();
    let holder = blocking::Client::connect(&proxy.url(), opts()).unwrap();
    let other = blocking::Client::connect(&server.url(), opts()).unwrap();
    let ttl = Duration::from_millis(600);
    let g = holder.lock("b", LockOptions::renewing(ttl)).unwrap().acquire(None).unwrap();
    let lost_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let la = lost_at.clone();
    g.on_lost(move |_| *la.lock().unwrap() = Some(Instant::now()));
    let ol = other.lock("b", LockOptions::renewing(ttl)).unwrap();
    // Control: connected holder, the other waits in vain for 2×TTL.
    assert_eq!(ol.acquire(Some(ttl * 2)).map(|_| ()).unwrap_err().kind(), ErrorKind::AcquireTimeout);
    proxy.set_delay(Duration::from_secs(30)); // blackhole the holder only
    let o = ol.acquire(Some(Duration::from_secs(5))).unwrap();
    // The holder's own view once another client has the lock: Lost (its local deadline, 8 ms
    // before the server's expiry, has passed), never Held.
    assert_eq!(g.state(), LockState::Lost, "the holder reads Held while another client holds the lock");
    // The callback comes from the watchdog's wake-up at that deadline; on a loaded machine (test
    // binaries run side by side) it can be scheduled after the other client's wake-up. It must
    // come, and soon: the bug was a partitioned holder never told.
    let t0 = Instant::now();
    while lost_at.lock().unwrap().is_none() && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(lost_at.lock().unwrap().is_some(), "LOST never fired for the partitioned holder");
    o.release().unwrap();
}

fn script(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../core/scripts/{name}.lua", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// B7 (early Redisson): renewal by a non-owner must not extend. Control: the owner's does.
#[test]
fn b07_renewal_by_non_owner_does_not_extend() {
    let server = RedisServer::start();
    let c = blocking::Client::connect(&server.url(), opts()).unwrap();
    let g = c.lock("b", LockOptions::lease(Duration::from_millis(2000))).unwrap().acquire(None).unwrap();
    let owner = String::from_utf8(c.inspect("b").unwrap().unwrap().owner).unwrap();
    let extend = script("extend");
    let before = pttl(&server, HOLD);
    let r: i64 = server.cmd(&["EVAL", &extend, "1", HOLD, "00000000000000000000000000000000", "60000"]);
    assert_eq!(r, 0);
    assert!(pttl(&server, HOLD) <= before, "a non-owner extended the lease");
    let r: i64 = server.cmd(&["EVAL", &extend, "1", HOLD, &owner, "60000"]);
    assert_eq!(r, 1);
    assert!(pttl(&server, HOLD) > 50_000, "control: the owner's extend works");
    g.release().unwrap();
}

fn send_sync<T: Send + Sync>() {}

/// B8 (redis-py #656, #3535, #3540): the owner is the lock handle's token, not the thread or
/// task that acquired (DESIGN §7): guards are `Send + Sync`; a guard released on another thread
/// or tokio task releases the lock, and a clone of the handle re-enters from any thread. Another
/// handle (another token) contends instead of sharing the hold, and its stale guard's release is
/// a typed `NotHeld` that deletes nothing. Control: the owner's release from the other thread or
/// task does delete.
#[test]
fn b08_release_from_another_thread_or_task() {
    send_sync::<blocking::Guard>();
    send_sync::<ferrolock::Guard>();
    let server = RedisServer::start();
    let c = blocking::Client::connect(&server.url(), opts()).unwrap();
    let lease = LockOptions::lease(Duration::from_secs(5));
    let mine = c.lock("b", lease).unwrap();
    let theirs = c.lock("b", lease).unwrap();
    let stale = theirs.acquire(None).unwrap(); // the other handle's earlier hold, released since
    stale.release().unwrap();
    let g = mine.acquire(None).unwrap();
    let fence = g.fence();
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(theirs.try_acquire().unwrap().is_none(), "another handle shared the hold");
            let e = stale.release().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotHeld, "{e}");
        });
    });
    let info = c.inspect("b").unwrap().expect("the other handle's release deleted the hold");
    assert_eq!(info.fence, fence);
    assert!(pttl(&server, HOLD) > 0);
    let m = mine.clone();
    std::thread::spawn(move || {
        let again = m.try_acquire().unwrap().expect("a clone of the owner's handle re-enters");
        assert_eq!((again.fence(), again.count()), (fence, 2));
        again.release().unwrap();
        g.release().unwrap(); // moved here from the acquiring thread
        assert_eq!(g.state(), LockState::Released);
    })
    .join()
    .unwrap();
    assert_eq!(pttl(&server, HOLD), -2, "control: the owner's release from another thread deletes");

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let c = ferrolock::Client::connect(&server.url(), opts()).await.unwrap();
        let mine = c.lock("b", lease).unwrap();
        let theirs = c.lock("b", lease).unwrap();
        let m = mine.clone();
        let g = Arc::new(tokio::spawn(async move { m.acquire(None).await }).await.unwrap().unwrap());
        let t = theirs.clone();
        let other = tokio::spawn(async move { t.try_acquire().await }).await.unwrap().unwrap();
        assert!(other.is_none(), "another handle's task shared the hold");
        let g2 = g.clone();
        tokio::spawn(async move { g2.release().await }).await.unwrap().unwrap();
        assert!(c.inspect("b").await.unwrap().is_none(), "control: the release from another task deletes");
        let h = theirs.acquire(Some(Duration::from_secs(1))).await.unwrap();
        let e = g.release().await.unwrap_err(); // the acquiring task's copy, already released
        assert_eq!(e.kind(), ErrorKind::NotHeld, "{e}");
        let info = c.inspect("b").await.unwrap().expect("a stale release deleted the next holder's lock");
        assert_eq!(info.fence, h.fence());
        h.release().await.unwrap();
    });
}

/// B10 (redis-py #4258): the connection drops during release; the guard stays releasable and a
/// retry frees the lock. Control: without the retry the lock stays held (stranded until lease).
#[test]
fn b10_connection_drop_during_release_retry_succeeds() {
    let server = RedisServer::start();
    let proxy = DelayProxy::start(addr(&server)).unwrap();
    let c = blocking::Client::connect(&proxy.url(), opts()).unwrap();
    let g = c.lock("b", LockOptions::lease(Duration::from_secs(30))).unwrap().acquire(None).unwrap();
    proxy.set_delay(Duration::from_millis(400)); // the release request sits in the proxy...
    let a = addr(&server);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        // ...while every client connection is reset.
        ferrolock_chaos::resp::once(&a, &["CLIENT", "KILL", "TYPE", "normal"]).unwrap();
    });
    let first = g.release();
    killer.join().unwrap();
    assert!(first.as_ref().is_err_and(|e| e.kind().is_transient()), "{first:?}");
    assert!(pttl(&server, HOLD) > 0, "control: the failed release left the hold in place");
    proxy.set_delay(Duration::ZERO);
    let t0 = Instant::now();
    loop {
        match g.release() {
            Ok(()) => break,
            Err(e) if e.kind().is_transient() && t0.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("retry failed: {e}"),
        }
    }
    assert_eq!(pttl(&server, HOLD), -2, "the retried release must free the lock");
}

/// B10, left alone: the release fails and the caller neither retries nor drops the guard (a
/// garbage-collected binding whose collector has not run: Node, Go). The hold is renewed for
/// one more lease, so that a retry would find it, and then runs out instead of being renewed as
/// long as the guard object lives. Control: past the lease it had when the release failed, the
/// hold is still there (renewed).
#[test]
fn b10_a_failed_release_left_alone_runs_out_after_one_more_lease() {
    // A script that never ends makes the server answer BUSY (transient) without running the
    // release; SCRIPT KILL ends it, so the hold stays as it was.
    let server = RedisServer::start_with(&["--lua-time-limit", "50"]);
    let c = blocking::Client::connect(&server.url(), opts()).unwrap();
    let lease = Duration::from_secs(2);
    let g = c.lock("b", LockOptions::renewing(lease)).unwrap().acquire(None).unwrap();
    let a = addr(&server);
    let busy =
        std::thread::spawn(move || ferrolock_chaos::resp::once(&a, &["EVAL", "while true do end", "0"]));
    while !matches!(ferrolock_chaos::resp::once(&addr(&server), &["PING"]), Ok(Val::Error(e)) if e.starts_with("BUSY"))
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let first = g.release();
    let failed = Instant::now();
    ferrolock_chaos::resp::once(&addr(&server), &["SCRIPT", "KILL"]).unwrap();
    let _ = busy.join();
    assert!(first.as_ref().is_err_and(|e| e.kind().is_transient()), "{first:?}");
    // Renewals every third of the lease: without them the hold would be gone by now.
    std::thread::sleep((failed + lease * 13 / 10).saturating_duration_since(Instant::now()));
    assert!(pttl(&server, HOLD) > 0, "control: the hold was not renewed after the failed release");
    std::thread::sleep((failed + lease * 5 / 2).saturating_duration_since(Instant::now()));
    assert_eq!(pttl(&server, HOLD), -2, "an abandoned guard kept its lock renewed");
    let late = g.release().unwrap_err();
    assert_eq!(late.kind(), ErrorKind::Lost, "{late}");
}

/// B10 on the multiplexed connection (TLS, Sentinel and Cluster clients use no other; so does a
/// plain one with the hot path off): the server stalls past the response timeout while a release
/// is on the wire; the first try runs when it resumes, so the retry finds the hold gone. That is
/// not reported `LOST` when nobody was granted the lock since this hold's grant. Control: when
/// the lease ran out and another owner took the lock before the release, the same sequence
/// still reports `LOST`.
#[test]
fn b10_a_late_release_on_the_multiplexed_connection_is_not_a_loss() {
    let server = Arc::new(RedisServer::start_with(&["--enable-debug-command", "yes"]));
    let mut o = opts();
    o.response_timeout = Duration::from_secs(1);
    o.connect_timeout = Duration::from_secs(2);
    let c = blocking::Client::connect(&server.url(), o).unwrap();
    assert!(c.as_async().set_hot_path_for_tests(false), "a redis:// client has a hot path to turn off");
    // Busy for 1.3 s (a slow command): the first try times out after 1 s, and its retry
    // reaches the server after it.
    let stall = |server: &Arc<RedisServer>| {
        use std::io::{Read, Write};
        let s = server.clone();
        let t = std::thread::spawn(move || s.cmd::<String>(&["DEBUG", "SLEEP", "1.3"]));
        // Until a PING goes unanswered: the server is inside the slow command.
        let mut probe = std::net::TcpStream::connect(addr(server)).unwrap();
        probe.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        while probe.write_all(b"PING\r\n").is_ok() && probe.read(&mut [0u8; 64]).is_ok() {
            std::thread::sleep(Duration::from_millis(5));
        }
        t
    };
    // Scripts loaded first: the first try must be an EVALSHA that runs, not a NOSCRIPT.
    let lock = c.lock("b", LockOptions::lease(Duration::from_secs(30))).unwrap();
    lock.acquire(None).unwrap().release().unwrap();
    let g = lock.acquire(None).unwrap();
    let t = stall(&server);
    let r = g.release();
    t.join().unwrap();
    assert!(r.is_ok(), "the first try released the lock and nobody else held it: {r:?}");
    assert_eq!(pttl(&server, HOLD), -2);

    let g = c.lock("b", LockOptions::lease(Duration::from_millis(200))).unwrap().acquire(None).unwrap();
    let other = blocking::Client::connect(&server.url(), opts()).unwrap();
    let theirs = other.lock("b", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let theirs = theirs.acquire(Some(Duration::from_secs(2))).expect("the other owner takes the lock");
    let t = stall(&server);
    let r = g.release();
    t.join().unwrap();
    let e = r.expect_err("control: the lease ran out and another owner took the lock");
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert!(pttl(&server, HOLD) > 0, "the release deleted nothing of the new owner's");
    assert!(theirs.fence() > g.fence());
}

/// B11 (redis-py uuid1 tokens): 128-bit CSPRNG tokens: 10^6 without duplicates, hex digits
/// uniform (chi-square). Control: the same statistic flags a time-based generator.
#[test]
fn b11_tokens_unique_and_uniform() {
    let n = 1_000_000;
    let mut seen = std::collections::HashSet::with_capacity(n);
    let mut counts = [0u64; 16];
    for _ in 0..n {
        let t = ferrolock::new_token().unwrap();
        assert_eq!(t.len(), 32);
        for ch in t.bytes() {
            counts[(ch as char).to_digit(16).expect("hex") as usize] += 1;
        }
        assert!(seen.insert(t), "duplicate token");
    }
    let chi = |c: &[u64; 16]| {
        let total: u64 = c.iter().sum();
        let e = total as f64 / 16.0;
        c.iter().map(|&o| (o as f64 - e).powi(2) / e).sum::<f64>()
    };
    // 15 degrees of freedom: p = 1e-6 at about 60.
    assert!(chi(&counts) < 60.0, "token hex digits not uniform: chi2 = {}", chi(&counts));
    let mut timeish = [0u64; 16];
    for i in 0..100_000u64 {
        let t = format!("{:016x}{:016x}", 1_700_000_000_000_000u64 + i, 0x1234u64);
        for ch in t.bytes() {
            timeish[(ch as char).to_digit(16).unwrap() as usize] += 1;
        }
    }
    assert!(chi(&timeish) > 60.0, "control: a time-based token must fail the test");
}

/// B14 (node-redlock #103): extend mutates the guard (no new object to track).
#[test]
fn b14_extend_mutates_the_guard() {
    let server = RedisServer::start();
    let c = blocking::Client::connect(&server.url(), opts()).unwrap();
    let g = c.lock("b", LockOptions::lease(Duration::from_millis(300))).unwrap().acquire(None).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let before = g.remaining();
    g.extend(Duration::from_secs(5)).unwrap();
    assert!(g.remaining() > Duration::from_secs(4) && g.remaining() > before);
    std::thread::sleep(Duration::from_millis(400)); // past the original lease
    g.ensure(Duration::ZERO).unwrap();
    g.release().unwrap();
}

/// B15 (redlock-rb #36): extending an expired lock fails and reports LOST. Control: extending
/// in time succeeds.
#[test]
fn b15_extend_after_expiry_fails_and_is_lost() {
    let server = RedisServer::start();
    let c = blocking::Client::connect(&server.url(), opts()).unwrap();
    let lock = c.lock("b", LockOptions::lease(Duration::from_millis(200))).unwrap();
    let g = lock.acquire(None).unwrap();
    g.extend(Duration::from_millis(200)).expect("control: in-time extend");
    std::thread::sleep(Duration::from_millis(300));
    let e = g.extend(Duration::from_secs(10)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert_eq!(g.state(), LockState::Lost);
    assert_eq!(pttl(&server, HOLD), -2, "the expired hold must not be recreated");
}

/// B16 (redsync #72): `remaining()` never grows without a renewal and reaches 0 at expiry.
#[test]
fn b16_remaining_is_monotonic_and_ends_at_zero() {
    let server = RedisServer::start();
    let c = blocking::Client::connect(&server.url(), opts()).unwrap();
    let g = c.lock("b", LockOptions::lease(Duration::from_millis(250))).unwrap().acquire(None).unwrap();
    let mut last = g.remaining();
    assert!(last > Duration::ZERO && last <= Duration::from_millis(250));
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(350) {
        let r = g.remaining();
        assert!(r <= last, "remaining grew from {last:?} to {r:?} without a renewal");
        last = r;
        std::thread::sleep(Duration::from_millis(3));
    }
    assert_eq!(last, Duration::ZERO);
    assert!(g.ensure(Duration::ZERO).is_err());
}

/// B19 (go-redislock #44): every key of one acquire shares the `{name}` hash tag.
#[test]
fn b19_keys_of_one_lock_share_the_hash_tag() {
    let server = RedisServer::start();
    let mut mon = Monitor::start(&server);
    let c = blocking::Client::connect(&server.url(), opts()).unwrap();
    c.lock("b", LockOptions::lease(Duration::from_secs(1)))
        .unwrap()
        .acquire(None)
        .unwrap()
        .release()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    mon.stop.store(true, Ordering::Relaxed);
    let _ = mon.th.take().map(|t| t.join());
    let lines = mon.lines.lock().unwrap();
    let mut checked = 0;
    for a in lines.iter().filter(|a| a.len() > 3 && a[0].to_ascii_lowercase().starts_with("eval")) {
        let nkeys: usize = a[2].parse().unwrap();
        for k in &a[3..3 + nkeys] {
            assert!(k.contains("{b}"), "key {k} lacks the hash tag");
            checked += 1;
        }
    }
    assert!(checked >= 3, "saw {checked} keys");
}

/// B21 (unlock by plain DEL): a stale guard's release deletes nothing of the next owner.
/// Control: the owner's own release does delete.
#[test]
fn b21_release_by_non_owner_deletes_nothing() {
    let server = RedisServer::start();
    let c = blocking::Client::connect(&server.url(), opts()).unwrap();
    let a = c.lock("b", LockOptions::lease(Duration::from_millis(200))).unwrap();
    let b = c.lock("b", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let ga = a.acquire(None).unwrap();
    std::thread::sleep(Duration::from_millis(300)); // a's lease runs out
    let gb = b.acquire(Some(Duration::from_secs(1))).unwrap();
    let e = ga.release().unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Lost | ErrorKind::NotHeld), "{e}");
    let release = script("release");
    let r: i64 = server.cmd(&["EVAL", &release, "1", HOLD, "ffffffffffffffffffffffffffffffff", "ch", "0"]);
    assert_eq!(r, -1);
    let info = c.inspect("b").unwrap().expect("b still holds");
    assert_eq!(info.fence, gb.fence());
    gb.release().unwrap();
    assert!(c.inspect("b").unwrap().is_none(), "control: the owner's release deletes");
}
