//! `ferrolock-bench`: the Rust side of the benchmark (bench/README.md).
//!
//! Each subcommand runs one workload against the server(s) it is given and prints ONE JSON object
//! of raw measurements on stdout (per-pair times, per-acquisition stamps, counters). Statistics,
//! the `redis-lock-bench/v1` line and the charts are made by `bench/run.py`, the same code for
//! every language, so every library is summarised the same way.
//!
//! ```text
//! ferrolock-bench w1 --url U [--api async|blocking] [--n 5000] [--warmup 500] [--reps 3]
//! ferrolock-bench w2 --url U [--mode any|forced] [--workers 8] [--secs 10] [--hold-ms 1] [--fair 0|1]
//! ferrolock-bench w5 --url U [--locks 10000] [--secs 20] [--ttl-ms 3000]
//! ferrolock-bench w3 --urls U1,..,U5 --pids P1,..,P5 [--n 2000] [--phase-secs 8] [--hang-s 3]
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrolock::{Client, ClientOptions, LockOptions};
use serde_json::{Value, json};

mod w3;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const LIB_VERSION: &str = env!("CARGO_PKG_VERSION");

struct Args(HashMap<String, String>);

impl Args {
    fn parse(rest: &[String]) -> Result<Args, BoxError> {
        let mut m = HashMap::new();
        let mut it = rest.iter();
        while let Some(k) = it.next() {
            let Some(name) = k.strip_prefix("--") else {
                return Err(format!("unexpected argument {k}").into());
            };
            let v = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
            m.insert(name.to_owned(), v.clone());
        }
        Ok(Args(m))
    }
    fn str(&self, k: &str, default: &str) -> String {
        self.0.get(k).cloned().unwrap_or_else(|| default.to_owned())
    }
    fn num(&self, k: &str, default: u64) -> Result<u64, BoxError> {
        match self.0.get(k) {
            Some(v) => v.parse().map_err(|_| format!("--{k}: not a number: {v}").into()),
            None => Ok(default),
        }
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first().cloned() else {
        eprintln!("usage: ferrolock-bench w1|w2|w5 --url redis://... [options]");
        std::process::exit(2);
    };
    let out = Args::parse(&argv[1..]).and_then(|a| match cmd.as_str() {
        "w1" => w1(&a),
        "w2" => w2(&a),
        "w5" => w5(&a),
        "w3" => w3::w3(&a),
        other => Err(format!("unknown workload {other}").into()),
    });
    match out {
        Ok(v) => println!("{v}"),
        Err(e) => {
            println!("{}", json!({"ok": false, "error": e.to_string()}));
            std::process::exit(1);
        }
    }
}

// ---------- measurement helpers ----------

/// User + system CPU time of this process, in ns.
fn cpu_ns() -> u64 {
    // SAFETY: getrusage fills the struct we pass; RUSAGE_SELF is always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Voluntary + involuntary context switches of this process (all threads), from getrusage.
fn ctx_switches() -> u64 {
    // SAFETY: as in cpu_ns.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    (ru.ru_nvcsw + ru.ru_nivcsw) as u64
}

/// CPU time of the calling thread, in ns.
fn thread_cpu_ns() -> u64 {
    // SAFETY: clock_gettime writes the timespec we pass.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        ts
    };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The server's `total_commands_processed` (on Redis 7 this counts client commands AND the
/// `redis.call`s inside scripts). bench/run.py counts client commands separately (MONITOR).
fn server_counters(url: &str) -> Result<u64, BoxError> {
    let mut c = redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(5))?;
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c)?;
    let total = info
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .ok_or("no total_commands_processed in INFO")?;
    Ok(total.trim().parse()?)
}

