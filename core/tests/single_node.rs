//! The single-node lock against real redis-server processes (issue: core, tests 1–11).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions, LockState};
use redis::AsyncCommands;

/// Read-modify-write of `ctr` on the server, with a gap between read and write so that any
/// overlap of two critical sections loses an update.
async fn rmw(conn: &mut redis::aio::MultiplexedConnection) {
    let v: i64 = conn.get("ctr").await.unwrap_or(0);
    tokio::time::sleep(Duration::from_micros(200)).await;
    let _: () = conn.set("ctr", v + 1).await.unwrap();
}

// 1. 8 clients × 200 acquisitions: no overlap, exact count, fences increasing in grant order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contention_no_overlap_exact_count_increasing_fences() {
    let server = RedisServer::start();
    let (workers, per) = (8, 200);
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let client = connect(&server).await;
        let mut data = data_conn(&server).await;
        let (inside, overlaps, fences) = (inside.clone(), overlaps.clone(), fences.clone());
        tasks.push(tokio::spawn(async move {
            let lock = client.lock("contended", LockOptions::lease(Duration::from_secs(5))).unwrap();
            for _ in 0..per {
                let g = lock.acquire(Some(Duration::from_secs(30))).await.unwrap();
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                fences.lock().unwrap().push(g.fence());
                rmw(&mut data).await;
                inside.store(false, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    let ctr: i64 = server.cmd(&["GET", "ctr"]);
    assert_eq!(ctr, workers * per);
    let f = fences.lock().unwrap().clone();
    assert_eq!(f.len() as i64, workers * per);
    assert!(f.windows(2).all(|w| w[0] < w[1]), "fences not strictly increasing in grant order");

    // Control: the same workload without the lock must lose updates, or this test proves nothing.
    let _: () = server.cmd(&["SET", "ctr", "0"]);
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let mut data = data_conn(&server).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                rmw(&mut data).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let ctr: i64 = server.cmd(&["GET", "ctr"]);
    assert!(ctr < workers * 20, "control run lost no updates: the check cannot fail");
}

// 2. Reentrancy: same fence, count 1 → 3 → 0; non-owners change nothing; over-release is NotHeld.
#[tokio::test]
async fn reentrancy_and_non_owner() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let lock = client.lock("re", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let g1 = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let g2 = lock.clone().acquire(Some(Duration::ZERO)).await.unwrap();
    let g3 = lock.try_acquire().await.unwrap().expect("re-entry");
    assert_eq!((g1.fence(), g2.fence()), (g3.fence(), g3.fence()));
    assert_eq!(g3.count(), 3);
    assert_eq!(client.inspect("re").await.unwrap().unwrap().count, 3);

    // Another handle contends, even on the same client.
    let other = client.lock("re", LockOptions::lease(Duration::from_secs(10))).unwrap();
    assert!(other.try_acquire().await.unwrap().is_none());

    // Non-owner release/extend at the protocol level: nothing changes.
    let before = client.inspect("re").await.unwrap().unwrap();
    let mut raw = data_conn(&server).await;
    let released: i64 = redis::Script::new(include_str!("../scripts/release.lua"))
        .key("ferrolock:{re}")
        .arg("not-the-owner")
        .arg("ferrolock:{re}:released")
        .arg(0)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(released, -1);
    let extended: i64 = redis::Script::new(include_str!("../scripts/extend.lua"))
        .key("ferrolock:{re}")
        .arg("not-the-owner")
        .arg(999_999)
        .invoke_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(extended, 0);
    let after = client.inspect("re").await.unwrap().unwrap();
    assert_eq!((after.owner, after.count, after.fence), (before.owner, before.count, before.fence));
    assert!(after.ttl.unwrap() <= Duration::from_secs(10));

    g3.release().await.unwrap();
    assert_eq!(g1.count(), 2);
    // A released level reads released while the outer levels stay live.
    assert_eq!((g3.state(), g3.count(), g3.remaining()), (LockState::Released, 0, Duration::ZERO));
    assert_eq!(g3.ensure(Duration::ZERO).unwrap_err().kind(), ErrorKind::NotHeld);
    assert_eq!(g1.state(), LockState::Held);
    g1.ensure(Duration::ZERO).unwrap();
    g2.release().await.unwrap();
    assert_eq!(client.inspect("re").await.unwrap().unwrap().count, 1);
    g1.release().await.unwrap();
    assert!(client.inspect("re").await.unwrap().is_none());
    // Releasing more times than acquired: NotHeld, and nothing is deleted.
    let g_other = other.acquire(Some(Duration::ZERO)).await.unwrap();
    assert_eq!(g1.release().await.unwrap_err().kind(), ErrorKind::NotHeld);
    assert_eq!(g3.release().await.unwrap_err().kind(), ErrorKind::NotHeld);
    assert!(client.inspect("re").await.unwrap().is_some(), "over-release deleted another owner's hold");
    // A stale guard of a lost hold cannot touch the new owner's hold either.
    g_other.release().await.unwrap();
    let mine = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let removed = client.force_unlock("re").await.unwrap().expect("the hold force_unlock removed");
    assert_eq!((removed.fence, removed.count), (mine.fence(), 1));
    // What was left of its 10 s lease, as inspect reports it (not None, "no expiry").
    assert!(
        removed.ttl.is_some_and(|t| t > Duration::from_secs(5) && t <= Duration::from_secs(10)),
        "{removed:?}"
    );
    // A hash under the name that is no ferrolock hold (written by something else): inspect
    // refuses to read it, force_unlock removes it and says what it could read.
    let _: () = server.cmd(&["HSET", "ferrolock:{odd}", "owner", "x", "count", "many", "fence", "-5"]);
    assert_eq!(client.inspect("odd").await.unwrap_err().kind(), ErrorKind::Protocol);
    let removed = client.force_unlock("odd").await.unwrap().expect("the odd hash was there");
    assert_eq!((removed.owner.as_slice(), removed.count, removed.fence), (&b"x"[..], 0, 0));
    assert!(client.inspect("odd").await.unwrap().is_none());
    let theirs = other.acquire(Some(Duration::ZERO)).await.unwrap();
    assert_eq!(mine.extend(Duration::from_secs(60)).await.unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(mine.release().await.unwrap_err().kind(), ErrorKind::Lost);
    // A stale guard keeps saying LOST after that release (it said NOT_HELD).
    assert_eq!(mine.release().await.unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(mine.extend(Duration::from_secs(60)).await.unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(mine.state(), LockState::Lost);
    let info = client.inspect("re").await.unwrap().unwrap();
    assert_eq!((info.count, info.fence), (1, theirs.fence()));
    assert!(info.ttl.unwrap() <= Duration::from_secs(10), "non-owner extend changed the lease");
    theirs.release().await.unwrap();
}

// A re-entered level whose guard is dropped without a release is given up: the last live guard's
// release frees the lock (the level used to stay on the server, renewed by the watchdog while the
// client lived), and a handle whose guards were all dropped re-enters at one level.
#[tokio::test]
async fn a_dropped_inner_guard_does_not_keep_the_lock() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let lease = || LockOptions::lease(Duration::from_secs(10));
    let (lock, other) = (client.lock("dropped", lease()).unwrap(), client.lock("dropped", lease()).unwrap());
    let outer = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    drop(lock.acquire(Some(Duration::ZERO)).await.unwrap());
    assert_eq!(outer.count(), 1);
    outer.release().await.unwrap();
    assert!(client.inspect("dropped").await.unwrap().is_none(), "a dropped inner level kept the lock");
    other.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap();

    let a = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    drop(lock.acquire(Some(Duration::ZERO)).await.unwrap());
    drop(a);
    let c = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    assert_eq!((c.count(), client.inspect("dropped").await.unwrap().unwrap().count), (1, 1));
    c.release().await.unwrap();
    assert!(client.inspect("dropped").await.unwrap().is_none(), "dropped levels outlived a re-entry");
}

// A guard dropped while another level's release is on the wire: that release answers with the
// count it set (one level left), and then no live guard is left. Renewal must stop so the level
// runs out with its lease (it used to be renewed for as long as the handle lived: the lock was
// held for good and no guard could release it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_during_another_levels_release_does_not_keep_the_lock() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let ttl = Duration::from_millis(600);
    let lock = client.lock("drop-mid-release", LockOptions::renewing(ttl)).unwrap();
    let outer = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let inner = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    server.pause();
    {
        let release = inner.release();
        tokio::pin!(release);
        assert!(poll_once(release.as_mut()).await.is_pending(), "released while the server was stopped");
        drop(outer);
        server.resume();
        release.await.unwrap();
    }
    drop(inner);
    let t0 = Instant::now();
    while client.inspect("drop-mid-release").await.unwrap().is_some() && t0.elapsed() < ttl * 6 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        client.inspect("drop-mid-release").await.unwrap().is_none(),
        "every guard is gone, yet the level left on the server is still renewed"
    );
    drop(lock);
}

/// Poll `f` once.
async fn poll_once<F: std::future::Future + Unpin>(mut f: F) -> std::task::Poll<F::Output> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut f).poll(cx))).await
}

