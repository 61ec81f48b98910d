/* SPDX-License-Identifier: MIT */
/* final_report.c - where the findings go (final_report.h). */
#include "cli/final_report.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/outfile.h"
#include "core/util.h"
#include "output/store.h"

int lg_report_open(const char *cmd, const char *outp, const char *path, FILE **outf, int *removable) {
  char why[1024];
  struct stat so, si, od;
  *outf = stdout;
  *removable = 0;
  if (!outp) return 0;
  if (path && stat(outp, &so) == 0 && stat(path, &si) == 0 && so.st_dev == si.st_dev && so.st_ino == si.st_ino) {
    lgu_err("%s: %s is the database being read: refused (give another file)", cmd, outp);
    return LG_EXIT_USAGE;
  }
  if (stat(outp, &od) == 0 && (S_ISCHR(od.st_mode) || S_ISFIFO(od.st_mode) || S_ISSOCK(od.st_mode))) {
    /* a device or a pipe (/dev/null, /dev/stdout, a shell's >(...)): written to, never
     * created or truncated: no file can be clobbered through it */
    int fd = open(outp, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || !(*outf = fdopen(fd, "wb"))) {
      lgu_err("%s: cannot write %s: %s", cmd, outp, strerror(errno));
      if (fd >= 0) close(fd);
      *outf = stdout;
      return LG_EXIT_USAGE;
    }
    return 0; /* nothing to remove if the report fails */
  }
  /* claimed: never through a link, nor a file a recording has open; an existing file
   * is replaced (a report is made again from its database) */
  int fd, created, crc = lgu_claim_output(outp, 1, &fd, &created, why, sizeof why);
  if (crc != 0 || !(*outf = fdopen(fd, "wb"))) {
    if (crc != 0) lgu_err("%s: cannot write %s", cmd, why);
    else lgu_err("%s: cannot write %s: %s", cmd, outp, strerror(errno)), close(fd);
    *outf = stdout;
    return crc == -ENOSPC || crc == 0 ? LG_EXIT_INTERNAL : LG_EXIT_USAGE;
  }
  *removable = 1;
  return 0;
}

int lg_report_close(const char *cmd, const char *outp, FILE *out, int removable, int rc) {
  if (out == stdout) return rc;
  if (fclose(out) != 0 && rc != LG_EXIT_USAGE) {
    lgu_err("%s: cannot write %s: %s", cmd, outp, strerror(errno));
    rc = LG_EXIT_INTERNAL;
  }
  if (removable && (rc == LG_EXIT_USAGE || rc == LG_EXIT_INTERNAL)) unlink(outp); /* no half-written file */
  return rc;
}

int lg_final_parse(const char *cmd, const char *format, const char *path, lg_final_t *f) {
  f->format = lgo_format(format ? format : "text");
  f->path = path;
  if (!f->format) {
    lgu_err("%s: unknown format '%s' (%s)", cmd, format, lgo_format_names());
    return LG_EXIT_USAGE;
  }
  if (f->format->binary && !path && isatty(STDOUT_FILENO)) {
    lgu_err("%s: the %s format is binary (gzip): give --report FILE or redirect standard output", cmd, f->format->name);
    return LG_EXIT_USAGE;
  }
  return 0;
}

int lg_final_report(const char *cmd, lgr_db_t *db, const char *db_path, const lg_final_t *f, int top, int quiet,
                    int *leaks) {
  *leaks = -1;
  lgr_options_t ro = {.top = top};
  lgo_format_options(f->format, &ro);
  lgr_report_t rep;
  char why[1024];
  if (lgr_build(db, &ro, &rep, why, sizeof why) != 0) {
    lgu_err("%s: cannot build the report: %s", cmd, why);
    return LG_EXIT_INTERNAL;
  }
  *leaks = rep.nleaks;
  FILE *out = stdout;
  int removable = 0, rc = quiet && !f->path ? -1 : lg_report_open(cmd, f->path, db_path, &out, &removable);
  if (rc == 0) {
    fflush(stdout);
    lgo_render_opts_t wo = {.top = top, .source = db_path};
    int wrc = f->format->render(out, &rep, &wo);
    if (wrc == -ENOMEM) lgu_err("%s: out of memory writing %s", cmd, f->format->what), rc = LG_EXIT_INTERNAL;
    else if (wrc != 0) lgu_err("%s: cannot write %s: %s", cmd, f->format->what, strerror(-wrc)), rc = LG_EXIT_INTERNAL;
    rc = lg_report_close(cmd, f->path, out, removable, rc);
  }
  lgr_free(&rep);
  return rc < 0 ? 0 : rc;
}

int lg_own_parse(const char *cmd, const char *arg, lg_own_t *own) {
  if (!arg || !*arg || strchr(arg, '\n')) {
    lgu_err("%s: --own needs a path (a directory or file of the program's own code)", cmd);
    return LG_EXIT_USAGE;
  }
  if (own->n == LG_OWN_MAX) {
    lgu_err("%s: --own is given more than %d times", cmd, LG_OWN_MAX);
    return LG_EXIT_USAGE;
  }
  char abs[PATH_MAX], cwd[PATH_MAX];
  if (realpath(arg, abs)) { /* resolved where it exists: what the recorder sees */
  } else if (arg[0] == '/' || !getcwd(cwd, sizeof cwd)) {
    snprintf(abs, sizeof abs, "%s", arg);
  } else if ((size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, arg) >= sizeof abs) {
    lgu_err("%s: --own %s: path too long", cmd, arg);
    return LG_EXIT_USAGE;
  }
  if (!(own->path[own->n] = strdup(abs))) {
    lgu_err("%s: out of memory", cmd);
    return LG_EXIT_INTERNAL;
  }
  own->n++;
  return 0;
}

void lg_own_free(lg_own_t *own) {
  for (int i = 0; i < own->n; i++) free(own->path[i]);
  own->n = 0;
}

void lg_own_meta(lgst_t *db, const lg_own_t *own) {
  if (!own->n) return;
  size_t len = 1;
  for (int i = 0; i < own->n; i++) len += strlen(own->path[i]) + 1;
  char *v = malloc(len);
  if (!v) return;
  v[0] = 0;
  for (int i = 0; i < own->n; i++) {
    if (i) strcat(v, "\n");
    strcat(v, own->path[i]);
  }
  lgst_meta(db, "own", v);
  free(v);
}
