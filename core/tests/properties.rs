//! Property-based bad input (../shared/RELIABILITY.md, "Bad input across every binding"), for the
//! core that every binding runs: whatever URL, options, lock name or lease a caller passes, the
//! answer is a typed error or a working client or lock; nothing panics; and a password written
//! into a URL never reaches an error's text or `Debug` output, whatever its characters and
//! however the rest of the URL is broken.
//!
//! The URL properties connect to closed loopback ports (refused at once) and name no host that
//! needs DNS; the name and lease property runs against one real `redis-server`.

mod common;

use std::future::Future;
use std::time::Duration;

use common::RedisServer;
use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions};
use proptest::prelude::*;
use proptest::sample::select;

/// A runner for a property written as a plain test (so that it can count its cases); a failure
/// prints the shrunk case, nothing is saved to a file.
fn runner(cases: u32) -> proptest::test_runner::TestRunner {
    proptest::test_runner::TestRunner::new(ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    })
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// A password: letters and digits mixed with URL delimiters, `%`, spaces and non-ASCII.
fn password() -> impl Strategy<Value = String> {
    let odd = select(vec![
        ':', '@', '/', '?', '#', '%', '+', '&', '=', ' ', '[', ']', '!', '$', '\'', '*', ',', ';',
    ]);
    let ch = prop_oneof![
        4 => proptest::char::range('a', 'z'),
        2 => proptest::char::range('0', '9'),
        2 => odd,
        1 => select(vec!['ö', '€', '😀', 'ß']),
    ];
    proptest::collection::vec(ch, 8..20).prop_map(|v| v.into_iter().collect())
}

/// Percent-encoding for the userinfo of a URL: everything but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A URL with a password in it, and every form of the passwords that must not be echoed.
#[derive(Clone, Debug)]
struct Case {
    url: String,
    secrets: Vec<String>,
}

impl Case {
    /// The secret `text` shows, if any.
    fn leak<'a>(&'a self, text: &str) -> Option<&'a str> {
        self.secrets.iter().map(String::as_str).find(|s| text.contains(s))
    }
}

fn url_case() -> impl Strategy<Value = Case> {
    // Mostly well-formed for the scheme, so that most cases reach a connect and its error, not
    // only the URL parser.
    let target = prop_oneof![
        // rediss:// is rarer: each TLS client loads the system's roots (≈ 0.7 s in a debug build).
        4 => Just(("redis", "")),
        2 => Just(("redis+sentinel", "/mymaster")),
        1 => Just(("rediss+sentinel", "/mymaster/2")),
        1 => Just(("redis+cluster", "")),
        2 => (
            select(vec!["REDIS", "redis+unix", "unix", "http", "redis", "rediss", "redis+sentinel", "redis+cluster"]),
            select(vec!["", "/", "/0", "/3", "/x", "/mymaster", "/mymaster/x", "/99999999999", "/%"]),
        ),
    ];
    let user = select(vec!["", "alice"]);
    // No host that needs DNS; "localhost" is /etc/hosts. Never the default port (a real server may
    // listen there): every port is closed, out of range or not a number.
    let host = prop_oneof![
        4 => Just("127.0.0.1"),
        1 => select(vec!["[::1]", "localhost", "", "[::1", "bad host", "127.0.0.1:1,127.0.0.2"]),
    ];
    let port = prop_oneof![4 => Just(":1"), 1 => select(vec![":0", ":99999", ":x", ":65536", ":1:2"])];
    let query = prop_oneof![3 => Just(""), 1 => select(vec!["pw", "user+pw", "other", "twice"])];
    (target, user, password(), host, port, query, password()).prop_map(
        |((scheme, path), user, pw, host, port, query, pw2)| {
            let form = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let query = match query {
                "pw" => format!("?sentinel_password={}", form(&pw2)),
                "user+pw" => format!("?sentinel_username=u&sentinel_password={}", form(&pw2)),
                "other" => format!("?protocol={}", form(&pw2)),
                "twice" => format!("?sentinel_password={0}&sentinel_password={0}", form(&pw2)),
                _ => String::new(),
            };
            let url = format!("{scheme}://{user}:{}@{host}{port}{path}{query}", encode(&pw));
            let mut secrets = vec![pw.clone(), encode(&pw)];
            if !query.is_empty() {
                secrets.extend([pw2.clone(), form(&pw2), encode(&pw2)]);
            }
            Case { url, secrets }
        },
    )
}

