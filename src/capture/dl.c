/* SPDX-License-Identifier: MIT */
/*
 * dl.c - libleakguard.so: dlopen() and dlmopen(), so that loading a library cannot
 * take its allocator calls past the hooks.
 *
 * RTLD_DEEPBIND makes the loaded library look up symbols in its own dependencies
 * first: its free and realloc bind to glibc's, while the blocks it receives from the
 * program (or from glibc's own strdup, which reaches our malloc) carry our header, and
 * glibc aborts ("free(): invalid size"). As heaptrack does, the flag is dropped, with
 * one warning line per process. dlmopen(LM_ID_NEWLM) loads into a namespace of its
 * own, with its own copy of libc and its own heap, where no preloaded library exists:
 * its allocations are not recorded (said once), and cannot meet ours (a block freed
 * across namespaces is an error bare, too).
 *
 * Both hooks end in a tail call to the real function. dlopen() looks for a library
 * without a slash in the RUNPATH of its *caller*, found from its return address:
 * with a tail call that is still the program's address, not ours.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "capture/recorder.h"
#include "leakguard.h"

typedef void *(*dlopen_fn)(const char *, int);
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);

static dlopen_fn real_dlopen;
static dlmopen_fn real_dlmopen;
static atomic_int said_deepbind, said_newlm;

/* The file name for a message: its last 200 characters. */
static const char *short_name(const char *file) {
  if (!file) return "(the program)";
  size_t n = strlen(file);
  return n > 200 ? file + n - 200 : file;
}

static int drop_deepbind(const char *file, int mode) {
  if (!(mode & RTLD_DEEPBIND)) return mode;
  if (!atomic_exchange(&said_deepbind, 1))
    lgi_say("dlopen(\"", short_name(file),
            "\", RTLD_DEEPBIND): flag dropped, so that the library's malloc and free stay "
            "leakguard's (not reported again)");
  return mode & ~RTLD_DEEPBIND;
}

LG_API void *dlopen(const char *file, int mode) {
  if (LGI_UNLIKELY(!real_dlopen)) {
    real_dlopen = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
    if (!real_dlopen) return NULL;
  }
  mode = drop_deepbind(file, mode);
  return real_dlopen(file, mode); /* tail call: the caller's RUNPATH applies */
}

LG_API void *dlmopen(Lmid_t lmid, const char *file, int mode) {
  if (LGI_UNLIKELY(!real_dlmopen)) {
    real_dlmopen = (dlmopen_fn)dlsym(RTLD_NEXT, "dlmopen");
    if (!real_dlmopen) return NULL;
  }
  if (lmid == LM_ID_BASE) {
    mode = drop_deepbind(file, mode);
  } else if (lgi_g.enabled && !atomic_exchange(&said_newlm, 1)) {
    /* Another namespace: DEEPBIND is harmless there (we are not in it). */
    lgi_say("dlmopen(\"", short_name(file),
            "\") into another link-map namespace: that namespace has its own libc and heap, "
            "its allocations are not recorded (not reported again)");
  }
  return real_dlmopen(lmid, file, mode);
}
