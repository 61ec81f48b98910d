/* SPDX-License-Identifier: MIT */
/*
 * cmd_guard.c - `leakguard guard`: the OOM guard as a foreground watchdog (or a
 * systemd service, deploy/leakguard-guard.service). The engine is src/guard.
 *
 *   leakguard guard [--cgroup PATH]... [--pid PID]... [--system] [--config FILE]
 *                   [--metrics ADDR:PORT] [--dry-run] [--log FILE] [--duration SEC]
 *
 * Exit: 0 stopped by SIGINT/SIGTERM or --duration; 1 nothing left to watch or the
 * metrics endpoint cannot start; 2 usage or configuration error.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "cli/commands.h"
#include "core/outfile.h"
#include "core/util.h"
#include "guard/guard.h"
#include "output/metrics.h"

static volatile sig_atomic_t stop_sig;

static void on_stop(int sig) { stop_sig = sig; }

static void usage(FILE *f) {
  fprintf(f, "usage: leakguard guard [OPTIONS]\n"
             "\n"
             "Watches memory and acts before the kernel's OOM killer: levels normal, warn (75%%),\n"
             "breaker (88%%), emergency (95%% of the limit, or a trend that reaches the limit soon).\n"
             "Defaults: warn logs; breaker also tells processes running with the recorder;\n"
             "emergency terminates the fastest-growing watched process (SIGTERM, then SIGKILL).\n"
             "\n"
             "  --cgroup PATH        watch a memory cgroup (v2 or v1 directory); repeatable\n"
             "  --pid PID            watch a process (RSS; PSS with [guard] memory = pss); repeatable\n"
             "  --system             watch system memory and PSI (the default with no target;\n"
             "                       victims then only among processes running with the recorder)\n"
             "  --config FILE        INI configuration (docs/guard.md, deploy/guard.example.ini)\n"
             "  --metrics ADDR:PORT  serve Prometheus metrics at http://ADDR:PORT/metrics\n"
             "  --dry-run            only log what would be done\n"
             "  --log FILE           JSON-lines event log (default: standard output; '-' too)\n"
             "  --duration SEC       stop after SEC seconds\n"
             "  -h, --help           this help\n");
}

int lg_cmd_guard(int argc, char **argv) {
  const char *cfg = NULL, *metrics = NULL, *logpath = NULL;
  const char **cgroups = calloc((size_t)argc + 1, sizeof *cgroups);
  int *pids = calloc((size_t)argc + 1, sizeof *pids);
  int ncg = 0, npid = 0, dry = 0, sys = 0;
  double duration = 0;
  int rc = LG_EXIT_USAGE;
  lgg_guard_t *g = NULL;
  lgx_registry_t *reg = NULL;
  lgx_server_t *srv = NULL;
  FILE *log = NULL;
  if (!cgroups || !pids) {
    lgu_err("out of memory");
    rc = LG_EXIT_INTERNAL;
    goto out;
  }
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      rc = LG_EXIT_OK;
      goto out;
    }
    if (!strcmp(a, "--dry-run")) {
      dry = 1;
      continue;
    }
    if (!strcmp(a, "--system")) {
      sys = 1;
      continue;
    }
    int takes = !strcmp(a, "--cgroup") || !strcmp(a, "--pid") || !strcmp(a, "--config") || !strcmp(a, "--metrics") ||
                !strcmp(a, "--log") || !strcmp(a, "--duration");
    if (!takes) {
      lgu_err("guard: unknown option '%s' (see leakguard guard --help)", a);
      goto out;
    }
    if (!v) {
      lgu_err("guard: %s needs a value", a);
      goto out;
    }
    i++;
    if (!strcmp(a, "--cgroup")) cgroups[ncg++] = v;
    else if (!strcmp(a, "--config")) cfg = v;
    else if (!strcmp(a, "--metrics")) metrics = v;
    else if (!strcmp(a, "--log")) logpath = v;
    else if (!strcmp(a, "--pid")) {
      long p;
      if (lgu_parse_long(v, 1, 0x7fffffff, &p)) {
        lgu_err("guard: --pid '%s' is not a process id", v);
        goto out;
      }
      pids[npid++] = (int)p;
    } else if (!strcmp(a, "--duration")) {
      if (lgu_parse_double(v, &duration) || duration <= 0) {
        lgu_err("guard: --duration '%s' is not a positive number of seconds", v);
        goto out;
      }
    }
  }
  if (logpath && strcmp(logpath, "-")) {
    char lwhy[600];
    int lfd = lgu_open_append(logpath, lwhy, sizeof lwhy); /* never through a link */
    log = lfd >= 0 ? fdopen(lfd, "a") : NULL;
    if (!log) {
      if (lfd >= 0) close(lfd), snprintf(lwhy, sizeof lwhy, "%s: %s", logpath, strerror(errno));
      lgu_err("guard: event log %s", lwhy);
      goto out;
    }
  }
  char why[512];
  lgg_options_t o = {.config_path = cfg, .dry_run = dry, .log = log};
  if (logpath && !strcmp(logpath, "-")) o.log = stdout;
  int e = lgg_new(&o, &g, why, sizeof why);
  if (e) {
    lgu_err("guard: %s", why);
    rc = e == -ENOMEM ? LG_EXIT_INTERNAL : LG_EXIT_USAGE; /* config or event log */
    goto out;
  }
  lgg_default_log(g, stdout); /* neither --log nor [guard] log */
  for (int i = 0; i < ncg; i++)
    if (lgg_watch_cgroup(g, cgroups[i], why, sizeof why)) {
      lgu_err("guard: %s", why);
      goto out;
    }
  for (int i = 0; i < npid; i++)
    if (lgg_watch_pid(g, pids[i])) {
      lgu_err("guard: --pid %d: no such process", pids[i]);
      goto out;
    }
  if (sys || (!ncg && !npid)) lgg_watch_system(g);
  if (metrics) {
    reg = lgx_new();
    if (!reg) {
      lgu_err("guard: out of memory");
      rc = LG_EXIT_INTERNAL;
      goto out;
    }
    lgg_export(g, reg);
    if (lgx_serve(reg, metrics, &srv, why, sizeof why)) {
      lgu_err("guard: --metrics %s: %s", metrics, why);
      rc = 1;
      goto out;
    }
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  double iv = lgg_tick_interval(g);
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  double start = (double)next.tv_sec + next.tv_nsec / 1e9;
  rc = LG_EXIT_OK;
  while (!stop_sig) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double t = (double)now.tv_sec + now.tv_nsec / 1e9;
    if (duration > 0 && t - start >= duration) break;
    if (lgg_tick(g, t) < 0) {
      lgu_err("guard: nothing left to watch");
      rc = 1;
      break;
    }
    if (reg) lgg_export(g, reg);
    long long ns = (long long)next.tv_nsec + (long long)(iv * 1e9);
    next.tv_sec += (time_t)(ns / 1000000000LL);
    next.tv_nsec = (long)(ns % 1000000000LL);
    /* fell behind (suspended, overloaded): restart the schedule from now */
    if (next.tv_sec < now.tv_sec || (next.tv_sec == now.tv_sec && next.tv_nsec < now.tv_nsec)) next = now;
    while (!stop_sig && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {}
  }
out:
  if (srv) lgx_stop(srv);
  if (reg) lgx_free(reg);
  lgg_free(g);
  if (log) fclose(log);
  free(cgroups);
  free(pids);
  return rc;
}
