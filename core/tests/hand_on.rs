//! Hand-on (notify.rs): a full release by a client whose own handles wait on the lock wakes the
//! next of them at once, so that its try goes out right behind the release instead of a round
//! trip after the release's message. Real redis-server processes; the server is SIGSTOPped so
//! that what the client put on the wire can be read from the server's unread socket bytes.

mod common;

use std::time::{Duration, Instant};

use common::*;
use ferrolock::{Client, LockOptions};

/// Bytes the server has not read yet, over all its client sockets (`/proc/net/tcp`).
fn unread_bytes(port: u16) -> u64 {
    let port = format!("{port:04X}");
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit(':').next()?;
            let established = f.get(3)? == &"01";
            let rx = u64::from_str_radix(f.get(4)?.split(':').nth(1)?, 16).ok()?;
            (local_port == port && established).then_some(rx)
        })
        .sum()
}

/// The unread bytes once they have stopped growing for 200 ms (at most 3 s).
fn settled_unread_bytes(port: u16) -> u64 {
    let start = Instant::now();
    let (mut last, mut since) = (unread_bytes(port), Instant::now());
    while since.elapsed() < Duration::from_millis(200) && start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(10));
        let now = unread_bytes(port);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last
}

/// Evalsha calls reach `n` (the waiter has tried, subscribed and tried again).
async fn evalsha_reach(server: &RedisServer, n: u64) {
    let start = Instant::now();
    while evalsha_calls(server) < n {
        assert!(start.elapsed() < Duration::from_secs(5), "the waiter did not start waiting");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `holder` holds `name`; a handle of `waiter_client` waits for it. With the server stopped,
/// `holder` releases: returns the bytes on the wire to the server then, and checks that the
/// waiter gets the lock once the server runs again.
async fn release_while_stopped(
    server: &RedisServer,
    holder: &Client,
    waiter_client: &Client,
    name: &str,
) -> u64 {
    let lease = LockOptions::lease(Duration::from_secs(30));
    let evalsha = evalsha_calls(server);
    let g = holder.lock(name, lease).unwrap().acquire(Some(Duration::ZERO)).await.unwrap();
    let waiter = waiter_client.lock(name, lease).unwrap();
    let w = tokio::spawn(async move { waiter.acquire(Some(Duration::from_secs(20))).await });
    evalsha_reach(server, evalsha + 3).await; // holder's acquire; the waiter's try, and again
    server.pause();
    let port = server.port();
    assert_eq!(unread_bytes(port), 0);
    let r = tokio::spawn(async move { g.release().await });
    let on_the_wire = tokio::task::spawn_blocking(move || settled_unread_bytes(port)).await.unwrap();
    server.resume();
    r.await.unwrap().unwrap();
    // Well before the 30 s lease that bounds a waiter whose wake-up was lost.
    let got = tokio::time::timeout(Duration::from_secs(5), w).await.expect("waiter woken").unwrap().unwrap();
    got.release().await.unwrap();
    on_the_wire
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_puts_the_next_waiter_of_its_client_on_the_wire_behind_it() {
    let server = RedisServer::start();
    let a = connect(&server).await;
    let b = connect(&server).await;
    // Control first: the waiter is another client's, so nothing but the release goes out
    // until the server runs again and publishes the release.
    let alone = release_while_stopped(&server, &a, &b, "h1").await;
    // The same with the waiter in the holder's client: its try follows the release.
    let handed = release_while_stopped(&server, &a, &a, "h2").await;
    eprintln!("bytes on the wire while the server was stopped: release alone {alone}, with hand-on {handed}");
    assert!(alone > 0, "control: the release itself was not seen");
    // A try (EVALSHA of the acquire script with two keys, a token and four numbers) is over
    // 150 bytes; the release is the same size in both runs (same name length).
    assert!(handed >= alone + 150, "the waiter's try did not follow the release: {alone} -> {handed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_retried_as_eval_still_wakes_the_waiter() {
    // The early wake follows the first request (EVALSHA, refused: NOSCRIPT); the hold is
    // deleted by the retry (EVAL). The woken waiter's try ran before that and found the lock
    // held, so the release's message must still wake it (a lost wake-up waits out the lease).
    let server = RedisServer::start();
    let a = connect(&server).await;
    let lease = LockOptions::lease(Duration::from_secs(30));
    for round in 0..3 {
        let g = a.lock("ns", lease).unwrap().acquire(Some(Duration::ZERO)).await.unwrap();
        let waiter = a.lock("ns", lease).unwrap();
        let evalsha = evalsha_calls(&server);
        let w = tokio::spawn(async move { waiter.acquire(Some(Duration::from_secs(20))).await });
        // Tried (and, the first time, subscribed and tried again): it waits from its last try on.
        evalsha_reach(&server, evalsha + if round == 0 { 2 } else { 1 }).await;
        let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
        g.release().await.unwrap();
        let got =
            tokio::time::timeout(Duration::from_secs(5), w).await.expect("waiter woken").unwrap().unwrap();
        got.release().await.unwrap();
    }
}
