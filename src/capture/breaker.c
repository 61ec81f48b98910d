/* SPDX-License-Identifier: MIT */
/*
 * breaker.c - the in-process side of the guard: levels, subscribers, batch size,
 * admission, eviction callbacks, and per-request tags with quotas.
 *
 * The level lives in the shared region (hdr->guard_level), written by a guard that
 * maps the region (`leakguard guard`, `leakguard run --guard`). Reading it is one
 * relaxed load. Subscribers and eviction run on one watcher thread, started on the
 * first lg_subscribe/lg_evict_register, with every signal blocked; it polls the level
 * every 50 ms (a futex on shared memory would save the polling, but the writer may be
 * another user's process that cannot wake us; 20 loads a second cost nothing).
 *
 * Tags are counted in the region too (so the collector can export the top tags), or
 * in private pages when the process runs without the recorder, so quotas work in
 * production without `leakguard run`. Hooks call lgi_tag_alloc/lgi_tag_free: atomics
 * only, no lock, no allocation.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capture/recorder.h"
#include "leakguard.h"

/* ------------------------------------------------------------------ levels */

LG_API lg_level_t lg_level(void) {
  lg_region_hdr_t *h = lgi_g.hdr;
  if (!h || !lgi_g.enabled) return LG_LEVEL_NORMAL;
  uint32_t l = atomic_load_explicit(&h->guard_level, memory_order_relaxed);
  return l > LG_LEVEL_EMERGENCY ? LG_LEVEL_EMERGENCY : (lg_level_t)l;
}

LG_API size_t lg_batch_size(size_t base) {
  static const double f[] = {1.0, 0.7, 0.5, 0.25};
  if (base == 0) return 0;
  size_t b = (size_t)((double)base * f[lg_level()]);
  return b < 1 ? 1 : b;
}

LG_API int lg_admit(void) { return lg_level() < LG_LEVEL_BREAKER; }

/* ------------------------------------------------------------------ watcher */

#define MAX_SUBS 32
#define MAX_CACHES 64
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  lg_level_cb cb;
  void *arg;
} subs[MAX_SUBS];
static struct {
  char name[32];
  lg_evict_cb cb;
  void *arg;
  _Atomic uint64_t used;
} caches[MAX_CACHES];
static int ncaches;
static _Atomic uint64_t lru_clock;
static int watcher_started;

static void *watcher(void *arg) {
  (void)arg;
  lg_level_t last = LG_LEVEL_NORMAL;
  for (;;) {
    struct timespec d = {0, 50 * 1000 * 1000};
    nanosleep(&d, NULL);
    lg_region_hdr_t *h = lgi_g.hdr;
    if (!h || !lgi_g.enabled) continue;
    lg_level_t now = lg_level();
    if (now != last) {
      struct {
        lg_level_cb cb;
        void *arg;
      } copy[MAX_SUBS];
      pthread_mutex_lock(&reg_lock);
      memcpy(copy, subs, sizeof copy);
      pthread_mutex_unlock(&reg_lock);
      for (int i = 0; i < MAX_SUBS; i++)
        if (copy[i].cb) copy[i].cb(last, now, copy[i].arg);
      if (now == LG_LEVEL_EMERGENCY && last != LG_LEVEL_EMERGENCY && atomic_load(&h->evict_request) == 0)
        lg_evict(SIZE_MAX); /* free what the caches can */
      last = now;
    }
    uint64_t want = atomic_exchange(&h->evict_request, 0);
    if (want) lg_evict((size_t)want);
  }
  return NULL;
}

/* Caller holds reg_lock. */
static void start_watcher(void) {
  if (watcher_started || !lgi_g.enabled) return;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits: all blocked */
  pthread_t th;
  if (pthread_create(&th, &a, watcher, NULL) == 0) watcher_started = 1;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&a);
}

/* After fork only the forking thread lives on in the child: the watcher is gone (the
 * subscribers of a forked worker would never hear of a level change) and reg_lock may
 * have been held by another thread. Called by lgi_atfork_child (the child has its own
 * region by then, or recording is off). */
void lgi_breaker_atfork_child(void) {
  pthread_mutex_init(&reg_lock, NULL);
  watcher_started = 0;
  int any = ncaches > 0;
  for (int i = 0; i < MAX_SUBS && !any; i++) any = subs[i].cb != NULL;
  if (any) start_watcher();
}

