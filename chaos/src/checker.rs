//! The checker: written once, independent of the library under test. It reads only files in a
//! run directory and imports nothing from ferrolock:
//!
//! - `run.json`: the run's configuration (written by the orchestrator);
//! - `history-*.jsonl`: the clients' histories (format: [`crate::history`]);
//! - `resource.jsonl`: the fenced resource's log, in the order it applied operations;
//! - `probe.jsonl`, `monitor.jsonl`: observations of the masters ([`crate::probe`]);
//! - `nemesis.jsonl`: the faults injected (`{"t_mono_ns","fault","action","pid",...}`);
//! - `clients.jsonl`: how each client process ended.
//!
//! It computes the figures of RELIABILITY.md and the pass/fail criteria of issue 9. An
//! indeterminate outcome (`info`) counts as "may have happened": an `info` acquire has no known
//! fence and never proves a violation; an `info` release leaves the hold open until its lease.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use serde_json::{Value, json};

const MS: f64 = 1_000_000.0;

/// One history line.
#[derive(Clone, Debug, Default)]
pub struct Ev {
    pub process: String,
    pub pid: u64,
    pub lang: String,
    pub op: String,
    pub ty: String,
    pub fence: Option<u64>,
    pub validity_ms: Option<f64>,
    pub t: u64,
    pub error: Option<String>,
    pub message: Option<String>,
    pub deadline_ns: Option<u64>,
    /// An `ok` acquire's depth: above 1 the handle already held the lock (a re-entry).
    pub count: Option<u64>,
}

/// One critical section: from an `ok` acquire to the release (or the process's end).
#[derive(Clone, Debug, Default)]
pub struct Cs {
    pub process: String,
    pub lang: String,
    pub pid: u64,
    pub fence: u64,
    pub t_inv: u64,
    pub t_ok: u64,
    pub validity_ms: f64,
    /// Believed expiry (CLOCK_MONOTONIC ns), updated by `deadline` events (renewals).
    pub deadlines: Vec<(u64, u64)>,
    pub lost_t: Option<u64>,
    /// Release invoked (or the process's last event / kill time when it never released).
    pub t_end: u64,
    pub rel_ty: Option<String>,
    pub rel_t: Option<u64>,
    pub crashed: bool,
    /// Opened by an acquire that re-entered a hold its handle still had (depth above 1): after
    /// a release that failed (a server loading its AOF answers `BUSY LOADING`), the handle still
    /// holds, and the client's next acquire is a re-entry with the same fence, not a new grant.
    pub reentry: bool,
}

/// A resource log line.
#[derive(Clone, Debug, Default)]
pub struct ResOp {
    pub t: u64,
    pub client: String,
    pub op: String,
    pub fence: u64,
    pub accepted: bool,
    pub value: i64,
}

fn read_lines(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    // A line cut by kill -9 is skipped (it is the last one of its file).
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn u(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(|x| x.as_u64().or_else(|| x.as_f64().map(|f| f as u64)))
}

fn s(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(|x| x.as_str()).map(str::to_owned)
}

pub fn parse_event(v: &Value) -> Option<Ev> {
    Some(Ev {
        process: s(v, "process")?,
        pid: u(v, "pid").unwrap_or(0),
        lang: s(v, "lang").unwrap_or_default(),
        op: s(v, "op")?,
        ty: s(v, "type")?,
        fence: u(v, "fence"),
        validity_ms: v.get("validity_ms").and_then(Value::as_f64),
        t: u(v, "t_mono_ns")?,
        error: s(v, "error"),
        message: s(v, "message"),
        deadline_ns: u(v, "deadline_ns"),
        count: u(v, "count"),
    })
}

fn pct(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Critical sections of every process, from the histories.
pub fn critical_sections(events: &[Ev], kills: &HashMap<u64, u64>) -> Vec<Cs> {
    let mut by_proc: BTreeMap<&str, Vec<&Ev>> = BTreeMap::new();
    for e in events {
        by_proc.entry(&e.process).or_default().push(e);
    }
    let mut out = Vec::new();
    for evs in by_proc.values_mut() {
        evs.sort_by_key(|e| e.t);
        let mut open: Option<Cs> = None;
        let mut last_inv = 0;
        let last_t = evs.last().map_or(0, |e| e.t);
        for e in evs.iter() {
            match (e.op.as_str(), e.ty.as_str()) {
                ("acquire", "invoke") => last_inv = e.t,
                ("acquire", "ok") => {
                    if let Some(mut c) = open.take() {
                        c.t_end = c.t_end.max(c.t_ok);
                        out.push(c);
                    }
                    let v = e.validity_ms.unwrap_or(0.0);
                    open = Some(Cs {
                        process: e.process.clone(),
                        lang: e.lang.clone(),
                        pid: e.pid,
                        fence: e.fence.unwrap_or(0),
                        t_inv: last_inv,
                        t_ok: e.t,
                        validity_ms: v,
                        deadlines: vec![(e.t, e.deadline_ns.unwrap_or(e.t + (v * MS) as u64))],
                        t_end: 0,
                        reentry: e.count.is_some_and(|n| n > 1),
                        ..Cs::default()
                    });
                }
                ("deadline", _) => {
                    if let (Some(c), Some(d)) = (open.as_mut(), e.deadline_ns)
                        && e.fence.is_none_or(|f| f == c.fence)
                    {
                        c.deadlines.push((e.t, d));
                    }
                }
                ("lost", _) => {
                    // The notification may arrive after the release was invoked; attach by fence.
                    let target = open.as_mut().filter(|c| e.fence.is_none_or(|f| f == c.fence));
                    if let Some(c) = target {
                        c.lost_t.get_or_insert(e.t);
                    } else if let Some(c) =
                        out.iter_mut().rev().find(|c| c.process == e.process && Some(c.fence) == e.fence)
                    {
                        c.lost_t.get_or_insert(e.t);
                    }
                }
                ("release", "invoke") => {
                    if let Some(c) = open.as_mut()
                        && c.t_end == 0
                    {
                        c.t_end = e.t;
                    }
                }
                ("release", ty) => {
                    if let Some(mut c) = open.take() {
                        if c.t_end == 0 {
                            c.t_end = e.t;
                        }
                        c.rel_ty = Some(ty.to_owned());
                        c.rel_t = Some(e.t);
                        out.push(c);
                    }
                }
                _ => {}
            }
        }
        if let Some(mut c) = open.take() {
            // Never released: the process ended or was killed while holding.
            c.crashed = true;
            let end = kills.get(&c.pid).copied().unwrap_or(last_t);
            if c.t_end == 0 {
                c.t_end = end.max(c.t_ok);
            }
            out.push(c);
        }
    }
    out.sort_by_key(|c| (c.t_ok, c.fence));
    out
}

/// New grants that repeat an earlier grant's fence. A re-entry keeps its hold's fence by design.
fn fence_duplicates(cs: &[Cs]) -> u64 {
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for c in cs.iter().filter(|c| !c.reentry) {
        *seen.entry(c.fence).or_default() += 1;
    }
    seen.values().filter(|&&n| n > 1).map(|&n| n - 1).sum()
}

/// Resource-side violations.
#[derive(Debug, Default)]
pub struct ResourceFindings {
    pub accepted_writes: u64,
    pub final_value: i64,
    pub lost_updates: i64,
    pub fence_order_violations: u64,
    pub interleavings: u64,
    pub rejected: u64,
    /// (client, fence) pairs that had an op rejected / a violating accepted op.
    pub rejected_by: HashSet<(String, u64)>,
    pub violating: HashSet<(String, u64)>,
}

pub fn check_resource(ops: &[ResOp]) -> ResourceFindings {
    let mut f = ResourceFindings::default();
    let mut highest = 0u64;
    // Per client: the accepted read that opened its current read-modify-write, and the index of
    // the resource op at that time.
    let mut open_read: HashMap<&str, (u64, usize)> = HashMap::new();
    let mut last_other: Vec<(usize, &str, u64)> = Vec::new(); // (index, client, fence) of accepted ops
    for (i, op) in ops.iter().enumerate() {
        if !op.accepted {
            f.rejected += 1;
            f.rejected_by.insert((op.client.clone(), op.fence));
            if op.op == "write" {
                open_read.remove(op.client.as_str());
            }
            continue;
        }
        if op.fence < highest {
            f.fence_order_violations += 1;
            f.violating.insert((op.client.clone(), op.fence));
        }
        highest = highest.max(op.fence);
        if op.op == "read" {
            open_read.insert(&op.client, (op.fence, i));
        } else {
            f.accepted_writes += 1;
            f.final_value = op.value;
            if let Some((rf, ri)) = open_read.remove(op.client.as_str()) {
                // Any accepted op of another holder between this read and this write?
                let foreign = last_other
                    .iter()
                    .rev()
                    .take_while(|(j, _, _)| *j > ri)
                    .any(|(_, c, fe)| *c != op.client || *fe != rf);
                if foreign || rf != op.fence {
                    f.interleavings += 1;
                    f.violating.insert((op.client.clone(), op.fence));
                }
            }
        }
        last_other.push((i, &op.client, op.fence));
    }
    f.lost_updates = f.accepted_writes as i64 - f.final_value;
    f
}

/// W5: the lock history alone against a fenced-mutex model. Grants are ordered by fence; each
/// operation needs a linearization point inside its [invoke, completion] interval, in the order
/// acquire(f1) release(f1) acquire(f2) ... Greedy earliest points decide it exactly.
pub fn fenced_mutex_linearizable(cs: &[Cs]) -> Result<(), String> {
    let mut v: Vec<&Cs> = cs.iter().collect();
    v.sort_by_key(|c| c.fence);
    let mut point = 0u64;
    for c in v {
        let p = point.max(c.t_inv);
        if p > c.t_ok {
            return Err(format!(
                "acquire of fence {} by {} completed at {} before the previous hold could be released (earliest point {})",
                c.fence, c.process, c.t_ok, p
            ));
        }
        point = p;
        // The release (or the lease's end for a crashed/lost holder) comes after the grant.
        let (r_inv, r_done) = match (c.rel_ty.as_deref(), c.rel_t) {
            (Some("ok"), Some(t)) => (c.t_end, t),
            _ => (c.t_ok, c.rel_t.unwrap_or(u64::MAX).max(c.t_end)),
        };
        let p = point.max(r_inv);
        if p > r_done {
            return Err(format!("release of fence {} by {} cannot follow its grant", c.fence, c.process));
        }
        point = p;
    }
    Ok(())
}

/// Probe observation.
#[derive(Clone, Debug, Default)]
struct Obs {
    node: u64,
    t_send: u64,
    t_recv: u64,
    /// When the previous poll, which still saw the old state, was sent: the change happened
    /// after it (absent after a reconnect and in probes of older runs).
    t_prev: Option<u64>,
    fence: Option<u64>,
    /// The hold's owner token (absent in probes of older runs).
    owner: Option<String>,
    pttl: i64,
}

impl Obs {
    /// The latest the key can expire, as of this observation: read at `t_recv`, PTTL rounded
    /// down by less than 1 ms.
    fn expiry_max(&self) -> f64 {
        self.t_recv as f64 + (self.pttl as f64 + 1.0) * MS
    }

    /// The earliest this state can have begun.
    fn since(&self) -> u64 {
        self.t_prev.unwrap_or(self.t_send)
    }
}

/// One hold as the probe saw it on one master: consecutive observations of the key with one
/// owner and one grant. A Redlock grant's fence write-back changes the `fence` field but not the
/// expiry, so it continues the hold; a new grant changes the fence *and* moves the expiry (or
/// the owner); a re-entry or renewal moves the expiry and keeps the fence.
#[derive(Clone, Debug)]
struct Seg<'a> {
    node: u64,
    first: &'a Obs,
    /// Every change line of the hold, `first` included.
    obs: Vec<&'a Obs>,
    fences: Vec<u64>,
    owner: Option<&'a str>,
    /// `t_recv` of the first observation without this hold (key gone or another hold), if any.
    gone: Option<u64>,
    /// The last time the hold was certainly still there: the send time of the last poll that
    /// saw it (a starved probe can see it gone long after it went); `gone` when that poll's
    /// time is unknown (a probe line without `t_prev_send`).
    seen_until: u64,
}

/// The holds on every master, from the probe's change lines (`probes` sorted by `t_send`).
fn hold_segments(probes: &[Obs]) -> Vec<Seg<'_>> {
    let mut out: Vec<Seg> = Vec::new();
    let mut open: HashMap<u64, (usize, &Obs)> = HashMap::new(); // node -> (index in out, last obs)
    for o in probes {
        let cur = open.get(&o.node).copied();
        let Some(f) = o.fence else {
            if let Some((k, _)) = open.remove(&o.node) {
                out[k].gone = Some(o.t_recv);
                out[k].seen_until = o.t_prev.map_or(o.t_recv, |p| out[k].seen_until.max(p));
            }
            continue;
        };
        if let Some((k, last)) = cur {
            let same_owner = last.owner == o.owner;
            let same_expiry = (last.expiry_max() - o.expiry_max()).abs() <= 3.0 * MS;
            if same_owner && (last.fence == Some(f) || same_expiry) {
                if !out[k].fences.contains(&f) {
                    out[k].fences.push(f);
                }
                out[k].obs.push(o);
                out[k].seen_until = out[k].seen_until.max(o.t_send);
                open.insert(o.node, (k, o));
                continue;
            }
            out[k].gone = Some(o.t_recv);
            out[k].seen_until = o.t_prev.map_or(o.t_recv, |p| out[k].seen_until.max(p));
        }
        out.push(Seg {
            node: o.node,
            first: o,
            obs: vec![o],
            fences: vec![f],
            owner: o.owner.as_deref(),
            gone: None,
            seen_until: o.t_send,
        });
        open.insert(o.node, (out.len() - 1, o));
    }
    out
}

