//! The hot-path connection (docs/CONNECTIONS.md): replies of abandoned requests are skipped, a
//! handle's request of unknown outcome keeps the next ones on its connection, and the
//! connection authenticates and selects the URL's database like the multiplexed one.

mod common;

use std::time::{Duration, Instant};

use common::{HoldProxy, Monitor, RedisServer, connect, connect_with, fast_opts};
use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions};

/// What hot-path tests read from the shared [`Monitor`].
trait Senders {
    fn senders(&self, parts: &[&str]) -> Vec<String>;
    fn wait_for(&self, parts: &[&str], n: usize) -> Vec<String>;
}

impl Senders for Monitor {
    /// The client address (`ip:port`) of each command line containing all of `parts`.
    fn senders(&self, parts: &[&str]) -> Vec<String> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .map(|(_, l)| l)
            .filter(|l| parts.iter().all(|p| l.contains(p)))
            .filter_map(|l| Some(l.split_once(" [")?.1.split_once(']')?.0.split(' ').nth(1)?.to_owned()))
            .collect()
    }

    fn wait_for(&self, parts: &[&str], n: usize) -> Vec<String> {
        let t0 = Instant::now();
        loop {
            let found = self.senders(parts);
            if found.len() >= n || t0.elapsed() > Duration::from_secs(5) {
                return found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A request abandoned on the hot connection (timed out while the server was stopped) leaves its
/// reply behind; the next request on that connection must skip it and read its own.
#[tokio::test]
async fn a_reply_left_by_a_timed_out_request_is_skipped() {
    async fn run(skip_stale: bool) -> (u64, Option<u64>) {
        let server = RedisServer::start();
        let client = connect_with(&server, fast_opts()).await;
        assert!(client.set_hot_path_for_tests(true), "a redis:// client has a hot-path connection");
        client.set_hot_path_test_knobs(true, skip_stale);
        let a = client.lock("stale", LockOptions::lease(Duration::from_secs(30))).unwrap();
        let b = client.lock("stale", LockOptions::lease(Duration::from_secs(30))).unwrap();
        // A warm-up pair opens the hot connection.
        a.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap();
        server.pause();
        // A's acquire and then its undo both time out on the hot connection.
        assert_eq!(a.try_acquire().await.unwrap_err().kind(), ErrorKind::Timeout);
        server.resume();
        // The server now runs A's acquire and its undo, in that order; B's acquire comes next.
        let g = b.try_acquire().await.unwrap().expect("the lock is free after A's undo");
        let holder = client.inspect("stale").await.unwrap();
        (g.fence(), holder.map(|h| h.fence))
    }

    let (fence, held) = run(true).await;
    assert_eq!(held, Some(fence), "B's grant is the hold on the server");
    // Control: reading the next reply as its own, B takes A's stale grant (and A's fence) for its
    // own, while the server holds nothing or another fence.
    let (fence, held) = run(false).await;
    assert_ne!(held, Some(fence), "control: a stale reply read as B's went unnoticed");
}

/// The hot connection keeps one response timer from request to request (hot.rs, `within`): a
/// request's timeout still counts from its own start when the timer was last set by an earlier
/// request, whose deadline comes first and wakes it early.
#[tokio::test]
async fn a_request_times_out_a_full_response_timeout_after_it_started() {
    let server = RedisServer::start();
    let mut opts = ClientOptions::default();
    opts.response_timeout = Duration::from_millis(400);
    let client = connect_with(&server, opts).await;
    assert!(client.set_hot_path_for_tests(true), "a redis:// client has a hot-path connection");
    let a = client.lock("timer", LockOptions::lease(Duration::from_secs(30))).unwrap();
    // This pair sets the timer for 400 ms after its acquire went out.
    a.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    server.pause();
    let t0 = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), a.try_acquire()).await;
    let took = t0.elapsed();
    server.resume();
    let err = r.expect("the request timed out within 5 s").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout);
    // The earlier pair's deadline came about 150 ms into this request.
    assert!(took >= Duration::from_millis(400), "timed out {took:?} after it started, before its 400 ms");
}

