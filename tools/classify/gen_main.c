/* SPDX-License-Identifier: MIT */
/*
 * gen_main.c - lg-gen-dataset: writes labelled synthetic memory curves as CSV.
 *
 * Usage: lg-gen-dataset [--split train|val|test] [--count N] [--first I] --out DIR
 * Writes DIR/NNNNNN.csv (header time,value[,rss]; one sample per row, %.17g) and
 * DIR/labels.csv (file,label,description). Series I of a split is always the same
 * curve (see gen.h), so lg-train, lg-eval-classifier and these files agree. The
 * trainer and evaluator call the same generator in-process instead of reading the
 * files; this program exists to inspect the data and to feed other tools
 * (e.g. `leakguard classify DIR/000003.csv`).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gen.h"
#include "leakguard.h"

int main(int argc, char **argv) {
  int split = LGI_GEN_TEST;
  unsigned long count = 70, first = 0;
  const char *dir = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--split") && i + 1 < argc) {
      split = lgi_gen_split_parse(argv[++i]);
      if (split < 0) {
        fprintf(stderr, "lg-gen-dataset: unknown split '%s' (train, val, test)\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--count") && i + 1 < argc) {
      count = strtoul(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--first") && i + 1 < argc) {
      first = strtoul(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
      dir = argv[++i];
    } else {
      fprintf(stderr, "usage: lg-gen-dataset [--split train|val|test] [--count N] "
                      "[--first I] --out DIR\n");
      return 2;
    }
  }
  if (!dir) {
    fprintf(stderr, "lg-gen-dataset: --out DIR is required\n");
    return 2;
  }
  if (mkdir(dir, 0777) && errno != EEXIST) {
    fprintf(stderr, "lg-gen-dataset: %s: %s\n", dir, strerror(errno));
    return 1;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/labels.csv", dir);
  FILE *lf = fopen(path, "w");
  if (!lf) {
    fprintf(stderr, "lg-gen-dataset: %s: %s\n", path, strerror(errno));
    return 1;
  }
  fprintf(lf, "file,label,description\n");
  lgi_gen_series_t *s = malloc(sizeof *s);
  if (!s) return 1;
  for (unsigned long k = first; k < first + count; k++) {
    lgi_gen_make(split, k, s);
    snprintf(path, sizeof path, "%s/%06lu.csv", dir, k);
    FILE *fp = fopen(path, "w");
    if (!fp) {
      fprintf(stderr, "lg-gen-dataset: %s: %s\n", path, strerror(errno));
      return 1;
    }
    fprintf(fp, s->has_rss ? "time,value,rss\n" : "time,value\n");
    for (size_t i = 0; i < s->n; i++) {
      if (s->has_rss) fprintf(fp, "%.17g,%.17g,%.17g\n", s->t[i], s->v[i], s->rss[i]);
      else fprintf(fp, "%.17g,%.17g\n", s->t[i], s->v[i]);
    }
    if (fclose(fp)) {
      fprintf(stderr, "lg-gen-dataset: %s: write error\n", path);
      return 1;
    }
    fprintf(lf, "%06lu.csv,%s,%s\n", k, lg_pattern_name((lg_pattern_t)s->label), s->desc);
  }
  free(s);
  return fclose(lf) ? 1 : 0;
}
