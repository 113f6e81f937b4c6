//! Watchdog and hold-state guarantees: loss reported at the deadline, IN_DOUBT back to HELD,
//! renewal timing and batching, subscription linger, a handed-on fixed lease
//! (docs/GUARANTEES.md, "Lost-lock reporting"; DESIGN §6). Real redis-servers, no mocks.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferrolock::{ClientOptions, ErrorKind, LockOptions, LockState};

// LOST is reported through `on_lost` no later than the local deadline (plus scheduling delay),
// also for a lease that is not renewed and that nobody looks at: the watchdog's scheduler must
// wake for the hold's deadline, not only for renewals. A callback registered once the hold is
// lost runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_lost_fires_at_the_deadline_of_an_unwatched_lease() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let lock = client.lock("unwatched", LockOptions::lease(Duration::from_millis(400))).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let deadline = Instant::now() + g.remaining();
    let (tx, rx) = tokio::sync::oneshot::channel();
    g.on_lost(move |e| {
        let _ = tx.send((Instant::now(), e.kind()));
    });
    // Nobody calls state(), remaining(), lost() or ensure() from here on.
    let (at, kind) = tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .expect("on_lost did not run within 5 s of a 400 ms lease")
        .unwrap();
    assert_eq!(kind, ErrorKind::Lost);
    assert!(at >= deadline, "reported lost {:?} before the local deadline", deadline - at);
    assert!(at < deadline + Duration::from_secs(2), "reported lost {:?} after the deadline", at - deadline);

    // Registered on a hold that is already lost: runs at once.
    assert_eq!(g.state(), LockState::Lost);
    let (tx, rx) = tokio::sync::oneshot::channel();
    g.on_lost(move |e| {
        let _ = tx.send(e.kind());
    });
    let kind = tokio::time::timeout(Duration::from_secs(2), rx)
        .await
        .expect("on_lost registered after the loss never ran")
        .expect("on_lost registered after the loss was dropped without running");
    assert_eq!(kind, ErrorKind::Lost);
}

// A renewal that fails (here: the server stopped for a moment) makes the hold IN_DOUBT and is
// retried soon, within the lease: once the server answers again, the hold is HELD again and stays
// held. Retried only on the usual schedule, or not turned back to HELD, a blip much shorter than
// the lease lost the lock or left it reading IN_DOUBT for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_failed_once_is_retried_within_the_lease() {
    let server = RedisServer::start();
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(150);
    let client = connect_with(&server, o).await;
    let ttl = Duration::from_millis(1500);
    let lock = client.lock("blip", LockOptions::renewing(ttl)).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    // Warm the extend script (a fresh server answers the first renewal with NOSCRIPT).
    let t0 = Instant::now();
    let first = Instant::now() + g.remaining();
    while Instant::now() + g.remaining() <= first + Duration::from_millis(20) {
        assert!(t0.elapsed() < Duration::from_secs(3), "control: no renewal counted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut states = g.watch();
    states.borrow_and_update();
    server.pause();
    // The next renewal times out: IN_DOUBT.
    let doubt = tokio::time::timeout(Duration::from_secs(2), states.changed()).await;
    let state = *states.borrow_and_update();
    server.resume();
    doubt.expect("no state change while the server was stopped").unwrap();
    assert_eq!(state, LockState::InDoubt);
    // Retried soon: HELD again well within the lease.
    let back = Instant::now();
    let t1 = Instant::now();
    while *states.borrow_and_update() != LockState::Held {
        assert!(t1.elapsed() < ttl, "not HELD again within a lease of the server answering: {:?}", g.state());
        let _ = tokio::time::timeout(Duration::from_millis(50), states.changed()).await;
    }
    assert!(back.elapsed() < ttl / 2, "the failed renewal was retried only after {:?}", back.elapsed());
    // And renewed on from there.
    tokio::time::sleep(ttl * 2).await;
    assert_eq!(g.state(), LockState::Held);
    g.release().await.unwrap();
}

// Renewals go out a third of a lease after the last one was sent, so a renewal may be delayed
// by most of the remaining lease without the hold running out. Here every renewal round waits
// a fifth of the lease before it is sent (the watchdog's test knob): renewed at a later fraction
// of the lease (9/10 was tried), the hold ran out with the server up and answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_slowed_by_a_fifth_of_the_lease_keep_the_hold() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let ttl = Duration::from_millis(1000);
    client.set_watchdog_test_knobs(ttl / 5, true);
    let lock = client.lock("slowed", LockOptions::renewing(ttl)).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let mut states = g.watch();
    let t0 = Instant::now();
    while t0.elapsed() < ttl * 5 {
        let _ = tokio::time::timeout(Duration::from_millis(50), states.changed()).await;
        assert_eq!(g.state(), LockState::Held, "after {:?}: {:?}", t0.elapsed(), g.ensure(Duration::ZERO));
    }
    client.set_watchdog_test_knobs(Duration::ZERO, true);
    g.release().await.unwrap();
}