/// Validity error at grant, single master and Redlock alike: the believed expiry the client
/// reported with its grant (at `t_ok`) minus the latest the lock can really have expired as of
/// then. A Redlock lock is free for another client once fewer than `quorum` masters hold it, so
/// its real expiry is the `quorum`-th latest of the per-master expiries. The holds of a grant
/// are those that appeared after the acquire was invoked and carried the grant's fence (on a
/// Redlock master, once the fence was written back; a master the write-back missed is left
/// out, which can only make the real expiry earlier and the error larger). Each hold's expiry
/// is the one of its last observed state that may have begun before `t_ok`: an acquire that
/// returns late (a descheduled client) reports a deadline its watchdog has already moved, and
/// renewals or re-entries after `t_ok` do not count. No sample when fewer than `quorum` holds
/// were seen.
fn validity_errors(cs: &[Cs], segs: &[Seg], quorum: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for c in cs {
        let mut per_node: BTreeMap<u64, &Seg> = BTreeMap::new();
        for sg in segs {
            let t = sg.first.t_send;
            if sg.fences.contains(&c.fence) && t >= c.t_inv && t < c.t_end.max(c.t_ok) && sg.first.pttl >= 0 {
                let e = per_node.entry(sg.node).or_insert(sg);
                if t < e.first.t_send {
                    *e = sg;
                }
            }
        }
        let mut expiries: Vec<f64> = per_node
            .values()
            .map(|sg| {
                let at_ok =
                    sg.obs.iter().rev().find(|o| o.since() < c.t_ok && o.pttl >= 0).unwrap_or(&sg.first);
                at_ok.expiry_max()
            })
            .collect();
        if quorum == 0 || expiries.len() < quorum {
            continue;
        }
        expiries.sort_by(|a, b| b.total_cmp(a));
        let believed = c.deadlines.first().map_or(c.t_ok as f64 + c.validity_ms * MS, |d| d.1 as f64);
        out.push((believed - expiries[quorum - 1]) / MS);
    }
    out
}

/// Leaked-lock time after each kill -9 of a holder (`(t_kill, fence of its grant)`): from the
/// kill until fewer than `quorum` masters still hold the killed grant. Its holds are the ones
/// alive at the kill that carry its fence or its owner (a Redlock master the fence write-back
/// missed still shows the owner). A hold is taken to be gone after the last poll that still saw
/// it (the figure is a lower bound, so a probe starved by a loaded machine cannot inflate it,
/// while a hold something keeps renewing is seen alive for as long as it lives); one never seen
/// gone counts as gone at `observed_until`
/// (a lower bound).
fn leaked_lock_ms(kills: &[(u64, u64)], segs: &[Seg], quorum: usize, observed_until: u64) -> Vec<f64> {
    let mut out = Vec::new();
    for &(t_kill, fence) in kills {
        let owners: HashSet<&str> =
            segs.iter().filter(|sg| sg.fences.contains(&fence)).filter_map(|sg| sg.owner).collect();
        let mut per_node: BTreeMap<u64, u64> = BTreeMap::new();
        for sg in segs {
            let alive = sg.first.t_recv <= t_kill && sg.gone.is_none_or(|g| g > t_kill);
            let ours = sg.fences.contains(&fence) || sg.owner.is_some_and(|o| owners.contains(o));
            if alive && ours {
                let until = if sg.gone.is_some() { sg.seen_until } else { observed_until };
                per_node.insert(sg.node, until.max(t_kill));
            }
        }
        let mut free_at: Vec<u64> = per_node.into_values().collect();
        if quorum == 0 || free_at.len() < quorum {
            continue;
        }
        free_at.sort_unstable();
        out.push((free_at[free_at.len() - quorum] - t_kill) as f64 / MS);
    }
    out
}

/// One master's change line and the interval `[from, to)` its state is certain (empty when
/// `to <= from`).
type Certain<'a> = (u64, u64, &'a Obs);

