/* SPDX-License-Identifier: MIT */
/*
 * live.c - the live view of `leakguard run` on standard error.
 *
 * On a terminal the view lives in the last lines of the screen, which it reserves with
 * a scroll region (DECSTBM): the program's output, which goes to the same terminal,
 * scrolls above it and is never erased or overwritten. Every change of the screen is
 * one write(2) (the terminal takes one write whole, never mixed with the program's),
 * and every one of them saves the program's cursor first and restores it last (DECSC,
 * DECRC). Every line is cut to the terminal's width, never wrapped. A resize (the
 * collector calls lgv_resized on SIGWINCH) or a stop (lgv_suspend, lgv_resume) sets the
 * region up again; lgv_free gives the whole screen back.
 *
 * Elsewhere (standard error not a terminal, TERM unset or dumb, or a terminal too small
 * for a region) the view is a plain status line every LGV_PLAIN_EVERY_S seconds.
 */
#include "output/live.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"

#define MIN_ROWS 5  /* a smaller terminal gets plain lines */
#define MIN_COLS 20 /* so does a narrower one */
#define OUT_CAP 65536

enum { MODE_PLAIN, MODE_TERM };

struct lgv_view {
  int fd;
  int rows;          /* table rows shown (at most) */
  int mode;          /* MODE_TERM: a terminal that takes escapes */
  int term_rows;     /* the size the region was set up for (0: no region) */
  int term_cols;     /* the width lines are cut to */
  int reserved;      /* lines reserved at the bottom; 0: no region */
  int moved;         /* resized or continued since the region was set up */
  int dead;          /* standard error is gone (EPIPE, EIO): nothing more is written */
  double next_plain; /* elapsed seconds of the next plain line */
  char text[16384];  /* the last frame, lines not cut (redrawn after a resize) */
  size_t text_len;
  char out[OUT_CAP]; /* what one write sends */
  size_t out_len;
};

static int term_size(int fd, int *rows, int *cols) {
  struct winsize ws;
  if (ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) return -1;
  *rows = ws.ws_row;
  *cols = ws.ws_col;
  return 0;
}

lgv_view_t *lgv_new(FILE *out, int rows) {
  lgv_view_t *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  fflush(out);
  v->fd = fileno(out);
  v->rows = rows < 1 ? 1 : (rows > LGV_MAX_ROWS ? LGV_MAX_ROWS : rows);
  const char *term = getenv("TERM");
  v->mode = isatty(v->fd) && term && *term && strcmp(term, "dumb") != 0 ? MODE_TERM : MODE_PLAIN;
  v->next_plain = LGV_PLAIN_EVERY_S;
  return v;
}

/* --- the text ------------------------------------------------------------------- */

size_t lgv_fit(const char *s, size_t len, int cols, char *out, size_t n) {
  size_t o = 0;
  int used = 0;
  if (n == 0) return 0;
  for (size_t i = 0; i < len && s[i] != '\n';) {
    unsigned char ch = (unsigned char)s[i];
    size_t k = 1;
    int w = 1;
    if (ch >= 0x80) { /* one code point, counted 2 wide: a wide one never wraps */
      while (i + k < len && ((unsigned char)s[i + k] & 0xC0) == 0x80 && k < 4) k++;
      w = 2;
    }
    if (cols > 0 && used + w > cols) break;
    if (o + k >= n) break;
    if (ch < 0x20 || ch == 0x7f) out[o++] = '?'; /* no control character reaches the terminal */
    else memcpy(out + o, s + i, k), o += k;
    used += w;
    i += k;
  }
  out[o] = 0;
  return o;
}

/* Renders f, lines not cut; returns the length. */
static size_t render_full(const lgv_frame_t *f, int rows, char *buf, size_t n) {
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
      char where[48] = "";
      if (r->space) snprintf(where, sizeof where, "[GPU%d %s] ", r->device, r->space);
      OUT("  %12s %12s  %-18s %s%s\n", lgu_fmt_bytes(a, sizeof a, r->growth_bps),
          lgu_fmt_bytes(b, sizeof b, r->live_bytes), lg_pattern_name(r->pattern), where, r->label);
    }
  }
#undef OUT
  return len < n ? len : n - 1;
}

/* Every line of text cut to width - 1 columns (the last column is left free: a line
 * never wraps), into buf. */
