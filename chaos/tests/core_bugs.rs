//! Core bugs found by the reliability suite, each reproduced deterministically against a real
//! `redis-server`, kept as regression tests once fixed. Each has a control: the same steps
//! without the fault pass.

use std::time::Duration;

use ferrolock::{ClientOptions, ErrorKind, LockOptions, blocking};
use ferrolock_testkit::RedisServer;

fn client(server: &RedisServer) -> blocking::Client {
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(200);
    o.connect_timeout = Duration::from_millis(500);
    blocking::Client::connect(&server.url(), o).expect("connect")
}

/// The steps of the ghost-hold bug; `pause` = false is the control.
fn release_times_out_then_reacquire(pause: bool) -> Option<ferrolock::LockInfo> {
    let server = RedisServer::start();
    let c = client(&server);
    let lock = c.lock("ghost", LockOptions::lease(Duration::from_millis(1000))).expect("lock");
    let g = lock.acquire(Some(Duration::from_secs(2))).expect("first acquire");
    if pause {
        server.pause();
    }
    let first_release = g.release();
    if pause {
        // The release is queued in the stopped server; the client gives up: outcome unknown.
        assert!(
            matches!(
                first_release.as_ref().map_err(|e| e.kind()),
                Err(ErrorKind::Timeout | ErrorKind::Connection)
            ),
            "{first_release:?}"
        );
    }
    std::thread::scope(|s| {
        if pause {
            // Resume after the lease ran out on the server (1.3 s > 1 s): the old hold is gone.
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(1300));
                server.resume();
            });
        }
        // Acquire again through the same handle; its first attempts time out while the server
        // is stopped, so each is followed by a compare-and-delete.
        let g2 = lock.acquire(Some(Duration::from_secs(5))).expect("second acquire");
        g2.release().expect("release of the second hold");
    });
    let _ = g.release(); // retry the first release too: the handle now holds nothing
    c.inspect("ghost").expect("inspect")
}

/// Control: without the pause, releasing both holds frees the lock.
#[test]
fn control_reacquire_after_release_frees_the_lock() {
    assert_eq!(release_times_out_then_reacquire(false).map(|i| i.count), None);
}

/// Found by `chaos suite` scenario w1-n3 (SIGSTOP the master 1.5×TTL): a handle whose release
/// timed out keeps a live count of 1 (`Lock::live_count`), so a later acquire of unknown outcome
/// is undone by `send_release(prior = 1)` (core/src/lock.rs, `attempt`: `let prior =
/// self.live_count()` … `pending.settle()`). But the old hold had expired: the server granted a
/// *fresh* hold (count 1, new fence), and "release to count 1" leaves it in place. The next
/// attempt re-enters that ghost (count 2); every release then only brings it back to 1, so the
/// lock is never freed while the handle keeps acquiring: other clients starve and the same fence
/// is returned for every later "acquisition" (179 duplicates in one 5 s run).
#[test]
fn b_core_ghost_hold_after_unknown_acquire_following_failed_release() {
    let left = release_times_out_then_reacquire(true);
    assert!(
        left.is_none(),
        "after every guard of the handle was released the lock is still held (count {:?}, fence {:?}): \
         a ghost hold from the compare-and-delete of an unknown-outcome acquire",
        left.as_ref().map(|i| i.count),
        left.as_ref().map(|i| i.fence)
    );
}

// ---- Redlock: the same ghost-hold pattern, per master ----
//
// Redlock undoes a failed round on each master with `release.lua` to the handle's prior count,
// *without* the fence (ARGV[4]), queued behind that master's acquire of unknown outcome. The
// single-node bug's steps, and a per-master variant where the fence would matter, leave no ghost
// over Redlock: the handle's local count is the truth (a re-entry counts `prior + 1`, never the
// count a master reports) and its release at depth 0 deletes the hold on every master it touched
// whatever that master's count or fence. What did leave ghosts is how the undo and a straggling
// release were sent: as EVALSHA, queued on a stopped master, whose NOSCRIPT reply (release.lua
// not cached there yet, as on a fresh or restarted master) nobody waited for any more.

fn redlock_client(servers: &[RedisServer]) -> blocking::Client {
    let mut o = ClientOptions::default();
    o.redlock_node_timeout = Duration::from_millis(100);
    o.response_timeout = Duration::from_millis(300);
    o.connect_timeout = Duration::from_millis(500);
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    blocking::Client::connect_redlock(&urls, o).expect("connect_redlock")
}

