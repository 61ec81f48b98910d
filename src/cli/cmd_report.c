/* SPDX-License-Identifier: MIT */
/* cmd_report.c - `leakguard report DB`: the report, built from the database only. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/final_report.h"
#include "core/outfile.h"
#include "core/util.h"
#include "findings/report.h"
#include "output/render.h"

static void usage(FILE *f) {
  fprintf(f, "usage: leakguard report [OPTIONS] DATABASE\n"
             "\n"
             "Prints the leak report of a database written by `leakguard run`.\n"
             "\n"
             "  -f, --format FMT   text (default); json; folded (stacks weighted by live\n"
             "                     bytes at the end, for flamegraph.pl and speedscope);\n"
             "                     pprof (gzipped profile.proto: go tool pprof, Pyroscope,\n"
             "                     Parca, speedscope; its sample types, in order:\n"
             "                     growth_space_per_second (the default), peak_inuse_space\n"
             "                     (the default when nothing leaks), inuse_space,\n"
             "                     inuse_objects, alloc_space, alloc_objects: go tool pprof\n"
             "                     -sample_index=TYPE picks one); html (one self-contained\n"
             "                     page: leaks and their curves, flame graphs, every site);\n"
             "                     pool-profile (the generation of each native function's\n"
             "                     blocks, for liblgpool's LEAKGUARD_POOL_PROFILE)\n"
             "  -o, --output FILE  write to FILE instead of standard output (replaced if it\n"
             "                     exists; never a symbolic link, nor the database itself)\n"
             "  -n, --top N        suspects to show (default 10)\n"
             "      --native       keep allocator and interpreter frames in the stacks\n"
             "      --own PATH     files and modules under PATH are the program's own code,\n"
             "                     even under site-packages or /usr/lib: a site is named by\n"
             "                     its innermost frame there (repeatable; added to those the\n"
             "                     recording was made with)\n"
             "      --fail-on-leak exit with status 97 when the report finds a leak\n"
             "  -h, --help         this help\n");
}

enum { OPT_NATIVE = 256, OPT_FAIL, OPT_OWN };

int lg_cmd_report(int argc, char **argv) {
  static const struct option longopts[] = {{"format", required_argument, NULL, 'f'},
                                           {"top", required_argument, NULL, 'n'},
                                           {"output", required_argument, NULL, 'o'},
                                           {"native", no_argument, NULL, OPT_NATIVE},
                                           {"fail-on-leak", no_argument, NULL, OPT_FAIL},
                                           {"own", required_argument, NULL, OPT_OWN},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  const char *format = "text", *outp = NULL;
  lgr_options_t ro = {.top = 10};
  const char *own_args[LG_OWN_MAX];
  int nown_args = 0, fail = 0, ch;
  long lv;
  optind = 1;
  opterr = 0;
  while ((ch = getopt_long(argc, argv, "f:n:o:h", longopts, NULL)) != -1) {
    switch (ch) {
    case 'f': format = optarg; break;
    case 'o': outp = optarg; break;
    case 'n':
      if (lgu_parse_long(optarg, 1, 100000, &lv) != 0) {
        lgu_err("report: --top must be an integer between 1 and 100000, not '%s'", optarg);
        return LG_EXIT_USAGE;
      }
      ro.top = (int)lv;
      break;
    case OPT_NATIVE: ro.native = 1; break;
    case OPT_FAIL: fail = 1; break;
    case OPT_OWN:
      if (nown_args == LG_OWN_MAX) {
        lgu_err("report: --own is given more than %d times", LG_OWN_MAX);
        return LG_EXIT_USAGE;
      }
      own_args[nown_args++] = optarg;
      break;
    case 'h': usage(stdout); return LG_EXIT_OK;
    default:
      lgu_err("report: unknown or incomplete option '%s' (see leakguard report --help)", argv[optind - 1]);
      return LG_EXIT_USAGE;
    }
  }
  const lgo_format_t *fmt = lgo_format(format);
  if (!fmt) {
    lgu_err("report: unknown format '%s' (%s)", format, lgo_format_names());
    return LG_EXIT_USAGE;
  }
  lgo_format_options(fmt, &ro);
  if (fmt->binary && !outp && isatty(STDOUT_FILENO)) {
    lgu_err("report: the %s format is binary (gzip): give -o FILE or redirect standard output", fmt->name);
    return LG_EXIT_USAGE;
  }
  if (optind != argc - 1) {
    lgu_err("report: expected exactly one database file (usage: leakguard report [OPTIONS] DATABASE)");
    return LG_EXIT_USAGE;
  }
  const char *path = argv[optind];
  lgr_db_t *db = NULL;
  char why[1024];
  if (lgr_open(path, &db, why, sizeof why) != 0) {
    lgu_err("report: %s", why);
    return LG_EXIT_USAGE;
  }
  FILE *out;
  int removable, orc = lg_report_open("report", outp, path, &out, &removable);
  if (orc != 0) {
    lgr_close(db);
    return orc;
  }
  int rc = LG_EXIT_OK;
  lg_own_t own = {0};
  for (int i = 0; i < nown_args && rc == LG_EXIT_OK; i++) rc = lg_own_parse("report", own_args[i], &own);
  ro.own = (const char *const *)own.path;
  ro.nown = own.n;
  lgr_report_t rep;
  if (rc != LG_EXIT_OK) {
  } else if (lgr_build(db, &ro, &rep, why, sizeof why) != 0) {
    lgu_err("report: %s: %s", path, why);
    rc = LG_EXIT_USAGE;
  } else {
    lgo_render_opts_t wo = {.top = ro.top, .source = path};
    int wrc = fmt->render(out, &rep, &wo);
    if (wrc == -ENOMEM) lgu_err("report: out of memory writing %s", fmt->what), rc = LG_EXIT_INTERNAL;
    else if (wrc != 0) lgu_err("report: cannot write %s: %s", fmt->what, strerror(-wrc)), rc = LG_EXIT_INTERNAL;
    if (rc == LG_EXIT_OK && fail && rep.nsuspects) rc = LG_EXIT_LEAK;
    lgr_free(&rep);
  }
  lg_own_free(&own);
  lgr_close(db);
  return lg_report_close("report", outp, out, removable, rc);
}
