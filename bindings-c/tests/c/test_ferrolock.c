/*
 * The shared behaviour scenarios and the bad-input matrix (shared/RELIABILITY.md) through the C
 * API, against a real redis-server (FERROLOCK_TEST_URL, set by with-redis.sh).
 * Built with -Wall -Wextra -Werror and run under ASan/UBSan and valgrind by ci/test-c.sh.
 */
#define _POSIX_C_SOURCE 200809L /* strtok, nanosleep, clock_gettime */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ferrolock.h"

static const char *URL;
static int checks;

#define CHECK(cond)                                                                  \
  do {                                                                               \
    checks++;                                                                        \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);      \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* Run `call` (whose last argument is &err), expect result `want`; the error object must agree. */
#define EXPECT(want, call)                                                           \
  do {                                                                               \
    ferrolock_error *err = NULL;                                                     \
    ferrolock_result rc_ = (call);                                                   \
    checks++;                                                                        \
    if (rc_ != (want)) {                                                             \
      fprintf(stderr, "%s:%d: %s\n  returned %s (%d), want %s: %s\n", __FILE__,    \
              __LINE__, #call, ferrolock_result_name((uint32_t)rc_), (int)rc_,       \
              ferrolock_result_name((uint32_t)(want)), ferrolock_error_message(err)); \
      exit(1);                                                                       \
    }                                                                                \
    if (rc_ == FERROLOCK_RESULT_OK) {                                                \
      CHECK(err == NULL);                                                            \
    } else {                                                                         \
      CHECK(err != NULL);                                                            \
      CHECK(ferrolock_error_code(err) == (uint32_t)rc_);                             \
      CHECK(strncmp(ferrolock_error_message(err), ferrolock_result_name((uint32_t)rc_), \
                    strlen(ferrolock_result_name((uint32_t)rc_))) == 0);             \
    }                                                                                \
    ferrolock_error_free(err);                                                       \
  } while (0)

#define OK(call) EXPECT(FERROLOCK_RESULT_OK, call)

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static ferrolock_client *connect_client(void) {
  ferrolock_client *c = NULL;
  OK(ferrolock_client_new(URL, strlen(URL), NULL, &c, &err));
  CHECK(c != NULL);
  return c;
}

static ferrolock_lock *new_lock(ferrolock_client *c, const char *name, uint64_t ttl_ms, uint32_t renew) {
  ferrolock_lock_options o = {0};
  o.ttl_ms = ttl_ms;
  o.renew = renew;
  ferrolock_lock *l = NULL;
  OK(ferrolock_lock_new(c, (const uint8_t *)name, strlen(name), &o, &l, &err));
  CHECK(l != NULL);
  return l;
}

static ferrolock_guard *acquire(ferrolock_lock *l, int64_t wait_ms) {
  ferrolock_guard *g = NULL;
  OK(ferrolock_lock_acquire(l, wait_ms, &g, &err));
  CHECK(g != NULL);
  return g;
}

static uint64_t fence_of(const ferrolock_guard *g) {
  uint64_t f = 0;
  OK(ferrolock_guard_fence(g, &f, &err));
  return f;
}

static uint32_t count_of(const ferrolock_guard *g) {
  uint32_t n = 99;
  OK(ferrolock_guard_count(g, &n, &err));
  return n;
}

static ferrolock_lock_state state_of(const ferrolock_guard *g) {
  ferrolock_lock_state s = FERROLOCK_LOCK_STATE_HELD;
  OK(ferrolock_guard_state(g, &s, &err));
  return s;
}

/* Whether `l` can take the lock right now (and, if so, gives it back). */
static int is_free(ferrolock_lock *l) {
  ferrolock_guard *g = (ferrolock_guard *)0x1;
  OK(ferrolock_lock_try_acquire(l, &g, &err));
  if (g == NULL) return 0;
  OK(ferrolock_guard_release(g, &err));
  ferrolock_guard_free(g);
  return 1;
}

/* A loopback port nobody listens on (bound then closed). */
static int dead_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(s >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
  socklen_t len = sizeof a;
  CHECK(getsockname(s, (struct sockaddr *)&a, &len) == 0);
  close(s);
  return ntohs(a.sin_port);
}

/* ---- codes ---- */

