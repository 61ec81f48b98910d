/* SPDX-License-Identifier: MIT */
/*
 * symbolize.h - addresses to function, file:line (inlined frames expanded) with
 * elfutils libdwfl, from a module map captured by the recorder. Runs in the
 * collector, never in the target.
 */
#ifndef LG_CORE_SYMBOLIZE_H
#define LG_CORE_SYMBOLIZE_H

#include <stdint.h>

typedef struct lgs_frame {
  uint64_t ip;
  const char *module;   /* basename of the module, or "" */
  const char *function; /* demangled, or "??" */
  const char *file;     /* source path, or "" */
  int line;             /* 0 when unknown */
  int inlined;          /* 1 for a frame inlined into the next one */
} lgs_frame_t;

typedef struct lgs_symbolizer lgs_symbolizer_t;

lgs_symbolizer_t *lgs_new(void);
void lgs_free(lgs_symbolizer_t *s);
/* Adds a module: path, lowest mapped address, load bias (dlpi_addr). 0 or -errno. */
int lgs_add_module(lgs_symbolizer_t *s, const char *path, uint64_t start, uint64_t end, uint64_t bias);
/* Symbolizes the return address ip (looked up at ip-1). Writes up to max frames
 * (innermost first; inlined functions first, their caller last) and returns the
 * count (>= 1). Strings stay valid until lgs_free. */
int lgs_lookup(lgs_symbolizer_t *s, uint64_t ip, lgs_frame_t *out, int max);

/* Demangles a C++ symbol; returns a malloc'd string or NULL. */
char *lgs_demangle(const char *sym);

#endif