/// One master's view of the hold: `(owner, count, fence)`, or `None` when free.
fn hold_on(server: &RedisServer, name: &str) -> Option<(String, u32, u64)> {
    let h: std::collections::HashMap<String, String> =
        server.cmd(&["HGETALL", &format!("ferrolock:{{{name}}}")]);
    let field = |f: &str| h.get(f).cloned().unwrap_or_default();
    (!h.is_empty())
        .then(|| (field("owner"), field("count").parse().unwrap_or(0), field("fence").parse().unwrap_or(0)))
}

/// After the handle released everything (or failed to acquire): every master is free, and
/// another owner takes the lock at once with a larger fence than any the handle was given.
fn assert_freed_everywhere(servers: &[RedisServer], c: &blocking::Client, name: &str, fence: u64) {
    // Stragglers (a release or undo queued behind a stopped master) land after it resumes: give
    // them a few seconds, far less than the 30 s leases a ghost hold would keep.
    let t0 = std::time::Instant::now();
    let left = loop {
        let left: Vec<_> = servers.iter().map(|s| hold_on(s, name)).collect();
        if left.iter().all(Option::is_none) || t0.elapsed() > Duration::from_secs(3) {
            break left;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        left.iter().all(Option::is_none),
        "masters still hold {name:?} for an owner with no guard left (ghost holds): {left:?}"
    );
    let other = c.lock(name, LockOptions::lease(Duration::from_secs(5))).expect("lock");
    let g = other.try_acquire().expect("try_acquire").expect("another owner gets the free lock at once");
    assert!(g.fence() > fence, "fence {} not above the handle's {fence}", g.fence());
    g.release().expect("release of the other owner");
}

/// The single-node bug's steps over 3 masters, all stopped (`pause` = false is the control): the
/// release times out, the same handle acquires again while the masters are stopped, the masters
/// resume after the lease ran out.
fn redlock_release_times_out_then_reacquire(pause: bool) {
    let servers = ferrolock_testkit::start_many(3);
    let c = redlock_client(&servers);
    let lock = c.lock("ghost", LockOptions::lease(Duration::from_millis(1000))).expect("lock");
    let g = lock.acquire(Some(Duration::from_secs(2))).expect("first acquire");
    if pause {
        servers.iter().for_each(RedisServer::pause);
    }
    let first_release = g.release();
    if pause {
        assert_eq!(first_release.as_ref().map_err(|e| e.kind()), Err(ErrorKind::QuorumNotReached));
    }
    let g2 = std::thread::scope(|s| {
        if pause {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(1300)); // > the 1 s lease
                servers.iter().for_each(RedisServer::resume);
            });
        }
        let g2 = lock.acquire(Some(Duration::from_secs(5))).expect("second acquire");
        g2.release().expect("release of the second hold");
        g2
    });
    let _ = g.release(); // retry the first release too: the handle now holds nothing
    assert_freed_everywhere(&servers, &c, "ghost", g.fence().max(g2.fence()));
}

#[test]
fn control_redlock_reacquire_after_release_frees_every_master() {
    redlock_release_times_out_then_reacquire(false);
}

/// Passed before the fix too: a stopped master gets no new acquire until a PING comes back, so
/// no acquire of the handle is queued behind the timed-out release; a regression test.
#[test]
fn redlock_no_ghost_hold_after_unknown_acquire_following_failed_release() {
    redlock_release_times_out_then_reacquire(true);
}

