/* SPDX-License-Identifier: MIT */
/* services.h - what `leakguard run` and `leakguard attach` start beside the collector:
 * the guard (--guard, --guard-config, --guard-dry-run) and the Prometheus endpoint
 * (--metrics ADDR:PORT). */
#ifndef LG_CLI_SERVICES_H
#define LG_CLI_SERVICES_H

#include "guard/guard.h"
#include "output/metrics.h"

typedef struct lgcli_services {
  lgg_guard_t *guard;  /* NULL without --guard */
  lgx_registry_t *reg; /* NULL without --metrics */
  lgx_server_t *srv;
} lgcli_services_t;

/* Starts them before anything else does: their errors are the user's. cmd names the
 * subcommand in the one-line errors. For `run` (pid 0) the guard watches system memory
 * and leakguard's own memory cgroup, where the program it starts runs; for `attach`,
 * process pid alone (its RSS against [guard] limit, else its cgroup's limit, else RAM:
 * docs/guard.md), so that its actions reach that process only. 0, or LG_EXIT_USAGE
 * (said on stderr; what was started is left in s for lgcli_services_stop). */
int lgcli_services_start(const char *cmd, int guard, const char *guard_config, int guard_dry_run, const char *metrics,
                         int pid, lgcli_services_t *s);
void lgcli_services_stop(lgcli_services_t *s);

/* The collector's own environment, set in leakguard's process once the target has its
 * own (run: after it started; attach: it runs apart): without LEAKGUARD_DEBUGINFOD=1,
 * DEBUGINFOD_URLS is removed, so that libdwfl never asks debuginfod servers for the
 * debug information it does not find on the machine. Set by some distributions in every
 * shell, it had the symbolization worker download the debug information of every
 * library the program maps (libtorch's is gigabytes) before the report, over a network
 * nobody told leakguard to use. */
void lgcli_collector_env(void);

#endif
