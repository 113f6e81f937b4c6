//! `ferrolock status`, `ferrolock unlock --force`, and command-line errors, end to end.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn status_and_forced_unlock_report_the_hold() {
    let server = RedisServer::start();
    let dir = TempDir::new("status");
    let fence_file = dir.path("fence");
    let mut c = on(&server);
    // Held through the checks below even if the machine is slow; after the forced unlock, the
    // holder notices at its next renewal (every 2 s).
    c.args(["exec", "--ttl", "6s", "--kill-grace", "5s", "report", "--", "sh", "-c"])
        .arg("echo $FERROLOCK_FENCE > \"$1.tmp\"; mv \"$1.tmp\" \"$1\"; exec sleep 60")
        .arg("sh")
        .arg(&fence_file);
    let holder = Proc::spawn(&mut c);
    wait_for_file(&fence_file);
    let fence = std::fs::read_to_string(&fence_file).expect("fence").trim().to_owned();

    let out = output(on(&server).args(["status", "report"]));
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    for want in ["name: report", "state: held", "count: 1", &format!("fence: {fence}"), "ttl: "] {
        assert!(text.lines().any(|l| l.starts_with(want)), "missing {want:?} in:\n{text}");
    }
    let owner = text.lines().find_map(|l| l.strip_prefix("owner: ")).expect("owner line").to_owned();
    assert_eq!(owner.len(), 32, "the owner token");

    let out = output(on(&server).args(["status", "--json", "report"]));
    let json = stdout(&out);
    assert_eq!(json.lines().count(), 1, "{json}");
    for want in [
        "\"name\":\"report\"".to_owned(),
        "\"held\":true".to_owned(),
        format!("\"owner\":\"{owner}\""),
        "\"count\":1".to_owned(),
        format!("\"fence\":{fence}"),
        format!("\"last_fence\":{fence}"),
        "\"ttl_ms\":".to_owned(),
    ] {
        assert!(json.contains(&want), "missing {want} in {json}");
    }
    // The remaining lease in milliseconds (6 s, renewed every 2 s).
    let ttl_ms: u64 = json
        .split("\"ttl_ms\":")
        .nth(1)
        .and_then(|r| r.split([',', '}']).next())
        .and_then(|v| v.parse().ok())
        .expect("ttl_ms");
    assert!((1000..=6000).contains(&ttl_ms), "ttl_ms {ttl_ms} in {json}");

    // Without --force nothing is removed.
    let out = output(on(&server).args(["unlock", "report"]));
    assert_eq!(code(&out), Some(2));
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
    assert!(held(&server, "report"));

    let out = output(on(&server).args(["unlock", "--force", "report"]));
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        format!("removed the hold on report: owner {owner}, count 1, fence {fence}")
    );
    assert!(!held(&server, "report"));

    // The holder finds out at its next renewal and stops its command.
    let out = holder.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(76), "stderr: {}", stderr(&out));

    let out = output(on(&server).args(["status", "report"]));
    let text = stdout(&out);
    assert!(text.contains("state: free") && text.contains(&format!("last_fence: {fence}")), "{text}");
    let out = output(on(&server).args(["status", "--json", "report"]));
    assert_eq!(
        stdout(&out).trim(),
        format!(
            "{{\"name\":\"report\",\"held\":false,\"owner\":null,\"count\":0,\"fence\":null,\
             \"ttl_ms\":null,\"last_fence\":{fence}}}"
        )
    );
    let out = output(on(&server).args(["unlock", "--force", "report"]));
    assert_eq!(code(&out), Some(0));
    assert_eq!(stdout(&out).trim(), "report was not held: nothing removed");
}