/// `g`'s last release fails without reaching the server: a script runs 400 ms and the server
/// (started with `--busy-reply-threshold 10`) answers everyone else BUSY meanwhile. Returns when
/// the release failed; the script has ended when this returns.
async fn release_fails_while_busy(server: &RedisServer, g: &ferrolock::Guard) -> Instant {
    let busy = {
        let mut c = server.conn().unwrap();
        std::thread::spawn(move || {
            let spin = "local t = redis.call('TIME') local until_us = t[1] * 1000000 + t[2] + 400000 \
                        repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] > until_us return 1";
            let _: i64 = redis::cmd("EVAL").arg(spin).arg(0).query(&mut c).unwrap();
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let e = g.release().await.unwrap_err();
    assert!(e.kind().is_transient(), "{e}");
    let failed_at = Instant::now();
    tokio::task::spawn_blocking(move || busy.join().unwrap()).await.unwrap();
    failed_at
}

// After a last release fails without reaching the server (BUSY), the watchdog renews the hold for
// one more lease only, in case the guard was abandoned. A re-entry says it was not: the hold is
// renewed as before (the cut-off used to stay, and the re-entered hold was lost one lease later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_after_a_failed_release_is_renewed() {
    let server = RedisServer::start_with(&["--busy-reply-threshold", "10"]);
    let client = connect_with(&server, fast_opts()).await;
    let ttl = Duration::from_millis(900);
    let lock = client.lock("retry-reenter", LockOptions::renewing(ttl)).unwrap();
    let first = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    release_fails_while_busy(&server, &first).await;
    let again = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    assert_eq!(again.count(), 2);
    let t0 = Instant::now();
    while t0.elapsed() < ttl * 4 {
        assert_eq!(again.state(), LockState::Held, "a re-entered hold was lost after {:?}", t0.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    again.release().await.unwrap();
    first.release().await.unwrap();
    assert!(client.inspect("retry-reenter").await.unwrap().is_none());
}

// 3. Fences across SHUTDOWN NOSAVE + restart, across idle expiry, and above 2^50.
#[tokio::test]
async fn fences_survive_restart_expiry_and_big_values() {
    let mut server = RedisServer::start();
    let mut opts = ClientOptions::default();
    opts.fence_retention = Duration::from_millis(100);
    let client = connect_with(&server, opts.clone()).await;
    let lock = client.lock("f", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let mut last = 0;
    for _ in 0..3 {
        let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
        assert!(g.fence() > last);
        last = g.fence();
        g.release().await.unwrap();
    }
    // Idle expiry of the stored value: the server-time floor keeps order.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(client.last_fence("f").await.unwrap(), None, "retention did not expire");
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    assert!(g.fence() > last);
    last = g.fence();
    g.release().await.unwrap();
    drop(lock);
    drop(client);

    // Restart without persistence: everything is gone but fences still increase.
    server.shutdown_nosave();
    server.restart();
    let client = connect_with(&server, opts).await;
    let lock = client.lock("f", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    assert!(g.fence() > last, "fence went backwards after restart: {} <= {last}", g.fence());
    g.release().await.unwrap();

    // Values above 2^50 (and the server clock) round-trip exactly: no %.14g rounding.
    for big in [(1u64 << 52) + 3, (1u64 << 53) - 10] {
        let _: () = server.cmd(&["SET", "ferrolock:{big}:fence", &big.to_string()]);
        let big_lock = client.lock("big", LockOptions::lease(Duration::from_secs(5))).unwrap();
        let g = big_lock.acquire(Some(Duration::ZERO)).await.unwrap();
        assert_eq!(g.fence(), big + 1);
        let stored: String = server.cmd(&["GET", "ferrolock:{big}:fence"]);
        assert_eq!(stored, (big + 1).to_string());
        g.release().await.unwrap();
    }
}

/// A lock key that holds another type (a name clash with the application's own keys) fails
/// every acquire the same way: waiting cannot cure it, so even an unbounded wait ends at once
/// with the server's reason instead of retrying it as a connection fault forever.
#[tokio::test]
async fn a_lock_key_of_another_type_ends_even_an_unbounded_wait() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let _: () = server.cmd(&["SET", "ferrolock:{clash}", "the application's value"]);
    let lock = client.lock("clash", LockOptions::lease(Duration::from_secs(5))).unwrap();
    for wait in [Some(Duration::ZERO), None] {
        let r = tokio::time::timeout(Duration::from_secs(5), lock.acquire(wait)).await;
        let e = r.expect("an acquire kept retrying a WRONGTYPE refusal").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Script, "{e}");
        assert!(!e.kind().is_transient());
        assert!(e.message().contains("WRONGTYPE"), "{e}");
    }
    let value: String = server.cmd(&["GET", "ferrolock:{clash}"]);
    assert_eq!(value, "the application's value");
}

/// A release that timed out (both its tries: the server stopped) but ran once the server went
/// on, and is then called again: the retry finds the hold gone and nobody granted since (the
/// fence counter unchanged), so it succeeds, as within one call (docs/CONNECTIONS.md, "Late
/// replies are not wasted"). Control: with another owner's grant in between, it is LOST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_retried_after_its_timed_out_tries_ran_succeeds() {
    let server = RedisServer::start();
    let mut opts = ClientOptions::default();
    opts.response_timeout = Duration::from_millis(300);
    let client = connect_with(&server, opts).await;
    let other = connect(&server).await;
    for (granted_between, opts) in [
        (false, LockOptions::lease(Duration::from_secs(5))),
        (false, LockOptions::default()),
        (true, LockOptions::default()),
    ] {
        let name = format!("retried-release-{granted_between}-{:?}", opts.renew);
        let lock = client.lock(&name, opts).unwrap();
        let g = lock.acquire(None).await.unwrap();
        release_runs_after_it_timed_out(&server, &g, &other, &name, granted_between).await;
        let r = g.release().await;
        if granted_between {
            assert_eq!(r.unwrap_err().kind(), ErrorKind::Lost);
        } else {
            r.unwrap();
            assert_eq!(g.state(), LockState::Released);
        }
    }
}

/// `g`'s release times out on a stopped server and runs once it resumes (the key is gone then);
/// with `granted_between`, `other` is granted the lock and releases it after that.
async fn release_runs_after_it_timed_out(
    server: &RedisServer,
    g: &ferrolock::Guard,
    other: &Client,
    name: &str,
    granted_between: bool,
) {
    server.pause();
    let first = g.release().await.unwrap_err();
    assert!(first.kind().is_transient(), "{first}");
    server.resume();
    // The stopped tries run now: the first deletes the hold.
    let key = format!("ferrolock:{{{name}}}");
    server.wait_for(Duration::from_secs(3), "the late release ran", |s| s.cmd::<i64>(&["EXISTS", &key]) == 0);
    if granted_between {
        let o = other.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap();
        o.acquire(None).await.unwrap().release().await.unwrap();
    }
}

// The same, retried only after the watchdog's next renewal of the hold (which it renews for a
// retry, `register_for_retry`): that renewal finds the key gone by the release itself. It marked
// the hold LOST and ran `on_lost`, and the retry then failed with LOST, for a lock released as
// asked. The fence counter decides, as for a retry: nobody granted since, released.
#[tokio::test]
async fn a_release_retried_after_the_next_renewal_is_not_a_loss() {
    let server = RedisServer::start();
    let mut opts = ClientOptions::default();
    opts.response_timeout = Duration::from_millis(300);
    opts.watchdog_ttl = Duration::from_millis(1500);
    let client = connect_with(&server, opts).await;
    let other = connect(&server).await;
    for granted_between in [false, true] {
        let name = format!("retried-after-renewal-{granted_between}");
        let lock = client.lock(&name, LockOptions::default()).unwrap();
        let g = lock.acquire(None).await.unwrap();
        let lost = Arc::new(AtomicUsize::new(0));
        let seen = lost.clone();
        g.on_lost(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        release_runs_after_it_timed_out(&server, &g, &other, &name, granted_between).await;
        // Until the renewal a third of the lease after the failed release has decided the hold
        // (released, or lost); the retry comes after it.
        let t0 = Instant::now();
        while !matches!(g.state(), LockState::Released | LockState::Lost)
            && t0.elapsed() < Duration::from_secs(5)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let r = g.release().await;
        if granted_between {
            // Control: another owner was granted meanwhile; a loss, and said so.
            assert_eq!(r.unwrap_err().kind(), ErrorKind::Lost);
            assert_eq!(g.state(), LockState::Lost);
            assert_eq!(lost.load(Ordering::SeqCst), 1);
        } else {
            r.unwrap();
            assert_eq!(g.state(), LockState::Released);
            tokio::time::sleep(Duration::from_millis(100)).await; // (callbacks run on the blocking pool)
            assert_eq!(lost.load(Ordering::SeqCst), 0, "on_lost ran for a lock released as asked");
        }
    }
}

/// 8 workers contend on one lock, each holding for `hold`; returns client commands per
/// acquisition. `shared`: the workers are 8 handles of one client (else 8 clients).
async fn contended_calls_per_acquisition(
    server: &RedisServer,
    name: &str,
    hold: Duration,
    per: usize,
    shared: bool,
) -> f64 {
    let one = connect(server).await;
    let before = client_calls(server);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let client = if shared { one.clone() } else { connect(server).await };
        let name = name.to_owned();
        tasks.push(tokio::spawn(async move {
            let lock = client.lock(&name, LockOptions::lease(Duration::from_secs(10))).unwrap();
            for _ in 0..per {
                let g = lock.acquire(Some(Duration::from_secs(60))).await.unwrap();
                tokio::time::sleep(hold).await;
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let calls = client_calls(server) - before;
    calls as f64 / (8 * per) as f64
}

// 4. Waiters wake on the release message: commands per acquisition stay small and do not grow
//    with the wait time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_wake_by_notification_not_polling() {
    let server = RedisServer::start();
    let short = contended_calls_per_acquisition(&server, "n1", Duration::from_millis(1), 25, false).await;
    let long = contended_calls_per_acquisition(&server, "n2", Duration::from_millis(40), 25, false).await;
    eprintln!("8 clients: commands per acquisition: hold 1 ms → {short:.2}, hold 40 ms → {long:.2}");
    // Each release wakes one waiter per client: about one try per other client, plus release
    // and (first time) subscribe. A poller would multiply with the 40× longer hold.
    assert!(short < 12.0 && long < 12.0, "too many commands: {short} / {long}");
    assert!(long < short * 2.0 + 2.0, "commands grow with wait time: {short} → {long}");

    // One client, 8 handles: each release wakes one waiter (FIFO), not the herd. Per
    // acquisition: the woken waiter's try, the release, and a newcomer's first try (held).
    let short = contended_calls_per_acquisition(&server, "n3", Duration::from_millis(1), 25, true).await;
    let long = contended_calls_per_acquisition(&server, "n4", Duration::from_millis(40), 25, true).await;
    eprintln!("1 client: commands per acquisition: hold 1 ms → {short:.2}, hold 40 ms → {long:.2}");
    assert!(short <= 3.5 && long <= 3.5, "a release woke more than one waiter: {short} / {long}");

    // Control: a 1 ms polling waiter on a 40 ms hold shows the growth this test would catch.
    let client = connect(&server).await;
    let holder = client.lock("poll", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let g = holder.acquire(None).await.unwrap();
    let before = evalsha_calls(&server);
    let poller = client.lock("poll", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let t = tokio::spawn(async move {
        loop {
            if let Some(g) = poller.try_acquire().await.unwrap() {
                return g;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    // Held until the poller has shown itself (a fixed 40 ms saw too few 1 ms polls on a
    // loaded machine): what matters is that the measure above would see a poller at all.
    let t0 = Instant::now();
    while evalsha_calls(&server) - before <= 12 {
        assert!(t0.elapsed() < Duration::from_secs(10), "control: polling was not visible");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    g.release().await.unwrap();
    t.await.unwrap().release().await.unwrap();
}

// 5. A holder that never releases: the waiter gets the lock after the lease, bounded by PTTL.
#[tokio::test]
async fn waiter_takes_over_after_abandoned_lease() {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    let abandoned = a.lock("ab", LockOptions::lease(Duration::from_millis(600))).unwrap();
    let g = abandoned.acquire(Some(Duration::ZERO)).await.unwrap();
    drop(g); // never released: dropping only stops the watchdog
    let before = evalsha_calls(&server);
    let t0 = Instant::now();
    let waiter = b.lock("ab", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let got = waiter.acquire(Some(Duration::from_secs(5))).await.unwrap();
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(300), "took over a live lease after {waited:?}");
    assert!(waited < Duration::from_secs(3));
    let tries = evalsha_calls(&server) - before;
    assert!(tries <= 4, "{tries} acquire calls while waiting: polling");
    got.release().await.unwrap();
}

// 6. Watchdog: keeps a lease alive, stops after release, reports loss (DEL, paused server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_stops_and_reports_loss() {
    let server = RedisServer::start();
    let mut opts = fast_opts();
    opts.response_timeout = Duration::from_millis(150);
    let client = connect_with(&server, opts).await;
    // Renewals every 200 ms, each allowed 150 ms: a loaded machine (CI runs test binaries side
    // by side) still renews in time.
    let ttl = Duration::from_millis(600);
    let lock = client.lock("wd", LockOptions::renewing(ttl)).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    tokio::time::sleep(ttl * 5).await;
    assert_eq!(g.state(), LockState::Held, "{:?}", g.ensure(Duration::ZERO));
    assert!(client.inspect("wd").await.unwrap().is_some(), "renewed lock expired");
    let before = evalsha_calls(&server);
    tokio::time::sleep(ttl).await;
    let during = evalsha_calls(&server) - before;
    assert!(during >= 2, "control: no renewals seen while held ({during})");
    g.release().await.unwrap();
    let before = evalsha_calls(&server);
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(evalsha_calls(&server) - before, 0, "a renewal reached the server after release");

    // An outsider deletes the key: LOST, and the callback fires.
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    g.on_lost(move |e| {
        let _ = tx.send(e.kind());
    });
    let _: () = server.cmd(&["DEL", "ferrolock:{wd}"]);
    tokio::time::timeout(ttl * 2, g.lost()).await.expect("loss not reported");
    assert_eq!(g.state(), LockState::Lost);
    assert_eq!(rx.recv_timeout(Duration::from_secs(1)).unwrap(), ErrorKind::Lost);
    let e = g.release().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost);
    // The release says why: the watchdog's refused renewal, not a generic "lost".
    assert!(e.message().contains("renewal refused"), "the release does not quote the loss reason: {e}");

    // A stopped server: IN_DOUBT first, then LOST at the local deadline; never silently held.
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let mut states = g.watch();
    server.pause();
    let t0 = Instant::now();
    // Never held past the local deadline, which counts from the last confirmed renewal's send,
    // before the stop: the state once that has passed. `state()` compares with the deadline
    // itself, so this holds however late a loaded machine runs this task (a bound on when the
    // loss was *seen* failed under load: 766 against 750 ms).
    let by = t0 + ttl + Duration::from_millis(50);
    let mut state_by = None;
    let mut seen = Vec::new();
    while seen.last() != Some(&LockState::Lost) && t0.elapsed() < Duration::from_secs(3) {
        if tokio::time::timeout(Duration::from_millis(50), states.changed()).await.is_ok() {
            seen.push(*states.borrow_and_update());
        }
        if Instant::now() >= by {
            state_by.get_or_insert(g.state());
        }
        if g.state() == LockState::Lost && seen.last() != Some(&LockState::Lost) {
            seen.push(LockState::Lost);
        }
    }
    tokio::time::sleep_until(by.into()).await;
    let state_by = state_by.unwrap_or(g.state());
    server.resume();
    assert_eq!(seen.first(), Some(&LockState::InDoubt), "states seen: {seen:?}");
    assert_eq!(seen.last(), Some(&LockState::Lost), "states seen: {seen:?}");
    assert_eq!(state_by, LockState::Lost, "still holding a lease {ttl:?} after the stop");
    assert_eq!(g.remaining(), Duration::ZERO);
}

// A loop of acquire + release pairs with no other hold alive: each hold is gone before the
// scheduler gets to run, so the scheduler finds nothing, and it used to plan its next look an
// hour ahead, so that the next acquire woke it again: one scheduler run per pair. It now looks
// again a third of the last lease ahead while holds keep coming, which the next acquire's hold
// is not due before. On a current-thread runtime, as the bindings and the blocking API run: there
// the scheduler runs only when the caller's own call is pending (after the release's unregister).
#[tokio::test]
async fn a_loop_of_short_holds_does_not_wake_the_watchdog_each_time() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let lock = client.lock("wd-loop", LockOptions::renewing(Duration::from_secs(30))).unwrap();
    lock.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = client.watchdog_ticks_for_tests();
    for _ in 0..100 {
        lock.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap();
        tokio::task::yield_now().await; // lets the scheduler run between pairs if it was woken
    }
    let ticks = client.watchdog_ticks_for_tests() - before;
    assert!(ticks < 10, "100 pairs with no other hold alive ran the scheduler {ticks} times");
}

// The same loop with a lease that is not renewed, the scheduler running while each hold is
// alive (as it does when the runtime is driven between the calls, as in the Node addon): it
// plans its next look at the hold's deadline, and an acquire counted the first renewal the hold
// will never get as due sooner than that: one scheduler run per pair again.
#[tokio::test]
async fn a_loop_of_fixed_leases_does_not_wake_the_watchdog_each_time() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let lock = client.lock("wd-lease-loop", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let before = client.watchdog_ticks_for_tests();
    for _ in 0..100 {
        let held = lock.acquire(Some(Duration::ZERO)).await.unwrap();
        tokio::task::yield_now().await; // the scheduler runs now if the acquire woke it
        held.release().await.unwrap();
    }
    let ticks = client.watchdog_ticks_for_tests() - before;
    assert!(ticks < 10, "100 fixed-lease pairs ran the scheduler {ticks} times");
}

// The watchdog scheduler is woken by an acquire only when the new hold needs it before its next
// look: a hold due later costs no scheduler run (it used to scan every live hold on each
// acquire). A hold due sooner is still renewed on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_wakes_the_watchdog_only_when_due_sooner() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let long = client.lock("wd-long", LockOptions::renewing(Duration::from_secs(30))).unwrap();
    let held = long.acquire(Some(Duration::ZERO)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = client.watchdog_ticks_for_tests();
    let other = client.lock("wd-other", LockOptions::renewing(Duration::from_secs(30))).unwrap();
    for _ in 0..100 {
        other.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap();
    }
    let ticks = client.watchdog_ticks_for_tests() - before;
    assert!(ticks < 10, "100 acquires due later than the next look ran the scheduler {ticks} times");

    // Due sooner than the scheduler's next look (10 s away): renewed all the same.
    let ttl = Duration::from_millis(300);
    let short = client.lock("wd-short", LockOptions::renewing(ttl)).unwrap();
    let g = short.acquire(Some(Duration::ZERO)).await.unwrap();
    tokio::time::sleep(ttl * 3).await;
    assert_eq!(g.state(), LockState::Held, "the short hold was not renewed");
    assert!(client.watchdog_ticks_for_tests() - before > ticks, "control: the scheduler ran for it");
    g.release().await.unwrap();
    held.release().await.unwrap();
}

// An extend or re-entry that sets a shorter lease than the one before: the local deadline follows
// the server's (it used to keep the longer one, so the holder read "held" with seconds left while
// another owner held the lock), and the watchdog renews on the new lease's schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_lease_shortens_the_local_deadline() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let lock = client.lock("shorter", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let other = client.lock("shorter", LockOptions::lease(Duration::from_secs(10))).unwrap();

    // Extend to a shorter lease, no renewal.
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    g.extend(Duration::from_millis(300)).await.unwrap();
    assert!(g.remaining() <= Duration::from_millis(300), "extend(300 ms) left {:?}", g.remaining());
    let theirs = other.acquire(Some(Duration::from_secs(2))).await.unwrap();
    assert_eq!(g.state(), LockState::Lost, "another owner holds the lock");
    assert!(g.ensure(Duration::ZERO).is_err());
    theirs.release().await.unwrap();

    // Re-entry sets the lock's own lease again, after a longer extend.
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    g.extend(Duration::from_secs(60)).await.unwrap();
    let inner = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    assert!(inner.remaining() <= Duration::from_secs(10), "re-entry left {:?}", inner.remaining());
    let pttl: i64 = server.cmd(&["PTTL", "ferrolock:{shorter}"]);
    assert!(pttl <= 10_000, "the server's lease is {pttl} ms");
    inner.release().await.unwrap();
    g.release().await.unwrap();

    // With the watchdog: a 30 s lease extended to 300 ms is renewed every 100 ms, not at 10 s.
    let renewing = client.lock("shorter", LockOptions::renewing(Duration::from_secs(30))).unwrap();
    let g = renewing.acquire(Some(Duration::ZERO)).await.unwrap();
    g.extend(Duration::from_millis(300)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(g.state(), LockState::Held, "the watchdog did not renew the shorter lease");
    let pttl: i64 = server.cmd(&["PTTL", "ferrolock:{shorter}"]);
    assert!((1..=300).contains(&pttl), "renewed with the wrong lease: PTTL {pttl} ms");
    g.release().await.unwrap();
}

// An extend to a shorter lease that gets no answer may still have run on the server: the guard
// takes the shorter lease as its bound, so it does not read "held" while another owner holds
// the lock (it kept the longer one before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_extend_to_a_shorter_lease_shortens_the_local_deadline() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let lock = client.lock("unanswered", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    g.extend(Duration::from_secs(10)).await.unwrap(); // the script is in the server's cache
    // The server holds the extend back past the client's 200 ms, then runs it.
    let _: () = server.cmd(&["CLIENT", "PAUSE", "400", "WRITE"]);
    let e = g.extend(Duration::from_millis(300)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(
        g.remaining() <= Duration::from_millis(300),
        "left {:?} after the unanswered extend",
        g.remaining()
    );
    let other = client.lock("unanswered", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let theirs = other.acquire(Some(Duration::from_secs(2))).await.unwrap();
    assert_ne!(g.state(), LockState::Held, "another owner holds the lock");
    theirs.release().await.unwrap();

    // Control: an unanswered extend to a longer lease keeps the bound it had.
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let _: () = server.cmd(&["CLIENT", "PAUSE", "400", "WRITE"]);
    let e = g.extend(Duration::from_secs(60)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    let left = g.remaining();
    assert!(left > Duration::from_secs(9) && left <= Duration::from_secs(10), "left {left:?}");
    g.release().await.unwrap();
}

// A wait that ends while the server does not answer says so (it used to read "the wait elapsed
// before the lock was free", as if another owner held it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_a_stopped_server_quotes_the_failure() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let lock = client.lock("unanswered", LockOptions::lease(Duration::from_secs(10))).unwrap();
    server.pause();
    let e = lock.acquire(Some(Duration::from_millis(700))).await.unwrap_err();
    server.resume();
    assert_eq!(e.kind(), ErrorKind::AcquireTimeout, "{e}");
    assert!(e.message().contains("the last attempt failed: TIMEOUT"), "{e}");
    // ... and hands that failure on as its cause, for callers that branch on it.
    let cause = e.cause().expect("the failure as the cause");
    assert_eq!(cause.kind(), ErrorKind::Timeout, "{e:?}");
    let source = std::error::Error::source(&e).expect("the cause as the source");
    assert_eq!(source.to_string(), cause.to_string());
    // A lock held by another owner still times out with the plain message, and no cause.
    let held = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let other = client.lock("unanswered", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let e = other.acquire(Some(Duration::from_millis(100))).await.unwrap_err();
    assert_eq!(e.message(), "the wait elapsed before the lock was free");
    assert!(e.cause().is_none(), "{e:?}");
    held.release().await.unwrap();
}

// A wait cancelled while the undo of a failed attempt is on its way quotes that failure too
// (the failure was noted only once the undo was over: a caller whose deadline fell in the undo,
// Go's context or Node's AbortSignal against a stopped server, read CANCELLED with no cause, as
// for a lock held by another owner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_cancelled_during_the_undo_of_a_failed_attempt_quotes_the_failure() {
    let server = RedisServer::start();
    let mut opts = ClientOptions::default();
    opts.response_timeout = Duration::from_millis(500);
    let client = connect_with(&server, opts).await;
    let lock = client.lock("cancelled-undo", LockOptions::lease(Duration::from_secs(10))).unwrap();
    lock.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap(); // scripts loaded
    server.pause();
    // The attempt fails at 500 ms; its undo (and the undo's retry) waits until about 1.5 s.
    let t0 = Instant::now();
    let e = lock.acquire_cancellable(None, tokio::time::sleep(Duration::from_secs(1))).await.unwrap_err();
    let took = t0.elapsed();
    server.resume();
    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
    assert!(took < Duration::from_millis(1400), "the cancel waited for the undo: {took:?}");
    assert_eq!(e.cause().map(|c| c.kind()), Some(ErrorKind::Timeout), "{e:?}");
    assert!(e.message().contains("the last attempt failed: TIMEOUT"), "{e}");
}

// A release whose future is dropped before its reply (a timeout around it, a cancelled task) is
// finished in the background: the guard reads released and the lock is free once the server
// answers (before, the guard read "held", could not be released again, and renewal had stopped).
// The guard's next release waits for it and reports it (it used to say "already released",
// while that release could still fail): retried while it is on its way, or after it landed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_release_is_finished_in_the_background() {
    let server = RedisServer::start();
    let mut opts = fast_opts();
    opts.response_timeout = Duration::from_secs(5); // a loaded machine resumes the server in time
    let client = connect_with(&server, opts).await;
    let lock = client.lock("dropped-release", LockOptions::lease(Duration::from_secs(10))).unwrap();
    for levels in [1, 2] {
        let outer = lock.acquire(Some(Duration::ZERO)).await.unwrap();
        let g = if levels == 2 { lock.acquire(Some(Duration::ZERO)).await.unwrap() } else { outer };
        server.pause();
        assert!(
            tokio::time::timeout(Duration::from_millis(50), g.release()).await.is_err(),
            "released while stopped"
        );
        if levels == 1 {
            let (retry, ()) = tokio::join!(g.release(), async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                server.resume();
            });
            retry.expect("a retry while the release is on its way reports it");
        } else {
            server.resume();
            let t0 = Instant::now();
            while g.state() != LockState::Released && t0.elapsed() < Duration::from_secs(3) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(g.state(), LockState::Released, "{levels} level(s)");
            g.release().await.expect("a retry after the release landed reports it");
        }
        assert_eq!(g.state(), LockState::Released, "{levels} level(s)");
        assert_eq!(g.release().await.unwrap_err().kind(), ErrorKind::NotHeld, "reported once");
        let info = client.inspect("dropped-release").await.unwrap();
        assert_eq!(info.map(|i| i.count), if levels == 2 { Some(1) } else { None }, "{levels} level(s)");
        if levels == 2 {
            lock.acquire(Some(Duration::ZERO)).await.unwrap(); // re-entry counts from one level
            assert_eq!(client.inspect("dropped-release").await.unwrap().unwrap().count, 2);
            client.force_unlock("dropped-release").await.unwrap();
        }
    }
}

// The same for a binding's release that runs as a task of its own (a cancelled asyncio call):
// the caller's future dropped unfinished, even before it first ran, leaves the outcome to the
// guard's next release (which used to answer "already released").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_release_whose_caller_stopped_waiting_is_reported_to_the_next() {
    let server = RedisServer::start();
    let mut opts = fast_opts();
    opts.response_timeout = Duration::from_secs(5);
    let client = connect_with(&server, opts).await;
    let lock = client.lock("spawned-release", LockOptions::lease(Duration::from_secs(10))).unwrap();
    for polled in [false, true] {
        let g = Arc::new(lock.acquire(Some(Duration::ZERO)).await.unwrap());
        server.pause();
        let release = g.release_spawned();
        if polled {
            assert!(tokio::time::timeout(Duration::from_millis(50), release).await.is_err());
        } else {
            drop(release);
            tokio::time::sleep(Duration::from_millis(50)).await; // it went out all the same
        }
        let (retry, ()) = tokio::join!(g.release(), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            server.resume();
        });
        retry.unwrap_or_else(|e| panic!("polled {polled}: the retry does not report the release: {e}"));
        assert_eq!(g.release().await.unwrap_err().kind(), ErrorKind::NotHeld, "reported once");
        assert!(client.inspect("spawned-release").await.unwrap().is_none());
    }
    // Awaited to its end, it is reported to its caller only.
    let g = Arc::new(lock.acquire(Some(Duration::ZERO)).await.unwrap());
    g.release_spawned().await.unwrap();
    assert_eq!(g.release().await.unwrap_err().kind(), ErrorKind::NotHeld);
}

// A release finishing in the background that fails (the server is down) leaves the level held,
// as any failed release does: the guard's next release sends it again (it used to answer
// "already released" and leave the lock taken for its lease), and a guard dropped before or
// after the failure stops renewal (the failure used to give the level up in any case).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_release_that_failed_is_sent_again_by_the_next_release() {
    // The lock outlives the restart (AOF written before each reply).
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = connect_with(&server, fast_opts()).await;
    let name = "failed-dropped-release";
    let lock = client.lock(name, LockOptions::renewing(Duration::from_secs(30))).unwrap();
    for case in ["retried", "dropped after the failure", "dropped before the failure"] {
        let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
        server.kill9();
        assert!(
            tokio::time::timeout(Duration::from_millis(50), g.release()).await.is_err(),
            "{case}: the release ended with the server down"
        );
        let g = if case == "dropped before the failure" {
            drop(g);
            None
        } else {
            Some(g)
        };
        // The background release fails within a reconnect burst or a response timeout.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        server.restart();
        assert!(client.inspect(name).await.unwrap().is_some(), "{case}: the lock survived the restart");
        match g {
            Some(g) if case == "retried" => {
                assert_eq!(g.state(), LockState::Held, "{case}");
                g.release().await.expect("the failed release is sent again");
                assert!(client.inspect(name).await.unwrap().is_none(), "{case}: still taken");
            }
            g => {
                drop(g);
                assert_eq!(client.table_sizes_for_tests().1, 0, "{case}: the hold is still renewed");
                client.force_unlock(name).await.unwrap();
            }
        }
    }
}

// After the server was down long enough for the connection's reconnect burst to fail, the first
// request once it is back goes through (it used to get the stored refusal: a renewal failed
// seconds after the server returned, and the next one could come after the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_request_after_an_outage_goes_through() {
    let mut server = RedisServer::start();
    // A response timeout (1 s) longer than a reconnect burst (0.14–0.28 s): the request during
    // the outage sees the refusal (200 ms could end it as a timeout first).
    let client = connect(&server).await;
    client.inspect("outage").await.unwrap();
    server.kill9();
    assert_eq!(client.inspect("outage").await.unwrap_err().kind(), ErrorKind::Connection);
    tokio::time::sleep(Duration::from_millis(1500)).await; // the reconnect burst has failed
    server.restart();
    tokio::time::sleep(Duration::from_millis(500)).await;
    client.inspect("outage").await.expect("the server is back");
}

// An acquire refused by a server that is down: the request never left the client, so no undo
// is owed. Each undo used to wait out a reconnect burst of its own, so a try took three bursts
// (1.4 s in Python) where a plain request takes one, and a 50 ms wait as long; a refused release
// was retried, two bursts. Measured against plain requests in the same state (one burst each;
// docs/CONNECTIONS.md), summed over rounds because each burst's length is random (0.14–0.28 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_refused_by_a_down_server_owes_no_undo() {
    let mut server = RedisServer::start();
    let client = connect(&server).await; // a response timeout (1 s) longer than a burst
    let lock = client.lock("down", LockOptions::lease(Duration::from_secs(30))).unwrap();
    lock.acquire(None).await.unwrap().release().await.unwrap();
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(
            client.lock(format!("down-{i}"), LockOptions::default()).unwrap().acquire(None).await.unwrap(),
        );
    }
    server.kill9();
    let _ = lock.try_acquire().await; // finds the connections closed
    let (mut requests, mut tries, mut waits) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut releases = Duration::ZERO;
    for g in held {
        let t0 = Instant::now();
        assert_eq!(client.inspect("down").await.unwrap_err().kind(), ErrorKind::Connection);
        requests += t0.elapsed();
        let t0 = Instant::now();
        assert_eq!(lock.try_acquire().await.unwrap_err().kind(), ErrorKind::Connection);
        tries += t0.elapsed();
        let t0 = Instant::now();
        let e = lock.acquire(Some(Duration::from_millis(50))).await.unwrap_err();
        waits += t0.elapsed();
        assert_eq!(e.kind(), ErrorKind::AcquireTimeout, "{e}");
        assert!(e.message().contains("Connection refused"), "the wait quotes the refusal: {e}");
        let t0 = Instant::now();
        assert_eq!(g.release().await.unwrap_err().kind(), ErrorKind::Connection);
        releases += t0.elapsed();
    }
    assert!(requests < Duration::from_secs(3), "3 refused requests took {requests:?}");
    let bound = requests * 5 / 4 + Duration::from_millis(100);
    assert!(tries < bound, "3 refused tries took {tries:?}, 3 refused requests {requests:?}");
    assert!(waits < bound, "3 refused 50 ms waits took {waits:?}, 3 refused requests {requests:?}");
    assert!(releases < bound, "3 refused releases took {releases:?}, 3 refused requests {requests:?}");
}

// A server whose connections were closed and whose new connections are never answered (a
// firewall, a load balancer in front of a dead server): each call is bounded by the response
// timeout, including the wait for a connection being set up again. A reconnect burst is four
// connects of up to `connect_timeout` (2 s) each, and requests used to wait it out: a try took
// 24.6 s (attempt, undo, the undo's retry: a burst each), and a 500 ms wait as long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_bounded_while_new_connections_hang() {
    let server = RedisServer::start();
    let proxy = CutProxy::start(&server);
    let mut opts = ClientOptions::default();
    opts.response_timeout = Duration::from_millis(300);
    let client = Client::connect(&proxy.url, opts).await.unwrap();
    let lock = client.lock("hang", LockOptions::lease(Duration::from_secs(30))).unwrap();
    lock.acquire(None).await.unwrap().release().await.unwrap();
    proxy.cut();
    for _ in 0..2 {
        // The hot connection's connect, the attempt, its undo and the undo's retry: at most
        // four response timeouts.
        let t0 = Instant::now();
        let e = lock.try_acquire().await.unwrap_err();
        let took = t0.elapsed();
        assert!(e.kind().is_transient(), "{e}");
        assert!(took < Duration::from_secs(3), "a try took {took:?}");
        let t0 = Instant::now();
        let e = lock.acquire(Some(Duration::from_millis(500))).await.unwrap_err();
        let took = t0.elapsed();
        assert_eq!(e.kind(), ErrorKind::AcquireTimeout, "{e}");
        assert!(took < Duration::from_millis(3500), "a 500 ms wait took {took:?}");
    }
}

// Release channels that fall idle while the server is down: their UNSUBSCRIBE fails, and the
// connection, which still counts them as subscribed, subscribes them again when it reconnects.
// The sweep used to forget them all the same, so they stayed subscribed for the client's life
// (every outage during a sweep added more, and the client kept receiving every release of those
// names). It now unsubscribes them at a later sweep. Control: before the outage, they are
// subscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_idle_during_an_outage_are_unsubscribed_once_it_is_back() {
    let mut server = RedisServer::start();
    let mut opts = fast_opts();
    opts.subscription_linger = Duration::from_secs(1);
    let holder = connect_with(&server, opts.clone()).await;
    let client = connect_with(&server, opts).await;
    let _held = idle_release_channels(&holder, &client, "outage", Duration::from_millis(50)).await;
    assert_eq!(release_channels(&server).len(), 5, "the waiters' channels are subscribed (control)");
    server.kill9();
    tokio::time::sleep(Duration::from_millis(2500)).await; // the sweep's UNSUBSCRIBEs fail
    server.restart();
    let t0 = Instant::now();
    loop {
        let _ = client.inspect("outage-0").await; // the client is in use again
        let left = release_channels(&server);
        if left.is_empty() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "still subscribed after the outage: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tables_emptied(&client).await;
}

// 7. SCRIPT FLUSH and a server restart mid-run: no user-visible error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn script_flush_and_restart_are_invisible() {
    let mut server = RedisServer::start();
    let c = Churn::default();
    let main = connect(&server).await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = connect(&server).await;
        let lock = client.lock("sf", LockOptions::renewing(Duration::from_secs(2))).unwrap();
        let (wait, hold) = (Duration::from_secs(20), Duration::from_millis(1));
        tasks.push(tokio::spawn(churn(lock, wait, hold, c.clone())));
    }
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
    }
    // Restart while the main task holds the lock, so every worker is waiting: waiters must ride
    // out the outage. The holder itself learns its hold is gone (LOST), which is the truth.
    let held = main.lock("sf", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let g = held.acquire(Some(Duration::from_secs(10))).await.unwrap();
    let before = c.done.load(Ordering::SeqCst);
    server.shutdown_nosave();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    let t0 = Instant::now();
    while c.done.load(Ordering::SeqCst) < before + 20 && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(g.release().await.unwrap_err().kind(), ErrorKind::Lost);
    assert_eq!(c.errors.load(Ordering::SeqCst), 0);
    assert!(c.done.load(Ordering::SeqCst) >= before + 20, "workers did not resume after restart");
}

// 8. A response timeout during acquire (server paused): no ghost hold remains afterwards.
#[tokio::test]
async fn timed_out_acquire_leaves_no_ghost() {
    let server = RedisServer::start();
    let mut opts = ClientOptions::default();
    opts.response_timeout = Duration::from_millis(200);
    let client = connect_with(&server, opts).await;
    let lock = client.lock("ghost", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let _: () = server.cmd(&["CLIENT", "PAUSE", "700", "ALL"]);
    let err = lock.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(client.inspect("ghost").await.unwrap().is_none(), "ghost hold after a timed-out acquire");

    // Control: the same timed-out acquire without the compare-and-delete leaves a ghost.
    let raw = redis::Client::open(server.url()).unwrap();
    let cfg = redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_millis(200)));
    let mut conn = raw.get_multiplexed_async_connection_with_config(&cfg).await.unwrap();
    let script = redis::Script::new(include_str!("../scripts/acquire.lua"));
    script.prepare_invoke().load_async(&mut conn).await.unwrap();
    let _: () = server.cmd(&["CLIENT", "PAUSE", "700", "ALL"]);
    let r: redis::RedisResult<redis::Value> = script
        .key("ferrolock:{ghost}")
        .key("ferrolock:{ghost}:fence")
        .arg("raw-token")
        .arg(30_000)
        .arg(60_000)
        .arg(10)
        .invoke_async(&mut conn)
        .await;
    assert!(r.is_err());
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(client.inspect("ghost").await.unwrap().is_some(), "control: no ghost without cleanup");
}

