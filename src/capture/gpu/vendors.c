/* SPDX-License-Identifier: MIT */
/*
 * vendors.c - the GPU vendors whose entry points libleakguard.so hooks, one row each
 * (CUDA today; a second vendor is a row here and its hook files): how the dynamic
 * loader's interposition (dl.c: dlsym, dlvsym, dlopen) asks them about a name. Apart
 * from table.c, which the vendors' hooks call: the table never calls a vendor back.
 */
#include "capture/gpu/gpu.h"

static const struct {
  int (*export_name)(const char *name);
  void *(*dlsym_default)(void *handle, const char *name);
  int (*dlsym_result)(const char *name, void *r, void **out);
} vendors[] = {
    {lgi_cuda_export_name, lgi_cuda_dlsym_default, lgi_cuda_dlsym_result},
};
#define NVENDORS (sizeof vendors / sizeof *vendors)

/* Called by dlsym's assembly entry (dl.c), and then by that entry's jump. */
__attribute__((used)) int lgi_gpu_export_name(const char *name) {
  for (size_t v = 0; v < NVENDORS; v++)
    if (vendors[v].export_name(name)) return 1;
  return 0;
}

__attribute__((used)) void *lgi_gpu_dlsym_default(void *handle, const char *name) {
  for (size_t v = 0; v < NVENDORS; v++)
    if (vendors[v].export_name(name)) return vendors[v].dlsym_default(handle, name);
  return NULL; /* not reached: the entry asked lgi_gpu_export_name first */
}

int lgi_gpu_dlsym_result(const char *name, void *r, void **out) {
  for (size_t v = 0; v < NVENDORS; v++)
    if (vendors[v].dlsym_result(name, r, out)) return 1;
  return 0;
}
