//! Observers on each master, independent of the library:
//!
//! - the **expiry probe** polls the lock's hold key (`fence` and `owner` fields and `PTTL`)
//!   every few ms and records every change as
//!   `{"node","t_send","t_recv","t_prev_send","fence","owner","pttl"}` in `probe.jsonl`; the
//!   key's real expiry lies in `[t_send + pttl, t_recv + pttl + 1 ms]`, and the change happened
//!   after `t_prev_send`, when the previous poll (which still saw the old state) was sent (null
//!   after a reconnect). A poll that ends more than [`MAX_GAP_NS`] after the previous one was sent
//!   (the probe was descheduled) is recorded even when nothing changed: a hold can come and go
//!   unseen in such a gap, so the old line's state is certain only up to the poll before it.
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

/// The longest time from one poll's send to the next one's reply in which the probe still
/// vouches for "no change in between" (see `record`). Every hold a client keeps lasts longer:
/// a critical section works at least 5 ms between its fenced read and write, and a master
/// holds the lock from before the grant until after the release is invoked.
pub const MAX_GAP_NS: u64 = 5_000_000;

/// What one poll read: fence, expiry (reply time + PTTL, ns) and owner.
type State = (Option<u64>, u64, Option<String>);

/// Whether a poll answered at `t_recv` gets a line: its holder differs from
/// the last line's, its expiry moved by more than 3 ms (a renewal), or it ends more than
/// [`MAX_GAP_NS`] after the previous poll was sent, so a hold may have come and gone between
/// them unseen.
fn record(last: Option<&State>, prev_send: Option<u64>, t_recv: u64, now: &State) -> bool {
    let Some((f, e, o)) = last else { return true };
    let (fence, expiry, owner) = now;
    let changed = f != fence || o != owner || (fence.is_some() && e.abs_diff(*expiry) > 3_000_000);
    changed || prev_send.is_some_and(|p| t_recv.saturating_sub(p) > MAX_GAP_NS)
}

/// Poll `hold_key` on `addr` every `every` until `stop`; append changes to `out`.
pub fn expiry_probe(
    node: usize,
    addr: String,
    hold_key: String,
    every: Duration,
    out: Arc<Mutex<File>>,
    stop: Arc<AtomicBool>,
) {
    let mut last: Option<State> = None;
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
                let now = (fence, t_recv + (pttl.max(0) as u64) * 1_000_000, owner);
                if record(last.as_ref(), prev_send, t_recv, &now) {
                    let line = json!({"node": node, "t_send": t_send, "t_recv": t_recv, "t_prev_send": prev_send,
                                      "fence": now.0, "owner": now.2, "pttl": pttl});
                    last = Some(now);
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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_poll_is_recorded_on_a_change_or_after_a_gap() {
        let held = (Some(7), 1000 * MS, Some("a".to_owned()));
        let gone = (None, 10 * MS, None);
        // The first poll, and any change of holder.
        assert!(record(None, None, 10 * MS, &gone));
        assert!(record(Some(&gone), Some(8 * MS), 10 * MS, &held));
        assert!(record(Some(&held), Some(8 * MS), 10 * MS, &gone));
        // The same state 2 ms apart: nothing to write; an expiry moved 4 ms is a renewal.
        assert!(!record(Some(&gone), Some(8 * MS), 10 * MS, &(None, 12 * MS, None)));
        assert!(!record(Some(&held), Some(8 * MS), 10 * MS, &(Some(7), 1002 * MS, Some("a".to_owned()))));
        assert!(record(Some(&held), Some(8 * MS), 10 * MS, &(Some(7), 1004 * MS, Some("a".to_owned()))));
        // The same state after a stall (reply 5.5 ms after the previous send): a hold of 5 ms
        // could have come and gone in between, so the line is written.
        assert!(record(Some(&gone), Some(8 * MS), 8 * MS + MAX_GAP_NS + MS / 2, &gone));
        assert!(!record(Some(&gone), Some(8 * MS), 8 * MS + MAX_GAP_NS, &gone));
        // After a reconnect (no previous poll) only a change counts.
        assert!(!record(Some(&gone), None, 100 * MS, &gone));
    }
}