// Lock names are binary-safe: a name that is not UTF-8 is shown with its bad bytes as `\xNN`
// (it used to be shown with U+FFFD, so two different names read alike).
#[test]
fn names_that_are_not_utf8_are_shown_byte_for_byte() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let server = RedisServer::start();
    let (a, b) = (OsStr::from_bytes(b"caf\xe9"), OsStr::from_bytes(b"caf\xff"));
    let out = output(on(&server).arg("exec").arg(a).args(["--", "true"]));
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    let out = output(on(&server).arg("status").arg(a));
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert!(stdout(&out).starts_with("name: caf\\xe9\nstate: free\nlast_fence: "), "{}", stdout(&out));
    let out = output(on(&server).args(["status", "--json"]).arg(b));
    assert!(stdout(&out).starts_with("{\"name\":\"caf\\\\xff\",\"held\":false,"), "{}", stdout(&out));
    let out = output(on(&server).args(["unlock", "--force"]).arg(b));
    assert_eq!(stdout(&out).trim(), "caf\\xff was not held: nothing removed");
    // A backslash is doubled, so the text name `caf\xe9` does not print as the byte name
    // above; a control character is escaped, so a name cannot forge lines of the output.
    let out = output(on(&server).arg("status").arg(r"caf\xe9"));
    assert!(stdout(&out).starts_with("name: caf\\\\xe9\nstate: free\n"), "{}", stdout(&out));
    let out = output(on(&server).args(["status", "x\nstate: held\nowner: forged\x1b[2J"]));
    assert!(
        stdout(&out).starts_with("name: x\\x0astate: held\\x0aowner: forged\\x1b[2J\nstate: free\n"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn bad_durations_are_refused_with_one_line_and_code_2() {
    let server = RedisServer::start();
    for (flag, value, why) in [
        ("--wait", "5", "no unit"),
        ("--wait", "5x", "unknown unit"),
        ("--wait", "-1s", "not a duration"),
        ("--wait", "", "empty"),
        ("--ttl", "1.5s", "unknown unit"),
        ("--kill-grace", "forever", "not a duration"),
        ("--ttl", "9999999h", "too long"),
        ("--ttl", "1ms", "too short a lease"),
        ("--ttl", "10ms", "too short a lease"), // taken, it was lost at once (exit 76)
    ] {
        let out = output(on(&server).args(["exec", flag, value, "d", "--", "true"]));
        let err = stderr(&out);
        assert_eq!(code(&out), Some(2), "{flag} {value:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{flag} {value:?}: {err}");
        assert!(err.starts_with("ferrolock: ") && err.contains(why), "{flag} {value:?}: {err}");
    }
    assert!(!held(&server, "d"));
    let out = output(on(&server).args(["exec", "--wait", "1s", "--no-wait", "d", "--", "true"]));
    assert_eq!(code(&out), Some(2), "--wait and --no-wait conflict: {}", stderr(&out));
    let out = output(on(&server).args(["exec", "d", "true"]));
    assert_eq!(code(&out), Some(2), "the command must follow --: {}", stderr(&out));
    assert!(stderr(&out).contains("the command goes after `--`"), "{}", stderr(&out));
    // No subcommand: says so (it printed the tagline as its error).
    let out = output(&mut ferrolock(&[]));
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("a subcommand is required"), "{}", stderr(&out));
    // Two servers: advice the command line can follow (the library's names its quorum option).
    let out = output(ferrolock(&[server.url(), server.url()]).args(["status", "d"]));
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("odd number of --redis"), "{}", stderr(&out));

    // Refused before connecting: the same code with no server there (it was 125, the
    // connection error, before the name and lease were checked first).
    let nobody = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap(); // closed again below
        format!("redis://127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let long = "x".repeat(70_000);
    for args in [&["exec", &long, "--", "true"][..], &["exec", "", "--", "true"]] {
        let out = output(ferrolock(std::slice::from_ref(&nobody)).args(args));
        let err = stderr(&out);
        assert_eq!(code(&out), Some(2), "{args:?}: {err}");
        assert!(err.contains("INVALID_"), "{args:?}: {err}");
    }
    // Nothing listens there: no TLS hint (a refused connection is not a plain/TLS mix-up).
    let out = output(ferrolock(std::slice::from_ref(&nobody)).args(["status", "d"]));
    assert_eq!(code(&out), Some(125), "{}", stderr(&out));
    assert!(!stderr(&out).contains("TLS"), "{}", stderr(&out));
}

#[test]
fn errors_never_show_the_password() {
    // Set after start: the testkit's readiness check does not authenticate.
    let server = RedisServer::start();
    let _: () = server.cmd(&["CONFIG", "SET", "requirepass", "sekret-pw"]);
    let port = server.port();
    let wrong = format!("redis://:wrong-pw@127.0.0.1:{port}");
    let out = output(ferrolock(&[wrong]).args(["status", "x"]));
    let err = stderr(&out);
    assert_eq!(code(&out), Some(125), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("AUTH") && !err.contains("wrong-pw"), "{err}");

    let right = format!("redis://:sekret-pw@127.0.0.1:{port}");
    let out = output(ferrolock(std::slice::from_ref(&right)).args(["exec", "x", "--", "sh", "-c", "exit 7"]));
    assert_eq!(code(&out), Some(7), "{}", stderr(&out));

    // Unreachable server.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let out = output(ferrolock(&[format!("redis://u:sekret-pw@127.0.0.1:{closed}")]).args(["status", "x"]));
    let err = stderr(&out);
    assert_eq!(code(&out), Some(125), "{err}");
    assert!(err.contains("cannot connect") && !err.contains("sekret-pw"), "{err}");

    // FERROLOCK_REDIS is used when no --redis is given, and --help never shows its value.
    let mut c = ferrolock(&[]);
    c.env("FERROLOCK_REDIS", &right).args(["status", "x"]);
    let out = output(&mut c);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("state: free"));
    for args in [&["--help"][..], &["exec", "--help"][..]] {
        let mut c = ferrolock(&[]);
        c.env("FERROLOCK_REDIS", &right).args(args);
        let out = output(&mut c);
        assert_eq!(code(&out), Some(0));
        assert!(stdout(&out).contains("FERROLOCK_REDIS"));
        assert!(!stdout(&out).contains("sekret-pw") && !stderr(&out).contains("sekret-pw"));
    }
}

