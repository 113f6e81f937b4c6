//! The docs' checkable claims that no behaviour test covers, compared with the code they describe
//! (no Redis needed): error names and codes quoted in the READMEs and docs/, the protocol version
//! named by docs/PROTOCOL.md and the scripts, and the ACL rule set of docs/SECURITY.md against
//! what the scripts run and what tests/acl.rs grants.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ferrolock::ErrorKind;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// Every Markdown page that describes the API to users.
fn pages() -> Vec<(String, String)> {
    let mut paths: Vec<String> = [
        "README.md",
        "CONTRIBUTING.md",
        "cli/README.md",
        "examples/README.md",
        "bindings-python/README.md",
        "bindings-node/README.md",
        "bindings-c/README.md",
        "bindings-go/README.md",
    ]
    .map(str::to_owned)
    .to_vec();
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/") {
        let name = entry.expect("docs/ entry").file_name().into_string().expect("UTF-8 file name");
        if name.ends_with(".md") {
            paths.push(format!("docs/{name}"));
        }
    }
    paths
        .into_iter()
        .map(|p| {
            let text = read(&p);
            (p, text)
        })
        .collect()
}

/// The words of `text` made of `[A-Za-z0-9_]` that start with `prefix` (and are not the tail of
/// a longer word).
fn words_with_prefix<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for (i, _) in text.match_indices(prefix) {
        if text[..i].chars().next_back().is_some_and(is_word) {
            continue;
        }
        let end = text[i..].find(|c: char| !is_word(c)).map_or(text.len(), |n| i + n);
        out.push(&text[i..end]);
    }
    out
}

#[test]
fn quoted_error_codes_match_the_error_kinds() {
    // "`NOT_REPLICATED` (306)": the name must be a kind and the number its code.
    let mut checked = 0;
    for (path, text) in pages() {
        let parts: Vec<&str> = text.split('`').collect();
        for pair in parts.windows(2) {
            let (name, after) = (pair[0], pair[1]);
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                continue; // not a `NAME` (code fences shift which parts are inside backticks)
            }
            let Some(code) =
                after.strip_prefix(" (").and_then(|a| a.get(..4)).and_then(|a| a.strip_suffix(')'))
            else {
                continue;
            };
            let Ok(code) = code.parse::<u32>() else { continue };
            let kind = ErrorKind::from_name(name);
            assert!(kind.is_some(), "{path}: `{name}` ({code}) is not an error kind");
            assert_eq!(
                kind.map(ErrorKind::code),
                Some(code),
                "{path}: `{name}` has another code than ({code})"
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "found only {checked} quoted codes: is the pattern still used?");
}

/// Whether `word` (a slice of `text`) is qualified by another package than ours, as a migration
/// guide names the peers' errors: `redsync.ErrTaken`, `redis.exceptions.LockError`.
fn foreign(text: &str, word: &str) -> bool {
    let at = word.as_ptr() as usize - text.as_ptr() as usize;
    let qualifier = text[..at]
        .strip_suffix('.')
        .and_then(|t| t.rsplit(|c: char| !c.is_ascii_alphanumeric() && c != '_').next());
    qualifier.is_some_and(|q| !q.is_empty() && q != "ferrolock")
}

#[test]
fn binding_error_names_in_the_docs_exist() {
    let kinds: BTreeSet<&str> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
    // C: FERROLOCK_RESULT_<NAME>.
    for (path, text) in pages() {
        for w in words_with_prefix(&text, "FERROLOCK_RESULT_") {
            let name = &w["FERROLOCK_RESULT_".len()..];
            assert!(name == "OK" || kinds.contains(name), "{path}: {w} is not a result code");
        }
    }
    // Go: the Err* constants generated into codes_gen.go.
    let go = read("bindings-go/codes_gen.go");
    let consts: BTreeSet<&str> =
        go.lines().filter_map(|l| l.strip_prefix("const ")?.split_whitespace().next()).collect();
    assert_eq!(consts.len(), ErrorKind::ALL.len(), "codes_gen.go: one constant per kind");
    for (path, text) in pages() {
        for w in words_with_prefix(&text, "Err") {
            if foreign(&text, w) {
                continue;
            }
            if w[3..].starts_with(|c: char| c.is_ascii_uppercase()) {
                assert!(consts.contains(w), "{path}: {w} is not a Go error code (codes_gen.go)");
            }
        }
    }
    // Python: the exception classes the package exports, and the builtins they extend.
    let init = read("bindings-python/python/ferrolock/__init__.py");
    let exported: BTreeSet<&str> = init.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    let builtins = ["TimeoutError", "ConnectionError", "ValueError", "TypeError"];
    for path in ["README.md", "bindings-python/README.md"] {
        let text = read(path);
        for w in text.split(|c: char| !c.is_ascii_alphanumeric()) {
            if foreign(&text, w) {
                continue;
            }
            if w.len() > "Error".len()
                && w.ends_with("Error")
                && w.starts_with(|c: char| c.is_ascii_uppercase())
            {
                assert!(
                    builtins.contains(&w) || exported.contains(w),
                    "{path}: {w} is not an exception class of the ferrolock package"
                );
            }
        }
    }
}

/// The `+command` permissions named anywhere in docs/SECURITY.md.
fn documented_permissions() -> BTreeSet<String> {
    read("docs/SECURITY.md")
        .split(|c: char| c.is_whitespace() || c == '`')
        .filter_map(|w| w.strip_prefix('+'))
        .map(|w| w.trim_end_matches([',', '.', ';', ')']).to_owned())
        .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_lowercase() || c == '|'))
        .collect()
}

