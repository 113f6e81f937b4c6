//! The hot-path connection of a direct single-server client (docs/CONNECTIONS.md).
//!
//! A lock's acquire and release scripts are a request and its reply. Through the reconnecting
//! multiplexed connection each one crosses a channel to the driver task, a oneshot back and the
//! driver's RESP3 parser; measured with `client-stack` (bench/FINDINGS.md, "Client stack") that is
//! the largest single part of an uncontended acquire + release. [`HotConn`] is a second,
//! plain request/reply connection (RESP2, no pushes) on which the calling task writes its request
//! and reads its reply itself. It carries only the acquire and release scripts, and only for a
//! call that finds it free: a call that finds it busy goes through the multiplexed connection as
//! before, so concurrent calls still pipeline there.
//!
//! While this client waits on a lock (its release channel is subscribed), that lock's requests
//! stay on the multiplexed connection, where the release messages arrive: the wake-one rules of
//! notify.rs read a try's reply and the messages in one server order. Waking stays correct
//! across two connections (a waiter marks before it sends, so a release after its try always
//! wakes it), but a message that trails a grant's reply on the other connection would wake
//! another waiter for nothing.
//!
//! Two rules keep a handle's requests in order now that they can take two connections:
//!
//! * A request whose outcome is unknown (timed out, cancelled, or its connection broke) pins the
//!   handle ([`HotPin`]) to the connection it went out on: the handle's next requests (the undo
//!   of that acquire, the retry of that release) queue behind it there, in order, as they would
//!   on one connection. The pin ends with the next answered request, or when the connection it
//!   names is gone (a closed connection runs nothing more).
//! * A request abandoned once fully written stays on the hot connection: its reply is skipped
//!   when it arrives, and kept for the handle that abandoned it ([`HotPin::late_reply`]: a
//!   release retried behind its first try learns that the first try freed the lock). One
//!   abandoned while partly written closes the connection (Redis runs no half-received command).
//!
//! Not on this path: TLS, Sentinel and Cluster clients, Redlock, acquires with `replica_acks`
//! (their `WAIT` must share the script's connection, replicas.rs), renewals and everything else.
//! A handle's own requests that go on the multiplexed connection (that acquire pipeline, an
//! extend) wait first for a pin on the hot connection to settle ([`HotConn::settle_pin`]).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{ConnectionAddr, RedisError, RedisResult, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::Conn;
use crate::options::ClientOptions;

/// After a failed connect, calls skip the hot connection for this long.
const RETRY_CONNECT: Duration = Duration::from_millis(500);

/// A pin value: no pin.
const UNPINNED: u64 = 0;
/// A pin value: the multiplexed connection. Hot connections count generations from 2.
const MULTIPLEXED: u64 = 1;

/// A plain request/reply connection for the acquire and release scripts.
pub(crate) struct HotConn {
    endpoint: Endpoint,
    /// `AUTH` and `SELECT`, pre-encoded, and how many replies they get.
    setup: Vec<u8>,
    setup_replies: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
    state: tokio::sync::Mutex<State>,
    /// The generation of the connection now open (0: none); read without the state's lock.
    generation: AtomicU64,
    /// No connect before this instant (after a failed one).
    retry_at: Mutex<Option<Instant>>,
    enabled: AtomicBool,
    /// Tests' controls only: `false` leaves pins out (requests go wherever is free).
    pins: AtomicBool,
    /// Tests' controls only: `false` reads the next reply as this request's, stale or not.
    skip_stale: AtomicBool,
}

enum Endpoint {
    Tcp(String, u16),
    #[cfg(unix)]
    Unix(std::path::PathBuf),
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    #[cfg(unix)]
    Unix(tokio::net::UnixStream),
}

