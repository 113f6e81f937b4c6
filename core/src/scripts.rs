//! The audited Lua scripts (one file per operation under `core/scripts/`).
//!
//! Single calls go through `redis::Script::invoke_async`, which sends EVALSHA and loads the script
//! on NOSCRIPT. Pipelines (the watchdog's batched renewals) do not get that fallback: they check
//! each reply with [`is_noscript`] and load the script before retrying.

use std::sync::LazyLock;

pub(crate) static ACQUIRE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../scripts/acquire.lua")));
pub(crate) const RELEASE_SOURCE: &str = include_str!("../scripts/release.lua");
pub(crate) static RELEASE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE_SOURCE));
pub(crate) static EXTEND: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../scripts/extend.lua")));
pub(crate) static FORCE_UNLOCK: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../scripts/force_unlock.lua")));
pub(crate) static INSPECT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("../scripts/inspect.lua")));

pub(crate) const RAISE_FENCE_SOURCE: &str = include_str!("../scripts/raise_fence.lua");
pub(crate) static RAISE_FENCE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(RAISE_FENCE_SOURCE));

/// Every script, for naming the command on a script line in error messages.
fn all() -> [&'static redis::Script; 6] {
    [&ACQUIRE, &RELEASE, &EXTEND, &FORCE_UNLOCK, &INSPECT, &RAISE_FENCE]
}

fn source_of(sha: &str) -> Option<&'static str> {
    const SOURCES: [&str; 6] = [
        include_str!("../scripts/acquire.lua"),
        RELEASE_SOURCE,
        include_str!("../scripts/extend.lua"),
        include_str!("../scripts/force_unlock.lua"),
        include_str!("../scripts/inspect.lua"),
        RAISE_FENCE_SOURCE,
    ];
    all().iter().position(|s| s.get_hash() == sha).map(|i| SOURCES[i])
}

/// For Redis's "The user executing the script can't run this command or subcommand script:
/// <sha>, on @user_script:<line>." error: the command our script calls on that line (e.g.
/// `PUBLISH`), or `"a command"` when the line cannot be found.
pub(crate) fn forbidden_script_command(message: &str) -> Option<String> {
    let rest = message.split("can't run this command or subcommand").nth(1)?;
    let located = rest.split_once("script: ").and_then(|(_, r)| r.split_once(", on @user_script:"));
    let command = located.and_then(|(sha, line)| {
        let line: usize = line.trim_end_matches(|c: char| !c.is_ascii_digit()).parse().ok()?;
        let text = source_of(sha.trim())?.lines().nth(line.checked_sub(1)?)?;
        let name = text.split("call(").nth(1)?.trim_start_matches(['\'', '"', ' ']);
        Some(name.split(['\'', '"']).next()?.to_owned())
    });
    Some(command.unwrap_or_else(|| "a command".to_owned()))
}

pub(crate) fn is_noscript(e: &redis::RedisError) -> bool {
    e.code() == Some("NOSCRIPT")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_command_on_the_reported_line() {
        let src = include_str!("../scripts/release.lua");
        let line = src.lines().position(|l| l.contains("'PUBLISH'")).expect("a PUBLISH line") + 1;
        let msg = format!(
            "ERR The user executing the script can't run this command or subcommand script: {}, on \
             @user_script:{line}.",
            RELEASE.get_hash()
        );
        assert_eq!(forbidden_script_command(&msg).as_deref(), Some("PUBLISH"));
        let unknown =
            "ERR The user executing the script can't run this command or subcommand script: ff, on @x";
        assert_eq!(forbidden_script_command(unknown).as_deref(), Some("a command"));
        assert_eq!(forbidden_script_command("ERR something else"), None);
    }
}
