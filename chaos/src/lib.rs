//! The reliability suite of `RELIABILITY.md` (issue 9): a nemesis that faults real
//! `redis-server` processes, user-space link proxies, a fenced resource that logs every
//! operation, clients in several languages that write JSON-lines histories, and a checker that
//! reads only those histories, the resource's log and the probes' observations.
//!
//! Layout:
//! - [`checker`]: written once, independent of ferrolock (it uses only `std` and `serde_json`;
//!   nothing in it imports the library). `chaos check DIR` runs it on a finished run.
//! - [`resource`]: the protected resource (a counter behind a line protocol, fenced or not).
//! - [`probe`]: per-master observers: a `PTTL`/fence poller and a `MONITOR` recorder.
//! - [`netns`]: kernel partitions: clients in network namespaces, cut by `iptables` DROP rules.
//! - [`proxy`]: the user-space link proxy: adjustable one-way delay (N4) and blackholing of a
//!   (client, master) link (N5 partitions).
//! - [`history`]: the JSON-lines history writer the Rust client uses (Python and Node clients
//!   in `chaos/clients/` write the same format).
//! - [`resp`]: a minimal RESP2 client for probes and fault commands (no library involved).

pub mod checker;
pub mod history;
pub mod netns;
pub mod probe;
pub mod proxy;
pub mod resource;
pub mod resp;

/// CLOCK_MONOTONIC in nanoseconds: comparable across processes on one host (Python's
/// `time.monotonic_ns()` and Node's `process.hrtime.bigint()` read the same clock on Linux).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A small seeded generator (splitmix64): the nemesis schedule and client jitter are
/// reproducible from the seed recorded in `summary.json`.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi]` (inclusive).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// Send `sig` to `pid` (a process this suite started).
pub fn signal(pid: u32, sig: libc::c_int) -> bool {
    // SAFETY: plain kill(2) on a pid we started.
    unsafe { libc::kill(pid as libc::pid_t, sig) == 0 }
}
