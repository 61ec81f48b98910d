/* SPDX-License-Identifier: MIT */
/*
 * csv.c - the CSV series reader (see csv.h). Hand-written rather than a CSV library:
 * the format is two or three numeric columns, and the error messages must name the
 * line and column, which is most of this file.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>
#include <time.h>

#include "analysis/csv.h"

void lga_series_free(lga_series_t *s) {
  free(s->t);
  free(s->v);
  free(s->rss);
  memset(s, 0, sizeof *s);
}

/* Appends one sample; returns 0 or -1 when out of memory. */
static int series_push(lga_series_t *s, double t, double v, const double *rss) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 256;
    double *nt = realloc(s->t, cap * sizeof *nt);
    if (nt) s->t = nt;
    double *nv = realloc(s->v, cap * sizeof *nv);
    if (nv) s->v = nv;
    double *nr = s->rss;
    if (rss) {
      nr = realloc(s->rss, cap * sizeof *nr);
      if (nr) s->rss = nr;
    }
    if (!nt || !nv || (rss && !nr)) return -1;
    s->cap = cap;
  }
  s->t[s->n] = t;
  s->v[s->n] = v;
  if (rss) s->rss[s->n] = *rss;
  s->n++;
  return 0;
}

/* Trims blanks (and one pair of double quotes) in place; returns the start. */
static char *trim(char *p) {
  while (isspace((unsigned char)*p)) p++;
  char *e = p + strlen(p);
  while (e > p && isspace((unsigned char)e[-1])) *--e = 0;
  if (e - p >= 2 && *p == '"' && e[-1] == '"') {
    e[-1] = 0;
    p++;
  }
  return p;
}

/* Splits line at commas into at most max fields (trimmed); returns the field count
 * (which may exceed max: extra fields are counted but not stored). */
static int split_fields(char *line, char **fields, int max) {
  int nf = 0;
  char *p = line;
  for (;;) {
    char *comma = strchr(p, ',');
    if (comma) *comma = 0;
    if (nf < max) fields[nf] = trim(p);
    nf++;
    if (!comma) return nf;
    p = comma + 1;
  }
}

/* Parses a whole field as a number; returns 0 or -1. */
static int parse_number(const char *f, double *out) {
  char *end;
  if (!*f) return -1;
  errno = 0;
  double x = strtod(f, &end);
  if (end == f || *end) return -1;
  *out = x;
  return 0;
}

/* A byte unit ("B", "KiB", "MiB", "GiB", "TiB", "kB", "MB", "GB", "TB") as a factor,
 * 0 when s is none of them. */
