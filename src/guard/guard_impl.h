/* SPDX-License-Identifier: MIT */
/*
 * guard_impl.h - internals of the guard engine, shared by the src/guard sources and the unit
 * tests: the level state machine (pure, testable on recorded series), the config,
 * the source readers.
 */
#ifndef LG_GUARD_IMPL_H
#define LG_GUARD_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/sysmem.h"

#define LGG_NLEVELS 4 /* normal, warn, breaker, emergency (lg_level_t) */

/* ------------------------------------------------------------------ levels */
typedef struct lgg_level_cfg {
  double thr[LGG_NLEVELS];       /* [1..3]: fraction of the limit; 0 = off */
  double hysteresis;             /* leave level k only below thr[k] - hysteresis */
  double min_dwell_s;            /* stay at least this long before going down */
  double horizon_s[LGG_NLEVELS]; /* [1..3]: enter k when time to limit < horizon; 0 = off */
  double predict_min;            /* prediction only above this fraction of the limit */
  double window_s;               /* trend window */
  double psi[LGG_NLEVELS];       /* [1..3]: "full avg10" percent; 0 = off */
} lgg_level_cfg_t;

enum { LGG_R_NONE = 0, LGG_R_THRESHOLD, LGG_R_TREND, LGG_R_PSI, LGG_R_RECOVER };
const char *lgg_reason_name(int r);

#define LGG_TREND_MAX 64
typedef struct lgg_levels {
  int level, target;    /* current level; level the last sample alone asks for */
  int reason;           /* why the current level was entered (LGG_R_*) */
  double entered_s;
  double lower_since;   /* since when target < level; < 0: not lower */
  double t[LGG_TREND_MAX], v[LGG_TREND_MAX]; /* trend samples (ring) */
  unsigned n, head;
  double slope;         /* bytes/s, Theil-Sen over the window */
  double tto_s;         /* projected seconds to the limit; < 0: not growing */
  double ratio;
} lgg_levels_t;

void lgg_levels_init(lgg_levels_t *s, double now_s);
/* One sample: usage and limit in bytes (limit > 0), psi_full10 percent or < 0 when
 * unknown. Returns the new level. */
int lgg_levels_step(lgg_levels_t *s, const lgg_level_cfg_t *c, double t, double usage,
                    double limit, double psi_full10);

/* ------------------------------------------------------------------ config */
enum {
  LGG_A_LOG = 1u << 0,
  LGG_A_PUBLISH = 1u << 1,
  LGG_A_SIGNAL = 1u << 2,
  LGG_A_MEMHIGH = 1u << 3,
  LGG_A_EXEC = 1u << 4,
  LGG_A_KILL = 1u << 5,
};
enum { LGG_T_ALL = 0, LGG_T_TOP = 1 };       /* signal target */
enum { LGG_FB_LARGEST = 0, LGG_FB_NONE = 1 };  /* kill fallback without growth */

typedef struct lgg_actions_cfg {
  unsigned mask;
  int signal;           /* for LGG_A_SIGNAL */
  int signal_target;    /* LGG_T_* */
  double memory_high;   /* fraction of the limit written to memory.high */
  char *command;        /* for LGG_A_EXEC, run with /bin/sh -c */
  double repeat_s;      /* repeat the actions while the level holds; 0: on entry only */
} lgg_actions_cfg_t;

typedef struct lgg_config {
  double interval_s;
  int dry_run;
  int memory;           /* LGS_MEM_* (core/sysmem.h) */
  char *log_path;       /* event log, NULL: none ("-" = stdout) */
  double scan_interval_s; /* rescan for recorder regions */
  double gpu_interval_s;
  int gpu;              /* -1 auto, 0 off, 1 on (error when unavailable) */
  uint64_t limit;       /* limit for the watched-PID set, 0: their cgroup, else RAM */
  lgg_level_cfg_t lv;
  lgg_actions_cfg_t act[LGG_NLEVELS];
  double kill_grace_s;
  int kill_fallback;    /* LGG_FB_* */
  double kill_min_growth; /* bytes/s a victim must grow by, else fallback */
  int kill_protected;   /* 1: also consider oom_score_adj == -1000 processes */
} lgg_config_t;

void lgg_config_defaults(lgg_config_t *c);
/* Loads path over the defaults. 0, or -EINVAL/-errno with "PATH:LINE: reason". */
int lgg_config_load(lgg_config_t *c, const char *path, char *why, size_t whylen);
/* Same from a string (name used in messages). */
int lgg_config_load_string(lgg_config_t *c, const char *text, const char *name, char *why,
                           size_t whylen);
void lgg_config_free(lgg_config_t *c);
const char *lgg_action_name(unsigned bit);
/* Signal by name ("SIGUSR1", "USR1", "10"); -1 if unknown. */
int lgg_signal_parse(const char *s);
const char *lgg_signal_name(int sig, char *buf, size_t n);

/* ------------------------------------------------------------------ recorder regions */
typedef struct lgg_regions lgg_regions_t;
lgg_regions_t *lgg_regions_new(void);
/* Rescans pids[0..n) (all processes when n < 0) for leakguard region memfds and maps
 * new ones; unmaps regions whose process is gone. Newly found regions get level. */
void lgg_regions_scan(lgg_regions_t *r, const int *pids, long n, int level);
/* Publishes level (and evict bytes at emergency) to every mapped region (the scan
 * chose them: the watched pids, or all). Returns the number of regions written. */
int lgg_regions_publish(lgg_regions_t *r, int level, uint64_t evict_bytes);
int lgg_regions_count(const lgg_regions_t *r);
/* Pid of region i (for victim candidates in system mode). */
int lgg_regions_pid(const lgg_regions_t *r, int i);
void lgg_regions_free(lgg_regions_t *r);
/* GPU memory the recorder saw (docs/cuda.md): devices used by a mapped region (the
 * highest ordinal + 1), and for device dev the device + managed bytes and the pools'
 * unused reserve, summed over the regions, and the device's memory (cuDeviceTotalMem).
 * 0, or -1 when no region uses dev. */
int lgg_regions_gpu_count(const lgg_regions_t *r);
int lgg_regions_gpu(const lgg_regions_t *r, int dev, uint64_t *used, uint64_t *total);

#endif
