/* SPDX-License-Identifier: MIT */
/* commands.h - subcommands of the leakguard CLI and its exit codes. */
#ifndef LG_CLI_COMMANDS_H
#define LG_CLI_COMMANDS_H

/* Exit codes of the leakguard CLI (documented in docs/leakguard.1). For `run`,
 * the target's own exit status is passed through (128+N when killed by signal N);
 * these codes are used when leakguard itself decides the status. */
#define LG_EXIT_OK 0
#define LG_EXIT_USAGE 2         /* bad command line, bad input file */
#define LG_EXIT_LEAK 97         /* --fail-on-leak found a leak (run, report); diff --fail-on-new a regression */
#define LG_EXIT_INTERNAL 98     /* leakguard itself failed (cannot create output, ...) */
#define LG_EXIT_CANNOT_EXEC 126 /* target exists but cannot be run under the recorder */
#define LG_EXIT_NOT_FOUND 127   /* target command not found */

int lg_cmd_run(int argc, char **argv);
int lg_cmd_report(int argc, char **argv);
int lg_cmd_diff(int argc, char **argv);
int lg_cmd_merge(int argc, char **argv);
int lg_cmd_classify(int argc, char **argv);
int lg_cmd_guard(int argc, char **argv);
int lg_cmd_attach(int argc, char **argv);

#endif