// --prefix (or FERROLOCK_PREFIX) names the keys the applications use, also no prefix at all, so
// the CLI can take, inspect and remove their locks.
#[test]
fn a_prefix_reaches_the_applications_keys() {
    let server = RedisServer::start();
    let dir = TempDir::new("prefix");
    let ready = dir.path("ready");
    let mut c = on(&server);
    c.args(["--prefix", "", "exec", "--ttl", "6s", "bare", "--", "sh", "-c"])
        .arg("touch \"$1\"; exec sleep 60")
        .arg("sh")
        .arg(&ready);
    let holder = Proc::spawn(&mut c);
    wait_for_file(&ready);
    assert_eq!(server.cmd::<i64>(&["EXISTS", "{bare}"]), 1, "the hold is not under the bare key");
    assert!(!held(&server, "bare"), "the default prefix was used");
    let out = output(on(&server).env("FERROLOCK_PREFIX", "").args(["status", "bare"]));
    assert!(stdout(&out).contains("state: held"), "{}", stdout(&out));
    let out = output(on(&server).args(["--prefix", "", "unlock", "--force", "bare"]));
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(server.cmd::<i64>(&["EXISTS", "{bare}"]), 0);
    let out = holder.finish(Duration::from_secs(30));
    assert_eq!(code(&out), Some(76), "the holder did not see its loss: {}", stderr(&out));
    let out = output(on(&server).args(["--prefix", "a{b", "status", "bare"]));
    assert_eq!(code(&out), Some(2), "a bad prefix is a usage error: {}", stderr(&out));
    // One that is not UTF-8 too (it was ignored: the default prefix locked another key).
    use std::os::unix::ffi::OsStrExt;
    let out = output(
        on(&server)
            .env("FERROLOCK_PREFIX", std::ffi::OsStr::from_bytes(b"app\xff:"))
            .args(["status", "bare"]),
    );
    assert_eq!(code(&out), Some(2), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("FERROLOCK_PREFIX"), "{}", stderr(&out));
}

// `--redis` and `--prefix` take precedence over FERROLOCK_REDIS and FERROLOCK_PREFIX (as the
// help says: the variables are the defaults), so a call can name other servers or keys than a
// wrapper's environment.
#[test]
fn flags_take_precedence_over_the_environment() {
    let server = RedisServer::start();
    let nobody = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap(); // closed again below
        format!("redis://127.0.0.1:{}", l.local_addr().unwrap().port())
    };
    let out = output(on(&server).env("FERROLOCK_REDIS", &nobody).args(["status", "envprec"]));
    assert_eq!(code(&out), Some(0), "FERROLOCK_REDIS was used over --redis: {}", stderr(&out));
    // Another owner's hold (docs/PROTOCOL.md) under the flag's prefix only.
    let _: i64 = server.cmd(&["HSET", "flag:{envprec}", "owner", "other", "count", "1", "fence", "1"]);
    let out =
        output(on(&server).env("FERROLOCK_PREFIX", "env:").args(["--prefix", "flag:", "status", "envprec"]));
    assert_eq!(code(&out), Some(0), "stderr: {}", stderr(&out));
    assert!(
        stdout(&out).contains("state: held"),
        "FERROLOCK_PREFIX was used over --prefix: {}",
        stdout(&out)
    );
}
