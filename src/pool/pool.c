/* SPDX-License-Identifier: MIT */
/*
 * pool.c - liblgpool's allocator: segments from the driver, split into blocks and
 * merged again, in three generations (docs/pool.md).
 *
 * Each generation has two pools (small requests <= 1 MiB in 2 MiB segments, large
 * ones in 20 MiB segments or a segment of their own), a best-fit free list per pool,
 * and a release window: a segment that has been wholly free for the window goes back
 * to the driver. Old segments are kept until pressure (a guard level, lg_pool_trim, or
 * a failed driver allocation). One mutex guards a pool: this is not a preload hook.
 *
 * Stream order: a free records an event on the freeing stream. The block (and what it
 * merges into) goes to an allocation on the same stream at once, to another stream only
 * once the event is done (cuEventQuery == CUDA_SUCCESS); a segment goes back to the
 * driver only when its events are done. The host backend has no streams to wait for.
 */
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool/pool_impl.h"

static const char *const gen_names[LG_GEN_COUNT] = {"young", "middle", "old"};

LG_API const char *lg_gen_name(lg_gen_t gen) { return gen >= 0 && gen < LG_GEN_COUNT ? gen_names[gen] : NULL; }

static uint64_t mono_ms(void *arg) {
  (void)arg;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t now_ms(lg_pool_t *p) { return p->cfg.clock_ms(p->cfg.clock_arg); }

LG_API void lg_pool_config_init(lg_pool_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->backend = LG_POOL_HOST;
  cfg->window_ms[LG_GEN_YOUNG] = 100;
  cfg->window_ms[LG_GEN_MIDDLE] = 10000;
  cfg->window_ms[LG_GEN_OLD] = UINT64_MAX;
  cfg->default_gen = LG_GEN_MIDDLE;
}

/* ------------------------------------------------------------------ sizes */

static size_t round_size(size_t n) { return n ? (n + LGP_ROUND - 1) & ~(size_t)(LGP_ROUND - 1) : LGP_ROUND; }

static size_t segment_size(size_t rounded) {
  if (rounded <= LGP_SMALL_MAX) return LGP_SMALL_SEG;
  if (rounded <= LGP_MID_MAX) return LGP_MID_SEG;
  return (rounded + LGP_LARGE_ROUND - 1) & ~(size_t)(LGP_LARGE_ROUND - 1);
}

/* ------------------------------------------------------------------ lists */

static void fl_push(lg_pool_t *p, lgp_blk_t *b) {
  lgp_blk_t **head = &p->freel[b->seg->gen][b->seg->large];
  b->fprev = NULL;
  b->fnext = *head;
  if (*head) (*head)->fprev = b;
  *head = b;
}

static void fl_remove(lg_pool_t *p, lgp_blk_t *b) {
  if (b->fprev) b->fprev->fnext = b->fnext;
  else p->freel[b->seg->gen][b->seg->large] = b->fnext;
  if (b->fnext) b->fnext->fprev = b->fprev;
  b->fprev = b->fnext = NULL;
}

/* 2^64 / phi (core/hash.h's LG_HASH_GOLDEN64; the pool sees capture and the public header only) */
static unsigned hash_addr(uintptr_t a) { return (unsigned)(((a >> 9) * 0x9E3779B97F4A7C15ULL) >> 52) % LGP_HASH; }

static void live_add(lg_pool_t *p, lgp_blk_t *b) {
  unsigned h = hash_addr(b->addr);
  b->hnext = p->live[h];
  p->live[h] = b;
}

static lgp_blk_t *live_take(lg_pool_t *p, uintptr_t a) {
  for (lgp_blk_t **pp = &p->live[hash_addr(a)]; *pp; pp = &(*pp)->hnext)
    if ((*pp)->addr == a) {
      lgp_blk_t *b = *pp;
      *pp = b->hnext;
      b->hnext = NULL;
      return b;
    }
  return NULL;
}

/* ------------------------------------------------------------------ events */

static void *event_get(lg_pool_t *p) {
  if (p->nevents) return p->events[--p->nevents];
  void *ev = NULL;
  if (p->be.ev_create(&ev, 2 /* CU_EVENT_DISABLE_TIMING */)) return NULL;
  return ev;
}

static void event_put(lg_pool_t *p, void *ev) {
  if (!ev) return;
  if (p->nevents == p->capevents) {
    int cap = p->capevents ? p->capevents * 2 : 64;
    void **n = realloc(p->events, (size_t)cap * sizeof *n);
    if (!n) {
      p->be.ev_destroy(ev);
      return;
    }
    p->events = n;
    p->capevents = cap;
  }
  p->events[p->nevents++] = ev;
}

/* 1 when b's free is done on its stream (no event pending). */
static int settled(lg_pool_t *p, lgp_blk_t *b) {
  if (!b->event) return 1;
  p->st.event_queries++;
  if (p->be.ev_query(b->event) != 0) return 0;
  event_put(p, b->event);
  b->event = NULL;
  return 1;
}

static int usable_on(lg_pool_t *p, lgp_blk_t *b, void *stream) { return b->stream == stream || settled(p, b); }

/* ------------------------------------------------------------------ segments */

static void seg_became_idle(lg_pool_t *p, lgp_seg_t *s) {
  p->idle_segs++;
  s->idle_since = now_ms(p);
  uint64_t w = p->cfg.window_ms[s->gen];
  uint64_t due = w == UINT64_MAX || s->idle_since > UINT64_MAX - w ? UINT64_MAX : s->idle_since + w;
  if (due < p->next_due) p->next_due = due;
}

/* Gives an idle segment back to the driver when its events are done; its size or 0. */
static size_t seg_release(lg_pool_t *p, lgp_seg_t *s) {
  lgp_blk_t *b = s->first;
  if (!b->free || b->size != s->size || !settled(p, b)) return 0;
  fl_remove(p, b);
  lgp_backend_free(&p->be, s->addr, s->size);
  if (s->prev) s->prev->next = s->next;
  else p->segs = s->next;
  if (s->next) s->next->prev = s->prev;
  size_t n = s->size;
  p->st.reserved_bytes -= n;
  p->st.reserved_gen[s->gen] -= n;
  p->st.driver_frees++;
  p->idle_segs--;
  free(b);
  free(s);
  return n;
}

/* Releases the idle segments of the generations in mask (windows ignored). */
static size_t release_gens(lg_pool_t *p, unsigned mask) {
  size_t n = 0;
  for (lgp_seg_t *s = p->segs, *nx; s; s = nx) {
    nx = s->next;
    if ((mask >> s->gen) & 1u) n += seg_release(p, s);
  }
  return n;
}

/* Releases what outlived its window. */
static size_t tick_locked(lg_pool_t *p) {
  if (!p->idle_segs) return 0;
  uint64_t t = now_ms(p);
  if (t < p->next_due) return 0;
  size_t n = 0;
  uint64_t due = UINT64_MAX;
  for (lgp_seg_t *s = p->segs, *nx; s; s = nx) {
    nx = s->next;
    lgp_blk_t *b = s->first;
    if (!b->free || b->size != s->size) continue;
    uint64_t w = p->cfg.window_ms[s->gen];
    if (w == UINT64_MAX) continue;
    if (t - s->idle_since >= w) {
      size_t r = seg_release(p, s);
      if (r) {
        n += r;
        continue;
      }
      due = t + 1; /* its event is not done yet: look again */
    } else if (s->idle_since + w < due) {
      due = s->idle_since + w;
    }
  }
  p->next_due = due;
  return n;
}

/* A wholly free segment of another generation that can serve `rounded` on stream,
 * re-homed in generation gen: the smallest that fits, else NULL. A segment holds one
 * generation's blocks at a time (what keeps short-lived blocks out of the segments
 * long-lived ones pin), but an idle one is just memory: before the driver is asked
 * for more, it changes hands (an idle segment that old keeps until pressure would
 * otherwise sit beside a new one young asked the driver for). Its window is then the
 * new generation's. */
static lgp_blk_t *seg_adopt(lg_pool_t *p, size_t rounded, int gen, void *stream) {
  int large = rounded > LGP_SMALL_MAX;
  size_t need = large ? rounded : LGP_SMALL_SEG;
  lgp_seg_t *best = NULL;
  for (lgp_seg_t *s = p->segs; s; s = s->next) {
    lgp_blk_t *b = s->first;
    if (s->gen == gen || s->large != large || !b->free || b->size != s->size || s->size < need) continue;
    if (best && s->size >= best->size) continue;
    if (!usable_on(p, b, stream)) continue;
    best = s;
    if (s->size == need) break;
  }
  if (!best) return NULL;
  lgp_blk_t *b = best->first;
  fl_remove(p, b); /* from its old generation's list */
  p->st.reserved_gen[best->gen] -= best->size;
  p->st.reserved_gen[gen] += best->size;
  best->gen = gen;
  fl_push(p, b);
  p->st.adopted_segments++;
  return b;
}

static lgp_blk_t *seg_new(lg_pool_t *p, size_t rounded, int gen) {
  size_t n = segment_size(rounded);
  uintptr_t a;
  if (lgp_backend_alloc(&p->be, n, &a)) {
    release_gens(p, 7u); /* as PyTorch: free the caches and try once more */
    if (lgp_backend_alloc(&p->be, n, &a)) return NULL;
  }
  lgp_seg_t *s = calloc(1, sizeof *s);
  lgp_blk_t *b = calloc(1, sizeof *b);
  if (!s || !b) {
    lgp_backend_free(&p->be, a, n);
    free(s);
    free(b);
    return NULL;
  }
  s->addr = a;
  s->size = n;
  s->gen = gen;
  s->large = rounded > LGP_SMALL_MAX;
  s->first = b;
  s->next = p->segs;
  if (p->segs) p->segs->prev = s;
  p->segs = s;
  b->addr = a;
  b->size = n;
  b->seg = s;
  b->free = 1;
  p->st.driver_allocs++;
  p->st.reserved_bytes += n;
  p->st.reserved_gen[gen] += n;
  if (p->st.reserved_bytes > p->st.peak_reserved_bytes) p->st.peak_reserved_bytes = p->st.reserved_bytes;
  fl_push(p, b);
  p->idle_segs++; /* wholly free until taken, at once, below */
  return b;
}

/* ------------------------------------------------------------------ create, destroy */

static void level_cb(lg_level_t old_level, lg_level_t new_level, void *arg) {
  if (new_level > old_level && new_level >= LG_LEVEL_WARN) lg_pool_trim(arg, new_level);
}

LG_API lg_pool_t *lg_pool_create(const lg_pool_config_t *cfg) {
  lg_pool_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (cfg) p->cfg = *cfg;
  else lg_pool_config_init(&p->cfg);
  if (!p->cfg.clock_ms) p->cfg.clock_ms = mono_ms;
  if (p->cfg.default_gen < 0 || p->cfg.default_gen >= LG_GEN_COUNT) p->cfg.default_gen = LG_GEN_MIDDLE;
  p->next_due = UINT64_MAX;
  p->sub_id = -1;
  pthread_mutex_init(&p->mu, NULL);
  int rc = lgp_backend_open(&p->be, p->cfg.backend, p->cfg.device);
  if (rc) {
    pthread_mutex_destroy(&p->mu);
    free(p);
    errno = rc;
    return NULL;
  }
  if (p->cfg.profile) {
    int entries = 0;
    p->profile = lgp_profile_load(p->cfg.profile, &entries);
    if (!p->profile) fprintf(stderr, "lgpool: cannot read the site profile %s\n", p->cfg.profile);
  }
  p->cfg.profile = NULL; /* not kept: the caller's string */
  if (p->cfg.subscribe) {
    /* The recorder (libleakguard.so) publishes the guard's level; without it there is
     * nothing to subscribe to and the pool trims only when asked. */
    int (*sub)(lg_level_cb, void *) = (int (*)(lg_level_cb, void *))dlsym(RTLD_DEFAULT, "lg_subscribe");
    if (sub) p->sub_id = sub(level_cb, p);
  }
  return p;
}

LG_API void lg_pool_destroy(lg_pool_t *p) {
  if (!p) return;
  if (p->sub_id >= 0) {
    int (*unsub)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "lg_unsubscribe");
    if (unsub) unsub(p->sub_id);
  }
  pthread_mutex_lock(&p->mu);
  for (lgp_seg_t *s = p->segs, *nx; s; s = nx) {
    nx = s->next;
    for (lgp_blk_t *b = s->first, *bn; b; b = bn) {
      bn = b->next;
      if (b->event) p->be.ev_destroy(b->event);
      free(b);
    }
    lgp_backend_free(&p->be, s->addr, s->size);
    free(s);
  }
  for (int i = 0; i < p->nevents; i++) p->be.ev_destroy(p->events[i]);
  free(p->events);
  lgp_profile_free(p->profile);
  pthread_mutex_unlock(&p->mu);
  lgp_backend_close(&p->be);
  pthread_mutex_destroy(&p->mu);
  free(p);
}