/// Masters 1 and 2 stop; one acquire round of a fresh handle gets only master 0 and fails, so it
/// is undone everywhere, on 1 and 2 behind their acquire of unknown outcome. They resume.
/// (`fault` = false is the control: the round is granted, then released.)
fn redlock_failed_round_undone_on_stopped_masters(fault: bool) {
    let servers = ferrolock_testkit::start_many(3);
    let c = redlock_client(&servers);
    // Another lock held (never released) first: acquire.lua is cached on every master, and
    // release.lua is not yet, as on masters that were (re)started and have granted since.
    let other = c.lock("other", LockOptions::lease(Duration::from_secs(30))).expect("lock");
    let _held = other.acquire(Some(Duration::from_secs(2))).expect("acquire another lock");
    let lock = c.lock("undo", LockOptions::lease(Duration::from_secs(30))).expect("lock");
    if fault {
        servers[1].pause();
        servers[2].pause();
    }
    let fence = match lock.try_acquire() {
        Ok(Some(g)) if !fault => {
            g.release().expect("control: release");
            g.fence()
        }
        r => {
            assert!(
                fault && matches!(r.as_ref().map_err(|e| e.kind()), Err(ErrorKind::QuorumNotReached)),
                "{r:?}"
            );
            0
        }
    };
    std::thread::sleep(Duration::from_millis(300));
    if fault {
        servers[1].resume();
        servers[2].resume();
    }
    // Before the fix masters 1 and 2 (a quorum) kept the hold for the whole 30 s lease: the undo
    // was an EVALSHA answered NOSCRIPT after the round stopped waiting for it.
    assert_freed_everywhere(&servers, &c, "undo", fence);
}

#[test]
fn control_redlock_granted_round_released_frees_every_master() {
    redlock_failed_round_undone_on_stopped_masters(false);
}

#[test]
fn b_core_redlock_ghost_quorum_after_undo_of_unknown_acquire_lost_to_noscript() {
    redlock_failed_round_undone_on_stopped_masters(true);
}

/// A release confirmed by masters 0 and 1 while master 2 is stopped (`pause` = false: not
/// stopped); master 2 resumes shortly after.
fn redlock_release_straggler_on_a_stopped_master(pause: bool) {
    let servers = ferrolock_testkit::start_many(3);
    let c = redlock_client(&servers);
    let lock = c.lock("straggler", LockOptions::lease(Duration::from_secs(30))).expect("lock");
    let g = lock.acquire(Some(Duration::from_secs(2))).expect("acquire");
    if pause {
        servers[2].pause();
    }
    g.release().expect("release by quorum");
    std::thread::sleep(Duration::from_millis(300));
    if pause {
        servers[2].resume();
    }
    // Before the fix master 2 kept the hold for the whole 30 s lease (its release, an EVALSHA,
    // was answered NOSCRIPT after the round stopped waiting).
    assert_freed_everywhere(&servers, &c, "straggler", g.fence());
}

#[test]
fn control_redlock_release_on_every_master() {
    redlock_release_straggler_on_a_stopped_master(false);
}

#[test]
fn b_core_redlock_ghost_hold_after_release_straggler_lost_to_noscript() {
    redlock_release_straggler_on_a_stopped_master(true);
}

/// The per-master fence case (`fault` = false is the control). The handle holds depth 1 with a
/// renewing 2 s lease on masters 0–2. Masters 1 and 2 stop; a re-entry round gets only master 0
/// and fails, so it is undone to depth 1, on 1 and 2 behind their acquire of unknown outcome.
/// Master 1 resumes at once (re-entry to 2, undo to 1); the watchdog keeps the hold on {0, 1}.
/// Master 2 stays stopped past its lease: its queued re-entry finds the key gone and makes
/// nothing (before acquire.lua's `reenter` flag it granted a *fresh* hold there, its own fence,
/// which the fence-less undo "to depth 1" kept and the handle's release deleted). Returns master
/// 2's hold after it resumed.
fn redlock_reentry_undone_on_a_master_stopped_past_the_lease(fault: bool) -> Option<(String, u32, u64)> {
    let servers = ferrolock_testkit::start_many(3);
    let c = redlock_client(&servers);
    let lock = c.lock("reent", LockOptions::renewing(Duration::from_millis(2000))).expect("lock");
    let g = lock.acquire(Some(Duration::from_secs(2))).expect("first acquire");
    let owner = String::from_utf8(c.inspect("reent").expect("inspect").expect("held").owner).expect("hex");
    if fault {
        servers[1].pause();
        servers[2].pause();
    }
    match lock.try_acquire() {
        Ok(Some(g2)) if !fault => g2.release().expect("control: release the re-entry"),
        r => assert!(
            fault && matches!(r.as_ref().map_err(|e| e.kind()), Err(ErrorKind::QuorumNotReached)),
            "{r:?}"
        ),
    }
    std::thread::sleep(Duration::from_millis(400));
    if fault {
        servers[1].resume();
    }
    std::thread::sleep(Duration::from_millis(2200)); // master 2's lease (from before the stop) ran out
    if fault {
        servers[2].resume();
    }
    std::thread::sleep(Duration::from_millis(1200)); // its queue runs, its stall clears, renewals reach it
    assert_eq!(g.state(), ferrolock::LockState::Held, "the watchdog keeps the hold on a quorum");
    assert_eq!(g.count(), 1);
    // Every master that holds the lock holds it for this owner at the handle's depth (before
    // the fix master 1 stayed at depth 2: its undo was lost to NOSCRIPT).
    for (i, s) in servers.iter().enumerate() {
        if let Some((o, count, _)) = hold_on(s, "reent") {
            assert_eq!((o.as_str(), count), (owner.as_str(), g.count()), "master {i}");
        }
    }
    let on_2 = hold_on(&servers[2], "reent");
    g.release().expect("release");
    assert_freed_everywhere(&servers, &c, "reent", g.fence());
    on_2
}

