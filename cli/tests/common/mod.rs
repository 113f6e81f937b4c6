#![allow(dead_code)]
//! Helpers for running the built `ferrolock` binary against real redis-server processes.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub use ferrolock_testkit::RedisServer;

pub const BIN: &str = env!("CARGO_BIN_EXE_ferrolock");

/// `ferrolock --redis <each url>`, with FERROLOCK_REDIS cleared.
pub fn ferrolock(urls: &[String]) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("FERROLOCK_REDIS").stdin(Stdio::null());
    default_signals(&mut c);
    // As from cron or CI: no controlling terminal, also when the tests run from one (the
    // command then leads a process group of its own, which exec.rs's tests rely on).
    // SAFETY: only setsid(2), async-signal-safe, between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    for u in urls {
        c.arg("--redis").arg(u);
    }
    c
}

pub fn on(server: &RedisServer) -> Command {
    ferrolock(&[server.url()])
}

/// Run to completion (at most 60 s) and collect the output.
pub fn output(cmd: &mut Command) -> Output {
    let child = Proc::spawn(cmd);
    child.finish(Duration::from_secs(60))
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A child process killed (SIGKILL, by its own pid) if the test ends before it does. Its stdout
/// and stderr are read by threads of their own from the start, so that a full pipe never stalls
/// it and a descendant that inherited the pipes (a command's `sleep`) never stalls the test.
pub struct Proc {
    child: Option<Child>,
    out: Option<Drain>,
    err: Option<Drain>,
}

/// One pipe read to its end by a thread; `take` waits a bounded time for that end.
struct Drain {
    done: std::sync::mpsc::Receiver<()>,
    bytes: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Drain {
    fn start(pipe: Option<impl std::io::Read + Send + 'static>) -> Option<Drain> {
        let mut pipe = pipe?;
        let bytes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, done) = std::sync::mpsc::channel();
        let sink = bytes.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
            let _ = tx.send(());
        });
        Some(Drain { done, bytes })
    }

    /// What was read, once the pipe ended or after `limit` (a descendant still holding it).
    fn take(self, limit: Duration) -> Vec<u8> {
        let _ = self.done.recv_timeout(limit);
        std::mem::take(&mut *self.bytes.lock().unwrap())
    }
}

impl Proc {
    pub fn spawn(cmd: &mut Command) -> Proc {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        Proc::from_child(cmd.spawn().expect("spawn ferrolock"))
    }

    fn from_child(mut child: Child) -> Proc {
        let out = Drain::start(child.stdout.take());
        let err = Drain::start(child.stderr.take());
        Proc { child: Some(child), out, err }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own unreaped child.
        unsafe {
            libc::kill(self.pid() as libc::pid_t, sig);
        }
    }

    /// Whether it is still running after `d`.
    pub fn still_running_after(&mut self, d: Duration) -> bool {
        std::thread::sleep(d);
        matches!(self.child.as_mut().expect("running").try_wait(), Ok(None))
    }

