/* SPDX-License-Identifier: MIT */
/*
 * classify_bench.c - cost of one lg_classify() call on a 512-sample series, and the
 * size of the classifier's code and data.
 *
 * Times batches of calls over 512-sample series of every class (from the dataset
 * generator's test split, half of them with an rss series) and prints the median and
 * 90th percentile nanoseconds per classification. Then sums the allocated sections
 * (.text, .rodata, .data, .bss) of the classifier's object files with size(1) (the
 * paths come from the build, LGC_OBJECTS, ':'-separated). Usage:
 *   classify-bench [--batches N]   (default 2000 batches of 32 calls)
 * Not a ctest: timings depend on the machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analysis/classify.h"
#include "gen.h"
#include "leakguard.h"

#ifndef LGC_OBJECTS
#define LGC_OBJECTS ""
#endif

enum { NSER = 28, BATCH = 32, LEN = 512 };

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sums allocated sections of one object file with size -A; returns bytes or -1. */
static long object_size(const char *path) {
  char cmd[4600], line[512];
  snprintf(cmd, sizeof cmd, "size -A '%s' 2>/dev/null", path);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  long total = 0;
  int seen = 0;
  while (fgets(line, sizeof line, p)) {
    char name[256];
    long sz;
    if (sscanf(line, "%255s %ld", name, &sz) != 2) continue;
    if (!strncmp(name, ".text", 5) || !strncmp(name, ".rodata", 7) || !strncmp(name, ".data", 5) ||
        !strncmp(name, ".bss", 4)) {
      total += sz;
      seen = 1;
    }
  }
  return pclose(p) == 0 && seen ? total : -1;
}

int main(int argc, char **argv) {
  int batches = 2000;
  if (argc == 3 && !strcmp(argv[1], "--batches")) batches = atoi(argv[2]);
  if (batches < 10) {
    fprintf(stderr, "usage: classify-bench [--batches N>=10]\n");
    return 2;
  }

  /* 512-sample series of every class: the first ones the generator makes that long
   * are taken by truncating/generating until each class has NSER/7 of them. */
  static double t[NSER][LEN], v[NSER][LEN], r[NSER][LEN];
  int has_rss[NSER], got = 0;
  lgi_gen_series_t *s = malloc(sizeof *s);
  for (uint64_t k = 0; got < NSER && s; k++) {
    lgi_gen_make(LGI_GEN_TEST, k, s);
    if (s->n < LEN || s->label != got % LG_PATTERN_COUNT) continue;
    /* keep the first LEN samples of a longer series: still a valid curve */
    memcpy(t[got], s->t, sizeof t[got]);
    memcpy(v[got], s->v, sizeof v[got]);
    memcpy(r[got], s->rss, sizeof r[got]);
    has_rss[got] = s->has_rss;
    got++;
  }
  free(s);
  if (got < NSER) return 1;

  lg_pattern_t out;
  double probs[LG_PATTERN_COUNT], sink = 0;
  for (int i = 0; i < 2000; i++) { /* warm-up */
    lg_classify(t[i % NSER], v[i % NSER], has_rss[i % NSER] ? r[i % NSER] : NULL, LEN, &out, probs);
    sink += probs[0];
  }
  double *per = malloc(batches * sizeof *per);
  for (int b = 0; b < batches; b++) {
    double t0 = now_ns();
    for (int i = 0; i < BATCH; i++) {
      int k = (b * BATCH + i) % NSER;
      lg_classify(t[k], v[k], has_rss[k] ? r[k] : NULL, LEN, &out, probs);
      sink += probs[out];
    }
    per[b] = (now_ns() - t0) / BATCH;
  }
  qsort(per, batches, sizeof *per, cmp_double);
  printf("lg_classify, %d-sample series (%d series, all classes, half with rss):\n", LEN, NSER);
  printf("  median %.0f ns   p10 %.0f ns   p90 %.0f ns per classification"
         "   (%d batches of %d; checksum %.3f)\n",
         per[batches / 2], per[batches / 10], per[batches * 9 / 10], batches, BATCH, sink);
  free(per);

  long total = 0;
  int ok = 1;
  char objs[] = LGC_OBJECTS;
  printf("classifier code+data (allocated sections, size -A):\n");
  for (char *save = NULL, *o = strtok_r(objs, ":", &save); o; o = strtok_r(NULL, ":", &save)) {
    long sz = object_size(o);
    const char *base = strrchr(o, '/');
    printf("  %-28s %7ld bytes\n", base ? base + 1 : o, sz);
    ok &= sz >= 0;
    total += sz > 0 ? sz : 0;
  }
  if (ok && total)
    printf("  total %.1f KiB (model parameters: %.1f KiB)\n", total / 1024.0, sizeof(lga_classify_model_t) / 1024.0);
  else printf("  (size(1) not available or no object files)\n");
  return 0;
}
