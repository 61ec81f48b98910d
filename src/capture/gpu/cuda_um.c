/* SPDX-License-Identifier: MIT */
/*
 * cuda_um.c - Unified Memory misuse (`leakguard run --cuda-um`, docs/cuda.md): CUPTI's
 * Unified Memory counters (CPU and GPU page faults, bytes migrated each way,
 * thrashing) per managed allocation site, next to the site in the report.
 *
 * CUPTI is loaded with dlopen (no build dependency; LEAKGUARD_CUPTI names another
 * library) once a context exists, from inside a wrapper (the recursion guard is held).
 * Its activity records carry an address and no stack: each is attributed to the
 * recorded managed block containing it (cuda_mem.c), and counted in a small table of the
 * region header (LG_CUDA_UM_SITES sites, lock-free). Buffers come from mmap; CUPTI
 * delivers them on its own thread every 100 ms (cuptiActivityFlushPeriod) and at exit
 * (an atexit flush, registered after the runtime's, so it runs before its teardown).
 * When CUPTI is missing, does not support Unified Memory profiling here, or is taken
 * by another profiler (only one CUPTI subscriber is allowed), one note says so and the
 * program runs on, recorded as before.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture/gpu/cuda_impl.h"

/* The CUPTI declarations used (cupti_activity.h, CUDA 11-13; the record's leading
 * fields are the same in CUpti_ActivityUnifiedMemoryCounter2 and 3). */
enum {
  UM_KIND = 25, /* CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER */
  UM_SCOPE_ALL_DEVICES = 2,
  UM_HTOD = 1,
  UM_DTOH = 2,
  UM_CPU_FAULTS = 3,
  UM_GPU_FAULTS = 4,
  UM_THRASHING = 5,
  CUPTI_OK = 0,
};
typedef struct {
  int scope, kind;
  uint32_t device, enable;
} um_config_t;
typedef struct __attribute__((packed)) {
  uint32_t kind, counter_kind;
  uint64_t value, start, end, address;
} um_record_t;
typedef void (*req_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*done_fn)(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);

static struct {
  int (*configure)(um_config_t *, uint32_t);
  int (*callbacks)(req_fn, done_fn);
  int (*enable)(int);
  int (*next)(uint8_t *, size_t, void **);
  int (*flush)(uint32_t);
  int (*period)(uint32_t);
  int (*result)(int, const char **);
} cp;
static _Atomic int um_state; /* 0 not tried, 1 trying, 2 on, 3 off */

#define UM_BUFFER (1u << 20)

static void um_add(uint32_t site, int kind, uint64_t v) {
  lg_region_hdr_t *h = lgi_g.hdr;
  lg_cuda_um_t *e = NULL;
  for (int i = 0; i < LG_CUDA_UM_SITES && !e; i++) {
    uint32_t s = atomic_load(&h->cuda_um[i].site);
    if (s == site) e = &h->cuda_um[i];
    else if (s == 0) {
      uint32_t z = 0;
      if (atomic_compare_exchange_strong(&h->cuda_um[i].site, &z, site) || z == site) e = &h->cuda_um[i];
    }
  }
  if (!e) { /* more sites than entries: the unknown entry takes them */
    for (int i = 0; i < LG_CUDA_UM_SITES && !e; i++)
      if (atomic_load(&h->cuda_um[i].site) == LG_CUDA_UM_UNKNOWN) e = &h->cuda_um[i];
    if (!e) return;
  }
  switch (kind) {
  case UM_HTOD: atomic_fetch_add(&e->bytes_htod, v); break;
  case UM_DTOH: atomic_fetch_add(&e->bytes_dtoh, v); break;
  case UM_CPU_FAULTS: atomic_fetch_add(&e->cpu_page_faults, v); break;
  case UM_GPU_FAULTS: atomic_fetch_add(&e->gpu_page_faults, v); break;
  case UM_THRASHING: atomic_fetch_add(&e->thrashing, v); break;
  }
}

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *buffer = lgi_pages_alloc(UM_BUFFER);
  *size = *buffer ? UM_BUFFER : 0;
  *max_records = 0;
}