/// An acquire's and a release's futures stay small: the bindings move each call's future into a
/// task, and a large one cost the Node binding measurably (bench/FINDINGS.md, run 2026-11-26-c:
/// "The futures are smaller").
/// Rarely taken paths (subscribing, undoing, Redlock, the multiplexed fallback) are boxed.
#[tokio::test]
async fn acquire_and_release_futures_stay_small() {
    let server = RedisServer::start();
    let client = connect_with(&server, ClientOptions::default()).await;
    let lock = client.lock("sizes", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let acquire = std::mem::size_of_val(&lock.acquire(None));
    let try_acquire = std::mem::size_of_val(&lock.try_acquire());
    let held = lock.acquire(None).await.unwrap();
    let release = std::mem::size_of_val(&held.release());
    held.release().await.unwrap();
    eprintln!("future sizes: acquire {acquire}, try_acquire {try_acquire}, release {release} bytes");
    // 3,528 / 2,368 / 1,768 bytes before (rustc 1.95, release); 1,480 / 1,192 / 1,024 after.
    assert!(acquire <= 2048, "acquire future: {acquire} bytes");
    assert!(try_acquire <= 1536, "try_acquire future: {try_acquire} bytes");
    assert!(release <= 1280, "release future: {release} bytes");
}

/// A handle's acquire of unknown outcome on one connection is undone on that same connection,
/// so the undo can never run before the acquire (two connections have no order between them).
#[tokio::test]
async fn an_undo_follows_its_acquire_on_the_same_connection() {
    async fn run(pins: bool) -> (Vec<String>, Vec<String>) {
        let server = RedisServer::start();
        let monitor = Monitor::start(&server);
        let client = connect_with(&server, fast_opts()).await;
        client.set_hot_path_test_knobs(pins, true);
        let other = client.lock("busy", LockOptions::lease(Duration::from_secs(30))).unwrap();
        let held = other.acquire(Some(Duration::ZERO)).await.unwrap();
        let a = client.lock("order", LockOptions::lease(Duration::from_secs(30))).unwrap();
        server.pause();
        // `other`'s release takes the hot connection (times out at 200 ms); A's acquire starts
        // at 100 ms, finds the hot connection busy, goes on the multiplexed one and times out at
        // 300 ms; by then the hot connection is free again for A's undo.
        let release = tokio::spawn(async move { held.release().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(a.try_acquire().await.unwrap_err().kind(), ErrorKind::Timeout);
        assert!(release.await.unwrap().is_err());
        server.resume();
        let acquires = monitor.wait_for(&["\"ferrolock:{order}\"", "\"ferrolock:{order}:fence\""], 1);
        let undos = monitor.wait_for(&["\"1\" \"ferrolock:{order}\""], 1);
        (acquires, undos)
    }

    let (acquires, undos) = run(true).await;
    assert_eq!(acquires.len(), 1, "one acquire: {acquires:?}");
    assert!(!undos.is_empty(), "the acquire was undone");
    assert!(undos.iter().all(|u| *u == acquires[0]), "acquire from {acquires:?}, undo from {undos:?}");
    // Control: without pins the undo takes whichever connection is free, here the other one.
    let (acquires, undos) = run(false).await;
    assert!(
        undos.iter().any(|u| *u != acquires[0]),
        "control: the undo went the acquire's way even without pins ({acquires:?}, {undos:?})"
    );
}

/// The hot connection authenticates and selects the URL's database, as the multiplexed one does.
#[tokio::test]
async fn the_hot_connection_uses_the_urls_password_and_database() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret-hot"]);
    let url = format!("redis://:s3cret-hot@127.0.0.1:{}/3", server.port());
    let client = Client::connect(&url, ClientOptions::default()).await.unwrap();
    let lock = client.lock("db3", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let mut raw = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut raw).unwrap();
    let ours: Vec<&str> = list.lines().filter(|l| !l.contains("cmd=client|list")).collect();
    assert_eq!(ours.len(), 2, "the multiplexed and the hot connection: {list}");
    assert!(ours.iter().all(|l| l.contains(" db=3 ")), "both in db 3: {list}");
    let hot: Vec<&str> = ours.iter().copied().filter(|l| l.contains("cmd=eval")).collect();
    assert_eq!(hot.len(), 1, "one connection ran the acquire: {list}");
    assert!(hot[0].contains(" db=3 "), "the acquire ran in db 3: {}", hot[0]);
    let in_db3: bool = redis::cmd("EXISTS").arg("ferrolock:{db3}").query(&mut raw).unwrap();
    assert!(in_db3, "the hold is in db 3");
    g.release().await.unwrap();
    let gone: bool = redis::cmd("EXISTS").arg("ferrolock:{db3}").query(&mut raw).unwrap();
    assert!(!gone, "released in db 3");
}

// A handle's request that must go on the multiplexed connection waits for one of its requests
// still unanswered on the hot connection (here held back on the way), or fails: it never
// overtakes it. An extend that overtook a re-entry was cut back by the re-entry's lease (2 s)
// while the guard counted on the extend's 30 s; an acquire with `replica_acks` (a pipeline with
// its WAIT) that overtook the undo of the previous, unreplicated grant was deleted by that undo
// while its guard reported it held. Each case: whatever the first call returns, once the held
// requests have run the guard that reports the lock held really holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_on_the_multiplexed_connection_does_not_overtake_the_hot_ones() {
    // Connection 0 is the multiplexed one (at connect), 1 the hot one (the first acquire).
    let server = RedisServer::start();
    let replica = RedisServer::start_replica_of(&server, &[]);
    let other = connect(&server).await;
    for acks in [false, true] {
        let proxy = HoldProxy::start(&server, 1);
        let mut o = fast_opts();
        if acks {
            o.replica_acks = Some(ferrolock::ReplicaAcks::new(1, Duration::from_millis(100)));
            // The acquire pipeline waits out its WAIT (100 ms): its reply must not time out
            // first on a loaded machine (it did, at 200 ms, under a CI run).
            o.response_timeout = Duration::from_secs(1);
        }
        let client = Client::connect(&proxy.url, o).await.unwrap();
        assert!(client.set_hot_path_for_tests(true));
        let name = if acks { "overtake-acks" } else { "overtake-extend" };
        // The extend case waits out the re-entry's 2 s lease; the other needs none.
        let lease = Duration::from_secs(if acks { 30 } else { 2 });
        let lock = client.lock(name, LockOptions::lease(lease)).unwrap();
        let g = lock.acquire(Some(Duration::ZERO)).await.unwrap(); // opens the hot connection
        let g = if acks {
            g.release().await.unwrap();
            replica.pause();
            proxy.hold(true);
            // Granted, not replicated: undone on the hot connection, where it is held back.
            let e = lock.try_acquire().await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotReplicated, "{e}");
            replica.resume();
            let first = lock.try_acquire().await; // the retry, now replicated
            proxy.hold(false);
            tokio::time::sleep(Duration::from_millis(150)).await;
            match first {
                Ok(g) => g.expect("free"),
                Err(_) => lock.try_acquire().await.unwrap().expect("free"),
            }
        } else {
            proxy.hold(true);
            // A re-entry, unanswered on the hot connection: its undo queues behind it there.
            assert!(lock.try_acquire().await.unwrap_err().kind().is_transient());
            let first = g.extend(Duration::from_secs(30)).await;
            proxy.hold(false);
            tokio::time::sleep(Duration::from_millis(150)).await;
            if first.is_err() {
                g.extend(Duration::from_secs(30)).await.unwrap();
            }
            g
        };
        if !acks {
            tokio::time::sleep(Duration::from_millis(2300)).await; // past the re-entry's lease
        }
        let theirs =
            other.lock(name, LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await;
        assert!(
            !(g.ensure(Duration::ZERO).is_ok() && theirs.unwrap().is_some()),
            "replica_acks {acks}: another client took the lock while the guard reported it held"
        );
    }
}

// The password is rotated after the client connected: its multiplexed connection stays
// authenticated, but the hot connection (opened on the first acquire) is refused at AUTH. Locks
// keep working through the multiplexed connection; a hot path that returned its connect error
// instead passed every test (mutation review). Control: new connections are refused.
#[tokio::test]
async fn a_hot_connection_that_cannot_open_falls_back_to_the_multiplexed_one() {
    let server = RedisServer::start_with(&["--requirepass", "old-pass"]);
    let url = format!("redis://:old-pass@127.0.0.1:{}", server.port());
    let client = Client::connect(&url, ClientOptions::default()).await.unwrap();
    assert!(client.set_hot_path_for_tests(true), "a redis:// client has a hot-path connection");
    client.inspect("warm").await.unwrap(); // the multiplexed connection is up and authenticated
    let mut admin = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("requirepass").arg("new-pass").query(&mut admin).unwrap();
    let lock = client.lock("rotated", LockOptions::lease(Duration::from_secs(30))).unwrap();
    for _ in 0..3 {
        let g = lock.acquire(Some(Duration::ZERO)).await.expect("acquire through the multiplexed connection");
        g.release().await.expect("release through the multiplexed connection");
    }
    let refused = redis::Client::open(url.as_str()).unwrap().get_connection().is_err();
    assert!(refused, "control: the old password is still accepted");
}

// Opening the hot connection (its AUTH unanswered: the server is stopped) holds a call up no
// longer than a response timeout before it falls back, not for the connect timeout.
#[tokio::test]
async fn a_hanging_hot_connect_is_bounded_by_the_response_timeout() {
    let server = RedisServer::start_with(&["--requirepass", "pw-hot"]);
    let url = format!("redis://:pw-hot@127.0.0.1:{}", server.port());
    let mut opts = fast_opts();
    opts.connect_timeout = Duration::from_secs(5);
    let client = Client::connect(&url, opts.clone()).await.unwrap();
    assert!(client.set_hot_path_for_tests(true));
    client.inspect("warm").await.unwrap(); // the multiplexed connection only
    let lock = client.lock("bounded", LockOptions::lease(Duration::from_secs(30))).unwrap();
    server.pause();
    let t0 = Instant::now();
    let r = lock.try_acquire().await;
    let took = t0.elapsed();
    server.resume();
    assert_eq!(r.unwrap_err().kind(), ErrorKind::Timeout);
    assert!(took < opts.connect_timeout, "took {took:?}: the hot connect's own timeout");
}

// A hot connection that cannot open (its password was rotated) is tried again at most every
// half second, not on every call (a round trip and a refused AUTH each).
#[tokio::test]
async fn a_failed_hot_connect_is_not_retried_on_every_call() {
    let server = RedisServer::start_with(&["--requirepass", "old-pass"]);
    let url = format!("redis://:old-pass@127.0.0.1:{}", server.port());
    let client = Client::connect(&url, ClientOptions::default()).await.unwrap();
    assert!(client.set_hot_path_for_tests(true));
    client.inspect("warm").await.unwrap();
    let mut admin = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("CONFIG").arg("SET").arg("requirepass").arg("new-pass").query(&mut admin).unwrap();
    let mut refusals = || -> u64 {
        let info: String = redis::cmd("INFO").arg("stats").query(&mut admin).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_error_replies:"))
            .expect("field")
            .trim()
            .parse()
            .unwrap()
    };
    let before = refusals();
    let lock = client.lock("rotated", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let t0 = Instant::now();
    for _ in 0..20 {
        lock.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap();
    }
    let tries = refusals() - before;
    // The first EVALSHAs' NOSCRIPT, and one connect per half second.
    let allowed = 3 + (t0.elapsed().as_millis() / 500) as u64;
    assert!(tries >= 1, "control: the hot connection was never tried");
    assert!(tries <= allowed, "{tries} refused hot connects in {:?}", t0.elapsed());
}

// A request abandoned while only partly written (a huge name, the server stopped: the socket
// buffers fill) closes the hot connection: the next requests are not glued to its unfinished
// bytes (the server would read them as the rest of its argument).
#[tokio::test]
async fn a_partly_written_request_closes_the_hot_connection() {
    let server = RedisServer::start();
    let mut o = fast_opts();
    o.max_name_len = 64 << 20;
    let client = connect_with(&server, o).await;
    assert!(client.set_hot_path_for_tests(true));
    let small = client.lock("small", LockOptions::lease(Duration::from_secs(30))).unwrap();
    small.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap(); // opens it
    let huge = client.lock(vec![b'h'; 24 << 20], LockOptions::lease(Duration::from_secs(30))).unwrap();
    server.pause();
    let r = huge.try_acquire().await;
    server.resume();
    assert!(r.is_err(), "control: the huge acquire timed out");
    for _ in 0..5 {
        let g = small.acquire(Some(Duration::from_secs(2))).await.expect("acquire after the abandoned write");
        let info = client.inspect("small").await.unwrap().expect("held");
        assert_eq!(info.fence, g.fence());
        g.release().await.unwrap();
    }
}

// A release retried behind its first try on the hot connection learns from the first try's
// late reply that it freed the lock: with the fence counter gone (the other witness), it used
// to report LOST for a lock it had released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_release_learns_from_the_late_reply() {
    let server = RedisServer::start();
    let proxy = HoldProxy::start(&server, 1);
    let client = Client::connect(&proxy.url, fast_opts()).await.unwrap();
    assert!(client.set_hot_path_for_tests(true));
    let warm = client.lock("warm", LockOptions::lease(Duration::from_secs(30))).unwrap();
    warm.acquire(Some(Duration::ZERO)).await.unwrap().release().await.unwrap(); // scripts cached
    let lock = client.lock("late", LockOptions::lease(Duration::from_secs(30))).unwrap();
    let g = lock.acquire(Some(Duration::ZERO)).await.unwrap();
    let _: i64 = server.cmd(&["DEL", "ferrolock:{late}:fence"]);
    proxy.hold(true);
    let release = tokio::spawn(async move { g.release().await });
    tokio::time::sleep(Duration::from_millis(300)).await; // the first try timed out, the retry waits
    proxy.hold(false);
    let r = release.await.unwrap();
    assert_eq!(server.cmd::<i64>(&["EXISTS", "ferrolock:{late}"]), 0, "control: released");
    r.expect("the first try released the lock");
}
