//! The link proxy of faults N4 and N5's proxy variant (`tc netem` does not work on this kernel,
//! and this variant needs no root; the kernel variant of N5 is `netns.rs`): a user-space TCP
//! proxy on a free loopback port that forwards to one master.
//!
//! - **Delay** (N4): every chunk is held for the current delay in each direction. The delay can
//!   be changed while connections are open; order within a direction is always kept (one writer
//!   per direction, FIFO).
//! - **Blackhole** (N5, like `iptables -j DROP` on this link): while set, no byte is forwarded in
//!   either direction and nothing is closed; new connections are accepted by the kernel (the
//!   proxy cannot refuse a SYN without root) but hang: the proxy neither reads them nor connects
//!   upstream. When the blackhole is lifted, what was held is delivered in the order it was sent
//!   on this link, as TCP retransmission would (so a renewal sent before a release never arrives
//!   after it); a connection opened during the blackhole reaches the master only if its client
//!   still has it open (a client that gave up on a dropped SYN never reached the server), and a
//!   close held back is delivered as a close.
//!
//! Not modelled: kernel-level behaviour (RST or ICMP unreachable as with `REJECT`, connect
//! timeouts on a dropped SYN, retransmission back-off after the heal, TCP keepalive giving up).

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::Duration;

use crate::monotonic_ns;

#[derive(Debug)]
pub struct DelayProxy {
    pub addr: String,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    upstream: String,
    delay_us: AtomicU64,
    stop: AtomicBool,
    gate: Mutex<Gate>,
    /// One shot: the next client chunk holding these bytes closes its connection instead
    /// ([`Trip::Cut`]) or turns the blackhole on and is held by it ([`Trip::Hold`]).
    cut_on: Mutex<Option<(Vec<u8>, Trip)>>,
}

/// What a client chunk holding the watched bytes does to the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trip {
    Cut,
    Hold,
}

/// What a blackhole holds back.
#[derive(Debug, Default)]
struct Gate {
    blackholed: bool,
    /// The held bytes are being delivered: later bytes queue behind them.
    draining: bool,
    /// Chunks (or a close, `None`) in the order the proxy would have forwarded them.
    held: VecDeque<(Arc<TcpStream>, Option<Vec<u8>>)>,
    /// Connections accepted during the blackhole: not read, not connected upstream.
    pending: Vec<TcpStream>,
}

