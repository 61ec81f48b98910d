/* SPDX-License-Identifier: MIT */
/*
 * csv.h - the series reader of `leakguard classify` (and of the classifier's
 * evaluator and tests): samples "time,value[,rss]" from a CSV file.
 *
 * Analysis layer, libc only. It allocates, so it is not part of the preload library.
 */
#ifndef LG_ANALYSIS_CSV_H
#define LG_ANALYSIS_CSV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A series read from a CSV file; rss is NULL when the file has no rss column. */
typedef struct lga_series {
  double *t, *v, *rss;
  size_t n, cap;
} lga_series_t;

/* Reads samples "time,value[,rss]" from fp. A header row is optional (recognised
 * when its first field is not a number; columns may then be named time/t/timestamp,
 * value/v/live/bytes, rss/resident in any order), '#' lines are comments, fields may
 * be surrounded by blanks, trailing blank lines are ignored. Consecutive samples with
 * the same time (common in exported monitoring data) are merged into one whose
 * value (and rss) is the mean of theirs. name is used in error messages. On success
 * returns 0 and fills *s (free with lga_series_free). On error returns -1, leaves *s
 * empty and writes one line "NAME:LINE: reason" (or "NAME: reason" when no line
 * applies) to err. Rejects: empty rows, wrong column counts, non-numbers, NaN/Inf, a
 * time before the previous sample's, fewer than 8 (merged) samples. */
int lga_series_read_csv(FILE *fp, const char *name, lga_series_t *s, char *err, size_t errlen);
/* The same, reading at most max_bytes (0: no limit; lga_series_read_csv: the default,
 * LGA_CSV_MAX_BYTES). Lines are at most 4096 bytes. */
#define LGA_CSV_MAX_BYTES (64ULL << 20)
int lga_series_read_csv_max(FILE *fp, const char *name, uint64_t max_bytes, lga_series_t *s, char *err, size_t errlen);

/* Opens path ("-" for stdin: a pipe is read up to max_bytes) and reads it; a path that
 * is not a regular file (a device) is refused, and so is one larger than max_bytes. */
int lga_series_load(const char *path, uint64_t max_bytes, lga_series_t *s, char *err, size_t errlen);

/* Frees a series' arrays and empties it. */
void lga_series_free(lga_series_t *s);

#endif /* LG_ANALYSIS_CSV_H */