/// Renewals after release, from MONITOR lines (`{"node", "t_mono_ns", "args"}`, the script shapes
/// of docs/PROTOCOL.md): an extend on a master that saw this token's count-0 release since the
/// token's last acquire, once a quorum of masters saw one (the client released the hold). A
/// count-0 script on a minority alone (a grant undone on those masters) is not the hold's
/// release: while the hold lives on a quorum the watchdog still renews it on every master, and
/// extend.lua changes nothing where it is gone. Returns the count and the first few.
fn renewals_after_release(monitor: impl IntoIterator<Item = Value>, quorum: u64) -> (u64, Vec<Value>) {
    let mut released: HashMap<(String, String), HashSet<u64>> = HashMap::new();
    let mut renew_after_release = 0u64;
    let mut renew_examples = Vec::new();
    for m in monitor {
        let node = u(&m, "node").unwrap_or(0);
        let args: Vec<String> = m
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        if args.len() < 3 {
            continue;
        }
        let nkeys: usize = args[2].parse().unwrap_or(99);
        let rest = &args[3.min(args.len())..];
        if nkeys == 0 || rest.len() < nkeys {
            continue;
        }
        let (keys, argv) = rest.split_at(nkeys);
        let token = (keys[0].clone(), argv.first().cloned().unwrap_or_default());
        let after_release = |released: &HashMap<(String, String), HashSet<u64>>| {
            released.get(&token).is_some_and(|nodes| nodes.contains(&node) && nodes.len() as u64 >= quorum)
        };
        match (nkeys, argv.len()) {
            // acquire.lua: ARGV[5] (fair mode, with 4 keys), ARGV[6] (Redlock floor) and ARGV[7]
            // (Redlock re-entry) optional; fair mode's ARGV[8] (the hand-over's offer) with 4 keys
            (2, 4..=7) | (4, 5) | (4, 8) => {
                released.remove(&token);
            }
            (1, 3) | (1, 4) | (1, 5) if argv[2] == "0" => {
                released.entry(token).or_default().insert(node);
            }
            (1, 2) if after_release(&released) => {
                renew_after_release += 1;
                if renew_examples.len() < 5 {
                    renew_examples
                        .push(json!({"node": node, "key": keys[0], "t_mono_ns": u(&m, "t_mono_ns")}));
                }
            }
            _ => {}
        }
    }
    (renew_after_release, renew_examples)
}

/// A lost Redlock hold as the probe proves it: the first instant at which enough masters were
/// certainly not holding it, and those masters.
#[derive(Clone, Debug, PartialEq)]
struct QuorumLoss {
    at: u64,
    nodes: Vec<u64>,
}

/// Redlock ground truth of lost holds (`masters` > 1): a critical section's hold is lost when,
/// at some instant in `[t_ok, t_end]` (grant to release invoked), at least `masters - quorum +
/// 1` masters were certainly not holding it, so fewer than a quorum held it and another client
/// could take the lock.
///
/// Only what the probe saw counts, never the gaps between its polls. It writes change lines
/// only, so the state a change line `L` shows is certain from `L.t_recv` until the `t_prev`
/// (send time of the last poll that still saw it) of the master's next change line; when that
/// line has no `t_prev` (a reconnect: the server was down or unreachable), from `L.t_recv` to
/// `L.t_recv`, i.e. not at all. A master's last state is certain until `observed_until` (the
/// probes stop after every client has ended). A state is also known at the instant its line's
/// poll read it, somewhere in `[L.t_send, L.t_recv]`: such a read within the hold counts when
/// enough other masters were certainly not holding all through that window (a state seen by
/// one poll only is certain for no interval, yet it is proof at its read).
///
/// A master is not holding when its key is absent, or held with another fence *and* another
/// owner. The hold's owners are the owner tokens seen with its fence on any master (a master
/// the fence write-back missed shows the owner with another fence: that is still this hold);
/// if the probe never saw the fence, those of every fence of the same process (one lock handle
/// per client process); if none is known, only an absent key counts. A line without an owner
/// (probes of older runs) counts as holding unless the key is absent.
fn quorum_lost(
    cs: &[Cs],
    probes: &[Obs],
    masters: usize,
    quorum: usize,
    observed_until: u64,
) -> BTreeMap<usize, QuorumLoss> {
    let mut out = BTreeMap::new();
    let need = (masters + 1).saturating_sub(quorum);
    if need == 0 {
        return out;
    }
    // Per master, every change line with the interval its state is certain: [from, to), empty
    // when `to <= from` (seen by one poll only, or followed by a reconnect).
    let mut lines: BTreeMap<u64, Vec<&Obs>> = BTreeMap::new();
    for o in probes {
        lines.entry(o.node).or_default().push(o);
    }
    let states: Vec<(u64, Vec<Certain>)> = lines
        .into_iter()
        .map(|(node, ls)| {
            let mut v = Vec::new();
            for (i, l) in ls.iter().enumerate() {
                let from = l.t_recv;
                let to = match ls.get(i + 1) {
                    Some(next) => next.t_prev.unwrap_or(from),
                    None => observed_until,
                };
                v.push((from, to, *l));
            }
            (node, v)
        })
        .collect();
    // Owner tokens of each fence, and of each process's fences.
    let mut fence_owners: HashMap<u64, HashSet<&str>> = HashMap::new();
    for o in probes {
        if let (Some(f), Some(ow)) = (o.fence, o.owner.as_deref()) {
            fence_owners.entry(f).or_default().insert(ow);
        }
    }
    let mut proc_owners: HashMap<&str, HashSet<&str>> = HashMap::new();
    for c in cs {
        if let Some(os) = fence_owners.get(&c.fence) {
            proc_owners.entry(&c.process).or_default().extend(os.iter().copied());
        }
    }
    let empty = HashSet::new();
    for (i, c) in cs.iter().enumerate() {
        if c.t_end <= c.t_ok {
            continue;
        }
        let owners =
            fence_owners.get(&c.fence).or_else(|| proc_owners.get(c.process.as_str())).unwrap_or(&empty);
        let not_holding = |o: &Obs| match o.fence {
            None => true,
            Some(f) => {
                f != c.fence
                    && o.owner.as_deref().is_some_and(|ow| !owners.is_empty() && !owners.contains(ow))
            }
        };
        // Clipped intervals [from, to) in which a master was certainly not holding, and the
        // read windows [t_send, t_recv] of not-holding change lines within the hold.
        let mut ivs: Vec<(u64, u64, u64)> = Vec::new(); // (from, to, node)
        let mut windows: Vec<(u64, u64, u64)> = Vec::new(); // (t_send, t_recv, node)
        for (node, v) in &states {
            // Lines before the last one sent before t_ok end their certainty before t_ok.
            let first = v.partition_point(|(_, _, o)| o.t_send < c.t_ok).saturating_sub(1);
            for (from, to, o) in v[first..].iter().take_while(|(_, _, o)| o.t_send < c.t_end) {
                if !not_holding(o) {
                    continue;
                }
                let (a, b) = ((*from).max(c.t_ok), (*to).min(c.t_end));
                if a < b {
                    ivs.push((a, b, *node));
                }
                if o.t_send >= c.t_ok && o.t_recv <= c.t_end {
                    windows.push((o.t_send, o.t_recv, *node));
                }
            }
        }
        let mut found: Option<QuorumLoss> = None;
        // Sweep: ends sort before starts at the same instant, so intervals that only touch
        // never count.
        let mut edges: Vec<(u64, bool, u64)> =
            ivs.iter().flat_map(|&(a, b, n)| [(a, true, n), (b, false, n)]).collect();
        edges.sort_unstable();
        let mut now: Vec<u64> = Vec::new();
        for (t, starts, node) in edges {
            if !starts {
                if let Some(k) = now.iter().position(|n| *n == node) {
                    now.swap_remove(k);
                }
                continue;
            }
            now.push(node);
            if now.len() >= need {
                now.sort_unstable();
                found = Some(QuorumLoss { at: t, nodes: now });
                break;
            }
        }
        // A state seen by a single poll is certain for no interval, but it held at the instant
        // of that poll's read, somewhere in [t_send, t_recv]: a loss if enough other masters
        // were certainly not holding all through that window.
        windows.sort_unstable_by_key(|w| w.1);
        for &(s_, e, m) in &windows {
            if found.as_ref().is_some_and(|f| f.at <= e) {
                continue;
            }
            let mut nodes: Vec<u64> =
                ivs.iter().filter(|&&(a, b, n)| n != m && a <= s_ && b >= e).map(|iv| iv.2).collect();
            if nodes.len() + 1 >= need {
                nodes.push(m);
                nodes.sort_unstable();
                found = Some(QuorumLoss { at: e, nodes });
            }
        }
        if let Some(f) = found {
            out.insert(i, f);
        }
    }
    out
}

/// How well the probe kept up: its lines, and those that follow a gap over
/// [`crate::probe::MAX_GAP_NS`] since the previous poll (the state before a gap is certain only
/// up to it), with the longest gap. Many gaps mean a starved probe and fewer provable losses.
fn probe_health(probes: &[Obs]) -> Value {
    let gaps: Vec<u64> = probes
        .iter()
        .filter_map(|o| Some(o.t_recv.saturating_sub(o.t_prev?)))
        .filter(|&g| g > crate::probe::MAX_GAP_NS)
        .collect();
    json!({"lines": probes.len(), "lines_after_a_gap": gaps.len(),
           "longest_gap_ms": gaps.iter().max().map(|&g| round(g as f64 / MS))})
}

