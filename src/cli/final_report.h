/* SPDX-License-Identifier: MIT */
/*
 * final_report.h - where the findings go: `report`'s output, and the report `run` and
 * `attach` write when the recording ends (--format, --report), all through the
 * renderers' table (output/render.h).
 */
#ifndef LG_CLI_FINAL_REPORT_H
#define LG_CLI_FINAL_REPORT_H

#include <stdio.h>

#include "findings/report.h"
#include "output/render.h"

/* Opens path for a report (stdout when NULL): a device or a pipe is written to as it
 * is; a file is claimed (never through a symbolic link, nor a file a recording has
 * open, nor the database db_path itself) and replaced. *removable: a file to remove if
 * the report fails. 0, or the exit status after a one-line error beginning with cmd. */
int lg_report_open(const char *cmd, const char *path, const char *db_path, FILE **out, int *removable);
/* Closes what lg_report_open opened and settles the exit status rc: a failed close is
 * an internal error; a failed report's file is removed. Returns the status. */
int lg_report_close(const char *cmd, const char *path, FILE *out, int removable, int rc);

/* The report at the end of `run` and `attach`. */
typedef struct lg_final {
  const lgo_format_t *format; /* --format (text when not given) */
  const char *path;           /* --report FILE; NULL: standard output */
} lg_final_t;
/* --format and --report as given (either may be NULL): 0, or LG_EXIT_USAGE after a
 * one-line error (an unknown format; a binary one for a terminal). */
int lg_final_parse(const char *cmd, const char *format, const char *path, lg_final_t *f);
/* Builds the findings of db and writes them as f says (nothing on standard output with
 * quiet; a --report file is written all the same). *leaks: the leaks found (-1: no
 * report). 0, or the exit status of a failure (said in one line). */
int lg_final_report(const char *cmd, lgr_db_t *db, const char *db_path, const lg_final_t *f, int top, int quiet,
                    int *leaks);

/* --own PATH (run, attach, report): files and modules under PATH are the program's own
 * code (docs/detection.md "From stacks to sites"). */
#define LG_OWN_MAX 32
typedef struct lg_own {
  char *path[LG_OWN_MAX]; /* absolute (made so against the current directory) */
  int n;
} lg_own_t;
/* Adds arg: 0, or LG_EXIT_USAGE after a one-line error beginning with cmd. */
int lg_own_parse(const char *cmd, const char *arg, lg_own_t *own);
void lg_own_free(lg_own_t *own);
typedef struct lgst lgst_t;
/* Stores them in the recording's meta (`own`, one a line), which the report reads. */
void lg_own_meta(lgst_t *db, const lg_own_t *own);

#endif