#[test]
fn control_redlock_reentry_round_undone_then_every_master_is_freed() {
    redlock_reentry_undone_on_a_master_stopped_past_the_lease(false);
}

#[test]
fn redlock_no_ghost_hold_after_reentry_undo_on_a_master_stopped_past_the_lease() {
    let on_2 = redlock_reentry_undone_on_a_master_stopped_past_the_lease(true);
    eprintln!("master 2 after it resumed (owner, count, fence): {on_2:?}");
}

/// Masters 1 and 2 stop for 2.5 s while the handle releases (node timeout 3 s): the release's
/// EVALSHA gets no reply within ¾ of the timeout, so the same release follows as EVAL in the
/// same lane slot; both run when the masters resume, the EVALSHA deletes the hold and the EVAL
/// finds it gone. `taken` = true is the control: the lease ran out and another owner took the
/// lock on every master before the release, so the same sequence must still report `LOST`.
fn redlock_release_answered_late_by_a_majority(taken: bool) -> Result<(), ferrolock::Error> {
    let servers = ferrolock_testkit::start_many(3);
    let mut o = ClientOptions::default();
    // Wide margins on both sides of the resume: ¾ of the timeout (2.25 s) before it, 0.5 s
    // after it for a loaded machine's late wake-up (past the timeout the masters' answers would
    // be missing, and the control would read "no quorum" instead of LOST).
    o.redlock_node_timeout = Duration::from_secs(3);
    o.response_timeout = Duration::from_secs(4);
    o.connect_timeout = Duration::from_millis(500);
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let c = blocking::Client::connect_redlock(&urls, o.clone()).expect("connect_redlock");
    // Scripts cached first: the release's first try must be an EVALSHA that runs.
    let lease = Duration::from_millis(if taken { 300 } else { 30_000 });
    let lock = c.lock("late", LockOptions::lease(lease)).expect("lock");
    lock.acquire(Some(Duration::from_secs(2))).expect("warm-up acquire").release().expect("warm-up release");
    let g = lock.acquire(Some(Duration::from_secs(2))).expect("acquire");
    let mut theirs = None;
    if taken {
        let other = blocking::Client::connect_redlock(&urls, o).expect("connect_redlock");
        let l = other.lock("late", LockOptions::lease(Duration::from_secs(30))).expect("lock");
        let t = l.acquire(Some(Duration::from_secs(3))).expect("the other owner takes the expired lock");
        assert!(t.fence() > g.fence());
        theirs = Some((other, t));
    }
    // The other owner's holds: on every master its round reached in time (a master whose copy of
    // the expired hold had not run out yet when asked answered "held", and the round went on
    // with the others).
    let before: Vec<_> = servers.iter().map(|s| hold_on(s, "late")).collect();
    servers[1].pause();
    servers[2].pause();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(2500)); // past ¾ of the node timeout, before it
            servers[1].resume();
            servers[2].resume();
        });
        g.release()
    });
    let left: Vec<_> = servers.iter().map(|s| hold_on(s, "late")).collect();
    match &theirs {
        None => assert!(left.iter().all(Option::is_none), "the release left holds: {left:?}"),
        Some((_, t)) => {
            let theirs_before = |h: &Option<(String, u32, u64)>| h.as_ref().is_some_and(|h| h.2 == t.fence());
            assert!(
                before.iter().filter(|h| theirs_before(h)).count() >= 2,
                "no quorum of theirs: {before:?}"
            );
            let deleted = before.iter().zip(&left).any(|(b, l)| theirs_before(b) && l != b);
            assert!(!deleted, "the release deleted the other owner's holds: {before:?} -> {left:?}")
        }
    }
    r
}

