//! An ACL user with exactly the rule set of docs/SECURITY.md can do everything a lock does
//! (contend, wait by notification, renew, reload flushed scripts, release, inspect, force-unlock);
//! the same user without one of those permissions gets a prompt `Permission` error that names the
//! command, not a hang or a retry loop. Passwords never show.

mod common;

use std::time::{Duration, Instant};

use common::RedisServer;
use ferrolock::{Client, ClientOptions, ErrorKind, LockOptions, LockState, ReplicaAcks};

const PASSWORD: &str = "acl-s3ntinel-pw";

/// The rule set documented in docs/SECURITY.md for the default prefix `ferrolock:`.
const RULES: &[&str] = &[
    "resetkeys",
    "~ferrolock:*",
    "resetchannels",
    "&ferrolock:*",
    "-@all",
    "+hello",
    "+ping",
    "+evalsha",
    "+eval",
    "+script|load",
    "+subscribe",
    "+unsubscribe",
    "+get",
    "+set",
    "+del",
    "+hget",
    "+hmget",
    "+hset",
    "+hincrby",
    "+pexpire",
    "+pttl",
    "+publish",
    "+time",
];

fn make_user(server: &RedisServer, name: &str, without: Option<&str>) {
    make_user_with(server, name, without, &[]);
}

/// The rule set minus `without`, plus `extra` (the additions docs/SECURITY.md lists per topology).
fn make_user_with(server: &RedisServer, name: &str, without: Option<&str>, extra: &[&str]) {
    let pass = format!(">{PASSWORD}");
    let mut args = vec!["ACL", "SETUSER", name, "reset", "on", pass.as_str()];
    args.extend(RULES.iter().copied().filter(|r| Some(*r) != without));
    args.extend(extra.iter().copied().filter(|r| Some(*r) != without));
    let _: String = server.cmd(&args);
}

fn url(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:{PASSWORD}@127.0.0.1:{}", server.port())
}