// 8b. Cancelling an acquire mid-flight (dropping the future) also cleans up.
#[tokio::test]
async fn cancelled_acquire_leaves_no_ghost() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let lock = client.lock("cancel", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let _: () = server.cmd(&["CLIENT", "PAUSE", "500", "ALL"]);
    let r = tokio::time::timeout(Duration::from_millis(100), lock.try_acquire()).await;
    assert!(r.is_err(), "the acquire should still be in flight");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(client.inspect("cancel").await.unwrap().is_none(), "ghost hold after cancellation");
    // The handle is usable afterwards.
    lock.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap();
}

// 8c. A bounded acquire ends by its deadline even while this handle's undo of a cancelled
// acquire is still waiting for a stalled server: it used to wait for the undo first (up to the
// response timeout per request) and could overrun its wait many times over.
#[tokio::test]
async fn bounded_acquire_does_not_wait_out_a_background_undo() {
    let server = RedisServer::start();
    let mut opts = ClientOptions::default();
    opts.response_timeout = Duration::from_secs(3);
    let client = connect_with(&server, opts).await;
    let lock = client.lock("undo-wait", LockOptions::lease(Duration::from_secs(30))).unwrap();
    lock.acquire(None).await.unwrap().release().await.unwrap(); // scripts loaded, connection up
    let _: () = server.cmd(&["CLIENT", "PAUSE", "1500", "ALL"]);
    let r = tokio::time::timeout(Duration::from_millis(100), lock.try_acquire()).await;
    assert!(r.is_err(), "the acquire should still be in flight");
    // Its undo now holds the handle's op lock until the server answers (after the pause).
    let t0 = Instant::now();
    let err = lock.acquire(Some(Duration::from_millis(200))).await.unwrap_err();
    let took = t0.elapsed();
    assert_eq!(err.kind(), ErrorKind::AcquireTimeout, "{err}");
    assert!(took < Duration::from_millis(1000), "a 200 ms wait took {took:?}");
    // After the pause the handle works and nothing was left behind.
    lock.acquire(Some(Duration::from_secs(5))).await.unwrap().release().await.unwrap();
    assert!(client.inspect("undo-wait").await.unwrap().is_none());
}