/* ------------------------------------------------------------------ alloc, free */

static lg_gen_t auto_gen(lg_pool_t *p) {
  if (!p->profile) return p->cfg.default_gen;
  void *frames[16];
  int n = backtrace(frames, 16);
  int g = lgp_profile_lookup(p->profile, frames, n);
  return g < 0 ? p->cfg.default_gen : (lg_gen_t)g;
}

LG_API void *lg_pool_alloc_gen(lg_pool_t *p, size_t size, lg_gen_t gen, void *stream) {
  if (!p || size > (SIZE_MAX >> 1)) return NULL;
  if (gen == LG_GEN_AUTO) gen = auto_gen(p);
  if (gen < 0 || gen >= LG_GEN_COUNT) gen = p->cfg.default_gen;
  int g = p->cfg.single ? 0 : (int)gen;
  size_t rs = round_size(size);
  int large = rs > LGP_SMALL_MAX;
  pthread_mutex_lock(&p->mu);
  tick_locked(p);
  lgp_blk_t *best = NULL;
  for (lgp_blk_t *b = p->freel[g][large]; b; b = b->fnext)
    if (b->size >= rs && (!best || b->size < best->size) && usable_on(p, b, stream)) {
      best = b;
      if (b->size == rs) break;
    }
  if (!best && !(best = seg_adopt(p, rs, g, stream)) && !(best = seg_new(p, rs, g))) {
    p->st.alloc_failures++;
    pthread_mutex_unlock(&p->mu);
    return NULL;
  }
  lgp_seg_t *s = best->seg;
  fl_remove(p, best);
  if (best->size == s->size) p->idle_segs--;
  size_t rem = best->size - rs;
  if (large ? rem > LGP_SMALL_MAX : rem >= LGP_ROUND) {
    lgp_blk_t *r = calloc(1, sizeof *r);
    if (r) {
      r->addr = best->addr + rs;
      r->size = rem;
      r->seg = s;
      r->free = 1;
      r->stream = best->stream;
      r->event = best->event; /* the rest waits for the same free */
      best->event = NULL;
      r->prev = best;
      r->next = best->next;
      if (best->next) best->next->prev = r;
      best->next = r;
      best->size = rs;
      fl_push(p, r);
    }
  }
  event_put(p, best->event); /* same stream: its work is ordered after the free */
  best->event = NULL;
  best->free = 0;
  best->stream = stream;
  best->requested = size;
  s->used += best->size;
  live_add(p, best);
  p->st.allocated_bytes += best->size;
  p->st.requested_bytes += size;
  if (p->st.allocated_bytes > p->st.peak_allocated_bytes) p->st.peak_allocated_bytes = p->st.allocated_bytes;
  pthread_mutex_unlock(&p->mu);
  return (void *)best->addr;
}

