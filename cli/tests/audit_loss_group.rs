//! Audit: after a loss, a shell script's child that handles SIGTERM survives: ferrolock stops
//! waiting as soon as CMD itself exits and never sends the group the SIGKILL of --kill-grace,
//! so part of the job goes on running without the lock after ferrolock exited 76.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => !stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[test]
fn after_a_loss_the_commands_group_is_killed_after_the_grace() {
    let server = RedisServer::start();
    let dir = TempDir::new("lossgroup");
    let (pid_file, ready) = (dir.path("pid"), dir.path("ready"));
    // The script's worker traps TERM (say, to finish its current write); the script itself
    // dies of SIGTERM at once.
    let script =
        r#"(trap '' TERM; while :; do sleep 0.1; done) >/dev/null 2>&1 & echo $! > "$1"; touch "$2"; wait"#;
    let mut c = on(&server);
    c.args(["exec", "--ttl", "600ms", "--kill-grace", "1s", "lossgroup", "--", "sh", "-c", script, "sh"])
        .arg(&pid_file)
        .arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    let worker = std::fs::read_to_string(&pid_file).expect("pid").trim().to_owned();
    let _: i64 = server.cmd(&["DEL", "ferrolock:{lossgroup}"]);
    let t0 = Instant::now();
    let out = p.finish(Duration::from_secs(30));
    let exited_after = t0.elapsed();
    assert_eq!(code(&out), Some(76), "stderr: {}", stderr(&out));
    // Well past the 1 s grace: the group should have had its SIGKILL.
    std::thread::sleep(Duration::from_secs(3));
    let survived = alive(&worker);
    if let Ok(pid) = worker.parse::<libc::pid_t>()
        && pid > 0
    {
        // SAFETY: kill(2) of this test's own grandchild, by pid.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        !survived,
        "the worker {worker} of the command's group still runs 3 s after ferrolock exited 76 \
         ({exited_after:?} after the DEL, i.e. without waiting the 1 s grace); stderr: {}",
        stderr(&out)
    );
}