// An acquire whose outcome is unknown is undone (a release with the prior count). A caller that
// gives up while the undo waits for its reply must not cut it short: here the server lost the
// release script, so the undo needs its EVAL follow-up after NOSCRIPT, which used to be dropped
// with the caller's future, leaving the grant held for its whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_outlives_the_caller_giving_up() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let lock = client.lock("undo-cut", LockOptions::lease(Duration::from_secs(30))).unwrap();
    lock.acquire(None).await.unwrap().release().await.unwrap(); // connection up
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
    let _: String = server.cmd(&["SCRIPT", "LOAD", include_str!("../scripts/acquire.lua")]);
    server.pause();
    // The attempt's reply is overdue after 200 ms: its undo goes out, and the caller gives up
    // while that undo waits for its reply.
    let r = tokio::time::timeout(Duration::from_millis(300), lock.acquire(Some(Duration::ZERO))).await;
    assert!(r.is_err(), "the acquire ended before the caller gave up: {r:?}");
    server.resume();
    let t0 = Instant::now();
    while client.inspect("undo-cut").await.unwrap().is_some() && t0.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(client.inspect("undo-cut").await.unwrap().is_none(), "the undone grant is still held");
}

// An extend to a shorter lease whose caller gives up (a timeout around it) still runs on the
// server: the holder's bound follows at once, so that it never reports itself held after the
// server's lease ran out (it kept its 30 s, and another client got the lock under it). The same
// for a re-entry, which sets the lease to the lock's length, left undone after its reply was late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_extend_or_reentry_bounds_the_holder_by_its_lease() {
    for reenter in [false, true] {
        let server = RedisServer::start();
        let (a, b) = (connect_with(&server, fast_opts()).await, connect(&server).await);
        let lease = if reenter { Duration::from_secs(2) } else { Duration::from_secs(30) };
        let lock = a.lock("short-lease", LockOptions::lease(lease)).unwrap();
        let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
        g.extend(Duration::from_secs(30)).await.unwrap(); // (and the server knows the extend script)
        let _: () = server.cmd(&["CLIENT", "PAUSE", "500", "ALL"]);
        if reenter {
            // Overdue after 200 ms: undone (the count put back, the 2 s lease left in place).
            let r = tokio::time::timeout(Duration::from_millis(300), lock.try_acquire()).await;
            assert!(!matches!(r, Ok(Ok(Some(_)))), "re-entered while the server was paused");
        } else {
            let r = tokio::time::timeout(Duration::from_millis(100), g.extend(Duration::from_secs(2))).await;
            assert!(r.is_err(), "the extend should still be in flight");
        }
        tokio::time::sleep(Duration::from_millis(3000)).await;
        let stolen =
            b.lock("short-lease", LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await;
        assert!(stolen.unwrap().is_some(), "re-entry {reenter}: the server's 2 s lease should have run out");
        let (state, remaining) = (g.state(), g.remaining());
        assert!(
            !(state == LockState::Held && g.ensure(Duration::from_secs(1)).is_ok()),
            "re-entry {reenter}: two holders; the first still reports {state:?} with {remaining:?} left"
        );
    }
}