static double unit_factor(const char *s) {
  static const struct {
    const char *name;
    double f;
  } u[] = {{"B", 1},    {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
           {"kB", 1e3}, {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12}};
  for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
    if (!strcmp(s, u[i].name)) return u[i].f;
  return 0;
}

/* A date and time, as nvidia-smi's --query-gpu=timestamp writes it ("2026/12/04
 * 10:00:00.000") or ISO 8601 ("2026-12-04T10:00:00.5", "2026-12-04 10:00:00"), read as
 * UTC: seconds since the epoch (only differences between samples matter). 0 or -1.
 * sscanf and timegm, not strptime: strptime has no fractional seconds. */
static int parse_datetime(const char *f, double *out) {
  int y, mo, d, h, mi, n = 0;
  double sec;
  char s1, s2, sep;
  if (sscanf(f, "%4d%c%2d%c%2d%c%2d:%2d:%lf%n", &y, &s1, &mo, &s2, &d, &sep, &h, &mi, &sec, &n) != 9 || f[n] ||
      s1 != s2 || (s1 != '/' && s1 != '-') || (sep != ' ' && sep != 'T') || mo < 1 || mo > 12 || d < 1 || d > 31 ||
      h > 23 || mi > 59 || !(sec >= 0 && sec < 61))
    return -1;
  struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
  time_t t = timegm(&tm);
  if (t == (time_t)-1) return -1;
  *out = (double)t + sec;
  return 0;
}

/* A field: a number, a number with a byte unit ("1234 MiB", nvidia-smi's memory.used),
 * or a date and time (parse_datetime). 0 or -1. */
static int parse_field(const char *f, double *out) {
  if (!parse_number(f, out)) return 0;
  char *end;
  errno = 0;
  double x = strtod(f, &end);
  if (end != f) {
    while (*end == ' ') end++;
    double k = unit_factor(end);
    if (k > 0) {
      *out = x * k;
      return 0;
    }
  }
  return parse_datetime(f, out);
}

enum { COL_TIME, COL_VALUE, COL_RSS, COL_UNKNOWN };

/* Role of a header name. */
static int column_role(const char *name) {
  static const char *const times[] = {"time", "t", "timestamp", "ts", "seconds", "time_s", "t_s", "elapsed", NULL};
  static const char *const values[] = {"value", "v",      "live", "live_bytes",  "bytes",
                                       "used",  "memory", "mem",  "memory.used", NULL};
  static const char *const rsss[] = {"rss", "rss_bytes", "resident", NULL};
  for (int i = 0; times[i]; i++)
    if (!strcasecmp(name, times[i])) return COL_TIME;
  for (int i = 0; values[i]; i++)
    if (!strcasecmp(name, values[i])) return COL_VALUE;
  for (int i = 0; rsss[i]; i++)
    if (!strcasecmp(name, rsss[i])) return COL_RSS;
  return COL_UNKNOWN;
}

/* Formats a short, printable excerpt of a field for an error message. */
static const char *excerpt(const char *f, char *buf, size_t len) {
  snprintf(buf, len, "%.24s%s", f, strlen(f) > 24 ? "..." : "");
  return buf;
}

/* One line of at most LGA_CSV_LINE_MAX bytes into buf (NUL-terminated, the newline
 * kept out): its length, -1 at the end, -2 when it is longer (the rest of it is not
 * read: a file without newlines, /dev/zero, must not be read whole). *total counts
 * the bytes read. Hand-written rather than getline(), whose line grows without bound. */
#define LGA_CSV_LINE_MAX 4096
static long read_line(FILE *fp, char *buf, uint64_t *total) {
  long n = 0;
  int c;
  while ((c = getc_unlocked(fp)) != EOF) {
    (*total)++;
    if (c == '\n') break;
    if (n == LGA_CSV_LINE_MAX) return -2;
    buf[n++] = (char)c;
  }
  buf[n] = 0;
  return c == EOF && n == 0 ? -1 : n;
}

int lga_series_read_csv(FILE *fp, const char *name, lga_series_t *s, char *err, size_t errlen) {
  return lga_series_read_csv_max(fp, name, LGA_CSV_MAX_BYTES, s, err, errlen);
}

int lga_series_read_csv_max(FILE *fp, const char *name, uint64_t max_bytes, lga_series_t *s, char *err, size_t errlen) {
  char *line = malloc(LGA_CSV_LINE_MAX + 1), *fields[3], ex[32];
  long lineno = 0, blank = 0, merged = 1, got;
  uint64_t total = 0;
  int ncols = 0, role[3] = {COL_TIME, COL_VALUE, COL_RSS}, header_done = 0;
  double scale[3] = {1, 1, 1}; /* a unit the header names: plain numbers in it */
  memset(s, 0, sizeof *s);
  err[0] = 0;
  if (!line) {
    snprintf(err, errlen, "%s: out of memory", name);
    return -1;
  }
  while ((got = read_line(fp, line, &total)) != -1) {
    lineno++;
    if (got == -2) {
      snprintf(err, errlen, "%s:%ld: line longer than %d bytes: not a CSV of samples", name, lineno, LGA_CSV_LINE_MAX);
      goto fail;
    }
    if (max_bytes && total > max_bytes) {
      snprintf(err, errlen, "%s: larger than %llu bytes (--max-bytes raises the limit)", name,
               (unsigned long long)max_bytes);
      goto fail;
    }
    char *p = trim(line);
    if (!*p) {
      if (!blank) blank = lineno;
      continue;
    }
    if (*p == '#') continue;
    if (blank && (s->n || header_done)) {
      snprintf(err, errlen, "%s:%ld: empty row", name, blank);
      goto fail;
    }
    blank = 0;
    int nf = split_fields(p, fields, 3);
    if (nf < 2 || nf > 3 || (ncols && nf != ncols)) {
      if (ncols) snprintf(err, errlen, "%s:%ld: expected %d columns, got %d", name, lineno, ncols, nf);
      else snprintf(err, errlen, "%s:%ld: expected 2 or 3 columns (time,value[,rss]), got %d", name, lineno, nf);
      goto fail;
    }
    double x[3];
    if (!header_done && !s->n && parse_field(fields[0], &x[0])) {
      /* Header row: map known names, otherwise keep positional roles. */
      int r[3], seen[3] = {0}, known = 1;
      for (int i = 0; i < nf; i++) {
        /* nvidia-smi names a column's unit: "memory.used [MiB]" (its values are plain
         * numbers with --format=csv,nounits) */
        char *br = strrchr(fields[i], '[');
        size_t bl = br ? strlen(br) : 0;
        if (br && bl > 2 && br[bl - 1] == ']') {
          br[bl - 1] = 0;
          scale[i] = unit_factor(br + 1);
          if (!(scale[i] > 0)) scale[i] = 1;
          *br = 0;
          fields[i] = trim(fields[i]);
        }
        r[i] = column_role(fields[i]);
        if (r[i] == COL_UNKNOWN || seen[r[i]]++) known = 0;
      }
      if (known && seen[COL_TIME] && seen[COL_VALUE]) memcpy(role, r, sizeof r);
      ncols = nf;
      header_done = 1;
      continue;
    }
    header_done = 1;
    ncols = nf;
    double tv = 0, vv = 0, rv = 0;
    for (int i = 0; i < nf; i++) {
      if (!*fields[i]) {
        snprintf(err, errlen, "%s:%ld: column %d is empty", name, lineno, i + 1);
        goto fail;
      }
      if (!parse_number(fields[i], &x[i])) x[i] *= scale[i];
      else if (parse_field(fields[i], &x[i])) {
        snprintf(err, errlen, "%s:%ld: column %d: '%s' is not a number, a size or a date", name, lineno, i + 1,
                 excerpt(fields[i], ex, sizeof ex));
        goto fail;
      }
      if (!isfinite(x[i])) {
        snprintf(err, errlen, "%s:%ld: column %d: non-finite value '%s'", name, lineno, i + 1,
                 excerpt(fields[i], ex, sizeof ex));
        goto fail;
      }
      if (role[i] == COL_TIME) tv = x[i];
      else if (role[i] == COL_VALUE) vv = x[i];
      else rv = x[i];
    }
    if (s->n && tv < s->t[s->n - 1]) {
      snprintf(err, errlen, "%s:%ld: time %.17g is before the previous sample's %.17g", name, lineno, tv,
               s->t[s->n - 1]);
      goto fail;
    }
    if (s->n && tv == s->t[s->n - 1]) {
      /* Same time as the previous sample: merged, the running mean of the values.
       * Written as mean + (x - mean) / k so that it stays finite for any finite
       * inputs (a sum of values near DBL_MAX would overflow). */
      merged++;
      s->v[s->n - 1] += (vv - s->v[s->n - 1]) / (double)merged;
      if (s->rss) s->rss[s->n - 1] += (rv - s->rss[s->n - 1]) / (double)merged;
      continue;
    }
    merged = 1;
    if (series_push(s, tv, vv, nf == 3 ? &rv : NULL)) {
      snprintf(err, errlen, "%s:%ld: out of memory", name, lineno);
      goto fail;
    }
  }
  if (ferror(fp)) {
    snprintf(err, errlen, "%s: read error", name);
    goto fail;
  }
  if (s->n < 8) {
    snprintf(err, errlen, "%s: need at least 8 samples, got %zu", name, s->n);
    goto fail;
  }
  free(line);
  return 0;
fail:
  free(line);
  lga_series_free(s);
  return -1;
}

int lga_series_load(const char *path, uint64_t max_bytes, lga_series_t *s, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  int is_stdin = !strcmp(path, "-");
  FILE *fp = is_stdin ? stdin : fopen(path, "re");
  if (!fp) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  /* a regular file, or standard input (a pipe); never a device (/dev/zero) */
  if (!is_stdin && (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode))) {
    snprintf(err, errlen, "%s: not a regular file", path);
    fclose(fp);
    return -1;
  }
  if (!is_stdin && max_bytes && (uint64_t)st.st_size > max_bytes) {
    snprintf(err, errlen, "%s: %llu bytes, more than %llu (--max-bytes raises the limit)", path,
             (unsigned long long)st.st_size, (unsigned long long)max_bytes);
    fclose(fp);
    return -1;
  }
  int rc = lga_series_read_csv_max(fp, is_stdin ? "<stdin>" : path, max_bytes, s, err, errlen);
  if (!is_stdin) fclose(fp);
  return rc;
}