static size_t fit_lines(const char *text, size_t tlen, int width, char *buf, size_t n) {
  size_t len = 0;
  if (n == 0) return 0;
  buf[0] = 0;
  for (size_t i = 0; i < tlen && len + 1 < n;) {
    const char *nl = memchr(text + i, '\n', tlen - i);
    size_t l = nl ? (size_t)(nl - (text + i)) : tlen - i;
    len += lgv_fit(text + i, l, width > 1 ? width - 1 : 0, buf + len, n - len);
    if (len + 1 < n) buf[len++] = '\n', buf[len] = 0;
    i += l + 1;
  }
  return len;
}

size_t lgv_render(const lgv_frame_t *f, int rows, int width, char *buf, size_t n) {
  char full[16384];
  size_t l = render_full(f, rows, full, sizeof full);
  return fit_lines(full, l, width, buf, n);
}

size_t lgv_render_line(const lgv_frame_t *f, int width, char *buf, size_t n) {
  char full[16384], line[8192], a[32];
  size_t l = render_full(f, 0, full, sizeof full);
  char *nl = memchr(full, '\n', l);
  if (nl) *nl = 0;
  size_t k = (size_t)snprintf(line, sizeof line, "%s", full);
  if (f->nrows > 0 && k < sizeof line)
    snprintf(line + k, sizeof line - k, "  top %s/s %s%s", lgu_fmt_bytes(a, sizeof a, f->rows[0].growth_bps),
             f->rows[0].space ? "[GPU] " : "", f->rows[0].label);
  size_t o = lgv_fit(line, strlen(line), width > 1 ? width - 1 : 0, buf, n > 1 ? n - 1 : n);
  if (o + 1 < n) buf[o++] = '\n', buf[o] = 0;
  return o;
}

/* --- the terminal ---------------------------------------------------------------- */

