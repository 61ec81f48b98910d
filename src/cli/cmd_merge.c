/* SPDX-License-Identifier: MIT */
/* cmd_merge.c - `leakguard merge -o OUT.db A.db B.db ...`: several runs in one database. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/util.h"
#include "output/merge.h"

static void usage(FILE *f) {
  fprintf(f, "usage: leakguard merge -o OUT.db DATABASE...\n"
             "\n"
             "Merges databases written by `leakguard run` (the ranks and nodes of one job,\n"
             "each recorded on its own) into OUT.db, for one report: `leakguard report OUT.db`\n"
             "then says which host and rank leaks. Processes keep their host, rank and pid;\n"
             "a `source` label names the file each came from.\n"
             "\n"
             "  -o, --output FILE  the merged database (must not exist)\n"
             "  -h, --help         this help\n");
}

int lg_cmd_merge(int argc, char **argv) {
  static const struct option longopts[] = {
      {"output", required_argument, NULL, 'o'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  const char *out = NULL;
  int ch;
  optind = 1;
  opterr = 0;
  while ((ch = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
    switch (ch) {
    case 'o': out = optarg; break;
    case 'h': usage(stdout); return LG_EXIT_OK;
    default:
      lgu_err("merge: unknown or incomplete option '%s' (see leakguard merge --help)", argv[optind - 1]);
      return LG_EXIT_USAGE;
    }
  }
  if (!out) {
    lgu_err("merge: give the merged database with -o OUT.db (usage: leakguard merge -o OUT.db DATABASE...)");
    return LG_EXIT_USAGE;
  }
  int n = argc - optind;
  if (n < 1 || n > 64) {
    lgu_err("merge: give 1 to 64 databases to merge (usage: leakguard merge -o OUT.db DATABASE...)");
    return LG_EXIT_USAGE;
  }
  char why[1200];
  int rc = lgst_merge(out, (const char *const *)argv + optind, n, why, sizeof why);
  if (rc != 0) {
    lgu_err("merge: %s", why);
    return rc == -ENOMEM ? LG_EXIT_INTERNAL : LG_EXIT_USAGE;
  }
  return LG_EXIT_OK;
}
