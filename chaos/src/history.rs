//! The history format every client writes (one JSON object per line, appended and flushed per
//! line so a `kill -9` loses at most the line being written):
//!
//! ```text
//! {"process":"rust-0","pid":1234,"lang":"rust","op":"acquire","type":"ok","key":"chaos",
//!  "fence":1712345678901234,"validity_ms":987.5,"t_mono_ns":123456789, ...extra}
//! ```
//!
//! `op`: `acquire`, `release`, `read`, `write` (resource operations), `lost` (the library's
//! lost-lock notification), `reenter` (W3), `deadline` (the client's believed expiry moved, from
//! `remaining()`), `start`, `exit`. `type`: `invoke`, `ok`, `fail` (definitely did not happen),
//! `info` (indeterminate: may have happened). Extra fields: `error` (stable error name),
//! `message`, `deadline_ns` (believed expiry, CLOCK_MONOTONIC), `value`, `count`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::{Map, Value, json};

use crate::monotonic_ns;

/// Appends history lines for one client process; shareable across threads (callbacks).
#[derive(Debug)]
pub struct History {
    out: Mutex<File>,
    process: String,
    lang: String,
    key: String,
}

impl History {
    pub fn create(path: &Path, process: &str, lang: &str, key: &str) -> std::io::Result<History> {
        let out = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(History {
            out: Mutex::new(out),
            process: process.to_owned(),
            lang: lang.to_owned(),
            key: key.to_owned(),
        })
    }

    /// Write one line stamped now; returns the stamp.
    pub fn emit(
        &self,
        op: &str,
        ty: &str,
        fence: Option<u64>,
        validity_ms: Option<f64>,
        extra: Value,
    ) -> u64 {
        let t = monotonic_ns();
        self.emit_at(t, op, ty, fence, validity_ms, extra);
        t
    }

    pub fn emit_at(
        &self,
        t: u64,
        op: &str,
        ty: &str,
        fence: Option<u64>,
        validity_ms: Option<f64>,
        extra: Value,
    ) {
        let mut m = Map::new();
        m.insert("process".into(), json!(self.process));
        m.insert("pid".into(), json!(std::process::id()));
        m.insert("lang".into(), json!(self.lang));
        m.insert("op".into(), json!(op));
        m.insert("type".into(), json!(ty));
        m.insert("key".into(), json!(self.key));
        m.insert("fence".into(), json!(fence));
        m.insert("validity_ms".into(), json!(validity_ms));
        m.insert("t_mono_ns".into(), json!(t));
        if let Value::Object(e) = extra {
            m.extend(e);
        }
        let mut line = Value::Object(m).to_string();
        line.push('\n');
        let mut f = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = f.write_all(line.as_bytes());
    }
}
