/* SPDX-License-Identifier: MIT */
/* nvml.c - NVML samples for the GPU timeline (see nvml.h). */
#include "core/nvml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sysmem.h"

struct lgsm_timeline {
  lgsm_nvml_t *g;
};

lgsm_timeline_t *lgsm_timeline_open(char *why, size_t whylen) {
  char w[256];
  lgsm_nvml_t *g = lgsm_nvml_open(w, sizeof w);
  if (!g) {
    /* The guard's wording is about its source; say what it means here. */
    const char *r = strncmp(w, "GPU source off: ", 16) == 0 ? w + 16 : w;
    snprintf(why, whylen, "NVML timeline off: %s; GPU memory is still recorded at the CUDA driver API", r);
    return NULL;
  }
  lgsm_timeline_t *n = calloc(1, sizeof *n);
  if (!n) {
    lgsm_nvml_close(g);
    snprintf(why, whylen, "NVML timeline off: out of memory");
    return NULL;
  }
  n->g = g;
  return n;
}

typedef struct cb_arg {
  lgsm_timeline_sample_t *out;
  const int *pids;
  int npids, dev;
} cb_arg_t;

static void proc_cb(void *arg, int pid, uint64_t bytes) {
  cb_arg_t *a = arg;
  for (int i = 0; i < a->npids; i++)
    if (a->pids[i] == pid && a->out->nproc < LGSM_TIMELINE_PROCS) {
      a->out->proc[a->out->nproc].dev = a->dev;
      a->out->proc[a->out->nproc].pid = pid;
      a->out->proc[a->out->nproc++].used = bytes;
    }
}

int lgsm_timeline_sample(lgsm_timeline_t *n, const int *pids, int npids, lgsm_timeline_sample_t *out) {
  memset(out, 0, sizeof *out);
  if (!n) return -1;
  int nd = lgsm_nvml_count(n->g), ok = 0;
  out->ndev = nd < LGSM_TIMELINE_DEVS ? nd : LGSM_TIMELINE_DEVS;
  for (int d = 0; d < out->ndev; d++) {
    out->dev[d].ok = lgsm_nvml_mem(n->g, d, &out->dev[d].used, &out->dev[d].total) == 0;
    ok |= out->dev[d].ok;
    cb_arg_t a = {out, pids, npids, d};
    if (npids > 0) lgsm_nvml_procs(n->g, d, proc_cb, &a);
  }
  return ok ? 0 : -1;
}

void lgsm_timeline_close(lgsm_timeline_t *n) {
  if (!n) return;
  lgsm_nvml_close(n->g);
  free(n);
}
