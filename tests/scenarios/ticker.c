/* SPDX-License-Identifier: MIT */
/*
 * ticker - a training loop's log: one numbered line on standard output every --every
 * seconds (default 0.1), --lines of them (default 30), then "ticker done". Each line
 * keeps its 4 KiB history record for good (the LEAK-SITE line), so the live view has a
 * growing site to show. Used by tests/integration/term.py: every line must stay on the
 * terminal beside the live view.
 *
 * Options: --lines N, --every S, --gate-at N,M,... --gate PREFIX (after line N, wait
 * until the file PREFIX.N exists: the test resizes the terminal meanwhile)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void **history;

static void keep_history(int i) {
  void *rec = malloc(4096); /* LEAK-SITE */
  memset(rec, i & 0xff, 4096);
  history[i] = rec;
}

int main(int argc, char **argv) {
  int lines = 30;
  const char *gate_at = "";
  double every = 0.1;
  const char *gate = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--lines")) lines = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--every")) every = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--gate-at")) gate_at = argv[i + 1];
    else if (!strcmp(argv[i], "--gate")) gate = argv[i + 1];
    else {
      fprintf(stderr, "ticker: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  history = calloc((size_t)lines + 1, sizeof *history);
  if (!history) return 1;
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  for (int i = 1; i <= lines; i++) {
    long ns = t.tv_nsec + (long)(every * 1e9);
    t.tv_sec += ns / 1000000000L;
    t.tv_nsec = ns % 1000000000L;
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
    keep_history(i);
    printf("tick %03d of %03d loss %.4f\n", i, lines, 1.0 / i);
    fflush(stdout);
    for (const char *g = gate_at; gate && *g; g = strchr(g, ',') ? strchr(g, ',') + 1 : "") {
      if (atoi(g) != i) continue;
      char path[4096];
      snprintf(path, sizeof path, "%s.%d", gate, i);
      while (access(path, F_OK) != 0) usleep(10000);
      clock_gettime(CLOCK_MONOTONIC, &t);
    }
  }
  printf("ticker done\n");
  fflush(stdout);
  return 0;
}
