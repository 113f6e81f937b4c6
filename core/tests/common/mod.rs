#![allow(dead_code)]
//! Shared helpers for the core's integration tests (real servers, never mocks).

pub mod cluster;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolock::{Client, ClientOptions};
pub use ferrolock_testkit::RedisServer;

pub async fn connect(server: &RedisServer) -> Client {
    connect_with(server, ClientOptions::default()).await
}

pub async fn connect_with(server: &RedisServer, opts: ClientOptions) -> Client {
    Client::connect(&server.url(), opts).await.expect("connect")
}

pub fn fast_opts() -> ClientOptions {
    let mut o = ClientOptions::default();
    o.response_timeout = Duration::from_millis(200);
    o
}

pub fn evalsha_calls(server: &RedisServer) -> u64 {
    server.command_calls().get("evalsha").copied().unwrap_or(0)
}

/// Commands clients sent (commands run inside scripts are counted by Redis too; leave them out).
pub fn client_calls(server: &RedisServer) -> u64 {
    const CLIENT_SENT: &[&str] = &["evalsha", "eval", "script|load", "subscribe", "unsubscribe", "ping"];
    let stats = server.command_calls();
    CLIENT_SENT.iter().map(|k| stats.get(*k).copied().unwrap_or(0)).sum()
}

/// Every command the server runs, as `MONITOR` prints it, with the instant it was read (a
/// background thread reads them).
pub struct Monitor {
    pub lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Monitor {
    pub fn start(server: &RedisServer) -> Monitor {
        let mut s = TcpStream::connect(("127.0.0.1", server.port())).expect("monitor connection");
        s.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(s);
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim(), "+OK");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { return };
                sink.lock().unwrap().push((Instant::now(), line));
            }
        });
        Monitor { lines }
    }
}