#[derive(Default)]
struct State {
    stream: Option<Stream>,
    /// Bytes read and not yet consumed (at most the start of a reply).
    buf: Vec<u8>,
    /// Replies still to come for requests nobody waits for any more, in order, each with the
    /// slot its handle looks in for it (a late reply: [`HotPin::late_reply`]).
    stale: VecDeque<Late>,
    /// Where the call now on this connection is; what an abandoned call leaves behind.
    phase: Phase,
    /// Generations handed out so far (+1 = the next connection's).
    generations: u64,
    /// The response timer, kept from call to call (see [`within`]). It lives as long as the
    /// stream: both belong to the runtime the stream was opened on (a client is tied to the
    /// runtime it runs on), and the request is polled before the timer, so a stream whose
    /// runtime has shut down fails its request before the timer is looked at.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum Phase {
    #[default]
    Idle,
    Writing,
    Reading,
}

/// A command, and the same packed for the wire: a lock handle keeps its constant ones (the
/// acquire, the full release) so each call sends them without building them again.
pub(crate) struct Request {
    cmd: redis::Cmd,
    packed: Vec<u8>,
}

impl Request {
    pub(crate) fn new(cmd: redis::Cmd) -> Request {
        Request { packed: cmd.get_packed_command(), cmd }
    }
}

/// Where a late reply goes: the handle that abandoned the request looks there.
type Late = Arc<Mutex<Option<Value>>>;

/// Where a handle's last request of unknown outcome went (see the module docs), and what it
/// learnt of that request later.
#[derive(Default)]
pub(crate) struct HotPin {
    route: AtomicU64,
    /// The slot of this handle's last request abandoned on the hot connection.
    abandoned: Mutex<Option<Late>>,
    /// The late reply the last answered request of this handle found, if any.
    found: Mutex<Option<Value>>,
}

