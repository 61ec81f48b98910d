/* SPDX-License-Identifier: MIT */
/*
 * unwind.c - native stack capture for the recorder.
 *
 * Programs are built the usual way (-O2, no frame pointers, no debug info in system
 * libraries), so frame-pointer walking is not reliable; libunwind's DWARF CFI unwinder
 * is, but costs about a microsecond per stack. Allocation churn calls malloc from the
 * same few call chains millions of times, so a per-thread cache sits in front of it:
 *
 *   key    (return address into the malloc caller, caller's stack pointer)
 *   check  every cached return address i is still stored at its slot on the stack
 *          (cfa0 + slot_off[i]); the slots are live stack (above the current stack
 *          pointer), so a match means the same chain of callers.
 *
 * Two different callers with the same frame sizes give the same key but a different
 * return address at some slot, so they miss and are unwound. The cache is used only
 * when every slot lies inside this thread's stack (pthread bounds), so stacks that
 * are switched (coroutines) are always unwound, never read out of bounds.
 * BENCHMARKS.md has the measured cost of both paths.
 */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "capture/recorder.h"
#include "core/platform.h"

void lgi_unwind_init(void) {
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  /* A bigger register-state cache: a miss costs a dl_iterate_phdr and two sigprocmask
   * system calls inside libunwind. */
  unw_set_cache_size(unw_local_addr_space, 4096, 0);
}

/* Upper bound of this thread's stack, without pthread_getattr_np: it takes the
 * thread's lock and allocates under it, so calling it from a malloc hook deadlocks
 * when the program itself is inside pthread_getattr_np. The main thread's frames all
 * lie below __libc_stack_end; a glibc thread's descriptor (pthread_self()) sits at
 * the top of its stack block. A thread on a user-supplied stack elsewhere simply
 * never uses the cache (its slots are not below the bound). */
extern void *__libc_stack_end;
static void stack_bounds(lgi_tls_t *t) {
  uintptr_t hi;
  if (lg_sys_gettid() == getpid()) hi = (uintptr_t)__libc_stack_end;
  else hi = (uintptr_t)pthread_self();
  t->stack_hi = hi;
  t->stack_lo = hi > ((uintptr_t)1 << 30) ? hi - ((uintptr_t)1 << 30) : 1;
}

static lgi_scache_ent_t *scache_slot(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0) {
  if (LGI_UNLIKELY(!t->scache)) {
    t->scache = lgi_pages_alloc(sizeof(lgi_scache_ent_t) * LGI_SCACHE_ENTRIES);
    if (!t->scache) return NULL;
    stack_bounds(t);
  }
  uint64_t k = (ra0 * 0x9E3779B97F4A7C15ULL) ^ (cfa0 >> 4);
  return &t->scache[(k >> 20) & (LGI_SCACHE_ENTRIES - 1)];
}

void lgi_unwind_thread_exit(lgi_tls_t *t) {
  lgi_pages_free(t->scache, sizeof(lgi_scache_ent_t) * LGI_SCACHE_ENTRIES);
  t->scache = NULL;
}

#define LGI_PY_NATIVE 6

/* The innermost native frames of a Python thread's allocation (libunwind's fast trace:
 * a per-IP cache, no system calls once warm), up to the interpreter's own frame. */
static unsigned native_head(uintptr_t ra0, uint64_t *ips) {
  unsigned n = 0;
  ips[n++] = ra0;
  void *bt[LGI_PY_NATIVE + 8];
  int k = unw_backtrace(bt, (int)(sizeof bt / sizeof *bt)), i = 0;
  while (i < k && (uintptr_t)bt[i] != ra0) i++;
  for (i++; i < k && n < LGI_PY_NATIVE; i++) {
    ips[n++] = (uint64_t)(uintptr_t)bt[i];
    if (lgi_python_interp_frame((uintptr_t)bt[i])) break;
  }
  return n;
}

