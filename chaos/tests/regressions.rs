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

/// B6 (redisson #3636): the holder alone is cut off (blackholed proxy); LOST must fire before
/// another client acquires. Control: without the cut the other client cannot acquire.
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
    let acquired_at = Instant::now();
    let lost = lost_at.lock().unwrap().expect("LOST never fired for the partitioned holder");
    assert!(
        lost <= acquired_at,
        "the other client acquired {:?} before the holder learned it was LOST",
        lost - acquired_at
    );
    assert_eq!(g.state(), LockState::Lost);
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
