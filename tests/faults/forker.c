/* SPDX-License-Identifier: MIT */
/*
 * forker.c - a program that forks every 20 ms and leaks a little each time, for the
 * fault suite (tests/faults/faults.py, case "stalled"): with the collector stopped,
 * its children must not make it wait.
 *
 *   forker SECONDS GAPFILE     stdout: "forker: done", GAPFILE: the longest time in
 *                              milliseconds between two of its loop's iterations
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void **kept;
static size_t nkept, capkept;

static void keep_request(size_t n) __attribute__((noinline));
static void keep_request(size_t n) {
  char *p = malloc(n); /* LEAK-SITE */
  if (!p) exit(3);
  memset(p, 0x5a, n);
  if (nkept == capkept) {
    capkept = capkept ? 2 * capkept : 1024;
    kept = realloc(kept, capkept * sizeof *kept);
    if (!kept) exit(3);
  }
  kept[nkept++] = p;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: forker SECONDS GAPFILE\n");
    return 2;
  }
  double end = now_s() + atof(argv[1]), last = now_s(), gap = 0;
  while (now_s() < end) {
    keep_request(16384);
    pid_t c = fork();
    if (c == 0) _exit(0);
    if (c > 0) waitpid(c, NULL, 0);
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    double t = now_s();
    if (t - last > gap) gap = t - last;
    last = t;
  }
  FILE *f = fopen(argv[2], "w");
  if (!f) return 4;
  fprintf(f, "%.0f\n", gap * 1e3);
  fclose(f);
  printf("forker: done\n");
  return 0;
}
