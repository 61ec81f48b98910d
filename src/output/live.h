/* SPDX-License-Identifier: MIT */
/*
 * live.h - the live view of `leakguard run` (standard error, refreshed every live tick).
 *
 * On a terminal (TERM set, not dumb, at least 5 rows and 20 columns) the view keeps the
 * last lines of the screen for itself with a scroll region: the program's output, on
 * the same terminal, scrolls above it and is never erased; every line is cut to the
 * width. Elsewhere it is a plain status line every LGV_PLAIN_EVERY_S seconds.
 */
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

#define LGV_PLAIN_EVERY_S 10.0

/* A view on out (standard error) of at most rows table rows. */
lgv_view_t *lgv_new(FILE *out, int rows);
/* Clears the view and gives the terminal its whole screen back (the region reset, the
 * program's cursor where it was). */
void lgv_free(lgv_view_t *v);
/* The terminal was resized (SIGWINCH): the region set up again at the new size, the
 * last frame redrawn. */
void lgv_resized(lgv_view_t *v);
/* Before leakguard stops (SIGTSTP): the whole screen back; lgv_resume, after SIGCONT,
 * sets the region up again. */
void lgv_suspend(lgv_view_t *v);
void lgv_resume(lgv_view_t *v);
/* Keeps the rows with the fastest growth. The row is copied, its label is not: it
 * must live until the frame is drawn. */
void lgv_add_row(lgv_frame_t *f, const lgv_row_t *row);
void lgv_draw(lgv_view_t *v, const lgv_frame_t *f);
/* Renders f into buf as plain text lines (what lgv_draw shows on a terminal of width
 * columns; each line cut to width - 1 columns, no line wraps; width 0: not cut);
 * returns the length. */
size_t lgv_render(const lgv_frame_t *f, int rows, int width, char *buf, size_t n);
/* The plain status line (one line, no escapes, '\n'-terminated; cut like lgv_render's). */
size_t lgv_render_line(const lgv_frame_t *f, int width, char *buf, size_t n);
/* The first line of s (len bytes) cut to cols columns (0: not cut) into out (n bytes,
 * NUL-terminated): a multibyte character counts 2 columns and is never split, a
 * control character becomes '?'. Returns the length. */
size_t lgv_fit(const char *s, size_t len, int cols, char *out, size_t n);

#endif