fn no_secret(e: &ferrolock::Error) {
    for text in [e.to_string(), format!("{e:?}")] {
        assert!(!text.contains(PASSWORD), "password in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rule_set_is_enough() {
    let server = RedisServer::start();
    make_user(&server, "locker", None);
    let mut o = ClientOptions::default();
    o.watchdog_ttl = Duration::from_millis(300);
    let a = Client::connect(&url(&server, "locker"), o.clone()).await.expect("connect as locker");
    let b = Client::connect(&url(&server, "locker"), o).await.expect("connect as locker");

    let la = a.lock("acl", LockOptions::default()).unwrap();
    let held = la.acquire(None).await.unwrap();
    let inner = la.acquire(None).await.unwrap();
    assert_eq!(inner.count(), 2, "re-entry");
    // A waiter subscribes and is woken by the release message.
    let lb = b.lock("acl", LockOptions::lease(Duration::from_secs(5))).unwrap();
    let waiter =
        tokio::spawn(async move { lb.acquire(Some(Duration::from_secs(10))).await.map(|g| g.fence()) });
    tokio::time::sleep(Duration::from_millis(1000)).await; // three watchdog renewals
    assert_eq!(held.state(), LockState::Held);
    let _: String = server.cmd(&["SCRIPT", "FLUSH"]);
    held.extend(Duration::from_secs(2)).await.expect("extend after SCRIPT FLUSH");
    inner.release().await.unwrap();
    held.release().await.unwrap();
    let fence = waiter.await.unwrap().expect("waiter acquires");
    assert!(fence > held.fence());
    let info = a.inspect("acl").await.unwrap().expect("held by the waiter");
    assert_eq!(info.fence, fence);
    assert!(a.force_unlock("acl").await.unwrap().is_some());
    assert_eq!(a.last_fence("acl").await.unwrap(), Some(fence));
}

#[tokio::test]
async fn a_missing_permission_names_the_command_promptly() {
    let server = RedisServer::start();
    // Control for the test above: each of these permissions is needed, and its absence shows.
    for (missing, step) in [("+evalsha", "acquire"), ("+publish", "release"), ("+pexpire", "acquire")] {
        let user = format!("no-{}", &missing[1..]);
        make_user(&server, &user, Some(missing));
        let client = Client::connect(&url(&server, &user), ClientOptions::default()).await.expect("connect");
        let lock =
            client.lock(format!("perm-{missing}"), LockOptions::lease(Duration::from_secs(5))).unwrap();
        let started = Instant::now();
        let result = match step {
            "acquire" => lock.acquire(Some(Duration::from_secs(5))).await.map(|_| ()),
            _ => {
                let held = lock.acquire(None).await.expect("acquire");
                held.release().await
            }
        };
        let e = result.expect_err("must fail without the permission");
        assert_eq!(e.kind(), ErrorKind::Permission, "{missing}: {e}");
        assert!(
            e.message().to_lowercase().contains(&missing[1..].to_lowercase()),
            "{missing} not named in: {e}"
        );
        assert!(started.elapsed() < Duration::from_secs(2), "{missing}: no retry loop");
        no_secret(&e);
    }
    // A wrong password: an authentication error that does not echo it.
    let bad = format!("redis://locker:wrong-{PASSWORD}@127.0.0.1:{}", server.port());
    let e = Client::connect(&bad, ClientOptions::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    no_secret(&e);
}

/// Fair mode's scripts also keep the waiter queue and table: docs/SECURITY.md's fair-mode addition
/// is enough (a waiter is handed the lock by the release), and without one of its commands the
/// operation fails promptly with `Permission` naming it.
const FAIR: &[&str] = &["+rpush", "+lpop", "+lrem", "+hdel", "+hexists"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_mode_needs_its_addition() {
    let server = RedisServer::start();
    make_user_with(&server, "fair", None, FAIR);
    let fair = || LockOptions::lease(Duration::from_secs(5)).with_fair(true);
    let a = Client::connect(&url(&server, "fair"), ClientOptions::default()).await.expect("connect");
    let b = Client::connect(&url(&server, "fair"), ClientOptions::default()).await.expect("connect");
    let held = a.lock("fair-acl", fair()).unwrap().acquire(None).await.unwrap();
    let lb = b.lock("fair-acl", fair()).unwrap();
    let waiter = tokio::spawn(async move {
        let g = lb.acquire(Some(Duration::from_secs(5))).await?;
        g.release().await.map(|()| g.fence())
    });
    tokio::time::sleep(Duration::from_millis(200)).await; // queued
    held.release().await.expect("release hands on");
    assert!(waiter.await.unwrap().expect("the queued waiter gets the lock") > held.fence());

    // Controls: the rule set without the addition's queue commands.
    for (missing, step) in [("+hexists", "wait"), ("+lpop", "release")] {
        let user = format!("fair-no-{}", &missing[1..]);
        make_user_with(&server, &user, Some(missing), FAIR);
        let c = Client::connect(&url(&server, &user), ClientOptions::default()).await.expect("connect");
        let name = format!("fair-{missing}");
        let started = Instant::now();
        let e = match step {
            "wait" => {
                let _held = a.lock(&name, fair()).unwrap().acquire(None).await.unwrap();
                c.lock(&name, fair()).unwrap().acquire(Some(Duration::from_secs(5))).await.map(|_| ())
            }
            _ => c.lock(&name, fair()).unwrap().acquire(None).await.unwrap().release().await,
        }
        .expect_err("must fail without the permission");
        assert_eq!(e.kind(), ErrorKind::Permission, "{missing}: {e}");
        assert!(e.message().to_lowercase().contains(&missing[1..]), "{missing} not named in: {e}");
        assert!(started.elapsed() < Duration::from_secs(2), "{missing}: no retry loop");
    }
}

/// Take and release `name` through `client`: the whole cycle, or the first error.
async fn cycle(client: &Client, name: &str) -> ferrolock::Result<()> {
    let lock = client.lock(name, LockOptions::lease(Duration::from_secs(5)))?;
    let g = lock.acquire(Some(Duration::from_secs(2))).await?;
    g.release().await
}

// The topology additions of docs/SECURITY.md: `+wait` with `replica_acks` (its absence is a prompt
// `Permission` error naming WAIT, with no hold left behind), and `+role` through Sentinel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topology_additions_are_enough_and_needed() {
    let master = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&master, &[]);
    make_user_with(&master, "acker", None, &["+wait", "+role"]);
    make_user_with(&master, "no-wait", Some("+wait"), &["+wait", "+role"]);
    make_user_with(&master, "no-role", Some("+role"), &["+wait", "+role"]);
    let mut acks = ClientOptions::default();
    acks.replica_acks = Some(ReplicaAcks::new(1, Duration::from_millis(500)));

    let ok = Client::connect(&url(&master, "acker"), acks.clone()).await.expect("connect");
    cycle(&ok, "acked").await.expect("the rule set plus +wait is enough for replica_acks");
    let denied = Client::connect(&url(&master, "no-wait"), acks).await.expect("connect");
    let started = Instant::now();
    let e = cycle(&denied, "acked").await.expect_err("replica_acks without +wait");
    assert_eq!(e.kind(), ErrorKind::Permission, "{e}");
    assert!(e.message().to_lowercase().contains("wait"), "WAIT not named in: {e}");
    assert!(started.elapsed() < Duration::from_secs(2), "no retry loop");
    no_secret(&e);
    let held: i64 = master.cmd(&["EXISTS", "ferrolock:{acked}"]);
    assert_eq!(held, 0, "the unacknowledged grant must be undone");

    // Through Sentinel: the client asks each master it is sent to for its ROLE.
    let sentinel = RedisServer::start_sentinel(&master, "acl-master", 1);
    let via =
        |user: &str| format!("redis+sentinel://{user}:{PASSWORD}@127.0.0.1:{}/acl-master", sentinel.port());
    let ok = Client::connect(&via("acker"), ClientOptions::default()).await.expect("connect via sentinel");
    cycle(&ok, "via-sentinel").await.expect("the rule set plus +role is enough through Sentinel");
    let denied = match Client::connect(&via("no-role"), ClientOptions::default()).await {
        Err(e) => e,
        Ok(c) => cycle(&c, "via-sentinel").await.expect_err("Sentinel without +role"),
    };
    assert_eq!(denied.kind(), ErrorKind::Permission, "{denied}");
    assert!(denied.message().to_lowercase().contains("role"), "ROLE not named in: {denied}");
    no_secret(&denied);
}

// A database other than 0 in the URL: every connection sends SELECT, so the rule set needs
// `+select` (docs/SECURITY.md). Without it connecting fails with `Permission` naming SELECT (the
// driver reports that refusal without its NOPERM code; it read `Script` before).
#[tokio::test]
async fn a_database_number_needs_select() {
    let server = RedisServer::start();
    make_user_with(&server, "selector", None, &["+select"]);
    make_user(&server, "no-select", None);
    let in_db2 = |user: &str| format!("{}/2", url(&server, user));
    let ok = Client::connect(&in_db2("selector"), ClientOptions::default()).await.expect("connect to db 2");
    cycle(&ok, "db2").await.expect("the rule set plus +select is enough in db 2");
    let fence_in = |db: u8| {
        let c = redis::Client::open(format!("redis://127.0.0.1:{}/{db}", server.port())).unwrap();
        let n: i64 = redis::cmd("EXISTS")
            .arg("ferrolock:{db2}:fence")
            .query(&mut c.get_connection().unwrap())
            .unwrap();
        n
    };
    assert_eq!((fence_in(2), fence_in(0)), (1, 0), "the lock lived in db 2, not db 0");
    let started = Instant::now();
    let e = match Client::connect(&in_db2("no-select"), ClientOptions::default()).await {
        Err(e) => e,
        Ok(c) => cycle(&c, "db2").await.expect_err("db 2 without +select"),
    };
    assert_eq!(e.kind(), ErrorKind::Permission, "{e}");
    assert!(e.message().to_lowercase().contains("select"), "SELECT not named in: {e}");
    assert!(started.elapsed() < Duration::from_secs(2), "no retry loop");
    no_secret(&e);
}

/// The cluster additions of docs/SECURITY.md: `CLUSTER SLOTS` (topology) and sharded pub/sub.
const CLUSTER_EXTRA: &[&str] = &["+cluster|slots", "+ssubscribe", "+sunsubscribe", "+spublish"];

// Redis Cluster: the driver learns the topology with `CLUSTER SLOTS`, so the rule set needs
// `+cluster|slots` there (docs/SECURITY.md); without it the client cannot start. Releases use
// sharded pub/sub there: without `+spublish` a release is refused, naming SPUBLISH.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_rule_set_needs_cluster_slots() {
    let cluster = ferrolock_testkit::RedisCluster::start(3, 0);
    for node in &cluster.nodes {
        make_user_with(node, "clusterer", None, CLUSTER_EXTRA);
        make_user_with(node, "no-slots", Some("+cluster|slots"), CLUSTER_EXTRA);
        make_user_with(node, "no-spublish", Some("+spublish"), CLUSTER_EXTRA);
    }
    let seeds: Vec<String> = cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())).collect();
    let via = |user: &str| format!("redis+cluster://{user}:{PASSWORD}@{}", seeds.join(","));
    let mut o = ClientOptions::default();
    o.connect_timeout = Duration::from_secs(2);
    let ok = Client::connect(&via("clusterer"), o.clone()).await.expect("connect to the cluster");
    for name in ["c-a", "c-b", "c-c"] {
        cycle(&ok, name).await.expect("the rule set plus +cluster|slots is enough on a cluster");
    }
    let started = Instant::now();
    let denied = match Client::connect(&via("no-slots"), o).await {
        Err(e) => e,
        Ok(c) => cycle(&c, "c-a").await.expect_err("a cluster client without +cluster|slots"),
    };
    assert_eq!(denied.kind(), ErrorKind::Permission, "{denied}");
    assert!(denied.message().to_lowercase().contains("cluster"), "CLUSTER not named in: {denied}");
    assert!(started.elapsed() < Duration::from_secs(5), "no retry loop: {:?}", started.elapsed());
    no_secret(&denied);
    let c = Client::connect(&via("no-spublish"), ClientOptions::default()).await.expect("connect");
    let denied = cycle(&c, "c-b").await.expect_err("a cluster release without +spublish");
    assert_eq!(denied.kind(), ErrorKind::Permission, "{denied}");
    assert!(denied.message().contains("SPUBLISH"), "SPUBLISH not named in: {denied}");
}