LG_API int lg_subscribe(lg_level_cb cb, void *arg) {
  if (!cb) return -EINVAL;
  int id = -ENOMEM;
  pthread_mutex_lock(&reg_lock);
  for (int i = 0; i < MAX_SUBS; i++)
    if (!subs[i].cb) {
      subs[i].cb = cb;
      subs[i].arg = arg;
      id = i;
      break;
    }
  if (id >= 0) start_watcher();
  pthread_mutex_unlock(&reg_lock);
  return id;
}

LG_API int lg_unsubscribe(int id) {
  if (id < 0 || id >= MAX_SUBS) return -EINVAL;
  pthread_mutex_lock(&reg_lock);
  int rc = subs[id].cb ? 0 : -ENOENT;
  subs[id].cb = NULL;
  pthread_mutex_unlock(&reg_lock);
  return rc;
}

LG_API int lg_evict_register(const char *name, lg_evict_cb cb, void *arg) {
  if (!cb) return -EINVAL;
  pthread_mutex_lock(&reg_lock);
  int id = -ENOMEM;
  if (ncaches < MAX_CACHES) {
    id = ncaches++;
    size_t k = name ? strnlen(name, sizeof caches[id].name - 1) : 0;
    if (k) memcpy(caches[id].name, name, k);
    caches[id].name[k] = 0;
    caches[id].cb = cb;
    caches[id].arg = arg;
    atomic_store(&caches[id].used, atomic_fetch_add(&lru_clock, 1) + 1);
    start_watcher();
  }
  pthread_mutex_unlock(&reg_lock);
  return id;
}

LG_API void lg_evict_touch(int id) {
  if (id >= 0 && id < MAX_CACHES) atomic_store(&caches[id].used, atomic_fetch_add(&lru_clock, 1) + 1);
}

LG_API size_t lg_evict(size_t want) {
  int order[MAX_CACHES], n;
  pthread_mutex_lock(&reg_lock);
  n = ncaches;
  for (int i = 0; i < n; i++) order[i] = i;
  /* least recently used first (insertion sort: at most 64) */
  for (int i = 1; i < n; i++) {
    int x = order[i], j = i;
    while (j > 0 && atomic_load(&caches[order[j - 1]].used) > atomic_load(&caches[x].used)) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = x;
  }
  pthread_mutex_unlock(&reg_lock);
  size_t freed = 0;
  for (int i = 0; i < n && freed < want; i++) freed += caches[order[i]].cb(want - freed, caches[order[i]].arg);
  return freed;
}

/* ------------------------------------------------------------------ tags */

static lg_tag_rec_t *private_tags;
static _Atomic uint32_t private_ntags = 1;
static pthread_mutex_t tag_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  lg_quota_cb cb;
  void *arg;
} quota_cbs[LG_MAX_TAGS];

static lg_tag_rec_t *tag_table(_Atomic uint32_t **count) {
  lg_region_hdr_t *h = lgi_g.hdr;
  if (h && lgi_g.enabled) {
    *count = &h->ntags;
    return LG_PTR(h, h->tags_off, lg_tag_rec_t *);
  }
  *count = &private_ntags;
  return private_tags;
}

/* Interns name; returns its id or -errno. */
static int tag_intern(const char *name) {
  if (!name || !*name) return -EINVAL;
  _Atomic uint32_t *cnt;
  lg_tag_rec_t *tab = tag_table(&cnt);
  pthread_mutex_lock(&tag_lock);
  if (!tab) {
    private_tags = lgi_pages_alloc(sizeof(lg_tag_rec_t) * LG_MAX_TAGS);
    tab = tag_table(&cnt);
  }
  int id = -ENOMEM;
  if (tab) {
    if (atomic_load(cnt) == 0) atomic_store(cnt, 1);
    uint32_t n = atomic_load(cnt);
    for (uint32_t i = 1; i < n; i++)
      if (!strncmp(tab[i].name, name, LG_TAG_NAME - 1)) {
        id = (int)i;
        goto out;
      }
    if (n < LG_MAX_TAGS) {
      size_t k = strnlen(name, LG_TAG_NAME - 1);
      memcpy(tab[n].name, name, k);
      tab[n].name[k] = 0;
      atomic_store_explicit(cnt, n + 1, memory_order_release);
      id = (int)n;
    }
  }
out:
  pthread_mutex_unlock(&tag_lock);
  return id;
}

