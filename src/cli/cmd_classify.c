/* SPDX-License-Identifier: MIT */
/*
 * cmd_classify.c - `leakguard classify [--format text|json] FILE`: names the shape of
 * a memory curve read from a CSV file (columns time,value and optionally rss, a
 * header row optional), so that curves from other sources (Prometheus exports,
 * nvidia-smi logs, the recorder's own database) can be classified. Prints the class
 * and the per-class probabilities; bad input is reported as one line
 * "leakguard: FILE:LINE: reason" with exit status 2.
 *
 * The command line only: reading, classifying and printing are
 * src/analysis/classify_file.c (the CSV reader src/analysis/csv.c).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "analysis/classify_file.h"
#include "analysis/csv.h"
#include "cli/commands.h"
#include "core/util.h"

/* ------------------------------------------------------------------ command */

static void usage(FILE *fp) {
  fprintf(fp, "usage: leakguard classify [--format text|json] [--max-bytes BYTES] FILE\n"
              "Names the shape of a memory curve. FILE (or - for stdin) is a CSV of\n"
              "samples time,value[,rss], header row optional. Classes: stable,\n"
              "linear-leak, accelerating-leak, step-leak, plateau, sawtooth,\n"
              "fragmentation (needs the rss column). FILE must be a regular file of at\n"
              "most --max-bytes (default 64M; 0: no limit), standard input is read up to it.\n");
}

int lg_cmd_classify(int argc, char **argv) {
  int json = 0;
  const char *file = NULL;
  uint64_t max_bytes = LGA_CSV_MAX_BYTES;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *fmt = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return LG_EXIT_OK;
    } else if (!strcmp(a, "--format")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "leakguard: --format needs an argument (text or json)\n");
        return LG_EXIT_USAGE;
      }
      fmt = argv[++i];
    } else if (!strncmp(a, "--format=", 9)) {
      fmt = a + 9;
    } else if (!strcmp(a, "--max-bytes") || !strncmp(a, "--max-bytes=", 12)) {
      const char *v = a[11] == '=' ? a + 12 : i + 1 < argc ? argv[++i] : NULL;
      if (!v || lgu_parse_size(v, &max_bytes) != 0) {
        fprintf(stderr, "leakguard: --max-bytes needs a size (e.g. 256M, 0 for no limit)\n");
        return LG_EXIT_USAGE;
      }
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "leakguard: unknown option '%s'\n", a);
      usage(stderr);
      return LG_EXIT_USAGE;
    } else if (file) {
      fprintf(stderr, "leakguard: only one FILE may be given\n");
      return LG_EXIT_USAGE;
    } else {
      file = a;
    }
    if (fmt) {
      if (!strcmp(fmt, "json")) json = 1;
      else if (!strcmp(fmt, "text")) json = 0;
      else {
        fprintf(stderr, "leakguard: unknown format '%s' (text or json)\n", fmt);
        return LG_EXIT_USAGE;
      }
    }
  }
  if (!file) {
    fprintf(stderr, "leakguard: missing FILE\n");
    usage(stderr);
    return LG_EXIT_USAGE;
  }

  char why[512];
  int rc = lga_classify_file(file, max_bytes, json, stdout, why, sizeof why);
  if (rc) fprintf(stderr, "leakguard: %s\n", why);
  return rc == 0 ? LG_EXIT_OK : rc == -EINVAL ? LG_EXIT_USAGE : LG_EXIT_INTERNAL;
}
