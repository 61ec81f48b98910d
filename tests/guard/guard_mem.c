/* SPDX-License-Identifier: MIT */
/*
 * guard_mem.c - memory behaviours for the guard's integration tests.
 *
 *   guard_mem hold MIB            allocate and touch MIB, print "ready", sleep
 *   guard_mem leak RATE [MAX]     grow by RATE MiB/s (touched pages), up to MAX MiB
 *                                 (default: unbounded), then sleep
 *   guard_mem cache RATE MAX      a cache that grows by RATE MiB/s up to MAX MiB; on
 *                                 SIGUSR1 it frees half of itself and keeps serving
 *                                 (prints "shrink N" lines; exits 0 on SIGTERM)
 * Prints "ready" on stdout once started. Default SIGTERM behaviour in hold and leak.
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024 * 1024)

static volatile sig_atomic_t shrink_req, stop_req;
static void on_usr1(int s) { (void)s; shrink_req = 1; }
static void on_term(int s) { (void)s; stop_req = 1; }

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static char *chunk(void) {
  char *p = malloc(MIB);
  if (!p) {
    fprintf(stderr, "guard_mem: malloc failed\n");
    exit(3);
  }
  memset(p, 0x5a, MIB);
  return p;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 3) {
    fprintf(stderr, "usage: guard_mem hold MIB | leak RATE [MAX] | cache RATE MAX\n");
    return 2;
  }
  const char *mode = argv[1];
  double a = atof(argv[2]);
  if (!strcmp(mode, "hold")) {
    for (int i = 0; i < (int)a; i++) (void)chunk();
    printf("ready\n");
    for (;;) pause();
  }
  if (!strcmp(mode, "leak")) {
    long max = argc > 3 ? atol(argv[3]) : -1;
    printf("ready\n");
    double step = 1.0 / a; /* one MiB per step */
    for (long n = 0; max < 0 || n < max; n++) {
      volatile char *p = chunk();
      (void)p;
      nap(step);
    }
    for (;;) pause();
  }
  if (!strcmp(mode, "cache") && argc > 3) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    int max = atoi(argv[3]);
    char **c = calloc((size_t)max, sizeof *c);
    int n = 0;
    printf("ready\n");
    while (!stop_req) {
      if (shrink_req) {
        shrink_req = 0;
        int keep = n / 2;
        for (int i = keep; i < n; i++) free(c[i]);
        malloc_trim(0);
        printf("shrink %d %d\n", n, keep);
        n = keep;
      }
      if (n < max) c[n++] = chunk();
      nap(1.0 / a);
    }
    printf("stopped %d\n", n);
    return 0;
  }
  fprintf(stderr, "guard_mem: unknown mode %s\n", mode);
  return 2;
}
