/* SPDX-License-Identifier: MIT */
/*
 * classify_file.c - a CSV file's memory curve, classified and printed (see
 * classify_file.h).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analysis/classify.h"
#include "analysis/classify_file.h"
#include "analysis/csv.h"
#include "leakguard.h"

int lga_classify_file(const char *path, uint64_t max_bytes, int json, FILE *out, char *why, size_t whylen) {
  lga_series_t s;
  if (lga_series_load(path, max_bytes, &s, why, whylen)) return -EINVAL;
  lg_pattern_t cls;
  double p[LG_PATTERN_COUNT];
  int rc = lg_classify(s.t, s.v, s.rss, s.n, &cls, p);
  lga_series_free(&s);
  if (rc) {
    snprintf(why, whylen, "%s: %s", path, strerror(-rc));
    return -EINVAL;
  }
  if (json) {
    cJSON *root = cJSON_CreateObject(), *probs = NULL;
    if (root && cJSON_AddStringToObject(root, "class", lg_pattern_name(cls)))
      probs = cJSON_AddObjectToObject(root, "probabilities");
    int ok = probs != NULL;
    for (int c = 0; ok && c < LG_PATTERN_COUNT; c++)
      ok = cJSON_AddNumberToObject(probs, lg_pattern_name((lg_pattern_t)c), round(p[c] * 1e4) / 1e4) != NULL;
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) {
      snprintf(why, whylen, "out of memory");
      return -ENOMEM;
    }
    fprintf(out, "%s\n", text);
    cJSON_free(text);
  } else {
    fprintf(out, "%s\n", lg_pattern_name(cls));
    for (int c = 0; c < LG_PATTERN_COUNT; c++) fprintf(out, "  %-18s %.4f\n", lg_pattern_name((lg_pattern_t)c), p[c]);
  }
  if (fflush(out) || ferror(out)) {
    snprintf(why, whylen, "cannot write the result: %s", strerror(errno ? errno : EIO));
    return -EIO;
  }
  return 0;
}
