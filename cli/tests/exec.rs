//! `ferrolock exec` end to end: the built binary against real redis-server processes.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// Appends `start <id>`, then stays until another run has also started (at most 3 s), then
/// appends `end <id>`. Without a lock a second run started meanwhile interleaves for sure; under
/// the lock the first run stays its full 3 s alone.
const APPEND: &str = r#"echo "start $2" >> "$1"
i=0
while [ $i -lt 30 ] && [ "$(grep -c '^start' "$1")" -lt 2 ]; do sleep 0.1; i=$((i+1)); done
echo "end $2" >> "$1""#;

fn append_cmd(cmd: &mut Command, log: &std::path::Path, id: &str) {
    cmd.args(["sh", "-c", APPEND, "sh"]).arg(log).arg(id);
}

/// Start run `a`, wait until it is inside (its start line is written), then start run `b`.
fn two_runs(log: &std::path::Path, mut run: impl FnMut(&str) -> Proc) -> Vec<String> {
    let a = run("a");
    wait_for_lines(log, 1);
    let b = run("b");
    for p in [a, b] {
        let out = p.finish(Duration::from_secs(30));
        assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    }
    read_lines(log)
}

#[test]
fn concurrent_execs_are_serialised_and_unlocked_runs_interleave() {
    let server = RedisServer::start();
    let dir = TempDir::new("serial");

    // Control: the same two runs without the lock do overlap, so the check below can fail.
    let control = dir.path("control.log");
    let lines = two_runs(&control, |id| {
        let mut c = Command::new("sh");
        c.args(["-c", APPEND, "sh"]).arg(&control).arg(id);
        Proc::spawn(&mut c)
    });
    assert_eq!(lines[..2], ["start a", "start b"], "control runs did not interleave");

    let locked = dir.path("locked.log");
    let lines = two_runs(&locked, |id| {
        let mut c = on(&server);
        c.args(["exec", "--wait", "30s", "serial", "--"]);
        append_cmd(&mut c, &locked, id);
        Proc::spawn(&mut c)
    });
    assert_eq!(lines, ["start a", "end a", "start b", "end b"]);
    assert!(!held(&server, "serial"), "released after both runs");
}

/// `ferrolock exec NAME -- sh -c 'touch READY; exec sleep 60'`: holds NAME until signalled.
fn holder(server: &RedisServer, name: &str, ready: &std::path::Path, extra: &[&str]) -> Proc {
    let mut c = on(server);
    c.arg("exec").args(extra).args([name, "--", "sh", "-c", "touch \"$1\"; exec sleep 60", "sh"]).arg(ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(ready);
    p
}

#[test]
fn no_wait_on_a_held_lock_exits_with_the_conflict_code_at_once() {
    let server = RedisServer::start();
    let dir = TempDir::new("nowait");
    let h = holder(&server, "busy", &dir.path("ready"), &[]);
    let ran = dir.path("ran");
    let touch_ran = |c: &mut Command| {
        c.args(["sh", "-c", "touch \"$1\"", "sh"]).arg(&ran);
    };

    let start = Instant::now();
    let mut c = on(&server);
    c.args(["exec", "--no-wait", "busy", "--"]);
    touch_ran(&mut c);
    let out = output(&mut c);
    assert_eq!(code(&out), Some(75), "stderr: {}", stderr(&out));
    // "At once": long before the holder (60 s) would let go.
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());
    assert!(stderr(&out).contains("held by another owner"), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1);

    let mut c = on(&server);
    c.args(["exec", "-n", "-q", "--conflict-exit-code", "9", "busy", "--"]);
    touch_ran(&mut c);
    let out = output(&mut c);
    assert_eq!(code(&out), Some(9));
    assert_eq!(stderr(&out), "", "--quiet prints nothing");

    let mut c = on(&server);
    c.args(["exec", "--wait", "300ms", "busy", "--"]);
    touch_ran(&mut c);
    let out = output(&mut c);
    assert_eq!(code(&out), Some(75), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("still held after waiting 300ms"), "{}", stderr(&out));
    assert!(!ran.exists(), "the command never ran without the lock");

    // A closed stderr (EPIPE, e.g. `2>&1 | logger` after the reader died) leaves the exit code
    // as documented (the message's eprintln! used to panic: 101).
    let mut fds = [0; 2];
    // SAFETY: a fresh pipe; the read end is closed at once, the write end owned below.
    let write_end = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        libc::close(fds[0]);
        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1])
    };
    let mut c = on(&server);
    c.args(["exec", "-n", "busy", "--", "true"]).stderr(std::process::Stdio::from(write_end));
    assert_eq!(status_code(c.status().unwrap()), Some(75));

    h.signal(libc::SIGTERM);
    let out = h.finish(Duration::from_secs(20));
    assert_eq!(code(&out), Some(128 + libc::SIGTERM));
    assert!(!held(&server, "busy"));
}