/// Counter delta between two snapshots, less the INFO of the first snapshot.
fn counters_delta(before: u64, after: u64) -> Value {
    json!({"total_cmds": after.saturating_sub(before + 1)})
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

fn settings(opts: &ClientOptions) -> Value {
    json!({
        "response_timeout_ms": opts.response_timeout.as_millis() as u64,
        "drift_factor": opts.drift_factor,
        "drift_min_ms": opts.drift_min.as_millis() as u64,
        "subscription_linger_ms": opts.subscription_linger.as_millis() as u64,
    })
}

// ---------- W1: uncontended pairs ----------

fn w1(a: &Args) -> Result<Value, BoxError> {
    let url = a.str("url", "redis://127.0.0.1:6379");
    let api = a.str("api", "async");
    let n = a.num("n", 5000)?;
    let warmup = a.num("warmup", 500)?;
    let reps = a.num("reps", 3)?;
    let ttl = Duration::from_secs(10);
    let opts = ClientOptions::default();
    let set = settings(&opts);
    let mut rep_out = Vec::new();
    let mut counters = json!(null);
    match api.as_str() {
        "async" => {
            // One thread: the client's I/O driver, watchdog and the loop share it (W1 runs the
            // client on the server's core).
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                let client = Client::connect(&url, opts).await?;
                let lock = client.lock("bench:w1:rust-async", LockOptions::lease(ttl))?;
                let wait = Some(Duration::from_secs(10));
                for _ in 0..warmup {
                    lock.acquire(wait).await?.release().await?;
                }
                let before = server_counters(&url)?;
                for _ in 0..reps {
                    let (mut acq, mut rel) = (Vec::with_capacity(n as usize), Vec::with_capacity(n as usize));
                    let (c0, w0, x0) = (cpu_ns(), Instant::now(), ctx_switches());
                    for _ in 0..n {
                        let t0 = Instant::now();
                        let g = lock.acquire(wait).await?;
                        let t1 = Instant::now();
                        g.release().await?;
                        let t2 = Instant::now();
                        acq.push(ns(t1 - t0));
                        rel.push(ns(t2 - t1));
                    }
                    rep_out.push(json!({"acq_ns": acq, "rel_ns": rel, "wall_ns": ns(w0.elapsed()), "cpu_ns": cpu_ns() - c0, "ctx_switches": ctx_switches() - x0}));
                }
                counters = counters_delta(before, server_counters(&url)?);
                Ok::<(), BoxError>(())
            })?;
        }
        "blocking" => {
            use ferrolock::blocking;
            let client = blocking::Client::connect(&url, opts)?;
            let lock = client.lock("bench:w1:rust-blocking", LockOptions::lease(ttl))?;
            let wait = Some(Duration::from_secs(10));
            for _ in 0..warmup {
                lock.acquire(wait)?.release()?;
            }
            let before = server_counters(&url)?;
            for _ in 0..reps {
                let (mut acq, mut rel) = (Vec::with_capacity(n as usize), Vec::with_capacity(n as usize));
                let (c0, w0, x0) = (cpu_ns(), Instant::now(), ctx_switches());
                for _ in 0..n {
                    let t0 = Instant::now();
                    let g = lock.acquire(wait)?;
                    let t1 = Instant::now();
                    g.release()?;
                    let t2 = Instant::now();
                    acq.push(ns(t1 - t0));
                    rel.push(ns(t2 - t1));
                }
                rep_out.push(json!({"acq_ns": acq, "rel_ns": rel, "wall_ns": ns(w0.elapsed()), "cpu_ns": cpu_ns() - c0, "ctx_switches": ctx_switches() - x0}));
            }
            counters = counters_delta(before, server_counters(&url)?);
        }
        other => return Err(format!("unknown api {other}").into()),
    }
    Ok(json!({
        "ok": true, "lib_version": LIB_VERSION, "api": api, "settings": set,
        "runtime": if api == "async" { "tokio current_thread" } else { "ferrolock::blocking (current-thread tokio driven by the calling thread)" },
        "params": {"n": n, "warmup": warmup, "reps": reps, "ttl_ms": 10000},
        "reps": rep_out, "counters": counters,
    }))
}

// ---------- W2: contended handoff ----------

/// Shared by the workers in `forced` mode: who acquired last, and a wake-up for waiters.
struct Handoff {
    last: tokio::sync::watch::Sender<usize>,
}

