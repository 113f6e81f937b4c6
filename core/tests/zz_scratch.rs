mod common;
use common::*;
use ferrolock::*;
use ferrolock_testkit::RedisServer;
use std::process::Command;
use std::time::{Duration, Instant};

fn ipt(op: &str, port: u16) {
    let st = Command::new("iptables")
        .args([op, "INPUT", "-p", "tcp", "--dport", &port.to_string(), "--syn", "-j", "DROP"])
        .status()
        .unwrap();
    assert!(st.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scratch() {
    let server = RedisServer::start();
    let port = server.port();
    let client = connect_with(&server, ClientOptions::default()).await;
    let lock = client.lock("bh", LockOptions::lease(Duration::from_secs(30))).unwrap();
    lock.acquire(None).await.unwrap().release().await.unwrap();
    let mut admin = server.conn().unwrap();
    ipt("-A", port);
    struct Undo(u16);
    impl Drop for Undo {
        fn drop(&mut self) {
            ipt("-D", self.0);
        }
    }
    let _undo = Undo(port);
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut admin)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..2 {
        let t0 = Instant::now();
        let r = lock.try_acquire().await;
        eprintln!("try: {:?} {r:?}", t0.elapsed());
        let t0 = Instant::now();
        let r = lock.acquire(Some(Duration::from_millis(500))).await;
        eprintln!("wait 500ms: {:?} {:?}", t0.elapsed(), r.err());
    }
}