fn short_timeouts() -> ClientOptions {
    let mut o = ClientOptions::default();
    o.connect_timeout = Duration::from_millis(500);
    o.response_timeout = Duration::from_millis(500);
    o
}

/// Every way a connect with `case`'s URL can end, as text: `Display` and `Debug` of the error,
/// or `Debug` of the client (its address) when it connected.
fn outcomes(case: &Case) -> Vec<(String, Option<ErrorKind>)> {
    let said = |r: ferrolock::Result<Client>| match r {
        Ok(c) => (format!("{c:?}"), None),
        Err(e) => (format!("{e} | {e:?} | {}", e.message()), Some(e.kind())),
    };
    // Side by side: a refused connect takes its retries (≈ 0.25 s).
    let (one, quorum) = block_on(async {
        tokio::join!(
            Client::connect(&case.url, short_timeouts()),
            Client::connect_redlock([case.url.as_str()], short_timeouts())
        )
    });
    vec![said(one), said(quorum)]
}

/// Any URL: a typed error (or a client), and no form of a password in what is said.
#[test]
fn a_url_never_echoes_its_password() {
    let mut runner = runner(150);
    let connected = std::cell::Cell::new(0);
    runner
        .run(&url_case(), |case| {
            for (text, kind) in outcomes(&case) {
                prop_assert_eq!(case.leak(&text), None, "{} -> {}", case.url, text);
                match kind {
                    Some(ErrorKind::InvalidUrl | ErrorKind::InvalidConfig) => {}
                    Some(
                        ErrorKind::Connection
                        | ErrorKind::Timeout
                        | ErrorKind::Tls
                        | ErrorKind::Auth
                        | ErrorKind::QuorumNotReached,
                    )
                    | None => connected.set(connected.get() + 1),
                    Some(k) => prop_assert!(false, "{} -> {:?}: {}", case.url, k, text),
                }
            }
            Ok(())
        })
        .unwrap();
    // Control: most cases get past the parser, to a connect and its error text.
    assert!(connected.get() >= 60, "only {} of 300 connects got past the URL parser", connected.get());
}

proptest! {
    /// Control: the check above finds a password in any text that quotes the URL (percent-encoded
    /// as written there) or the password itself, so it would catch an error that echoed either.
    #[test]
    fn control_quoting_the_url_is_caught(case in url_case()) {
        let (quoted, decoded) = (format!("cannot parse {}", case.url), format!("WRONGPASS for {}", case.secrets[0]));
        prop_assert!(case.leak(&quoted).is_some(), "{}", quoted);
        prop_assert!(case.leak(&decoded).is_some(), "{}", decoded);
    }
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        select(vec![
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_millis(1),
            Duration::from_millis(2),
            Duration::from_millis(3),
            Duration::from_secs(1),
            Duration::from_secs(365 * 24 * 3600),
            Duration::from_secs(365 * 24 * 3600) + Duration::from_nanos(1),
            Duration::from_secs(u64::MAX / 1000),
            Duration::MAX,
        ]),
        (0u64..100_000_000_000).prop_map(Duration::from_micros),
    ]
}

/// Timeouts: out of range, or long enough for a loaded machine (a valid 1 ns timeout is a
/// timeout, not bad input).
fn timeout() -> impl Strategy<Value = Duration> {
    select(vec![
        Duration::ZERO,
        Duration::from_millis(300),
        Duration::from_secs(2),
        Duration::from_secs(365 * 24 * 3600),
        Duration::from_secs(365 * 24 * 3600) + Duration::from_nanos(1),
        Duration::MAX,
    ])
}

/// `s`'s value one time in four; `None` (the default stays) otherwise, so that a case with
/// several options set still has a fair chance of being valid as a whole.
fn sometimes<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    prop_oneof![3 => Just(None), 1 => s.prop_map(Some)].boxed()
}

