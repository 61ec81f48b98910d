/* SPDX-License-Identifier: MIT */
/*
 * symbolize.h - addresses to function, file:line (inlined frames expanded) with
 * elfutils libdwfl, from a module map captured by the recorder. Runs in the
 * collector, never in the target.
 */
#ifndef LG_CORE_SYMBOLIZE_H
#define LG_CORE_SYMBOLIZE_H

#include <stddef.h>
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
typedef struct lgs_files lgs_files_t;

/* The files every process's symbolizer shares (symbolize.c): each ELF file's debug
 * information, symbol index and symbolized addresses, read once per run. The
 * symbolizers of one lgs_files_t add modules and look up in one thread at a time;
 * strings stay valid until lgs_files_free. */
lgs_files_t *lgs_files_new(void);
void lgs_files_free(lgs_files_t *fs);
/* One process's symbolizer: its map of address ranges to files. */
lgs_symbolizer_t *lgs_new(lgs_files_t *fs);
void lgs_free(lgs_symbolizer_t *s);
/* Adds a module: path, lowest mapped address, load bias (dlpi_addr). 0 or -errno. */
int lgs_add_module(lgs_symbolizer_t *s, const char *path, uint64_t start, uint64_t end, uint64_t bias);
/* Symbolizes the return address ip (looked up at ip-1). Writes up to max frames
 * (innermost first; inlined functions first, their caller last) and returns the
 * count (>= 1). Strings stay valid until lgs_files_free. */
int lgs_lookup(lgs_symbolizer_t *s, uint64_t ip, lgs_frame_t *out, int max);

/* Tests (test_symbolize.c): slow 1 makes the symbol indexes built from now on take
 * each symbol through libdwfl, the path symbolize.c's direct read of the table must
 * agree with. Returns how many indexes were read directly so far. */
size_t lgs_files_symtab_test(lgs_files_t *fs, int slow);

/* Demangles a C++ symbol; returns a malloc'd string or NULL. */
char *lgs_demangle(const char *sym);

#endif