#[test]
fn b_core_redlock_release_answered_late_by_a_majority_is_not_a_loss() {
    let r = redlock_release_answered_late_by_a_majority(false);
    assert!(r.is_ok(), "the first tries released the lock and nobody else held it: {r:?}");
}

#[test]
fn control_redlock_release_answered_late_after_another_owner_took_the_lock_is_lost() {
    let r = redlock_release_answered_late_by_a_majority(true);
    assert_eq!(r.map_err(|e| e.kind()), Err(ErrorKind::Lost));
}

/// A re-entered level whose release gets no answer in time (every server stopped) is given up
/// all the same, so the outer guard's release frees the lock while the inner guard object is
/// still alive: in a garbage-collected binding (Node, Go) an abandoned guard is dropped only
/// when the collector runs, and until then its level kept the lock held and renewed (found by
/// the short chaos run of 2026-11-26, w2-n1c: one Node handle re-entered the leftover hold for
/// every later grant, 14 duplicate fences). `stop` = false is the control.
fn inner_release_without_answer_then_outer_release(
    servers: &[RedisServer],
    c: &blocking::Client,
    stop: bool,
) {
    let lock = c.lock("inner", LockOptions::renewing(Duration::from_secs(30))).expect("lock");
    let outer = lock.acquire(Some(Duration::from_secs(2))).expect("acquire");
    let inner = lock.acquire(Some(Duration::from_secs(2))).expect("re-enter");
    if stop {
        servers.iter().for_each(RedisServer::pause);
    }
    let r = inner.release();
    if stop {
        std::thread::sleep(Duration::from_millis(100));
        servers.iter().for_each(RedisServer::resume);
    }
    outer.release().expect("the outer release");
    assert_freed_everywhere(servers, c, "inner", outer.fence());
    assert!(r.is_ok(), "an inner level is released locally even without an answer: {r:?}");
    drop(inner); // alive until here, like an object the collector has not reached yet
}

#[test]
fn control_inner_release_then_outer_release_frees_the_lock() {
    let server = RedisServer::start();
    inner_release_without_answer_then_outer_release(std::slice::from_ref(&server), &client(&server), false);
}

#[test]
fn b_core_an_inner_release_without_answer_does_not_keep_the_lock() {
    let server = RedisServer::start();
    inner_release_without_answer_then_outer_release(std::slice::from_ref(&server), &client(&server), true);
}

#[test]
fn b_core_an_inner_release_without_answer_does_not_keep_the_lock_over_quorum() {
    let servers = ferrolock_testkit::start_many(3);
    inner_release_without_answer_then_outer_release(&servers, &redlock_client(&servers), true);
}

/// A waiter whose connection breaks as its SUBSCRIBE goes out (after its first try found the
/// lock held) keeps waiting and gets the lock once it is released: the lost subscription is a
/// transient failure like a lost try, not the end of the wait. `cut` = false is the control.
fn waiter_subscribe_on_a_link(cut: bool) -> Result<(), ferrolock::Error> {
    let server = RedisServer::start();
    let proxy = ferrolock_chaos::proxy::DelayProxy::start(format!("127.0.0.1:{}", server.port())).unwrap();
    let holder = client(&server);
    let g = holder.lock("s", LockOptions::lease(Duration::from_secs(30))).unwrap().acquire(None).unwrap();
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(200);
    o.connect_timeout = Duration::from_millis(500);
    let waiter = blocking::Client::connect(&proxy.url(), o).expect("connect");
    let lock = waiter.lock("s", LockOptions::lease(Duration::from_secs(30))).unwrap();
    if cut {
        proxy.cut_when_sent(b"SUBSCRIBE");
    }
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        g.release().expect("the holder's release");
    });
    let r = lock.acquire(Some(Duration::from_secs(5))).map(|w| w.release().expect("the waiter's release"));
    release.join().unwrap();
    assert!(!proxy.cut_pending(), "the link broke as the SUBSCRIBE went out");
    r
}

#[test]
fn control_waiter_subscribes_and_gets_the_lock() {
    waiter_subscribe_on_a_link(false).expect("acquire after the release");
}

