/*
 * The C demo worker (protocol: examples/README.md): acquire the shared lock, do a fenced
 * read-modify-write of the resource's counter, release, print one JSON line per iteration.
 *
 *   worker --redis URL --resource HOST:PORT --name LOCK --iterations N --id ID
 */
#define _POSIX_C_SOURCE 200809L
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ferrolock.h"

static const char *arg(int argc, char **argv, const char *name) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  fprintf(stderr, "worker: missing %s\n", name);
  exit(2);
}

static uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Exit with the library's error message (which never contains the password). */
static void fail(const char *what, ferrolock_result rc, ferrolock_error *err) {
  fprintf(stderr, "worker: %s: %s (code %d)\n", what, ferrolock_error_message(err), (int)rc);
  ferrolock_error_free(err);
  exit(1);
}

static FILE *connect_resource(const char *hostport) {
  char host[256];
  const char *colon = strrchr(hostport, ':');
  if (colon == NULL || (size_t)(colon - hostport) >= sizeof host) {
    fprintf(stderr, "worker: bad --resource %s\n", hostport);
    exit(2);
  }
  memcpy(host, hostport, (size_t)(colon - hostport));
  host[colon - hostport] = '\0';
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, colon + 1, &hints, &res) != 0) {
    fprintf(stderr, "worker: cannot resolve %s\n", hostport);
    exit(1);
  }
  int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    fprintf(stderr, "worker: cannot connect to the resource at %s\n", hostport);
    exit(1);
  }
  freeaddrinfo(res);
  FILE *f = fdopen(fd, "r+");
  if (f == NULL) exit(1);
  return f;
}

/* One request line, one reply line (without the newline). */
static void call(FILE *conn, const char *request, char *reply, size_t cap) {
  if (fputs(request, conn) == EOF || fflush(conn) != 0 || fgets(reply, (int)cap, conn) == NULL) {
    fprintf(stderr, "worker: the resource connection failed\n");
    exit(1);
  }
  reply[strcspn(reply, "\r\n")] = '\0';
}

int main(int argc, char **argv) {
  const char *redis = arg(argc, argv, "--redis"), *resource = arg(argc, argv, "--resource");
  const char *name = arg(argc, argv, "--name"), *id = arg(argc, argv, "--id");
  long iterations = strtol(arg(argc, argv, "--iterations"), NULL, 10);

  ferrolock_client *client = NULL;
  ferrolock_lock *lock = NULL;
  ferrolock_error *err = NULL;
  ferrolock_result rc = ferrolock_client_new(redis, strlen(redis), NULL, &client, &err);
  if (rc != FERROLOCK_RESULT_OK) fail("connect", rc, err);
  /* NULL options: no explicit lease, so the watchdog renews it. */
  rc = ferrolock_lock_new(client, (const uint8_t *)name, strlen(name), NULL, &lock, &err);
  if (rc != FERROLOCK_RESULT_OK) fail("lock", rc, err);
  FILE *conn = connect_resource(resource);

  for (long i = 0; i < iterations; i++) {
    ferrolock_guard *held = NULL;
    uint64_t fence = 0;
    rc = ferrolock_lock_acquire(lock, 60000, &held, &err);
    if (rc != FERROLOCK_RESULT_OK) fail("acquire", rc, err);
    uint64_t acquired_ns = monotonic_ns();
    ferrolock_guard_fence(held, &fence, NULL);

    char line[128], reply[128];
    int rejected = 1;
    snprintf(line, sizeof line, "READ %llu\n", (unsigned long long)fence);
    call(conn, line, reply, sizeof reply);
    if (strncmp(reply, "OK ", 3) == 0) {
      long long value = strtoll(reply + 3, NULL, 10);
      snprintf(line, sizeof line, "WRITE %llu %lld\n", (unsigned long long)fence, value + 1);
      call(conn, line, reply, sizeof reply);
      rejected = strcmp(reply, "OK") != 0;
    }

    uint64_t released_ns = monotonic_ns();
    rc = ferrolock_guard_release(held, &err);
    if (rc != FERROLOCK_RESULT_OK) fail("release", rc, err);
    ferrolock_guard_free(held);
    printf("{\"id\":\"%s\",\"lang\":\"c\",\"fence\":%llu,\"acquired_ns\":%llu,\"released_ns\":%llu,"
           "\"rejected\":%s}\n",
           id, (unsigned long long)fence, (unsigned long long)acquired_ns, (unsigned long long)released_ns,
           rejected ? "true" : "false");
    fflush(stdout);
  }
  fclose(conn);
  ferrolock_lock_free(lock);
  ferrolock_client_free(client);
  return 0;
}