impl HotPin {
    /// Send this handle's next request where the watchdog's renewals go (the multiplexed
    /// connection), unless an earlier request of unknown outcome already pins it.
    pub(crate) fn follow_renewals(&self) {
        let _ = self.route.compare_exchange(UNPINNED, MULTIPLEXED, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Pin to the multiplexed connection for a request sent there by other means (a pipeline);
    /// [`Self::answered`] when its reply came.
    pub(crate) fn multiplexed(&self) {
        self.route.store(MULTIPLEXED, Ordering::Release);
    }

    pub(crate) fn answered(&self) {
        self.route.store(UNPINNED, Ordering::Release);
    }

    /// The reply that this handle's request abandoned last on the hot connection got, if the
    /// request answered just before (the one whose result the caller holds) read it on its way:
    /// a retry pinned behind its first try learns how that try went. Taken once.
    pub(crate) fn late_reply(&self) -> Option<Value> {
        lock(&self.found).take()
    }

    /// A request of this handle was answered: what its abandoned one got, if that arrived, is
    /// now the caller's to look at (and no later request's).
    fn settle_late(&self) {
        let late = lock(&self.abandoned).take().and_then(|slot| lock(&slot).take());
        *lock(&self.found) = late;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How one call on the hot connection ended.
enum Outcome {
    /// The reply (a server error too).
    Answered(RedisResult<Value>),
    /// Written, or maybe written, and not answered.
    Unknown(RedisError),
    /// Not sent: no connection could be made.
    NotSent,
}

impl HotConn {
    /// The hot connection for a direct client of `info`, or `None` where it does not apply
    /// (TLS).
    pub(crate) fn for_server(info: &redis::ConnectionInfo, opts: &ClientOptions) -> Option<HotConn> {
        let endpoint = match info.addr() {
            ConnectionAddr::Tcp(host, port) => Endpoint::Tcp(host.clone(), *port),
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Endpoint::Unix(path.clone()),
            _ => return None,
        };
        let settings = info.redis_settings();
        let mut setup = Vec::new();
        let mut setup_replies = 0;
        if let Some(password) = settings.password().filter(|p| !p.is_empty()) {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            auth.write_packed_command(&mut setup);
            setup_replies += 1;
        }
        if settings.db() != 0 {
            redis::cmd("SELECT").arg(settings.db()).write_packed_command(&mut setup);
            setup_replies += 1;
        }
        Some(HotConn {
            endpoint,
            setup,
            setup_replies,
            connect_timeout: opts.connect_timeout,
            response_timeout: opts.response_timeout,
            state: tokio::sync::Mutex::new(State::default()),
            generation: AtomicU64::new(0),
            retry_at: Mutex::new(None),
            enabled: AtomicBool::new(true),
            pins: AtomicBool::new(true),
            skip_stale: AtomicBool::new(true),
        })
    }

    /// Tests and benchmarks: stop (`false`) or resume using the hot connection.
    pub(crate) fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// Tests' controls only: leave out pins (`pins: false`) or the skipping of stale replies.
    pub(crate) fn set_test_knobs(&self, pins: bool, skip_stale: bool) {
        self.pins.store(pins, Ordering::SeqCst);
        self.skip_stale.store(skip_stale, Ordering::SeqCst);
    }

    /// `cmd` on the hot connection if `pin` allows and it is free (or pinned to it), else on
    /// `conn`. `waited_on`: this client waits on the lock (its release channel is subscribed),
    /// so unless pinned the request goes where the release messages arrive (see the module
    /// docs). Errors are the driver's: a server error, or an I/O error or timeout whose outcome
    /// is unknown.
    pub(crate) async fn query(
        hot: Option<&HotConn>,
        conn: &Conn,
        pin: &HotPin,
        req: &Request,
        waited_on: bool,
    ) -> RedisResult<Value> {
        let mut pinned = pin.route.load(Ordering::Acquire);
        if hot.is_some_and(|h| !h.pins.load(Ordering::Relaxed)) {
            pinned = UNPINNED;
        }
        let hot = hot.filter(|h| h.enabled.load(Ordering::Relaxed) && pinned != MULTIPLEXED);
        if let Some(hot) = hot {
            let mine = pinned != UNPINNED && hot.generation.load(Ordering::Acquire) == pinned;
            if !mine && waited_on {
                return Box::pin(Self::multiplexed(conn, pin, &req.cmd)).await;
            }
            let state = if mine { Some(hot.state.lock().await) } else { hot.state.try_lock().ok() };
            if let Some(mut state) = state {
                match hot.call(&mut state, &req.packed, pin).await {
                    Outcome::Answered(r) => {
                        pin.route.store(UNPINNED, Ordering::Release);
                        pin.settle_late();
                        return r;
                    }
                    Outcome::Unknown(e) => return Err(e),
                    Outcome::NotSent => {}
                }
            }
        }
        Box::pin(Self::multiplexed(conn, pin, &req.cmd)).await
    }

    /// Before a request of this handle that must go on the multiplexed connection (the
    /// acquire pipeline with its `WAIT`, an extend): if `pin` holds the handle to the hot
    /// connection (a request of unknown outcome there), a `PING` queues behind that request, and
    /// its reply says everything before it has run, so nothing of this handle overtakes it. An
    /// error: the `PING` was not answered either, and the request must not go now.
    pub(crate) async fn settle_pin(hot: Option<&HotConn>, conn: &Conn, pin: &HotPin) -> RedisResult<()> {
        if hot.is_none() || pin.route.load(Ordering::Acquire) <= MULTIPLEXED {
            return Ok(());
        }
        let ping = Request::new(redis::cmd("PING"));
        Self::query(hot, conn, pin, &ping, false).await.map(drop)
    }

    async fn multiplexed(conn: &Conn, pin: &HotPin, cmd: &redis::Cmd) -> RedisResult<Value> {
        pin.route.store(MULTIPLEXED, Ordering::Release);
        // (The driver hands back a server error as a value; `query_async` would extract it.)
        let r = conn.clone().req_packed_command(cmd).await.and_then(Value::extract_error);
        let unknown =
            r.as_ref().is_err_and(|e| e.is_timeout() || e.is_io_error() || e.is_connection_dropped());
        if !unknown {
            pin.route.store(UNPINNED, Ordering::Release);
            pin.settle_late();
        }
        r
    }

    async fn call(
        &self,
        state: &mut tokio::sync::MutexGuard<'_, State>,
        packed: &[u8],
        pin: &HotPin,
    ) -> Outcome {
        let st: &mut State = state;
        if let Some(stream) = st.stream.as_mut()
            && !stream.still_open(&mut st.buf, st.stale.len())
        {
            // Closed while idle (a restarted server): nothing of ours was on it.
            st.close();
            self.generation.store(0, Ordering::Release);
        }
        if st.stream.is_none() && !Box::pin(self.connect(st)).await {
            return Outcome::NotSent;
        }
        let generation = state.generations;
        pin.route.store(generation, Ordering::Release);
        let turn = Turn { state, pin };
        let st = &mut *turn.state;
        if !self.skip_stale.load(Ordering::Relaxed) {
            st.stale.clear();
        }
        let deadline = tokio::time::Instant::now() + self.response_timeout;
        let mut timer = st.timer.take();
        let answer = within(&mut timer, deadline, std::pin::pin!(st.request(packed))).await;
        st.timer = timer;
        match answer {
            Some(Ok(v)) => Outcome::Answered(v),
            Some(Err(e)) => {
                // The connection broke: what it carried has run or never will.
                st.close();
                self.generation.store(0, Ordering::Release);
                Outcome::Unknown(e.into())
            }
            None => Outcome::Unknown(io::Error::from(io::ErrorKind::TimedOut).into()),
        }
        // `turn` settles an unfinished call (the timeout's) as it goes.
    }

    /// Open the connection (with `AUTH`/`SELECT`); `false` if that failed (then calls skip this
    /// connection for [`RETRY_CONNECT`]).
    async fn connect(&self, state: &mut State) -> bool {
        {
            let mut retry_at = self.retry_at.lock().unwrap_or_else(|p| p.into_inner());
            match *retry_at {
                Some(t) if Instant::now() < t => return false,
                _ => *retry_at = None,
            }
        }
        // A request waits for this connect (it falls back to the multiplexed connection after):
        // no longer than it would wait for a reply.
        let opened = tokio::time::timeout(self.connect_timeout.min(self.response_timeout), async {
            let mut stream = match &self.endpoint {
                Endpoint::Tcp(host, port) => {
                    let s = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                    s.set_nodelay(true)?;
                    Stream::Tcp(s)
                }
                #[cfg(unix)]
                Endpoint::Unix(path) => Stream::Unix(tokio::net::UnixStream::connect(path).await?),
            };
            let mut buf = Vec::new();
            if self.setup_replies > 0 {
                stream.write_all(&self.setup).await?;
                for _ in 0..self.setup_replies {
                    if let Value::ServerError(_) = read_reply(&mut stream, &mut buf).await? {
                        return Err(io::Error::other("AUTH or SELECT refused"));
                    }
                }
            }
            Ok::<_, io::Error>(stream)
        })
        .await;
        match opened {
            Ok(Ok(stream)) => {
                state.stream = Some(stream);
                state.timer = None; // made again on the runtime the new stream belongs to
                state.buf.clear();
                state.stale.clear();
                state.generations = state.generations.max(MULTIPLEXED) + 1;
                self.generation.store(state.generations, Ordering::Release);
                true
            }
            _ => {
                *self.retry_at.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(Instant::now() + RETRY_CONNECT);
                false
            }
        }
    }
}

/// `fut`'s output, or `None` once `deadline` has passed first.
///
/// `tokio::time::timeout` registers a new timer per call, and the runtime's driver is woken
/// (an eventfd write, and an `epoll_wait` that returns at once) whenever a new timer is due
/// before the one it last went to sleep for: with nothing earlier pending, once per request.
/// Instead `timer` is kept from call to call and only re-armed when it fires: a timer set for an
/// earlier call's deadline (which came first, so it is not later than this one) wakes this call
/// once, which then sets it to its own deadline.
/// (`fut` comes pinned by the caller: pinned in here, it would take its size twice in the
/// caller's future.)
async fn within<F: std::future::Future>(
    timer: &mut Option<Pin<Box<tokio::time::Sleep>>>,
    deadline: tokio::time::Instant,
    mut fut: Pin<&mut F>,
) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if t.deadline() > deadline {
            t.as_mut().reset(deadline);
        }
        loop {
            match t.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) if t.deadline() >= deadline => return Poll::Ready(None),
                Poll::Ready(()) => t.as_mut().reset(deadline),
            }
        }
    })
    .await
}

