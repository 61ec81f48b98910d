/* SPDX-License-Identifier: MIT */
/* util.h - small helpers shared by the collector side: errors, time, formatting. */
#ifndef LG_CORE_UTIL_H
#define LG_CORE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Prints "leakguard: <message>" as one line on stderr. */
void lgu_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

uint64_t lgu_now_ns(void);  /* CLOCK_MONOTONIC */
uint64_t lgu_wall_ns(void); /* CLOCK_REALTIME */

/* Human-readable bytes ("1.5 MiB"); writes into buf and returns it. */
const char *lgu_fmt_bytes(char *buf, size_t n, double bytes);
/* Human-readable duration ("3m12s", "2.4h", "never"); negative or inf -> "never". */
const char *lgu_fmt_duration(char *buf, size_t n, double seconds);

/* Parses a size with optional K/M/G/T suffix (binary, e.g. "512M", "2GiB", "4096").
 * Returns 0 or -EINVAL. */
int lgu_parse_size(const char *s, uint64_t *out);
/* Parses a finite decimal number (callers check the range). Returns 0 or -EINVAL. */
int lgu_parse_double(const char *s, double *out);
/* Parses a decimal integer within [lo, hi]. Returns 0, -EINVAL or -ERANGE. */
int lgu_parse_long(const char *s, long lo, long hi, long *out);

/* Resident set size of pid in bytes, or 0. */
uint64_t lgu_rss_bytes(int pid);
/* pid's command line from /proc (arguments joined by spaces; the NULs a title written
 * over the arguments leaves behind, as setproctitle does, dropped), "" when unreadable. */
void lgu_read_cmdline(int pid, char *out, size_t n);

/* Reads a whole small file into buf (NUL-terminated); returns bytes or -errno. */
long lgu_read_file(const char *path, char *buf, size_t n);
/* A new file at path for writing, ours alone: a stale one left by an earlier write is
 * removed, then path is created with O_EXCL|O_NOFOLLOW (mode 0644, as before: a root
 * collector's target may run as another user and read it): a planted file or
 * symbolic link is never written through. For the temporary names renamed over the
 * run directory's exchange files. NULL with errno. */
FILE *lgu_fopen_new(const char *path);

#endif
