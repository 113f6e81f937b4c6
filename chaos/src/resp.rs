//! A minimal RESP2 client over `std::net`: enough for the probes (`EVAL`, `MONITOR`) and the
//! nemesis's fault commands (`SCRIPT FLUSH`, `CLIENT KILL`, `CLIENT PAUSE`, `CONFIG SET`). It
//! shares no code with the library under test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Val>>),
}

impl Val {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            Val::Bulk(Some(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
            Val::Simple(s) => s.parse().ok(),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    pub fn connect(addr: &str, timeout: Duration) -> std::io::Result<Conn> {
        let sa = addr
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("cannot resolve {addr}")))?;
        let s = TcpStream::connect_timeout(&sa, timeout)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        Ok(Conn { w: s.try_clone()?, r: BufReader::new(s) })
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        self.w.set_read_timeout(t)
    }

    pub fn send(&mut self, args: &[&[u8]]) -> std::io::Result<()> {
        let mut buf = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&buf)
    }

    pub fn cmd(&mut self, args: &[&str]) -> std::io::Result<Val> {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&a)?;
        self.read()
    }

    pub fn read(&mut self) -> std::io::Result<Val> {
        let mut line = Vec::new();
        self.r.read_until(b'\n', &mut line)?;
        if line.len() < 3 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        let body = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
        let bad = || std::io::Error::other("malformed RESP");
        Ok(match line[0] {
            b'+' => Val::Simple(body),
            b'-' => Val::Error(body),
            b':' => Val::Int(body.parse().map_err(|_| bad())?),
            b'$' => {
                let n: i64 = body.parse().map_err(|_| bad())?;
                if n < 0 {
                    Val::Bulk(None)
                } else {
                    let mut b = vec![0; n as usize + 2];
                    self.r.read_exact(&mut b)?;
                    b.truncate(n as usize);
                    Val::Bulk(Some(b))
                }
            }
            b'*' => {
                let n: i64 = body.parse().map_err(|_| bad())?;
                if n < 0 {
                    Val::Array(None)
                } else {
                    let mut v = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        v.push(self.read()?);
                    }
                    Val::Array(Some(v))
                }
            }
            _ => return Err(bad()),
        })
    }
}

/// One command on a fresh connection (fault commands): the reply or the error text.
pub fn once(addr: &str, args: &[&str]) -> Result<Val, String> {
    let mut c = Conn::connect(addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    c.cmd(args).map_err(|e| e.to_string())
}