/// Traps SIGTERM: writes "term" to $1, stops its sleep, exits 42. Ready ($2) only once `$p` is
/// set: a SIGTERM just after `touch` used to find `$p` empty and leave the sleep running with
/// the output pipes, so reading ferrolock's output waited 60 s (seen in CI); nor does the sleep
/// hold the pipes now.
const TRAP_TERM: &str =
    r#"trap 'echo term > "$1"; kill $p; exit 42' TERM; sleep 60 >/dev/null 2>&1 & p=$!; touch "$2"; wait $p"#;

#[test]
fn outsider_delete_terminates_the_command_with_the_lost_code() {
    let server = RedisServer::start();
    let dir = TempDir::new("lost");
    let (got, ready) = (dir.path("got"), dir.path("ready"));
    let mut c = on(&server);
    // A lease long enough that the hold outlives any scheduling delay until the DEL below (the
    // loss must come from the DEL); renewals every second still notice it soon.
    c.args(["exec", "--ttl", "3s", "--kill-grace", "5s", "victim", "--", "sh", "-c", TRAP_TERM, "sh"])
        .arg(&got)
        .arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    assert!(held(&server, "victim"));
    let start = Instant::now();
    let deleted: i64 = server.cmd(&["DEL", "ferrolock:{victim}"]);
    assert_eq!(deleted, 1);
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(76), "stderr: {}", stderr(&out));
    assert!(start.elapsed() < Duration::from_secs(20), "the command ran on: {:?}", start.elapsed());
    assert_eq!(std::fs::read_to_string(&got).unwrap_or_default().trim(), "term", "the command got SIGTERM");
    let err = stderr(&out);
    assert!(err.contains("lost lock victim") && err.contains("SIGTERM"), "{err}");
    assert!(!held(&server, "victim"), "never re-created after the loss");
}

#[test]
fn a_command_ignoring_sigterm_after_a_loss_is_killed_after_the_grace() {
    let server = RedisServer::start();
    let dir = TempDir::new("grace");
    let ready = dir.path("ready");
    let script = r#"trap '' TERM; touch "$1"; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"#;
    let mut c = on(&server);
    c.args(["exec", "--ttl", "600ms", "--kill-grace", "300ms", "--lost-exit-code", "99", "stubborn", "--"])
        .args(["sh", "-c", script, "sh"])
        .arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    let _: i64 = server.cmd(&["DEL", "ferrolock:{stubborn}"]);
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(99), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("SIGKILL") && err.contains("killed by SIGKILL"), "{err}");
}

// After a loss, SIGTERM and SIGKILL reach the command even when ferrolock's stderr blocks (a
// full pipe nobody reads): the message used to be written first, and the command ran on without
// the lock for as long as the pipe stayed full.
#[test]
fn a_loss_stops_the_command_even_when_stderr_blocks() {
    use std::io::Read;
    let server = RedisServer::start();
    let dir = TempDir::new("stderr-full");
    let (ready, termed, pid) = (dir.path("ready"), dir.path("termed"), dir.path("pid"));
    // Fills the pipe (shared with ferrolock), ignores SIGTERM (noting it), and runs on.
    // (sh's own stderr is /dev/null: its "Terminated" for the killed `sleep` must not block it.)
    let script = r#"trap 'touch "$2"' TERM; echo $$ > "$3"; head -c 1000000 /dev/zero >&2 &
        exec 2>/dev/null; touch "$1"; while :; do sleep 0.05; done"#;
    let mut c = on(&server);
    c.args([
        "exec",
        "--ttl",
        "600ms",
        "--kill-grace",
        "300ms",
        "stderr-full",
        "--",
        "sh",
        "-c",
        script,
        "sh",
    ])
    .arg(&ready)
    .arg(&termed)
    .arg(&pid)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut p = KillOnDrop(c.spawn().expect("spawn ferrolock"));
    let mut err = p.0.stderr.take().expect("piped");
    wait_for_file(&ready);
    let cmd_pid = std::fs::read_to_string(&pid).unwrap().trim().to_owned();
    let _: i64 = server.cmd(&["DEL", "ferrolock:{stderr-full}"]);
    wait_for_file(&termed); // (20 s at most)
    let start = Instant::now();
    while !gone(&cmd_pid) && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone(&cmd_pid), "the command was not killed after the grace");
    let mut rest = Vec::new();
    err.read_to_end(&mut rest).expect("ferrolock's stderr");
    let rest = String::from_utf8_lossy(&rest).replace('\0', "");
    let status = p.0.wait().expect("wait");
    assert_eq!(status_code(status), Some(76), "{rest}");
    assert!(rest.contains("lost lock stderr-full"), "{rest}");
}

