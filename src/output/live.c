/* SPDX-License-Identifier: MIT */
/* live.c - the live view: a small table redrawn in place with ANSI escapes. */
#include "output/live.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "core/util.h"

struct lgv_view {
  FILE *out;
  int rows;
  int drawn_lines;
};

lgv_view_t *lgv_new(FILE *out, int rows) {
  lgv_view_t *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  v->out = out;
  v->rows = rows < 1 ? 1 : (rows > LGV_MAX_ROWS ? LGV_MAX_ROWS : rows);
  return v;
}

static void clear(lgv_view_t *v) {
  for (int i = 0; i < v->drawn_lines; i++) fputs("\033[1A\033[2K", v->out);
  v->drawn_lines = 0;
}

void lgv_free(lgv_view_t *v) {
  if (!v) return;
  clear(v);
  fflush(v->out);
  free(v);
}

void lgv_add_row(lgv_frame_t *f, const lgv_row_t *row) {
  int at = f->nrows;
  if (at == LGV_MAX_ROWS) {
    if (row->growth_bps <= f->rows[LGV_MAX_ROWS - 1].growth_bps) return;
    at = LGV_MAX_ROWS - 1;
  } else {
    f->nrows++;
  }
  while (at > 0 && f->rows[at - 1].growth_bps < row->growth_bps) {
    f->rows[at] = f->rows[at - 1];
    at--;
  }
  f->rows[at] = *row;
}

size_t lgv_render(const lgv_frame_t *f, int rows, int width, char *buf, size_t n) {
  char a[32], b[32], c[32], d[32], e[32];
  size_t len = 0;
#define OUT(...)                                                                                                       \
  do {                                                                                                                 \
    if (len < n) len += (size_t)snprintf(buf + len, n - len, __VA_ARGS__);                                             \
  } while (0)
  double headroom = f->limit > f->usage ? (double)(f->limit - f->usage) : 0;
  double tto = f->growth_bps > 0 ? headroom / f->growth_bps : INFINITY;
  OUT("leakguard %6.1fs  pid %d%s  live %s  rss %s  growth %s/s  OOM %s (limit %s, %s)", f->elapsed_s, f->pid,
      f->nprocs > 1 ? " +children" : "", lgu_fmt_bytes(a, sizeof a, (double)f->live_bytes),
      lgu_fmt_bytes(b, sizeof b, (double)f->rss_bytes), lgu_fmt_bytes(c, sizeof c, f->growth_bps),
      lgu_fmt_duration(d, sizeof d, tto), lgu_fmt_bytes(e, sizeof e, (double)f->limit),
      f->limit_source ? f->limit_source : "physical");
  if (f->steps) OUT("  steps %llu", (unsigned long long)f->steps);
  if (f->dropped) OUT("  DROPPED %llu", (unsigned long long)f->dropped);
  OUT("\n");
  if (f->gpu_bytes) {
    double gh = f->gpu_total > f->gpu_usage ? (double)(f->gpu_total - f->gpu_usage) : 0;
    OUT("  GPU live %s  growth %s/s", lgu_fmt_bytes(a, sizeof a, (double)f->gpu_bytes),
        lgu_fmt_bytes(b, sizeof b, f->gpu_growth_bps));
    if (f->gpu_total)
      OUT("  OOM %s (GPU memory %s)",
          lgu_fmt_duration(d, sizeof d, f->gpu_growth_bps > 0 ? gh / f->gpu_growth_bps : INFINITY),
          lgu_fmt_bytes(c, sizeof c, (double)f->gpu_total));
    OUT("\n");
  }
  if (f->nrows == 0) {
    OUT("  no growing allocation site yet\n");
  } else {
    OUT("  %12s %12s  %-18s %s\n", "GROWTH/s", "LIVE", "PATTERN", "SITE");
    for (int i = 0; i < f->nrows && i < rows; i++) {
      const lgv_row_t *r = &f->rows[i];
      char line[1024], where[48] = "";
      if (r->space) snprintf(where, sizeof where, "[GPU%d %s] ", r->device, r->space);
      snprintf(line, sizeof line, "  %12s %12s  %-18s %s%s", lgu_fmt_bytes(a, sizeof a, r->growth_bps),
               lgu_fmt_bytes(b, sizeof b, r->live_bytes), lg_pattern_name(r->pattern), where, r->label);
      if (width > 10 && (int)strlen(line) > width - 1) line[width - 1] = 0;
      OUT("%s\n", line);
    }
  }
#undef OUT
  return len < n ? len : n - 1;
}

void lgv_draw(lgv_view_t *v, const lgv_frame_t *f) {
  struct winsize ws;
  int width = 120;
  if (ioctl(fileno(v->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) width = ws.ws_col;
  char buf[16384];
  size_t len = lgv_render(f, v->rows, width, buf, sizeof buf);
  clear(v);
  fwrite(buf, 1, len, v->out);
  for (size_t i = 0; i < len; i++)
    if (buf[i] == '\n') v->drawn_lines++;
  fflush(v->out);
}
