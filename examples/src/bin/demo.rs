//! The cross-language demo: a throwaway redis-server, a fenced resource, and workers in every
//! language contending on one lock. Prints acquisitions per worker, overlaps, fence order,
//! rejected writes and the handoff gap. Exits non-zero if any safety check fails.
//!
//! `demo [--iterations N] [--per-worker-kind K] [--timeout S] [--worker "CMD"]...` — Rust workers
//! are built in; each `--worker` adds K workers running `CMD` (see examples/README.md for the
//! protocol). Workers still running after the timeout are stopped and the demo fails.
//!
//! Ctrl-C or SIGTERM stops every worker (each runs in a process group of its own, and dies with
//! the demo even if the demo is killed outright) and removes the throwaway server's directory.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use ferrolock_examples::Resource;
use ferrolock_testkit::RedisServer;

struct Record {
    id: String,
    lang: String,
    fence: u64,
    acquired_ns: u64,
    released_ns: u64,
    rejected: bool,
}

fn parse(line: &str) -> Option<Record> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    Some(Record {
        id: v.get("id")?.as_str()?.to_owned(),
        lang: v.get("lang")?.as_str()?.to_owned(),
        fence: v.get("fence")?.as_u64()?,
        acquired_ns: v.get("acquired_ns")?.as_u64()?,
        released_ns: v.get("released_ns")?.as_u64()?,
        rejected: v.get("rejected")?.as_bool()?,
    })
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Block SIGINT and SIGTERM in this thread (and so in every thread started after it: call first),
/// and take them on a thread of their own: it sets `stop` and ends the workers' process groups, so
/// that `main` returns from its waits and cleans up. Children would inherit that mask (std does
/// not reset it): each worker unblocks them before its exec (see `main`).
fn on_interrupt(workers: Arc<Mutex<Vec<i32>>>, stop: Arc<AtomicBool>) {
    // SAFETY: plain libc calls on a local, initialised signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        std::thread::spawn(move || {
            let mut sig = 0;
            if libc::sigwait(&set, &mut sig) == 0 {
                stop.store(true, Ordering::SeqCst);
                eprintln!("\ndemo: interrupted; stopping the workers");
                for &pgid in workers.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                    libc::kill(-pgid, libc::SIGTERM);
                }
            }
        });
    }
}