async fn sleep_until(t: Instant) {
    tokio::time::sleep(t.saturating_duration_since(Instant::now())).await;
}

/// Hold a 3 s renewing lease, renewals delayed 300 ms after being taken (the first is taken at
/// 1.0 s, sent at 1.3 s); extend to 900 ms at `extend_at`; report the state at 2.3 s.
async fn shorter_extend(name: &str, extend_at: Duration) -> (LockState, i64) {
    let server = RedisServer::start();
    let client = connect(&server).await;
    client.set_watchdog_test_knobs(Duration::from_millis(300), true);
    let lock = client.lock(name, LockOptions::renewing(Duration::from_secs(3))).unwrap();
    let t0 = Instant::now();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    sleep_until(t0 + extend_at).await;
    g.extend(Duration::from_millis(900)).await.unwrap();
    sleep_until(t0 + Duration::from_millis(2300)).await;
    let pttl: i64 = server.cmd(&["PTTL", &format!("ferrolock:{{{name}}}")]);
    (g.state(), pttl)
}

/// Hold a 3 s renewing lease, renewals delayed 300 ms (the first taken at 1.0 s, sent at 1.3 s);
/// extend to 10 s at `extend_at`; from 1.6 s renewals stall (10 s delay: they do not get
/// through). At 4.6 s: whether the server still has the hold, the guard's state and remaining,
/// and whether another client can take the lock.
async fn longer_extend(name: &str, extend_at: Duration) -> (bool, LockState, Duration, bool) {
    let server = RedisServer::start();
    let client = connect(&server).await;
    client.set_watchdog_test_knobs(Duration::from_millis(300), true);
    let lock = client.lock(name, LockOptions::renewing(Duration::from_secs(3))).unwrap();
    let t0 = Instant::now();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    sleep_until(t0 + extend_at).await;
    g.extend(Duration::from_secs(10)).await.unwrap();
    sleep_until(t0 + Duration::from_millis(1600)).await;
    client.set_watchdog_test_knobs(Duration::from_secs(10), true);
    sleep_until(t0 + Duration::from_millis(4600)).await;
    let exists: i64 = server.cmd(&["EXISTS", &format!("ferrolock:{{{name}}}")]);
    let (state, left) = (g.state(), g.remaining());
    let other = connect(&server).await.lock(name, LockOptions::lease(Duration::from_secs(10))).unwrap();
    let theirs = other.try_acquire().await.unwrap();
    let taken = theirs.is_some();
    drop(g);
    (exists == 1, state, left, taken)
}

