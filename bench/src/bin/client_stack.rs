//! `client-stack`: where a W1 pair's client time goes (bench/FINDINGS.md, "Client stack").
//!
//! The same acquire + release pair against one server, sent through thinner and thinner client
//! stacks, all on the calling thread:
//!
//! * `ferrolock`: the async API on a current-thread runtime (what W1 measures), its scripts on
//!   the hot-path connection (docs/CONNECTIONS.md);
//! * `ferrolock, multiplexed`: the same with that connection turned off, so both scripts go
//!   through the multiplexed connection (as before 2026-11-26);
//! * `redis-rs`: a redis-rs `ConnectionManager` sending the same two scripts with the same
//!   arguments through `Script::invoke_async` (ferrolock's connection, without ferrolock);
//! * `tokio`: the same two `EVALSHA` commands, pre-encoded, on a bare tokio `TcpStream`;
//! * `std`: the same on a blocking `std::net::TcpStream` (no runtime at all);
//! * `std bare lock`: `SET NX PX` + a compare-and-delete `EVALSHA` on the blocking socket (the
//!   floor's commands, sent by the leanest client).
//!
//! Rounds are interleaved (round k runs every stack once) and the median round is printed as a
//! Markdown table. Run it on the server's core: `taskset -c 0 client-stack PORT [PAIRS] [ROUNDS] [ROW]`
//! with the server pinned there too (bench/profile.sh does).

use std::io::{Read, Write};
use std::net::TcpStream as StdStream;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ACQUIRE: &str = include_str!("../../../core/scripts/acquire.lua");
const RELEASE: &str = include_str!("../../../core/scripts/release.lua");
const COMPARE_AND_DELETE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
const TOKEN: &str = "0123456789abcdef0123456789abcdef";
/// ferrolock's defaults: lease 10 s (as in W1), fence retention 7 days, depth limit 1024.
const ACQUIRE_ARGS: [&str; 4] = [TOKEN, "10000", "604800000", "1024"];
const HOLD: &str = "ferrolock:{bench:stack}";
const FENCE: &str = "ferrolock:{bench:stack}:fence";
const CHANNEL: &str = "ferrolock:{bench:stack}:released";
const WARMUP: usize = 500;

/// One command in RESP.
fn encode(args: &[&str]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    v
}

/// The length of the complete RESP value at the start of `buf`, or `None` while it is incomplete.
fn complete(buf: &[u8]) -> Option<usize> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let after = end + 2;
    let n = || std::str::from_utf8(&buf[1..end]).ok()?.parse::<i64>().ok();
    match buf.first()? {
        b'$' => {
            let len = n()?;
            let total = if len < 0 { after } else { after + len as usize + 2 };
            (buf.len() >= total).then_some(total)
        }
        b'*' => {
            let mut at = after;
            for _ in 0..n()?.max(0) {
                at += complete(&buf[at..])?;
            }
            Some(at)
        }
        _ => Some(after),
    }
}

/// A bare client: writes one pre-encoded command and reads until one whole reply is in.
trait Bare {
    async fn round_trip(&mut self, cmd: &[u8], buf: &mut [u8]) -> std::io::Result<()>;
}

impl Bare for TcpStream {
    async fn round_trip(&mut self, cmd: &[u8], buf: &mut [u8]) -> std::io::Result<()> {
        self.write_all(cmd).await?;
        let mut have = 0;
        while complete(&buf[..have]).is_none() {
            have += self.read(&mut buf[have..]).await?;
        }
        Ok(())
    }
}

impl Bare for StdStream {
    async fn round_trip(&mut self, cmd: &[u8], buf: &mut [u8]) -> std::io::Result<()> {
        self.write_all(cmd)?;
        let mut have = 0;
        while complete(&buf[..have]).is_none() {
            have += self.read(&mut buf[have..])?;
        }
        Ok(())
    }
}

/// `pairs` pairs (after a warm-up) of `acquire` then `release` on a bare client.
async fn bare(s: &mut impl Bare, acquire: &[u8], release: &[u8], pairs: usize) -> Result<Duration, BoxError> {
    let mut buf = vec![0u8; 4096];
    let mut t0 = Instant::now();
    for i in 0..WARMUP + pairs {
        if i == WARMUP {
            t0 = Instant::now();
        }
        s.round_trip(acquire, &mut buf).await?;
        s.round_trip(release, &mut buf).await?;
    }
    Ok(t0.elapsed())
}

async fn with_ferrolock(url: &str, pairs: usize, hot: bool) -> Result<Duration, BoxError> {
    let client = ferrolock::Client::connect(url, ferrolock::ClientOptions::default()).await?;
    client.set_hot_path_for_tests(hot);
    let lock = client.lock("bench:stack", ferrolock::LockOptions::lease(Duration::from_secs(10)))?;
    let wait = Some(Duration::from_secs(10));
    let mut t0 = Instant::now();
    for i in 0..WARMUP + pairs {
        if i == WARMUP {
            t0 = Instant::now();
        }
        lock.acquire(wait).await?.release().await?;
    }
    Ok(t0.elapsed())
}

