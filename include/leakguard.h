/* SPDX-License-Identifier: MIT */
/*
 * leakguard.h - the one public header of leakguard.
 *
 * Programs that run under `leakguard run` (i.e. with libleakguard.so preloaded) may
 * call these functions to mark steps (training iterations, requests) and to query
 * the recorder. Programs that do not want a hard dependency can look the symbols up
 * with dlsym(RTLD_DEFAULT, "leakguard_step") and skip the call when it is absent.
 *
 * Conventions: functions are prefixed lg_ (leakguard_step is kept unprefixed-style
 * for the documented step marker), return 0 or a negative errno, and leave
 * out-parameters untouched on failure.
 */
#ifndef LEAKGUARD_H
#define LEAKGUARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LG_VERSION_MAJOR 0
#define LG_VERSION_MINOR 1

#if defined(__GNUC__)
#define LG_API __attribute__((visibility("default")))
#else
#define LG_API
#endif

/* ------------------------------------------------------------------ recorder */

/* Marks the end of one step (training iteration, served request...). The collector
 * takes a snapshot at every step marker (coalesced when steps come faster than it
 * polls, see docs/leakguard.md) and reports growth per step.
 * Async-signal-safe, lock-free, never allocates. Returns the new step count. */
LG_API uint64_t leakguard_step(void);

/* Same as leakguard_step(). */
LG_API uint64_t lg_step(void);

/* 1 when the recorder is active in this process (connected to a collector), else 0. */
LG_API int lg_recording(void);

/* Memory spaces: every allocation carries one. Only LG_SPACE_HOST is recorded today;
 * device, managed and pinned are reserved for the CUDA capture. */
typedef enum lg_space {
  LG_SPACE_HOST = 0,
  LG_SPACE_MMAP = 1,     /* anonymous mmap(2) regions, recorded as their own kind */
  LG_SPACE_DEVICE = 2,
  LG_SPACE_MANAGED = 3,
  LG_SPACE_PINNED = 4,
  LG_SPACE_COUNT
} lg_space_t;

/* Stable name of a space: "host", "mmap", "device", "managed", "pinned". */
LG_API const char *lg_space_name(lg_space_t space);

/* ------------------------------------------------------------------ classifier */

/* Shapes of a memory curve. Names (lg_pattern_name) are a stable interface. */
typedef enum lg_pattern {
  LG_PATTERN_STABLE = 0,
  LG_PATTERN_LINEAR_LEAK,
  LG_PATTERN_ACCELERATING_LEAK,
  LG_PATTERN_STEP_LEAK,
  LG_PATTERN_PLATEAU,
  LG_PATTERN_SAWTOOTH,
  LG_PATTERN_FRAGMENTATION,
  LG_PATTERN_COUNT
} lg_pattern_t;

/* "stable", "linear-leak", "accelerating-leak", "step-leak", "plateau", "sawtooth",
 * "fragmentation"; NULL for an out-of-range value. */
LG_API const char *lg_pattern_name(lg_pattern_t p);

/* 1 for the three leak classes, else 0. */
LG_API int lg_pattern_is_leak(lg_pattern_t p);

/* Classifies a memory curve.
 *  t[n]     sample times (any unit), strictly increasing
 *  v[n]     values (live bytes or any scale), finite
 *  rss[n]   optional second series (resident memory), or NULL; needed to ever
 *           predict LG_PATTERN_FRAGMENTATION
 *  n        number of samples, >= 8
 *  out      receives the most probable class
 *  probs    optional, receives LG_PATTERN_COUNT probabilities summing to 1
 * Returns 0, -EINVAL for n < 8 or NULL t/v/out, -EDOM for NaN/Inf or time that is not
 * strictly increasing. Thread-safe, no allocation, O(n). */
LG_API int lg_classify(const double *t, const double *v, const double *rss, size_t n,
                       lg_pattern_t *out, double probs[LG_PATTERN_COUNT]);

#ifdef __cplusplus
}
#endif
#endif /* LEAKGUARD_H */