#[test]
fn signals_to_ferrolock_reach_the_command_and_the_lock_is_released() {
    let server = RedisServer::start();
    let dir = TempDir::new("signal");

    // A command that handles SIGTERM: its own exit status comes back.
    let (got, ready) = (dir.path("got"), dir.path("ready"));
    let mut c = on(&server);
    c.args(["exec", "sig", "--", "sh", "-c", TRAP_TERM, "sh"]).arg(&got).arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    assert!(held(&server, "sig"));
    p.signal(libc::SIGTERM);
    let out = p.finish(Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(42), "stderr: {}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&got).unwrap_or_default().trim(), "term");
    assert!(!held(&server, "sig"), "released after the command exited");

    // A command killed by the forwarded signal: ferrolock ends by the same signal once the lock
    // is released, as `timeout` does (a shell script stops at a Ctrl-C only when its child died
    // of SIGINT; ferrolock used to exit with 128 + N, which says the child handled it).
    for (sig, tag) in [(libc::SIGTERM, "t"), (libc::SIGINT, "i")] {
        let ready = dir.path(&format!("ready-{tag}"));
        let p = holder(&server, "sig", &ready, &[]);
        p.signal(sig);
        let out = p.finish(Duration::from_secs(20));
        assert_eq!(signal_of(&out), Some(sig), "stderr: {}", stderr(&out));
        assert!(!held(&server, "sig"));
    }
}

/// A process's state letter (`S`, `R`, `T` for stopped, `Z`, …) from /proc; `?` once it is gone.
fn proc_state(pid: &str) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')').next().and_then(|rest| rest.trim().chars().next()).unwrap_or('?')
}

