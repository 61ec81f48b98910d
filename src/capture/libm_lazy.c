/* SPDX-License-Identifier: MIT */
/*
 * libm_lazy.c - libm for lg_classify in libleakguard.so, loaded at its first call.
 *
 * The library does not link libm (capture/nolibm.h says why: every preloaded process
 * would map it). lg_classify is the one public function that needs it; its objects are
 * built for this library with log10, log1p, log2, sqrt and exp renamed to these
 * (CMakeLists.txt, lg_classify_preload), which open libm.so.6 when the program first
 * classifies a curve: a call of the program's, never a hook. (libm.so.6 is part of
 * glibc; were it missing, they would return NaN.)
 */
#include <dlfcn.h>
#include <stdatomic.h>

#include "capture/libm_lazy.h"
#include "capture/recorder.h"

typedef double (*fn_t)(double);

static fn_t resolve(_Atomic(fn_t) *slot, const char *name) {
  fn_t f = atomic_load_explicit(slot, memory_order_acquire);
  if (f) return f;
  void *lib = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
  if (lib) *(void **)&f = dlsym(lib, name);
  if (f) atomic_store_explicit(slot, f, memory_order_release);
  return f;
}

#undef log10
#undef log1p
#undef log2
#undef sqrt
#undef exp
#define LAZY(name)                                                                                                     \
  double lgi_m_##name(double x) {                                                                                      \
    static _Atomic(fn_t) slot;                                                                                         \
    fn_t f = resolve(&slot, #name);                                                                                    \
    return f ? f(x) : __builtin_nan("");                                                                               \
  }
LAZY(log10)
LAZY(log1p)
LAZY(log2)
LAZY(sqrt)
LAZY(exp)
