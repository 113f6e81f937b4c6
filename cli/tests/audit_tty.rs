//! Audit: a command put in its own process group by `ferrolock exec` while ferrolock itself
//! holds the terminal's foreground cannot use the terminal: it is stopped by SIGTTIN for good,
//! and ferrolock waits for it forever, renewing the lock.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Process state letter from /proc/PID/stat ('T' = stopped), if the process exists.
fn state(pid: &str) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next())
}

fn kill9(pid: &str) {
    if let Ok(p) = pid.parse::<libc::pid_t>()
        && p > 0
    {
        // SAFETY: kill(2) of a process this test started (by pid).
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
}

/// Runs `line` on a terminal; the command writes "$$ $PPID" to READY, reads a line, writes it
/// to OUT. Types "hello\n", and checks the command got it.
fn run(tag: &str, make_line: impl Fn(&str, &str) -> String) {
    let server = RedisServer::start();
    let dir = TempDir::new(tag);
    let (ready, out) = (dir.path("ready"), dir.path("out"));
    let (ready_s, out_s) = (ready.display().to_string(), out.display().to_string());
    let mut p = terminal_line(&make_line(
        &server.url(),
        &format!(
            "echo \"$$ $PPID\" > '{ready_s}.tmp'; mv '{ready_s}.tmp' '{ready_s}'; read x </dev/tty; echo \"got $x\" > '{out_s}'"
        ),
    ));
    wait_for_file(&ready);
    let ids = std::fs::read_to_string(&ready).expect("ready");
    let (child, fl) = ids.trim().split_once(' ').expect("pids");
    let (child, fl) = (child.to_owned(), fl.to_owned());
    std::thread::sleep(Duration::from_millis(500));
    p.type_in(b"hello\n");
    let start = Instant::now();
    while !out.exists() && start.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = std::fs::read_to_string(&out).unwrap_or_default();
    let child_state = state(&child);
    let still_held = held(&server, "tty");
    if got.trim() != "got hello" {
        kill9(&child);
        kill9(&fl);
        drop(p);
        panic!(
            "the command never read the terminal: its state {child_state:?} ('T' = stopped), \
             ferrolock (pid {fl}) still waiting and the lock still held: {still_held}"
        );
    }
    let o = p.finish(Duration::from_secs(20));
    assert_eq!(code(&o), Some(0), "{}", stdout(&o));
}

/// A job run from an interactive shell with its output redirected (a log file) whose command
/// asks something on /dev/tty (sudo, ssh, git credentials all do): ferrolock is in the
/// terminal's foreground group, but no fd 0..2 is the terminal, so the command gets its own
/// (background) group and is stopped by SIGTTIN.
#[test]
fn a_command_reading_dev_tty_with_redirected_stdio_is_not_stopped() {
    run("ttyredir", |url, script| {
        format!(
            "exec {} </dev/null >/dev/null 2>&1",
            sh_words(&[
                BIN.to_owned(),
                "--redis".into(),
                url.to_owned(),
                "exec".into(),
                "tty".into(),
                "--".into(),
                "sh".into(),
                "-c".into(),
                script.to_owned(),
            ])
        )
    });
}

/// README: started in the background and brought to the foreground with `fg` is supported (a
/// Ctrl-C then reaches the command). The command, in its own group, is stopped by SIGTTIN as
/// soon as it reads the terminal, and `fg` (which continues ferrolock's group only) never
/// resumes it.
#[test]
fn a_command_started_in_the_background_can_read_the_terminal_after_fg() {
    run("ttyfg", |url, script| {
        let args = sh_words(&[
            BIN.to_owned(),
            "--redis".into(),
            url.to_owned(),
            "exec".into(),
            "tty".into(),
            "--".into(),
            "sh".into(),
            "-c".into(),
            script.to_owned(),
        ]);
        // Background job (job control on), brought to the foreground a second later.
        format!("set -m; {args} & sleep 1; fg %1 >/dev/null")
    });
}
