/* SPDX-License-Identifier: MIT */
/* cmd_diff.c - `leakguard diff OLD NEW`: the leaks of two recorded runs compared, for CI. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/util.h"
#include "findings/diff.h"
#include "findings/report.h"
#include "output/render.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: leakguard diff [OPTIONS] OLD.db NEW.db\n"
          "\n"
          "Compares the leaks of two databases written by `leakguard run`: allocation\n"
          "sites that leak in NEW and did not in OLD, that leak faster, that leak in both,\n"
          "and that were fixed. Sites are matched by function, file and line (by function\n"
          "and file when the line moved), never by address.\n"
          "\n"
          "  -f, --format FMT     text (default) or json\n"
          "      --worse-ratio R  a site leaking R times as fast as in OLD is worse\n"
          "                       (default %.1f)\n"
          "      --fail-on-new    exit with status 97 when NEW has a new or worse leak\n"
          "  -h, --help           this help\n"
          "\n"
          "Exit status: 0, or 97 with --fail-on-new and a regression; 2 for bad input.\n",
          LGR_DIFF_WORSE_RATIO);
}

enum { OPT_FAIL = 256, OPT_RATIO };

/* Opens and builds the report of one database; 0, or an error said in one line. */
static int load(const char *path, lgr_db_t **db, lgr_report_t *rep) {
  char why[1024];
  lgr_options_t ro = {.top = 100000};
  if (lgr_open(path, db, why, sizeof why) != 0) {
    lgu_err("diff: %s", why);
    return -1;
  }
  if (lgr_build(*db, &ro, rep, why, sizeof why) != 0) {
    lgu_err("diff: %s: %s", path, why);
    lgr_close(*db);
    *db = NULL;
    return -1;
  }
  return 0;
}

int lg_cmd_diff(int argc, char **argv) {
  static const struct option longopts[] = {{"format", required_argument, NULL, 'f'},
                                           {"worse-ratio", required_argument, NULL, OPT_RATIO},
                                           {"fail-on-new", no_argument, NULL, OPT_FAIL},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  const char *format = "text";
  double ratio = LGR_DIFF_WORSE_RATIO;
  int fail = 0, ch;
  optind = 1;
  opterr = 0;
  while ((ch = getopt_long(argc, argv, "f:h", longopts, NULL)) != -1) {
    switch (ch) {
    case 'f': format = optarg; break;
    case OPT_RATIO:
      if (lgu_parse_double(optarg, &ratio) != 0 || !isfinite(ratio) || ratio <= 1 || ratio > 1000) {
        lgu_err("diff: --worse-ratio must be a number above 1 (at most 1000), not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      break;
    case OPT_FAIL: fail = 1; break;
    case 'h': usage(stdout); return LG_EXIT_OK;
    default:
      lgu_err("diff: unknown or incomplete option '%s' (see leakguard diff --help)", argv[optind - 1]);
      return LG_EXIT_USAGE;
    }
  }
  const lgo_format_t *fmt = lgo_format(format);
  if (!fmt || !fmt->diff) {
    lgu_err("diff: unknown format '%s' (text or json)", format);
    return LG_EXIT_USAGE;
  }
  if (optind != argc - 2) {
    lgu_err("diff: expected two database files (usage: leakguard diff [OPTIONS] OLD.db NEW.db)");
    return LG_EXIT_USAGE;
  }
  const char *old_path = argv[optind], *new_path = argv[optind + 1];
  lgr_db_t *odb = NULL, *ndb = NULL;
  lgr_report_t orep, nrep;
  if (load(old_path, &odb, &orep) != 0) return LG_EXIT_USAGE;
  if (load(new_path, &ndb, &nrep) != 0) {
    lgr_free(&orep);
    lgr_close(odb);
    return LG_EXIT_USAGE;
  }
  int rc = LG_EXIT_OK;
  lgr_diff_t d;
  if (lgr_diff_compare(&orep, &nrep, ratio, &d) != 0) {
    lgu_err("diff: out of memory comparing %s and %s", old_path, new_path);
    rc = LG_EXIT_INTERNAL;
  } else {
    lgo_render_opts_t ro = {.source = new_path, .base = old_path};
    int w = fmt->diff(stdout, &d, &ro);
    if (w != 0) {
      lgu_err("diff: %s printing %s", w == -ENOMEM ? "out of memory" : "a failed write", fmt->what);
      rc = LG_EXIT_INTERNAL;
    }
    if (rc == LG_EXIT_OK && fail && (d.count[LGR_DIFF_NEW] || d.count[LGR_DIFF_WORSE])) rc = LG_EXIT_LEAK;
    lgr_diff_free(&d);
  }
  lgr_free(&orep);
  lgr_free(&nrep);
  lgr_close(odb);
  lgr_close(ndb);
  return rc;
}
