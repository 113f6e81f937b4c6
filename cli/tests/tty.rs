//! Behaviour on a terminal (run under `script(1)` for a pseudo-terminal): the waiting display,
//! Ctrl-C reaching the command once, and the command using the terminal.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn bin_args(server: &RedisServer, rest: &[&str]) -> Vec<String> {
    let mut v = vec![BIN.to_owned(), "--redis".to_owned(), server.url()];
    v.extend(rest.iter().map(|s| s.to_string()));
    v
}

#[test]
fn waiting_on_a_terminal_shows_the_holder_and_quiet_shows_nothing() {
    let server = RedisServer::start();
    let dir = TempDir::new("spinner");
    let ready = dir.path("ready");
    let mut c = on(&server);
    c.args(["exec", "shown", "--", "sh", "-c", "touch \"$1\"; exec sleep 60", "sh"]).arg(&ready);
    let holder = Proc::spawn(&mut c);
    wait_for_file(&ready);
    let status = stdout(&output(on(&server).args(["status", "shown"])));
    let owner = status.lines().find_map(|l| l.strip_prefix("owner: ")).expect("owner").to_owned();

    let out = on_terminal(&bin_args(&server, &["exec", "--wait", "3s", "shown", "--", "true"]))
        .finish(Duration::from_secs(30));
    let screen = stdout(&out);
    assert_eq!(code(&out), Some(75), "{screen}");
    assert!(screen.contains("waiting"), "{screen}");
    assert!(screen.contains(&format!("for lock shown: held by owner {}", &owner[..8])), "{screen}");
    assert!(screen.contains("lease ends in"), "{screen}");

    let out = on_terminal(&bin_args(&server, &["exec", "-q", "--wait", "1s", "shown", "--", "true"]))
        .finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(75));
    assert_eq!(stdout(&out), "", "--quiet shows nothing");
    drop(holder);
}

// A background job (its own process group, not the terminal's foreground one) draws nothing:
// its line used to be repainted over the user's prompt every 100 ms (and at a `tostop` terminal
// the write stopped ferrolock).
#[test]
fn a_background_job_shows_no_waiting_line() {
    let server = RedisServer::start();
    let dir = TempDir::new("spinner-bg");
    let ready = dir.path("ready");
    let mut c = on(&server);
    c.args(["exec", "shown-bg", "--", "sh", "-c", "touch \"$1\"; exec sleep 60", "sh"]).arg(&ready);
    let holder = Proc::spawn(&mut c);
    wait_for_file(&ready);
    let exec = sh_words(&bin_args(&server, &["exec", "--wait", "1500ms", "shown-bg", "--", "true"]));
    // `set -m`: job control, so that `&` starts the job in a process group of its own.
    let out =
        terminal_line(&format!("set -m; {exec} & wait $!; echo \"rc=$?\"")).finish(Duration::from_secs(30));
    let screen = stdout(&out);
    assert!(screen.contains("rc=75"), "{screen}");
    assert!(!screen.contains("for lock shown-bg:"), "a background job drew its line: {screen}");
    drop(holder);
}

/// Writes its parent's pid (ferrolock's) to $ARGV[0], counts SIGINTs until 1 s after the first
/// one (at most 15 s), then writes the count to $ARGV[1].
const COUNT_INT: &str = r#"
my ($ready, $out) = @ARGV;
my $n = 0;
$SIG{INT} = sub { $n++ };
open(my $r, '>', "$ready.tmp") or die; print $r getppid(); close $r;
rename("$ready.tmp", $ready) or die;
my $after = 0;
for (1..300) {
    select(undef, undef, undef, 0.05);
    last if $n && ++$after >= 20;
}
open(my $o, '>', $out) or die; print $o $n; close $o;
exit 3;
"#;

/// The files of one run of COUNT_INT under `ferrolock exec NAME`.
struct Counting {
    _dir: TempDir,
    ready: std::path::PathBuf,
    count: std::path::PathBuf,
    /// `ferrolock --redis URL exec NAME -- perl count.pl READY COUNT`
    args: Vec<String>,
}

impl Counting {
    fn new(server: &RedisServer, tag: &str, name: &str) -> Counting {
        let dir = TempDir::new(tag);
        let script = dir.path("count.pl");
        std::fs::write(&script, COUNT_INT).expect("write script");
        let (ready, count) = (dir.path("ready"), dir.path("count"));
        let args = bin_args(server, &["exec", name, "--", "perl"])
            .into_iter()
            .chain([&script, &ready, &count].iter().map(|p| p.display().to_string()))
            .collect();
        Counting { _dir: dir, ready, count, args }
    }

    /// Waits for the command to be ready; returns ferrolock's pid.
    fn ferrolock_pid(&self) -> libc::pid_t {
        wait_for_file(&self.ready);
        std::fs::read_to_string(&self.ready).expect("ready").trim().parse().expect("pid")
    }

    fn sigints(&self) -> String {
        std::fs::read_to_string(&self.count).expect("count").trim().to_owned()
    }
}

#[test]
fn ctrl_c_on_a_terminal_reaches_the_command_once_and_the_lock_is_released() {
    let server = RedisServer::start();
    let run = Counting::new(&server, "ctrlc", "kb");
    let mut p = on_terminal(&run.args);
    run.ferrolock_pid();
    assert!(held(&server, "kb"));
    p.type_in(b"\x03");
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(3), "the command's own status: {}", stdout(&out));
    assert_eq!(run.sigints(), "1", "one SIGINT, not two");
    assert!(!held(&server, "kb"));
}