/// One call's turn on the connection: whatever the call leaves unfinished when it ends (a
/// timeout, or its future dropped) is settled here.
struct Turn<'a, 'b> {
    state: &'a mut tokio::sync::MutexGuard<'b, State>,
    pin: &'a HotPin,
}

impl Drop for Turn<'_, '_> {
    fn drop(&mut self) {
        let st = &mut **self.state;
        match std::mem::take(&mut st.phase) {
            Phase::Idle => {}
            Phase::Writing => st.close(), // Redis runs no half-received command
            Phase::Reading => {
                let late = Late::default();
                *lock(&self.pin.abandoned) = Some(late.clone());
                st.stale.push_back(late);
            }
        }
    }
}

impl State {
    /// Write `packed`, skip stale replies, read this request's reply.
    async fn request(&mut self, packed: &[u8]) -> io::Result<RedisResult<Value>> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(io::Error::from(io::ErrorKind::NotConnected));
        };
        self.phase = Phase::Writing;
        stream.write_all(packed).await?;
        self.phase = Phase::Reading;
        while !self.stale.is_empty() {
            // Popped only once read: a call dropped meanwhile leaves the queue as it was.
            let v = read_reply(stream, &mut self.buf).await?;
            if let Some(late) = self.stale.pop_front() {
                *lock(&late) = Some(v);
            }
        }
        let v = read_reply(stream, &mut self.buf).await?;
        self.phase = Phase::Idle;
        Ok(v.extract_error())
    }

    fn close(&mut self) {
        self.stream = None;
        self.timer = None;
        self.buf.clear();
        self.stale.clear();
        self.phase = Phase::Idle;
    }
}

