/* SPDX-License-Identifier: MIT */
/*
 * fuzz_csv.c - fuzz target: the classify CSV reader (src/analysis/csv.c) and, on
 * what it accepts, the classifier itself (lg_classify), as `leakguard classify` runs
 * them. See fuzz_main.h for how it is built and replayed.
 */
#include <stdint.h>
#include <stdio.h>

#include "analysis/classify.h"
#include "analysis/csv.h"
#include "leakguard.h"

#include "fuzz_main.h"

int lg_fuzz_one(const uint8_t *data, size_t size) {
  FILE *fp = fmemopen((void *)data, size, "r");
  if (!fp) /* fmemopen refuses size 0 */
    return 1;
  lga_series_t s;
  char err[512];
  int rc = lga_series_read_csv(fp, "fuzz.csv", &s, err, sizeof err);
  fclose(fp);
  if (rc) return 1;
  lg_pattern_t cls;
  double p[LG_PATTERN_COUNT];
  rc = lg_classify(s.t, s.v, s.rss, s.n, &cls, p);
  lga_series_free(&s);
  return rc != 0;
}