// B18 (RELIABILITY.md): where scripts may not call `TIME` (an ACL without `+time`, as some
// managed services do), acquiring still works and the fence falls back to the stored counter
// alone (docs/PROTOCOL.md). The control: with `+time` the fence is the server time in µs.
#[tokio::test]
async fn b18_without_time_in_scripts_the_fence_falls_back_to_the_counter() {
    let server = RedisServer::start();
    make_user(&server, "timeless", Some("+time"));
    make_user(&server, "locker", None);
    let now_us =
        || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
    let timeless =
        Client::connect(&url(&server, "timeless"), ClientOptions::default()).await.expect("connect");
    let mut fences = Vec::new();
    for _ in 0..3 {
        let g = timeless.lock("b18", LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await;
        let g = g.expect("acquire without +time").expect("free");
        fences.push(g.fence());
        g.release().await.unwrap();
    }
    assert_eq!(fences, vec![1, 2, 3], "counter-only fences");
    let before = now_us();
    let timed = Client::connect(&url(&server, "locker"), ClientOptions::default()).await.expect("connect");
    let g = timed.lock("b18", LockOptions::lease(Duration::from_secs(5))).unwrap().try_acquire().await;
    let fence = g.unwrap().expect("free").fence();
    assert!(fence >= before && fence > 3, "with +time the fence is the server time in µs: {fence}");
}

// On a cluster the sharded subscriber connections (one per node, cluster_sub.rs) log in as the
// URL's user, like the scripts' connection. With the default user allowed no channel, a waiter
// of the rule set's user still subscribes and is woken by the release. The test above leaves
// the default user every channel, so subscriber connections that logged in as nobody passed it
// (mutation review): a cluster whose default user is restricted made every waiter fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_subscriber_connections_log_in_as_the_urls_user() {
    let cluster = ferrolock_testkit::RedisCluster::start(3, 0);
    for node in &cluster.nodes {
        make_user_with(node, "clusterer", None, CLUSTER_EXTRA);
        let _: () = node.cmd(&["ACL", "SETUSER", "default", "resetchannels"]);
    }
    let seeds: Vec<String> = cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())).collect();
    let url = format!("redis+cluster://clusterer:{PASSWORD}@{}", seeds.join(","));
    let holder = Client::connect(&url, ClientOptions::default()).await.expect("connect");
    let waiting = Client::connect(&url, ClientOptions::default()).await.expect("connect");
    let lease = LockOptions::lease(Duration::from_secs(30));
    let g = holder.lock("c-sub", lease).unwrap().acquire(Some(Duration::ZERO)).await.unwrap();
    let lock = waiting.lock("c-sub", lease).unwrap();
    let waiter = tokio::spawn(async move {
        let r = lock.acquire(Some(Duration::from_secs(20))).await;
        (Instant::now(), r)
    });
    let master = cluster.master_of("ferrolock:{c-sub}");
    let t0 = Instant::now();
    let subscribers = || match master
        .cmd::<Vec<redis::Value>>(&["PUBSUB", "SHARDNUMSUB", "ferrolock:{c-sub}:released"])
        .get(1)
    {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("SHARDNUMSUB replied {other:?}"),
    };
    while subscribers() == 0 {
        assert!(!waiter.is_finished(), "the waiter ended before it subscribed");
        assert!(t0.elapsed() < Duration::from_secs(10), "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    common::release_wakes(g, waiter).await;
}