async fn with_redis_rs(url: &str, pairs: usize) -> Result<Duration, BoxError> {
    let mut conn = ConnectionManager::new(redis::Client::open(url)?).await?;
    let (acquire, release) = (redis::Script::new(ACQUIRE), redis::Script::new(RELEASE));
    let mut t0 = Instant::now();
    for i in 0..WARMUP + pairs {
        if i == WARMUP {
            t0 = Instant::now();
        }
        let mut inv = acquire.key(HOLD);
        inv.key(FENCE);
        for a in ACQUIRE_ARGS {
            inv.arg(a);
        }
        let _: redis::Value = inv.invoke_async(&mut conn).await?;
        let _: i64 = release.key(HOLD).arg(TOKEN).arg(CHANNEL).arg(0).invoke_async(&mut conn).await?;
    }
    Ok(t0.elapsed())
}

/// Loads `source` and returns its SHA1.
fn load(port: u16, source: &str) -> Result<String, BoxError> {
    let mut s = StdStream::connect(("127.0.0.1", port))?;
    s.write_all(&encode(&["SCRIPT", "LOAD", source]))?;
    let mut buf = vec![0u8; 256];
    let mut have = 0;
    while complete(&buf[..have]).is_none() {
        have += s.read(&mut buf[have..])?;
    }
    let text = String::from_utf8_lossy(&buf[..have]).into_owned();
    Ok(text.lines().nth(1).ok_or("no SHA in the SCRIPT LOAD reply")?.to_owned())
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let port: u16 = args.first().ok_or("usage: client-stack PORT [PAIRS] [ROUNDS]")?.parse()?;
    let pairs: usize = args.get(1).map_or(Ok(5000), |a| a.parse())?;
    let rounds: usize = args.get(2).map_or(Ok(3), |a| a.parse())?;
    // Profiling one stack alone (strace, callgrind): its row number, 1-based.
    let only: Option<usize> = args.get(3).map(|a| a.parse()).transpose()?;
    let runs = |row: usize| only.is_none_or(|o| o == row + 1);
    let url = format!("redis://127.0.0.1:{port}");
    let (acq_sha, rel_sha, cad_sha) =
        (load(port, ACQUIRE)?, load(port, RELEASE)?, load(port, COMPARE_AND_DELETE)?);
    let mut acquire = vec!["EVALSHA", &acq_sha, "2", HOLD, FENCE];
    acquire.extend(ACQUIRE_ARGS);
    let (acquire, release) =
        (encode(&acquire), encode(&["EVALSHA", &rel_sha, "1", HOLD, TOKEN, CHANNEL, "0"]));
    let bare_acquire = encode(&["SET", "bench:stack:bare", TOKEN, "NX", "PX", "10000"]);
    let bare_release = encode(&["EVALSHA", &cad_sha, "1", "bench:stack:bare", TOKEN]);

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let names = [
        "ferrolock",
        "ferrolock, multiplexed connection only",
        "redis-rs ConnectionManager, same scripts",
        "tokio TcpStream, same scripts",
        "std TcpStream, same scripts",
        "std TcpStream, SET NX PX + compare-and-delete",
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for _ in 0..rounds {
        if runs(0) {
            times[0].push(rt.block_on(with_ferrolock(&url, pairs, true))?);
        }
        if runs(1) {
            times[1].push(rt.block_on(with_ferrolock(&url, pairs, false))?);
        }
        if runs(2) {
            times[2].push(rt.block_on(with_redis_rs(&url, pairs))?);
        }
        if runs(3) {
            times[3].push(rt.block_on(async {
                let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
                s.set_nodelay(true)?;
                bare(&mut s, &acquire, &release, pairs).await
            })?);
        }
        let mut s = StdStream::connect(("127.0.0.1", port))?;
        s.set_nodelay(true)?;
        if runs(4) {
            times[4].push(rt.block_on(bare(&mut s, &acquire, &release, pairs))?);
        }
        if runs(5) {
            times[5].push(rt.block_on(bare(&mut s, &bare_acquire, &bare_release, pairs))?);
        }
    }
    println!(
        "| client stack ({pairs} pairs, median of {rounds} interleaved rounds) | µs per pair | pairs/s |"
    );
    println!("|---|---:|---:|");
    for (name, mut t) in names.iter().zip(times).filter(|(_, t)| !t.is_empty()) {
        t.sort();
        let us = t[t.len() / 2].as_secs_f64() * 1e6 / pairs as f64;
        println!("| {name} | {us:.1} | {:.0} |", 1e6 / us);
    }
    Ok(())
}
