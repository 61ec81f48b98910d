/* SPDX-License-Identifier: MIT */
/* live.h - the live terminal view of `leakguard run` (stderr, refreshed every interval). */
#ifndef LG_OUTPUT_LIVE_H
#define LG_OUTPUT_LIVE_H

#include <stdint.h>
#include <stdio.h>

#include "leakguard.h"

typedef struct lgv_row {
  double growth_bps, live_bytes;
  lg_pattern_t pattern;
  int pid;
  const char *label;
  const char *space; /* NULL for host memory; "device", "managed", "pinned" */
  int device;        /* GPU ordinal when space is set */
} lgv_row_t;

#define LGV_MAX_ROWS 64
typedef struct lgv_frame {
  double elapsed_s;
  int pid, nprocs;
  char command[256];
  int64_t live_bytes;
  uint64_t rss_bytes, steps, dropped, limit, usage;
  const char *limit_source;
  double growth_bps;     /* sum over growing host sites */
  int64_t gpu_bytes;     /* GPU memory recorded (device + managed + pinned); 0: no line */
  uint64_t gpu_total;    /* the GPUs' memory (0 unknown) */
  uint64_t gpu_usage;    /* device + managed bytes, what grows toward gpu_total */
  double gpu_growth_bps; /* sum over growing device and managed sites */
  lgv_row_t rows[LGV_MAX_ROWS];
  int nrows;
} lgv_frame_t;

typedef struct lgv_view lgv_view_t;

lgv_view_t *lgv_new(FILE *out, int rows);
void lgv_free(lgv_view_t *v); /* clears the view */
/* Keeps the rows with the fastest growth. The row is copied, its label is not: it
 * must live until the frame is drawn. */
void lgv_add_row(lgv_frame_t *f, const lgv_row_t *row);
void lgv_draw(lgv_view_t *v, const lgv_frame_t *f);
/* Renders f into buf as plain text lines (what lgv_draw shows); returns length. */
size_t lgv_render(const lgv_frame_t *f, int rows, int width, char *buf, size_t n);

#endif