static void test_codes(void) {
  static const struct {
    ferrolock_result code;
    const char *name;
  } header[] = {
      {FERROLOCK_RESULT_INVALID_ARGUMENT, "INVALID_ARGUMENT"}, {FERROLOCK_RESULT_INVALID_NAME, "INVALID_NAME"},
      {FERROLOCK_RESULT_INVALID_DURATION, "INVALID_DURATION"}, {FERROLOCK_RESULT_INVALID_URL, "INVALID_URL"},
      {FERROLOCK_RESULT_INVALID_CONFIG, "INVALID_CONFIG"},     {FERROLOCK_RESULT_CLOSED, "CLOSED"},
      {FERROLOCK_RESULT_NULL_ARGUMENT, "NULL_ARGUMENT"},       {FERROLOCK_RESULT_CONNECTION, "CONNECTION"},
      {FERROLOCK_RESULT_TIMEOUT, "TIMEOUT"},                   {FERROLOCK_RESULT_AUTH, "AUTH"},
      {FERROLOCK_RESULT_TLS, "TLS"},                           {FERROLOCK_RESULT_NOT_HELD, "NOT_HELD"},
      {FERROLOCK_RESULT_LOST, "LOST"},                         {FERROLOCK_RESULT_ACQUIRE_TIMEOUT, "ACQUIRE_TIMEOUT"},
      {FERROLOCK_RESULT_QUORUM_NOT_REACHED, "QUORUM_NOT_REACHED"},
      {FERROLOCK_RESULT_REENTRANCY_LIMIT, "REENTRANCY_LIMIT"}, {FERROLOCK_RESULT_CANCELLED, "CANCELLED"},
      {FERROLOCK_RESULT_NOT_REPLICATED, "NOT_REPLICATED"},
      {FERROLOCK_RESULT_PROTOCOL, "PROTOCOL"},                 {FERROLOCK_RESULT_SCRIPT, "SCRIPT"},
      {FERROLOCK_RESULT_PERMISSION, "PERMISSION"},             {FERROLOCK_RESULT_INTERNAL, "INTERNAL"},
  };
  const size_t n_header = sizeof header / sizeof header[0];
  const uint32_t *codes = NULL;
  size_t n = 0;
  OK(ferrolock_result_list(&codes, &n, &err));
  CHECK(n == n_header);
  for (size_t i = 0; i < n; i++) {
    CHECK((uint32_t)header[i].code == codes[i]);
    CHECK(strcmp(ferrolock_result_name(codes[i]), header[i].name) == 0);
    if (i > 0) CHECK(codes[i - 1] < codes[i]);
  }
  CHECK(FERROLOCK_RESULT_OK == 0);
  CHECK(strcmp(ferrolock_result_name(0), "OK") == 0);
  CHECK(strcmp(ferrolock_result_name(12345), "UNKNOWN") == 0);
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_result_list(NULL, &n, &err));
  CHECK(strlen(ferrolock_version()) > 0);
}

/* ---- bad inputs: NULLs, names, durations, URLs, freed handles ---- */

