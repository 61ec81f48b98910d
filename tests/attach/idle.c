/* SPDX-License-Identifier: MIT */
/*
 * idle.c - an idle program for `leakguard attach` (tests/attach.cmake, case "idle"):
 * the main thread waits in read(0), another thread in nanosleep; nothing allocates
 * until a line comes. "leak N" keeps N blocks of 64 KiB (leak_idle); every line
 * read writes "LINES SLEEPS" to argv[1]; "quit" exits 0. So the injector finds no
 * malloc or free to stop at and must load its agent in a thread that waits in a system
 * call, and that call must go on as if nothing happened (the lines are all read).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic unsigned long sleeps;

__attribute__((noinline)) static void *leak_idle(size_t n) {
  void *p = malloc(n);
  memset(p, 3, n);
  return p;
}

static void *sleeper(void *arg) {
  (void)arg;
  for (;;) {
    struct timespec ts = {0, 200000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
    atomic_fetch_add(&sleeps, 1);
  }
  return NULL;
}

static void report(const char *path, unsigned long lines) {
  char tmp[4096], buf[64];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int n = snprintf(buf, sizeof buf, "%lu %lu\n", lines, atomic_load(&sleeps));
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fwrite(buf, 1, (size_t)n, f);
  fclose(f);
  rename(tmp, path);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  pthread_t t;
  pthread_create(&t, NULL, sleeper, NULL);
  report(argv[1], 0);
  char line[256];
  size_t len = 0;
  unsigned long lines = 0;
  for (;;) {
    char c;
    ssize_t k = read(0, &c, 1); /* one byte at a time: the thread sits in read() */
    if (k <= 0) return 3;
    if (c != '\n') {
      if (len < sizeof line - 1) line[len++] = c;
      continue;
    }
    line[len] = 0;
    len = 0;
    lines++;
    if (!strncmp(line, "leak ", 5)) {
      long nb = atol(line + 5);
      for (long i = 0; i < nb; i++) leak_idle(64 << 10);
    } else if (!strcmp(line, "quit")) {
      report(argv[1], lines);
      return 0;
    }
    report(argv[1], lines);
  }
}