// A renewal taken for sending before an extend and sent after it (the scheduler's tick and its
// pipeline's write are apart; widened here with the watchdog's test delay). Extended to a shorter
// lease, the hold was reported lost while the server held it (the late renewal's reply put back
// the old lease's schedule); extended to a longer one, the late renewal set the old lease on the
// server after the extend, and another client got the lock under a guard reading Held. An extend
// now waits for the renewal on its way, and no renewal starts until it is answered. Controls: the
// same extends with no renewal in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_renewal_in_flight_does_not_undo_an_extend() {
    let (short, short_ctl, long, long_ctl) = tokio::join!(
        shorter_extend("wd-inflight-short", Duration::from_millis(1100)),
        shorter_extend("wd-idle-short", Duration::from_millis(300)),
        longer_extend("wd-inflight-long", Duration::from_millis(1100)),
        longer_extend("wd-idle-long", Duration::from_millis(300)),
    );
    assert_eq!(short_ctl.0, LockState::Held, "control: PTTL {} ms", short_ctl.1);
    assert!(long_ctl.0 && !long_ctl.3 && long_ctl.1 == LockState::Held, "control: {long_ctl:?}");
    assert_eq!(short.0, LockState::Held, "false loss: the server still holds it (PTTL {} ms)", short.1);
    let (exists, state, left, taken) = long;
    assert!(
        !(taken && state == LockState::Held),
        "another client took the lock (server hold before: {exists}) while the guard reads {state:?} with {left:?} left"
    );
}

// A renewal taken on time and sent after the hold's local deadline (the tick and the pipeline's
// write are apart; widened with the watchdog's test delay). The hold was already reported lost,
// yet the renewal reached the server, which still had the lease (the drift allowance keeps the
// local deadline early), and renewed it for nobody: the lock stayed taken for another full lease.
// A renewal now leaves out holds whose deadline has passed. With ttl 1 s and a 30% drift
// allowance the local deadline is at ~0.7 s; the renewal taken at ~0.33 s is sent at ~0.83 s.
// Control (`settle: false` sends it anyway): the lease is renewed for nobody.
#[tokio::test]
async fn a_renewal_sent_after_the_local_deadline_does_not_renew_a_lost_hold() {
    let (checked, control) = tokio::join!(
        renewal_past_the_deadline("wd-late-lost", true),
        renewal_past_the_deadline("wd-late-lost-ctl", false)
    );
    assert!(control, "control: the late renewal did not reach the server");
    assert!(!checked, "a hold reported lost was renewed on the server");
}

/// Whether the server still has the hold at 1.3 s (its lease set at 0 s ran out at 1.0 s; a
/// renewal sent at ~0.83 s makes it last to ~1.83 s).
async fn renewal_past_the_deadline(name: &str, settle: bool) -> bool {
    let server = RedisServer::start();
    let mut opts = ClientOptions::default();
    opts.drift_factor = 0.3;
    let client = connect_with(&server, opts).await;
    client.set_watchdog_test_knobs(Duration::from_millis(500), settle);
    let lock = client.lock(name, LockOptions::renewing(Duration::from_secs(1))).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    // Loads the renewal's script: a pipelined renewal answered NOSCRIPT would change nothing.
    let t0 = Instant::now();
    g.extend(Duration::from_secs(1)).await.unwrap();
    sleep_until(t0 + Duration::from_millis(1300)).await;
    assert_eq!(g.state(), LockState::Lost);
    let exists: i64 = server.cmd(&["EXISTS", &format!("ferrolock:{{{name}}}")]);
    exists == 1
}

// URL schemes are case-insensitive (RFC 3986), as the Sentinel and Cluster ones already were:
// `REDIS://` used to be refused as an unsupported scheme.
#[tokio::test]
async fn url_schemes_are_case_insensitive() {
    let server = RedisServer::start();
    let url = server.url();
    let (scheme, rest) = url.split_once("://").unwrap();
    for s in [scheme.to_uppercase(), "Redis".to_owned()] {
        let c = ferrolock::Client::connect(&format!("{s}://{rest}"), ClientOptions::default()).await;
        let c = c.unwrap_or_else(|e| panic!("{s}://: {e}"));
        c.lock("case", LockOptions::default()).unwrap().acquire(None).await.unwrap().release().await.unwrap();
    }
    let e =
        ferrolock::Client::connect(&format!("redix://{rest}"), ClientOptions::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUrl, "control: an unknown scheme is still refused");
}