// Every signal whose default would end ferrolock alone is passed on (SIGUSR1 ended ferrolock,
// left the lock held for a lease and orphaned the command). Without a terminal, a SIGTSTP stops
// the command, not ferrolock, which keeps renewing (it stopped ferrolock alone: the lease ran
// out and another run got the lock beside the command); SIGCONT resumes the command.
#[test]
fn user_signals_and_stops_are_passed_on_without_losing_the_lease() {
    let server = RedisServer::start();
    let dir = TempDir::new("moresig");
    let (got, ready) = (dir.path("got"), dir.path("ready"));
    let trap_usr1 = r#"trap 'echo usr1 > "$1"; exit 7' USR1; touch "$2"; while :; do sleep 0.05; done"#;
    let mut c = on(&server);
    c.args(["exec", "more", "--", "sh", "-c", trap_usr1, "sh"]).arg(&got).arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    p.signal(libc::SIGUSR1);
    let out = p.finish(Duration::from_secs(20));
    assert_eq!(code(&out), Some(7), "stderr: {}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&got).unwrap_or_default().trim(), "usr1");
    assert!(!held(&server, "more"), "released after the command exited");

    let ready = dir.path("pid");
    let mut c = on(&server);
    c.args([
        "exec",
        "--ttl",
        "600ms",
        "more",
        "--",
        "sh",
        "-c",
        r#"echo $$ > "$1.t"; mv "$1.t" "$1"; exec sleep 60"#,
        "sh",
    ])
    .arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    let cmd_pid = std::fs::read_to_string(&ready).unwrap().trim().to_owned();
    p.signal(libc::SIGTSTP);
    let stopped = Instant::now();
    while proc_state(&cmd_pid) != 'T' && stopped.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(proc_state(&cmd_pid), 'T', "the command was not stopped");
    // Two leases later ferrolock still renews: the lock is held, another run does not get it.
    std::thread::sleep(Duration::from_millis(1200));
    assert_ne!(proc_state(&p.pid().to_string()), 'T', "ferrolock itself stopped");
    let other = output(on(&server).args(["exec", "-n", "more", "--", "true"]));
    assert_eq!(code(&other), Some(75), "another run got the lock: {}", stderr(&other));
    p.signal(libc::SIGCONT);
    let resumed = Instant::now();
    while proc_state(&cmd_pid) == 'T' && resumed.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_ne!(proc_state(&cmd_pid), 'T', "the command was not continued");
    // A SIGTERM to a stopped command is followed by a SIGCONT, as `timeout` does: the command
    // acts on it (it used to stay stopped, and ferrolock to hold the lock until someone sent one).
    p.signal(libc::SIGTSTP);
    let stopped = Instant::now();
    while proc_state(&cmd_pid) != 'T' && stopped.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(proc_state(&cmd_pid), 'T', "the command was not stopped again");
    p.signal(libc::SIGTERM);
    let out = p.finish(Duration::from_secs(20));
    assert_eq!(code(&out), Some(128 + libc::SIGTERM), "stderr: {}", stderr(&out));
    assert!(!held(&server, "more"));
}

// `-n` and `--wait` bound connecting too: against a server that does not answer, the core's
// four connection attempts took 8 s before either gave up (and before `status` or `unlock` did).
#[test]
fn no_wait_and_wait_bound_connecting_to_a_server_that_does_not_answer() {
    let server = RedisServer::start();
    server.pause();
    // (`status` and `unlock` too: one attempt, as `-n`.)
    for args in [
        &["exec", "-n", "frozen", "--", "true"][..],
        &["exec", "--wait", "1s", "frozen", "--", "true"],
        &["status", "frozen"],
        &["unlock", "--force", "frozen"],
    ] {
        let t0 = Instant::now();
        let out = output(on(&server).args(args));
        let took = t0.elapsed();
        assert_eq!(code(&out), Some(125), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("cannot connect"), "{args:?}: {}", stderr(&out));
        assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
    }
    server.resume();
}

#[test]
fn a_signal_while_waiting_stops_the_wait_silently_without_running_the_command() {
    let server = RedisServer::start();
    let dir = TempDir::new("waitsig");
    let h = holder(&server, "queue", &dir.path("ready"), &[]);
    let ran = dir.path("ran");
    let mut c = on(&server);
    c.args(["exec", "queue", "--", "sh", "-c", "touch \"$1\"", "sh"]).arg(&ran);
    let mut waiter = Proc::spawn(&mut c);
    wait_for_blocked(waiter.pid(), libc::SIGTERM);
    assert!(waiter.still_running_after(Duration::from_millis(800)), "waits while the lock is held");
    waiter.signal(libc::SIGTERM);
    let out = waiter.finish(Duration::from_secs(20));
    assert_eq!(signal_of(&out), Some(libc::SIGTERM), "a signal that stops the wait ends ferrolock");
    // Not a terminal: no progress display, only the one line saying why it stopped.
    assert_eq!(stderr(&out).trim(), "ferrolock: SIGTERM while waiting for lock queue");
    assert!(!ran.exists());
    drop(h);
}

#[test]
fn fence_is_strictly_increasing_across_runs_and_name_is_passed() {
    let server = RedisServer::start();
    let mut fences = Vec::new();
    for _ in 0..5 {
        let out = output(on(&server).args([
            "exec",
            "fenced",
            "--",
            "sh",
            "-c",
            "echo \"$FERROLOCK_NAME $FERROLOCK_FENCE\"",
        ]));
        assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
        let line = stdout(&out);
        let (name, fence) = line.trim().split_once(' ').expect("name and fence");
        assert_eq!(name, "fenced");
        fences.push(fence.parse::<u64>().expect("decimal fence"));
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[test]
fn command_that_cannot_run_gives_127_or_126_and_releases() {
    let server = RedisServer::start();
    let out = output(on(&server).args(["exec", "nf", "--", "/nonexistent/ferrolock-test"]));
    assert_eq!(code(&out), Some(127));
    assert!(stderr(&out).contains("cannot run /nonexistent/ferrolock-test"), "{}", stderr(&out));
    assert!(!held(&server, "nf"));
    let out = output(on(&server).args(["exec", "nf", "--", "/"]));
    assert_eq!(code(&out), Some(126), "stderr: {}", stderr(&out));
    assert!(!held(&server, "nf"));
    // The program's name is shown escaped, as lock names are: no terminal control bytes.
    let out = output(on(&server).args(["exec", "nf", "--", "/nonexistent/\x1b[31mred"]));
    assert_eq!(code(&out), Some(127));
    assert!(!stderr(&out).contains('\x1b'), "{:?}", stderr(&out));
}

#[test]
fn redlock_over_three_servers_works_with_one_stopped() {
    let mut servers = ferrolock_testkit::start_many(3);
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let run = || output(ferrolock(&urls).args(["exec", "rl", "--", "sh", "-c", "echo $FERROLOCK_FENCE"]));

    let out = run();
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let first: u64 = stdout(&out).trim().parse().expect("fence");

    servers[2].pause(); // SIGSTOP: keeps its socket, answers nothing
    let out = run();
    servers[2].resume();
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let second: u64 = stdout(&out).trim().parse().expect("fence");
    assert!(second > first);

    servers[0].kill9();
    let out = run();
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let third: u64 = stdout(&out).trim().parse().expect("fence");
    assert!(third > second);
    assert!(servers[1..].iter().all(|s| !held(s, "rl")), "released on the live masters");
    let out = output(ferrolock(&urls).args(["status", "rl"]));
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert!(stdout(&out).contains("state: free"), "{}", stdout(&out));
    assert!(stdout(&out).contains(&format!("last_fence: {third}")), "{}", stdout(&out));
}

/// Masters that stop answering during a `--wait` end it with the conflict code and the reason,
/// as one server does ("A server that drops out *during* a wait is retried until `--wait` ends",
/// cli/README.md): a Redlock wait ends in `QUORUM_NOT_REACHED` (the core's kind for it) where one
/// server's ends in `ACQUIRE_TIMEOUT`, and that used to exit 125 as if ferrolock had failed.
#[test]
fn redlock_masters_that_stop_answering_during_a_wait_exit_with_the_conflict_code() {
    let servers = ferrolock_testkit::start_many(3);
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    // Another owner's hold (the wire format, docs/PROTOCOL.md) for 800 ms on every master.
    for s in &servers {
        let _: i64 = s.cmd(&["HSET", "ferrolock:{rl-wait}", "owner", "other", "count", "1", "fence", "1"]);
        let _: i64 = s.cmd(&["PEXPIRE", "ferrolock:{rl-wait}", "800"]);
    }
    let waiter = Proc::spawn(ferrolock(&urls).args(["exec", "--wait", "2500ms", "rl-wait", "--", "true"]));
    std::thread::sleep(Duration::from_millis(300)); // connected to all three, waiting
    servers[1].pause();
    servers[2].pause();
    let out = waiter.finish(Duration::from_secs(30));
    servers[1].resume();
    servers[2].resume();
    assert_eq!(code(&out), Some(75), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("not obtained within") && stderr(&out).contains("QUORUM_NOT_REACHED"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_server_that_stops_answering_ends_in_lost_when_the_lease_runs_out() {
    let server = RedisServer::start();
    let dir = TempDir::new("silent");
    let (got, ready) = (dir.path("got"), dir.path("ready"));
    let mut c = on(&server);
    c.args(["exec", "--ttl", "600ms", "--kill-grace", "5s", "silent", "--", "sh", "-c", TRAP_TERM, "sh"])
        .arg(&got)
        .arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    server.pause(); // renewals get no answer: the local deadline passes
    let out = p.finish(Duration::from_secs(30));
    server.resume();
    assert_eq!(code(&out), Some(76), "stderr: {}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&got).unwrap_or_default().trim(), "term");
}

#[test]
fn the_command_gets_sigterm_if_ferrolock_itself_is_killed() {
    let server = RedisServer::start();
    let dir = TempDir::new("orphan");
    let (got, ready) = (dir.path("got"), dir.path("ready"));
    let mut c = on(&server);
    c.args(["exec", "orphan", "--", "sh", "-c", TRAP_TERM, "sh"]).arg(&got).arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    p.signal(libc::SIGKILL);
    let out = p.finish(Duration::from_secs(20));
    assert_eq!(out.status.code(), None, "killed");
    let start = std::time::Instant::now();
    while !got.exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "the command never got SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(std::fs::read_to_string(&got).unwrap_or_default().trim(), "term");
}

/// Whether process `pid` is gone (or a zombie waiting for its new parent to reap it).
fn gone(pid: &str) -> bool {
    matches!(proc_state(pid), 'Z' | '?')
}

#[test]
fn a_loss_stops_the_commands_children_too_when_not_on_a_terminal() {
    let server = RedisServer::start();
    let dir = TempDir::new("tree");
    let (pid_file, ready) = (dir.path("pid"), dir.path("ready"));
    // The shell itself dies of SIGTERM at once (no trap) without passing it on to its child.
    // Its child does not hold the output pipes, so ferrolock's exit is seen at once.
    let script = r#"sleep 60 >/dev/null 2>&1 & echo $! > "$1"; touch "$2"; wait"#;
    let mut c = on(&server);
    c.args(["exec", "--ttl", "600ms", "tree", "--", "sh", "-c", script, "sh"]).arg(&pid_file).arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    let grandchild = std::fs::read_to_string(&pid_file).expect("pid").trim().to_owned();
    assert!(!gone(&grandchild));
    let _: i64 = server.cmd(&["DEL", "ferrolock:{tree}"]);
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(76), "stderr: {}", stderr(&out));
    let start = Instant::now();
    while !gone(&grandchild) {
        if start.elapsed() > Duration::from_secs(10) {
            if let Ok(pid) = grandchild.parse::<libc::pid_t>()
                && pid > 0
            {
                // SAFETY: kill(2) of the test's own grandchild, before failing.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            panic!("the command's child {grandchild} outlived the lost lock");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// The same with a child that traps SIGTERM (to finish its current write): it outlives its
// shell, which dies at once; the group still gets the SIGKILL of --kill-grace, and ferrolock
// exits only then (it used to exit 76 as soon as the shell was gone, and the child ran on
// without the lock).
#[test]
fn after_a_loss_the_commands_group_gets_the_sigkill_of_the_grace() {
    let server = RedisServer::start();
    let dir = TempDir::new("lossgroup");
    let (pid_file, ready) = (dir.path("pid"), dir.path("ready"));
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
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(76), "stderr: {}", stderr(&out));
    let start = Instant::now();
    while !gone(&worker) && start.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !gone(&worker) {
        if let Ok(pid) = worker.parse::<libc::pid_t>()
            && pid > 0
        {
            // SAFETY: kill(2) of the test's own grandchild, before failing.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        panic!("the worker {worker} still ran after ferrolock exited 76; stderr: {}", stderr(&out));
    }
}

/// `--fair`: runs waiting on a held name get it in the order they started waiting.
#[test]
fn fair_runs_get_the_lock_in_arrival_order() {
    let server = RedisServer::start();
    let dir = TempDir::new("fair");
    let (ready, log) = (dir.path("ready"), dir.path("order.log"));
    let first = holder(&server, "fair", &ready, &["--fair"]);
    let mut waiting = Vec::new();
    for (i, id) in ["b", "c", "d"].into_iter().enumerate() {
        let mut c = on(&server);
        c.args([
            "exec",
            "--fair",
            "--quiet",
            "--wait",
            "30s",
            "fair",
            "--",
            "sh",
            "-c",
            "echo \"$2\" >> \"$1\"",
            "sh",
        ])
        .arg(&log)
        .arg(id);
        waiting.push(Proc::spawn(&mut c));
        let t0 = Instant::now();
        while server.cmd::<i64>(&["LLEN", "ferrolock:{fair}:queue"]) != i as i64 + 1 {
            assert!(t0.elapsed() < Duration::from_secs(10), "run {id} never queued");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    first.signal(libc::SIGTERM);
    first.finish(Duration::from_secs(20));
    for p in waiting {
        let out = p.finish(Duration::from_secs(30));
        assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    }
    assert_eq!(read_lines(&log), ["b", "c", "d"]);
    assert!(!held(&server, "fair"));
}

/// On panic (a failing check), SIGKILL the process group `pgid` the test's command leads, so that
/// a command left stopped or trapping SIGTERM does not outlive the test.
struct KillGroupOnPanic(String);

impl Drop for KillGroupOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Ok(pgid) = self.0.parse::<libc::pid_t>()
            && pgid > 0
        {
            // SAFETY: kill(2) of the process group of the test's own command.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

/// Waits (at most 20 s) until `pid`'s state is `want` ('T': stopped).
fn wait_for_state(pid: &str, want: char) {
    let start = Instant::now();
    while proc_state(pid) != want {
        assert!(start.elapsed() < Duration::from_secs(20), "process {pid} never reached state {want}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

// After a loss, a command stopped by a forwarded SIGTSTP gets a SIGCONT with its SIGTERM, and
// acts on it at once: left stopped, it ran on (as far as its lock is concerned) until the
// SIGKILL at the end of --kill-grace (10 minutes here), and ferrolock with it.
#[test]
fn a_loss_continues_a_stopped_command_so_that_it_acts_on_the_sigterm() {
    let server = RedisServer::start();
    let dir = TempDir::new("loststopped");
    let pid_file = dir.path("pid");
    let mut c = on(&server);
    c.args(["exec", "--ttl", "3s", "--kill-grace", "10m", "loststopped", "--", "sh", "-c"])
        .args([r#"exec >/dev/null 2>&1; echo $$ > "$1.t"; mv "$1.t" "$1"; exec sleep 60"#, "sh"])
        .arg(&pid_file);
    let p = Proc::spawn(&mut c);
    wait_for_file(&pid_file);
    let cmd_pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    let _cleanup = KillGroupOnPanic(cmd_pid.clone());
    p.signal(libc::SIGTSTP);
    wait_for_state(&cmd_pid, 'T');
    let deleted: i64 = server.cmd(&["DEL", "ferrolock:{loststopped}"]);
    assert_eq!(deleted, 1);
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(76), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("killed by SIGTERM"), "{}", stderr(&out));
}

// Signals still reach the command after a loss, while it finishes within its grace: a second
// signal (an operator's SIGINT, a supervisor's stop) must not wait for the SIGKILL of the grace.
#[test]
fn signals_after_a_loss_still_reach_the_command() {
    let server = RedisServer::start();
    let dir = TempDir::new("lostsig");
    let (got, ready) = (dir.path("got"), dir.path("ready"));
    // Notes a SIGTERM and runs on (its clean-up); a SIGUSR1 ends it with status 9.
    let script = r#"exec >/dev/null 2>&1; trap 'echo term > "$1"' TERM; trap 'exit 9' USR1; echo $$ > "$2.t"; mv "$2.t" "$2"
        while :; do sleep 0.05; done"#;
    let mut c = on(&server);
    c.args(["exec", "--ttl", "3s", "--kill-grace", "10m", "lostsig", "--", "sh", "-c", script, "sh"])
        .arg(&got)
        .arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    let _cleanup = KillGroupOnPanic(std::fs::read_to_string(&ready).unwrap().trim().to_owned());
    let _: i64 = server.cmd(&["DEL", "ferrolock:{lostsig}"]);
    wait_for_file(&got); // the loss's SIGTERM arrived; the command runs on
    p.signal(libc::SIGUSR1);
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(76), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("it exited with status 9"), "{}", stderr(&out));
}

// A loss that only the release finds (the command ended before the next renewal) is a loss
// too: the command ran without the lock for a while, and its caller must hear of it.
#[test]
fn a_lock_found_lost_when_the_command_ends_exits_with_the_lost_code() {
    let server = RedisServer::start();
    let dir = TempDir::new("foundlost");
    let (ready, go) = (dir.path("ready"), dir.path("go"));
    let mut c = on(&server);
    // A 60 s lease is renewed after 20 s: the command ends long before that.
    c.args(["exec", "--ttl", "60s", "--lost-exit-code", "99", "foundlost", "--", "sh", "-c"])
        .args([r#"touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done"#, "sh"])
        .arg(&ready)
        .arg(&go);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    let deleted: i64 = server.cmd(&["DEL", "ferrolock:{foundlost}"]);
    assert_eq!(deleted, 1);
    std::fs::write(&go, "").expect("go");
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(99), "the command exited 0 without the lock: {}", stderr(&out));
    assert!(!held(&server, "foundlost"));
}

// A command's own exit status above 128 passes through as a status: ferrolock does not end by
// signal status-128 (which a shell would read as the same number, but a caller that looks at how
// it ended, or at a core dump, would not).
#[test]
fn a_command_status_above_128_is_an_exit_status_not_a_signal() {
    let server = RedisServer::start();
    for status in [130, 137, 143, 255] {
        let out = output(on(&server).args(["exec", "hi", "--", "sh", "-c", &format!("exit {status}")]));
        assert_eq!(out.status.code(), Some(status), "stderr: {}", stderr(&out));
        assert_eq!(signal_of(&out), None);
    }
}

// Without a terminal ferrolock takes SIGTSTP and SIGCONT; while it waits (no command yet) they
// must not end the wait.
#[test]
fn a_stop_and_continue_while_waiting_do_not_end_the_wait() {
    let server = RedisServer::start();
    let dir = TempDir::new("waitstop");
    let h = holder(&server, "waitstop", &dir.path("ready"), &[]);
    let ran = dir.path("ran");
    let mut c = on(&server);
    c.args(["exec", "--wait", "60s", "waitstop", "--", "sh", "-c", "touch \"$1\"", "sh"]).arg(&ran);
    let waiter = Proc::spawn(&mut c);
    wait_for_blocked(waiter.pid(), libc::SIGTSTP);
    waiter.signal(libc::SIGTSTP);
    waiter.signal(libc::SIGCONT);
    // (Let it take them while the lock is still held; it waits on either way.)
    std::thread::sleep(Duration::from_millis(500));
    h.signal(libc::SIGTERM);
    h.finish(Duration::from_secs(20));
    let out = waiter.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert!(ran.exists(), "the command did not run");
}

// A signal ignored when ferrolock started (a non-interactive shell starts `cmd &` with SIGINT
// and SIGQUIT ignored) stays ignored: it is neither taken nor passed on to the command.
#[test]
fn a_signal_ignored_at_the_start_is_not_passed_on() {
    use std::os::unix::process::CommandExt;
    let server = RedisServer::start();
    let dir = TempDir::new("ignored");
    let (got, ready) = (dir.path("got"), dir.path("ready"));
    // Handles SIGINT (notes it) and SIGUSR1 (ends with status 5). Perl runs pending handlers in
    // signal-number order, so a SIGINT sent before the SIGUSR1 is noted before it exits.
    let script = r#"my ($got, $ready) = @ARGV; my $done = 0;
        $SIG{INT} = sub { open(my $f, '>', $got) or die; print $f "int"; close $f };
        $SIG{USR1} = sub { $done = 1 };
        open(my $r, '>', $ready) or die; close $r;
        for (1..600) { last if $done; select(undef, undef, undef, 0.05) }
        exit($done ? 5 : 1);"#;
    let mut c = on(&server);
    // SAFETY: only signal(2), async-signal-safe, between fork and exec (after default_signals).
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    c.args(["exec", "ignored", "--", "perl", "-e", script]).arg(&got).arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    p.signal(libc::SIGINT);
    p.signal(libc::SIGUSR1);
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(5), "stderr: {}", stderr(&out));
    assert!(!got.exists(), "a SIGINT that ferrolock was started ignoring reached the command");
}

// `--wait 0s` still gives connecting one attempt's time (it used to give up connecting at once).
#[test]
fn wait_0s_still_connects() {
    let server = RedisServer::start();
    let out = output(on(&server).args(["exec", "--wait", "0s", "w0", "--", "true"]));
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert!(!held(&server, "w0"));
}

// ... and to a server that answers late: connecting to a paused server is still given one
// attempt's time with `--wait 0s` (a wait of zero used to bound connecting to nothing).
#[test]
fn wait_0s_still_connects_to_a_slow_server() {
    let server = RedisServer::start();
    server.pause();
    let mut p = Proc::spawn(on(&server).args(["exec", "--wait", "0s", "w0slow", "--", "true"]));
    wait_for_blocked(p.pid(), libc::SIGTERM); // ferrolock is up and connecting
    let running = p.still_running_after(Duration::from_millis(200));
    server.resume();
    assert!(running, "ferrolock gave up on a server that answers 200 ms late");
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert!(!held(&server, "w0slow"));
}

// A Redlock hold lost because most masters stopped answering is still on the master that
// answers (it renewed it while the others did not): ferrolock deletes it there before it exits.
// Left, it kept the lock from everyone for a lease that nobody held.
#[test]
fn after_a_redlock_loss_the_hold_on_the_answering_master_is_released() {
    let servers = ferrolock_testkit::start_many(3);
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let dir = TempDir::new("rllost");
    let ready = dir.path("ready");
    let mut c = ferrolock(&urls);
    c.args(["exec", "--ttl", "10s", "rl-lost", "--", "sh", "-c", "touch \"$1\"; exec sleep 60", "sh"])
        .arg(&ready);
    let p = Proc::spawn(&mut c);
    wait_for_file(&ready);
    assert!(servers.iter().all(|s| held(s, "rl-lost")));
    servers[1].pause();
    servers[2].pause();
    let out = p.finish(Duration::from_secs(60));
    servers[1].resume();
    servers[2].resume();
    assert_eq!(code(&out), Some(76), "stderr: {}", stderr(&out));
    assert!(!held(&servers[0], "rl-lost"), "the lost hold was left on the master that answers");
}