impl Shared {
    fn gate(&self) -> MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl DelayProxy {
    /// Listen on a free loopback port and forward to `upstream` (`host:port`).
    pub fn start(upstream: String) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        let shared = Arc::new(Shared {
            upstream,
            delay_us: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            gate: Mutex::new(Gate::default()),
            cut_on: Mutex::new(None),
        });
        let sh = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sh.stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(down) = conn else { continue };
                {
                    let mut g = sh.gate();
                    if g.blackholed {
                        g.pending.push(down);
                        continue;
                    }
                }
                link(down, Vec::new(), &sh);
            }
        });
        Ok(DelayProxy { addr, shared })
    }

    /// Set the one-way delay (each direction).
    pub fn set_delay(&self, d: Duration) {
        self.shared.delay_us.store(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Blackhole the link (`true`) or lift the blackhole and deliver what it held (`false`).
    pub fn set_blackhole(&self, on: bool) {
        let sh = &self.shared;
        let mut g = sh.gate();
        if g.blackholed == on {
            return;
        }
        g.blackholed = on;
        if on || g.draining {
            return;
        }
        g.draining = true;
        loop {
            let held: Vec<_> = g.held.drain(..).collect();
            let pending = std::mem::take(&mut g.pending);
            if (held.is_empty() && pending.is_empty()) || sh.stop.load(Ordering::Relaxed) {
                break;
            }
            drop(g);
            for (to, chunk) in held {
                match chunk {
                    Some(b) => {
                        let _ = (&*to).write_all(&b);
                    }
                    None => {
                        let _ = to.shutdown(Shutdown::Both);
                    }
                }
            }
            for down in pending {
                reopen(down, sh);
            }
            g = sh.gate();
            if g.blackholed {
                break; // cut again meanwhile: the rest stays held
            }
        }
        g.draining = false;
    }

    /// Close the connection (both ways, unforwarded) whose client next sends a chunk holding
    /// `bytes` (e.g. `b"SUBSCRIBE"`): a link that breaks just as that command goes out. Once.
    pub fn cut_when_sent(&self, bytes: &[u8]) {
        *self.shared.cut_on.lock().unwrap_or_else(|p| p.into_inner()) = Some((bytes.to_vec(), Trip::Cut));
    }

    /// Turn the blackhole on when a client next sends a chunk holding `bytes`, that chunk held
    /// first: a server that stops answering just as that command goes out (lift it with
    /// [`Self::set_blackhole`]`(false)`). Once.
    pub fn hold_when_sent(&self, bytes: &[u8]) {
        *self.shared.cut_on.lock().unwrap_or_else(|p| p.into_inner()) = Some((bytes.to_vec(), Trip::Hold));
    }

    /// Whether a [`Self::cut_when_sent`] or [`Self::hold_when_sent`] has yet to trip.
    pub fn cut_pending(&self) -> bool {
        self.shared.cut_on.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    pub fn blackholed(&self) -> bool {
        self.shared.gate().blackholed
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let (held, pending) = {
            let mut g = self.shared.gate();
            (std::mem::take(&mut g.held), std::mem::take(&mut g.pending))
        };
        for (to, _) in held {
            let _ = to.shutdown(Shutdown::Both);
        }
        drop(pending);
        let _ = TcpStream::connect(&self.addr);
    }
}

/// A connection accepted during a blackhole, now lifted: its client gave up (closed it) or it
/// goes upstream with whatever the client sent meanwhile.
fn reopen(down: TcpStream, sh: &Arc<Shared>) {
    if down.set_nonblocking(true).is_err() {
        return;
    }
    let mut sent = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match (&down).read(&mut buf) {
            Ok(0) => return, // closed by its client: never reached the server
            Ok(n) => sent.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => return,
        }
    }
    if down.set_nonblocking(false).is_ok() {
        link(down, sent, sh);
    }
}

/// Connect `down` to the upstream and start both directions, `first` sent upstream first.
fn link(down: TcpStream, first: Vec<u8>, sh: &Arc<Shared>) {
    let Ok(up) = TcpStream::connect(&sh.upstream) else {
        let _ = down.shutdown(Shutdown::Both);
        return;
    };
    let _ = (down.set_nodelay(true), up.set_nodelay(true));
    if !first.is_empty() && (&up).write_all(&first).is_err() {
        let _ = down.shutdown(Shutdown::Both);
        return;
    }
    let (Ok(down2), Ok(up2)) = (down.try_clone(), up.try_clone()) else { return };
    pump(down, up2, sh.clone(), true);
    pump(up, down2, sh.clone(), false);
}

/// Forward `from` → `to`, each chunk released `delay` after it was read, or held by the
/// blackhole; `upstream`: the client's direction (the one [`DelayProxy::cut_when_sent`] watches).
fn pump(mut from: TcpStream, to: TcpStream, sh: Arc<Shared>, upstream: bool) {
    let (tx, rx) = mpsc::channel::<(u64, Vec<u8>)>();
    let delay = sh.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    match upstream.then(|| trip(&delay, &buf[..n])).flatten() {
                        Some(Trip::Cut) => {
                            let _ = from.shutdown(Shutdown::Both);
                            break; // the writer then closes the upstream side
                        }
                        Some(Trip::Hold) => delay.gate().blackholed = true, // this chunk is held
                        None => {}
                    }
                    let due = monotonic_ns() + delay.delay_us.load(Ordering::Relaxed) * 1000;
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        let to = Arc::new(to);
        // Forward now, or queue behind the blackhole (and behind what it still holds).
        let pass = |chunk: Option<Vec<u8>>| -> Option<Option<Vec<u8>>> {
            let mut g = sh.gate();
            if g.blackholed || g.draining || !g.held.is_empty() {
                g.held.push_back((to.clone(), chunk));
                None
            } else {
                Some(chunk)
            }
        };
        for (due, chunk) in rx {
            let now = monotonic_ns();
            if due > now {
                std::thread::sleep(Duration::from_nanos(due - now));
            }
            if sh.stop.load(Ordering::Relaxed) {
                break;
            }
            if let Some(Some(b)) = pass(Some(chunk))
                && (&*to).write_all(&b).is_err()
            {
                break;
            }
        }
        if sh.stop.load(Ordering::Relaxed) || pass(None).is_some() {
            let _ = to.shutdown(Shutdown::Both);
        }
    });
}

/// What `chunk` trips, if it holds the one-shot's bytes (which it then disarms).
fn trip(sh: &Shared, chunk: &[u8]) -> Option<Trip> {
    let mut on = sh.cut_on.lock().unwrap_or_else(|p| p.into_inner());
    let hit = on.as_ref().filter(|(p, _)| chunk.windows(p.len()).any(|w| w == &p[..])).map(|&(_, t)| t);
    if hit.is_some() {
        *on = None;
    }
    hit
}