static void test_bad_inputs(void) {
  ferrolock_client *const untouched = (ferrolock_client *)0x5a5a;
  ferrolock_client *c = untouched;
  /* NULL and malformed arguments; outputs untouched on failure. */
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_client_new(NULL, 5, NULL, &c, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_client_new(URL, strlen(URL), NULL, NULL, &err));
  EXPECT(FERROLOCK_RESULT_INVALID_URL, ferrolock_client_new("redis://\xff\xfe", 10, NULL, &c, &err));
  EXPECT(FERROLOCK_RESULT_INVALID_URL, ferrolock_client_new("redis://a\0b", 11, NULL, &c, &err));
  EXPECT(FERROLOCK_RESULT_INVALID_URL, ferrolock_client_new("http://127.0.0.1", 16, NULL, &c, &err));
  EXPECT(FERROLOCK_RESULT_INVALID_URL, ferrolock_client_new("", 0, NULL, &c, &err));
  CHECK(c == untouched);
  /* No out_error: the code alone. */
  CHECK(ferrolock_client_new(NULL, 1, NULL, &c, NULL) == FERROLOCK_RESULT_NULL_ARGUMENT);

  /* A password never appears in an error message. */
  char url[128];
  snprintf(url, sizeof url, "redis://user:S3ntinel-pw@127.0.0.1:%d", dead_port());
  ferrolock_client_options fast = {0};
  fast.connect_timeout_ms = 300;
  ferrolock_error *err = NULL;
  CHECK(ferrolock_client_new(url, strlen(url), &fast, &c, &err) == FERROLOCK_RESULT_CONNECTION);
  CHECK(strstr(ferrolock_error_message(err), "S3ntinel") == NULL);
  ferrolock_error_free(err);
  CHECK(c == untouched);

  /* Options. */
  ferrolock_client_options o = {0};
  o.prefix = "bad{prefix";
  o.prefix_len = strlen(o.prefix);
  EXPECT(FERROLOCK_RESULT_INVALID_CONFIG, ferrolock_client_new(URL, strlen(URL), &o, &c, &err));
  o.prefix = "\xc3";
  o.prefix_len = 1;
  EXPECT(FERROLOCK_RESULT_INVALID_CONFIG, ferrolock_client_new(URL, strlen(URL), &o, &c, &err));
  /* TLS options: refused with a redis:// URL, half a client certificate, an unreadable file. */
  memset(&o, 0, sizeof o);
  o.tls_ca_file = "/nonexistent/ca.crt";
  o.tls_ca_file_len = strlen(o.tls_ca_file);
  EXPECT(FERROLOCK_RESULT_INVALID_CONFIG, ferrolock_client_new("rediss://localhost:1", 20, &o, &c, &err));
  memset(&o, 0, sizeof o);
  o.tls_cert_file = "client.crt";
  o.tls_cert_file_len = strlen(o.tls_cert_file);
  EXPECT(FERROLOCK_RESULT_INVALID_CONFIG, ferrolock_client_new("rediss://localhost:1", 20, &o, &c, &err));
  CHECK(c == untouched);
  memset(&o, 0, sizeof o);
  o.watchdog_ttl_ms = 3;
  EXPECT(FERROLOCK_RESULT_INVALID_DURATION, ferrolock_client_new(URL, strlen(URL), &o, &c, &err));
  /* Replica acknowledgement: a timeout above 1 s is refused; the test server has no replica, so
     every grant is undone and NOT_REPLICATED returned, leaving the lock free. */
  memset(&o, 0, sizeof o);
  o.replica_acks = 1;
  o.replica_acks_timeout_ms = 5000;
  EXPECT(FERROLOCK_RESULT_INVALID_DURATION, ferrolock_client_new(URL, strlen(URL), &o, &c, &err));
  o.replica_acks_timeout_ms = 20;
  OK(ferrolock_client_new(URL, strlen(URL), &o, &c, &err));
  {
    ferrolock_lock *acked = NULL, *plain = NULL;
    ferrolock_guard *g = (ferrolock_guard *)0x1;
    OK(ferrolock_lock_new(c, (const uint8_t *)"c-acks", 6, NULL, &acked, &err));
    EXPECT(FERROLOCK_RESULT_NOT_REPLICATED, ferrolock_lock_try_acquire(acked, &g, &err));
    ferrolock_client *pc = NULL;
    OK(ferrolock_client_new(URL, strlen(URL), NULL, &pc, &err));
    OK(ferrolock_lock_new(pc, (const uint8_t *)"c-acks", 6, NULL, &plain, &err));
    CHECK(is_free(plain));
    ferrolock_lock_free(plain);
    ferrolock_lock_free(acked);
    ferrolock_client_free(pc);
    ferrolock_client_free(c);
  }
  memset(&o, 0, sizeof o);
  o.max_name_len = 16;
  o.prefix = "ctest:";
  o.prefix_len = 6;
  OK(ferrolock_client_new(URL, strlen(URL), &o, &c, &err));
  CHECK(c != untouched && c != NULL);

  /* Lock names and options. */
  ferrolock_lock *l = (ferrolock_lock *)0x5a5a;
  ferrolock_lock_options lo = {0};
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_lock_new(NULL, (const uint8_t *)"n", 1, NULL, &l, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_lock_new(c, (const uint8_t *)"n", 1, NULL, NULL, &err));
  EXPECT(FERROLOCK_RESULT_INVALID_NAME, ferrolock_lock_new(c, (const uint8_t *)"", 0, NULL, &l, &err));
  EXPECT(FERROLOCK_RESULT_INVALID_NAME, ferrolock_lock_new(c, NULL, 0, NULL, &l, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_lock_new(c, NULL, 5, NULL, &l, &err));
  EXPECT(FERROLOCK_RESULT_INVALID_NAME,
         ferrolock_lock_new(c, (const uint8_t *)"seventeen-bytes!!", 17, NULL, &l, &err));
  lo.renew = 9;
  EXPECT(FERROLOCK_RESULT_INVALID_ARGUMENT, ferrolock_lock_new(c, (const uint8_t *)"n", 1, &lo, &l, &err));
  lo.renew = FERROLOCK_RENEW_NEVER;
  EXPECT(FERROLOCK_RESULT_INVALID_ARGUMENT, ferrolock_lock_new(c, (const uint8_t *)"n", 1, &lo, &l, &err));
  lo.ttl_ms = 1;
  EXPECT(FERROLOCK_RESULT_INVALID_DURATION, ferrolock_lock_new(c, (const uint8_t *)"n", 1, &lo, &l, &err));
  lo.ttl_ms = (uint64_t)400 * 24 * 3600 * 1000;
  EXPECT(FERROLOCK_RESULT_INVALID_DURATION, ferrolock_lock_new(c, (const uint8_t *)"n", 1, &lo, &l, &err));
  CHECK(l == (ferrolock_lock *)0x5a5a);

  /* Binary names with NUL and brace bytes are fine (16 bytes = the cap). */
  const uint8_t binary[16] = {0, 1, '{', '}', 0xff, '\r', '\n', ' ', 0, 'x', 'y', 'z', 0, 0, 7, 8};
  lo.ttl_ms = 5000;
  OK(ferrolock_lock_new(c, binary, sizeof binary, &lo, &l, &err));
  ferrolock_guard *g = (ferrolock_guard *)0x5a5a;
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_lock_acquire(NULL, 0, &g, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_lock_acquire(l, 0, NULL, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_lock_try_acquire(l, NULL, &err));
  EXPECT(FERROLOCK_RESULT_INVALID_DURATION, ferrolock_lock_acquire(l, INT64_MAX, &g, &err));
  CHECK(g == (ferrolock_guard *)0x5a5a);
  g = acquire(l, 1000);

  /* Guard accessors. */
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_guard_fence(g, NULL, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_guard_count(g, NULL, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_guard_remaining_ms(g, NULL, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_guard_state(g, NULL, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_guard_wait_lost(g, 1, NULL, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_guard_on_lost(g, NULL, NULL, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_guard_release(NULL, &err));
  EXPECT(FERROLOCK_RESULT_INVALID_DURATION, ferrolock_guard_extend(g, 0, &err));
  /* A handle of another type is refused, never dereferenced. */
  EXPECT(FERROLOCK_RESULT_CLOSED, ferrolock_guard_release((const ferrolock_guard *)l, &err));
  EXPECT(FERROLOCK_RESULT_CLOSED, ferrolock_guard_release((const ferrolock_guard *)0x1234, &err));

  /* Double release; then freed handles. */
  OK(ferrolock_guard_release(g, &err));
  CHECK(state_of(g) == FERROLOCK_LOCK_STATE_RELEASED);
  CHECK(count_of(g) == 0);
  EXPECT(FERROLOCK_RESULT_NOT_HELD, ferrolock_guard_release(g, &err));
  EXPECT(FERROLOCK_RESULT_NOT_HELD, ferrolock_guard_extend(g, 1000, &err));
  EXPECT(FERROLOCK_RESULT_NOT_HELD, ferrolock_guard_ensure(g, 0, &err));
  ferrolock_guard_free(g);
  EXPECT(FERROLOCK_RESULT_CLOSED, ferrolock_guard_release(g, &err));
  uint64_t f = 77;
  EXPECT(FERROLOCK_RESULT_CLOSED, ferrolock_guard_fence(g, &f, &err));
  CHECK(f == 77);
  ferrolock_guard_free(g); /* double free: no-op */
  ferrolock_lock_free(l);
  EXPECT(FERROLOCK_RESULT_CLOSED, ferrolock_lock_acquire(l, 0, &g, &err));
  EXPECT(FERROLOCK_RESULT_CLOSED, ferrolock_lock_try_acquire(l, &g, &err));
  ferrolock_lock_free(l);
  ferrolock_client_free(c);
  EXPECT(FERROLOCK_RESULT_CLOSED, ferrolock_lock_new(c, (const uint8_t *)"n", 1, NULL, &l, &err));
  EXPECT(FERROLOCK_RESULT_CLOSED, ferrolock_client_force_unlock(c, (const uint8_t *)"n", 1, NULL, &err));
  ferrolock_client_free(c);

  /* A 1 MiB name works once the cap is raised (and is refused before any I/O otherwise). */
  const size_t big_len = (size_t)1 << 20;
  uint8_t *big = malloc(big_len);
  CHECK(big != NULL);
  memset(big, 'k', big_len);
  ferrolock_client *dflt = connect_client(); /* default cap: 64 KiB */
  EXPECT(FERROLOCK_RESULT_INVALID_NAME, ferrolock_lock_new(dflt, big, big_len, NULL, &l, &err));
  ferrolock_client_free(dflt);
  memset(&o, 0, sizeof o);
  o.max_name_len = (size_t)2 << 20;
  ferrolock_client *roomy = NULL;
  OK(ferrolock_client_new(URL, strlen(URL), &o, &roomy, &err));
  OK(ferrolock_lock_new(roomy, big, big_len, &lo, &l, &err));
  free(big); /* the name was copied */
  g = acquire(l, 1000);
  OK(ferrolock_guard_release(g, &err));
  ferrolock_guard_free(g);
  ferrolock_lock_free(l);
  ferrolock_client_free(roomy);

  /* _free(NULL) and NULL accessors. */
  ferrolock_client_free(NULL);
  ferrolock_lock_free(NULL);
  ferrolock_guard_free(NULL);
  ferrolock_cancel_free(NULL);
  ferrolock_error_free(NULL);
  CHECK(ferrolock_error_code(NULL) == 0);
  CHECK(strcmp(ferrolock_error_message(NULL), "") == 0);
}

/* ---- contend: threads on one name, fenced read-modify-write ---- */

#define WORKERS 8
#define PER_WORKER 40

static ferrolock_client *shared_client;
static atomic_int inside;
static atomic_int overlaps;
static long counter; /* deliberately unsynchronised: only the lock protects it */
static uint64_t fences[WORKERS * PER_WORKER];
static size_t n_fences;

static void critical_section(uint64_t fence) {
  if (atomic_exchange(&inside, 1)) atomic_fetch_add(&overlaps, 1);
  if (fence) fences[n_fences++] = fence;
  long v = counter;
  struct timespec ts = {0, 300000L};
  nanosleep(&ts, NULL);
  counter = v + 1;
  atomic_store(&inside, 0);
}

static void *contender(void *arg) {
  int locked = *(int *)arg;
  ferrolock_lock *l = locked ? new_lock(shared_client, "contended", 5000, FERROLOCK_RENEW_NEVER) : NULL;
  for (int i = 0; i < PER_WORKER; i++) {
    if (!locked) {
      critical_section(0);
      continue;
    }
    ferrolock_guard *g = acquire(l, 30000);
    critical_section(fence_of(g));
    OK(ferrolock_guard_release(g, &err));
    ferrolock_guard_free(g);
  }
  ferrolock_lock_free(l);
  return NULL;
}

static void run_contenders(int locked) {
  pthread_t t[WORKERS];
  counter = 0;
  n_fences = 0;
  atomic_store(&overlaps, 0);
  for (int i = 0; i < WORKERS; i++) CHECK(pthread_create(&t[i], NULL, contender, &locked) == 0);
  for (int i = 0; i < WORKERS; i++) CHECK(pthread_join(t[i], NULL) == 0);
}

static void test_contend(void) {
  shared_client = connect_client();
  run_contenders(1);
  CHECK(atomic_load(&overlaps) == 0);
  CHECK(counter == WORKERS * PER_WORKER);
  CHECK(n_fences == WORKERS * PER_WORKER);
  for (size_t i = 1; i < n_fences; i++) CHECK(fences[i - 1] < fences[i]);
  /* Control: without the lock the same workload overlaps, or the checks above prove nothing. */
  run_contenders(0);
  CHECK(atomic_load(&overlaps) > 0 || counter < WORKERS * PER_WORKER);
  ferrolock_client_free(shared_client);
}

/* ---- reentrancy and fencing order ---- */

static void test_reentrancy_and_fencing(void) {
  ferrolock_client *c = connect_client();
  ferrolock_lock *a = new_lock(c, "reentrant", 5000, FERROLOCK_RENEW_NEVER);
  ferrolock_lock *b = new_lock(c, "reentrant", 5000, FERROLOCK_RENEW_NEVER);
  ferrolock_guard *g1 = acquire(a, 1000);
  ferrolock_guard *g2 = acquire(a, 1000); /* same handle: re-entry */
  CHECK(fence_of(g1) == fence_of(g2));
  CHECK(count_of(g2) == 2);
  CHECK(!is_free(b));
  OK(ferrolock_guard_release(g2, &err));
  CHECK(count_of(g1) == 1);
  CHECK(!is_free(b));
  OK(ferrolock_guard_release(g1, &err));
  /* The other handle now gets it, with a higher fence. */
  ferrolock_guard *gb = acquire(b, 1000);
  CHECK(fence_of(gb) > fence_of(g1));
  /* Releasing more times than acquired deletes nothing of the new holder. */
  EXPECT(FERROLOCK_RESULT_NOT_HELD, ferrolock_guard_release(g1, &err));
  EXPECT(FERROLOCK_RESULT_NOT_HELD, ferrolock_guard_release(g2, &err));
  CHECK(!is_free(a));
  CHECK(state_of(gb) == FERROLOCK_LOCK_STATE_HELD);
  OK(ferrolock_guard_release(gb, &err));
  ferrolock_guard_free(g1);
  ferrolock_guard_free(g2);
  ferrolock_guard_free(gb);

  /* Reentrancy limit: depth 3 refused with the count unchanged. */
  ferrolock_client_options o = {0};
  o.max_reentrancy = 2;
  ferrolock_client *small = NULL;
  OK(ferrolock_client_new(URL, strlen(URL), &o, &small, &err));
  ferrolock_lock *r = new_lock(small, "depth", 5000, FERROLOCK_RENEW_NEVER);
  ferrolock_guard *r1 = acquire(r, 1000), *r2 = acquire(r, 1000), *r3 = NULL;
  EXPECT(FERROLOCK_RESULT_REENTRANCY_LIMIT, ferrolock_lock_acquire(r, 1000, &r3, &err));
  CHECK(r3 == NULL);
  CHECK(count_of(r1) == 2);
  OK(ferrolock_guard_release(r2, &err));
  OK(ferrolock_guard_release(r1, &err));
  ferrolock_guard_free(r1);
  ferrolock_guard_free(r2);
  ferrolock_lock_free(r);
  ferrolock_client_free(small);

  /* Fencing order: grants alternating between handles are strictly increasing. */
  uint64_t last = 0;
  for (int i = 0; i < 20; i++) {
    ferrolock_guard *g = acquire(i % 2 ? a : b, 1000);
    uint64_t f = fence_of(g);
    CHECK(f > last);
    CHECK(f > ((uint64_t)1 << 50)); /* microsecond server-time floor: above 2^50 */
    last = f;
    OK(ferrolock_guard_release(g, &err));
    ferrolock_guard_free(g);
  }
  ferrolock_lock_free(a);
  ferrolock_lock_free(b);
  ferrolock_client_free(c);
}

/* ---- expire, extend, acquire timeout ---- */

static void test_expire_extend_timeout(void) {
  ferrolock_client *c = connect_client();
  ferrolock_lock *a = new_lock(c, "expire", 300, FERROLOCK_RENEW_NEVER);
  ferrolock_lock *b = new_lock(c, "expire", 300, FERROLOCK_RENEW_NEVER);

  /* Acquire timeout: output untouched. */
  ferrolock_guard *ga = acquire(a, 1000);
  ferrolock_guard *gb = (ferrolock_guard *)0x5a5a;
  long long t0 = now_ms();
  EXPECT(FERROLOCK_RESULT_ACQUIRE_TIMEOUT, ferrolock_lock_acquire(b, 50, &gb, &err));
  CHECK(gb == (ferrolock_guard *)0x5a5a);
  CHECK(now_ms() - t0 >= 40);
  /* try_acquire: OK with a NULL guard while held elsewhere. */
  OK(ferrolock_lock_try_acquire(b, &gb, &err));
  CHECK(gb == NULL);

  /* Expire: the lease runs out, the waiter gets it, the old guard reports LOST. */
  gb = acquire(b, 3000);
  CHECK(now_ms() - t0 >= 150);
  CHECK(fence_of(gb) > fence_of(ga));
  CHECK(state_of(ga) == FERROLOCK_LOCK_STATE_LOST);
  uint64_t rem = 1;
  OK(ferrolock_guard_remaining_ms(ga, &rem, &err));
  CHECK(rem == 0);
  EXPECT(FERROLOCK_RESULT_LOST, ferrolock_guard_ensure(ga, 0, &err));
  EXPECT(FERROLOCK_RESULT_LOST, ferrolock_guard_extend(ga, 1000, &err));
  EXPECT(FERROLOCK_RESULT_LOST, ferrolock_guard_release(ga, &err));
  CHECK(!is_free(a)); /* the stale release deleted nothing */
  OK(ferrolock_guard_release(gb, &err));
  ferrolock_guard_free(ga);
  ferrolock_guard_free(gb);

  /* Extend: a 300 ms lease extended to 2 s outlives its first lease. */
  ga = acquire(a, 1000);
  OK(ferrolock_guard_extend(ga, 2000, &err));
  OK(ferrolock_guard_remaining_ms(ga, &rem, &err));
  CHECK(rem > 1500);
  sleep_ms(600);
  CHECK(state_of(ga) == FERROLOCK_LOCK_STATE_HELD);
  OK(ferrolock_guard_ensure(ga, 100, &err));
  CHECK(!is_free(b));
  OK(ferrolock_guard_release(ga, &err));
  CHECK(is_free(b));
  ferrolock_guard_free(ga);
  ferrolock_lock_free(a);
  ferrolock_lock_free(b);
  ferrolock_client_free(c);
}

/* ---- lost lock: polled state, wait, and the callback ---- */

typedef struct {
  atomic_int calls;
  atomic_uint code; /* 0 for the "ended without loss" call */
  atomic_int saw_null;
} lost_box;

static void on_lost(void *user_data, const ferrolock_error *error) {
  lost_box *b = user_data;
  atomic_store(&b->code, ferrolock_error_code(error));
  if (error == NULL) atomic_store(&b->saw_null, 1);
  atomic_fetch_add(&b->calls, 1);
}

static void wait_calls(lost_box *b, int n) {
  for (int i = 0; i < 300 && atomic_load(&b->calls) < n; i++) sleep_ms(10);
}

/* A callback that calls back into the library, including a blocking acquire/release. */
typedef struct {
  const ferrolock_guard *guard;
  ferrolock_lock *other;
  atomic_int state;
  atomic_int took_it;
  atomic_int done;
} reentrant_box;

static void on_lost_reenter(void *user_data, const ferrolock_error *error) {
  reentrant_box *b = user_data;
  if (error != NULL) {
    ferrolock_lock_state s = FERROLOCK_LOCK_STATE_HELD;
    if (ferrolock_guard_state(b->guard, &s, NULL) == FERROLOCK_RESULT_OK) atomic_store(&b->state, (int)s);
    ferrolock_guard *g = NULL;
    if (ferrolock_lock_acquire(b->other, 2000, &g, NULL) == FERROLOCK_RESULT_OK) {
      atomic_store(&b->took_it, ferrolock_guard_release(g, NULL) == FERROLOCK_RESULT_OK);
      ferrolock_guard_free(g);
    }
  }
  atomic_fetch_add(&b->done, 1);
}

static void test_lost(void) {
  ferrolock_client *c = connect_client();
  ferrolock_lock *a = new_lock(c, "lost", 600, FERROLOCK_RENEW_ALWAYS);
  ferrolock_guard *g = acquire(a, 1000);
  lost_box box = {0};
  OK(ferrolock_guard_on_lost(g, on_lost, &box, &err));
  /* Control: renewed past its lease, no loss signalled. */
  sleep_ms(900);
  CHECK(state_of(g) == FERROLOCK_LOCK_STATE_HELD);
  CHECK(atomic_load(&box.calls) == 0);
  bool lost = true;
  OK(ferrolock_guard_wait_lost(g, 50, &lost, &err));
  CHECK(!lost);
  /* An administrator deletes the hold: the watchdog's next renewal finds it gone. */
  bool was_held = false;
  OK(ferrolock_client_force_unlock(c, (const uint8_t *)"lost", 4, &was_held, &err));
  CHECK(was_held);
  OK(ferrolock_guard_wait_lost(g, 3000, &lost, &err));
  CHECK(lost);
  wait_calls(&box, 1);
  CHECK(atomic_load(&box.calls) == 1);
  CHECK(atomic_load(&box.code) == FERROLOCK_RESULT_LOST);
  CHECK(state_of(g) == FERROLOCK_LOCK_STATE_LOST);
  /* Registered after the loss: called at once, with LOST. */
  lost_box late = {0};
  OK(ferrolock_guard_on_lost(g, on_lost, &late, &err));
  wait_calls(&late, 1);
  CHECK(atomic_load(&late.code) == FERROLOCK_RESULT_LOST);
  EXPECT(FERROLOCK_RESULT_LOST, ferrolock_guard_release(g, &err));
  ferrolock_guard_free(g);

  /* A released hold calls the callback once with NULL, so user_data can be freed. */
  g = acquire(a, 1000);
  lost_box *heap = calloc(1, sizeof *heap);
  CHECK(heap != NULL);
  OK(ferrolock_guard_on_lost(g, on_lost, heap, &err));
  OK(ferrolock_guard_release(g, &err));
  wait_calls(heap, 1);
  sleep_ms(100);
  CHECK(atomic_load(&heap->calls) == 1);
  CHECK(atomic_load(&heap->saw_null) == 1);
  free(heap);
  ferrolock_guard_free(g);
  sleep_ms(50);
  CHECK(atomic_load(&box.calls) == 1); /* exactly once */

  /* The callback may call back into the library, even blocking calls: no deadlock. */
  ferrolock_lock *other = new_lock(c, "lost", 5000, FERROLOCK_RENEW_NEVER);
  g = acquire(a, 1000);
  reentrant_box rb = {g, other, 0, 0, 0};
  OK(ferrolock_guard_on_lost(g, on_lost_reenter, &rb, &err));
  OK(ferrolock_client_force_unlock(c, (const uint8_t *)"lost", 4, NULL, &err));
  for (int i = 0; i < 500 && atomic_load(&rb.done) == 0; i++) sleep_ms(10);
  CHECK(atomic_load(&rb.done) == 1);
  CHECK(atomic_load(&rb.state) == FERROLOCK_LOCK_STATE_LOST);
  CHECK(atomic_load(&rb.took_it) == 1);
  ferrolock_guard_free(g);
  ferrolock_lock_free(other);
  ferrolock_lock_free(a);
  ferrolock_client_free(c);
}

/* ---- cancellation and threads ---- */

typedef struct {
  ferrolock_lock *lock;
  ferrolock_cancel *cancel;
  ferrolock_result rc;
  ferrolock_guard *guard;
} acq_args;

static void *cancellable_acquirer(void *p) {
  acq_args *a = p;
  ferrolock_error *err = NULL;
  a->rc = ferrolock_lock_acquire_cancellable(a->lock, -1, a->cancel, &a->guard, &err);
  ferrolock_error_free(err);
  return NULL;
}

static void *releaser(void *p) {
  OK(ferrolock_guard_release((ferrolock_guard *)p, &err));
  return NULL;
}

static void test_cancel_and_threads(void) {
  ferrolock_client *c = connect_client();
  ferrolock_lock *a = new_lock(c, "cancel", 5000, FERROLOCK_RENEW_NEVER);
  ferrolock_lock *b = new_lock(c, "cancel", 5000, FERROLOCK_RENEW_NEVER);
  ferrolock_guard *ga = acquire(a, 1000);
  acq_args args = {b, NULL, FERROLOCK_RESULT_OK, NULL};
  OK(ferrolock_cancel_new(&args.cancel, &err));
  pthread_t t;
  CHECK(pthread_create(&t, NULL, cancellable_acquirer, &args) == 0);
  sleep_ms(200);
  long long t0 = now_ms();
  OK(ferrolock_cancel_trigger(args.cancel, &err));
  OK(ferrolock_cancel_trigger(args.cancel, &err)); /* idempotent */
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(now_ms() - t0 < 1000);
  CHECK(args.rc == FERROLOCK_RESULT_CANCELLED);
  CHECK(args.guard == NULL);
  /* Already cancelled: returns at once without taking the lock even when it is free. */
  OK(ferrolock_guard_release(ga, &err));
  cancellable_acquirer(&args);
  CHECK(args.rc == FERROLOCK_RESULT_CANCELLED);
  CHECK(is_free(a)); /* nothing leaked by the cancelled acquires */
  ferrolock_cancel_free(args.cancel);
  EXPECT(FERROLOCK_RESULT_CLOSED, ferrolock_cancel_trigger(args.cancel, &err));
  ferrolock_guard_free(ga);

  /* A guard is usable from another thread (release from a thread that did not acquire). */
  ferrolock_guard *g = acquire(a, 1000);
  CHECK(pthread_create(&t, NULL, releaser, g) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(state_of(g) == FERROLOCK_LOCK_STATE_RELEASED);
  CHECK(is_free(b));
  ferrolock_guard_free(g);

  /* Children keep what they need: locks work after their client is freed, guards after their lock. */
  ferrolock_client_free(c);
  g = acquire(a, 1000);
  ferrolock_lock_free(a);
  CHECK(!is_free(b));
  OK(ferrolock_guard_release(g, &err));
  CHECK(is_free(b));
  ferrolock_guard_free(g);
  ferrolock_lock_free(b);
}

/* ---- Redlock: the same surface over a quorum of masters ---- */

static void test_redlock(void) {
  char buf[1024];
  const char *urls[8];
  size_t lens[8], n = 0;
  const char *all = getenv("FERROLOCK_TEST_URLS");
  CHECK(all != NULL && strlen(all) < sizeof buf);
  strcpy(buf, all);
  for (char *tok = strtok(buf, " "); tok != NULL && n < 8; tok = strtok(NULL, " ")) {
    urls[n] = tok;
    lens[n] = strlen(tok);
    n++;
  }
  CHECK(n == 3);

  /* Bad inputs: outputs untouched. */
  ferrolock_client *const untouched = (ferrolock_client *)0x5a5a;
  ferrolock_client *c = untouched;
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_client_new_redlock(NULL, NULL, 3, NULL, &c, &err));
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_client_new_redlock(urls, NULL, 3, NULL, NULL, &err));
  const char *with_null[3] = {urls[0], NULL, urls[2]};
  EXPECT(FERROLOCK_RESULT_NULL_ARGUMENT, ferrolock_client_new_redlock(with_null, NULL, 3, NULL, &c, &err));
  const char *twice[3] = {urls[0], urls[1], urls[0]};
  EXPECT(FERROLOCK_RESULT_INVALID_CONFIG, ferrolock_client_new_redlock(twice, NULL, 3, NULL, &c, &err));
  EXPECT(FERROLOCK_RESULT_INVALID_CONFIG, ferrolock_client_new_redlock(urls, NULL, 2, NULL, &c, &err));
  ferrolock_client_options o = {0};
  o.redlock_quorum = 1;
  EXPECT(FERROLOCK_RESULT_INVALID_CONFIG, ferrolock_client_new_redlock(urls, NULL, 3, &o, &c, &err));
  const char *bad_url[3] = {urls[0], "http://x", urls[2]};
  EXPECT(FERROLOCK_RESULT_INVALID_URL, ferrolock_client_new_redlock(bad_url, NULL, 3, NULL, &c, &err));
  char d1[64], d2[64];
  snprintf(d1, sizeof d1, "redis://127.0.0.1:%d", dead_port());
  snprintf(d2, sizeof d2, "redis://:S3ntinel-pw@127.0.0.1:%d", dead_port());
  const char *mostly_dead[3] = {urls[0], d1, d2};
  memset(&o, 0, sizeof o);
  o.connect_timeout_ms = 300;
  ferrolock_error *e = NULL;
  CHECK(ferrolock_client_new_redlock(mostly_dead, NULL, 3, &o, &c, &e) == FERROLOCK_RESULT_QUORUM_NOT_REACHED);
  CHECK(strstr(ferrolock_error_message(e), "S3ntinel") == NULL);
  ferrolock_error_free(e);
  CHECK(c == untouched);

  /* Lengths given explicitly, no terminators needed. */
  OK(ferrolock_client_new_redlock(urls, lens, n, NULL, &c, &err));
  bool is_redlock = false;
  OK(ferrolock_client_is_redlock(c, &is_redlock, &err));
  CHECK(is_redlock);
  ferrolock_client *single = connect_client();
  OK(ferrolock_client_is_redlock(single, &is_redlock, &err));
  CHECK(!is_redlock);
  ferrolock_client_free(single);
  ferrolock_client_free(c);

  /* Contend through a quorum client, with the same checks as single-node. */
  OK(ferrolock_client_new_redlock(urls, NULL, n, NULL, &shared_client, &err));
  run_contenders(1);
  CHECK(atomic_load(&overlaps) == 0);
  CHECK(counter == WORKERS * PER_WORKER);
  for (size_t i = 1; i < n_fences; i++) CHECK(fences[i - 1] < fences[i]);

  /* Reentrancy, contention between handles, release. */
  ferrolock_lock *a = new_lock(shared_client, "rl", 5000, FERROLOCK_RENEW_NEVER);
  ferrolock_lock *b = new_lock(shared_client, "rl", 5000, FERROLOCK_RENEW_NEVER);
  ferrolock_guard *g1 = acquire(a, 1000), *g2 = acquire(a, 1000);
  CHECK(fence_of(g1) == fence_of(g2));
  CHECK(count_of(g2) == 2);
  CHECK(!is_free(b));
  OK(ferrolock_guard_release(g2, &err));
  OK(ferrolock_guard_release(g1, &err));
  EXPECT(FERROLOCK_RESULT_NOT_HELD, ferrolock_guard_release(g1, &err));
  ferrolock_guard *gb = acquire(b, 1000);
  CHECK(fence_of(gb) > fence_of(g1));
  OK(ferrolock_guard_release(gb, &err));
  ferrolock_guard_free(g1);
  ferrolock_guard_free(g2);
  ferrolock_guard_free(gb);

  /* Lost: a renewed quorum hold deleted by an administrator is reported lost. */
  ferrolock_lock *r = new_lock(shared_client, "rl-lost", 600, FERROLOCK_RENEW_ALWAYS);
  ferrolock_guard *g = acquire(r, 1000);
  sleep_ms(700);
  CHECK(state_of(g) == FERROLOCK_LOCK_STATE_HELD);
  bool was_held = false, lost = false;
  OK(ferrolock_client_force_unlock(shared_client, (const uint8_t *)"rl-lost", 7, &was_held, &err));
  CHECK(was_held);
  OK(ferrolock_guard_wait_lost(g, 3000, &lost, &err));
  CHECK(lost);
  EXPECT(FERROLOCK_RESULT_LOST, ferrolock_guard_release(g, &err));
  ferrolock_guard_free(g);
  ferrolock_lock_free(r);
  ferrolock_lock_free(a);
  ferrolock_lock_free(b);
  ferrolock_client_free(shared_client);
}

int main(void) {
  URL = getenv("FERROLOCK_TEST_URL");
  if (URL == NULL) {
    fprintf(stderr, "FERROLOCK_TEST_URL is not set (run through with-redis.sh)\n");
    return 2;
  }
  struct {
    const char *name;
    void (*fn)(void);
  } tests[] = {
      {"codes", test_codes},
      {"bad_inputs", test_bad_inputs},
      {"contend", test_contend},
      {"reentrancy_and_fencing", test_reentrancy_and_fencing},
      {"expire_extend_timeout", test_expire_extend_timeout},
      {"lost", test_lost},
      {"cancel_and_threads", test_cancel_and_threads},
      {"redlock", test_redlock},
  };
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    long long t0 = now_ms();
    tests[i].fn();
    printf("ok   %-24s (%lld ms)\n", tests[i].name, now_ms() - t0);
  }
  printf("all C tests passed (%d checks)\n", checks);
  return 0;
}