// 9. Bad input: typed errors before any I/O.
#[tokio::test]
async fn bad_input_is_rejected_before_io() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let before = client_calls(&server);
    let lease = LockOptions::lease;
    assert_eq!(client.lock("", LockOptions::default()).unwrap_err().kind(), ErrorKind::InvalidName);
    let huge = vec![b'x'; 64 * 1024 + 1];
    assert_eq!(client.lock(&huge, LockOptions::default()).unwrap_err().kind(), ErrorKind::InvalidName);
    for ttl in [Duration::ZERO, Duration::from_millis(3), Duration::from_secs(400 * 24 * 3600)] {
        assert_eq!(client.lock("x", lease(ttl)).unwrap_err().kind(), ErrorKind::InvalidDuration, "{ttl:?}");
    }
    let lock = client.lock("x", lease(Duration::from_secs(1))).unwrap();
    let absurd = Some(Duration::from_secs(400 * 24 * 3600));
    assert_eq!(lock.acquire(absurd).await.unwrap_err().kind(), ErrorKind::InvalidDuration);
    assert_eq!(client_calls(&server), before, "bad input reached the server");
    // Binary-safe names with hash-tag characters and CR/LF round-trip.
    let odd = b"we{ir}d \r\n\x00\xff";
    let g = client.lock(odd, lease(Duration::from_secs(1))).unwrap().acquire(None).await.unwrap();
    assert!(client.inspect(odd).await.unwrap().is_some());
    g.release().await.unwrap();
    // A 1 MiB name works when the cap is raised.
    let mut opts = ClientOptions::default();
    opts.max_name_len = 2 << 20;
    let big = connect_with(&server, opts).await;
    let name = vec![b'n'; 1 << 20];
    big.lock(&name, lease(Duration::from_secs(1)))
        .unwrap()
        .acquire(None)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Bad configuration and URLs.
    let mut opts = ClientOptions::default();
    opts.prefix = "a{b".into();
    let e = ferrolock::Client::connect(&server.url(), opts).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    let e = ferrolock::Client::connect("http://x", ClientOptions::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUrl);
    // A URL that does not parse or names no usable server says why, and never echoes the URL
    // (its password).
    for (url, why) in [
        ("redis://:hunter2@127.0.0.1:99999", "invalid port number"),
        ("redis://:hunter2@/", "empty host"),
        ("redis://:hunter2@127.0.0.1/zero", "invalid database number"),
        ("redis://:hunter2@0.0.0.0:6379", "wildcard address"),
        ("redis://:hunter2@127.0.0.1/?protocol=hunter2", "invalid protocol version"),
    ] {
        let e = ferrolock::Client::connect(url, ClientOptions::default()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{url}: {e}");
        assert!(e.message().contains(why), "{url}: {e}");
        assert!(!format!("{e} {e:?}").contains("hunter2"), "{url}: {e}");
    }
    // A database number the server refuses is the URL's fault (it read SCRIPT).
    let e = ferrolock::Client::connect(&format!("{}/99", server.url()), ClientOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{e}");
    assert!(e.message().contains("out of range"), "{e}");
    // A server without HELLO (before Redis 6, or renamed) is not the URL's fault: it says why.
    let old = RedisServer::start_with(&["--rename-command", "HELLO", "hello-elsewhere"]);
    let e = ferrolock::Client::connect(&old.url(), ClientOptions::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Script, "{e}");
    assert!(e.message().contains("Redis 6 or newer"), "{e}");
    // Such a server quotes HELLO's arguments, the password among them, cut to 128 bytes and
    // with line breaks made spaces: none of it may show (an exact-match redaction missed both).
    let long = "S3cr3tTail".repeat(15);
    for (pw, parts) in [("line1%0Aline2", vec!["line1", "line2"]), (long.as_str(), vec!["S3cr3t"])] {
        let url = format!("redis://me:{pw}@127.0.0.1:{}", old.port());
        let e = ferrolock::Client::connect(&url, ClientOptions::default()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Script, "{e}");
        for part in parts {
            assert!(!format!("{e} {e:?}").contains(part), "{part} shown: {e}");
        }
    }
}

// 10. The blocking facade from a plain thread and from inside a tokio runtime.
#[test]
fn blocking_from_thread_and_inside_runtime() {
    use ferrolock::blocking;
    let server = RedisServer::start();
    let url = server.url();
    let client = blocking::Client::connect(&url, ClientOptions::default()).unwrap();
    let lock = client.lock("blk", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let g = std::thread::spawn(move || lock.acquire(Some(Duration::from_secs(1))).unwrap()).join().unwrap();
    assert!(g.fence() > 0);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let c2 = client.clone();
    let fence = rt.block_on(async move {
        let other = c2.lock("blk", LockOptions::lease(Duration::from_secs(5))).unwrap();
        assert!(other.try_acquire().unwrap().is_none());
        g.release().unwrap();
        let g2 = other.acquire(Some(Duration::from_secs(1))).unwrap();
        let f = g2.fence();
        g2.release().unwrap();
        f
    });
    assert!(fence > 0);
    assert!(client.inspect("blk").unwrap().is_none());
}

// The blocking facade's wait_lost on a watcher thread returns when another thread releases the
// guard (it used to sleep out its timeout: a released hold is never lost).
#[test]
fn blocking_wait_lost_returns_on_release() {
    use ferrolock::blocking;
    let server = RedisServer::start();
    let client = blocking::Client::connect(&server.url(), ClientOptions::default()).unwrap();
    let lock = client.lock("blkwait", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let g = Arc::new(lock.acquire(Some(Duration::ZERO)).unwrap());
    let watcher = std::thread::spawn({
        let g = g.clone();
        move || (g.wait_lost(Duration::from_secs(20)), Instant::now())
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!watcher.is_finished(), "wait_lost returned while held");
    let released = Instant::now();
    g.release().unwrap();
    let (lost, at) = watcher.join().unwrap();
    assert!(!lost);
    assert!(at.duration_since(released) < Duration::from_secs(5), "the release did not end the wait");
}

// 11. A password never appears in Display/Debug of the client, options, guards or errors.
#[tokio::test]
async fn password_never_leaks() {
    let server = RedisServer::start();
    let secret = "S3ntinel-pw-7f3a";
    let _: () = server.cmd(&["ACL", "SETUSER", "alice", "on", &format!(">{secret}"), "~*", "&*", "+@all"]);
    let url = format!("redis://alice:{secret}@127.0.0.1:{}", server.port());
    let client = ferrolock::Client::connect(&url, ClientOptions::default()).await.unwrap();
    let g = client.lock("pw", LockOptions::default()).unwrap().acquire(None).await.unwrap();
    let mut texts = vec![format!("{client:?}"), format!("{g:?}"), format!("{:?}", client.options())];
    g.release().await.unwrap();
    let bad = format!("redis://alice:{secret}-wrong@127.0.0.1:{}", server.port());
    let e = ferrolock::Client::connect(&bad, ClientOptions::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    // Connect errors say which server (host:port/db), never with the credentials.
    assert!(e.message().contains(&format!("127.0.0.1:{}/0", server.port())), "no server named in: {e}");
    texts.push(format!("{e} {e:?}"));
    let e =
        ferrolock::Client::connect(&format!("redis://alice:{secret}@127.0.0.1:1"), ClientOptions::default())
            .await
            .unwrap_err();
    assert!(e.message().starts_with("127.0.0.1:1/0: "), "no server named in: {e}");
    texts.push(format!("{e} {e:?}"));
    let e = ferrolock::Client::connect(&format!("redis://alice:{secret}@[bad"), ClientOptions::default())
        .await
        .unwrap_err();
    texts.push(format!("{e} {e:?}"));
    for t in &texts {
        assert!(!t.contains(secret), "secret leaked: {t}");
    }
    assert!(texts[0].contains("127.0.0.1"), "Debug should still say where: {}", texts[0]);
}

// A re-entry level's loss callback is let go when that level is released, and never runs: a
// long-held lock re-entered in a loop used to keep every callback until the whole hold ended
// (memory growing per iteration in every binding), and ran them all on a later loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_levels_loss_callback_is_dropped_and_never_runs() {
    struct OnDrop(Arc<AtomicU64>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let server = RedisServer::start();
    let client = connect(&server).await;
    let lock = client.lock("levels", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let outer = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let (fired, dropped) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    for _ in 0..100 {
        let inner = lock.acquire(Some(Duration::ZERO)).await.unwrap();
        let (f, d) = (fired.clone(), OnDrop(dropped.clone()));
        inner.on_lost(move |_| {
            let _keep = &d;
            f.fetch_add(1, Ordering::SeqCst);
        });
        inner.release().await.unwrap();
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 100, "released levels' callbacks were kept");
    // Control: the outer level's callback runs on the loss.
    let outer_fired = Arc::new(AtomicU64::new(0));
    let o = outer_fired.clone();
    outer.on_lost(move |_| {
        o.fetch_add(1, Ordering::SeqCst);
    });
    client.force_unlock("levels").await.unwrap();
    assert_eq!(outer.extend(Duration::from_secs(10)).await.unwrap_err().kind(), ErrorKind::Lost);
    let t0 = Instant::now();
    while outer_fired.load(Ordering::SeqCst) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(3), "the outer level's callback never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fired.load(Ordering::SeqCst), 0, "a released level's callback ran on the loss");
}

// The timing rules of DESIGN §4 for a reply the server held back (mutation review: validity
// counted from the reply, and a spent grant returned, both passed every test before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_counts_from_before_the_request_was_sent() {
    let s = RedisServer::start();
    check_validity_counts_from_the_send(&connect_with(&s, patient_opts()).await, &[&s]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_validity_ran_out_on_the_way_is_not_returned() {
    let s = RedisServer::start();
    check_a_spent_grant_is_not_returned(&connect_with(&s, patient_opts()).await, &[&s]).await;
}

// max_reentrancy levels, and not one more: the refusal changes nothing on the server.
#[tokio::test]
async fn the_reentrancy_limit_refuses_one_level_more() {
    let server = RedisServer::start();
    let mut o = ClientOptions::default();
    o.max_reentrancy = 3;
    let client = connect_with(&server, o).await;
    let lock = client.lock("depth", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let mut levels = Vec::new();
    for _ in 0..3 {
        levels.push(lock.acquire(Some(Duration::ZERO)).await.unwrap());
    }
    let e = lock.try_acquire().await.expect_err("a fourth level was granted");
    assert_eq!(e.kind(), ErrorKind::ReentrancyLimit, "{e}");
    assert_eq!(client.inspect("depth").await.unwrap().unwrap().count, 3);
    for g in levels.into_iter().rev() {
        g.release().await.unwrap();
    }
    assert!(client.inspect("depth").await.unwrap().is_none());
}

// DESIGN §5: a waiter subscribes before it tries again, so that no release is missed. Each of
// the waiter's connections in turn is held back by a proxy while the holder (10 s lease)
// releases; held back, the subscriber's SUBSCRIBE lands after the release. The waiter must
// still get the lock at once when the proxy lets go, not at the end of the old lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_before_the_waiter_subscribed_is_not_missed() {
    let server = RedisServer::start();
    let holder_client = connect(&server).await;
    for conn in 0..4 {
        let name = format!("before-subscribe-{conn}");
        let holder = holder_client.lock(&name, LockOptions::lease(Duration::from_secs(10))).unwrap();
        let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
        let proxy = HoldProxy::start(&server, conn);
        let waiter_client = Client::connect(&proxy.url, ClientOptions::default()).await.unwrap();
        // The request connections up (not the subscriber's: nothing has waited yet).
        let warm = waiter_client.lock("warm", LockOptions::lease(Duration::from_secs(10))).unwrap();
        warm.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap();
        proxy.hold(true);
        let waiter = waiter_client.lock(&name, LockOptions::lease(Duration::from_secs(10))).unwrap();
        let t =
            tokio::spawn(
                async move { waiter.acquire(Some(Duration::from_secs(5))).await.map(|g| (g, waiter)) },
            );
        tokio::time::sleep(Duration::from_millis(300)).await;
        g.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.hold(false);
        let t0 = Instant::now();
        let (g2, _waiter) =
            t.await.unwrap().unwrap_or_else(|e| panic!("connection {conn}: the release was missed: {e}"));
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "connection {conn}: woke only after {:?}",
            t0.elapsed()
        );
        g2.release().await.unwrap();
    }
}

// force_unlock wakes the waiters as a release does (only fair mode's hand-over was tested): a
// waiter behind a 10 s hold gets the lock at once, not when the old lease would have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_a_waiter() {
    let server = RedisServer::start();
    let (a, b) = (connect(&server).await, connect(&server).await);
    let _g = a
        .lock("forced-wake", LockOptions::lease(Duration::from_secs(10)))
        .unwrap()
        .acquire(None)
        .await
        .unwrap();
    let waiter = b.lock("forced-wake", LockOptions::lease(Duration::from_secs(10))).unwrap();
    let t =
        tokio::spawn(async move { waiter.acquire(Some(Duration::from_secs(8))).await.map(|g| (g, waiter)) });
    // Subscribed (the waiter is in its wait) before the unlock.
    let t0 = Instant::now();
    while !release_channels(&server).iter().any(|c| c.contains("forced-wake")) {
        assert!(t0.elapsed() < Duration::from_secs(5), "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let unlocked = Instant::now();
    assert!(a.force_unlock("forced-wake").await.unwrap().is_some());
    let (g, _waiter) = t.await.unwrap().expect("the waiter got the lock");
    assert!(unlocked.elapsed() < Duration::from_secs(2), "woke {:?} after the unlock", unlocked.elapsed());
    g.release().await.unwrap();
}

// A release sent to a server that stopped answering fails only after its retries (seconds);
// the server then runs it. The renewal that keeps the hold for a retry came a third of a lease
// after the failure, later than the hold's local deadline, so the hold was reported lost (a
// WARNING and `on_lost`) for a lock that had been released as asked (Python review). The
// decision itself, and its control (another owner granted in between: a loss), are
// `a_release_retried_after_the_next_renewal_is_not_a_loss`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_failed_on_a_stopped_server_and_then_ran_is_not_a_loss() {
    let server = RedisServer::start();
    let mut opts = ClientOptions::default();
    opts.watchdog_ttl = Duration::from_millis(3000);
    let client = connect_with(&server, opts).await;
    let lock = client.lock("released-late", LockOptions::default()).unwrap();
    let g = lock.acquire(None).await.unwrap();
    let lost = Arc::new(AtomicUsize::new(0));
    let seen = lost.clone();
    g.on_lost(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
    });
    server.pause();
    let t0 = Instant::now();
    let r = g.release().await;
    let failed_after = t0.elapsed();
    server.resume();
    assert!(r.is_err(), "the release answered on a stopped server");
    while !matches!(g.state(), LockState::Released | LockState::Lost) && t0.elapsed() < Duration::from_secs(8)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await; // (callbacks run on the blocking pool)
    assert_eq!(g.state(), LockState::Released, "the release failed after {failed_after:?}");
    assert_eq!(lost.load(Ordering::SeqCst), 0, "on_lost ran for a lock released as asked");
    assert!(client.inspect("released-late").await.unwrap().is_none());
}

// After SCRIPT FLUSH (mutation review: a watchdog that did not load the script again passed) the watchdog's pipelined EVALSHA renewals get NOSCRIPT; the
// watchdog must load the extend script and go on renewing. (acl.rs flushes too, but then
// calls extend(), whose auto-loading Script reloads it for the watchdog; single_node.rs and
// redlock.rs flush while no single-node hold lives long enough to be renewed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_go_on_after_a_script_flush() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let ttl = Duration::from_millis(600);
    let lock = client.lock("flush-renew", LockOptions::renewing(ttl)).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
    let t0 = Instant::now();
    while t0.elapsed() < ttl * 3 {
        assert_eq!(g.state(), LockState::Held, "lost {:?} after SCRIPT FLUSH", t0.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(client.inspect("flush-renew").await.unwrap().is_some(), "the hold expired on the server");
    // Control: the flush bit (the extend script had to be loaded again).
    let loads = server.command_calls().get("script|load").copied().unwrap_or(0);
    assert!(loads > 0, "control: no SCRIPT LOAD seen, so the flush never met a renewal");
    g.release().await.unwrap();
}

// (Mutation review.) After a last release fails (BUSY), the hold is renewed for one more lease only, in case
// the guard was abandoned without being dropped (a binding's collector that has not run).
// a_reentry_after_a_failed_release_is_renewed checks the lifting of the cut-off; nothing checks
// that the cut-off exists. Here the guard stays alive and untouched: the lock must be free on
// the server after about two leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_guard_after_a_failed_release_frees_the_lock_within_two_leases() {
    let server = RedisServer::start_with(&["--busy-reply-threshold", "10"]);
    let client = connect_with(&server, fast_opts()).await;
    let ttl = Duration::from_millis(900);
    let lock = client.lock("abandoned", LockOptions::renewing(ttl)).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let failed_at = release_fails_while_busy(&server, &g).await;
    // Control: renewed meanwhile (a retry would find it), i.e. still there after one lease.
    tokio::time::sleep(ttl.saturating_sub(failed_at.elapsed()) + Duration::from_millis(100)).await;
    assert!(client.inspect("abandoned").await.unwrap().is_some(), "control: not kept for a retry");
    // The guard `g` is alive and never touched again: at most ~2 leases after the failure, free.
    while client.inspect("abandoned").await.unwrap().is_some() {
        assert!(
            failed_at.elapsed() < ttl * 2 + Duration::from_millis(600),
            "an abandoned guard keeps the lock {:?} after its failed release",
            failed_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(g);
}

// (Mutation review.) A renewal's validity counts from when it was sent, not from its reply (DESIGN §4). The
// first round covered this for acquires only. The server is paused while a renewal is on its
// way; once the reply lands, the local deadline must be about (send + ttl), not (reply + ttl).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_renewal_reply_counts_from_its_send() {
    let server = RedisServer::start();
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(2500);
    let client = connect_with(&server, o).await;
    let ttl = Duration::from_millis(3000); // renewals due every 1 s
    let lock = client.lock("late-renew", LockOptions::renewing(ttl)).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    // The first renewal (~1 s) loads the extend script (NOSCRIPT on a fresh server, retried at
    // once); the second (~2 s) is the one measured. Paused from ~1.9 s for 700 ms (Redis ends a
    // pause on its cron, up to 100 ms late): it goes out at ~2 s and is answered at ~2.6-2.7 s;
    // the third is due at ~3 s (the deadline is read in between).
    tokio::time::sleep(Duration::from_millis(1900)).await;
    let first_deadline = Instant::now() + g.remaining();
    let paused_at = Instant::now();
    let _: () = server.cmd(&["CLIENT", "PAUSE", "700", "ALL"]);
    // Until the renewal counted (the deadline moved).
    let t0 = Instant::now();
    let deadline = loop {
        let d = Instant::now() + g.remaining();
        if d > first_deadline + Duration::from_millis(50) {
            break d;
        }
        assert!(t0.elapsed() < Duration::from_secs(3), "control: no renewal counted");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert!(
        paused_at.elapsed() >= Duration::from_millis(600),
        "control: the renewal did not wait out the pause"
    );
    // Sent at about paused_at + 100 ms: its deadline is about paused_at + 100 ms + ttl − drift.
    // Counted from the reply (paused_at + 700-800 ms) it would be ~600-700 ms later.
    let limit = paused_at + Duration::from_millis(400) + ttl;
    assert!(
        deadline <= limit,
        "the renewal's validity counts from its reply: deadline {:?} after the pause began, limit {:?}",
        deadline - paused_at,
        limit - paused_at
    );
    assert_eq!(g.state(), LockState::Held);
    g.release().await.unwrap();
}

// `ended()` resolves when this guard's level ends either way: a release on another task ends a
// wait at once (`lost()` never resolves then), a released guard answers at once, and a loss is
// a loss. Inner levels end with their own release while the hold lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_resolves_on_release_as_on_loss() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let lock = client.lock("ended", LockOptions::lease(Duration::from_secs(2))).unwrap();
    let g = Arc::new(lock.acquire(Some(Duration::ZERO)).await.unwrap());
    let waiter = tokio::spawn({
        let g = g.clone();
        async move { g.ended().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "ended() before the release");
    g.release().await.unwrap();
    let state =
        tokio::time::timeout(Duration::from_secs(2), waiter).await.expect("the release did not end the wait");
    assert_eq!(state.unwrap(), LockState::Released);
    assert_eq!(g.ended().await, LockState::Released, "a released guard answers at once");

    // A re-entered level ends with its release; the outer level is still held.
    let outer = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let inner = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    inner.release().await.unwrap();
    assert_eq!(inner.ended().await, LockState::Released);
    assert!(tokio::time::timeout(Duration::from_millis(100), outer.ended()).await.is_err(), "outer ended");

    // Another owner's DEL: the hold is lost (the watchdog's renewal finds it).
    let _: () = server.cmd(&["DEL", "ferrolock:{ended}"]);
    let state =
        tokio::time::timeout(Duration::from_secs(20), outer.ended()).await.expect("loss not reported");
    assert_eq!(state, LockState::Lost);
}

// The blocking facade passes every argument on: a bounded wait ends with ACQUIRE_TIMEOUT at its
// bound, an extend sets the lease it is given (shorter or longer than the lock's own), and
// wait_lost on a hold that stays held returns false once its timeout ends (each of these was
// dropped on the way to the async call without any test failing: mutation review).
#[test]
fn blocking_calls_pass_their_bounds_on() {
    use ferrolock::blocking;
    let server = RedisServer::start();
    let client = blocking::Client::connect(&server.url(), ClientOptions::default()).unwrap();
    let lease = LockOptions::lease(Duration::from_secs(10));
    let g = client.lock("blkbound", lease).unwrap().acquire(Some(Duration::ZERO)).unwrap();
    let other = client.lock("blkbound", lease).unwrap();
    let t0 = Instant::now();
    let e = other.acquire(Some(Duration::from_millis(300))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AcquireTimeout, "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5), "a 300 ms wait took {:?}", t0.elapsed());
    let ttl = || client.inspect("blkbound").unwrap().expect("held").ttl.expect("a lease");
    g.extend(Duration::from_secs(3)).unwrap();
    assert!(ttl() <= Duration::from_secs(3), "extend(3 s) left a lease of {:?}", ttl());
    g.extend(Duration::from_secs(120)).unwrap();
    assert!(ttl() > Duration::from_secs(60), "extend(120 s) left a lease of {:?}", ttl());
    let t0 = Instant::now();
    assert!(!g.wait_lost(Duration::from_millis(200)), "wait_lost said lost for a held lock");
    assert!(t0.elapsed() >= Duration::from_millis(200), "wait_lost returned early");
    assert_eq!(g.state(), LockState::Held);
    g.release().unwrap();
}

// extend checks its lease before any I/O, as lock() does: zero, too short for the drift, or over
// a year is INVALID_DURATION, and the hold is untouched (without the check, extend(0) sent
// PEXPIRE 0, which deleted the hold and reported success).
#[tokio::test]
async fn extend_refuses_a_bad_lease_before_io() {
    let server = RedisServer::start();
    let client = connect(&server).await;
    let lock = client.lock("ext-bad", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let before = client_calls(&server);
    for ttl in [Duration::ZERO, Duration::from_millis(3), Duration::from_secs(400 * 24 * 3600)] {
        let e = g.extend(ttl).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidDuration, "{ttl:?}: {e}");
    }
    assert_eq!(client_calls(&server), before, "a bad extend reached the server");
    assert_eq!(g.state(), LockState::Held);
    let info = client.inspect("ext-bad").await.unwrap().expect("the hold is still there");
    assert!(info.ttl.unwrap() > Duration::from_secs(20), "{info:?}");
    g.release().await.unwrap();
}

// A waiter whose connection was lost is still woken by the release once its client has
// reconnected: the connection subscribes the release channels again when it reconnects. Without
// that the waiter slept until the holder's lease bound (30 s here) with the lock free, and every
// other test passed: their leases were short or their waiters not subscribed (mutation review).
#[tokio::test]
async fn a_waiter_is_woken_by_a_release_after_its_connection_was_lost() {
    let server = RedisServer::start();
    let holder = connect(&server).await;
    let waiting = connect(&server).await;
    let lease = LockOptions::lease(Duration::from_secs(30));
    let g = holder.lock("resub", lease).unwrap().acquire(Some(Duration::ZERO)).await.unwrap();
    let lock = waiting.lock("resub", lease).unwrap();
    let waiter = tokio::spawn(async move {
        let r = lock.acquire(Some(Duration::from_secs(20))).await;
        (Instant::now(), r)
    });
    let subscribers = || match server
        .cmd::<Vec<redis::Value>>(&["PUBSUB", "NUMSUB", "ferrolock:{resub}:released"])
        .get(1)
    {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("NUMSUB replied {other:?}"),
    };
    let t0 = Instant::now();
    while subscribers() == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let list: String = server.cmd(&["CLIENT", "LIST"]);
    let id = list
        .lines()
        .find(|l| l.contains(" sub=1 "))
        .and_then(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .expect("the waiter's connection")
        .to_owned();
    let killed: i64 = server.cmd(&["CLIENT", "KILL", "ID", &id]);
    assert_eq!(killed, 1);
    // The lost connection wakes the waiter; its try reconnects, and the channel is subscribed
    // again.
    let t0 = Instant::now();
    while subscribers() == 0 && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    common::release_wakes(g, waiter).await;
}
