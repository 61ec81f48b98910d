/* SPDX-License-Identifier: MIT */
/*
 * tt.h - helpers of the torture programs (tests/torture/tt_*.c).
 *
 * Each program must behave the same bare and under `leakguard run`: same exit status,
 * same standard output (so it prints nothing that varies: no pid, no address, no
 * timing), and no hang. Where a program plants a leak, it calls tt_leak(), whose
 * allocation line carries the marker the driver (torture.py) looks for in rank 1.
 * C and C++ (tt_tlocal.cpp).
 */
#ifndef TT_H
#define TT_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline void tt_die(const char *what)
{
  fprintf(stderr, "torture: %s: %s\n", what, strerror(errno));
  exit(99);
}

static inline void tt_sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Kept blocks: reachable, growing, never freed (a leak by the detector's definition). */
static void **tt_kept;
static size_t tt_nkept, tt_capkept;

static inline __attribute__((unused)) void tt_keep(void *p)
{
  if (tt_nkept == tt_capkept) {
    tt_capkept = tt_capkept ? 2 * tt_capkept : 1024;
    tt_kept = (void **)realloc(tt_kept, tt_capkept * sizeof *tt_kept);
    if (!tt_kept)
      tt_die("realloc");
  }
  tt_kept[tt_nkept++] = p;
}

/* Leaks `bytes` every 20 ms for `ms` milliseconds: about 1.6 MB/s at 32 KiB. */
static void tt_leak(long ms, size_t bytes) __attribute__((noinline, unused));
static void tt_leak(long ms, size_t bytes)
{
  for (long t = 0; t < ms; t += 20) {
    char *p = (char *)malloc(bytes); /* TT-LEAK */
    if (!p)
      tt_die("malloc");
    memset(p, 0x5a, bytes);
    tt_keep(p);
    tt_sleep_ms(20);
  }
}

#endif
