//! Shared pieces of the demo: the worker protocol (see examples/README.md) and the fenced
//! resource that rejects stale tokens.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// CLOCK_MONOTONIC in nanoseconds: comparable across processes on one host.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The protected resource's state: a counter and the highest fencing token seen.
#[derive(Debug, Default)]
pub struct ResourceState {
    pub highest: u64,
    pub value: i64,
    pub accepted_writes: u64,
    pub rejected: u64,
}

/// A fenced counter behind a line protocol: `READ F` → `OK v` | `REJECT h`;
/// `WRITE F v` → `OK` | `REJECT h`. Any operation whose token is lower than the highest seen is
/// rejected: this is the check a resource must make for fencing to protect it.
#[derive(Debug)]
pub struct Resource {
    pub addr: String,
    pub state: Arc<Mutex<ResourceState>>,
}

impl Resource {
    pub fn start() -> std::io::Result<Resource> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        let state = Arc::new(Mutex::new(ResourceState::default()));
        let st = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let st = st.clone();
                std::thread::spawn(move || serve(conn, st));
            }
        });
        Ok(Resource { addr, state })
    }
}

fn serve(conn: TcpStream, st: Arc<Mutex<ResourceState>>) {
    let _ = conn.set_nodelay(true);
    let Ok(mut out) = conn.try_clone() else { return };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        let parts: Vec<&str> = line.split_whitespace().collect();
        let reply = {
            let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
            let fence: Option<u64> = parts.get(1).and_then(|f| f.parse().ok());
            match (parts.first().copied(), fence) {
                (_, Some(f)) if f < s.highest => {
                    s.rejected += 1;
                    format!("REJECT {}", s.highest)
                }
                (Some("READ"), Some(f)) => {
                    s.highest = f;
                    format!("OK {}", s.value)
                }
                (Some("WRITE"), Some(f)) => match parts.get(2).and_then(|v| v.parse().ok()) {
                    Some(v) => {
                        s.highest = f;
                        s.value = v;
                        s.accepted_writes += 1;
                        "OK".to_owned()
                    }
                    None => "ERR bad value".to_owned(),
                },
                _ => "ERR bad command".to_owned(),
            }
        };
        if out.write_all(format!("{reply}\n").as_bytes()).is_err() {
            return;
        }
    }
}

/// A worker's client side of the resource protocol.
#[derive(Debug)]
pub struct ResourceConn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl ResourceConn {
    pub fn connect(addr: &str) -> std::io::Result<ResourceConn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        Ok(ResourceConn { writer: s.try_clone()?, reader: BufReader::new(s) })
    }

    fn call(&mut self, line: &str) -> std::io::Result<String> {
        self.writer.write_all(format!("{line}\n").as_bytes())?;
        let mut reply = String::new();
        self.reader.read_line(&mut reply)?;
        Ok(reply.trim_end().to_owned())
    }

    /// Fenced read-modify-write (+1). Returns false if the resource rejected the token.
    pub fn fenced_increment(&mut self, fence: u64) -> std::io::Result<bool> {
        let r = self.call(&format!("READ {fence}"))?;
        let Some(v) = r.strip_prefix("OK ").and_then(|v| v.parse::<i64>().ok()) else {
            return Ok(false);
        };
        Ok(self.call(&format!("WRITE {fence} {}", v + 1))? == "OK")
    }
}