/* b absorbs its free neighbour c (c right after b); c's event is done or older. */
static void absorb(lg_pool_t *p, lgp_blk_t *b, lgp_blk_t *c) {
  fl_remove(p, c);
  event_put(p, c->event);
  b->size += c->size;
  b->next = c->next;
  if (c->next) c->next->prev = b;
  free(c);
}

static void report_bad(lg_pool_t *p, int dbl, const void *ptr) {
  int *once = dbl ? &p->reported_double : &p->reported_unknown;
  if (*once) return;
  *once = 1;
  fprintf(stderr, "lgpool: %s %p (counted; further ones are not reported)\n",
          dbl ? "double free of" : "free of an unknown pointer", ptr);
}

LG_API int lg_pool_free(lg_pool_t *p, void *ptr, void *stream) {
  if (!p || !ptr) return ptr ? -EINVAL : 0;
  pthread_mutex_lock(&p->mu);
  lgp_blk_t *b = live_take(p, (uintptr_t)ptr);
  if (!b) {
    int dbl = 0;
    for (lgp_seg_t *s = p->segs; s && !dbl; s = s->next)
      if ((uintptr_t)ptr >= s->addr && (uintptr_t)ptr < s->addr + s->size)
        for (lgp_blk_t *x = s->first; x; x = x->next)
          if (x->addr == (uintptr_t)ptr) {
            dbl = x->free;
            break;
          }
    if (dbl) p->st.double_frees++;
    else p->st.unknown_frees++;
    report_bad(p, dbl, ptr);
    pthread_mutex_unlock(&p->mu);
    return dbl ? -EALREADY : -EINVAL;
  }
  lgp_seg_t *s = b->seg;
  s->used -= b->size;
  p->st.allocated_bytes -= b->size;
  p->st.requested_bytes -= b->requested;
  b->free = 1;
  b->stream = stream;
  if (p->be.kind == LG_POOL_CUDA) {
    b->event = event_get(p);
    if (b->event && p->be.ev_record(b->event, stream)) {
      event_put(p, b->event);
      b->event = NULL; /* cannot order it: the driver's own error will surface on use */
    }
    if (b->event) p->st.event_records++;
  }
  /* Merge with free neighbours whose frees are done, or on the same stream (ordered
   * before this one). The merged block waits for this free's event. */
  lgp_blk_t *n = b->next;
  if (n && n->free && usable_on(p, n, stream)) absorb(p, b, n);
  lgp_blk_t *pr = b->prev;
  if (pr && pr->free && usable_on(p, pr, stream)) {
    fl_remove(p, pr);
    event_put(p, pr->event);
    pr->event = b->event;
    pr->stream = stream;
    b->event = NULL;
    pr->size += b->size;
    pr->next = b->next;
    if (b->next) b->next->prev = pr;
    free(b);
    b = pr;
  }
  fl_push(p, b);
  if (b->size == s->size) seg_became_idle(p, s);
  tick_locked(p);
  pthread_mutex_unlock(&p->mu);
  return 0;
}

