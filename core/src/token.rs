//! Owner tokens: 128 bits from the OS CSPRNG, hex encoded. Never time- or pid-based.

use crate::error::{Error, ErrorKind, Result};

/// A fresh owner token: 32 lowercase hex digits of OS randomness.
pub fn new_token() -> Result<String> {
    let mut buf = [0u8; 16];
    getrandom::fill(&mut buf)
        .map_err(|e| Error::new(ErrorKind::Internal, format!("OS random source failed: {e}")))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn tokens_are_unique_and_uniform() {
        let n = 1_000_000;
        let mut seen = HashSet::with_capacity(n);
        let mut nibbles = [0u64; 16];
        for _ in 0..n {
            let t = new_token().unwrap();
            assert_eq!(t.len(), 32);
            for c in t.bytes() {
                nibbles[(c as char).to_digit(16).unwrap() as usize] += 1;
            }
            assert!(seen.insert(t));
        }
        // Chi-square over 16 nibble values (15 degrees of freedom): 50 is far beyond p = 1e-5.
        let expected = (n as f64 * 32.0) / 16.0;
        let chi: f64 = nibbles.iter().map(|&o| (o as f64 - expected).powi(2) / expected).sum();
        assert!(chi < 50.0, "chi-square {chi}");
    }
}
