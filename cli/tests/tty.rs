//! Behaviour on a terminal (run under `script(1)` for a pseudo-terminal): the waiting display,
//! and Ctrl-C reaching the command once.

mod common;

use std::time::Duration;

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
    // Started as a background job (job control on): ferrolock is not in the terminal's
    // foreground, so the command gets its own process group; then `fg` brings ferrolock's
    // group, not the command's, to the foreground. A Ctrl-C reaches ferrolock only.
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
    assert_eq!(run.sigints(), "1", "passed on to the command's group");
    assert!(!held(&server, "kf"));
}
