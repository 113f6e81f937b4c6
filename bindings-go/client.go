package ferrolock

/*
#include <stdlib.h>
#include "ferrolock.h"
*/
import "C"

import (
	"context"
	"math"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// ClientOptions configures Connect. The zero value (or nil) means the core's defaults.
type ClientOptions struct {
	ConnectTimeout  time.Duration // TCP/TLS connect + handshake, per attempt (up to 4); 0: 2 s
	ResponseTimeout time.Duration // any one reply; 0: 1 s
	WatchdogTTL     time.Duration // lease of locks made without a TTL (renewed); 0: 30 s
	MaxNameLen      int           // longest lock name in bytes; 0: 64 KiB
	MaxReentrancy   uint32        // deepest re-entry through one Lock; 0: 1024
	Prefix          string        // key prefix; "": "ferrolock:" (unless NoPrefix)
	NoPrefix        bool          // keys without a prefix (Prefix must be ""), as prefix "" elsewhere

	// rediss:// only (the server's chain and host name are always verified):
	TLSCAFile   string // PEM CA certificates to trust instead of the system store
	TLSCertFile string // PEM client certificate for mutual TLS (with TLSKeyFile)
	TLSKeyFile  string // PEM private key of the client certificate

	// Replica acknowledgement (single server, Sentinel or Cluster; docs/GUARANTEES.md): replicas
	// that must acknowledge each grant (WAIT), else it is undone and ErrNotReplicated returned;
	// 0: off.
	ReplicaAcks        uint32
	ReplicaAcksTimeout time.Duration // longest wait for them (1 ms to 1 s, below ResponseTimeout); 0: 100 ms

	// Clock drift allowed per lease, TTL × DriftFactor + DriftMin (docs/PROTOCOL.md): a grant's
	// validity is its lease less that. DriftFactor in [0, 0.5); 0: 0.01 (a tiny value such as
	// 1e-9 stands for none). DriftMin at most 1 minute; 0: 2 ms.
	DriftFactor float64
	DriftMin    time.Duration
	// How long a lock's fence counter outlives its last grant (its key's idle expiry); 0: 7 days.
	FenceRetention time.Duration
	// How long an idle release-channel subscription is kept; 0: 10 s.
	SubscriptionLinger time.Duration

	// Redlock only (ConnectRedlock):
	RedlockQuorum      int           // masters that must grant; 0: a strict majority
	RedlockNodeTimeout time.Duration // per-master timeout, far below the TTL; 0: 50 ms
	RedlockRetryJitter time.Duration // bound of the random pause after a split vote; 0: 100 ms
	RedlockMaxInflight int           // most requests in flight on one master's connection; 0: 64
}

// Client is a connection to one Redis server, shared by the locks made from it. Safe for
// concurrent use. Close it when done: the finalizer only frees the handle, and closes nothing.
type Client struct {
	mu      sync.Mutex
	ptr     *C.ferrolock_client // nil once closed
	redlock bool                // made by ConnectRedlock (still answered after Close)
}

// Connect connects to url (redis://[user:password@]host[:port][/db], rediss:// for TLS,
// redis+sentinel://host:port[,host:port...]/master-name[/db] for the master found through
// Sentinel with failovers followed, redis+cluster://host:port[,host:port...] for Redis Cluster).
// It returns early with an error if ctx ends first (a connection that arrives late is closed).
func Connect(ctx context.Context, url string, opts *ClientOptions) (*Client, error) {
	return connect(ctx, []string{url}, opts, false)
}

// ConnectRedlock connects to independent masters for Redlock. The Client is used exactly like
// one from Connect; its locks take, renew and release on a quorum of the masters. Fails with
// ErrQuorumNotReached if fewer than a quorum can be reached now, ErrInvalidConfig for an even
// count without RedlockQuorum, a quorum that is not a strict majority, or a master listed twice.
func ConnectRedlock(ctx context.Context, urls []string, opts *ClientOptions) (*Client, error) {
	return connect(ctx, urls, opts, true)
}

func connect(ctx context.Context, urls []string, opts *ClientOptions, redlock bool) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextError(ctx, ErrTimeout)
	}
	var o C.ferrolock_client_options
	if opts != nil {
		// Negative values are mistakes, not "the default" (which 0 asks for).
		for _, f := range []struct {
			name  string
			value int64
		}{
			{"ConnectTimeout", int64(opts.ConnectTimeout)},
			{"ResponseTimeout", int64(opts.ResponseTimeout)},
			{"WatchdogTTL", int64(opts.WatchdogTTL)},
			{"ReplicaAcksTimeout", int64(opts.ReplicaAcksTimeout)},
			{"RedlockNodeTimeout", int64(opts.RedlockNodeTimeout)},
			{"DriftMin", int64(opts.DriftMin)},
			{"FenceRetention", int64(opts.FenceRetention)},
			{"SubscriptionLinger", int64(opts.SubscriptionLinger)},
			{"RedlockRetryJitter", int64(opts.RedlockRetryJitter)},
		} {
			if f.value < 0 {
				return nil, &Error{Code: ErrInvalidDuration, Message: "INVALID_DURATION: " + f.name + " is negative"}
			}
		}
		if opts.MaxNameLen < 0 || opts.RedlockQuorum < 0 || opts.RedlockMaxInflight < 0 {
			return nil, &Error{Code: ErrInvalidConfig, Message: "INVALID_CONFIG: MaxNameLen, RedlockQuorum and RedlockMaxInflight must not be negative"}
		}
		if opts.NoPrefix && opts.Prefix != "" {
			return nil, &Error{Code: ErrInvalidConfig, Message: "INVALID_CONFIG: NoPrefix with a non-empty Prefix"}
		}
		o.connect_timeout_ms = millis(opts.ConnectTimeout)
		o.response_timeout_ms = millis(opts.ResponseTimeout)
		o.watchdog_ttl_ms = millis(opts.WatchdogTTL)
		o.max_name_len = C.size_t(max(opts.MaxNameLen, 0))
		o.max_reentrancy = C.uint32_t(opts.MaxReentrancy)
		o.redlock_quorum = C.size_t(max(opts.RedlockQuorum, 0))
		o.redlock_node_timeout_ms = millis(opts.RedlockNodeTimeout)
		o.replica_acks = C.uint32_t(opts.ReplicaAcks)
		o.replica_acks_timeout_ms = millis(opts.ReplicaAcksTimeout)
		o.drift_factor = C.double(opts.DriftFactor) // NaN, infinite or out of range: refused by the core
		o.drift_min_ms = millis(opts.DriftMin)
		o.fence_retention_ms = millis(opts.FenceRetention)
		o.subscription_linger_ms = millis(opts.SubscriptionLinger)
		o.redlock_retry_jitter_ms = millis(opts.RedlockRetryJitter)
		o.redlock_max_inflight = C.size_t(opts.RedlockMaxInflight)
	}
	dial := func() (*C.ferrolock_client, error) {
		// C memory for everything passed: the call may outlive the caller (late completion).
		n := len(urls)
		ptrs := unsafe.Slice((**C.char)(C.calloc(C.size_t(max(n, 1)), C.size_t(unsafe.Sizeof((*C.char)(nil))))), n)
		lens := unsafe.Slice((*C.size_t)(C.calloc(C.size_t(max(n, 1)), C.size_t(unsafe.Sizeof(C.size_t(0))))), n)
		defer C.free(unsafe.Pointer(unsafe.SliceData(lens)))
		defer C.free(unsafe.Pointer(unsafe.SliceData(ptrs)))
		for i, u := range urls {
			ptrs[i] = (*C.char)(C.CBytes([]byte(u)))
			lens[i] = C.size_t(len(u))
			defer C.free(unsafe.Pointer(ptrs[i]))
		}
		oc := o
		if opts != nil && (opts.Prefix != "" || opts.NoPrefix) {
			// NoPrefix: a non-NULL pointer with length 0 (NULL means the default prefix).
			oc.prefix = C.CString(opts.Prefix)
			oc.prefix_len = C.size_t(len(opts.Prefix))
			defer C.free(unsafe.Pointer(oc.prefix))
		}
		if opts != nil {
			for _, f := range []struct {
				path string
				ptr  **C.char
				n    *C.size_t
			}{
				{opts.TLSCAFile, &oc.tls_ca_file, &oc.tls_ca_file_len},
				{opts.TLSCertFile, &oc.tls_cert_file, &oc.tls_cert_file_len},
				{opts.TLSKeyFile, &oc.tls_key_file, &oc.tls_key_file_len},
			} {
				if f.path != "" {
					*f.ptr = C.CString(f.path)
					*f.n = C.size_t(len(f.path))
					defer C.free(unsafe.Pointer(*f.ptr))
				}
			}
		}
		var p *C.ferrolock_client
		var cerr *C.ferrolock_error
		var rc C.ferrolock_result
		if redlock {
			rc = C.ferrolock_client_new_redlock(unsafe.SliceData(ptrs), unsafe.SliceData(lens), C.size_t(n), &oc, &p, &cerr)
		} else {
			rc = C.ferrolock_client_new(ptrs[0], lens[0], &oc, &p, &cerr)
		}
		return p, check(rc, cerr)
	}
	p, err := withContext(ctx, dial, func(p *C.ferrolock_client) { C.ferrolock_client_free(p) })
	if err != nil {
		return nil, err
	}
	c := &Client{redlock: redlock}
	c.ptr = p
	// The finalizer only frees the handle: a collected Client closes nothing (its Locks and
	// Helds keep working while referenced), as in the other languages.
	runtime.SetFinalizer(c, (*Client).free)
	return c, nil
}

