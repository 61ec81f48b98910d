/* SPDX-License-Identifier: MIT */
/* main.c - the leakguard command line: dispatches to the subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/util.h"

static void usage(FILE *f) {
  fprintf(f,
          "leakguard %s - find memory that keeps growing while a program runs\n"
          "\n"
          "usage: leakguard COMMAND [OPTIONS] ...\n"
          "\n"
          "commands:\n"
          "  run [OPTIONS] -- PROGRAM [ARGS...]   run PROGRAM under the recorder, show growing\n"
          "                                       allocation sites live, report at the end\n"
          "  attach [OPTIONS] PID                 record a running process, detach, report\n"
          "  report [OPTIONS] DATABASE            print the report of a recorded run\n"
          "                                       (text, json, folded, pprof, html)\n"
          "  diff [OPTIONS] OLD.db NEW.db         leaks that are new, worse or fixed in NEW\n"
          "  merge -o OUT.db DATABASE...          the ranks and nodes of a job in one database\n"
          "  classify [OPTIONS] FILE.csv          name the shape of a memory curve\n"
          "  guard [--cgroup PATH|--pid PID]...   act on memory pressure before the OOM killer\n"
          "\n"
          "  leakguard COMMAND --help             options of a command\n"
          "  leakguard --version                  version\n"
          "\n"
          "Documentation: man leakguard, docs/ in the source tree.\n",
          LG_VERSION);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return LG_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
    usage(stdout);
    return LG_EXIT_OK;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
    printf("leakguard %s\n", LG_VERSION);
    return LG_EXIT_OK;
  }
  if (!strcmp(cmd, "run")) return lg_cmd_run(argc - 1, argv + 1);
  if (!strcmp(cmd, "attach")) return lg_cmd_attach(argc - 1, argv + 1);
  if (!strcmp(cmd, "report")) return lg_cmd_report(argc - 1, argv + 1);
  if (!strcmp(cmd, "diff")) return lg_cmd_diff(argc - 1, argv + 1);
  if (!strcmp(cmd, "merge")) return lg_cmd_merge(argc - 1, argv + 1);
  if (!strcmp(cmd, "classify")) return lg_cmd_classify(argc - 1, argv + 1);
  if (!strcmp(cmd, "guard")) return lg_cmd_guard(argc - 1, argv + 1);
  lgu_err("unknown command '%s' (commands: run, attach, report, diff, merge, classify, guard; see leakguard --help)",
          cmd);
  return LG_EXIT_USAGE;
}
