// ferrolock for Node: the native classes (Client, Lock, Held) plus the parts that are plain JS:
// AbortSignal plumbing, Symbol.asyncDispose, onLost dispatch and client.withLock.
// No timing, retry or Redis logic lives here: that is all in the Rust core.
'use strict';

const path = require('node:path');

let native;
try {
  native = require('./ferrolock.node');
} catch (e) {
  const err = new Error(
    `ferrolock: the native addon is missing or cannot load (${path.join(__dirname, 'ferrolock.node')}); ` +
      'rebuild it with `npm rebuild ferrolock` (needs Rust/cargo)',
    { cause: e },
  );
  err.code = 'INTERNAL';
  throw err;
}

const { Client, Redlock, Lock, Held, errorCodes, PROTOCOL_VERSION } = native;

/** Every stable error code, by name: `ErrorCode.NOT_HELD === 'NOT_HELD'`. From the core's table. */
const ErrorCode = Object.freeze(Object.fromEntries(errorCodes().map((e) => [e.name, e.name])));

function code(name) {
  if (!(name in ErrorCode)) throw new Error(`ferrolock: unknown error code ${name} (binding bug)`);
  return name;
}
const INVALID_ARGUMENT = code('INVALID_ARGUMENT');
const INVALID_DURATION = code('INVALID_DURATION');
const INVALID_CONFIG = code('INVALID_CONFIG');
const CANCELLED = code('CANCELLED');
const NOT_HELD = code('NOT_HELD');
const LOST = code('LOST');
const INTERNAL = code('INTERNAL');

function makeError(kind, message, cause) {
  const err = new Error(message, cause === undefined ? undefined : { cause });
  err.code = kind;
  return err;
}

// napi's own argument-conversion failures (a string where a number was expected…) get the
// core's INVALID_ARGUMENT; anything else without one of our codes is INTERNAL (a bug).
const NAPI_ARGUMENT_STATUS = new Set([
  'InvalidArg', 'ObjectExpected', 'StringExpected', 'NameExpected', 'FunctionExpected',
  'NumberExpected', 'BooleanExpected', 'ArrayExpected', 'BigintExpected', 'DateExpected',
  'ArrayBufferExpected',
]);

