//! The Rust chaos client (the Python and Node ones in `chaos/clients/` do the same):
//!
//! ```text
//! chaos-client --redis URL[,URL...] --resource HOST:PORT --name LOCK --id ID --history FILE
//!              --stop-file FILE [--ttl-ms 1000] [--wait-ms 5000] [--work-ms 5-10] [--reentrant] [--fair]
//!              [--cancel-ms LO-HI] [--seed N] [--response-timeout-ms 250]
//! ```
//!
//! Until the stop file exists: acquire (watchdog-renewed lease of `ttl`), fenced read → work
//! (long work, over 50 ms, ends early once the stop file exists) → fenced write, release; every
//! step is a history line. More than one URL means Redlock.
//! With `--cancel-ms` (W4, B1), half of the outer acquires are cancelled if they have not
//! completed after a delay drawn from `LO-HI` ms: the acquire future is dropped (a timeout),
//! and the history gets `acquire` `info` with `"error":"CANCELLED","cancelled":true`.
//! The write is sent even if the lock was lost meanwhile: it models a write already in flight,
//! which only the resource's fencing check can stop.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrolock::{ClientOptions, ErrorKind, Guard, LockOptions, blocking};
use ferrolock_chaos::history::History;
use ferrolock_chaos::resource::{Reply, ResourceConn};
use ferrolock_chaos::{Rng, monotonic_ns};
use serde_json::json;

struct Args {
    redis: Vec<String>,
    resource: String,
    name: String,
    id: String,
    history: PathBuf,
    stop_file: PathBuf,
    ttl: Duration,
    wait: Duration,
    work: (u64, u64),
    reentrant: bool,
    fair: bool,
    cancel: Option<(u64, u64)>,
    seed: u64,
    response_timeout: Duration,
}

fn parse() -> Args {
    let v: Vec<String> = std::env::args().collect();
    let get = |n: &str| v.iter().position(|a| a == n).and_then(|i| v.get(i + 1)).cloned();
    let req = |n: &str| {
        get(n).unwrap_or_else(|| {
            eprintln!("chaos-client: missing {n}");
            std::process::exit(2)
        })
    };
    let ms = |n: &str, d: u64| Duration::from_millis(get(n).and_then(|x| x.parse().ok()).unwrap_or(d));
    let work = get("--work-ms").unwrap_or_else(|| "5-10".into());
    let (lo, hi) = work.split_once('-').unwrap_or((&work, &work));
    let cancel = get("--cancel-ms").map(|c| {
        let (lo, hi) = c.split_once('-').unwrap_or((&c, &c));
        (lo.parse().unwrap_or(0), hi.parse().unwrap_or(0))
    });
    Args {
        redis: req("--redis").split(',').map(str::to_owned).collect(),
        resource: req("--resource"),
        name: req("--name"),
        id: req("--id"),
        history: req("--history").into(),
        stop_file: req("--stop-file").into(),
        ttl: ms("--ttl-ms", 1000),
        wait: ms("--wait-ms", 5000),
        work: (lo.parse().unwrap_or(5), hi.parse().unwrap_or(10)),
        reentrant: v.iter().any(|a| a == "--reentrant"),
        fair: v.iter().any(|a| a == "--fair"),
        cancel,
        seed: get("--seed").and_then(|x| x.parse().ok()).unwrap_or(1),
        response_timeout: ms("--response-timeout-ms", 250),
    }
}

/// Outcome type of a failed call: `info` when it may have happened (timeouts, dropped
/// connections), `fail` when it definitely did not.
fn kind_type(k: ErrorKind) -> &'static str {
    match k {
        ErrorKind::Timeout | ErrorKind::Connection | ErrorKind::Cancelled | ErrorKind::Internal => "info",
        _ => "fail",
    }
}

fn err_json(e: &ferrolock::Error) -> serde_json::Value {
    json!({"error": e.kind().name(), "message": e.to_string()})
}

