/* SPDX-License-Identifier: MIT */
/*
 * scen_common.h - small header-only helpers shared by the scenario programs.
 *
 * Scenario programs are ordinary programs: they run with or without leakguard.
 * Options are "--name value" pairs; every option also has an environment fallback
 * (SCEN_SECONDS, ...). leakguard_step() is looked up with dlsym so that the
 * programs do not link against libleakguard.
 */
#ifndef SCEN_COMMON_H
#define SCEN_COMMON_H

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t (*scen_step_fn)(void);

/* Value of option NAME ("--seconds"), else of environment variable ENV, else NULL. */
static inline const char *scen_opt(int argc, char **argv, const char *name, const char *env) {
  for (int i = 1; i + 1 < argc; i++)
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  if (env) {
    const char *e = getenv(env);
    if (e && *e) return e;
  }
  return NULL;
}

static inline double scen_opt_double(int argc, char **argv, const char *name, const char *env,
                                     double def) {
  const char *s = scen_opt(argc, argv, name, env);
  if (!s) return def;
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || *end) {
    fprintf(stderr, "%s: bad value for %s: '%s'\n", argv[0], name, s);
    exit(2);
  }
  return v;
}

static inline long scen_opt_long(int argc, char **argv, const char *name, const char *env,
                                 long def) {
  const char *s = scen_opt(argc, argv, name, env);
  if (!s) return def;
  char *end = NULL;
  long v = strtol(s, &end, 0);
  if (end == s || *end) {
    fprintf(stderr, "%s: bad value for %s: '%s'\n", argv[0], name, s);
    exit(2);
  }
  return v;
}

/* Run length in seconds: --seconds or SCEN_SECONDS, default DEF. */
static inline double scen_seconds(int argc, char **argv, double def) {
  return scen_opt_double(argc, argv, "--seconds", "SCEN_SECONDS", def);
}

/* Writes getpid() to the file named by --pidfile (if given). */
static inline void scen_write_pidfile(int argc, char **argv) {
  const char *path = scen_opt(argc, argv, "--pidfile", "SCEN_PIDFILE");
  if (!path) return;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    perror(tmp);
    exit(2);
  }
  fprintf(f, "%ld\n", (long)getpid());
  fclose(f);
  rename(tmp, path); /* atomic: readers never see a partial pid */
}

static inline scen_step_fn *scen_step_slot(void) {
  static scen_step_fn fn;
  return &fn;
}

/* Looks up leakguard_step once; call early in main (not from a signal handler). */
static inline void scen_step_init(void) {
  void *sym = dlsym(RTLD_DEFAULT, "leakguard_step");
  scen_step_fn fn;
  memcpy(&fn, &sym, sizeof fn);
  *scen_step_slot() = fn;
}

/* Marks one iteration/request when running under leakguard; no-op otherwise. */
static inline void scen_step(void) {
  scen_step_fn fn = *scen_step_slot();
  if (fn) fn();
}

static inline double scen_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void scen_sleep(double seconds) {
  if (seconds <= 0) return;
  struct timespec ts;
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* splitmix64: small, fast, good enough for workload generation. */
static inline uint64_t scen_rand(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static inline uint64_t scen_range(uint64_t *state, uint64_t lo, uint64_t hi) {
  return lo + scen_rand(state) % (hi - lo + 1);
}

/* Uniform double in [0, 1). */
static inline double scen_unit(uint64_t *state) {
  return (double)(scen_rand(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Roughly log-uniform size in [lo, hi]: many small blocks, a few big ones. */
static inline size_t scen_logsize(uint64_t *state, size_t lo, size_t hi) {
  double u = scen_unit(state);
  double l = (double)lo, h = (double)hi;
  double v = l * __builtin_pow(h / l, u);
  size_t s = (size_t)v;
  return s < lo ? lo : s > hi ? hi : s;
}

/* Keeps the compiler from eliding a malloc/free pair whose memory looks unused. */
static inline void scen_escape(void *p) { __asm__ volatile("" : : "g"(p) : "memory"); }

/* Writes a few bytes of every page (real programs touch what they allocate). */
static inline void scen_touch(void *p, size_t n) {
  unsigned char *c = (unsigned char *)p;
  for (size_t i = 0; i < n; i += 512) c[i] = (unsigned char)i;
  if (n) c[n - 1] = 1;
  scen_escape(p);
}

/* Paces a loop to about RATE iterations per second: call once per iteration. */
struct scen_pacer {
  double start;
  double rate;
  uint64_t done;
};

static inline void scen_pacer_init(struct scen_pacer *p, double rate) {
  p->start = scen_now();
  p->rate = rate;
  p->done = 0;
}

/* Sleeps every 32 events at high rates (cheap); every event below 64 a second, so
 * that slow steps are evenly spaced rather than bursts of 32 (the step ages of
 * docs/lifetimes.md). */
static inline void scen_pace(struct scen_pacer *p) {
  p->done++;
  if (p->rate <= 0 || (p->rate >= 64 && (p->done & 31))) return;
  double due = p->start + (double)p->done / p->rate;
  double now = scen_now();
  if (due > now) scen_sleep(due - now);
}

#ifdef __cplusplus
}
#endif
#endif /* SCEN_COMMON_H */