#[test]
fn every_command_the_scripts_run_is_in_the_acl_docs() {
    let granted = documented_permissions();
    let mut seen = 0;
    for entry in std::fs::read_dir(root().join("core/scripts")).expect("core/scripts") {
        let path = entry.expect("script").path();
        let src = std::fs::read_to_string(&path).expect("read script");
        for (i, _) in src.match_indices("redis.call") {
            // redis.call('HGET', …) and pcall(redis.call, 'TIME')
            let rest = src[i + "redis.call".len()..].trim_start_matches(['(', ',', ' ']);
            let Some(rest) = rest.strip_prefix('\'') else { continue };
            let command = rest.split('\'').next().unwrap_or_default().to_ascii_lowercase();
            assert!(
                granted.contains(&command),
                "{} runs {command}, which docs/SECURITY.md never grants (+{command})",
                path.display()
            );
            seen += 1;
        }
    }
    assert!(seen > 20, "found only {seen} redis.call sites");
}

#[test]
fn the_acl_test_uses_the_documented_rule_set() {
    let doc = read("docs/SECURITY.md");
    let block = doc.split("ACL SETUSER locker on >PASSWORD").nth(1).and_then(|b| b.split("```").next());
    let documented: Vec<&str> =
        block.expect("the ACL SETUSER block in docs/SECURITY.md").split_whitespace().collect();
    let acl = read("core/tests/acl.rs");
    let rules = acl.split("const RULES: &[&str] = &[").nth(1).and_then(|r| r.split("];").next());
    let tested: Vec<&str> =
        rules.expect("RULES in core/tests/acl.rs").split('"').skip(1).step_by(2).collect();
    assert_eq!(documented, tested, "docs/SECURITY.md's rule set and core/tests/acl.rs's RULES differ");
}

#[test]
fn protocol_md_and_the_scripts_name_the_implemented_version() {
    let v = ferrolock::PROTOCOL_VERSION;
    let title = read("docs/PROTOCOL.md").lines().next().unwrap_or_default().to_owned();
    assert!(
        title.ends_with(&format!("version {v}")),
        "docs/PROTOCOL.md's title `{title}` is not version {v}"
    );
    for entry in std::fs::read_dir(root().join("core/scripts")).expect("core/scripts") {
        let path = entry.expect("script").path();
        let first = std::fs::read_to_string(&path)
            .expect("read script")
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        assert!(
            first.contains(&format!("(protocol v{v},")),
            "{}: `{first}` is not protocol v{v}",
            path.display()
        );
    }
}
