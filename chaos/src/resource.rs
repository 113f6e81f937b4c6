//! The protected resource: one counter (`res:ctr`) behind a line protocol, as in the demo
//! (examples/README.md), plus a log of every operation in the order the resource applied them.
//!
//! ```text
//! HELLO <client-id> <pid>  → OK
//! READ <fence>             → OK <value>   | REJECT <highest>
//! WRITE <fence> <value>    → OK           | REJECT <highest>
//! ```
//!
//! Fenced mode rejects any read or write whose token is lower than the highest seen (the check
//! a resource must make, docs/GUARANTEES.md). The control mode accepts everything, so that an
//! overlap the lock does not prevent becomes a lost update the checker must find.
//!
//! Log lines (`resource.jsonl`): `{"t_mono_ns","client","pid","op","fence","accepted",
//! "value","highest"}` where `value` is the value read or written and `highest` the highest
//! token seen before this operation.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::monotonic_ns;

/// A client that read under a token and has not written yet: it is inside its critical section.
#[derive(Clone, Debug)]
pub struct InCs {
    pub client: String,
    pub pid: u32,
    pub fence: u64,
    pub since_ns: u64,
}

#[derive(Debug, Default)]
pub struct State {
    pub highest: u64,
    pub value: i64,
    pub reads: u64,
    pub accepted_writes: u64,
    pub rejected: u64,
    /// Clients between an accepted READ and their WRITE.
    pub in_cs: HashMap<String, InCs>,
    log: Option<File>,
}

#[derive(Debug)]
pub struct Resource {
    pub addr: String,
    pub state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

impl Resource {
    /// Listen on a free loopback port; `fenced = false` is the control mode.
    pub fn start(log: &Path, fenced: bool) -> std::io::Result<Resource> {
        Self::start_on(log, fenced, "127.0.0.1")
    }

    /// Listen on a free port of `ip` (kernel partitions: the address the client namespaces reach).
    pub fn start_on(log: &Path, fenced: bool, ip: &str) -> std::io::Result<Resource> {
        let listener = TcpListener::bind((ip, 0))?;
        let addr = listener.local_addr()?.to_string();
        let state = Arc::new(Mutex::new(State { log: Some(File::create(log)?), ..State::default() }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, stp) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stp.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let st = st.clone();
                std::thread::spawn(move || serve(conn, st, fenced));
            }
        });
        Ok(Resource { addr, state, stop })
    }

    /// The client that most recently entered its critical section, if it is still inside.
    pub fn holder(&self) -> Option<InCs> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.in_cs.values().max_by_key(|c| c.since_ns).cloned()
    }

    pub fn reads(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).reads
    }

    /// Stop accepting connections and flush the log.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(&self.addr);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = s.log.as_mut() {
            let _ = f.flush();
        }
    }
}

fn serve(conn: TcpStream, st: Arc<Mutex<State>>, fenced: bool) {
    let _ = conn.set_nodelay(true);
    let Ok(mut out) = conn.try_clone() else { return };
    let (mut client, mut pid) = (String::from("?"), 0u32);
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        let parts: Vec<&str> = line.split_whitespace().collect();
        let reply = match parts.as_slice() {
            ["HELLO", id, p] => {
                client = (*id).to_owned();
                pid = p.parse().unwrap_or(0);
                "OK".to_owned()
            }
            ["READ", f] | ["WRITE", f, _] => match f.parse::<u64>() {
                Ok(fence) => apply(&st, fenced, &client, pid, parts[0], fence, parts.get(2).copied()),
                Err(_) => "ERR bad fence".to_owned(),
            },
            _ => "ERR bad command".to_owned(),
        };
        if out.write_all(format!("{reply}\n").as_bytes()).is_err() {
            return;
        }
    }
}

fn apply(
    st: &Mutex<State>,
    fenced: bool,
    client: &str,
    pid: u32,
    op: &str,
    fence: u64,
    arg: Option<&str>,
) -> String {
    let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
    let now = monotonic_ns();
    let before = s.highest;
    let stale = fence < before;
    let accepted = !(fenced && stale);
    let (reply, value) = if op == "READ" {
        s.reads += 1;
        if accepted {
            s.in_cs.insert(client.to_owned(), InCs { client: client.to_owned(), pid, fence, since_ns: now });
            (format!("OK {}", s.value), s.value)
        } else {
            (format!("REJECT {before}"), s.value)
        }
    } else {
        s.in_cs.remove(client);
        let Some(v) = arg.and_then(|v| v.parse::<i64>().ok()) else {
            return "ERR bad value".to_owned();
        };
        if accepted {
            s.value = v;
            s.accepted_writes += 1;
            ("OK".to_owned(), v)
        } else {
            (format!("REJECT {before}"), v)
        }
    };
    if accepted {
        s.highest = s.highest.max(fence);
    } else {
        s.rejected += 1;
    }
    let line = json!({
        "t_mono_ns": now, "client": client, "pid": pid, "op": op.to_ascii_lowercase(),
        "fence": fence, "accepted": accepted, "value": value, "highest": before,
    });
    if let Some(f) = s.log.as_mut() {
        let _ = writeln!(f, "{line}");
    }
    reply
}

/// A client's side of the resource protocol (one kept-open connection).
#[derive(Debug)]
pub struct ResourceConn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

/// Outcome of one resource operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Ok(i64),
    Rejected(u64),
}

impl ResourceConn {
    pub fn connect(addr: &str, client: &str) -> std::io::Result<ResourceConn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        let mut c = ResourceConn { writer: s.try_clone()?, reader: BufReader::new(s) };
        c.call(&format!("HELLO {client} {}", std::process::id()))?;
        Ok(c)
    }

    fn call(&mut self, line: &str) -> std::io::Result<String> {
        self.writer.write_all(format!("{line}\n").as_bytes())?;
        let mut reply = String::new();
        if self.reader.read_line(&mut reply)? == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "resource closed"));
        }
        Ok(reply.trim_end().to_owned())
    }

    fn parse(r: &str) -> std::io::Result<Reply> {
        if r == "OK" {
            return Ok(Reply::Ok(0));
        }
        if let Some(v) = r.strip_prefix("OK ").and_then(|v| v.parse().ok()) {
            return Ok(Reply::Ok(v));
        }
        if let Some(h) = r.strip_prefix("REJECT ").and_then(|v| v.parse().ok()) {
            return Ok(Reply::Rejected(h));
        }
        Err(std::io::Error::other(format!("resource said {r:?}")))
    }

    pub fn read(&mut self, fence: u64) -> std::io::Result<Reply> {
        let r = self.call(&format!("READ {fence}"))?;
        Self::parse(&r)
    }

    pub fn write(&mut self, fence: u64, value: i64) -> std::io::Result<Reply> {
        let r = self.call(&format!("WRITE {fence} {value}"))?;
        Self::parse(&r)
    }
}
