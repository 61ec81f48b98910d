/* SPDX-License-Identifier: MIT */
/*
 * gpu.h - the vendor-neutral part of GPU memory in libleakguard.so (docs/cuda.md,
 * docs/design.md "GPU memory" and "A second GPU vendor"): the address/handle table of what a vendor's hooks
 * recorded, its accounting on sites and on the region's per-device gauges, and the
 * recursion guard around a tracked driver call. A vendor's hooks (cuda_mem.c for the
 * CUDA driver API) call these after their driver answered; they never see the table.
 * The rules of recorder.h hold: no allocation through the interposed allocator, the
 * table's spin lock held for table operations only, never across a driver call or a
 * stack capture.
 */
#ifndef LG_CAPTURE_GPU_GPU_H
#define LG_CAPTURE_GPU_GPU_H

#include <stdint.h>

#include "capture/recorder.h"

/* Device ordinals the tables keep: 0..LGI_GPU_DEVS-2 (a larger one is clamped). */
#define LGI_GPU_DEVS 256

/* What a record's key names. */
enum {
  LGI_GPU_ADDR = 1, /* a device, managed or pinned block, by its address */
  LGI_GPU_HANDLE,   /* physical memory of the VMM API, by its handle */
  LGI_GPU_MAP,      /* a mapping of such a handle, by its address (aux: the handle) */
  LGI_GPU_ARRAY,    /* an array (texture memory), by its handle */
  LGI_GPU_REG,      /* registered host memory, by its address (not a site: a gauge only) */
};

typedef struct lgi_gpu_ent {
  uint64_t key; /* address, handle or array */
  uint64_t size;
  uint64_t ctx; /* context it was made in (0: not bound to one) */
  uint64_t aux; /* LGI_GPU_MAP: the handle; stream-ordered: the stream */
  uint32_t site, epoch;
  uint8_t ns; /* LGI_GPU_*, 0 = empty slot */
  uint8_t space, dev;
  uint8_t pad[5];
} lgi_gpu_ent_t;

/* The table's spin lock, also held for a vendor's own short lists (contexts, pools). */
LGI_HIDDEN void lgi_gpu_tab_lock(void);
LGI_HIDDEN void lgi_gpu_tab_unlock(void);
/* The record of key in namespace ns, or NULL. Caller holds the lock. */
LGI_HIDDEN lgi_gpu_ent_t *lgi_gpu_find(uint64_t key, unsigned ns);

/* Enters the recorder for a tracked call: 1 (the recursion guard is then held, until
 * lgi_gpu_leave) or 0 (pass the call through). */
LGI_HIDDEN int lgi_gpu_enter(lgi_tls_t *t);
LGI_HIDDEN void lgi_gpu_leave(lgi_tls_t *t);
/* dev clamped to the ordinals the tables keep. */
LGI_HIDDEN int lgi_gpu_clamp_dev(int dev);
/* Sets a flag of the region's gpu_flags (LG_GPU_*, or a vendor's: LG_CUDA_*) once. */
LGI_HIDDEN void lgi_gpu_set_flag(uint32_t f);
/* Notes name: what (a line the collector prints once, docs/cuda.md), in the region. */
LGI_HIDDEN void lgi_gpu_note(const char *name, const char *what);
/* The region header's gauges of device dev, or NULL (dev outside 0..LG_GPU_MAX_DEVICES-1). */
LGI_HIDDEN lg_gpu_dev_t *lgi_gpu_gauge(int dev);

/* A new allocation the driver made: its stack (space and device make the site), its
 * record, its bytes counted. */
LGI_HIDDEN void lgi_gpu_track(lgi_tls_t *t, unsigned ns, uint64_t key, uint64_t size, unsigned space, int dev,
                              uint64_t ctx, uint64_t aux, uintptr_t ra, uintptr_t cfa);
/* Records e and counts it (a record with the same key, freed behind our back, is
 * counted off first). */
LGI_HIDDEN void lgi_gpu_put(lgi_tls_t *t, const lgi_gpu_ent_t *e);
/* Takes the record of key out, counted off, before the driver frees it (the address
 * could be handed out again at once): 1 when there was one (in *e). */
LGI_HIDDEN int lgi_gpu_take(lgi_tls_t *t, uint64_t key, unsigned ns, lgi_gpu_ent_t *e);
/* The driver refused the free: e lives on. */
LGI_HIDDEN void lgi_gpu_untake(lgi_tls_t *t, const lgi_gpu_ent_t *e);
/* After a free: counts the call (ok: the driver freed it) and a free of memory that
 * was not recorded (had 0). */
LGI_HIDDEN void lgi_gpu_after_free(int had, int ok);
/* Takes every record of namespace ns whose key is in [lo, hi). */
LGI_HIDDEN void lgi_gpu_take_range(lgi_tls_t *t, unsigned ns, uint64_t lo, uint64_t hi);
/* Releases every record made in context c (not VMM handles: physical memory lives
 * until released, whatever the context). Caller holds the table lock. */
LGI_HIDDEN void lgi_gpu_release_ctx(lgi_tls_t *t, uint64_t c);
/* The site and device of the record whose block holds addr: 0, or -ENOENT. */
LGI_HIDDEN int lgi_gpu_site_of(uint64_t addr, uint32_t *site, int *device);

/* ------------------------------------------------------------------ the vendors
 * How a program's lookups of a vendor's entry points reach its hooks. The dynamic
 * loader's interposition is dl.c's (dlsym, dlvsym, dlopen): it asks these, which ask
 * each vendor in turn (vendors.c: CUDA today). */

/* 1 when name is an entry point a vendor's hooks export from libleakguard.so (its
 * lookup in the global scope is the vendor's to answer). */
LGI_HIDDEN int lgi_gpu_export_name(const char *name);
/* dlsym(RTLD_DEFAULT, name) of such a name. */
LGI_HIDDEN void *lgi_gpu_dlsym_default(void *handle, const char *name);
/* A lookup with an explicit handle gave r for name: 1 when name is a vendor's (its
 * answer, a wrapper bound to r or r itself, in *out), 0 when it is none of theirs. */
LGI_HIDDEN int lgi_gpu_dlsym_result(const char *name, void *r, void **out);

/* CUDA's (gpu/cuda.c). A second vendor brings the same three and a row in vendors.c. */
LGI_HIDDEN int lgi_cuda_export_name(const char *name);
LGI_HIDDEN void *lgi_cuda_dlsym_default(void *handle, const char *name);
LGI_HIDDEN int lgi_cuda_dlsym_result(const char *name, void *r, void **out);

#endif