#[test]
fn a_sigint_sent_with_kill_on_a_terminal_is_passed_on() {
    let server = RedisServer::start();
    let run = Counting::new(&server, "killint", "kk");
    let p = on_terminal(&run.args);
    let pid = run.ferrolock_pid();
    // SAFETY: kill(2) of ferrolock, script(1)'s child: alive until the command exits.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(3), "the command's own status: {}", stdout(&out));
    assert_eq!(run.sigints(), "1", "passed on once");
    assert!(!held(&server, "kk"));
}

/// Whether `pid`'s process group is the foreground group of its terminal (/proc/PID/stat).
fn in_foreground(pid: libc::pid_t) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(") ").map(|(_, r)| r.split(' ').collect()).unwrap_or_default();
    // state ppid pgrp session tty_nr tpgid
    fields.len() > 5 && fields[2] == fields[5]
}

#[test]
fn ctrl_c_reaches_a_command_started_in_the_background_and_brought_to_the_foreground() {
    let server = RedisServer::start();
    let run = Counting::new(&server, "fg", "kf");
    // Started as a background job (job control on), then brought to the foreground with `fg`:
    // the command shares ferrolock's group (it has a controlling terminal), so it comes to the
    // foreground with it, and a Ctrl-C reaches it directly, once.
    let ready = format!("'{}'", run.ready.display());
    let line = format!(
        "set -m; {} & while [ ! -e {ready} ]; do sleep 0.05; done; fg %1 >/dev/null",
        sh_words(&run.args)
    );
    let mut p = terminal_line(&line);
    let pid = run.ferrolock_pid();
    let start = std::time::Instant::now();
    while !in_foreground(pid) {
        assert!(start.elapsed() < Duration::from_secs(20), "ferrolock never came to the foreground");
        std::thread::sleep(Duration::from_millis(10));
    }
    p.type_in(b"\x03");
    let out = p.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(3), "the command's own status: {}", stdout(&out));
    assert_eq!(run.sigints(), "1", "one SIGINT, not two");
    assert!(!held(&server, "kf"));
}

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

/// Runs the shell line `make_line(url, script)` on a terminal, where `script` is a command that
/// writes "$$ $PPID" to a ready file, reads a line from /dev/tty and writes it out; types
/// "hello" and checks the command got it (it used to be stopped by SIGTTIN for good, in a
/// background process group of its own, while ferrolock waited and renewed the lock).
fn reads_the_terminal(tag: &str, make_line: impl Fn(&str, &str) -> String) {
    let server = RedisServer::start();
    let dir = TempDir::new(tag);
    let (ready, out) = (dir.path("ready"), dir.path("out"));
    let (ready_s, out_s) = (ready.display().to_string(), out.display().to_string());
    let script = format!(
        "echo \"$$ $PPID\" > '{ready_s}.tmp'; mv '{ready_s}.tmp' '{ready_s}'; read x </dev/tty; echo \"got $x\" > '{out_s}'"
    );
    let mut p = terminal_line(&make_line(&server.url(), &script));
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
    if std::fs::read_to_string(&out).unwrap_or_default().trim() != "got hello" {
        let child_state = state(&child);
        let still_held = held(&server, "tty");
        kill9(&child);
        kill9(&fl);
        drop(p);
        panic!(
            "the command never read the terminal: state {child_state:?} ('T': stopped), lock held: {still_held}"
        );
    }
    let o = p.finish(Duration::from_secs(20));
    assert_eq!(code(&o), Some(0), "{}", stdout(&o));
}

fn exec_script(url: &str, script: &str) -> String {
    let args = [BIN, "--redis", url, "exec", "tty", "--", "sh", "-c", script].map(str::to_owned);
    sh_words(&args)
}

/// A job started from an interactive shell with its output redirected (to a log file) whose
/// command asks something on /dev/tty (sudo, ssh and git credentials do).
#[test]
fn a_command_reading_dev_tty_with_redirected_stdio_is_not_stopped() {
    reads_the_terminal("ttyredir", |url, script| {
        format!("exec {} </dev/null >/dev/null 2>&1", exec_script(url, script))
    });
}

/// Started in the background, brought to the foreground with `fg` a second later.
#[test]
fn a_command_started_in_the_background_can_read_the_terminal_after_fg() {
    reads_the_terminal("ttyfg", |url, script| {
        format!("set -m; {} & sleep 1; fg %1 >/dev/null", exec_script(url, script))
    });
}

// At a terminal a Ctrl-Z stops ferrolock together with its command (job control treats them
// as one job), and the shell gets its prompt back; `kill %1` then ends both and the lock is
// released. (ferrolock taking SIGTSTP there left the shell waiting for a job that never stopped.)
#[test]
fn ctrl_z_on_a_terminal_stops_ferrolock_with_its_command() {
    let server = RedisServer::start();
    let dir = TempDir::new("ctrlz");
    let ready = dir.path("ready");
    let ready_s = ready.display().to_string();
    let exec = sh_words(&bin_args(
        &server,
        &["exec", "kz", "--", "sh", "-c", "touch \"$1\"; exec sleep 60", "sh", &ready_s],
    ));
    let line = format!("set -m; {exec}; echo \"rc=$?\"; kill %1; kill -CONT %1; wait; echo done");
    let mut p = terminal_line(&line);
    wait_for_file(&ready);
    p.type_in(b"\x1a");
    let out = p.finish(Duration::from_secs(30));
    let screen = stdout(&out);
    assert!(screen.contains(&format!("rc={}", 128 + libc::SIGTSTP)), "the job did not stop: {screen}");
    assert!(screen.contains("done"), "{screen}");
    assert!(!held(&server, "kz"));
}
