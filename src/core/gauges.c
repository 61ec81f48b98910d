/* SPDX-License-Identifier: MIT */
/*
 * gauges.c - the one reader of a region's device gauges (the device seam, issue #33):
 * the store, the metrics, the live findings and the guard read GPUs through it in the
 * collector, and the recorded process's own API (lg_cuda_stats, for the Python module)
 * in the preload library, which compiles this file too. Declared in core/model.h. No
 * allocation, no other dependency: atomic loads of the region's fields.
 */
#include <string.h>

#include "core/model.h"

int lgm_gpus(const lg_region_hdr_t *h, lgm_gpu_t *out, int max) {
  if (!h || max <= 0) return 0;
  lg_region_hdr_t *w = (lg_region_hdr_t *)h; /* atomic loads take non-const pointers */
  uint32_t nd = atomic_load(&w->gpu_ndev);
  int n = nd < LG_GPU_MAX_DEVICES ? (int)nd : LG_GPU_MAX_DEVICES;
  if (n > max) n = max;
  for (int d = 0; d < n; d++) {
    lg_gpu_dev_t *g = &w->gpu[d];
    lgm_gpu_t *o = &out[d];
    o->vendor = (int)atomic_load(&w->gpu_vendor);
    o->total_bytes = atomic_load(&g->total_bytes);
    o->device_bytes = atomic_load(&g->device_bytes);
    o->managed_bytes = atomic_load(&g->managed_bytes);
    o->pinned_bytes = atomic_load(&g->pinned_bytes);
    o->registered_bytes = atomic_load(&g->registered_bytes);
    o->pool_reserved_bytes = atomic_load(&g->pool_reserved_bytes);
    o->pool_used_bytes = atomic_load(&g->pool_used_bytes);
    o->vmm_mapped_bytes = atomic_load(&g->vmm_mapped_bytes);
    o->contexts = atomic_load(&g->contexts);
    o->contexts_created = atomic_load(&g->contexts_created);
    o->contexts_destroyed = atomic_load(&g->contexts_destroyed);
    o->contexts_recreated = atomic_load(&g->contexts_recreated);
    /* torch_seen is set after the two figures (release): read it first */
    o->torch_seen = atomic_load_explicit(&g->torch_seen, memory_order_acquire) != 0;
    o->torch_allocated_bytes = o->torch_seen ? atomic_load(&g->torch_allocated_bytes) : 0;
    o->torch_reserved_bytes = o->torch_seen ? atomic_load(&g->torch_reserved_bytes) : 0;
  }
  return n;
}

void lgm_gpu_state(const lg_region_hdr_t *h, lgm_gpu_state_t *out) {
  memset(out, 0, sizeof *out);
  if (!h) return;
  lg_region_hdr_t *w = (lg_region_hdr_t *)h;
  out->flags = atomic_load(&w->gpu_flags);
  out->vendor = (int)atomic_load(&w->gpu_vendor);
  uint32_t nn = atomic_load_explicit(&w->gpu_nnotes, memory_order_acquire); /* the notes before it: release */
  out->nnotes = nn < LG_GPU_NOTES ? nn : LG_GPU_NOTES;
  out->calls = atomic_load(&w->gpu_calls);
  out->unknown_frees = atomic_load(&w->gpu_unknown_frees);
  out->gc_without_cleanup = atomic_load(&w->gc_without_cuda_cleanup);
}

void lgm_gpu_note(const lg_region_hdr_t *h, uint32_t i, char buf[LG_GPU_NOTE_LEN + 1]) {
  buf[0] = 0;
  if (!h || i >= LG_GPU_NOTES) return;
  memcpy(buf, h->gpu_notes[i], LG_GPU_NOTE_LEN);
  buf[LG_GPU_NOTE_LEN] = 0;
}

uint32_t lgm_gpu_um(const lg_region_hdr_t *h, int i, lgm_gpu_um_t *out) {
  if (!h || i < 0 || i >= LG_CUDA_UM_SITES) return 0;
  lg_cuda_um_t *u = (lg_cuda_um_t *)&h->cuda_um[i];
  uint32_t site = atomic_load(&u->site);
  if (!site) return 0;
  out->cpu_page_faults = atomic_load(&u->cpu_page_faults);
  out->gpu_page_faults = atomic_load(&u->gpu_page_faults);
  out->bytes_htod = atomic_load(&u->bytes_htod);
  out->bytes_dtoh = atomic_load(&u->bytes_dtoh);
  out->thrashing = atomic_load(&u->thrashing);
  return site;
}