static void put(lgv_view_t *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(lgv_view_t *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (v->out_len < OUT_CAP) {
    int k = vsnprintf(v->out + v->out_len, OUT_CAP - v->out_len, fmt, ap);
    if (k > 0) v->out_len = v->out_len + (size_t)k < OUT_CAP ? v->out_len + (size_t)k : OUT_CAP - 1;
  }
  va_end(ap);
}

/* Sends what was put, in one write when the terminal takes it (a full one takes the
 * rest in later writes). A closed standard error ends the view, never leakguard
 * (SIGPIPE is held for the write). */
static void flush_out(lgv_view_t *v) {
  size_t len = v->out_len, off = 0;
  v->out_len = 0;
  if (v->dead || len == 0) return;
  sigset_t pipe, old, pending;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  sigpending(&pending);
  int had = sigismember(&pending, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, &old);
  int tries = 0;
  while (off < len) {
    ssize_t k = write(v->fd, v->out + off, len - off);
    if (k > 0) {
      off += (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno == EAGAIN && tries++ < 20) { /* a non-blocking terminal, full: 1 s at most */
      struct pollfd p = {v->fd, POLLOUT, 0};
      poll(&p, 1, 50);
      continue;
    }
    v->dead = 1;
    break;
  }
  if (v->dead && !had) {
    struct timespec zero = {0, 0};
    sigtimedwait(&pipe, NULL, &zero); /* the SIGPIPE this write raised */
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* The program's cursor saved, plain attributes for the view. */
static void begin(lgv_view_t *v) { put(v, "\0337\033[0m"); }
/* The program's cursor and attributes back. */
static void end(lgv_view_t *v) { put(v, "\0338"); }

/* Makes sure k lines are free below the program's cursor, scrolling its lines up (into
 * the scrollback) as needed, the cursor on the same text and column: k INDs (index, no
 * carriage return) then k lines up. The current region's bottom is where it scrolls. */
static void make_room(lgv_view_t *v, int k) {
  if (k <= 0) return;
  for (int i = 0; i < k; i++) put(v, "\033D");
  put(v, "\033[%dA", k);
}

/* The reserved lines drawn from the last frame (between begin and end). */
static void draw_lines(lgv_view_t *v) {
  int top = v->term_rows - v->reserved + 1, i = 0;
  char line[4096];
  for (size_t p = 0; i < v->reserved; i++) {
    size_t l = 0;
    if (p < v->text_len) {
      const char *nl = memchr(v->text + p, '\n', v->text_len - p);
      size_t ll = nl ? (size_t)(nl - (v->text + p)) : v->text_len - p;
      l = lgv_fit(v->text + p, ll, v->term_cols - 1, line, sizeof line);
      p += ll + 1;
    }
    put(v, "\033[%d;1H\033[2K%.*s", top + i, (int)l, line);
  }
}

/* The lines the last frame needs, at most half the screen. */
static int wanted(const lgv_view_t *v, int rows) {
  int n = 0;
  for (size_t i = 0; i < v->text_len; i++) n += v->text[i] == '\n';
  if (n < 1) n = 1;
  int cap = rows / 2;
  return n < cap ? n : cap;
}

static int fits(int rows, int cols) { return rows >= MIN_ROWS && cols >= MIN_COLS; }

/* The whole screen back (the reserved lines cleared), the program's cursor kept. When
 * the size is the one they were drawn at, the reserved lines are where they were drawn;
 * else (a resize) they are below the program's cursor, which gets room first. */
static void release(lgv_view_t *v) {
  if (!v->reserved) return;
  int rows, cols;
  int known = !v->moved && term_size(v->fd, &rows, &cols) == 0 && rows == v->term_rows && cols == v->term_cols;
  if (known) {
    begin(v);
    for (int i = v->term_rows - v->reserved + 1; i <= v->term_rows; i++) put(v, "\033[%d;1H\033[2K", i);
    put(v, "\033[r");
    end(v);
  } else {
    put(v, "\0337\033[r\0338");
    make_room(v, 1);
    put(v, "\0337\033[1B\033[1G\033[J\0338");
  }
  v->reserved = 0;
  v->term_rows = 0;
}

/* The region at the current size, n lines reserved, the last frame drawn in them. */
static void setup(lgv_view_t *v, int rows, int cols, int n) {
  if (v->reserved && !v->moved) {
    /* a larger frame: more lines, the program's lines scrolled up to make room */
    make_room(v, n - v->reserved);
  } else {
    /* the first frame, or the screen changed under the region: the terminal may have
     * reset the region and moved or rewrapped the reserved lines; they are below the
     * program's cursor, which gets room, and everything below it is cleared */
    put(v, "\0337\033[r\0338");
    make_room(v, n);
    if (v->reserved) put(v, "\0337\033[1B\033[1G\033[J\0338");
  }
  v->term_rows = rows;
  v->term_cols = cols;
  v->reserved = n;
  v->moved = 0;
  begin(v);
  put(v, "\033[1;%dr", rows - n); /* homes the cursor: begin saved it */
  draw_lines(v);
  end(v);
}

/* The last frame shown on the terminal at its current size. */
static void show(lgv_view_t *v) {
  int rows, cols;
  if (term_size(v->fd, &rows, &cols) != 0 || !fits(rows, cols)) {
    release(v);
    flush_out(v);
    return;
  }
  if (rows != v->term_rows || cols != v->term_cols) v->moved = 1;
  int n = wanted(v, rows);
  if (v->reserved && !v->moved && n <= v->reserved) { /* never shrinks while the size holds */
    begin(v);
    draw_lines(v);
    end(v);
  } else {
    setup(v, rows, cols, n);
  }
  flush_out(v);
}

void lgv_draw(lgv_view_t *v, const lgv_frame_t *f) {
  if (v->dead) return;
  int rows = 0, cols = 0;
  int sized = term_size(v->fd, &rows, &cols) == 0;
  if (v->mode == MODE_TERM && sized && fits(rows, cols)) {
    v->text_len = render_full(f, v->rows, v->text, sizeof v->text);
    show(v);
    return;
  }
  if (v->reserved) { /* a terminal grown too small: the screen back, plain lines now */
    release(v);
    flush_out(v);
  }
  if (f->elapsed_s < v->next_plain) return;
  while (v->next_plain <= f->elapsed_s) v->next_plain += LGV_PLAIN_EVERY_S;
  char line[8192];
  size_t l = lgv_render_line(f, sized ? cols : 0, line, sizeof line);
  if (l < sizeof line) memcpy(v->out, line, l), v->out_len = l;
  flush_out(v);
}

void lgv_resized(lgv_view_t *v) {
  if (!v || v->dead || v->mode != MODE_TERM) return;
  if (v->reserved) v->moved = 1;
  if (v->text_len) show(v);
}

void lgv_suspend(lgv_view_t *v) {
  if (!v || v->dead || !v->reserved) return;
  release(v);
  flush_out(v);
}

void lgv_resume(lgv_view_t *v) {
  if (!v || v->dead || v->mode != MODE_TERM || !v->text_len) return;
  show(v);
}

void lgv_free(lgv_view_t *v) {
  if (!v) return;
  if (!v->dead && v->reserved) {
    release(v);
    flush_out(v);
  }
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