fn w2(a: &Args) -> Result<Value, BoxError> {
    let url = a.str("url", "redis://127.0.0.1:6379");
    let mode = a.str("mode", "any");
    let workers = a.num("workers", 8)? as usize;
    let secs = a.num("secs", 10)?;
    let hold = Duration::from_millis(a.num("hold-ms", 1)?);
    let fair = a.num("fair", 0)? == 1;
    let lock_opts = LockOptions::lease(Duration::from_secs(10)).with_fair(fair);
    let forced = match mode.as_str() {
        "any" => false,
        "forced" => true,
        m => return Err(format!("unknown mode {m}").into()),
    };
    let opts = ClientOptions::default();
    let set = settings(&opts);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let out = rt.block_on(async move {
        let client = Client::connect(&url, opts).await?;
        let name = format!("bench:w2:rust:{mode}");
        // Warm the script cache and the subscription path once.
        let l0 = client.lock(&name, lock_opts)?;
        l0.acquire(Some(Duration::from_secs(10))).await?.release().await?;
        let (tx, _rx) = tokio::sync::watch::channel(usize::MAX);
        let handoff = Arc::new(Handoff { last: tx });
        let timeouts = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let base = Instant::now();
        let end = base + Duration::from_secs(secs);
        let before = server_counters(&url)?;
        let c0 = cpu_ns();
        let mut tasks = Vec::new();
        for w in 0..workers {
            let lock = client.lock(&name, lock_opts)?;
            let (handoff, timeouts, errors) = (handoff.clone(), timeouts.clone(), errors.clone());
            tasks.push(tokio::spawn(async move {
                let mut ev: Vec<[f64; 5]> = Vec::new();
                let mut first_error: Option<String> = None;
                let us = |t: Instant| (t - base).as_nanos() as f64 / 1000.0;
                while Instant::now() < end {
                    let a0 = Instant::now();
                    let g = match lock.acquire(Some(Duration::from_secs(10))).await {
                        Ok(g) => g,
                        Err(e) if e.kind() == ferrolock::ErrorKind::AcquireTimeout => {
                            timeouts.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            first_error.get_or_insert_with(|| e.to_string());
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    let a1 = Instant::now();
                    if forced {
                        handoff.last.send_replace(w);
                    }
                    // A real 1 ms hold (tokio timers round up to the next millisecond tick).
                    tokio::task::block_in_place(|| std::thread::sleep(hold));
                    let r0 = Instant::now();
                    if let Err(e) = g.release().await {
                        errors.fetch_add(1, Ordering::Relaxed);
                        first_error.get_or_insert_with(|| e.to_string());
                    }
                    let r1 = Instant::now();
                    ev.push([w as f64, us(a0), us(a1), us(r0), us(r1)]);
                    if forced {
                        // Wait, in-process, until another worker has acquired.
                        let mut rx = handoff.last.subscribe();
                        let left = end.saturating_duration_since(Instant::now());
                        let _ = tokio::time::timeout(left, rx.wait_for(|last| *last != w)).await;
                    }
                }
                (ev, first_error)
            }));
        }
        let mut events = Vec::new();
        let mut first_error = None;
        for t in tasks {
            let (ev, err) = t.await?;
            events.extend(ev);
            if first_error.is_none() {
                first_error = err;
            }
        }
        let wall = base.elapsed();
        let cpu = cpu_ns() - c0;
        let counters = counters_delta(before, server_counters(&url)?);
        Ok::<Value, BoxError>(json!({
            "events": events, "timeouts": timeouts.load(Ordering::Relaxed),
            "errors": errors.load(Ordering::Relaxed), "first_error": first_error,
            "wall_ns": ns(wall), "cpu_ns": cpu, "counters": counters,
        }))
    })?;
    let mut out = out;
    let o = out.as_object_mut().ok_or("w2 output")?;
    o.insert("ok".into(), json!(true));
    o.insert("lib_version".into(), json!(LIB_VERSION));
    o.insert("api".into(), json!("async"));
    o.insert("runtime".into(), json!("tokio multi_thread (2 workers), one shared Client, 8 tasks"));
    o.insert("settings".into(), set);
    o.insert("params".into(), json!({"workers": workers, "secs": secs, "hold_ms": hold.as_millis() as u64, "ttl_ms": 10000, "wait_ms": 10000, "fair": fair}));
    Ok(out)
}

// ---------- W5: watchdog scale ----------

/// A loopback TCP relay that counts what the client sends: `writes` (reads on the client side of
/// the relay) and `bursts` (client->server activity separated by at least `gap` of silence: one
/// burst is one request round, however many commands it pipelines).
struct Relay {
    port: u16,
    writes: Arc<AtomicU64>,
    bursts: Arc<AtomicU64>,
}

async fn relay(upstream: String, gap: Duration) -> Result<Relay, BoxError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let writes = Arc::new(AtomicU64::new(0));
    let bursts = Arc::new(AtomicU64::new(0));
    let (w2, b2) = (writes.clone(), bursts.clone());
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else { continue };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let (writes, bursts) = (w2.clone(), b2.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut last: Option<Instant> = None;
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let now = Instant::now();
                    writes.fetch_add(1, Ordering::Relaxed);
                    if last.is_none_or(|t| now - t >= gap) {
                        bursts.fetch_add(1, Ordering::Relaxed);
                    }
                    last = Some(now);
                    if sw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    Ok(Relay { port, writes, bursts })
}

fn w5(a: &Args) -> Result<Value, BoxError> {
    let url = a.str("url", "redis://127.0.0.1:6379");
    let locks = a.num("locks", 10_000)? as usize;
    let secs = a.num("secs", 20)?;
    let ttl = Duration::from_millis(a.num("ttl-ms", 3000)?);
    let gap = Duration::from_millis(a.num("gap-ms", 2)?);
    let upstream = url.trim_start_matches("redis://").trim_end_matches('/').to_owned();
    let opts = ClientOptions::default();
    let set = settings(&opts);
    // The relay runs on its own thread and runtime; that thread publishes its own CPU time so the
    // client's CPU can be reported without it.
    let relay_rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let relay = relay_rt.block_on(relay(upstream, gap))?;
    let relay_cpu = Arc::new(AtomicU64::new(0));
    let rc = relay_cpu.clone();
    std::thread::spawn(move || {
        relay_rt.block_on(async move {
            loop {
                rc.store(thread_cpu_ns(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    });
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let relay_url = format!("redis://127.0.0.1:{}", relay.port);
    rt.block_on(async move {
        let client = Client::connect(&relay_url, opts).await?;
        let t_acq = Instant::now();
        let mut guards = Vec::with_capacity(locks);
        let mut handles = Vec::with_capacity(locks);
        for i in 0..locks {
            handles.push(client.lock(format!("bench:w5:{i}"), LockOptions::renewing(ttl))?);
        }
        for chunk in handles.chunks(500) {
            let tasks: Vec<_> = chunk
                .iter()
                .map(|l| {
                    let l = l.clone();
                    tokio::spawn(async move { l.try_acquire().await })
                })
                .collect();
            for t in tasks {
                guards.push(t.await??.ok_or("a W5 lock was already held")?);
            }
        }
        let acquire_s = t_acq.elapsed().as_secs_f64();
        // Settle: let the renewal schedule reach its steady state (one full period).
        tokio::time::sleep(ttl / 3).await;
        let before = server_counters(&url)?;
        let (w0, b0) = (relay.writes.load(Ordering::Relaxed), relay.bursts.load(Ordering::Relaxed));
        let (c0, r0, t0) = (cpu_ns(), relay_cpu.load(Ordering::Relaxed), Instant::now());
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let relay_ns = relay_cpu.load(Ordering::Relaxed) - r0;
        let cpu = (cpu_ns() - c0).saturating_sub(relay_ns);
        let wall = t0.elapsed();
        let (w1, b1) = (relay.writes.load(Ordering::Relaxed), relay.bursts.load(Ordering::Relaxed));
        let counters = counters_delta(before, server_counters(&url)?);
        let lost = guards.iter().filter(|g| g.is_lost()).count();
        for g in &guards {
            let _ = g.release().await;
        }
        let ticks = wall.as_secs_f64() / (ttl.as_secs_f64() / 3.0);
        Ok::<Value, BoxError>(json!({
            "ok": true, "lib_version": LIB_VERSION, "api": "async", "settings": set,
            "runtime": "tokio multi_thread (2 workers); counting relay on its own thread (its CPU excluded)",
            "params": {"locks": locks, "secs": secs, "ttl_ms": ttl.as_millis() as u64, "burst_gap_ms": gap.as_millis() as u64},
            "acquire_all_s": acquire_s, "wall_ns": ns(wall), "cpu_ns": cpu, "relay_cpu_ns": relay_ns, "counters": counters,
            "client_writes": w1 - w0, "client_bursts": b1 - b0, "ticks": ticks, "lost": lost,
        }))
    })
}
