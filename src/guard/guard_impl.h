/* SPDX-License-Identifier: MIT */
/*
 * guard_impl.h - internals of the guard engine, shared by the src/guard sources and the unit
 * tests: the level state machine (pure, testable on recorded series), the config,
 * the source readers, and the engine's state and the functions its files share.
 */
#ifndef LG_GUARD_IMPL_H
#define LG_GUARD_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "core/sysmem.h"
#include "core/util.h"
#include "guard/guard.h"

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
  int level, target; /* current level; level the last sample alone asks for */
  int reason;        /* why the current level was entered (LGG_R_*) */
  double entered_s;
  double lower_since;                        /* since when target < level; < 0: not lower */
  double t[LGG_TREND_MAX], v[LGG_TREND_MAX]; /* trend samples (ring) */
  unsigned n, head;
  double slope; /* bytes/s, Theil-Sen over the window */
  double tto_s; /* projected seconds to the limit; < 0: not growing */
  double ratio;
} lgg_levels_t;

void lgg_levels_init(lgg_levels_t *s, double now_s);
/* One sample: usage and limit in bytes (limit > 0), psi_full10 percent or < 0 when
 * unknown. Returns the new level. */
int lgg_levels_step(lgg_levels_t *s, const lgg_level_cfg_t *c, double t, double usage, double limit, double psi_full10);

/* ------------------------------------------------------------------ config */
enum {
  LGG_A_LOG = 1u << 0,
  LGG_A_PUBLISH = 1u << 1,
  LGG_A_SIGNAL = 1u << 2,
  LGG_A_MEMHIGH = 1u << 3,
  LGG_A_EXEC = 1u << 4,
  LGG_A_KILL = 1u << 5,
};
enum { LGG_T_ALL = 0, LGG_T_TOP = 1 };        /* signal target */
enum { LGG_FB_LARGEST = 0, LGG_FB_NONE = 1 }; /* kill fallback without growth */

typedef struct lgg_actions_cfg {
  unsigned mask;
  int signal;         /* for LGG_A_SIGNAL */
  int signal_target;  /* LGG_T_* */
  double memory_high; /* fraction of the limit written to memory.high */
  char *command;      /* for LGG_A_EXEC, run with /bin/sh -c */
  double repeat_s;    /* repeat the actions while the level holds; 0: on entry only */
} lgg_actions_cfg_t;

typedef struct lgg_config {
  double interval_s;
  int dry_run;
  int memory;             /* LGSM_MEM_* (core/sysmem.h) */
  char *log_path;         /* event log, NULL: none ("-" = stdout) */
  double scan_interval_s; /* rescan for recorder regions */
  double gpu_interval_s;
  int gpu;        /* -1 auto, 0 off, 1 on (error when unavailable) */
  uint64_t limit; /* limit for the watched-PID set, 0: their cgroup, else RAM */
  lgg_level_cfg_t lv;
  lgg_actions_cfg_t act[LGG_NLEVELS];
  double kill_grace_s;
  int kill_fallback;      /* LGG_FB_* */
  double kill_min_growth; /* bytes/s a victim must grow by, else fallback */
  int kill_protected;     /* 1: also consider oom_score_adj == -1000 processes */
} lgg_config_t;

void lgg_config_defaults(lgg_config_t *c);
/* Loads path over the defaults. 0, or -EINVAL/-errno with "PATH:LINE: reason". */
int lgg_config_load(lgg_config_t *c, const char *path, char *why, size_t whylen);
/* Same from a string (name used in messages). */
int lgg_config_load_string(lgg_config_t *c, const char *text, const char *name, char *why, size_t whylen);
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
void lgg_regions_scan(lgg_regions_t *r, const int *pids, long n, int level); /* level < 0: none written */
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

/* ------------------------------------------------------------------ engine
 * The guard's state, shared by engine.c (creation, sources, the tick), procs.c (the
 * watched-process table), actions.c (what a level does) and events.c (the event log). */
#define MAX_SOURCES 64
#define GROWTH_N 16
enum { SRC_CGROUP = 0, SRC_PIDS, SRC_SYSTEM, SRC_GPU, SRC_GPU_REC /* GPU memory the recorder saw */ };