/* ------------------------------------------------------------------ trim, stats */

LG_API size_t lg_pool_trim(lg_pool_t *p, lg_level_t level) {
  if (!p || level < LG_LEVEL_WARN || level > LG_LEVEL_EMERGENCY) return 0;
  unsigned mask;
  if (p->cfg.single) mask = level == LG_LEVEL_EMERGENCY ? 1u : 0u; /* one pool: all or nothing */
  else if (level == LG_LEVEL_WARN) mask = 1u << LG_GEN_YOUNG;
  else if (level == LG_LEVEL_BREAKER) mask = (1u << LG_GEN_YOUNG) | (1u << LG_GEN_MIDDLE);
  else mask = 7u;
  pthread_mutex_lock(&p->mu);
  p->st.trims[level]++;
  size_t n = release_gens(p, mask);
  pthread_mutex_unlock(&p->mu);
  return n;
}

LG_API size_t lg_pool_tick(lg_pool_t *p) {
  if (!p) return 0;
  pthread_mutex_lock(&p->mu);
  size_t n = tick_locked(p);
  pthread_mutex_unlock(&p->mu);
  return n;
}

LG_API int lg_pool_stats(lg_pool_t *p, lg_pool_stats_t *out) {
  if (!p || !out) return -EINVAL;
  pthread_mutex_lock(&p->mu);
  *out = p->st;
  for (int g = 0; g < LG_GEN_COUNT; g++) out->cached_gen[g] = 0;
  for (lgp_seg_t *s = p->segs; s; s = s->next) out->cached_gen[s->gen] += s->size - s->used;
  pthread_mutex_unlock(&p->mu);
  return 0;
}
