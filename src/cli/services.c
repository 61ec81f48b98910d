/* SPDX-License-Identifier: MIT */
/* services.c - the guard and the metrics endpoint of `run` and `attach` (services.h). */
#include "cli/services.h"

#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/sysmem.h"
#include "core/util.h"

int lgcli_services_start(const char *cmd, int guard, const char *guard_config, int guard_dry_run, const char *metrics,
                         int pid, lgcli_services_t *s) {
  char why[512];
  memset(s, 0, sizeof *s);
  if (guard) {
    /* own_only: system memory and the cgroup grade the levels; only this run's processes
     * (watched by pid as they come) are told and can be acted on */
    lgg_options_t go = {.config_path = guard_config, .dry_run = guard_dry_run, .log = NULL, .own_only = 1};
    if (lgg_new(&go, &s->guard, why, sizeof why) != 0) {
      lgu_err("%s: --guard: %s", cmd, why);
      return LG_EXIT_USAGE;
    }
    lgg_default_log(s->guard, stderr);
    char cg[4096];
    if (pid > 0) { /* attach: the process, and only it (its actions reach nothing else) */
      if (lgg_watch_pid(s->guard, pid) != 0) {
        lgu_err("%s: --guard: process %d is gone", cmd, pid);
        return LG_EXIT_USAGE;
      }
    } else {
      lgg_watch_system(s->guard);
      if (lgsm_memory_cgroup(cg, sizeof cg) == 0 && lgg_watch_cgroup(s->guard, cg, why, sizeof why) != 0)
        lgu_err("%s: --guard: not watching leakguard's cgroup: %s", cmd, why);
    }
  }
  if (metrics) {
    s->reg = lgx_new();
    if (!s->reg || lgx_serve(s->reg, metrics, &s->srv, why, sizeof why) != 0) {
      lgu_err("%s: --metrics %s: %s", cmd, metrics, s->reg ? why : "out of memory");
      return LG_EXIT_USAGE;
    }
  }
  return 0;
}

void lgcli_services_stop(lgcli_services_t *s) {
  if (s->srv) lgx_stop(s->srv);
  lgx_free(s->reg);
  lgg_free(s->guard);
  memset(s, 0, sizeof *s);
}

void lgcli_collector_env(void) {
  const char *v = getenv("LEAKGUARD_DEBUGINFOD");
  if (!v || strcmp(v, "1") != 0) unsetenv("DEBUGINFOD_URLS");
}