// IsRedlock reports whether the client locks by quorum (made by ConnectRedlock), also after
// Close; false for a nil Client.
func (c *Client) IsRedlock() bool {
	return c != nil && c.redlock
}

// Close closes the client and everything made from it, without blocking, then frees it
// (docs/GUARANTEES.md, "Closing a client"). Idempotent; any goroutine may call it, also one
// reading Lost() or Context() of one of its holds.
//
// An Acquire of its locks waiting in another goroutine returns an error matching ErrClosed at
// once (one with a request on the wire when its reply comes, at most the response timeout).
// Live holds become lost (Lost() is closed, Context() cancelled with a cause matching ErrLost)
// and are not released: renewal stops and the lease runs out on the server; Release first if
// others should get the lock at once. Every later call on the client, its Locks and Helds that
// talks to the server returns an error matching ErrClosed (Ensure: ErrLost). Garbage
// collection of a Client closes nothing.
func (c *Client) Close() error {
	if p := c.take(); p != nil {
		C.ferrolock_client_close(p, nil)
		C.ferrolock_client_free(p)
		runtime.SetFinalizer(c, nil)
	}
	return nil
}

// free is the finalizer: it lets go of the handle without closing the client.
func (c *Client) free() {
	if p := c.take(); p != nil {
		C.ferrolock_client_free(p)
	}
}

