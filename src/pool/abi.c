/* SPDX-License-Identifier: MIT */
/*
 * abi.c - the CUDAPluggableAllocator entry points of liblgpool.so:
 *
 *   torch.cuda.memory.CUDAPluggableAllocator("liblgpool.so", "lgpool_alloc", "lgpool_free")
 *
 * One pool per device, made at the first allocation on it, configured from the
 * environment (docs/pool.md): LEAKGUARD_POOL_BACKEND (cuda, the default, or host),
 * LEAKGUARD_POOL_WINDOWS ("young_ms,middle_ms"), LEAKGUARD_POOL_DEFAULT_GEN,
 * LEAKGUARD_POOL_PROFILE, LEAKGUARD_POOL_SINGLE=1 (one pool, the baseline).
 * The pools subscribe to the guard's levels when libleakguard.so is loaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool/pool_impl.h"

#define MAXDEV 16
static lg_pool_t *pools[MAXDEV];
static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;

static lg_gen_t gen_from(const char *s, lg_gen_t dflt) {
  if (!s) return dflt;
  for (int g = 0; g < LG_GEN_COUNT; g++)
    if (!strcmp(s, lg_gen_name((lg_gen_t)g))) return (lg_gen_t)g;
  return dflt;
}

static lg_pool_t *pool_for(int device) {
  if (device < 0 || device >= MAXDEV) return NULL;
  lg_pool_t *p = __atomic_load_n(&pools[device], __ATOMIC_ACQUIRE);
  if (p) return p;
  pthread_mutex_lock(&init_mu);
  if (!(p = pools[device])) {
    lg_pool_config_t c;
    lg_pool_config_init(&c);
    const char *be = secure_getenv("LEAKGUARD_POOL_BACKEND");
    c.backend = be && !strcmp(be, "host") ? LG_POOL_HOST : LG_POOL_CUDA;
    c.device = device;
    const char *w = secure_getenv("LEAKGUARD_POOL_WINDOWS");
    unsigned long long y, m;
    if (w && sscanf(w, "%llu,%llu", &y, &m) == 2) {
      c.window_ms[LG_GEN_YOUNG] = y;
      c.window_ms[LG_GEN_MIDDLE] = m;
    }
    c.default_gen = gen_from(secure_getenv("LEAKGUARD_POOL_DEFAULT_GEN"), LG_GEN_MIDDLE);
    c.profile = secure_getenv("LEAKGUARD_POOL_PROFILE");
    const char *single = secure_getenv("LEAKGUARD_POOL_SINGLE");
    c.single = single && *single == '1';
    c.subscribe = 1;
    p = lg_pool_create(&c);
    if (!p) fprintf(stderr, "lgpool: no pool for device %d (%s)\n", device, c.backend ? "no CUDA driver" : "host");
    __atomic_store_n(&pools[device], p, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&init_mu);
  return p;
}

LG_API void *lgpool_alloc(size_t size, int device, void *stream);
LG_API void lgpool_free(void *ptr, size_t size, int device, void *stream);
LG_API int lgpool_stats(int device, lg_pool_stats_t *out);
LG_API size_t lgpool_trim(int device, int level);

LG_API void *lgpool_alloc(size_t size, int device, void *stream) {
  lg_pool_t *p = pool_for(device);
  return p ? lg_pool_alloc_gen(p, size, LG_GEN_AUTO, stream) : NULL;
}

LG_API void lgpool_free(void *ptr, size_t size, int device, void *stream) {
  (void)size;
  lg_pool_t *p = pool_for(device);
  if (p) lg_pool_free(p, ptr, stream);
}

/* For scripts (ctypes): the statistics and a trim of one device's pool. */
LG_API int lgpool_stats(int device, lg_pool_stats_t *out) {
  lg_pool_t *p = device >= 0 && device < MAXDEV ? pools[device] : NULL;
  return p ? lg_pool_stats(p, out) : -2;
}

LG_API size_t lgpool_trim(int device, int level) {
  lg_pool_t *p = device >= 0 && device < MAXDEV ? pools[device] : NULL;
  return p ? lg_pool_trim(p, (lg_level_t)level) : 0;
}