function normalize(err) {
  if (err !== null && typeof err === 'object' && typeof err.code === 'string' && err.code in ErrorCode) {
    return err;
  }
  const status = err !== null && typeof err === 'object' ? err.code : undefined;
  const message = err instanceof Error ? err.message : String(err);
  if (NAPI_ARGUMENT_STATUS.has(status) || err instanceof TypeError) {
    // napi's conversion messages quote the offending value, which may be a URL with a
    // password: keep only the expected type and the field, never the value or the original.
    const expected = /into rust type `([^`]*)`(?: on ([\w.]+))?/.exec(message);
    const missing = /Missing field `(\w+)`(?: on ([\w.]+))?/.exec(message);
    const what = expected
      ? `expected ${expected[1]}${expected[2] ? ` for ${expected[2]}` : ''}`
      : missing
        ? `missing field ${missing[1]}${missing[2] ? ` of ${missing[2]}` : ''}`
        : /none of these types `String\(utf16\)`, `Vec<u8>`/.test(message)
          ? 'expected a string or a Buffer'
          : 'wrong argument type or receiver';
    return makeError(INVALID_ARGUMENT, `invalid argument: ${what}`);
  }
  return makeError(INTERNAL, `ferrolock: unexpected error: ${message}`, err);
}

// The keys of each options object (index.d.ts; test/bad-input.test.mjs compares the two), and
// which of them hold a nested options object. napi reads only the fields it knows, so another
// library's option (`timeout`, `retryCount`) or a misspelt one would be ignored without a word,
// and a nested value of the wrong type (`tls: true`) would read as "every field absent".
const LOCK_KEYS = ['ttl', 'renew', 'fair'];
const ACQUIRE_KEYS = ['wait', 'signal'];
const SCHEMAS = {
  client: {
    keys: ['connectTimeout', 'responseTimeout', 'prefix', 'maxNameLen', 'driftFactor', 'driftMin',
      'watchdogTtl', 'fenceRetention', 'maxReentrancy', 'subscriptionLinger', 'redlockQuorum',
      'redlockNodeTimeout', 'redlockRetryJitter', 'redlockMaxInflight', 'tls', 'replicaAcks'],
    nested: { tls: { keys: ['ca', 'cert', 'key'] }, replicaAcks: { keys: ['replicas', 'timeout'] } },
  },
  lock: { keys: LOCK_KEYS },
  acquire: { keys: ACQUIRE_KEYS },
  withLock: { keys: [...LOCK_KEYS, ...ACQUIRE_KEYS] },
};

// An options argument must be an object (napi would read a string's or number's missing
// properties as "all defaults" and silently accept it) with only the keys its schema knows.
function checkShape(what, o, schema) {
  if (typeof o !== 'object' || Array.isArray(o)) {
    throw makeError(INVALID_ARGUMENT, `invalid argument: ${what} must be an object`);
  }
  for (const k in o) {
    if (!schema.keys.includes(k)) {
      throw makeError(INVALID_ARGUMENT, `invalid argument: ${what} has no option '${k}' (it has ${schema.keys.join(', ')})`);
    }
    const nested = schema.nested?.[k];
    if (nested !== undefined && o[k] !== undefined && o[k] !== null) checkShape(`${what}.${k}`, o[k], nested);
  }
}

function checkOptions(what, o, schema) {
  if (o !== undefined && o !== null) checkShape(what, o, schema);
}

// `Client.connect(url, options)` / `Redlock.connect(urls, options)`: the options' keys, and TLS
// options name TLS: with a plain URL they are refused even when they set nothing (an ioredis
// habit is `tls: {}` to turn TLS on), not read as "connect in clear text".
function checkConnect([urls, options]) {
  checkOptions('options', options, SCHEMAS.client);
  if (options?.tls === undefined || options.tls === null) return;
  for (const url of Array.isArray(urls) ? urls : [urls]) {
    if (typeof url === 'string' && !/^rediss(\+[a-z]+)?:\/\//i.test(url)) {
      throw makeError(INVALID_CONFIG, 'TLS options are set but the URL is not rediss://: refusing to connect in clear text');
    }
  }
}

// `check(args)`, if given, refuses bad arguments before the native call.
function wrapSync(target, name, check = undefined) {
  const orig = target[name];
  Object.defineProperty(target, name, {
    value: function (...args) {
      try {
        check?.(args);
        return orig.apply(this, args);
      } catch (e) {
        throw normalize(e);
      }
    },
    writable: true,
    configurable: true,
  });
}

// An error the addon made when a call settled carries no JavaScript frames: give it the
// caller's (an async function's stack after an await includes its `async` callers). Only on
// the error path: a call that succeeds captures nothing.
function withCallerStack(err, fn) {
  if (err instanceof Error && typeof err.stack === 'string' && !err.stack.includes('\n    at ')) {
    Error.captureStackTrace(err, fn);
  }
  return err;
}

// Promise-returning methods always reject (never throw synchronously) with a coded error.
function wrapAsync(target, name, check = undefined) {
  const orig = target[name];
  Object.defineProperty(target, name, {
    value: async function wrapped(...args) {
      try {
        check?.(args);
        return await orig.apply(this, args);
      } catch (e) {
        throw withCallerStack(normalize(e), wrapped);
      }
    },
    writable: true,
    configurable: true,
  });
}

wrapAsync(Client, 'connect', checkConnect);
wrapAsync(Redlock, 'connect', checkConnect);
wrapSync(Client.prototype, 'lock', ([, options]) => checkOptions('options', options, SCHEMAS.lock));
wrapAsync(Client.prototype, 'inspect');
wrapAsync(Client.prototype, 'forceUnlock');
wrapAsync(Lock.prototype, 'tryAcquire');
wrapAsync(Held.prototype, 'release');
wrapAsync(Held.prototype, 'extend');
wrapSync(Held.prototype, 'ensure');
wrapAsync(Held.prototype, Symbol.asyncDispose);
wrapSync(Client.prototype, 'close');
wrapSync(Held.prototype, 'remaining');

// The native getters, with a wrong receiver (`Object.getOwnPropertyDescriptor(…).get.call({})`),
// fail with napi's own status as their code: give them ours.
function wrapGetter(target, name) {
  const d = Object.getOwnPropertyDescriptor(target, name);
  if (typeof d?.get !== 'function') throw new Error(`ferrolock: ${String(name)} is not a getter (binding bug)`);
  const get = d.get;
  Object.defineProperty(target, name, {
    ...d,
    get() {
      try {
        return get.call(this);
      } catch (e) {
        throw normalize(e);
      }
    },
  });
}
for (const name of ['fence', 'count', 'state']) wrapGetter(Held.prototype, name);
for (const name of ['name', 'ttl']) wrapGetter(Lock.prototype, name);
wrapGetter(Client.prototype, 'isRedlock');

function checkReceiver(self, cls, what) {
  if (!(self instanceof cls)) {
    throw makeError(INVALID_ARGUMENT, `invalid argument: ${what} needs a ${cls.name} as its receiver`);
  }
}

function isAbortSignal(s) {
  return s !== null && typeof s === 'object' && typeof s.aborted === 'boolean' &&
    typeof s.addEventListener === 'function' && typeof s.removeEventListener === 'function';
}

function acquireOptions(options) {
  if (options === undefined || options === null) return { wait: null, signal: undefined };
  checkShape('acquire options', options, SCHEMAS.acquire);
  const { wait = null, signal } = options;
  if (wait !== null && typeof wait !== 'number') {
    throw makeError(INVALID_DURATION, 'wait: must be a number of milliseconds (or null: no bound)');
  }
  if (signal !== undefined && signal !== null && !isAbortSignal(signal)) {
    throw makeError(INVALID_ARGUMENT, 'signal must be an AbortSignal');
  }
  return { wait, signal: signal ?? undefined };
}

/**
 * Acquire, waiting at most `wait` ms (omitted/null: without bound); rejects with
 * ACQUIRE_TIMEOUT when the wait elapses and CANCELLED when `signal` aborts. A cancelled acquire
 * leaves no hold behind (the core undoes any grant in flight; a grant that arrives after the
 * abort is released here, as Go releases one that races with the end of its ctx).
 */
Lock.prototype.acquire = async function acquire(options) {
  const { wait, signal } = acquireOptions(options);
  if (signal?.aborted) throw makeError(CANCELLED, 'the acquire was cancelled', signal.reason);
  const token = signal ? native._cancelToken() : null;
  const onAbort = () => native._cancel(token);
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const held = await this._acquire(wait, token);
    if (signal?.aborted) {
      // The abort came first (the grant was already on its way): the caller gave up, so hand
      // the grant back instead of resolving with a hold it no longer expects.
      await held.release().catch(() => {});
      throw makeError(CANCELLED, 'the acquire was cancelled', signal.reason);
    }
    return held;
  } catch (e) {
    const err = withCallerStack(normalize(e), acquire);
    // An aborted wait's cause is the abort's reason (the core's account of failed attempts, its
    // own cause, stays quoted in the message).
    if (err.code === CANCELLED && signal?.aborted) err.cause = signal.reason;
    throw err;
  } finally {
    signal?.removeEventListener('abort', onAbort);
  }
};

// Per-Held loss state, created on first use of `signal` or `onLost` (one native hook per hold
// level; untouched Helds cost nothing). Only JS references keep a state alive: its Held (through
// `losses`) and its signal (through `bySignal`). The state keeps its Held in turn, so a signal
// kept on its own keeps the hold, renewed, and aborts if it is lost: a "leader until the signal
// aborts" that kept only `held.signal` lost the lock at the next collection, and the signal never
// told it (the native hook dies with the Held's guard).
const losses = new WeakMap();
const bySignal = new WeakMap();

function report(err) {
  process.emitWarning(`ferrolock: an onLost callback threw: ${err instanceof Error ? err.stack : String(err)}`, {
    code: 'FERROLOCK_CALLBACK_ERROR',
  });
}

function fire(state, err) {
  state.error = err;
  state.controller.abort(err);
  for (const cb of state.callbacks.splice(0)) {
    try {
      cb(err);
    } catch (e) {
      report(e);
    }
  }
}

// The function handed to the native side. The core keeps it (through a threadsafe function,
// a strong reference V8 cannot see through) for as long as the hold lives, so it must not reach
// the Held: user callbacks and signal listeners often refer to it, and that cycle would keep the
// Held, its guard and the watchdog's renewals alive for good. It holds the state only weakly
// (and is made here, not inside `loss`, so that it closes over nothing else).
function nativeHook(state) {
  const ref = new WeakRef(state);
  return (err) => {
    const s = ref.deref();
    if (s !== undefined) fire(s, err);
  };
}

function whyLost(held) {
  try {
    held.ensure();
  } catch (e) {
    if (e.code === LOST) return e;
  }
  return makeError(LOST, 'the lock was lost');
}

function loss(held) {
  let s = losses.get(held);
  if (s === undefined) {
    s = { controller: new AbortController(), callbacks: [], error: null, held };
    losses.set(held, s);
    bySignal.set(s.controller.signal, s);
    if (held.state === 'lost') {
      // Already lost: abort now rather than on the next turn of the event loop, with the reason
      // ensure() names (the one the native hook would have brought).
      s.error = whyLost(held);
      s.controller.abort(s.error);
      return s;
    }
    held._onLost(nativeHook(s));
  }
  return s;
}

Object.defineProperty(Held.prototype, 'signal', {
  get() {
    checkReceiver(this, Held, 'held.signal');
    return loss(this).controller.signal;
  },
  configurable: true,
  enumerable: false,
});

/** Call `callback(err)` (err.code === 'LOST') once if the hold is lost; never after a release. */
Held.prototype.onLost = function onLost(callback) {
  checkReceiver(this, Held, 'held.onLost');
  if (typeof callback !== 'function') throw makeError(INVALID_ARGUMENT, 'onLost needs a function');
  const s = loss(this);
  if (s.error !== null) {
    const err = s.error;
    queueMicrotask(() => {
      try {
        callback(err);
      } catch (e) {
        report(e);
      }
    });
  } else {
    s.callbacks.push(callback);
  }
};

/**
 * Run `fn(signal, held)` holding lock `name`; release in `finally`. `signal` aborts if the lock
 * is lost. The body's error wins over a release error; after a successful body a failed
 * release (e.g. LOST) rejects.
 */
Client.prototype.withLock = async function withLock(name, fn, options) {
  checkReceiver(this, Client, 'client.withLock');
  if (typeof fn !== 'function') throw makeError(INVALID_ARGUMENT, 'withLock needs a function');
  checkOptions('withLock options', options, SCHEMAS.withLock);
  const { ttl, renew, fair, wait, signal } = options ?? {};
  const lock = this.lock(name, { ttl, renew, fair });
  const held = await lock.acquire({ wait, signal });
  let ok = false;
  let result;
  try {
    result = await fn(held.signal, held);
    ok = true;
  } finally {
    try {
      await held.release();
    } catch (e) {
      if (ok && e.code !== NOT_HELD) throw e; // eslint-disable-line no-unsafe-finally
    }
  }
  return result;
};

// The native classes have no JS constructor; `new` on them gets a coded error instead of napi's
// plain one. The proxies forward everything else (statics, prototype, instanceof).
function factoryOnly(cls, how) {
  return new Proxy(cls, {
    construct() {
      throw makeError(INVALID_ARGUMENT, `${cls.name} objects are not constructed with new: use ${how}`);
    },
  });
}

module.exports = {
  Client: factoryOnly(Client, 'Client.connect(url, options)'),
  Redlock: factoryOnly(Redlock, 'Redlock.connect([urls], options)'),
  Lock: factoryOnly(Lock, 'client.lock(name, options)'),
  Held: factoryOnly(Held, 'lock.acquire() or lock.tryAcquire()'),
  ErrorCode,
  errorCodes,
  PROTOCOL_VERSION,
};
