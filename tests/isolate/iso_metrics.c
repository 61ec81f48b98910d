/* SPDX-License-Identifier: MIT */
/*
 * iso_metrics - isolated calls of known outcomes, for the Prometheus test
 * (tests/isolate/iso_metrics.py, issue #15 item 4): under `leakguard run --metrics`, the
 * collector must publish exactly these counts.
 *
 *   3 ok         each child touches 1 MiB (peak growth <= 4 MiB)
 *   1 budget     touches 256 MiB under a 32 MiB budget
 *   1 forbidden  socket()
 *   1 timeout    sleeps 10 s under a 0.3 s timeout
 *   1 crash      SIGSEGV
 *   1 error      a NULL function
 * It prints each outcome and "ready", then waits (up to 60 s) for the file named by
 * argv[1] to exist, and exits 0 when every outcome was the expected one, 1 otherwise.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "leakguard.h"

static int touch(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  (void)inlen, (void)out, (void)outlen, (void)arg;
  size_t n;
  memcpy(&n, in, sizeof n);
  volatile char *p = malloc(n);
  if (!p) return 1;
  for (size_t i = 0; i < n; i += 4096) p[i] = 1;
  return 0;
}

static int sock(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  (void)in, (void)inlen, (void)out, (void)outlen, (void)arg;
  return socket(AF_INET, SOCK_STREAM, 0) >= 0;
}

static int slow(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  (void)in, (void)inlen, (void)out, (void)outlen, (void)arg;
  sleep(10);
  return 0;
}

static int segv(const void *in, size_t inlen, void **out, size_t *outlen, void *arg) {
  (void)in, (void)inlen, (void)out, (void)outlen, (void)arg;
  raise(SIGSEGV);
  return 0;
}

static int call(lg_isolate_fn fn, size_t n, const lg_isolate_opts_t *o, int want) {
  void *out = NULL;
  size_t outlen = 0;
  lg_isolate_result_t r;
  int rc = lg_isolate_call(fn, &n, sizeof n, &out, &outlen, o, &r);
  free(out);
  printf("%s%s peak=%zu\n", lg_isolate_code_name(rc), rc == want ? "" : " (unexpected)", r.peak_rss);
  return rc == want;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: iso_metrics DONE_FILE\n");
    return 2;
  }
  int ok = 1;
  lg_isolate_opts_t none = {0}, budget = {.max_rss = (size_t)32 << 20}, quick = {.timeout_s = 0.3};
  for (int i = 0; i < 3; i++) ok &= call(touch, (size_t)1 << 20, &none, LG_ISOLATE_OK);
  ok &= call(touch, (size_t)256 << 20, &budget, LG_ISOLATE_BUDGET);
  ok &= call(sock, 0, &none, LG_ISOLATE_FORBIDDEN);
  ok &= call(slow, 0, &quick, LG_ISOLATE_TIMEOUT);
  ok &= call(segv, 0, &none, LG_ISOLATE_CRASH);
  ok &= call(NULL, 0, &none, LG_ISOLATE_ERROR);
  printf("ready\n");
  fflush(stdout);
  for (int i = 0; i < 600 && access(argv[1], F_OK) != 0; i++) {
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
  return ok ? 0 : 1;
}