/// Work for `d`; long work (over 50 ms) ends early once the stop file exists.
fn work(d: Duration, stop_file: &std::path::Path) {
    let end = std::time::Instant::now() + d;
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || (d > Duration::from_millis(50) && stop_file.exists()) {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// The hold being sampled and its last logged deadline.
type Current = Option<(Arc<Guard>, u64)>;

/// Acquire through the async handle on the blocking facade's runtime (what
/// `blocking::Lock::acquire` does), dropping the acquire future if it has not completed within
/// `cancel_after`: `Ok(None)` then.
fn acquire(
    lock: &ferrolock::Lock,
    wait: Duration,
    cancel_after: Option<Duration>,
) -> ferrolock::Result<Option<Guard>> {
    let l = lock.clone();
    blocking::block_on(async move {
        match cancel_after {
            None => l.acquire(Some(wait)).await.map(Some),
            Some(d) => match tokio::time::timeout(d, l.acquire(Some(wait))).await {
                Ok(r) => r.map(Some),
                Err(_) => Ok(None),
            },
        }
    })
}

fn release(g: &Arc<Guard>) -> ferrolock::Result<()> {
    let g = g.clone();
    blocking::block_on(async move { g.release().await })
}

fn main() {
    let a = parse();
    let h = Arc::new(History::create(&a.history, &a.id, "rust", &a.name).unwrap_or_else(|e| {
        eprintln!("chaos-client: cannot open history: {e}");
        std::process::exit(2)
    }));
    h.emit("start", "ok", None, None, json!({}));
    if let Err(e) = run(&a, &h) {
        h.emit("exit", "fail", None, None, json!({"message": e.to_string()}));
        eprintln!("chaos-client {}: {e}", a.id);
        std::process::exit(1);
    }
    h.emit("exit", "ok", None, None, json!({}));
}

fn run(a: &Args, h: &Arc<History>) -> Result<(), Box<dyn std::error::Error>> {
    let mut opts = ClientOptions::default();
    opts.response_timeout = a.response_timeout;
    opts.connect_timeout = Duration::from_millis(500);
    let client = loop {
        let r = if a.redis.len() > 1 {
            blocking::Client::connect_redlock(&a.redis, opts.clone())
        } else {
            blocking::Client::connect(&a.redis[0], opts.clone())
        };
        match r {
            Ok(c) => break c,
            // A master may be down (nemesis) when the client starts: retry until stopped.
            Err(e) if e.kind().is_transient() && !a.stop_file.exists() => {
                h.emit("connect", "fail", None, None, err_json(&e));
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    };
    // The async handle behind the facade, so that an acquire can be cancelled (its future
    // dropped) like an async caller would; every call still runs on the facade's runtime.
    let lock = client.as_async().lock(&a.name, LockOptions::renewing(a.ttl).with_fair(a.fair))?;
    let mut res = ResourceConn::connect(&a.resource, &a.id)?;
    let mut rng = Rng::new(a.seed);

    // The believed expiry moves with each renewal; sample it so the checker knows the local
    // deadline when a loss is reported.
    let current: Arc<Mutex<Current>> = Arc::new(Mutex::new(None));
    {
        let (current, h) = (current.clone(), h.clone());
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(20));
                let mut slot = current.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((g, last)) = slot.as_mut()
                    && g.state() == ferrolock::LockState::Held
                {
                    let d = monotonic_ns() + g.remaining().as_nanos() as u64;
                    if d.abs_diff(*last) > 5_000_000 {
                        *last = d;
                        h.emit("deadline", "info", Some(g.fence()), None, json!({"deadline_ns": d}));
                    }
                }
            }
        });
    }

    while !a.stop_file.exists() {
        // W4: cancel half of the acquires after a random delay unless they completed by then.
        let cancel_after = a
            .cancel
            .filter(|_| rng.range(0, 1) == 1)
            .map(|(lo, hi)| Duration::from_millis(rng.range(lo, hi)));
        h.emit("acquire", "invoke", None, None, json!({}));
        let g = match acquire(&lock, a.wait, cancel_after) {
            Ok(Some(g)) => Arc::new(g),
            Ok(None) => {
                let after = cancel_after.unwrap_or_default().as_millis() as u64;
                h.emit(
                    "acquire",
                    "info",
                    None,
                    None,
                    json!({"error": "CANCELLED", "message": "acquire future dropped", "cancelled": true, "after_ms": after}),
                );
                continue;
            }
            Err(e) => {
                h.emit("acquire", kind_type(e.kind()), None, None, err_json(&e));
                if e.kind().is_transient() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
        };
        let t_ok = monotonic_ns();
        let remaining = g.remaining();
        let fence = g.fence();
        let deadline = t_ok + remaining.as_nanos() as u64;
        h.emit_at(
            t_ok,
            "acquire",
            "ok",
            Some(fence),
            Some(remaining.as_secs_f64() * 1000.0),
            json!({"deadline_ns": deadline, "count": g.count()}),
        );
        {
            let h = h.clone();
            g.on_lost(move |e| {
                h.emit("lost", "info", Some(fence), None, err_json(&e));
            });
        }
        *current.lock().unwrap_or_else(|p| p.into_inner()) = Some((g.clone(), deadline));

        // W3: nested re-entry through the same handle, released in reverse order.
        let mut inner = Vec::new();
        if a.reentrant {
            for _ in 0..rng.range(1, 3) {
                match acquire(&lock, a.wait, None).map(|g| g.map(Arc::new)) {
                    Ok(None) => {}
                    Ok(Some(n)) => {
                        h.emit("reenter", "ok", Some(n.fence()), None, json!({"count": n.count()}));
                        inner.push(n);
                    }
                    Err(e) => {
                        h.emit("reenter", kind_type(e.kind()), Some(fence), None, err_json(&e));
                    }
                }
            }
        }

        h.emit("read", "invoke", Some(fence), None, json!({}));
        match res.read(fence)? {
            Reply::Ok(v) => {
                h.emit("read", "ok", Some(fence), None, json!({"value": v}));
                work(Duration::from_millis(rng.range(a.work.0, a.work.1)), &a.stop_file);
                h.emit("write", "invoke", Some(fence), None, json!({"value": v + 1}));
                match res.write(fence, v + 1)? {
                    Reply::Ok(_) => h.emit("write", "ok", Some(fence), None, json!({"value": v + 1})),
                    Reply::Rejected(hi) => h.emit("write", "fail", Some(fence), None, json!({"highest": hi})),
                };
            }
            Reply::Rejected(hi) => {
                h.emit("read", "fail", Some(fence), None, json!({"highest": hi}));
            }
        }

        while let Some(n) = inner.pop() {
            match release(&n) {
                Ok(()) => h.emit("reenter_release", "ok", Some(fence), None, json!({"count": g.count()})),
                Err(e) => h.emit("reenter_release", kind_type(e.kind()), Some(fence), None, err_json(&e)),
            };
        }
        *current.lock().unwrap_or_else(|p| p.into_inner()) = None;
        h.emit("release", "invoke", Some(fence), None, json!({}));
        match release(&g) {
            Ok(()) => h.emit("release", "ok", Some(fence), None, json!({})),
            Err(e) => h.emit("release", kind_type(e.kind()), Some(fence), None, err_json(&e)),
        };
        if a.reentrant {
            // Releasing more times than acquired must say NOT_HELD and delete nothing.
            match release(&g) {
                Ok(()) => h.emit("over_release", "ok", Some(fence), None, json!({})),
                Err(e) => h.emit("over_release", "fail", Some(fence), None, err_json(&e)),
            };
        }
    }
    Ok(())
}