impl Stream {
    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes).await,
            #[cfg(unix)]
            Stream::Unix(s) => s.write_all(bytes).await,
        }
    }

    /// Whether the server has not closed this connection, judged without waiting: bytes that
    /// already arrived are taken into `buf` (stale replies; with none due, the connection is out
    /// of step and counts as closed). Costs no system call unless the socket was marked readable.
    fn still_open(&mut self, buf: &mut Vec<u8>, stale: usize) -> bool {
        loop {
            buf.reserve(512);
            let r = match self {
                Stream::Tcp(s) => s.try_read_buf(buf),
                #[cfg(unix)]
                Stream::Unix(s) => s.try_read_buf(buf),
            };
            match r {
                Ok(0) => return false,
                Ok(_) if stale == 0 => return false,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
    }

    async fn read_more(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.reserve(512);
        let n = match self {
            Stream::Tcp(s) => s.read_buf(buf).await?,
            #[cfg(unix)]
            Stream::Unix(s) => s.read_buf(buf).await?,
        };
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        Ok(())
    }
}

/// Read one complete reply off `stream` (bytes after it stay in `buf`).
async fn read_reply(stream: &mut Stream, buf: &mut Vec<u8>) -> io::Result<Value> {
    loop {
        match resp::frame_len(buf) {
            Ok(Some(n)) => {
                let v = resp::parse(&buf[..n]);
                buf.drain(..n);
                return v;
            }
            Ok(None) => stream.read_more(buf).await?,
            Err(e) => return Err(e),
        }
    }
}

/// RESP2 replies: framing, and decoding into the driver's [`Value`].
mod resp {
    use std::io;

    use redis::Value;

    fn bad(what: &str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, format!("malformed reply: {what}"))
    }

    /// The line at the start of `buf` (without its CRLF) and the length with it.
    fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
        let end = buf.windows(2).position(|w| w == b"\r\n")?;
        Some((&buf[..end], end + 2))
    }

    fn number(digits: &[u8]) -> io::Result<i64> {
        std::str::from_utf8(digits).ok().and_then(|s| s.parse().ok()).ok_or_else(|| bad("a length"))
    }

    /// The length of the complete reply at the start of `buf`, `None` while it is incomplete.
    pub(super) fn frame_len(buf: &[u8]) -> io::Result<Option<usize>> {
        let Some((head, mut at)) = line(buf) else { return Ok(None) };
        match head.first() {
            Some(b'+' | b'-' | b':') => Ok(Some(at)),
            Some(b'$') => {
                let n = number(&head[1..])?;
                if n < 0 {
                    return Ok(Some(at));
                }
                let total = at + usize::try_from(n).map_err(|_| bad("a length"))? + 2;
                Ok((buf.len() >= total).then_some(total))
            }
            Some(b'*') => {
                let n = number(&head[1..])?;
                for _ in 0..n.max(0) {
                    match frame_len(&buf[at..])? {
                        Some(len) => at += len,
                        None => return Ok(None),
                    }
                }
                Ok(Some(at))
            }
            _ => Err(bad("an unknown type")),
        }
    }

    /// Decode one complete reply (as framed by [`frame_len`]).
    pub(super) fn parse(frame: &[u8]) -> io::Result<Value> {
        let (v, _) = value(frame)?;
        Ok(v)
    }

    fn value(buf: &[u8]) -> io::Result<(Value, usize)> {
        let (head, at) = line(buf).ok_or_else(|| bad("a truncated reply"))?;
        let body = &head[1..];
        Ok(match head[0] {
            b':' => (Value::Int(number(body)?), at),
            b'$' => match usize::try_from(number(body)?) {
                Err(_) => (Value::Nil, at),
                Ok(n) => (Value::BulkString(buf[at..at + n].to_vec()), at + n + 2),
            },
            b'*' => match usize::try_from(number(body)?) {
                Err(_) => (Value::Nil, at),
                Ok(n) => {
                    let mut items = Vec::with_capacity(n);
                    let mut used = at;
                    for _ in 0..n {
                        let (item, len) = value(&buf[used..])?;
                        items.push(item);
                        used += len;
                    }
                    (Value::Array(items), used)
                }
            },
            b'+' if body == b"OK" => (Value::Okay, at),
            b'+' => (Value::SimpleString(String::from_utf8_lossy(body).into_owned()), at),
            // Errors: the driver's own parser builds its error value (code, message).
            _ => (redis::parse_redis_value(&buf[..at]).map_err(|e| bad(&e.to_string()))?, at),
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn frames_and_values() {
            let reply = b"*3\r\n:1\r\n$5\r\nhello\r\n*2\r\n$-1\r\n+OK\r\n:9";
            let n = reply.len() - 2; // the trailing ":9" is the next reply, incomplete
            assert_eq!(frame_len(reply).unwrap(), Some(n));
            for cut in 0..n {
                assert_eq!(frame_len(&reply[..cut]).unwrap(), None, "cut at {cut}");
            }
            let v = parse(&reply[..n]).unwrap();
            assert_eq!(
                v,
                Value::Array(vec![
                    Value::Int(1),
                    Value::BulkString(b"hello".to_vec()),
                    Value::Array(vec![Value::Nil, Value::Okay]),
                ])
            );
            let err = parse(b"-NOSCRIPT No matching script\r\n").unwrap();
            let Value::ServerError(e) = err else { panic!("not an error: {err:?}") };
            assert_eq!(e.code(), "NOSCRIPT");
            assert!(frame_len(b"?1\r\n").is_err());
        }
    }
}