/* action counters (leakguard_guard_actions_total{action}) */
enum { C_LOG, C_PUBLISH, C_SIGNAL, C_MEMHIGH, C_EXEC, C_KILL, C_SIGKILL, C_NCOUNT };

typedef struct proc {
  int pid;
  unsigned long long start; /* start time (clock ticks since boot): identity */
  char comm[32];
  int64_t mem;
  uint64_t gpu;
  double rt[GROWTH_N], rv[GROWTH_N];
  unsigned rn, rhead;
  double growth;       /* bytes/s over the window (RSS/PSS + GPU) */
  double hint, hint_t; /* recorder suspects */
  uint64_t srcmask;
  int seen;
  int adj; /* oom_score_adj */
} proc_t;

typedef struct victim {
  int pid, pidfd;
  double deadline, sent_t;
  char comm[32];
  int sigkilled;
} victim_t;

typedef struct source {
  int kind, alive, version, gpu;
  char *path;
  char name[256];
  lgg_levels_t lv;
  lgsm_cg_sample_t cg;
  double usage, limit, psi_full, psi_some;
  uint64_t gpu_used, gpu_total;
  int high_set;       /* memory.high lowered by us */
  uint64_t orig_high; /* 0: "max" */
  int err;            /* last read error logged (0: none) */
  uint64_t oom_kill0; /* oom_kill count when watching started */
  int sampled;
} source_t;

struct lgg_guard {
  lgg_config_t cfg;
  int own_only; /* lgg_options_t.own_only: only pid sources enroll processes */
  FILE *log;
  int own_log;
  source_t src[MAX_SOURCES];
  int nsrc;
  int *pids; /* explicit --pid set */
  int npids, cappids;
  int pids_src; /* index of the SRC_PIDS source, -1 */
  uint64_t pids_limit;
  double pids_limit_t;
  proc_t *procs;
  int nprocs, capprocs, seen;
  lgg_regions_t *regions;
  double last_scan;
  lgsm_nvml_t *nvml;
  int gpu_tried;
  double last_gpu;
  int level, published, ticked;
  double level_since, t0;
  double last_act[LGG_NLEVELS];
  uint64_t counts[C_NCOUNT], level_changes, ticks;
  victim_t victims[16];
  int nvictims;
  pid_t children[16];
  int nchildren;
  int ancestors[32];
  int nancestors;
  uint64_t memtotal;
};

/* The guard's clock: seconds on the monotonic clock. */
static inline double lgg_now_mono(void) { return (double)lgu_now_ns() / 1e9; }

/* events.c: one JSON object per event, one line on the event log. lgg_jbegin makes
 * {"ts":..,"event":event}; lgg_jend prints it (when there is a log) and frees it. */
struct cJSON;
struct cJSON *lgg_jbegin(const char *event);
void lgg_jend(lgg_guard_t *g, struct cJSON *j);
/* A number as the log always wrote it: null when not finite, integral values whole,
 * others to 6 significant digits. */
void lgg_jnum(struct cJSON *j, const char *key, double v);

/* procs.c */
int lgg_proc_identity(int pid, unsigned long long *start, char *comm, size_t commlen);
void lgg_refresh_procs(lgg_guard_t *g, double t);
void lgg_gpu_proc_cb(void *arg, int pid, uint64_t bytes);
int lgg_victim_pending(const lgg_guard_t *g, int pid);
int lgg_candidate(const lgg_guard_t *g, const proc_t *p, uint64_t mask);
double lgg_score(const lgg_guard_t *g, const proc_t *p, double t);

/* actions.c */
const source_t *lgg_worst(const lgg_guard_t *g);
void lgg_check_victims(lgg_guard_t *g, double t);
int lgg_write_high(const source_t *s, uint64_t v);
void lgg_restore_high(lgg_guard_t *g, int lvl);
void lgg_reap_children(lgg_guard_t *g);
void lgg_do_publish(lgg_guard_t *g, int lvl, const source_t *w);
void lgg_run_actions(lgg_guard_t *g, int lvl, double t, int repeat);

#endif