const USAGE: &str = "usage: demo [--iterations N] [--per-worker-kind K] [--timeout S] [--worker CMD]...
  --iterations N       critical sections per worker (default 100)
  --per-worker-kind K  workers per language (default 2)
  --timeout S          seconds the workers may run before they are stopped and the demo fails
                       (default 60 plus 50 ms per critical section of all workers)
  --worker CMD         another kind of worker: a command run as `sh -c 'exec CMD ARGS'`
                       (examples/README.md has the protocol; ci/demo.sh adds every language's)";

fn main() {
    let workers: Arc<Mutex<Vec<i32>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    on_interrupt(workers.clone(), stop.clone());
    let mut iterations = 100u64;
    let mut per_kind = 2usize;
    let mut kinds: Vec<String> = Vec::new();
    let mut timeout: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    // A count of at least 1 (an empty run would pass every check), else a usage error.
    fn count<T: std::str::FromStr + PartialOrd + From<u8>>(flag: &str, v: Option<String>) -> T {
        match v.as_deref().map(str::parse::<T>) {
            Some(Ok(n)) if n >= T::from(1) => n,
            _ => {
                eprintln!("demo: {flag} takes a whole number of at least 1\n{USAGE}");
                std::process::exit(2)
            }
        }
    }
    while let Some(a) = args.next() {
        match a.as_str() {
            "--iterations" => iterations = count("--iterations", args.next()),
            "--per-worker-kind" => per_kind = count("--per-worker-kind", args.next()),
            "--timeout" => timeout = Some(count("--timeout", args.next())),
            "--worker" => match args.next() {
                Some(cmd) => kinds.push(cmd),
                None => {
                    eprintln!("demo: --worker takes a command\n{USAGE}");
                    std::process::exit(2);
                }
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            other => {
                eprintln!("demo: unknown argument {other}\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    let rust_worker = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("worker")))
        .filter(|p| p.exists())
        .unwrap_or_else(|| {
            eprintln!("demo: build the Rust worker first (cargo build -p ferrolock-examples)");
            std::process::exit(2)
        });
    kinds.insert(0, rust_worker.display().to_string());

    let server = RedisServer::start();
    let resource = Resource::start().unwrap_or_else(|e| {
        eprintln!("demo: cannot start the resource: {e}");
        std::process::exit(2)
    });
    let name = "demo:orders";
    println!(
        "ferrolock demo: redis-server pid {} at {}, fenced resource at {}",
        server.pid(),
        server.url(),
        resource.addr
    );

    let (tx, rx) = mpsc::channel();
    let mut children = Vec::new();
    for (k, cmd) in kinds.iter().enumerate() {
        for w in 0..per_kind {
            let id = format!("w{k}.{w}");
            // `exec`: the worker replaces the shell (dash forks a child for `sh -c CMD`), so the
            // process waited for, signalled and given the death signal below is the worker.
            let full = format!(
                "exec {cmd} --redis {} --resource {} --name {name} --iterations {iterations} --id {id}",
                server.url(),
                resource.addr
            );
            let mut command = Command::new("sh");
            command.args(["-c", &full]).stdout(Stdio::piped()).stderr(Stdio::inherit()).process_group(0);
            // Between fork and exec: unblock every signal (the worker inherited this process's
            // mask, SIGINT and SIGTERM blocked for the signal thread: it would ignore the SIGTERM
            // that stops it, and its death signal), and on Linux have it sent SIGTERM when the
            // demo dies. Both survive the exec of the shell and its `exec` of the worker: the
            // worker dies with the demo, whatever ends the demo.
            // SAFETY: only async-signal-safe calls (sigemptyset, sigprocmask, prctl, getppid,
            // kill, getpid).
            let parent = std::process::id() as libc::pid_t;
            unsafe {
                command.pre_exec(move || {
                    let mut none: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut none);
                    libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                    #[cfg(target_os = "linux")]
                    {
                        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                        if libc::getppid() != parent {
                            libc::kill(libc::getpid(), libc::SIGTERM); // the demo died before prctl
                        }
                    }
                    Ok(())
                });
            }
            let guard = workers.lock().unwrap_or_else(|p| p.into_inner());
            if stop.load(Ordering::SeqCst) {
                break; // interrupted while starting: the signal thread has already run
            }
            let mut child = command.spawn().unwrap_or_else(|e| {
                eprintln!("demo: cannot start {cmd}: {e}");
                std::process::exit(2)
            });
            let mut guard = guard;
            guard.push(child.id() as i32);
            drop(guard);
            let out = child.stdout.take();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in out.into_iter().flat_map(|o| BufReader::new(o).lines().map_while(Result::ok)) {
                    let _ = tx.send(line);
                }
            });
            children.push((id, cmd.clone(), child));
        }
    }
    drop(tx);
    // A worker that hangs (a lock never granted, a resource call that never returns) must not hang
    // the demo: past the deadline every worker still running is stopped and named.
    let sections = (kinds.len() as u64).saturating_mul(per_kind as u64).saturating_mul(iterations);
    let limit = match timeout {
        Some(s) => Duration::from_secs(s),
        None => Duration::from_secs(60).saturating_add(Duration::from_millis(sections.saturating_mul(50))),
    };
    let deadline = Instant::now() + limit;
    let mut failed = Vec::new();
    let mut running = children;
    let mut overdue = false;
    while !running.is_empty() {
        running.retain_mut(|(id, cmd, child)| match child.try_wait() {
            Ok(None) => true,
            Ok(Some(s)) if s.success() => false,
            Ok(Some(s)) if overdue => {
                failed
                    .push(format!("{id} ({cmd}) did not finish within {} s (stopped: {s})", limit.as_secs()));
                false
            }
            Ok(Some(s)) => {
                failed.push(format!("{id} ({cmd}) exited with {s}"));
                false
            }
            Err(e) => {
                failed.push(format!("{id} ({cmd}): {e}"));
                false
            }
        });
        if !overdue && Instant::now() >= deadline && !running.is_empty() {
            overdue = true;
            for (_, _, child) in &running {
                // SAFETY: a plain kill(2) of the worker's own process group.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if stop.load(Ordering::SeqCst) {
        drop(server); // stops redis-server and removes its directory
        eprintln!("demo: interrupted; every worker and the redis-server are stopped");
        std::process::exit(130);
    }
    let mut records: Vec<Record> = Vec::new();
    let mut garbage = 0;
    for line in rx.iter() {
        match parse(&line) {
            Some(r) => records.push(r),
            None => garbage += 1,
        }
    }
    records.sort_by_key(|r| r.acquired_ns);

    let overlaps = records.windows(2).filter(|w| w[1].acquired_ns < w[0].released_ns).count();
    let fence_inversions = records.windows(2).filter(|w| w[1].fence <= w[0].fence).count();
    // What the workers said, and what the resource did (a worker could misreport).
    let rejected_said = records.iter().filter(|r| r.rejected).count();
    let mut gaps: Vec<u64> =
        records.windows(2).map(|w| w[1].acquired_ns.saturating_sub(w[0].released_ns) / 1000).collect();
    gaps.sort_unstable();
    let state = resource.state.lock().map(|s| (s.value, s.accepted_writes, s.rejected)).unwrap_or((0, 0, 0));

    println!();
    println!("{:<8} {:<8} {:>12}", "worker", "lang", "acquisitions");
    let mut ids: Vec<(&str, &str)> = records.iter().map(|r| (r.id.as_str(), r.lang.as_str())).collect();
    ids.sort_unstable();
    ids.dedup();
    for (id, lang) in &ids {
        let n = records.iter().filter(|r| r.id == *id).count();
        println!("{id:<8} {lang:<8} {n:>12}");
    }
    println!();
    println!("acquisitions          {}", records.len());
    println!("overlaps              {overlaps}");
    println!("fences increasing     {}", if fence_inversions == 0 { "yes" } else { "NO" });
    println!("rejected by resource  {} (reads and writes; workers reported {rejected_said})", state.2);
    println!("counter               {} (expected {})", state.0, records.len());
    println!(
        "handoff gap p50/p99/max {} µs / {} µs / {} µs",
        percentile(&gaps, 50.0),
        percentile(&gaps, 99.0),
        gaps.last().copied().unwrap_or(0)
    );
    let mut ok = true;
    for f in &failed {
        eprintln!("demo: worker failed: {f}");
        ok = false;
    }
    if garbage > 0 {
        eprintln!("demo: {garbage} unparseable worker output lines");
        ok = false;
    }
    let expected = sections;
    for (bad, what) in [
        (overlaps > 0, "two critical sections overlapped"),
        (fence_inversions > 0, "fences were not strictly increasing in grant order"),
        (state.2 > 0 || rejected_said > 0, "the resource rejected a stale fence"),
        (state.0 != records.len() as i64, "the counter does not match the acquisitions"),
    ] {
        if bad {
            eprintln!("demo: {what}");
            ok = false;
        }
    }
    if records.len() as u64 != expected {
        eprintln!("demo: {} acquisitions recorded, expected {expected}", records.len());
        ok = false;
    }
    drop(server);
    if !ok {
        println!("demo: FAILED (the reasons are on stderr)");
        std::process::exit(1);
    }
    println!("demo: OK");
}