// Lock makes a lock handle for name (any bytes; no I/O). Each handle has its own owner token:
// acquiring again through the same Lock re-enters; another Lock contends. nil opts: a
// watchdog-renewed lease of the client's WatchdogTTL.
func (c *Client) Lock(name string, opts *LockOptions) (*Lock, error) {
	p := c.load()
	if p == nil {
		return nil, closedError("client")
	}
	var o C.ferrolock_lock_options
	if opts != nil {
		if opts.TTL < 0 {
			return nil, &Error{Code: ErrInvalidDuration, Message: "INVALID_DURATION: TTL is negative"}
		}
		o.ttl_ms = millis(opts.TTL)
		o.renew = C.uint32_t(opts.Renew)
		if opts.Fair {
			o.fair = 1
		}
	}
	n, nlen := bytesArg(name)
	var l *C.ferrolock_lock
	var cerr *C.ferrolock_error
	rc := C.ferrolock_lock_new(p, n, nlen, &o, &l, &cerr)
	runtime.KeepAlive(c)
	runtime.KeepAlive(name)
	if err := check(rc, cerr); err != nil {
		return nil, err
	}
	lock := &Lock{name: name}
	lock.ptr = l
	runtime.SetFinalizer(lock, (*Lock).Close)
	return lock, nil
}

// ForceUnlock deletes whatever hold name has (administrative) and wakes its waiters; the former
// holder finds out at its next renewal. Reports whether anything was held.
func (c *Client) ForceUnlock(ctx context.Context, name string) (bool, error) {
	if ctx.Err() != nil {
		return false, contextError(ctx, ErrTimeout) // a context already done starts nothing
	}
	return withContext(ctx, func() (bool, error) {
		p := c.load()
		if p == nil {
			return false, closedError("client")
		}
		n, nlen := bytesArg(name)
		var was C.bool
		var cerr *C.ferrolock_error
		rc := C.ferrolock_client_force_unlock(p, n, nlen, &was, &cerr)
		runtime.KeepAlive(c)
		runtime.KeepAlive(name)
		return bool(was), check(rc, cerr)
	}, nil)
}

// LockInfo is what Inspect reports about a held lock.
type LockInfo struct {
	Owner []byte        // the holder's owner token (32 hex digits for ferrolock's own)
	Count uint32        // the holder's reentrancy depth
	Fence uint64        // the hold's fencing token
	TTL   time.Duration // server-side time to expiry; negative: the hold has no expiry
}

// Inspect reports who holds name (read-only; no Lock needed), or nil when it is free.
func (c *Client) Inspect(ctx context.Context, name string) (*LockInfo, error) {
	if ctx.Err() != nil {
		return nil, contextError(ctx, ErrTimeout)
	}
	return withContext(ctx, func() (*LockInfo, error) {
		p := c.load()
		if p == nil {
			return nil, closedError("client")
		}
		n, nlen := bytesArg(name)
		var info C.ferrolock_lock_info
		var cerr *C.ferrolock_error
		rc := C.ferrolock_client_inspect(p, n, nlen, &info, &cerr)
		runtime.KeepAlive(c)
		runtime.KeepAlive(name)
		if err := check(rc, cerr); err != nil || !bool(info.held) {
			return nil, err
		}
		owner := C.GoBytes(unsafe.Pointer(&info.owner[0]), C.int(min(int(info.owner_len), len(info.owner))))
		var ttl time.Duration
		switch ms := int64(info.ttl_ms); {
		case ms < 0:
			ttl = -1
		case ms > int64(math.MaxInt64/time.Millisecond):
			ttl = math.MaxInt64 // an expiry beyond ~292 years (set by someone else): not "none"
		default:
			ttl = time.Duration(ms) * time.Millisecond
		}
		return &LockInfo{Owner: owner, Count: uint32(info.count), Fence: uint64(info.fence), TTL: ttl}, nil
	}, nil)
}

// load and take treat a nil *Client as closed, so that its methods return ErrClosed (and Close
// is a no-op) instead of panicking, e.g. after `c, err := Connect(…); defer c.Close()`.
func (c *Client) load() *C.ferrolock_client {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ptr
}

func (c *Client) take() *C.ferrolock_client {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.ptr
	c.ptr = nil
	return p
}