    /// Wait at most `limit` for the exit (panics after killing it otherwise) and collect output.
    pub fn finish(mut self, limit: Duration) -> Output {
        let mut child = self.child.take().expect("running");
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break Some(status);
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // Output written before the exit is in the pipes by now; a descendant that still holds
        // them is given a moment, not the test's time.
        let grace = Duration::from_secs(2);
        let stdout = self.out.take().map(|d| d.take(grace)).unwrap_or_default();
        let stderr = self.err.take().map(|d| d.take(grace)).unwrap_or_default();
        match status {
            Some(status) => Output { status, stdout, stderr },
            None => panic!(
                "ferrolock did not exit within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&stderr)
            ),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The exit code as a shell reads it: 128 + N for an end by signal N.
pub fn code(o: &Output) -> Option<i32> {
    status_code(o.status)
}

pub fn status_code(s: ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    s.code().or_else(|| s.signal().map(|sig| 128 + sig))
}

/// The signal that ended ferrolock, if one did.
pub fn signal_of(o: &Output) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    o.status.signal()
}

/// Wait (at most 20 s) until `path` exists.
pub fn wait_for_file(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Wait (at most 20 s) until process `pid` blocks `sig` (ferrolock exec takes its signals so
/// from its start, before connecting): from then on, `sig` reaches ferrolock's own handling
/// instead of ending the process with the default action.
pub fn wait_for_blocked(pid: u32, sig: libc::c_int) {
    let start = Instant::now();
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let mask = status.lines().find_map(|l| l.strip_prefix("SigBlk:")).map(str::trim);
        if mask.and_then(|m| u64::from_str_radix(m, 16).ok()).is_some_and(|m| m & (1 << (sig - 1)) != 0) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "process {pid} never blocked signal {sig}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Wait (at most 20 s) until `path` has at least `n` lines; returns them.
pub fn wait_for_lines(path: &Path, n: usize) -> Vec<String> {
    let start = Instant::now();
    loop {
        let lines = read_lines(path);
        if lines.len() >= n {
            return lines;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{} has {lines:?}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// Whether the lock's hold key exists on the server.
pub fn held(server: &RedisServer, name: &str) -> bool {
    let n: i64 = server.cmd(&["EXISTS", &format!("ferrolock:{{{name}}}")]);
    n == 1
}

/// A fresh empty directory for one test's files, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `tag` must be unique among the tests of one test binary.
    pub fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("ferrolock-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Start `c` with SIGINT and SIGQUIT at their default actions. The tests may run with them
/// ignored (a non-interactive shell starts background jobs so, and the tool's environment may
/// too); ferrolock then, by design, leaves them ignored and passes nothing on, which is not what
/// these tests are about.
pub fn default_signals(c: &mut Command) {
    // SAFETY: only signal(2), async-signal-safe, between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// Run `args` (the ferrolock binary first) on a pseudo-terminal with `script(1)`: the process
/// gets a controlling terminal, and bytes written to the returned process's stdin are typed
/// into it (`\x03` is Ctrl-C). Its stdout is everything shown on the terminal.
///
/// script(1) runs its command line with `$SHELL -c` (`/bin/sh` when SHELL is unset). bash execs
/// a lone command, but dash (Debian's /bin/sh) forks it and stays in between as the terminal's
/// session leader, in the foreground group: Ctrl-C then kills that shell too, and `script -e`
/// reports 130 for it whatever ferrolock does. So the shell is pinned to /bin/sh and told to
/// `exec`: ferrolock itself is script's child, and its status is the one reported.
pub fn on_terminal(args: &[String]) -> Proc {
    terminal_line(&format!("exec {}", sh_words(args)))
}

/// Each argument single-quoted for sh, joined by spaces.
pub fn sh_words(args: &[String]) -> String {
    let words: Vec<String> = args.iter().map(|a| format!("'{}'", a.replace('\'', r"'\''"))).collect();
    words.join(" ")
}

/// Run the sh command line `line` on a pseudo-terminal with `script(1)` (see [`on_terminal`]).
pub fn terminal_line(line: &str) -> Proc {
    let mut c = Command::new("script");
    c.args(["-qfec", line, "/dev/null"]).env("SHELL", "/bin/sh").env_remove("FERROLOCK_REDIS");
    default_signals(&mut c);
    c.stdin(Stdio::piped());
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    Proc::from_child(c.spawn().expect("run script(1) from util-linux (needed for the terminal tests)"))
}

impl Proc {
    /// Type `bytes` on the process's stdin (spawned with a piped stdin).
    pub fn type_in(&mut self, bytes: &[u8]) {
        use std::io::Write;
        let stdin = self.child.as_mut().and_then(|c| c.stdin.as_mut()).expect("piped stdin");
        stdin.write_all(bytes).expect("write stdin");
        stdin.flush().expect("flush stdin");
    }
}