fn client_options() -> impl Strategy<Value = ClientOptions> {
    (
        (sometimes(timeout()), sometimes(timeout()), sometimes(duration()), sometimes(duration())),
        (sometimes(duration()), sometimes(duration()), sometimes(duration()), sometimes(duration())),
        sometimes(select(vec![f64::NAN, f64::INFINITY, -0.1, 0.0, 0.01, 0.49, 0.5, 1.0])),
        sometimes(select(vec!["", "a:", "{x}:", "x}", "ü:", "\0"])),
        (
            sometimes(select(vec![0usize, 1, 64 * 1024, usize::MAX])),
            sometimes(select(vec![0u32, 1, 1024, u32::MAX])),
        ),
        sometimes(select(vec![None, Some(0usize), Some(1), Some(2), Some(3), Some(usize::MAX)])),
        sometimes(select(vec![0usize, 1, 64, usize::MAX])),
    )
        .prop_map(|((ct, rt, dm, wt), (fr, sl, nt, rj), drift, prefix, (mn, mr), quorum, inflight)| {
            let mut o = ClientOptions::default();
            let set = |slot: &mut Duration, v: Option<Duration>| *slot = v.unwrap_or(*slot);
            set(&mut o.connect_timeout, ct);
            set(&mut o.response_timeout, rt);
            set(&mut o.drift_min, dm);
            set(&mut o.watchdog_ttl, wt);
            set(&mut o.fence_retention, fr);
            set(&mut o.subscription_linger, sl);
            set(&mut o.redlock_node_timeout, nt);
            set(&mut o.redlock_retry_jitter, rj);
            o.drift_factor = drift.unwrap_or(o.drift_factor);
            o.prefix = prefix.map_or(o.prefix, str::to_owned);
            o.max_name_len = mn.unwrap_or(o.max_name_len);
            o.max_reentrancy = mr.unwrap_or(o.max_reentrancy);
            o.redlock_quorum = quorum.unwrap_or(o.redlock_quorum);
            o.redlock_max_inflight = inflight.unwrap_or(o.redlock_max_inflight);
            o
        })
}

/// Any client options: rejected with a typed error before any I/O, or they work end to end (a
/// connect, a renewed lock taken and released on a real server; Redlock: the masters' refusal).
#[test]
fn any_client_options_are_refused_or_work() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut runner = runner(100);
    let worked = std::cell::Cell::new(0);
    runner
        .run(&client_options(), |opts| {
            let typed = |e: &ferrolock::Error| {
                matches!(e.kind(), ErrorKind::InvalidConfig | ErrorKind::InvalidDuration)
            };
            rt.block_on(async {
                let masters = ["redis://127.0.0.1:1", "redis://127.0.0.2:1", "redis://127.0.0.3:1"];
                // Side by side: refused masters take their connect retries (≈ 0.25 s).
                let quorum = tokio::spawn(Client::connect_redlock(masters, opts.clone()));
                match Client::connect(&server.url(), opts.clone()).await {
                    Err(e) => prop_assert!(typed(&e), "{:?} -> {}", opts, e),
                    Ok(client) => {
                        let fail = |e: ferrolock::Error| TestCaseError::fail(format!("{opts:?}: {e}"));
                        let lock = client.lock("o", LockOptions::default()).map_err(fail)?;
                        let g = lock.acquire(Some(Duration::from_secs(5))).await.map_err(fail)?;
                        match g.release().await {
                            // A lease of a few milliseconds may run out before its release.
                            Err(e)
                                if e.kind() == ErrorKind::Lost
                                    && opts.watchdog_ttl < Duration::from_secs(1) => {}
                            r => r.map_err(fail)?,
                        }
                        client.close();
                        worked.set(worked.get() + 1);
                    }
                }
                let e = quorum.await.unwrap().expect_err("nothing listens on port 1");
                prop_assert!(typed(&e) || e.kind() == ErrorKind::QuorumNotReached, "{:?} -> {}", opts, e);
                Ok(())
            })
        })
        .unwrap();
    // Control: the strategy reaches the server, not only the option checks.
    assert!(worked.get() >= 10, "only {} option sets were used", worked.get());
}

