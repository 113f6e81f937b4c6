//! The delay proxy of fault N4 (`tc netem` is not available on this kernel): a user-space TCP
//! proxy on a free loopback port that forwards to one master and holds every chunk for the
//! current delay in each direction. The delay can be changed while connections are open; order
//! within a direction is always kept (one writer per direction, FIFO).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crate::monotonic_ns;

#[derive(Debug)]
pub struct DelayProxy {
    pub addr: String,
    delay_us: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl DelayProxy {
    /// Listen on a free loopback port and forward to `upstream` (`host:port`).
    pub fn start(upstream: String) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        let delay_us = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (d, s) = (delay_us.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(down) = conn else { continue };
                let Ok(up) = TcpStream::connect(&upstream) else {
                    let _ = down.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = (down.set_nodelay(true), up.set_nodelay(true));
                let (Ok(down2), Ok(up2)) = (down.try_clone(), up.try_clone()) else { continue };
                pump(down, up2, d.clone(), s.clone());
                pump(up, down2, d.clone(), s.clone());
            }
        });
        Ok(DelayProxy { addr, delay_us, stop })
    }

    /// Set the one-way delay (each direction).
    pub fn set_delay(&self, d: Duration) {
        self.delay_us.store(d.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(&self.addr);
    }
}

/// Forward `from` → `to`, each chunk released `delay` after it was read.
fn pump(mut from: TcpStream, mut to: TcpStream, delay_us: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let (tx, rx) = mpsc::channel::<(u64, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let due = monotonic_ns() + delay_us.load(Ordering::Relaxed) * 1000;
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (due, chunk) in rx {
            let now = monotonic_ns();
            if due > now {
                std::thread::sleep(Duration::from_nanos(due - now));
            }
            if stop.load(Ordering::Relaxed) || to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}
