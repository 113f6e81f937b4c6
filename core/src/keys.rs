//! The on-wire names of one lock (docs/PROTOCOL.md §Keys).

use crate::error::{Error, ErrorKind, Result};
use crate::options::ClientOptions;

/// The keys and channel of one lock. All share the hash tag `{<name>}`.
#[derive(Clone)]
pub(crate) struct Keys {
    pub name: Vec<u8>,
    /// `<prefix>{<name>}`: the hold (hash of owner, count, fence).
    pub hold: Vec<u8>,
    /// `<prefix>{<name>}:fence`: the last fencing token granted, kept for the retention period.
    pub fence: Vec<u8>,
    /// `<prefix>{<name>}:released`: where releases are published.
    pub channel: Vec<u8>,
    /// `<prefix>{<name>}:queue`: fair mode's waiters in arrival order (list of tokens).
    pub queue: Vec<u8>,
    /// `<prefix>{<name>}:waiters`: fair mode's waiter table (token -> stay and lease).
    pub waiters: Vec<u8>,
}

impl Keys {
    pub fn new(opts: &ClientOptions, name: &[u8]) -> Result<Keys> {
        if name.is_empty() {
            return Err(Error::new(ErrorKind::InvalidName, "lock name is empty"));
        }
        if name.len() > opts.max_name_len {
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!("lock name is {} bytes; the cap is {}", name.len(), opts.max_name_len),
            ));
        }
        let mut hold = Vec::with_capacity(opts.prefix.len() + name.len() + 2);
        hold.extend_from_slice(opts.prefix.as_bytes());
        hold.push(b'{');
        hold.extend_from_slice(name);
        hold.push(b'}');
        let with = |suffix: &[u8]| [hold.as_slice(), suffix].concat();
        Ok(Keys {
            name: name.to_vec(),
            fence: with(b":fence"),
            channel: with(b":released"),
            queue: with(b":queue"),
            waiters: with(b":waiters"),
            hold,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let k = Keys::new(&ClientOptions::default(), b"orders:42").unwrap();
        assert_eq!(k.hold, b"ferrolock:{orders:42}");
        assert_eq!(k.fence, b"ferrolock:{orders:42}:fence");
        assert_eq!(k.channel, b"ferrolock:{orders:42}:released");
        assert_eq!(k.queue, b"ferrolock:{orders:42}:queue");
        assert_eq!(k.waiters, b"ferrolock:{orders:42}:waiters");
        assert_eq!(Keys::new(&ClientOptions::default(), b"").err().unwrap().kind(), ErrorKind::InvalidName);
    }

    /// docs/PROTOCOL.md: a name is 1 ≤ length ≤ the cap. A name of exactly the cap is accepted,
    /// one byte more is not (the cap was off by one and only the side above it was tested).
    #[test]
    fn a_name_of_exactly_the_cap_is_accepted() {
        let o = ClientOptions { max_name_len: 8, ..ClientOptions::default() };
        assert!(Keys::new(&o, &[b'n'; 8]).is_ok());
        assert_eq!(Keys::new(&o, &[b'n'; 9]).err().unwrap().kind(), ErrorKind::InvalidName);
        let one = ClientOptions { max_name_len: 1, ..ClientOptions::default() };
        assert!(Keys::new(&one, b"n").is_ok());
        let d = ClientOptions::default();
        assert!(Keys::new(&d, &vec![b'n'; 64 * 1024]).is_ok());
        assert_eq!(Keys::new(&d, &vec![b'n'; 64 * 1024 + 1]).err().unwrap().kind(), ErrorKind::InvalidName);
    }
}
