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

/// The demo with the Rust workers and one more kind, `cmd` (one worker, 2 iterations each).
fn demo_with(cmd: &str) -> (i32, String, String) {
    demo_with_args(cmd, &[])
}

fn demo_with_args(cmd: &str, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(["--iterations", "2", "--per-worker-kind", "1", "--worker", cmd])
        .args(extra)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn control_a_worker_without_the_lock_fails_the_demo() {
    // Two critical sections that overlap, with one fence twice and no write to the counter.
    let line = r#"{"id":"fake","lang":"sh","fence":1,"acquired_ns":1,"released_ns":100,"rejected":false}"#;
    let (code, stdout, stderr) = demo_with(&format!("sh -c 'echo {line:?}; echo {line:?}'"));
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("demo: FAILED"), "{stdout}");
    for why in ["overlapped", "fences were not strictly increasing", "the counter does not match"] {
        assert!(stderr.contains(why), "{why:?} not in: {stderr}");
    }
}

#[test]
fn control_the_resource_counts_rejections_a_worker_does_not_report() {
    // A worker that writes with a stale fence behind the lock's back and reports nothing amiss:
    // the resource's own count catches it (the demo counted only what workers reported).
    let script = r#"
import socket, sys
a = sys.argv[sys.argv.index("--resource") + 1].rsplit(":", 1)
s = socket.create_connection((a[0], int(a[1])))
f = s.makefile("rw")
import time
end = time.monotonic() + 10
while time.monotonic() < end:  # until a real worker's fence is in: then 1 is stale
    f.write("READ 1\n"); f.flush()
    if f.readline().startswith("REJECT"):
        break
    time.sleep(0.01)
for _ in range(2):
    print('{"id":"liar","lang":"py","fence":1,"acquired_ns":1,"released_ns":2,"rejected":false}', flush=True)
"#;
    let dir = std::env::temp_dir().join(format!("ferrolock-demo-liar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("liar.py");
    std::fs::write(&path, script).unwrap();
    let (code, stdout, stderr) = demo_with(&format!("python3 {}", path.display()));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stderr.contains("the resource rejected a stale fence"), "{stderr}");
    assert!(stdout.contains("workers reported 0"), "{stdout}");
}

#[test]
fn a_hung_worker_fails_the_demo_at_its_timeout() {
    // A worker that never finishes (and ignores SIGTERM) is stopped at the deadline and named;
    // the Rust worker beside it finishes. Without the deadline the demo waited for it forever.
    let marker = format!("ferrolock-demo-hung-{}", std::process::id());
    let hung = format!(
        "python3 -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)  # {marker}'"
    );
    let start = std::time::Instant::now();
    let (code, stdout, stderr) = demo_with_args(&hung, &["--timeout", "3"]);
    let took = start.elapsed();
    let left = processes_with(&marker);
    for &pid in &left {
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    assert!(left.is_empty(), "hung worker left running: {left:?}");
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stderr.contains("w1.0 (python3") && stderr.contains("did not finish within 3 s"), "{stderr}");
    assert!(!stderr.contains("w0.0"), "the Rust worker finished: {stderr}");
    assert!(took < std::time::Duration::from_secs(60), "took {took:?}");
    assert!(stdout.contains("demo: FAILED"), "{stdout}");
}

/// Pids of the processes whose command line mentions `text`.
fn processes_with(text: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(text) {
            found.push(pid);
        }
    }
    found
}

/// Whether `ok` holds within `limit` (looked at every 20 ms).
fn within(limit: std::time::Duration, mut ok: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while !ok() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

// The workers stop with the demo, on Ctrl-C and on kill -9 (they inherited the demo's blocked
// SIGINT and SIGTERM and ignored both the demo's SIGTERM and their death signal: a killed demo
// left them running for their whole wait).
#[test]
fn the_workers_stop_with_the_demo_interrupted_or_killed() {
    use std::io::BufRead;
    for sig in [libc::SIGINT, libc::SIGKILL] {
        let mut demo = Command::new(env!("CARGO_BIN_EXE_demo"))
            .args(["--iterations", "10000000"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufReader::new(demo.stdout.take().unwrap()).read_line(&mut first).unwrap();
        // "… fenced resource at 127.0.0.1:PORT": the workers' command lines name it.
        let resource = format!("--resource {}", first.trim().rsplit(' ').next().unwrap());
        assert!(
            within(std::time::Duration::from_secs(10), || processes_with(&resource).len() >= 2),
            "{first}"
        );
        unsafe { libc::kill(demo.id() as libc::pid_t, sig) };
        let mut status = None;
        let exited = within(std::time::Duration::from_secs(10), || {
            status = demo.try_wait().unwrap();
            status.is_some()
        });
        let gone = within(std::time::Duration::from_secs(5), || processes_with(&resource).is_empty());
        let left = processes_with(&resource);
        let stuck = if exited { None } else { Some(demo.id()) };
        for pid in left.iter().copied().chain(stuck) {
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        let _ = demo.wait();
        assert!(exited, "signal {sig}: the demo did not exit (waiting for its workers)");
        assert!(gone, "signal {sig}: workers left running: {left:?}");
        if sig == libc::SIGINT {
            assert_eq!(status.and_then(|s| s.code()), Some(130));
        }
    }
}
