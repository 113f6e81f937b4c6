//! The demo's own safety checks must hold, and must be able to fail.

use std::process::Command;

#[test]
fn demo_with_rust_workers_passes() {
    let out = Command::new(env!("CARGO_BIN_EXE_demo")).args(["--iterations", "30"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("overlaps              0"), "{stdout}");
    assert!(stdout.contains("demo: OK"));
}

#[test]
fn resource_rejects_stale_tokens() {
    // The fenced resource is what turns a lost lease into a rejected write, not a lost update.
    let res = ferrolock_examples::Resource::start().unwrap();
    let mut new = ferrolock_examples::ResourceConn::connect(&res.addr).unwrap();
    let mut stale = ferrolock_examples::ResourceConn::connect(&res.addr).unwrap();
    assert!(new.fenced_increment(10).unwrap());
    assert!(!stale.fenced_increment(9).unwrap());
    assert!(new.fenced_increment(10).unwrap());
    let s = res.state.lock().unwrap();
    assert_eq!((s.value, s.rejected), (2, 1));
}
