/* SPDX-License-Identifier: MIT */
/*
 * pymod.c - Python after attach (agent.h):
 * CPython's allocators wrapped, the leakguard module imported in the target, and the
 * functions the module calls.
 *
 * Holders after attach (docs/attach.md, "Python after attach"): the leakguard module is
 * imported in the target by a pending call, which CPython runs in the main thread
 * between two bytecodes, under the GIL. It is posted from the watcher thread, never from
 * the stopped context: Py_AddPendingCall takes the interpreter's pending-call lock,
 * which the stopped thread may hold. The module then looks the functions below up
 * through this library's own handle (dlopen of its path with RTLD_NOLOAD): the injector
 * loads it RTLD_LOCAL, so dlsym(RTLD_DEFAULT, ...) does not see them.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <dlfcn.h>

#include "capture/agent/agent.h"
#include "capture/pymem.h"
#include "core/platform.h"
#include "leakguard.h"

static char py_dir[256], py_moddir[1024], self_path[1024];
static _Atomic int py_posted;

/* A path that can go between double quotes in Python source as it is. */
static int py_quotable(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (*s == '\'' || *s == '"' || *s == '\\' || (unsigned char)*s < 0x20) return 0;
  return 1;
}

/* CPython's own allocator after attach. A process not started by `leakguard run` runs
 * pymalloc (no PYTHONMALLOC=malloc): objects of up to 512 bytes live in its arenas, never
 * pass through malloc, and the GOT hooks see only the arenas. The pending call below
 * wraps the allocators of the MEM and OBJ domains (PyMem_SetAllocator, under the GIL, as
 * tracemalloc does): a block they hand out is recorded at its call site in the side
 * table, as a malloc block is, and taken out when they free it; a block allocated before
 * the wrapper is passed through (its free finds nothing). Blocks move nowhere and carry no
 * header, so the wrapper can go at any time: a pending call at detach puts the
 * allocators back, and until it runs (a main thread in one long C call) or in a fork
 * child, the wrapper passes every call through. pymem_t: capture/pymem.h. */
static const int pymem_domain[2] = {LG_PYMEM_DOMAIN_MEM, LG_PYMEM_DOMAIN_OBJ};
static pymem_t py_orig[2]; /* the allocators found, the wrappers' ctx */

