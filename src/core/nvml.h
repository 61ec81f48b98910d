/* SPDX-License-Identifier: MIT */
/*
 * nvml.h - the GPU timeline of `leakguard run` (docs/cuda.md): NVML sampled by the
 * collector at the snapshot interval, on the collector's clock, next to what the
 * recorder saw at the CUDA driver API. NVML is loaded at run time by the loader the
 * guard uses too (core/sysmem.c, lgsm_nvml_open: dlopen("libnvidia-ml.so.1"), or
 * $LEAKGUARD_NVML): no build dependency.
 */
#ifndef LG_CORE_NVML_H
#define LG_CORE_NVML_H

#include <stddef.h>
#include <stdint.h>

#define LGSM_TIMELINE_DEVS 16
#define LGSM_TIMELINE_PROCS 64

typedef struct lgsm_timeline lgsm_timeline_t;

typedef struct lgsm_timeline_sample {
  int ndev;
  struct {
    int ok;
    uint64_t used, total;
  } dev[LGSM_TIMELINE_DEVS];
  int nproc;
  struct {
    int dev, pid;
    uint64_t used;
  } proc[LGSM_TIMELINE_PROCS];
} lgsm_timeline_sample_t;

/* Loads NVML; NULL with a one-line reason in why when there is none. */
lgsm_timeline_t *lgsm_timeline_open(char *why, size_t whylen);
/* Reads every device, and the GPU memory NVML counts for each of pids[0..npids) that
 * it lists (host pids). 0, or -1 when no device could be read. */
int lgsm_timeline_sample(lgsm_timeline_t *n, const int *pids, int npids, lgsm_timeline_sample_t *out);
void lgsm_timeline_close(lgsm_timeline_t *n);

#endif