#[test]
fn b_core_a_subscribe_lost_with_its_connection_does_not_end_the_wait() {
    waiter_subscribe_on_a_link(true).expect("acquire after the release");
}

/// A bounded acquire whose SUBSCRIBE gets no answer (the server stops answering as it goes out)
/// ends at its deadline: the SUBSCRIBE used to be waited for until the response timeout (3 s
/// here), ten times the 300 ms wait. `stall` = false is the control.
fn wait_while_subscribe_stalls(stall: bool) -> (Result<(), ferrolock::Error>, Duration) {
    let server = RedisServer::start();
    let proxy = ferrolock_chaos::proxy::DelayProxy::start(format!("127.0.0.1:{}", server.port())).unwrap();
    let holder = client(&server);
    let g = holder.lock("st", LockOptions::lease(Duration::from_secs(30))).unwrap().acquire(None).unwrap();
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_secs(3);
    let waiter = blocking::Client::connect(&proxy.url(), o).expect("connect");
    let lock = waiter.lock("st", LockOptions::lease(Duration::from_secs(30))).unwrap();
    if stall {
        proxy.hold_when_sent(b"SUBSCRIBE");
    }
    let t0 = std::time::Instant::now();
    let r = lock.acquire(Some(Duration::from_millis(300))).map(|_| ());
    let took = t0.elapsed();
    assert!(!proxy.cut_pending(), "the SUBSCRIBE went out and was held");
    proxy.set_blackhole(false);
    // Afterwards the waiter's client works: it gets the lock once the holder releases it.
    g.release().unwrap();
    lock.acquire(Some(Duration::from_secs(5))).unwrap().release().unwrap();
    (r, took)
}

#[test]
fn control_a_bounded_wait_on_a_held_lock_ends_at_its_deadline() {
    let (r, took) = wait_while_subscribe_stalls(false);
    assert_eq!(r.unwrap_err().kind(), ErrorKind::AcquireTimeout);
    assert!(took < Duration::from_millis(1500), "a 300 ms wait took {took:?}");
}

#[test]
fn b_core_a_stalled_subscribe_does_not_outlast_the_wait() {
    let (r, took) = wait_while_subscribe_stalls(true);
    assert_eq!(r.unwrap_err().kind(), ErrorKind::AcquireTimeout);
    assert!(took < Duration::from_millis(1500), "a 300 ms wait took {took:?}");
}

/// The subscription sweep drops idle channels together, not one round trip after another: it
/// holds the lock a new waiter's SUBSCRIBE needs while it runs, so over a slow link (or to a
/// stopped master, one timeout each) twenty idle channels kept new waiters out for twenty round
/// trips. Seen from the server: the channel count falls in at most a step per sweep (two if a
/// sweep tick splits the batch), where one UNSUBSCRIBE after another made a step each.
#[test]
fn b_core_idle_channels_are_unsubscribed_together() {
    const N: usize = 20;
    let server = RedisServer::start();
    let proxy = ferrolock_chaos::proxy::DelayProxy::start(format!("127.0.0.1:{}", server.port())).unwrap();
    let holder = client(&server);
    let lease = LockOptions::lease(Duration::from_secs(30));
    let names: Vec<String> = (0..N).map(|i| format!("sweep{i}")).collect();
    let _held: Vec<_> = names.iter().map(|n| holder.lock(n, lease).unwrap().acquire(None).unwrap()).collect();
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_secs(2);
    o.subscription_linger = Duration::from_millis(500);
    let waiter = blocking::Client::connect(&proxy.url(), o).expect("connect");
    std::thread::scope(|s| {
        for n in &names {
            let lock = waiter.lock(n, lease).unwrap();
            s.spawn(move || {
                let e = lock.acquire(Some(Duration::from_millis(100))).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::AcquireTimeout);
            });
        }
    });
    let channels = || server.cmd::<Vec<String>>(&["PUBSUB", "CHANNELS", "ferrolock:*"]).len();
    assert_eq!(channels(), N, "every waiter subscribed");
    proxy.set_delay(Duration::from_millis(50)); // 100 ms a round trip
    let (t0, mut last, mut steps) = (std::time::Instant::now(), N, 0);
    while last > 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "idle channels still subscribed: {last}");
        std::thread::sleep(Duration::from_millis(5));
        let now = channels();
        if now < last {
            steps += 1;
            last = now;
        }
    }
    assert!(steps <= 2, "{N} idle channels went in {steps} steps");
}