// Renewals falling due within a sixth of a lease of a due one go out in its pipeline (DESIGN §6:
// one round per tick, not one per hold): two holds acquired 300 ms apart (lease 3 s) are renewed
// in the same round, from the same send instant, so their deadlines fall into step. Renewed
// each on its own schedule, they stay 300 ms apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_due_close_together_share_one_round() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let ttl = Duration::from_secs(3);
    // Load the extend script first, so that the round measured is not a NOSCRIPT retry.
    let warm = client.lock("step-warm", LockOptions::renewing(Duration::from_millis(300))).unwrap();
    let w = warm.acquire(Some(Duration::ZERO)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    w.release().await.unwrap();
    let a = client.lock("step-a", LockOptions::renewing(ttl)).unwrap();
    let b = client.lock("step-b", LockOptions::renewing(ttl)).unwrap();
    let ga = a.acquire(Some(Duration::ZERO)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let gb = b.acquire(Some(Duration::ZERO)).await.unwrap();
    let end = |g: &ferrolock::Guard| Instant::now() + g.remaining();
    let (a0, b0) = (end(&ga), end(&gb));
    assert!(b0 > a0 + Duration::from_millis(250), "control: the holds start out of step");
    // Until both have been renewed once (the first round is due 1 s after the first acquire).
    let t0 = Instant::now();
    while end(&ga) <= a0 + Duration::from_millis(50) || end(&gb) <= b0 + Duration::from_millis(50) {
        assert!(t0.elapsed() < ttl, "control: not renewed within a lease");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (a1, b1) = (end(&ga), end(&gb));
    let gap = if a1 > b1 { a1 - b1 } else { b1 - a1 };
    assert!(gap < Duration::from_millis(100), "renewed in separate rounds: deadlines {gap:?} apart");
    ga.release().await.unwrap();
    gb.release().await.unwrap();
}

// A release channel lingers for `subscription_linger` after its last waiter left, so a waiter
// that comes back meanwhile needs no SUBSCRIBE round trip (DESIGN §5), and is unsubscribed after
// it. The sweep runs every `linger` (2 s) from the client's start; the channel goes idle about
// 1 s in, so the first sweep (at 2 s) must keep it and the second (at 4 s) take it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_channel_lingers_for_its_linger_then_goes() {
    let server = RedisServer::start();
    let holder = connect(&server).await;
    let mut o = fast_opts();
    o.subscription_linger = Duration::from_secs(2);
    let started = Instant::now();
    let client = connect_with(&server, o).await;
    let held = holder.lock("linger", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let g = held.acquire(Some(Duration::ZERO)).await.unwrap();
    let waiter = client.lock("linger", LockOptions::default()).unwrap();
    let wait = (started + Duration::from_secs(1)).saturating_duration_since(Instant::now());
    let e = waiter.acquire(Some(wait)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AcquireTimeout);
    let channel = "ferrolock:{linger}:released".to_owned();
    assert!(release_channels(&server).contains(&channel), "control: the waiter subscribed");
    assert!(started.elapsed() < Duration::from_millis(1500), "control: the channel went idle too late");
    // Past the first sweep, within the linger: still subscribed.
    tokio::time::sleep_until((started + Duration::from_millis(3000)).into()).await;
    assert!(release_channels(&server).contains(&channel), "an idle channel was dropped before its linger");
    // Past the second sweep: gone.
    let t0 = Instant::now();
    while release_channels(&server).contains(&channel) {
        assert!(t0.elapsed() < Duration::from_secs(4), "an idle channel outlived its linger");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    g.release().await.unwrap();
}

// `remaining() > 0` is the documented test for "within the local deadline" (docs/GUARANTEES.md):
// once the hold is lost (here: an outsider deleted it and the next renewal was refused), it
// reads zero, although the local deadline has not passed yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remaining_is_zero_once_the_hold_is_lost() {
    let server = RedisServer::start();
    let client = connect_with(&server, fast_opts()).await;
    let lock = client.lock("gone", LockOptions::renewing(Duration::from_secs(6))).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let _: () = server.cmd(&["DEL", "ferrolock:{gone}"]);
    tokio::time::timeout(Duration::from_secs(5), g.lost()).await.expect("loss not reported");
    assert_eq!(g.state(), LockState::Lost);
    assert_eq!(g.remaining(), Duration::ZERO, "a lost hold reads as within its deadline");
    assert!(g.ensure(Duration::ZERO).is_err());
}

// A fair hand-over gives the waiter a short offer that the watchdog confirms to the waiter's own
// lease once (docs/PROTOCOL.md, "Taking a handed-on grant"), also for a lease that is not
// renewed. Once, not for good: the fixed lease then runs out like any other (a holder that
// hangs without releasing frees the lock after its lease). Renewed on and on, the handed-on
// fixed lease never ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_on_fixed_lease_is_confirmed_once_then_runs_out() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(3); // longer than the 2 s offer: confirmed by the watchdog
    let a = connect(&server).await;
    let b = connect(&server).await;
    let holder = a.lock("handed", LockOptions::lease(lease).with_fair(true)).unwrap();
    let g = holder.acquire(Some(Duration::ZERO)).await.unwrap();
    let waiter = b.lock("handed", LockOptions::lease(lease).with_fair(true)).unwrap();
    let w = tokio::spawn(async move { waiter.acquire(Some(Duration::from_secs(10))).await });
    let t0 = Instant::now();
    while server.cmd::<i64>(&["LLEN", "ferrolock:{handed}:queue"]) != 1 {
        assert!(t0.elapsed() < Duration::from_secs(5), "control: the waiter never queued");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    g.release().await.unwrap();
    let got = w.await.unwrap().unwrap();
    let granted = Instant::now();
    // Confirmed to the full lease (PTTL above the offer) ...
    while server.cmd::<i64>(&["PTTL", "ferrolock:{handed}"]) <= 2000 {
        assert!(granted.elapsed() < Duration::from_secs(2), "control: the offer was never confirmed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ... and then left to run out: lost locally and gone on the server within about a lease.
    tokio::time::timeout(Duration::from_secs(5), got.lost())
        .await
        .expect("the handed-on fixed lease never ran out");
    let t1 = Instant::now();
    while server.cmd::<i64>(&["EXISTS", "ferrolock:{handed}"]) == 1 {
        assert!(t1.elapsed() < Duration::from_secs(1), "the server still holds the lease");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(granted.elapsed() < lease + Duration::from_secs(2), "ran for {:?}", granted.elapsed());
}
