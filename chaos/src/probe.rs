//! Observers on each master, independent of the library:
//!
//! - the **expiry probe** polls the lock's hold key (`fence` and `owner` fields and `PTTL`)
//!   every few ms and records every change as
//!   `{"node","t_send","t_recv","t_prev_send","fence","owner","pttl"}` in `probe.jsonl`; the
//!   key's real expiry lies in `[t_send + pttl, t_recv + pttl + 1 ms]`, and the change happened
//!   after `t_prev_send`, when the previous poll (which still saw the old state) was sent (null
//!   after a reconnect).
//!   The owner (token) tells the holds of one grant apart on the masters of a Redlock, whose
//!   `fence` fields differ until the grant's fence is written back;
//! - the **command recorder** runs `MONITOR` and keeps every `EVAL`/`EVALSHA` line as
//!   `{"node","t_mono_ns","args":[...]}` in `monitor.jsonl` (for "renewals after release").
//!
//! Both reconnect after a server restart; what happens while a server is down is not observed
//! (the server is not running either).

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::monotonic_ns;
use crate::resp::{Conn, Val};

const PROBE: &str = "return {redis.call('hget', KEYS[1], 'fence') or false, redis.call('pttl', KEYS[1]), \
                     redis.call('hget', KEYS[1], 'owner') or false}";

/// Poll `hold_key` on `addr` until `stop`; append changes to `out`.
pub fn expiry_probe(
    node: usize,
    addr: String,
    hold_key: String,
    every: Duration,
    out: Arc<Mutex<File>>,
    stop: Arc<AtomicBool>,
) {
    let mut last: Option<(Option<u64>, u64, Option<String>)> = None;
    let mut prev_send: Option<u64> = None;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = Conn::connect(&addr, Duration::from_millis(200)) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        while !stop.load(Ordering::Relaxed) {
            let t_send = monotonic_ns();
            let Ok(v) = c.cmd(&["EVAL", PROBE, "1", &hold_key]) else { break };
            let t_recv = monotonic_ns();
            if let Val::Array(Some(items)) = v {
                let fence = items.first().and_then(Val::as_int).map(|f| f as u64);
                let pttl = items.get(1).and_then(Val::as_int).unwrap_or(-2);
                let owner = match items.get(2) {
                    Some(Val::Bulk(Some(b))) => Some(String::from_utf8_lossy(b).into_owned()),
                    _ => None,
                };
                // Record changes of holder, and expiry moves of more than 3 ms (renewals).
                let expiry = t_recv + (pttl.max(0) as u64) * 1_000_000;
                let changed = match &last {
                    None => true,
                    Some((f, e, o)) => {
                        *f != fence || *o != owner || (fence.is_some() && e.abs_diff(expiry) > 3_000_000)
                    }
                };
                if changed {
                    let line = json!({"node": node, "t_send": t_send, "t_recv": t_recv, "t_prev_send": prev_send,
                                      "fence": fence, "owner": owner, "pttl": pttl});
                    last = Some((fence, expiry, owner));
                    let mut f = out.lock().unwrap_or_else(|p| p.into_inner());
                    let _ = writeln!(f, "{line}");
                }
                prev_send = Some(t_send);
            }
            std::thread::sleep(every);
        }
        last = None;
        prev_send = None;
    }
}

/// `MONITOR` on `addr` until `stop`; keep the EVAL/EVALSHA lines.
pub fn command_recorder(node: usize, addr: String, out: Arc<Mutex<File>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut c) = Conn::connect(&addr, Duration::from_millis(200)) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        if c.cmd(&["MONITOR"]).is_err() {
            continue;
        }
        let _ = c.set_read_timeout(Some(Duration::from_millis(200)));
        while !stop.load(Ordering::Relaxed) {
            match c.read() {
                Ok(Val::Simple(line)) => {
                    let args = parse_monitor_args(&line);
                    let is_eval = args
                        .first()
                        .is_some_and(|a| a.eq_ignore_ascii_case("evalsha") || a.eq_ignore_ascii_case("eval"));
                    if is_eval && !line.contains(" lua]") {
                        let rec = json!({"node": node, "t_mono_ns": monotonic_ns(), "args": args});
                        let mut f = out.lock().unwrap_or_else(|p| p.into_inner());
                        let _ = writeln!(f, "{rec}");
                    }
                }
                Ok(_) => {}
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break,
            }
        }
    }
}

/// The quoted arguments of one MONITOR line (`<ts> [db addr] "a" "b\x00" ...`), unescaped
/// (non-UTF-8 bytes are kept as `\xNN` text).
pub fn parse_monitor_args(line: &str) -> Vec<String> {
    let Some(start) = line.find("] ") else { return Vec::new() };
    let mut out = Vec::new();
    let mut chars = line[start + 2..].chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut s = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => s.push('\n'),
                    Some('r') => s.push('\r'),
                    Some('t') => s.push('\t'),
                    Some('x') => {
                        s.push_str("\\x");
                        s.extend(chars.next());
                        s.extend(chars.next());
                    }
                    Some(o) => s.push(o),
                    None => {}
                },
                o => s.push(o),
            }
        }
        out.push(s);
    }
    out
}