/// Redlock fencing across a write-back lost with its connection. Three masters; the counter of
/// `s2` is ahead (20 s past the clock: a grant made there moments earlier by a client whose floor
/// ran ahead). B's round is under way: `s0` has granted B, its requests to `s1` (600 ms each
/// way) and `s2` (no answer) are still out. A's round then gets `s1` (its floor) and `s2` (that
/// counter plus one, T), so T is written back; `s0` (held by B) confirms the write-back, but
/// A's link to `s1` breaks just as its write-back goes out. A's grant returns T, A releases, and
/// only then does B's request reach `s1`, whose counter is still A's floor there: B is granted
/// `{s0, s1}` strictly after A's release, and its token must be larger than T. `cut` = false is
/// the control (the write-back reaches `s1`). Returns `(A's token, B's token)`.
fn redlock_tokens_across_a_write_back_lost_with_its_link(cut: bool) -> (u64, u64) {
    use ferrolock_chaos::proxy::DelayProxy;
    let servers = ferrolock_testkit::start_many(3);
    let name = "wb";
    let t: Vec<String> = servers[2].cmd(&["TIME"]);
    let ahead = t[0].parse::<u64>().unwrap() * 1_000_000 + t[1].parse::<u64>().unwrap() + 20_000_000;
    let _: () = servers[2].cmd(&["SET", &format!("ferrolock:{{{name}}}:fence"), &ahead.to_string()]);
    let up = |s: &RedisServer| format!("127.0.0.1:{}", s.port());
    let connect = |urls: Vec<String>| {
        let mut o = ClientOptions::default();
        o.redlock_node_timeout = Duration::from_secs(3);
        o.connect_timeout = Duration::from_millis(500);
        blocking::Client::connect_redlock(&urls, o).expect("connect_redlock")
    };
    let (b1, b2) = (DelayProxy::start(up(&servers[1])).unwrap(), DelayProxy::start(up(&servers[2])).unwrap());
    let b = connect(vec![servers[0].url(), b1.url(), b2.url()]);
    let a1 = DelayProxy::start(up(&servers[1])).unwrap();
    let a = connect(vec![servers[0].url(), a1.url(), servers[2].url()]);
    let lease = LockOptions::lease(Duration::from_secs(10));
    let (lock_a, lock_b) = (a.lock(name, lease).unwrap(), b.lock(name, lease).unwrap());
    b1.set_delay(Duration::from_millis(600));
    b2.set_blackhole(true);
    let b_round = std::thread::spawn(move || {
        let g = lock_b.acquire(Some(Duration::from_secs(10))).expect("B's acquire");
        (g.fence(), g)
    });
    // B's request has reached s0 (direct) and waits for s1 and s2.
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(hold_on(&servers[0], name).map(|h| h.1), Some(1), "B holds s0");
    if cut {
        let raise = redis::Script::new(include_str!("../../core/scripts/raise_fence.lua"));
        a1.cut_when_sent(raise.get_hash().as_bytes());
    }
    let g = lock_a.acquire(Some(Duration::from_millis(400))).expect("A's acquire");
    let fence_a = g.fence();
    assert_eq!(fence_a, ahead + 1, "A's token is s2's counter + 1");
    assert!(!a1.cut_pending(), "the link to s1 broke as the write-back went out");
    std::thread::sleep(Duration::from_millis(50)); // the link to s1 is reconnected
    g.release().expect("A's release");
    assert!(hold_on(&servers[1], name).is_none(), "A's release reached s1 before B's request");
    let (fence_b, gb) = b_round.join().unwrap();
    b2.set_blackhole(false);
    gb.release().expect("B's release");
    (fence_a, fence_b)
}

#[test]
fn control_redlock_tokens_increase_after_a_write_back() {
    let (a, b) = redlock_tokens_across_a_write_back_lost_with_its_link(false);
    assert!(b > a, "B was granted after A's release: {b} > {a}");
}

#[test]
fn b_core_redlock_tokens_increase_after_a_write_back_lost_with_its_link() {
    let (a, b) = redlock_tokens_across_a_write_back_lost_with_its_link(true);
    assert!(b > a, "B was granted after A's release: {b} > {a}");
}