/// Everything the checker concludes about one run directory.
pub fn check_run(dir: &Path) -> Value {
    let cfg: Value = std::fs::read_to_string(dir.join("run.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let fenced = cfg.get("fenced").and_then(Value::as_bool).unwrap_or(true);
    let control = !fenced;
    let ttl_ms = cfg.get("ttl_ms").and_then(Value::as_f64).unwrap_or(1000.0);
    let masters = u(&cfg, "masters").unwrap_or(1);
    let quorum = u(&cfg, "quorum").unwrap_or(1);
    let expect_no_overlap = cfg.get("expect_no_overlap").and_then(Value::as_bool).unwrap_or(false);
    let long_pauses = cfg.get("long_pauses").and_then(Value::as_bool).unwrap_or(true);
    let fault_free = cfg.get("fault_free").and_then(Value::as_bool).unwrap_or(false);
    let duration_s = cfg.get("duration_s").and_then(Value::as_f64).unwrap_or(1.0).max(0.001);
    // W4: clients cancel acquires at random (B1).
    let w4 = cfg.get("w4_cancelled_acquires").is_some_and(|v| !v.is_null());

    // Histories.
    let mut events = Vec::new();
    let mut garbage = 0u64;
    if let Ok(rd) = std::fs::read_dir(dir) {
        let mut files: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        files.sort();
        for p in files {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with("history-") && name.ends_with(".jsonl") {
                for v in read_lines(&p) {
                    match parse_event(&v) {
                        Some(e) => events.push(e),
                        None => garbage += 1,
                    }
                }
            }
        }
    }
    let nemesis = read_lines(&dir.join("nemesis.jsonl"));
    let kills: HashMap<u64, u64> = nemesis
        .iter()
        .filter(|n| s(n, "fault").as_deref() == Some("kill_holder"))
        .filter_map(|n| Some((u(n, "pid")?, u(n, "t_mono_ns")?)))
        .collect();
    let cs = critical_sections(&events, &kills);

    // Acquisitions per language.
    let mut per_lang: BTreeMap<String, [u64; 3]> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut noscript = 0u64;
    let mut reentry_fence_mismatch = 0u64;
    let mut over_release_ok = 0u64;
    for e in &events {
        if e.op == "acquire" {
            let slot = match e.ty.as_str() {
                "ok" => 0,
                "fail" => 1,
                "info" => 2,
                _ => continue,
            };
            per_lang.entry(e.lang.clone()).or_default()[slot] += 1;
        }
        if let Some(err) = &e.error {
            *errors.entry(format!("{}:{}", e.op, err)).or_default() += 1;
        }
        let text = format!("{} {}", e.error.as_deref().unwrap_or(""), e.message.as_deref().unwrap_or(""));
        if text.to_ascii_uppercase().contains("NOSCRIPT") {
            noscript += 1;
        }
        if e.op == "reenter" && e.ty == "ok" {
            // A nested acquire after the outer hold was lost is a fresh grant (new fence). The
            // loss may be found by that very acquire (the server lost the hold, e.g. a restart
            // without persistence, before the watchdog noticed): the client then reports it as
            // the nested grant returns, so its report may come just after. A new fence is a
            // violation only when the outer hold's loss is never reported (a silent change).
            let holder = cs.iter().rev().find(|c| c.process == e.process && c.t_ok <= e.t);
            if holder.is_some_and(|c| Some(c.fence) != e.fence && c.lost_t.is_none()) {
                reentry_fence_mismatch += 1;
            }
        }
        if e.op == "over_release" && e.ty == "ok" {
            over_release_ok += 1;
        }
    }
    let acquisitions: u64 = per_lang.values().map(|v| v[0]).sum();
    let failed: u64 = per_lang.values().map(|v| v[1]).sum();
    let indeterminate: u64 = per_lang.values().map(|v| v[2]).sum();

    // Overlaps (double holders in real time).
    // A double grant is an overlap where the earlier holder was still within its believed
    // deadline and not told it was LOST when the other acquired (a lease lock's promise);
    // an overlap after the holder's deadline is the case only fencing can catch.
    let (overlapping, double_grants) = overlaps(&cs);

    // Resource.
    let res_ops: Vec<ResOp> = read_lines(&dir.join("resource.jsonl"))
        .iter()
        .filter_map(|v| {
            Some(ResOp {
                t: u(v, "t_mono_ns")?,
                client: s(v, "client")?,
                op: s(v, "op")?,
                fence: u(v, "fence")?,
                accepted: v.get("accepted")?.as_bool()?,
                value: v.get("value").and_then(Value::as_i64).unwrap_or(0),
            })
        })
        .collect();
    let rf = check_resource(&res_ops);
    let undetected = rf.lost_updates.max(0) as u64 + rf.fence_order_violations + rf.interleavings;
    let (mut prevented, mut harmless, mut undetected_cs) = (0u64, 0u64, 0u64);
    for &i in &overlapping {
        let key = (cs[i].process.clone(), cs[i].fence);
        if rf.violating.contains(&key) {
            undetected_cs += 1;
        } else if rf.rejected_by.contains(&key) {
            prevented += 1;
        } else {
            harmless += 1;
        }
    }

    // Fences.
    let duplicates = fence_duplicates(&cs);
    let mut inversions = 0u64;
    let mut maxf = 0u64;
    for c in &cs {
        if c.fence < maxf {
            inversions += 1;
        }
        maxf = maxf.max(c.fence);
    }

    // Validity at grant.
    let validity = sorted(cs.iter().map(|c| c.validity_ms).collect());
    let min_validity = validity.first().copied();

    // Probe: the holds on each master.
    let probes: Vec<Obs> = read_lines(&dir.join("probe.jsonl"))
        .iter()
        .filter_map(|v| {
            Some(Obs {
                node: u(v, "node")?,
                t_send: u(v, "t_send")?,
                t_recv: u(v, "t_recv")?,
                t_prev: u(v, "t_prev_send"),
                fence: u(v, "fence"),
                owner: s(v, "owner"),
                pttl: v.get("pttl")?.as_i64()?,
            })
        })
        .collect();
    let mut probes = probes;
    probes.sort_by_key(|o| (o.t_send, o.node));
    let segs = hold_segments(&probes);
    let validity_err = sorted(validity_errors(&cs, &segs, quorum as usize));
    // The end of observation: the probes stop after every client has ended.
    let observed_until = events.iter().map(|e| e.t).max().unwrap_or(0);
    // Ground truth of lost holds besides overlaps, from the probe (see `quorum_lost` for Redlock).
    let mut key_gone_while_held: HashSet<usize> = HashSet::new();
    let mut quorum_losses: BTreeMap<usize, QuorumLoss> = BTreeMap::new();
    // Probes of older runs (no `t_prev_send`) make no Redlock state certain: overlaps only.
    let ground_truth_rule = if probes.is_empty() || (masters > 1 && probes.iter().all(|o| o.t_prev.is_none()))
    {
        "overlap-only"
    } else if masters == 1 {
        "probe-single"
    } else {
        "probe-quorum"
    };
    if masters > 1 {
        quorum_losses = quorum_lost(&cs, &probes, masters as usize, quorum as usize, observed_until);
        key_gone_while_held.extend(quorum_losses.keys().copied());
    } else {
        for (i, c) in cs.iter().enumerate() {
            // Ground truth of a lost hold: the key was seen gone or owned by another fence after
            // the grant and before the holder invoked its release.
            let from = probes.partition_point(|o| o.t_send <= c.t_ok);
            if probes[from..].iter().take_while(|o| o.t_recv < c.t_end).any(|o| o.fence != Some(c.fence)) {
                key_gone_while_held.insert(i);
            }
        }
    }
    let unowned = if masters == 1 { unowned_holds(&cs, &probes) } else { Vec::new() };
    let unowned_max =
        unowned.iter().map(|u| u.1).fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    let cancelled =
        events.iter().filter(|e| e.op == "acquire" && e.error.as_deref() == Some("CANCELLED")).count();

    // Lost-lock notifications.
    let stops: Vec<(u64, u64, &str)> = nemesis
        .iter()
        .filter_map(|n| Some((u(n, "pid")?, u(n, "t_mono_ns")?, n.get("action")?.as_str()?)))
        .collect();
    let truth: HashSet<usize> =
        overlapping.iter().copied().chain(key_gone_while_held.iter().copied()).collect();
    let mut truth_alive: Vec<usize> = truth.iter().copied().filter(|&i| !cs[i].crashed).collect();
    truth_alive.sort_unstable();
    let overlapping_set: HashSet<usize> = overlapping.iter().copied().collect();
    let truth_by_overlap = truth_alive.iter().filter(|i| overlapping_set.contains(i)).count();
    let truth_by_probe = truth_alive.iter().filter(|i| key_gone_while_held.contains(i)).count();
    let notified = truth_alive.iter().filter(|&&i| cs[i].lost_t.is_some()).count();
    let missed: Vec<Value> = truth_alive
        .iter()
        .filter(|&&i| cs[i].lost_t.is_none())
        .map(|&i| {
            let c = &cs[i];
            let mut m = json!({"process": c.process, "pid": c.pid, "fence": c.fence, "t_ok": c.t_ok, "t_end": c.t_end,
                               "rel": c.rel_ty, "by_overlap": overlapping_set.contains(&i),
                               "by_probe": key_gone_while_held.contains(&i)});
            if let Some(q) = quorum_losses.get(&i) {
                m["probe_at"] = json!(q.at);
                m["masters_not_holding"] = json!(q.nodes);
            }
            m
        })
        .take(10)
        .collect();
    // The Redlock losses the probe proves, for a reader to check (the first few).
    let probe_examples: Vec<Value> = quorum_losses
        .iter()
        .take(5)
        .map(|(&i, q)| {
            let c = &cs[i];
            json!({"process": c.process, "fence": c.fence, "t_ok": c.t_ok, "t_end": c.t_end, "at": q.at,
                   "masters_not_holding": q.nodes, "lost_t": c.lost_t, "crashed": c.crashed,
                   "by_overlap": overlapping_set.contains(&i)})
        })
        .collect();
    let mut latency: Vec<f64> = Vec::new();
    for &i in &truth_alive {
        let c = &cs[i];
        let Some(t) = c.lost_t else { continue };
        let deadline = c.deadlines.iter().filter(|(at, _)| *at <= t).map(|(_, d)| *d).max().unwrap_or(c.t_ok);
        let resumed = stops
            .iter()
            .filter(|(pid, at, act)| *pid == c.pid && *act == "cont" && *at <= t)
            .map(|(_, at, _)| *at)
            .max()
            .unwrap_or(0);
        latency.push((t as f64 - deadline.max(resumed) as f64) / MS);
    }
    let latency = sorted(latency);
    let false_pos = cs.iter().enumerate().filter(|(i, c)| c.lost_t.is_some() && !truth.contains(i)).count();
    let recall = if truth_alive.is_empty() { 1.0 } else { notified as f64 / truth_alive.len() as f64 };

    let (renew_after_release, renew_examples) =
        renewals_after_release(read_lines(&dir.join("monitor.jsonl")), quorum as u64);

    // Leaked locks: holder killed → the lock free again (fewer than a quorum of masters hold it).
    let kills_fenced: Vec<(u64, u64)> = nemesis
        .iter()
        .filter(|n| s(n, "fault").as_deref() == Some("kill_holder"))
        .filter_map(|n| Some((u(n, "t_mono_ns")?, u(n, "fence")?)))
        .collect();
    let leaked = leaked_lock_ms(&kills_fenced, &segs, quorum as usize, observed_until);
    let leaked = sorted(leaked);

    // Handoff latency.
    let mut handoff = Vec::new();
    let mut handoff_crash = Vec::new();
    for w in cs.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let rel = match (a.rel_ty.as_deref(), a.rel_t) {
            (Some("ok"), Some(t)) => t,
            _ => u64::MAX,
        };
        let expiry = a.t_ok + (a.validity_ms * MS) as u64;
        let from = rel.min(expiry);
        let h = (b.t_ok.saturating_sub(from)) as f64 / MS;
        if a.crashed { handoff_crash.push(h) } else { handoff.push(h) }
    }
    let handoff = sorted(handoff);

    // W5.
    let w5 = if long_pauses {
        Value::String("not applicable (pauses longer than validity)".into())
    } else {
        match fenced_mutex_linearizable(&cs) {
            Ok(()) => Value::String("pass".into()),
            Err(e) => Value::String(format!("FAIL: {e}")),
        }
    };

    // Clients.
    let clients = read_lines(&dir.join("clients.jsonl"));
    let crashed_clients: Vec<Value> = clients
        .iter()
        .filter(|c| {
            !c.get("ok").and_then(Value::as_bool).unwrap_or(false)
                && !c.get("killed_by_nemesis").and_then(Value::as_bool).unwrap_or(false)
        })
        .cloned()
        .collect();

    let throughput: BTreeMap<String, f64> =
        per_lang.iter().map(|(l, v)| (l.clone(), round(v[0] as f64 / duration_s))).collect();
    let per_lang_json: BTreeMap<String, Value> =
        per_lang.iter().map(|(l, v)| (l.clone(), json!({"ok": v[0], "fail": v[1], "info": v[2]}))).collect();

    let figures = json!({
        "acquisitions": acquisitions,
        "failed_acquires": failed,
        "indeterminate_acquires": indeterminate,
        "per_language": per_lang_json,
        "critical_sections": cs.len(),
        "overlapping_cs": overlapping.len(),
        "double_grants": double_grants,
        "overlaps_prevented": prevented,
        "overlaps_harmless": harmless,
        "overlaps_undetected_cs": undetected_cs,
        "undetected_overlaps": undetected,
        "lost_updates": rf.lost_updates,
        "fence_order_violations": rf.fence_order_violations,
        "interleavings": rf.interleavings,
        "resource_rejected": rf.rejected,
        "resource_accepted_writes": rf.accepted_writes,
        "counter_final": rf.final_value,
        "fence_duplicates": duplicates,
        "fence_inversions": inversions,
        "validity_at_grant_ms": {"min": min_validity.map(round), "p1": pct(&validity, 1.0).map(round)},
        "validity_error_ms": {"max": validity_err.last().copied().map(round), "p50": pct(&validity_err, 50.0).map(round), "samples": validity_err.len()},
        "lost_notifications": {
            "ground_truth": truth_alive.len(), "notified": notified, "recall": round(recall),
            "ground_truth_rule": ground_truth_rule,
            "ground_truth_by_overlap": truth_by_overlap, "ground_truth_by_probe": truth_by_probe,
            "latency_ms_p50": pct(&latency, 50.0).map(round), "latency_ms_max": latency.last().copied().map(round),
            "false_positives": false_pos,
            "false_positive_rate": round(false_pos as f64 / cs.len().max(1) as f64),
            "missed_examples": missed,
            "probe_quorum_examples": probe_examples,
        },
        "cancelled_acquires": cancelled,
        "probe": probe_health(&probes),
        "hold_without_holder_ms": {
            "max": unowned_max.map(round),
            "examples": unowned.iter().filter(|u| u.1 > ttl_ms).take(5).map(|u| json!({"fence": u.0, "ms": round(u.1)})).collect::<Vec<_>>(),
        },
        "renewals_after_release": renew_after_release,
        "renewals_after_release_examples": renew_examples,
        "leaked_lock_ms": {"kills": leaked.len(), "max": leaked.last().copied().map(round), "p50": pct(&leaked, 50.0).map(round)},
        "handoff_ms": {"p50": pct(&handoff, 50.0).map(round), "p99": pct(&handoff, 99.0).map(round), "max": handoff.last().copied().map(round),
                       "after_crash_max": sorted(handoff_crash).last().copied().map(round)},
        "w5_fenced_mutex": w5,
        "throughput_per_s": throughput,
        "errors": errors,
        "noscript_errors": noscript,
        "reentry_fence_mismatch": reentry_fence_mismatch,
        "over_release_accepted": over_release_ok,
        "unparseable_history_lines": garbage,
        "client_failures": crashed_clients,
    });

    // Criteria (issue 9 "must hold"; timing figures are reported, not asserted).
    let mut crit: Vec<(String, bool, String)> = Vec::new();
    let mut add = |name: &str, ok: bool, detail: String| crit.push((name.to_owned(), ok, detail));
    add("histories present", acquisitions > 0, format!("{acquisitions} ok acquires"));
    if control {
        add("control shows violations (undetected overlaps > 0)", undetected > 0, format!("{undetected}"));
    } else {
        add(
            "undetected overlaps = 0",
            undetected == 0,
            format!(
                "{undetected} (lost updates {}, fence-order {}, interleavings {})",
                rf.lost_updates, rf.fence_order_violations, rf.interleavings
            ),
        );
        add(
            "overlaps prevented or harmless = overlapping CS",
            undetected_cs == 0,
            format!("{} overlapping, {prevented} prevented, {harmless} harmless", overlapping.len()),
        );
    }
    if expect_no_overlap {
        // Overlaps after the holder's deadline or LOST report are counted above (fencing's job).
        add(
            "no double grants (overlap within the holder's validity, not told LOST)",
            double_grants == 0,
            format!("{double_grants} ({} overlapping CS)", overlapping.len()),
        );
    }
    add("fence duplicates = 0", duplicates == 0, format!("{duplicates}"));
    if let Some(m) = min_validity {
        add("min validity at grant > 0", m > 0.0, format!("{m:.3} ms"));
    }
    if let Some(m) = validity_err.last() {
        add("validity error <= 0 (client conservative)", *m <= 0.0, format!("max {m:.3} ms"));
    }
    add("lost-lock recall 100%", recall >= 1.0, format!("{notified}/{}", truth_alive.len()));
    if fault_free {
        add(
            "lost-lock false positives <= 0.1%",
            (false_pos as f64) <= 0.001 * cs.len() as f64,
            format!("{false_pos}"),
        );
    }
    add("renewals after release = 0", renew_after_release == 0, format!("{renew_after_release}"));
    if w4 && masters == 1 {
        // B1's other half: a cancelled acquire whose grant stayed behind, renewed by a watchdog
        // nobody will stop, is a hold no critical section owns that outlives its lease.
        let m = unowned_max.unwrap_or(0.0);
        add(
            "hold without a holder <= TTL + 100 ms (B1: cancelled acquires leave no hold)",
            m <= ttl_ms + 100.0,
            format!("max {m:.1} ms over {} holds, {cancelled} cancelled acquires", unowned.len()),
        );
    }
    if let Some(m) = leaked.last() {
        add("leaked-lock time <= TTL + 100 ms", *m <= ttl_ms + 100.0, format!("max {m:.1} ms"));
    }
    if !long_pauses {
        add("W5 fenced-mutex linearizable", w5 == "pass", w5.as_str().unwrap_or("").to_owned());
    }
    add("0 user-visible NOSCRIPT errors", noscript == 0, format!("{noscript}"));
    add("re-entry keeps the fence", reentry_fence_mismatch == 0, format!("{reentry_fence_mismatch}"));
    add("over-release never succeeds", over_release_ok == 0, format!("{over_release_ok}"));
    add("no client crashed", crashed_clients.is_empty(), format!("{}", crashed_clients.len()));
    add("history lines parse", garbage == 0, format!("{garbage}"));
    let pass = crit.iter().all(|c| c.1);
    json!({
        "figures": figures,
        "criteria": crit.iter().map(|(n, ok, d)| json!({"name": n, "pass": ok, "detail": d})).collect::<Vec<_>>(),
        "pass": pass,
    })
}

/// Single master: for every hold the probe saw (a run of observations with one fence), how long
/// it existed outside `[acquire invoked, release completed]` of the critical sections with that
/// fence (all of it when no acquire reported the fence, e.g. a cancelled one). Conservative:
/// the hold is taken to appear at the first observation's reply and to vanish when the next
/// observation was sent. A hold of a crashed holder or a failed release lasts up to its lease.
fn unowned_holds(cs: &[Cs], probes: &[Obs]) -> Vec<(u64, f64)> {
    let obs: Vec<&Obs> = probes.iter().filter(|o| o.node == 0).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < obs.len() {
        let Some(f) = obs[i].fence else {
            i += 1;
            continue;
        };
        let start = obs[i].t_recv;
        let mut j = i + 1;
        while j < obs.len() && obs[j].fence == Some(f) {
            j += 1;
        }
        let end = obs.get(j).map_or(obs[j - 1].t_recv, |o| o.t_send).max(start);
        let owners: Vec<&Cs> = cs.iter().filter(|c| c.fence == f).collect();
        let unowned = if owners.is_empty() {
            end - start
        } else {
            let from = owners.iter().map(|c| c.t_inv).min().unwrap_or(start);
            let to = owners.iter().map(|c| c.rel_t.unwrap_or(c.t_end).max(c.t_end)).max().unwrap_or(end);
            from.saturating_sub(start).min(end - start) + end.saturating_sub(to.max(start)).min(end - start)
        };
        out.push((f, unowned as f64 / MS));
        i = j;
    }
    out
}

/// Overlapping critical sections (indices of the earlier one) and, among them, double grants:
/// the later grant came while the earlier holder was still within its believed deadline and had
/// not been told LOST (a lease lock's promise). An overlap after that is the case only fencing
/// can catch.
fn overlaps(cs: &[Cs]) -> (Vec<usize>, u64) {
    let mut overlapping: Vec<usize> = Vec::new();
    let mut double_grants = 0u64;
    for (i, a) in cs.iter().enumerate() {
        let Some(b) = cs[i + 1..]
            .iter()
            .take_while(|b| b.t_ok < a.t_end)
            .find(|b| b.fence > a.fence && b.t_ok > a.t_ok)
        else {
            continue;
        };
        overlapping.push(i);
        let believed = a.deadlines.iter().filter(|(at, _)| *at <= b.t_ok).map(|(_, d)| *d).max().unwrap_or(0);
        if b.t_ok < believed && a.lost_t.is_none_or(|l| l > b.t_ok) {
            double_grants += 1;
        }
    }
    (overlapping, double_grants)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(t: u64, client: &str, op: &str, fence: u64, accepted: bool, value: i64) -> ResOp {
        ResOp { t, client: client.into(), op: op.into(), fence, accepted, value }
    }

    #[test]
    fn resource_clean_sequence_has_no_violation() {
        let ops = [
            op(1, "a", "read", 10, true, 0),
            op(2, "a", "write", 10, true, 1),
            op(3, "b", "read", 11, true, 1),
            op(4, "b", "write", 11, true, 2),
        ];
        let f = check_resource(&ops);
        assert_eq!((f.lost_updates, f.fence_order_violations, f.interleavings), (0, 0, 0));
    }

    #[test]
    fn resource_finds_a_lost_update_and_interleaving() {
        // a reads, pauses; b reads+writes; a writes its stale value (control: accepted).
        let ops = [
            op(1, "a", "read", 10, true, 0),
            op(2, "b", "read", 11, true, 0),
            op(3, "b", "write", 11, true, 1),
            op(4, "a", "write", 10, true, 1),
        ];
        let f = check_resource(&ops);
        assert_eq!(f.lost_updates, 1);
        assert_eq!(f.fence_order_violations, 1);
        assert_eq!(f.interleavings, 1);
    }

    #[test]
    fn resource_rejection_prevents() {
        let ops = [
            op(1, "a", "read", 10, true, 0),
            op(2, "b", "read", 11, true, 0),
            op(3, "b", "write", 11, true, 1),
            op(4, "a", "write", 10, false, 1),
        ];
        let f = check_resource(&ops);
        assert_eq!((f.lost_updates, f.fence_order_violations, f.interleavings, f.rejected), (0, 0, 0, 1));
        assert!(f.rejected_by.contains(&("a".to_owned(), 10)));
    }

    fn cs(p: &str, fence: u64, inv: u64, ok: u64, end: u64, rel: u64) -> Cs {
        Cs {
            process: p.into(),
            fence,
            t_inv: inv,
            t_ok: ok,
            t_end: end,
            rel_ty: Some("ok".into()),
            rel_t: Some(rel),
            ..Cs::default()
        }
    }

    #[test]
    fn an_acquire_after_a_failed_release_is_a_re_entry_not_a_duplicate_fence() {
        let ev = |op: &str, ty: &str, t: u64, count: Option<u64>| Ev {
            process: "node-6".into(),
            op: op.into(),
            ty: ty.into(),
            fence: Some(7),
            t,
            count,
            ..Ev::default()
        };
        // The release fails while the server loads its AOF: the handle still holds, and the
        // next acquire re-enters (depth 2, same fence).
        let mut events = vec![
            ev("acquire", "ok", 10, Some(1)),
            ev("release", "invoke", 20, None),
            ev("release", "info", 30, None),
            ev("acquire", "ok", 40, Some(2)),
            ev("release", "invoke", 50, None),
            ev("release", "ok", 60, None),
        ];
        let cs = critical_sections(&events, &HashMap::new());
        assert_eq!(cs.iter().map(|c| c.reentry).collect::<Vec<_>>(), [false, true]);
        assert_eq!(fence_duplicates(&cs), 0);
        // Control: a second new grant with that fence is a duplicate.
        events[3].count = Some(1);
        assert_eq!(fence_duplicates(&critical_sections(&events, &HashMap::new())), 1);
    }

    #[test]
    fn a_renewal_counts_as_after_release_only_once_a_quorum_saw_the_release() {
        let line = |node: u64, args: &[&str]| json!({"node": node, "t_mono_ns": 1, "args": args});
        let acquire = |n| line(n, &["EVALSHA", "a", "2", "k", "k:fence", "T", "1000", "9", "10", "", "5"]);
        let release = |n| line(n, &["EVAL", "src", "1", "k", "T", "k:released", "0"]);
        let extend = |n| line(n, &["EVALSHA", "e", "1", "k", "T", "1000"]);
        let pexpire = |n| line(n, &["PEXPIRE", "k", "0"]);
        // Count-0 scripts on masters 0 and 1 only; the hold lives on: renewals are fine.
        let mut m: Vec<Value> = (0..5).map(acquire).collect();
        m.extend([release(0), release(1), pexpire(2)]);
        m.extend((0..5).map(extend));
        assert_eq!(renewals_after_release(m.clone(), 3).0, 0);
        // The client released it (a quorum saw the count-0 release): a renewal there is a defect.
        m.push(release(2));
        m.extend([extend(0), extend(3)]);
        assert_eq!(renewals_after_release(m.clone(), 3).0, 1);
        // A single master (quorum 1): as before, one release there is enough.
        assert_eq!(renewals_after_release([acquire(0), release(0), extend(0)], 1).0, 1);
        // A new acquire (Redlock shape, 6 ARGV) starts afresh.
        m.extend([acquire(0), extend(0)]);
        assert_eq!(renewals_after_release(m, 3).0, 1);
    }

    #[test]
    fn w5_accepts_a_mutex_history_and_rejects_overlap() {
        let good = [cs("a", 1, 0, 10, 20, 25), cs("b", 2, 5, 30, 40, 45)];
        assert!(fenced_mutex_linearizable(&good).is_ok());
        // b's grant completed before a even invoked its release: two holders.
        let bad = [cs("a", 1, 0, 10, 50, 55), cs("b", 2, 5, 30, 40, 45)];
        assert!(fenced_mutex_linearizable(&bad).is_err());
        // Fence order against real-time order: f=2 granted (completed) before f=1 was invoked.
        let inv = [cs("a", 2, 0, 10, 20, 25), cs("b", 1, 30, 40, 50, 55)];
        assert!(fenced_mutex_linearizable(&inv).is_err());
    }

    #[test]
    fn a_hold_no_critical_section_owns_is_measured() {
        let obs = |t: u64, fence: Option<u64>| Obs {
            node: 0,
            t_send: t,
            t_recv: t + 1,
            fence,
            pttl: 300,
            ..Obs::default()
        };
        let probes = [
            obs(0, None),
            obs(10, Some(1)),
            obs(50, Some(1)),
            obs(60, None),
            obs(100, Some(2)),
            obs(900, None),
        ];
        // Fence 1 is owned from invoke 5 to release 60: nothing unowned. Fence 2 (a cancelled
        // acquire's grant left behind) has no owner: all of its 799 ns.
        let c = [cs("a", 1, 5, 8, 60, 60)];
        assert_eq!(unowned_holds(&c, &probes), vec![(1, 0.0), (2, 799.0 / MS)]);
        // Released at 30 but still there until the probe asked again at 60: 30 ns unowned.
        let c = [cs("a", 1, 5, 8, 30, 30)];
        assert_eq!(unowned_holds(&c, &probes)[0], (1, 30.0 / MS));
    }

    #[test]
    fn a_double_grant_is_an_overlap_within_validity_not_reported_lost() {
        let held = |deadline: u64, lost: Option<u64>| {
            let mut a = cs("a", 1, 0, 10, 100, 100);
            a.deadlines = vec![(10, deadline)];
            a.lost_t = lost;
            [a, cs("b", 2, 20, 50, 60, 60)]
        };
        // b granted at 50 while a believed itself valid until 80, unreported: a double grant.
        assert_eq!(overlaps(&held(80, None)), (vec![0], 1));
        // The same overlap after a's deadline (40), or after a was told LOST (at 45): fencing's job.
        assert_eq!(overlaps(&held(40, None)), (vec![0], 0));
        assert_eq!(overlaps(&held(80, Some(45))), (vec![0], 0));
        // No overlap at all.
        let apart = [cs("a", 1, 0, 10, 20, 20), cs("b", 2, 20, 30, 40, 40)];
        assert_eq!(overlaps(&apart), (vec![], 0));
    }

    /// A probe line at `t_ms` (received 1 ms later) on `node`.
    fn ob(node: u64, t_ms: u64, fence: Option<u64>, owner: &str, pttl: i64) -> Obs {
        let t = t_ms * 1_000_000;
        let t_prev = Some(t.saturating_sub(5_000_000));
        Obs { node, t_send: t, t_recv: t + 1_000_000, t_prev, fence, owner: Some(owner.into()), pttl }
    }

    #[test]
    fn redlock_validity_error_is_against_the_quorum_th_expiry() {
        let ms = |x: u64| x * 1_000_000;
        let mut probes = vec![
            // Node 0: granted 97, then the write-back to 100 (same hold: the expiry did not move).
            ob(0, 10, Some(97), "a", 1000),
            ob(0, 15, Some(100), "a", 995),
            // Node 1: granted 100 itself; a re-entry then moves the expiry (same hold).
            ob(1, 12, Some(100), "a", 1000),
            ob(1, 40, Some(100), "a", 1000),
            // Node 2: granted 100.
            ob(2, 14, Some(100), "a", 990),
            // Node 3: another owner's hold, seen before the acquire was invoked: not this grant's.
            ob(3, 1, Some(90), "b", 700),
            ob(3, 30, None, "", -2),
            // Node 4: granted 98, never written back: left out.
            ob(4, 11, Some(98), "a", 1000),
        ];
        probes.sort_by_key(|o| (o.t_send, o.node));
        let segs = hold_segments(&probes);
        let mut a = cs("a", 100, ms(5), ms(20), ms(500), ms(501));
        // Expiries at the grant: node 0 at 11 + 1001, node 1 at 13 + 1001, node 2 at 15 + 991 ms:
        // with quorum 3 the lock is free when the third-latest (node 2, 1006 ms) expires.
        a.deadlines = vec![(ms(20), ms(1000))];
        assert_eq!(validity_errors(std::slice::from_ref(&a), &segs, 3), vec![-6.0]);
        // A client that believed itself valid until 1010 ms was not conservative.
        a.deadlines = vec![(ms(20), ms(1010))];
        assert_eq!(validity_errors(std::slice::from_ref(&a), &segs, 3), vec![4.0]);
        // Quorum 2: the second-latest (node 0, 1012 ms).
        assert_eq!(validity_errors(std::slice::from_ref(&a), &segs, 2), vec![-2.0]);
        // Fewer holds seen than the quorum: no sample rather than a guess.
        assert!(validity_errors(std::slice::from_ref(&a), &segs, 4).is_empty());
        // A hold that appeared before the acquire was invoked is not this grant's.
        a.t_inv = ms(13);
        assert!(validity_errors(std::slice::from_ref(&a), &segs, 2).is_empty());
        assert_eq!(validity_errors(std::slice::from_ref(&a), &segs, 1), vec![4.0]);
    }

    #[test]
    fn an_acquire_that_returns_late_is_checked_against_the_renewed_expiry() {
        let ms = |x: u64| x * 1_000_000;
        // Granted at 10 ms; the watchdog renewed at 340 and 1000 ms. The client's acquire call
        // returned only at 700 ms (descheduled), reporting the deadline of the first renewal.
        let probes = [
            ob(0, 10, Some(100), "a", 1000),
            ob(0, 340, Some(100), "a", 1000),
            ob(0, 1000, Some(100), "a", 1000),
        ];
        let segs = hold_segments(&probes);
        let mut a = cs("a", 100, ms(5), ms(700), ms(900), ms(901));
        a.deadlines = vec![(ms(700), ms(1330))];
        // Against the state as of 700 ms (the renewal at 340: expiry 341 + 1001), not the one at
        // the grant (1011 ms, +319) nor the later renewal.
        assert_eq!(validity_errors(std::slice::from_ref(&a), &segs, 1), vec![-12.0]);
    }

    #[test]
    fn a_new_grant_of_the_same_owner_is_a_new_hold() {
        let probes = [
            ob(0, 0, Some(5), "a", 1000),
            // Released and granted again (fence 6) between two polls: new fence, expiry moved.
            ob(0, 100, Some(6), "a", 1000),
            // Renewal: same fence, expiry moved: the same hold.
            ob(0, 400, Some(6), "a", 1000),
            ob(0, 500, None, "", -2),
        ];
        let segs = hold_segments(&probes);
        assert_eq!(segs.len(), 2);
        assert_eq!((segs[0].fences.clone(), segs[0].gone), (vec![5], Some(101_000_000)));
        assert_eq!((segs[1].fences.clone(), segs[1].gone), (vec![6], Some(501_000_000)));
    }

    #[test]
    fn redlock_leaked_lock_time_ends_when_fewer_than_a_quorum_hold() {
        let probes = [
            ob(0, 10, Some(100), "a", 1000),
            ob(1, 10, Some(100), "a", 1000),
            // Node 2: the write-back missed it, but the owner is the killed holder's.
            ob(2, 10, Some(99), "a", 1000),
            ob(3, 10, Some(80), "z", 1000),
            ob(0, 1000, None, "", -2),
            ob(2, 1050, None, "", -2),
            ob(1, 1100, None, "", -2),
            ob(3, 1200, None, "", -2),
        ];
        let segs = hold_segments(&probes);
        // Killed at 300 ms: three holds (nodes 0, 1, 2); with quorum 3 the lock is free once
        // the first of them is gone (node 0, last seen by the poll sent at 995 ms).
        assert_eq!(leaked_lock_ms(&[(300_000_000, 100)], &segs, 3, 0), vec![695.0]);
        // Quorum 2: once two are gone (node 2, last seen at 1045 ms).
        assert_eq!(leaked_lock_ms(&[(300_000_000, 100)], &segs, 2, 0), vec![745.0]);
        // A starved probe that sees the key gone late (sent at 3000 ms, its previous poll at
        // 1200 ms) does not make the leak longer than the last time the hold was seen.
        let mut late = probes.to_vec();
        late[4] = Obs { t_prev: Some(1_200_000_000), ..ob(0, 3000, None, "", -2) };
        late.sort_by_key(|o| (o.t_send, o.node));
        let segs = hold_segments(&late);
        assert_eq!(leaked_lock_ms(&[(300_000_000, 100)], &segs, 3, 0), vec![745.0]);
        // A hold never seen gone counts until the end of the observation.
        let segs = hold_segments(&probes[..4]);
        assert_eq!(leaked_lock_ms(&[(300_000_000, 100)], &segs, 1, 2_000_000_000), vec![1700.0]);
    }

    /// `quorum_lost` on probe lines in any order (sorted here as `check_run` sorts them), for
    /// critical sections of process "a", observed until 1000 ms.
    fn lost(probes: &[Obs], cs_: &[Cs], masters: usize, quorum: usize) -> BTreeMap<usize, QuorumLoss> {
        let mut probes = probes.to_vec();
        probes.sort_by_key(|o| (o.t_send, o.node));
        quorum_lost(cs_, &probes, masters, quorum, 1_000_000_000)
    }

    const fn ms(x: u64) -> u64 {
        x * 1_000_000
    }

    #[test]
    fn redlock_loss_needs_fewer_than_a_quorum_holding() {
        // 3 masters, quorum 2: lost once 2 are certainly not holding at the same time.
        let probes = [
            ob(0, 10, Some(100), "a", 1000),
            ob(1, 10, Some(100), "a", 1000),
            ob(2, 10, Some(100), "a", 1000),
            // Node 0: expired (absent from 201 ms); node 1: another owner's grant from 301 ms.
            ob(0, 200, None, "", -2),
            ob(1, 300, Some(101), "b", 1000),
        ];
        let a = [cs("a", 100, ms(5), ms(20), ms(500), ms(501))];
        let want = QuorumLoss { at: ms(301), nodes: vec![0, 1] };
        assert_eq!(lost(&probes, &a, 3, 2), BTreeMap::from([(0, want)]));
        // Released (invoked) at 290 ms: only node 0 had gone by then.
        let a = [cs("a", 100, ms(5), ms(20), ms(290), ms(291))];
        assert!(lost(&probes, &a, 3, 2).is_empty());

        // 5 masters, quorum 3: two gone is not a loss, three is.
        let probes = [
            ob(0, 10, Some(100), "a", 1000),
            ob(1, 10, Some(100), "a", 1000),
            ob(2, 10, Some(100), "a", 1000),
            ob(3, 10, Some(100), "a", 1000),
            ob(4, 10, Some(100), "a", 1000),
            ob(0, 200, None, "", -2),
            ob(1, 300, Some(101), "b", 1000),
            ob(2, 350, None, "", -2),
        ];
        let a = [cs("a", 100, ms(5), ms(20), ms(340), ms(341))];
        assert!(lost(&probes, &a, 5, 3).is_empty());
        let a = [cs("a", 100, ms(5), ms(20), ms(500), ms(501))];
        let want = QuorumLoss { at: ms(351), nodes: vec![0, 1, 2] };
        assert_eq!(lost(&probes, &a, 5, 3), BTreeMap::from([(0, want)]));
    }

    #[test]
    fn redlock_a_hold_that_came_and_went_while_the_probe_stalled_is_not_a_loss() {
        // 5 masters, quorum 3. Nodes 0-2 read empty at 90 ms; the probe then stalls until
        // 118 ms, while "a" is granted at 100 ms on all five and released at 110 ms; at 125 ms
        // "b" holds nodes 0-2. Nodes 3 and 4 were seen holding "a".
        let mut probes = Vec::new();
        for n in 0..5 {
            probes.push(ob(n, 90, None, "", -2));
            probes.push(ob(n, 125, Some(101), "b", 1000));
        }
        probes.extend([ob(3, 101, Some(100), "a", 999), ob(4, 101, Some(100), "a", 999)]);
        let a = [cs("a", 100, ms(95), ms(100), ms(110), ms(112))];
        // Control: without a line for the stall, nodes 0-2 read as empty all through the hold.
        let want = QuorumLoss { at: ms(100), nodes: vec![0, 1, 2] };
        assert_eq!(lost(&probes, &a, 5, 3), BTreeMap::from([(0, want)]));
        // The probe writes one when a poll ends over MAX_GAP_NS after the previous send: the
        // empty state is then certain only up to the poll before the stall.
        for n in 0..3 {
            probes.push(Obs { t_prev: Some(ms(89)), ..ob(n, 118, None, "", -2) });
        }
        assert!(lost(&probes, &a, 5, 3).is_empty());
    }

    #[test]
    fn redlock_one_master_of_three_gone_is_not_a_loss() {
        let probes = [
            ob(0, 10, Some(100), "a", 1000),
            ob(1, 10, Some(100), "a", 1000),
            ob(2, 10, Some(100), "a", 1000),
            // Node 0 restarted empty, then another owner took it: never back to "a".
            ob(0, 200, None, "", -2),
            ob(0, 300, Some(101), "b", 1000),
        ];
        let a = [cs("a", 100, ms(5), ms(20), ms(900), ms(901))];
        assert!(lost(&probes, &a, 3, 2).is_empty());
    }

    #[test]
    fn redlock_masters_gone_at_different_times_are_not_a_loss() {
        let probes = [
            ob(0, 10, Some(100), "a", 1000),
            ob(1, 10, Some(100), "a", 1000),
            ob(2, 10, Some(100), "a", 1000),
            // Node 0 not holding from 201 to 295 ms (its next change's previous poll), then the
            // hold back; node 1 not holding from 401 ms on.
            ob(0, 200, None, "", -2),
            ob(0, 300, Some(100), "a", 700),
            ob(1, 400, None, "", -2),
        ];
        let a = [cs("a", 100, ms(5), ms(20), ms(900), ms(901))];
        assert!(lost(&probes, &a, 3, 2).is_empty());
        // Node 0's hold back only at 450 ms (its previous poll sent at 445): overlapping gaps.
        let mut p = probes.to_vec();
        p[4] = ob(0, 450, Some(100), "a", 700);
        let want = QuorumLoss { at: ms(401), nodes: vec![0, 1] };
        assert_eq!(lost(&p, &a, 3, 2), BTreeMap::from([(0, want)]));
    }

    #[test]
    fn redlock_gaps_between_polls_invent_no_loss() {
        // 3 masters, quorum 2, all granted at 10 ms; node 0 certainly not holding from 151 ms.
        let base = [
            ob(0, 10, Some(100), "a", 1000),
            ob(1, 10, Some(100), "a", 1000),
            ob(2, 10, Some(100), "a", 1000),
            ob(0, 150, None, "", -2),
        ];
        let a = [cs("a", 100, ms(5), ms(20), ms(400), ms(401))];
        assert!(lost(&base, &a, 3, 2).is_empty());
        // A starved probe: node 1's last poll that saw the hold was sent at 250 ms, the next one
        // at 300 ms was answered only at 450 ms (key gone). The change happened somewhere in
        // (250, 450]: certain only from 450 ms, after the release was invoked (400 ms).
        let mut p = base.to_vec();
        p.push(Obs { t_send: ms(300), t_recv: ms(450), t_prev: Some(ms(250)), ..ob(1, 300, None, "", -2) });
        assert!(lost(&p, &a, 3, 2).is_empty());
        // Answered at 350 ms instead: certain from then on, a real loss.
        p[4].t_recv = ms(350);
        assert_eq!(lost(&p, &a, 3, 2), BTreeMap::from([(0, QuorumLoss { at: ms(350), nodes: vec![0, 1] })]));
        // Node 2's key seen gone at 100 ms, when node 0 still held; then the probe lost its
        // connection and came back at 600 ms (a line without t_prev): the absence is certain
        // for no time at all, since the last poll before the break is unknown.
        let mut p = base.to_vec();
        p.push(ob(2, 100, None, "", -2));
        p.push(Obs { t_prev: None, ..ob(2, 600, None, "", -2) });
        assert!(lost(&p, &a, 3, 2).is_empty());
        // A change line at 200 ms (another owner's grant) whose previous poll, sent at 195 ms,
        // still saw the key gone: the absence is certain from 101 to 195 ms, with node 0's from
        // 151 ms a loss.
        p.push(ob(2, 200, Some(103), "c", 1000));
        assert_eq!(lost(&p, &a, 3, 2), BTreeMap::from([(0, QuorumLoss { at: ms(151), nodes: vec![0, 2] })]));
    }

    #[test]
    fn redlock_a_state_seen_by_one_poll_counts_at_its_read() {
        // 3 masters, quorum 2. Node 1's key seen gone by one poll (sent at 200 ms, answered at
        // 201 ms), then the probe reconnected: certain for no interval, but gone at that read.
        let probes = |node0_gone_ms: u64| {
            [
                ob(0, 10, Some(100), "a", 1000),
                ob(1, 10, Some(100), "a", 1000),
                ob(2, 10, Some(100), "a", 1000),
                ob(0, node0_gone_ms, None, "", -2),
                ob(1, 200, None, "", -2),
                Obs { t_prev: None, ..ob(1, 600, None, "", -2) },
            ]
        };
        let a = [cs("a", 100, ms(5), ms(20), ms(400), ms(401))];
        // Node 0 certainly gone from 151 ms, all through node 1's read: a loss, known at 201 ms.
        assert_eq!(
            lost(&probes(150), &a, 3, 2),
            BTreeMap::from([(0, QuorumLoss { at: ms(201), nodes: vec![0, 1] })])
        );
        // Node 0 gone only from 200.5 ms: within the read's window, so not proven at the read.
        let mut p = probes(150).to_vec();
        p[3] = Obs { t_send: ms(200), t_recv: 200_500_000, t_prev: Some(ms(195)), ..p[3].clone() };
        assert!(lost(&p, &a, 3, 2).is_empty());
        // Node 0 gone from 301 ms, after the read: no loss.
        assert!(lost(&probes(300), &a, 3, 2).is_empty());
    }

    #[test]
    fn redlock_owner_with_another_fence_is_still_holding() {
        let probes = |node2_owner: &str| {
            [
                ob(0, 10, Some(100), "a", 1000),
                ob(1, 10, Some(100), "a", 1000),
                // Node 2: this grant's owner with the fence node 2 issued (write-back missed).
                ob(2, 10, Some(99), node2_owner, 1000),
                ob(0, 200, None, "", -2),
            ]
        };
        let a = [cs("a", 100, ms(5), ms(20), ms(500), ms(501))];
        assert!(lost(&probes("a"), &a, 3, 2).is_empty());
        // Another owner's hold with fence 99 on node 2: fewer than a quorum held it from 201 ms.
        let want = QuorumLoss { at: ms(201), nodes: vec![0, 2] };
        assert_eq!(lost(&probes("b"), &a, 3, 2), BTreeMap::from([(0, want)]));
        // This hold's fence under another owner (a fence reissued after a restart without
        // persistence) proves no loss either: every owner seen with the fence counts as its own.
        let mut p = probes("b").to_vec();
        p[2].fence = Some(100);
        assert!(lost(&p, &a, 3, 2).is_empty());
        // Fence 100 never seen by the probe (every master still shows the fence it issued):
        // the owner comes from the process's earlier grant (fence 90, seen on node 0)...
        let unseen = |node2_owner: &str| {
            let mut p = probes(node2_owner).to_vec();
            p[0].fence = Some(98);
            p[1].fence = Some(98);
            p
        };
        let with_earlier = |node2_owner: &str| {
            let mut p = unseen(node2_owner);
            p.push(ob(0, 1, Some(90), "a", 1000));
            p
        };
        let two = [cs("a", 90, 0, ms(1), ms(2), ms(3)), cs("a", 100, ms(5), ms(20), ms(500), ms(501))];
        assert!(lost(&with_earlier("a"), &two, 3, 2).is_empty());
        let want = QuorumLoss { at: ms(201), nodes: vec![0, 2] };
        assert_eq!(lost(&with_earlier("b"), &two, 3, 2), BTreeMap::from([(1, want)]));
        // ... and with no owner known at all, only an absent key counts as not holding.
        assert!(lost(&unseen("b"), &a, 3, 2).is_empty());
    }
}
