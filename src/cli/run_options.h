/* SPDX-License-Identifier: MIT */
/* run_options.h - the command line of `leakguard run` (cli/run_options.c). */
#ifndef LG_CLI_RUN_OPTIONS_H
#define LG_CLI_RUN_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "cli/final_report.h"

typedef struct run_opts {
  const char *output;
  double interval;
  int quiet, follow, fail_on_leak, mmap, top;
  uint64_t sample, limit;
  uint64_t import_sample; /* --import-sample: bytes per sample under a Python import (0: all) */
  long depth;
  int guard, guard_dry_run;
  int cuda_um; /* --cuda-um: CUPTI Unified Memory counters (docs/cuda.md) */
  const char *guard_config, *metrics;
  long explain_at_step;
  uint64_t lazy_bytes;         /* --lazy: images but the first begin after these bytes */
  long lazy_ms;                /* or these milliseconds; 0: every image recorded from its start */
  int steps_off;               /* --steps off: no step at optimizer.step() (docs/python.md) */
  int force;                   /* --force: replace an existing output file */
  const char *format, *report; /* --format, --report FILE: the final report (cli/final_report.h) */
  lg_own_t own;                /* --own PATH: the program's own code (stored in meta) */
} run_opts_t;

/* Parses `leakguard run`'s options into o and the target command into *targv: -1 to go
 * on, or the exit status (0 after --help, LG_EXIT_USAGE after a one-line error). */
int lg_run_options(int argc, char **argv, run_opts_t *o, char ***targv);

/* Checks the target command (found, executable, recordable) and resolves its path:
 * 0, or the exit status after a one-line error. */
int lg_check_target(const char *cmd, char *path, size_t n);

typedef struct lgst lgst_t;
/* Claims and creates the output database (output/store.h, lgst_create_ex): 0, or the
 * exit status after a one-line error naming the file (2: exists without --force, in
 * use by another recording, a symbolic link, unwritable; 98: disk full, I/O). cmd
 * begins the line ("run", "attach"). */
int lg_claim_output(const char *cmd, const char *output, int force, lgst_t **db);
/* The same in two steps (output/store.h lgst_claim, lgst_open): the file claimed, then
 * the database made in it; on a failed open *db is closed, its files removed, NULL. */
int lg_claim_output_file(const char *cmd, const char *output, int force, lgst_t **db);
int lg_open_output(const char *cmd, lgst_t **db);
/* Without --output: the current directory must be writable (the default name is made
 * once the pid is known). 0, or 2 after a one-line error. */
int lg_check_output_dir(const char *cmd);

#endif