static void buffer_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  (void)ctx, (void)stream;
  lgi_tls_t *t = &lgi_tls;
  t->guard++;
  void *rec = NULL;
  while (buffer && lgi_g.enabled && cp.next(buffer, valid, &rec) == CUPTI_OK && rec) {
    const um_record_t *r = rec;
    if (r->kind == UM_KIND) um_add(lgi_gpu_managed_site(r->address), (int)r->counter_kind, r->value);
  }
  lgi_pages_free(buffer, size);
  t->guard--;
}

static void um_flush(void) {
  if (atomic_load(&um_state) == 2) cp.flush(1 /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */);
}

/* One note (LG_GPU_NOTE_LEN: about 85 characters after "CUPTI: "): CUPTI's error
 * name when there is one, and what it was doing. */
static void um_off(const char *why, int rc) {
  char buf[88];
  const char *s = NULL;
  if (rc && cp.result && cp.result(rc, &s) != CUPTI_OK) s = NULL;
  if (rc && s) snprintf(buf, sizeof buf, "%s (%s); --cuda-um off", s, why);
  else if (rc) snprintf(buf, sizeof buf, "error %d (%s); --cuda-um off", rc, why);
  else snprintf(buf, sizeof buf, "%s; --cuda-um off", why);
  lgi_gpu_note("CUPTI", buf);
  atomic_store(&um_state, 3);
}

void lgi_cuda_um_start(void) {
  int z = 0;
  if (atomic_load_explicit(&um_state, memory_order_relaxed) || !atomic_compare_exchange_strong(&um_state, &z, 1))
    return;
  const char *on = secure_getenv(LG_ENV_CUDA_UM);
  if (!on || on[0] != '1' || !lgi_g.enabled) {
    atomic_store(&um_state, 3);
    return;
  }
  const char *name = secure_getenv(LG_ENV_CUPTI);
  static const char *const names[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8", NULL};
  void *lib = name && *name ? dlopen(name, RTLD_NOW | RTLD_LOCAL) : NULL;
  for (int i = 0; !lib && !(name && *name) && names[i]; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    um_off("libcupti.so not found (set LEAKGUARD_CUPTI)", 0);
    return;
  }
  *(void **)&cp.configure = dlsym(lib, "cuptiActivityConfigureUnifiedMemoryCounter");
  *(void **)&cp.callbacks = dlsym(lib, "cuptiActivityRegisterCallbacks");
  *(void **)&cp.enable = dlsym(lib, "cuptiActivityEnable");
  *(void **)&cp.next = dlsym(lib, "cuptiActivityGetNextRecord");
  *(void **)&cp.flush = dlsym(lib, "cuptiActivityFlushAll");
  *(void **)&cp.period = dlsym(lib, "cuptiActivityFlushPeriod");
  *(void **)&cp.result = dlsym(lib, "cuptiGetResultString");
  if (!cp.configure || !cp.callbacks || !cp.enable || !cp.next || !cp.flush) {
    um_off("this libcupti lacks the activity API", 0);
    return;
  }
  um_config_t cfg[5];
  static const int kinds[5] = {UM_HTOD, UM_DTOH, UM_CPU_FAULTS, UM_GPU_FAULTS, UM_THRASHING};
  for (int i = 0; i < 5; i++) cfg[i] = (um_config_t){UM_SCOPE_ALL_DEVICES, kinds[i], 0, 1};
  int rc = cp.configure(cfg, 5);
  if (rc != CUPTI_OK) {
    um_off("UM counters", rc);
    return;
  }
  if ((rc = cp.callbacks(buffer_requested, buffer_completed)) != CUPTI_OK || (rc = cp.enable(UM_KIND)) != CUPTI_OK) {
    um_off("another profiler?", rc);
    return;
  }
  if (cp.period) cp.period(100);
  atomic_store(&um_state, 2);
  atexit(um_flush);
  atomic_fetch_or(&lgi_g.hdr->gpu_flags, LG_CUDA_UM);
}