uint32_t lgi_capture(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0, unsigned space) {
  lgi_scache_ent_t *e = scache_slot(t, ra0, cfa0);
  if (LGI_LIKELY(e && e->ra0 == ra0 && e->cfa0 == cfa0 && e->space == (uint8_t)space &&
                 e->pad == (uint8_t)(space >> 8) && e->id)) {
    unsigned i = 1;
    for (; i < e->depth; i++)
      if (*(const uint64_t *)(cfa0 + e->slot_off[i]) != e->ra[i]) break;
    if (i == e->depth) return e->id;
  }

  /* Miss: unwind with libunwind, skipping the recorder's own frames (their stack
   * pointer is below the caller's). */
  uint64_t ips[LG_MAX_DEPTH];
  uint64_t sps[LG_MAX_DEPTH];
  /* In a Python thread, the innermost native frames (extension code, allocator
   * wrappers) are kept, not the whole native chain: the Python frames identify the
   * site, and deep native recursion would multiply the stacks. */
  unsigned max = lgi_g.depth, n = 0;
  /* libunwind's fast trace (a per-IP frame cache, no system calls once warm) gives
   * the return addresses; the slot of each on the stack, needed by the cache check, is
   * found by scanning upward from the previous one (a return address sits at the top
   * of its caller's frame, above the callee's). unw_step would give the stack pointers
   * directly but costs two sigprocmask calls per frame. */
  void *bt[LG_MAX_DEPTH + 8];
  int k = unw_backtrace(bt, (int)(sizeof bt / sizeof *bt)), i = 0;
  while (i < k && (uintptr_t)bt[i] != ra0) i++;
  uintptr_t scan = cfa0, top = t->stack_hi;
  int slots_ok = cfa0 >= t->stack_lo && cfa0 < top;
  for (; i < k && n < max; i++) {
    uint64_t ip = (uint64_t)(uintptr_t)bt[i];
    if (ip == 0) break;
    ips[n] = ip;
    sps[n] = 0;
    if (n == 0) {
      sps[0] = cfa0;
    } else if (slots_ok) {
      /* bounded scan: frames larger than 64 KiB are not cached */
      uintptr_t lim = scan + 65536 < top ? scan + 65536 : top;
      uintptr_t a = scan;
      while (a + 8 <= lim && *(const uint64_t *)a != ip) a += 8;
      if (a + 8 <= lim) {
        sps[n] = a + 8;
        scan = a + 8;
      } else {
        slots_ok = 0;
      }
    }
    n++;
  }
  if (n == 0 || ips[0] != ra0) {
    /* The unwinder lost the chain (no CFI for a frame): keep at least the caller. */
    ips[0] = ra0;
    sps[0] = cfa0;
    if (n == 0) n = 1;
  }
  uint32_t id = lgi_stack_intern(ips, n, space);

  /* Cache it if every slot is inside this thread's stack. */
  if (e && slots_ok && n <= LGI_SCACHE_DEPTH && cfa0 >= t->stack_lo && sps[0] == cfa0) {
    unsigned j = 1;
    for (; j < n; j++)
      if (sps[j] - 8 < cfa0 || sps[j] > t->stack_hi || sps[j] - cfa0 > UINT32_MAX ||
          *(const uint64_t *)(sps[j] - 8) != ips[j])
        break;
    if (j == n) {
      e->id = 0; /* invalid while being rewritten (signal handlers may look) */
      e->ra0 = ra0;
      e->cfa0 = cfa0;
      e->depth = (uint16_t)n;
      e->space = (uint8_t)space;
      e->pad = (uint8_t)(space >> 8); /* GPU ordinal (LGI_SITE_SPACE) */
      for (j = 1; j < n; j++) {
        e->slot_off[j] = (uint32_t)(sps[j] - 8 - cfa0);
        e->ra[j] = ips[j];
      }
      __atomic_store_n(&e->id, id, __ATOMIC_RELEASE);
    }
  }
  return id;
}

#define LGI_PY_DEPTH 32
uint32_t lgi_capture_all(lgi_tls_t *t, uintptr_t ra0, uintptr_t cfa0, unsigned space) {
  if (!lgi_python_active()) return lgi_capture(t, ra0, cfa0, space);
  uint64_t ips[LG_MAX_DEPTH];
  unsigned np = lgi_python_frames(t, ips, LGI_PY_DEPTH);
  if (np == 0) return lgi_capture(t, ra0, cfa0, space);
  /* In a Python thread the native stack is needed only down to the interpreter's own
   * frame: below it, it mirrors the Python frames, and unwinding it (deep, different
   * for every Python call depth) would cost more than the whole allocation. Called
   * from the interpreter itself (object, frame, dict allocations), the Python line
   * alone is the site: which internal C path allocated does not matter to the user
   * and would multiply the sites. */
  if (lgi_python_interp_frame(ra0)) return lgi_stack_intern(ips, np, space);
  unsigned nd = native_head(ra0, ips + np);
  return lgi_stack_intern(ips, np + nd, space);
}
