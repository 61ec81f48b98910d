/* SPDX-License-Identifier: MIT */
/*
 * nvml.h - the GPU timeline of `leakguard run` (docs/cuda.md): NVML sampled by the
 * collector at the snapshot interval, on the collector's clock, next to what the
 * recorder saw at the CUDA driver API. NVML is loaded at run time by the guard's
 * loader (src/guard/sources.c: dlopen("libnvidia-ml.so.1"), or $LEAKGUARD_NVML):
 * no build dependency.
 */
#ifndef LG_CORE_NVML_H
#define LG_CORE_NVML_H

#include <stddef.h>
#include <stdint.h>

#define LGN_MAX_DEV 16
#define LGN_MAX_PROC 64

typedef struct lgn lgn_t;

typedef struct lgn_sample {
  int ndev;
  struct {
    int ok;
    uint64_t used, total;
  } dev[LGN_MAX_DEV];
  int nproc;
  struct {
    int dev, pid;
    uint64_t used;
  } proc[LGN_MAX_PROC];
} lgn_sample_t;

/* Loads NVML; NULL with a one-line reason in why when there is none. */
lgn_t *lgn_open(char *why, size_t whylen);
/* Reads every device, and the GPU memory NVML counts for each of pids[0..npids) that
 * it lists (host pids). 0, or -1 when no device could be read. */
int lgn_sample(lgn_t *n, const int *pids, int npids, lgn_sample_t *out);
void lgn_close(lgn_t *n);

#endif
