/* SPDX-License-Identifier: MIT */
/* nvml.c - NVML samples for the GPU timeline (see nvml.h). */
#include "core/nvml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sysmem.h"

struct lgn {
  lgs_nvml_t *g;
};

lgn_t *lgn_open(char *why, size_t whylen) {
  char w[256];
  lgs_nvml_t *g = lgs_nvml_open(w, sizeof w);
  if (!g) {
    /* The guard's wording is about its source; say what it means here. */
    const char *r = strncmp(w, "GPU source off: ", 16) == 0 ? w + 16 : w;
    snprintf(why, whylen, "NVML timeline off: %s; GPU memory is still recorded at the CUDA driver API", r);
    return NULL;
  }
  lgn_t *n = calloc(1, sizeof *n);
  if (!n) {
    lgs_nvml_close(g);
    snprintf(why, whylen, "NVML timeline off: out of memory");
    return NULL;
  }
  n->g = g;
  return n;
}

typedef struct cb_arg {
  lgn_sample_t *out;
  const int *pids;
  int npids, dev;
} cb_arg_t;

static void proc_cb(void *arg, int pid, uint64_t bytes) {
  cb_arg_t *a = arg;
  for (int i = 0; i < a->npids; i++)
    if (a->pids[i] == pid && a->out->nproc < LGN_MAX_PROC) {
      a->out->proc[a->out->nproc].dev = a->dev;
      a->out->proc[a->out->nproc].pid = pid;
      a->out->proc[a->out->nproc++].used = bytes;
    }
}

int lgn_sample(lgn_t *n, const int *pids, int npids, lgn_sample_t *out) {
  memset(out, 0, sizeof *out);
  if (!n) return -1;
  int nd = lgs_nvml_count(n->g), ok = 0;
  out->ndev = nd < LGN_MAX_DEV ? nd : LGN_MAX_DEV;
  for (int d = 0; d < out->ndev; d++) {
    out->dev[d].ok = lgs_nvml_mem(n->g, d, &out->dev[d].used, &out->dev[d].total) == 0;
    ok |= out->dev[d].ok;
    cb_arg_t a = {out, pids, npids, d};
    if (npids > 0) lgs_nvml_procs(n->g, d, proc_cb, &a);
  }
  return ok ? 0 : -1;
}

void lgn_close(lgn_t *n) {
  if (!n) return;
  lgs_nvml_close(n->g);
  free(n);
}
