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
#include "core/outfile.h"
#include "core/util.h"
#include "output/pprof.h"
#include "output/report_html.h"
#include "output/report.h"
#include "output/store.h"

static void usage(FILE *f) {
  fprintf(f, "usage: leakguard report [OPTIONS] DATABASE\n"
             "\n"
             "Prints the leak report of a database written by `leakguard run`.\n"
             "\n"
             "  -f, --format FMT   text (default); json; folded (stacks weighted by live\n"
             "                     bytes at the end, for flamegraph.pl and speedscope);\n"
             "                     pprof (gzipped profile.proto: go tool pprof, Pyroscope,\n"
             "                     Parca, speedscope); html (one self-contained page:\n"
             "                     leaks and their curves, flame graphs, every site);\n"
             "                     pool-profile (the generation of each native function's\n"
             "                     blocks, for liblgpool's LEAKGUARD_POOL_PROFILE)\n"
             "  -o, --output FILE  write to FILE instead of standard output (replaced if it\n"
             "                     exists; never a symbolic link, nor the database itself)\n"
             "  -n, --top N        suspects to show (default 10)\n"
             "      --native       keep allocator and interpreter frames in the stacks\n"
             "      --fail-on-leak exit with status 97 when the report finds a leak\n"
             "  -h, --help         this help\n");
}

enum { OPT_NATIVE = 256, OPT_FAIL };

int lg_cmd_report(int argc, char **argv) {
  static const struct option longopts[] = {{"format", required_argument, NULL, 'f'},
                                           {"top", required_argument, NULL, 'n'},
                                           {"output", required_argument, NULL, 'o'},
                                           {"native", no_argument, NULL, OPT_NATIVE},
                                           {"fail-on-leak", no_argument, NULL, OPT_FAIL},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  const char *format = "text", *outp = NULL;
  lgr_options_t ro = {.top = 10};
  int fail = 0, ch;
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
    case 'h': usage(stdout); return LG_EXIT_OK;
    default:
      lgu_err("report: unknown or incomplete option '%s' (see leakguard report --help)", argv[optind - 1]);
      return LG_EXIT_USAGE;
    }
  }
  if (strcmp(format, "text") && strcmp(format, "json") && strcmp(format, "folded") && strcmp(format, "pprof") &&
      strcmp(format, "html") && strcmp(format, "pool-profile")) {
    lgu_err("report: unknown format '%s' (text, json, folded, pprof, html or pool-profile)", format);
    return LG_EXIT_USAGE;
  }
  int pprof = !strcmp(format, "pprof");
  ro.generations = !strcmp(format, "pool-profile");
  if (pprof && !outp && isatty(STDOUT_FILENO)) {
    lgu_err("report: the pprof format is binary (gzip): give -o FILE or redirect standard output");
    return LG_EXIT_USAGE;
  }
  if (optind != argc - 1) {
    lgu_err("report: expected exactly one database file (usage: leakguard report [OPTIONS] DATABASE)");
    return LG_EXIT_USAGE;
  }
  const char *path = argv[optind];
  lgst_t *db = NULL;
  char why[1024];
  if (lgst_open(path, &db, why, sizeof why) != 0) {
    lgu_err("report: %s", why);
    return LG_EXIT_USAGE;
  }
  FILE *out = stdout;
  struct stat so, si;
  if (outp && stat(outp, &so) == 0 && stat(path, &si) == 0 && so.st_dev == si.st_dev && so.st_ino == si.st_ino) {
    lgu_err("report: %s is the database being read: refused (give another -o)", outp);
    lgst_close(db);
    return LG_EXIT_USAGE;
  }
  struct stat od;
  int removable = 1;
  if (outp && stat(outp, &od) == 0 && (S_ISCHR(od.st_mode) || S_ISFIFO(od.st_mode) || S_ISSOCK(od.st_mode))) {
    /* a device or a pipe (/dev/null, /dev/stdout, a shell's >(...)): written to, never
     * created or truncated: no file can be clobbered through it */
    int fd = open(outp, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || !(out = fdopen(fd, "wb"))) {
      lgu_err("report: cannot write %s: %s", outp, strerror(errno));
      if (fd >= 0) close(fd);
      lgst_close(db);
      return LG_EXIT_USAGE;
    }
    removable = 0;   /* nothing to remove if the report fails */
  } else if (outp) { /* claimed: never through a link, nor a file a recording has open;
                      * an existing file is replaced (a report is made again from its database) */
    int fd, created, crc = lgu_claim_output(outp, 1, &fd, &created, why, sizeof why);
    if (crc != 0 || !(out = fdopen(fd, "wb"))) {
      if (crc != 0) lgu_err("report: cannot write %s", why);
      else lgu_err("report: cannot write %s: %s", outp, strerror(errno)), close(fd);
      lgst_close(db);
      return crc == -ENOSPC || crc == 0 ? LG_EXIT_INTERNAL : LG_EXIT_USAGE;
    }
  }
  int rc = LG_EXIT_OK;
  if (!strcmp(format, "folded")) {
    /* the checks every format makes first: a database the report refuses is refused
     * here too, before a line is printed */
    lgr_report_t rep;
    if (lgr_build(db, &ro, &rep, why, sizeof why) != 0) {
      lgu_err("report: %s: %s", path, why);
      rc = LG_EXIT_USAGE;
    } else {
      lgr_free(&rep);
      if (lgr_print_folded(out, db) != 0) {
        lgu_err("report: %s: cannot read stacks: damaged database", path);
        rc = LG_EXIT_USAGE;
      }
    }
  } else {
    lgr_report_t rep;
    if (lgr_build(db, &ro, &rep, why, sizeof why) != 0) {
      lgu_err("report: %s: %s", path, why);
      rc = LG_EXIT_USAGE;
    } else {
      if (pprof) {
        int prc = lgr_print_pprof(out, db, &rep);
        if (prc == -ENOMEM) lgu_err("report: out of memory writing the pprof profile"), rc = LG_EXIT_INTERNAL;
        else if (prc != 0)
          lgu_err("report: %s: cannot write the pprof profile (damaged database?)", path), rc = LG_EXIT_USAGE;
      } else if (!strcmp(format, "html")) {
        int hrc = lgr_print_html(out, db, &rep, &ro);
        if (hrc == -ENOMEM) lgu_err("report: out of memory writing the HTML page"), rc = LG_EXIT_INTERNAL;
        else if (hrc != 0)
          lgu_err("report: %s: cannot write the HTML page (damaged database?)", path), rc = LG_EXIT_USAGE;
      } else if (!strcmp(format, "json")) {
        lgr_print_json(out, &rep, &ro);
      } else if (ro.generations) {
        lgr_print_pool_profile(out, &rep, path);
      } else {
        lgr_print_text(out, &rep, &ro);
      }
      if (rc == LG_EXIT_OK && fail && rep.nsuspects) rc = LG_EXIT_LEAK;
      lgr_free(&rep);
    }
  }
  lgst_close(db);
  if (out != stdout) {
    if (fclose(out) != 0 && rc != LG_EXIT_USAGE) {
      lgu_err("report: cannot write %s: %s", outp, strerror(errno));
      rc = LG_EXIT_INTERNAL;
    }
    if (removable && (rc == LG_EXIT_USAGE || rc == LG_EXIT_INTERNAL)) unlink(outp); /* no half-written file */
  }
  return rc;
}