LG_API int lg_tag_push(const char *name) {
  lgi_tls_t *t = &lgi_tls;
  int id = tag_intern(name);
  if (id < 0) return id;
  if (t->tag_depth < LGI_TAG_DEPTH) t->tag_stack[t->tag_depth] = t->tag;
  t->tag_depth++;
  t->tag = (uint16_t)id;
  return id;
}

LG_API void lg_tag_pop(void) {
  lgi_tls_t *t = &lgi_tls;
  if (t->tag_depth == 0) return;
  t->tag_depth--;
  t->tag = t->tag_depth < LGI_TAG_DEPTH ? t->tag_stack[t->tag_depth] : t->tag;
}

LG_API int lg_tag_stats(int id, lg_tag_stats_t *out) {
  _Atomic uint32_t *cnt;
  lg_tag_rec_t *tab = tag_table(&cnt);
  if (!tab || !out || id < 1 || (uint32_t)id >= atomic_load(cnt)) return -ENOENT;
  out->name = tab[id].name;
  out->live_bytes = atomic_load(&tab[id].live_bytes);
  out->peak_bytes = atomic_load(&tab[id].peak_bytes);
  out->allocations = atomic_load(&tab[id].allocations);
  return 0;
}

LG_API int lg_tag_quota(const char *name, int64_t limit, lg_quota_cb cb, void *arg) {
  if (limit < 0) return -EINVAL;
  int id = tag_intern(name);
  if (id < 0) return id;
  _Atomic uint32_t *cnt;
  lg_tag_rec_t *tab = tag_table(&cnt);
  pthread_mutex_lock(&tag_lock);
  quota_cbs[id].cb = cb;
  quota_cbs[id].arg = arg;
  tab[id].fail = cb == NULL;
  tab[id].quota_bytes = limit;
  pthread_mutex_unlock(&tag_lock);
  return 0;
}

int lgi_tag_alloc(lgi_tls_t *t, unsigned tag, size_t size, int check) {
  _Atomic uint32_t *cnt;
  lg_tag_rec_t *tab = tag_table(&cnt);
  if (!tab || tag >= LG_MAX_TAGS) return 0;
  lg_tag_rec_t *r = &tab[tag];
  int64_t live = atomic_fetch_add_explicit(&r->live_bytes, (int64_t)size, memory_order_relaxed) + (int64_t)size;
  atomic_fetch_add_explicit(&r->allocations, 1, memory_order_relaxed);
  int64_t peak = atomic_load_explicit(&r->peak_bytes, memory_order_relaxed);
  while (live > peak && !atomic_compare_exchange_weak_explicit(&r->peak_bytes, &peak, live, memory_order_relaxed,
                                                               memory_order_relaxed))
    ;
  if (!check || !r->quota_bytes || live <= r->quota_bytes) return 0;
  if (r->fail) return 1;
  uint32_t z = 0;
  if (atomic_compare_exchange_strong(&r->over, &z, 1)) {
    t->quota_tag = (uint16_t)tag;
    t->quota_live = live;
  }
  return 0;
}

void lgi_tag_free(unsigned tag, size_t size) {
  _Atomic uint32_t *cnt;
  lg_tag_rec_t *tab = tag_table(&cnt);
  if (!tab || tag >= LG_MAX_TAGS) return;
  lg_tag_rec_t *r = &tab[tag];
  int64_t live = atomic_fetch_sub_explicit(&r->live_bytes, (int64_t)size, memory_order_relaxed) - (int64_t)size;
  if (r->quota_bytes && live <= r->quota_bytes && atomic_load_explicit(&r->over, memory_order_relaxed))
    atomic_store(&r->over, 0);
}

void lgi_tag_fire(lgi_tls_t *t) {
  unsigned tag = t->quota_tag;
  int64_t live = t->quota_live;
  t->quota_tag = 0;
  if (tag && tag < LG_MAX_TAGS && quota_cbs[tag].cb) quota_cbs[tag].cb((int)tag, live, quota_cbs[tag].arg);
}
