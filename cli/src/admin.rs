//! `ferrolock status` and `ferrolock unlock --force`.

use std::fmt::Write;
use std::os::unix::ffi::OsStrExt;

use ferrolock::Client;

use crate::duration::human;
use crate::fail::Fail;
use crate::{StatusArgs, UnlockArgs};

pub async fn status(client: &Client, a: StatusArgs) -> Result<u8, Fail> {
    let name = a.name.as_bytes();
    let shown = crate::shown(name);
    let doing = format!("cannot read lock {shown}");
    let info = client.inspect(name).await.map_err(|e| Fail::core(&doing, &e))?;
    let last = client.last_fence(name).await.map_err(|e| Fail::core(&doing, &e))?;
    let mut out = String::new();
    if a.json {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "null".to_owned());
        let _ = write!(
            out,
            concat!(
                "{{\"name\":{},\"held\":{},\"owner\":{},\"count\":{},",
                "\"fence\":{},\"ttl_ms\":{},\"last_fence\":{}}}"
            ),
            json_str(&shown),
            info.is_some(),
            opt(info.as_ref().map(|i| json_str(&crate::shown(&i.owner)))),
            info.as_ref().map_or(0, |i| i.count),
            opt(info.as_ref().map(|i| i.fence.to_string())),
            opt(info.as_ref().and_then(|i| i.ttl).map(|t| t.as_millis().to_string())),
            opt(last.map(|f| f.to_string())),
        );
    } else {
        let _ = writeln!(out, "name: {shown}");
        match &info {
            Some(i) => {
                let _ = writeln!(out, "state: held");
                let _ = writeln!(out, "owner: {}", crate::shown(&i.owner));
                let _ = writeln!(out, "count: {}", i.count);
                let _ = writeln!(out, "fence: {}", i.fence);
                let _ = writeln!(out, "ttl: {}", i.ttl.map_or_else(|| "none (no expiry)".to_owned(), human));
            }
            None => {
                let _ = writeln!(out, "state: free");
            }
        }
        let _ = write!(out, "last_fence: {}", last.map_or_else(|| "none".to_owned(), |f| f.to_string()));
    }
    out!("{out}");
    Ok(0)
}

pub async fn unlock(client: &Client, a: UnlockArgs) -> Result<u8, Fail> {
    let name = a.name.as_bytes();
    let shown = crate::shown(name);
    let removed =
        client.force_unlock(name).await.map_err(|e| Fail::core(&format!("cannot unlock {shown}"), &e))?;
    match removed {
        Some(i) => out!(
            "removed the hold on {shown}: owner {}, count {}, fence {}",
            crate::shown(&i.owner),
            i.count,
            i.fence
        ),
        None => out!("{shown} was not held: nothing removed"),
    }
    Ok(0)
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::json_str;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\nd\u{1}é"), "\"a\\\"b\\\\c\\nd\\u0001é\"");
    }
}
