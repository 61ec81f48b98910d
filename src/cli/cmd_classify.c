/* SPDX-License-Identifier: MIT */
/*
 * cmd_classify.c - `leakguard classify [--format text|json] FILE`: names the shape of
 * a memory curve read from a CSV file (columns time,value and optionally rss, a
 * header row optional), so that curves from other sources (Prometheus exports,
 * nvidia-smi logs, the recorder's own database) can be classified. Prints the class
 * and the per-class probabilities; bad input is reported as one line
 * "leakguard classify: FILE:LINE: reason" with exit status 2.
 *
 * The CSV reader itself is src/analysis/csv.c.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/classify.h"
#include "analysis/csv.h"
#include "cli/commands.h"
#include "leakguard.h"

/* ------------------------------------------------------------------ command */

static void usage(FILE *fp) {
  fprintf(fp, "usage: leakguard classify [--format text|json] FILE\n"
              "Names the shape of a memory curve. FILE (or - for stdin) is a CSV of\n"
              "samples time,value[,rss], header row optional. Classes: stable,\n"
              "linear-leak, accelerating-leak, step-leak, plateau, sawtooth,\n"
              "fragmentation (needs the rss column).\n");
}

int lg_cmd_classify(int argc, char **argv) {
  int json = 0;
  const char *file = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *fmt = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return LG_EXIT_OK;
    } else if (!strcmp(a, "--format")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "leakguard classify: --format needs an argument (text or json)\n");
        return LG_EXIT_USAGE;
      }
      fmt = argv[++i];
    } else if (!strncmp(a, "--format=", 9)) {
      fmt = a + 9;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "leakguard classify: unknown option '%s'\n", a);
      usage(stderr);
      return LG_EXIT_USAGE;
    } else if (file) {
      fprintf(stderr, "leakguard classify: only one FILE may be given\n");
      return LG_EXIT_USAGE;
    } else {
      file = a;
    }
    if (fmt) {
      if (!strcmp(fmt, "json")) json = 1;
      else if (!strcmp(fmt, "text")) json = 0;
      else {
        fprintf(stderr, "leakguard classify: unknown format '%s' (text or json)\n", fmt);
        return LG_EXIT_USAGE;
      }
    }
  }
  if (!file) {
    fprintf(stderr, "leakguard classify: missing FILE\n");
    usage(stderr);
    return LG_EXIT_USAGE;
  }

  lgi_series_t s;
  char err[512];
  if (lgi_series_load(file, &s, err, sizeof err)) {
    fprintf(stderr, "leakguard classify: %s\n", err);
    return LG_EXIT_USAGE;
  }
  lg_pattern_t cls;
  double p[LG_PATTERN_COUNT];
  int rc = lg_classify(s.t, s.v, s.rss, s.n, &cls, p);
  lgi_series_free(&s);
  if (rc) {
    fprintf(stderr, "leakguard classify: %s: %s\n", file, strerror(-rc));
    return LG_EXIT_USAGE;
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
      fprintf(stderr, "leakguard classify: out of memory\n");
      return LG_EXIT_INTERNAL;
    }
    puts(text);
    cJSON_free(text);
  } else {
    printf("%s\n", lg_pattern_name(cls));
    for (int c = 0; c < LG_PATTERN_COUNT; c++) printf("  %-18s %.4f\n", lg_pattern_name((lg_pattern_t)c), p[c]);
  }
  return fflush(stdout) ? LG_EXIT_INTERNAL : LG_EXIT_OK;
}
