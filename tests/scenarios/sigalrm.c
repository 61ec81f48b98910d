/* SPDX-License-Identifier: MIT */
/*
 * sigalrm - allocation from a signal handler while the interrupted thread is
 * itself allocating: a SIGALRM interval timer fires every 50 us; the handler
 * mallocs a 200-byte block, touches it, frees it, and marks a step. The main
 * thread meanwhile churns through malloc/calloc/free.
 *
 * (Calling malloc from a signal handler is not async-signal-safe in general;
 * programs do it anyway. With glibc it survives here because the handler's size
 * class is always served from the thread cache, which the main loop never uses:
 * the main loop avoids request sizes 185..200 and realloc, whose split-off
 * remainders could land in that bin. A recorder that takes a lock in
 * its malloc hook without blocking signals deadlocks on this program.)
 *
 * With --leak 1 the main thread leaks LEAK_BLOCKS blocks of LEAK_SIZE bytes, and
 * the program prints "sigalrm: ... leaked_bytes=B leaked_blocks=N"; with --leak 0
 * it leaks nothing.
 *
 * Options: --seconds S (default 3), --leak 0|1 (default 1), --interval-us N
 *          (default 50), --pidfile PATH
 */
#include "scen_common.h"

#include <signal.h>
#include <sys/time.h>

#define HANDLER_SIZE 200
#define LEAK_BLOCKS 500
#define LEAK_SIZE 3000

static volatile sig_atomic_t g_in_handler;
static volatile unsigned long g_signals;

static void on_alarm(int sig) {
  (void)sig;
  int saved = errno;
  g_in_handler = 1;
  char *p = malloc(HANDLER_SIZE);
  if (p) {
    p[0] = 1;
    p[HANDLER_SIZE - 1] = 2;
    scen_escape(p);
    free(p);
  }
  scen_step();
  g_signals++;
  g_in_handler = 0;
  errno = saved;
}

static size_t main_size(uint64_t *rng) {
  return scen_range(rng, 0, 1) ? scen_range(rng, 16, 176) : scen_range(rng, 240, 2800);
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 3.0);
  int leak = (int)scen_opt_long(argc, argv, "--leak", NULL, 1);
  long interval_us = scen_opt_long(argc, argv, "--interval-us", NULL, 50);
  scen_write_pidfile(argc, argv);
  scen_step_init();

  /* Prime the handler's thread-cache bin (see above) and stdout's buffer. */
  free(malloc(HANDLER_SIZE));
  printf("sigalrm: start\n");
  fflush(stdout);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, interval_us}, {0, interval_us}};
  setitimer(ITIMER_REAL, &it, NULL);

  enum { SLOTS = 4096 };
  void **slots = calloc(SLOTS, sizeof *slots);
  uint64_t rng = 6;
  double start = scen_now(), end = start + seconds;
  unsigned long leaked_blocks = 0, ops = 0;
  for (;;) {
    int last = scen_now() >= end;
    unsigned due = last ? LEAK_BLOCKS : (unsigned)((scen_now() - start) / seconds * LEAK_BLOCKS);
    while (leak && leaked_blocks < due && leaked_blocks < LEAK_BLOCKS) {
      char *b = malloc(LEAK_SIZE); /* SITE:main-leak */
      memset(b, 'L', LEAK_SIZE);
      scen_escape(b);
      leaked_blocks++;
    }
    if (last) break;
    for (int k = 0; k < 256; k++) {
      size_t i = scen_range(&rng, 0, SLOTS - 1);
      if (!slots[i]) {
        slots[i] = scen_range(&rng, 0, 3) ? malloc(main_size(&rng)) : calloc(1, main_size(&rng));
      } else {
        free(slots[i]);
        slots[i] = NULL;
      }
      ops++;
    }
  }

  struct itimerval off;
  memset(&off, 0, sizeof off);
  setitimer(ITIMER_REAL, &off, NULL);
  signal(SIGALRM, SIG_IGN);
  for (size_t i = 0; i < SLOTS; i++) free(slots[i]);
  free(slots);
  printf("sigalrm: signals=%lu ops=%lu leaked_bytes=%lu leaked_blocks=%lu\n", g_signals, ops,
         leaked_blocks * LEAK_SIZE, leaked_blocks);
  return 0;
}