/// Any name (bytes) and lease the API accepts can be locked, inspected and released on a real
/// server; every other one is refused with a typed error.
#[test]
fn any_accepted_name_and_lease_locks_and_releases() {
    let server = RedisServer::start();
    let names = proptest::collection::vec(
        prop_oneof![
            3 => any::<u8>(),
            2 => select(b"{}:*?[]\\\0 \r\n".to_vec()),
        ],
        0..40,
    );
    let lease = prop_oneof![duration().prop_map(Some), Just(None)];
    let strategy = (names, lease, any::<Option<bool>>(), any::<bool>());
    let mut runner = runner(120);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let client = rt.block_on(Client::connect(&server.url(), ClientOptions::default())).unwrap();
    let locked = std::cell::Cell::new(0);
    runner
        .run(&strategy, |(name, ttl, renew, fair)| {
            let mut opts = LockOptions::default();
            (opts.ttl, opts.renew, opts.fair) = (ttl, renew, fair);
            let lock = match client.lock(&name, opts) {
                Ok(l) => l,
                Err(e) => {
                    prop_assert!(
                        matches!(
                            e.kind(),
                            ErrorKind::InvalidName | ErrorKind::InvalidDuration | ErrorKind::InvalidConfig
                        ),
                        "{:?} {:?} -> {}",
                        name,
                        opts,
                        e
                    );
                    prop_assert!(!name.is_empty() || e.kind() == ErrorKind::InvalidName);
                    return Ok(());
                }
            };
            prop_assert!(!name.is_empty());
            rt.block_on(async {
                let g = lock
                    .try_acquire()
                    .await
                    .map_err(|e| TestCaseError::fail(format!("{name:?} {opts:?}: {e}")))?;
                let g = g.ok_or_else(|| TestCaseError::fail(format!("{name:?} is held by someone")))?;
                let info = client.inspect(&name).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
                let info =
                    info.ok_or_else(|| TestCaseError::fail(format!("{name:?}: no hold to inspect")))?;
                prop_assert_eq!(info.fence, g.fence());
                g.release().await.map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(
                    client.inspect(&name).await.map_err(|e| TestCaseError::fail(e.to_string()))?.is_none()
                );
                Ok(())
            })?;
            locked.set(locked.get() + 1);
            Ok(())
        })
        .unwrap();
    // Control: the strategy reaches the server, not only the argument checks.
    assert!(locked.get() >= 20, "only {} cases were locked", locked.get());
}

/// One step of the lock state machine below.
#[derive(Clone, Debug)]
enum Op {
    /// `try_acquire` by owner `o` (0 and 1: two handles of one client; 2: a handle of another).
    Try(usize),
    /// `acquire` with a 10 ms wait: granted at once, or (held by another) `ACQUIRE_TIMEOUT`.
    Wait(usize),
    /// Release the `k`-th guard (mod their number) owner `o` ever got: live, released or stale.
    Release(usize, usize),
    /// Extend that guard.
    Extend(usize, usize),
    /// An administrator's `force_unlock`: the holder's guards go stale.
    Force,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3usize).prop_map(Op::Try),
        1 => (0..3usize).prop_map(Op::Wait),
        4 => (0..3usize, 0..8usize).prop_map(|(o, k)| Op::Release(o, k)),
        1 => (0..3usize, 0..8usize).prop_map(|(o, k)| Op::Extend(o, k)),
        1 => Just(Op::Force),
    ]
}

/// What each guard is to the model.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Level {
    Live,
    Released,
    /// Its hold was force-unlocked (or superseded by a later grant to the same handle).
    Stale,
}

/// Any sequence of tries, releases in any order, extensions and forced unlocks by three owners
/// (two handles of one client, one of another) leaves the server exactly where a model of the
/// protocol says: who holds, how deep, with which fence; fences grow with every fresh grant; a
/// released or stale guard changes nothing. Checked after every step with `inspect`.
#[test]
fn the_lock_state_machine_matches_its_model() {
    single_server_model(200, false);
}

/// The same in fair mode, where a wait that ends must also leave the server's queue: after
/// every step the queue and the waiter table are empty (a stale entry would be handed the lock
/// for an offer nobody takes).
#[test]
fn the_fair_lock_state_machine_matches_its_model() {
    single_server_model(100, true);
}

/// [`matches_the_model`] on one server, with two clients of it.
fn single_server_model(cases: u32, fair: bool) {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let url = server.url();
    let connect = || Client::connect(&url, ClientOptions::default());
    let (c1, c2) = rt.block_on(async { (connect().await.unwrap(), connect().await.unwrap()) });
    matches_the_model(&rt, &c1, &c2, cases, Setup { lagging_depth: false, fair: fair.then_some(&server) });
}

