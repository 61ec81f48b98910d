/* SPDX-License-Identifier: MIT */
/*
 * guard.h - the OOM guard engine (issue #3): watches memory sources (cgroups v1/v2,
 * processes by PID, system memory and PSI, GPU memory through NVML), grades them into
 * levels normal -> warn -> breaker -> emergency with hysteresis, a minimum dwell time
 * and a predictive (trend) trigger, and acts per level: log, publish the level to
 * processes running with the recorder, send a signal, lower memory.high, run a
 * configured command, terminate the fastest-growing process of the watched set.
 * Every level change and action is one JSON line on the event log. See docs/guard.md.
 *
 * Used by `leakguard guard` (src/cli/cmd_guard.c) and `leakguard run --guard`.
 * Not thread-safe: one thread ticks a guard.
 */
#ifndef LG_GUARD_GUARD_H
#define LG_GUARD_GUARD_H

#include <stddef.h>
#include <stdio.h>

typedef struct lgg_guard lgg_guard_t;
struct lgx_registry; /* output/metrics.h */

typedef struct lgg_options {
  const char *config_path; /* INI file (docs/guard.md), NULL: defaults */
  int dry_run;             /* only log what would be done (also [guard] dry_run) */
  FILE *log;               /* JSON-lines event log; NULL: [guard] log, else none */
  /* `leakguard run --guard`: system memory and the cgroup grade the levels, but only the
   * processes watched by pid (the run's own) are told and are candidates; another run's
   * processes on the machine, or the user's others in the cgroup, are never touched */
  int own_only;
} lgg_options_t;

/* Creates a guard. On failure returns -errno (-EINVAL for a bad config file) and
 * writes one line into why ("FILE:LINE: reason" for config errors). */
int lgg_new(const lgg_options_t *o, lgg_guard_t **out, char *why, size_t whylen);

/* Sets the event log when neither the options nor the config named one. */
void lgg_default_log(lgg_guard_t *g, FILE *log);

/* Watches one process (its RSS, or PSS with [guard] memory = pss). 0 or -ESRCH. */
int lgg_watch_pid(lgg_guard_t *g, int pid);

/* Watches a memory cgroup directory (v2: memory.current; v1: memory.usage_in_bytes).
 * 0, or -errno with a message in why. */
int lgg_watch_cgroup(lgg_guard_t *g, const char *path, char *why, size_t whylen);

/* Watches system memory (MemAvailable) and system PSI; implied when nothing else is
 * watched at the first tick. */
void lgg_watch_system(lgg_guard_t *g);

/* Growth of pid known from the recorder's suspects (bytes/s): preferred over the RSS
 * trend when choosing a victim. A hint expires after two trend windows. */
void lgg_hint_growth(lgg_guard_t *g, int pid, double growth_bytes_per_s);

/* Samples every source, updates the level, acts. now_s: monotonic seconds.
 * Returns the level (lg_level_t) or -errno when nothing can be watched any more. */
int lgg_tick(lgg_guard_t *g, double now_s);

int lgg_level(const lgg_guard_t *g); /* lg_level_t */
double lgg_tick_interval(const lgg_guard_t *g);

/* Publishes the guard's metrics into r (declares the families on first use). */
void lgg_export(lgg_guard_t *g, struct lgx_registry *r);

/* Number of sources still watched (cgroups, pid set, system, GPUs). */
int lgg_nsources(const lgg_guard_t *g);

void lgg_free(lgg_guard_t *g);

#endif