/* A recorded block of the side table freed or moved by CPython's allocator. */
static inline void pm_forget(void *p, lgag_ent_t *e) {
  if (!p || !lgag_table_maybe((uintptr_t)p) || !lgag_table_take((uintptr_t)p, e)) {
    e->key = 0;
    return;
  }
  lgi_tls_t *t = &lgi_tls;
  t->guard++;
  lgi_count(t, e->site, -lgi_weight_bytes(e->size), -lgi_weight_blocks(e->size), e->epoch, 0);
  t->guard--;
}
static void *pm_malloc(void *ctx, size_t n) {
  pymem_t *o = ctx;
  lgag_py_inner++;
  void *p = o->malloc(o->ctx, n);
  lgag_py_inner--;
  if (p && lgag_decide(&lgi_tls, n)) lgag_record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *pm_calloc(void *ctx, size_t a, size_t b) {
  pymem_t *o = ctx;
  lgag_py_inner++;
  void *p = o->calloc(o->ctx, a, b);
  lgag_py_inner--;
  if (p && lgag_decide(&lgi_tls, a * b)) lgag_record(&lgi_tls, p, a * b, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void *pm_realloc(void *ctx, void *old, size_t n) {
  pymem_t *o = ctx;
  lgag_ent_t e;
  pm_forget(old, &e);
  lgag_py_inner++;
  void *p = o->realloc(o->ctx, old, n);
  lgag_py_inner--;
  if (!p && e.key) { /* the old block lives on */
    lgag_ent_t o2;
    lgi_tls_t *t = &lgi_tls;
    t->guard++;
    if (lgag_table_put(e.key, e.site, e.epoch, e.size, &o2) == 0)
      lgi_count(t, e.site, lgi_weight_bytes(e.size), lgi_weight_blocks(e.size), e.epoch, 0);
    t->guard--;
  }
  if (p && lgag_decide(&lgi_tls, n)) lgag_record(&lgi_tls, p, n, LG_CALLER_RA, LG_CALLER_CFA);
  return p;
}
static void pm_free(void *ctx, void *p) {
  pymem_t *o = ctx;
  lgag_ent_t e;
  pm_forget(p, &e);
  lgag_py_inner++;
  o->free(o->ctx, p);
  lgag_py_inner--;
}

/* In the main thread, GIL held (py_boot): the wrappers go in, once. */
static void py_wrap(void) {
  void (*get)(int, pymem_t *) = (void (*)(int, pymem_t *))dlsym(RTLD_DEFAULT, "PyMem_GetAllocator");
  void (*set)(int, pymem_t *) = (void (*)(int, pymem_t *))dlsym(RTLD_DEFAULT, "PyMem_SetAllocator");
  if (!get || !set || atomic_load(&lgag_py_wrapped)) return;
  for (int i = 0; i < 2; i++) get(pymem_domain[i], &py_orig[i]);
  for (int i = 0; i < 2; i++) {
    pymem_t w = {&py_orig[i], pm_malloc, pm_calloc, pm_realloc, pm_free};
    set(pymem_domain[i], &w);
  }
  atomic_store(&lgag_py_wrapped, 1);
}

/* A pending call posted at detach (main thread, GIL held): the allocators found go back. */
static int py_unwrap(void *arg) {
  (void)arg;
  void (*set)(int, pymem_t *) = (void (*)(int, pymem_t *))dlsym(RTLD_DEFAULT, "PyMem_SetAllocator");
  if (!set || !atomic_load(&lgag_py_wrapped) || __atomic_load_n(&lgag_stats.state, __ATOMIC_SEQ_CST) == 1)
    return 0; /* attached again */
  for (int i = 0; i < 2; i++) set(pymem_domain[i], &py_orig[i]);
  atomic_store(&lgag_py_wrapped, 0);
  return 0;
}

/* In the main thread, GIL held. Always 0: a pending call that returns -1 must leave an
 * exception set, which would surface in the program. What fails is written to
 * LG_FILE_PYBOOT in the collector's directory (the CLI prints it in one line). The code
 * runs in a namespace of its own (exec), so __main__ gains no name. */
static int py_boot(void *arg) {
  (void)arg;
  int (*run)(const char *, void *) = (int (*)(const char *, void *))dlsym(RTLD_DEFAULT, "PyRun_SimpleStringFlags");
  if (!run || __atomic_load_n(&lgag_stats.state, __ATOMIC_SEQ_CST) != 1) return 0;
  static char code[4096];
  int n = snprintf(code, sizeof code,
                   "exec('''\n"
                   "try:\n"
                   "    import importlib.util as u\n"
                   "    s = u.spec_from_file_location(\"_leakguard_site\", \"%s/sitecustomize.py\")\n"
                   "    m = u.module_from_spec(s)\n"
                   "    s.loader.exec_module(m)\n"
                   "    m._leakguard_attach(\"%s\", \"%s\", \"%s\")\n"
                   "except Exception as e:\n"
                   "    try:\n"
                   "        import os\n"
                   "        with open(os.path.join(\"%s\", \"%s\" %% os.getpid()), \"w\") as f:\n"
                   "            f.write(\"%%s: %%s\" %% (type(e).__name__, e))\n"
                   "    except Exception:\n"
                   "        pass\n"
                   "''', {'__builtins__': __builtins__})\n",
                   py_moddir, py_moddir, py_dir, self_path, py_dir, LG_FILE_PYBOOT);
  if (n <= 0 || (size_t)n >= sizeof code) return 0;
  py_wrap();
  lgi_tls.guard++; /* the module's import is leakguard's, not the program's */
  (void)run(code, NULL);
  lgi_tls.guard--;
  return 0;
}

/* Watcher thread: once per attach, when the process runs a CPython the frame reader
 * knows and the CLI gave the module's directory. */
void lgag_py_post(void) {
  if (atomic_load(&py_posted) || !py_dir[0] || !py_moddir[0] || !self_path[0] || !lgi_python_active()) return;
  int (*add)(int (*)(void *), void *) = (int (*)(int (*)(void *), void *))dlsym(RTLD_DEFAULT, "Py_AddPendingCall");
  if (add && add(py_boot, NULL) == 0) atomic_store(&py_posted, 1);
}

void lgag_py_setup(const char *dir, const char *moddir, const char *self) {
  py_dir[0] = py_moddir[0] = self_path[0] = 0;
  if (dir && strlen(dir) < sizeof py_dir && py_quotable(dir)) strcpy(py_dir, dir);
  if (moddir && strlen(moddir) < sizeof py_moddir && py_quotable(moddir)) strcpy(py_moddir, moddir);
  if (self && strlen(self) < sizeof self_path && py_quotable(self)) strcpy(self_path, self);
}

void lgag_py_post_unwrap(void) {
  /* from the watcher, never from the stopped thread, which may hold the interpreter's
   * pending-call lock */
  int (*add)(int (*)(void *), void *) = (int (*)(int (*)(void *), void *))dlsym(RTLD_DEFAULT, "Py_AddPendingCall");
  if (add && atomic_load(&lgag_py_wrapped)) (void)add(py_unwrap, NULL);
}

void lgag_py_reset(void) { atomic_store(&py_posted, 0); }

/* What the module calls (src/python/api.c), as libleakguard.so's functions of the same
 * names do under `leakguard run`. */
LG_API int lg_recording(void) {
  return atomic_load(&lgag_recording) && __atomic_load_n(&lgag_stats.state, __ATOMIC_SEQ_CST) == 1;
}

LG_API uint64_t leakguard_step(void) {
  if (!lg_recording() || !lgi_g.hdr) return 0;
  return atomic_fetch_add_explicit(&lgi_g.hdr->steps, 1, memory_order_release) + 1;
}

LG_API int lg_site_of(const void *block, uint32_t *site) {
  lgag_ent_t e;
  if (!block || !site || !lg_recording() || !lgag_table_find((uintptr_t)block, &e)) return -ENOENT;
  *site = e.site;
  return 0;
}

/* Headerless: the module asks the side table for a block's site and size instead of
 * reading a header in front of the block. Exact addresses only, so any pointer may be
 * asked (an object pymalloc placed in one of its arenas is simply not there). */
LG_API int lg_agent_block(const void *block, uint32_t *site, uint64_t *size);
LG_API int lg_agent_block(const void *block, uint32_t *site, uint64_t *size) {
  lgag_ent_t e;
  if (!block || !lg_recording() || !lgag_table_find((uintptr_t)block, &e)) return -ENOENT;
  if (site) *site = e.site;
  if (size) *size = e.size;
  return 0;
}

LG_API void lg_program_held(int held) {
  if (!lg_recording() || !lgi_g.hdr) return;
  if (held) atomic_fetch_add(&lgi_g.hdr->held, 1);
  else if (atomic_load(&lgi_g.hdr->held) > 0) atomic_fetch_sub(&lgi_g.hdr->held, 1);
}

LG_API int lg_pause_recording(int pause) {
  lgi_tls_t *t = &lgi_tls;
  if (pause) t->guard++;
  else if (t->guard > 0) t->guard--;
  return t->guard;
}