/// The same over Redlock (three masters), with one difference the design allows: a master that
/// falls behind (two requests answered late, docs/REDLOCK.md) gets no re-entry rounds and keeps
/// a smaller depth until the next release sets every master's count, so `inspect` (the least
/// depth of a quorum) may read less than the handle's depth, never more and never zero.
#[test]
fn the_redlock_state_machine_matches_its_model() {
    let servers = [RedisServer::start(), RedisServer::start(), RedisServer::start()];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // Not a test of timeouts: a loaded machine must not turn a round into QUORUM_NOT_REACHED.
    let mut opts = ClientOptions::default();
    opts.redlock_node_timeout = Duration::from_secs(2);
    let connect = || Client::connect_redlock(&urls, opts.clone());
    let (c1, c2) = rt.block_on(async { (connect().await.unwrap(), connect().await.unwrap()) });
    matches_the_model(&rt, &c1, &c2, 100, Setup { lagging_depth: true, fair: None });
}

/// What differs between the backends of [`matches_the_model`].
struct Setup<'a> {
    /// Redlock: `inspect` may read a depth below the handle's (see the Redlock test).
    lagging_depth: bool,
    /// Fair mode, on this server: its queue keys are checked too.
    fair: Option<&'a RedisServer>,
}

fn matches_the_model(rt: &tokio::runtime::Runtime, c1: &Client, c2: &Client, cases: u32, setup: Setup<'_>) {
    let Setup { lagging_depth, fair } = setup;
    let seq = std::cell::Cell::new(0u32);
    let (steps, reentries, stale_calls) =
        (std::cell::Cell::new(0), std::cell::Cell::new(0), std::cell::Cell::new(0));
    // Calls through a stale level while the same handle holds the lock again: the case where a
    // release by token alone would delete the new hold.
    let stale_over_new = std::cell::Cell::new(0);
    // Waits that ended unanswered (fair mode: after joining the queue).
    let timeouts = std::cell::Cell::new(0);
    runner(cases)
        .run(&proptest::collection::vec(op(), 1..30), |ops| {
            seq.set(seq.get() + 1);
            let name = format!("model-{}", seq.get());
            let opts = LockOptions::lease(Duration::from_secs(60)).with_fair(fair.is_some());
            let locks =
                [c1.lock(&name, opts).unwrap(), c1.lock(&name, opts).unwrap(), c2.lock(&name, opts).unwrap()];
            let mut guards: [Vec<(ferrolock::Guard, Level)>; 3] = Default::default();
            // The model: the holder and its depth, the hold's fence, the highest fence granted.
            let (mut holder, mut depth, mut fence, mut top) = (None::<usize>, 0u32, 0u64, 0u64);
            let fail = |what: String| TestCaseError::fail(what);
            rt.block_on(async {
                for (i, op) in ops.iter().enumerate() {
                    steps.set(steps.get() + 1);
                    let at = format!("step {i} {op:?}");
                    match *op {
                        Op::Try(o) | Op::Wait(o) => {
                            let expect = holder.is_none() || holder == Some(o);
                            let g = if matches!(op, Op::Wait(_)) {
                                match locks[o].acquire(Some(Duration::from_millis(10))).await {
                                    Ok(g) => Some(g),
                                    Err(e) if e.kind() == ErrorKind::AcquireTimeout && !expect => {
                                        timeouts.set(timeouts.get() + 1);
                                        None
                                    }
                                    Err(e) => return Err(fail(format!("{at}: {e}"))),
                                }
                            } else {
                                locks[o].try_acquire().await.map_err(|e| fail(format!("{at}: {e}")))?
                            };
                            prop_assert_eq!(g.is_some(), expect, "{}: granted?", at);
                            if let Some(g) = g {
                                if holder == Some(o) {
                                    prop_assert_eq!(g.fence(), fence, "{}: a re-entry keeps the fence", at);
                                    depth += 1;
                                    reentries.set(reentries.get() + 1);
                                } else {
                                    prop_assert!(
                                        g.fence() > top,
                                        "{}: fence {} after {}",
                                        at,
                                        g.fence(),
                                        top
                                    );
                                    (holder, depth, fence, top) = (Some(o), 1, g.fence(), g.fence());
                                    // Levels of this handle's earlier, forced-out hold are stale.
                                    for l in guards[o].iter_mut().filter(|(_, l)| *l == Level::Live) {
                                        l.1 = Level::Stale;
                                    }
                                }
                                prop_assert_eq!(g.count(), depth, "{}: the guard's depth", at);
                                guards[o].push((g, Level::Live));
                            }
                        }
                        Op::Release(o, k) | Op::Extend(o, k) => {
                            if guards[o].is_empty() {
                                continue;
                            }
                            let n = guards[o].len();
                            let (g, level) = &mut guards[o][k % n];
                            let extend = matches!(op, Op::Extend(..));
                            let r = if extend {
                                g.extend(Duration::from_secs(60)).await
                            } else {
                                g.release().await
                            };
                            match *level {
                                Level::Live => {
                                    r.map_err(|e| fail(format!("{at}: a live level: {e}")))?;
                                    if !extend {
                                        *level = Level::Released;
                                        depth -= 1;
                                        if depth == 0 {
                                            holder = None;
                                        }
                                    }
                                }
                                Level::Released if !extend => {
                                    let e = r.err().ok_or_else(|| fail(format!("{at}: released twice")))?;
                                    prop_assert_eq!(e.kind(), ErrorKind::NotHeld, "{}: {}", at, e);
                                }
                                Level::Stale | Level::Released => {
                                    stale_calls.set(stale_calls.get() + u32::from(*level == Level::Stale));
                                    let over_new = *level == Level::Stale && holder == Some(o);
                                    stale_over_new.set(stale_over_new.get() + u32::from(over_new));
                                    let e = r
                                        .err()
                                        .ok_or_else(|| fail(format!("{at}: a {level:?} level worked")))?;
                                    prop_assert!(
                                        matches!(e.kind(), ErrorKind::Lost | ErrorKind::NotHeld),
                                        "{}: {}",
                                        at,
                                        e
                                    );
                                }
                            }
                        }
                        Op::Force => {
                            c1.force_unlock(&name).await.map_err(|e| fail(format!("{at}: {e}")))?;
                            if let Some(h) = holder.take() {
                                for l in guards[h].iter_mut().filter(|(_, l)| *l == Level::Live) {
                                    l.1 = Level::Stale;
                                }
                            }
                            depth = 0;
                        }
                    }
                    // The server agrees with the model after every step.
                    let info = c2.inspect(&name).await.map_err(|e| fail(format!("{at}: inspect: {e}")))?;
                    match (holder, info) {
                        (None, None) => {}
                        (Some(_), Some(info)) if lagging_depth => {
                            prop_assert_eq!(info.fence, fence, "{}: the hold's fence", at);
                            prop_assert!(
                                (1..=depth).contains(&info.count),
                                "{}: depth {} for {}",
                                at,
                                info.count,
                                depth
                            );
                        }
                        (Some(_), Some(info)) => {
                            prop_assert_eq!(
                                (info.count, info.fence),
                                (depth, fence),
                                "{}: the server's hold",
                                at
                            );
                        }
                        (h, info) => prop_assert!(false, "{}: model holder {:?}, server {:?}", at, h, info),
                    }
                    if let Some(server) = fair {
                        let key = |suffix: &str| format!("ferrolock:{{{name}}}:{suffix}");
                        let queued: (i64, i64) =
                            (server.cmd(&["LLEN", &key("queue")]), server.cmd(&["HLEN", &key("waiters")]));
                        prop_assert_eq!(queued, (0, 0), "{}: waiters left in the queue", at);
                    }
                }
                Ok(())
            })
        })
        .unwrap();
    // Control: the sequences reach re-entries and stale guards, not only single grants.
    let seen = (steps.get(), reentries.get(), stale_calls.get(), stale_over_new.get(), timeouts.get());
    assert!(
        seen.0 > 250 && seen.1 > 10 && seen.2 > 3 && seen.3 > 0 && seen.4 > 10,
        "steps, re-entries, stale calls, over a new hold, waits timed out: {seen:?}"
    );
}
