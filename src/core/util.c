/* SPDX-License-Identifier: MIT */
/* util.c - errors, clocks, formatting and /proc, /sys readers for the collector. */
#include "core/util.h"

#include "core/sysmem.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void lgu_err(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  for (char *p = buf; *p; p++)
    if (*p == '\n') *p = ' ';
  fprintf(stderr, "leakguard: %s\n", buf);
}

uint64_t lgu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t lgu_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

const char *lgu_fmt_bytes(char *buf, size_t n, double b) {
  static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double a = fabs(b);
  int i = 0;
  while (a >= 1024.0 && i < 5) {
    a /= 1024.0;
    b /= 1024.0;
    i++;
  }
  if (i == 0) snprintf(buf, n, "%.0f B", b);
  else snprintf(buf, n, "%.*f %s", a < 10 ? 2 : (a < 100 ? 1 : 0), b, u[i]);
  return buf;
}

const char *lgu_fmt_duration(char *buf, size_t n, double s) {
  if (!(s >= 0) || isinf(s)) snprintf(buf, n, "never");
  else if (s < 60) snprintf(buf, n, "%.1fs", s);
  else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
  else if (s < 86400 * 2) snprintf(buf, n, "%.1fh", s / 3600);
  else snprintf(buf, n, "%.1fd", s / 86400);
  return buf;
}

int lgu_parse_size(const char *s, uint64_t *out) {
  if (!s || !*s) return -EINVAL;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0) || isinf(v)) return -EINVAL;
  double mul = 1;
  if (*end) {
    switch (*end) {
    case 'k':
    case 'K': mul = 1024.0; break;
    case 'm':
    case 'M': mul = 1024.0 * 1024; break;
    case 'g':
    case 'G': mul = 1024.0 * 1024 * 1024; break;
    case 't':
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
    case 'b':
    case 'B': break;
    default: return -EINVAL;
    }
    end++;
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end) return -EINVAL;
  }
  double r = v * mul;
  if (r >= 1.8e19) return -EINVAL;
  *out = (uint64_t)r;
  return 0;
}

int lgu_parse_double(const char *s, double *out) {
  if (!s || !*s) return -EINVAL;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v)) return -EINVAL;
  *out = v;
  return 0;
}

int lgu_parse_long(const char *s, long lo, long hi, long *out) {
  if (!s || !*s) return -EINVAL;
  errno = 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (errno || *end) return -EINVAL;
  if (v < lo || v > hi) return -ERANGE;
  *out = v;
  return 0;
}

FILE *lgu_fopen_new(const char *path) {
  if (unlink(path) != 0 && errno != ENOENT) return NULL;
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return NULL;
  FILE *f = fdopen(fd, "w");
  if (!f) close(fd);
  return f;
}

long lgu_read_file(const char *path, char *buf, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  size_t got = 0;
  while (got + 1 < n) {
    ssize_t k = read(fd, buf + got, n - 1 - got);
    if (k < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      return -e;
    }
    if (k == 0) break;
    got += (size_t)k;
  }
  buf[got] = 0;
  close(fd);
  return (long)got;
}

void lgu_read_cmdline(int pid, char *out, size_t n) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
  long k = lgu_read_file(path, buf, sizeof buf);
  if (k <= 0) {
    out[0] = 0;
    return;
  }
  while (k > 1 && buf[k - 1] == 0 && buf[k - 2] == 0) k--;
  for (long i = 0; i < k - 1; i++)
    if (buf[i] == 0) buf[i] = ' ';
  snprintf(out, n, "%s", buf);
}

uint64_t lgu_rss_bytes(int pid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/statm", pid);
  if (lgu_read_file(path, buf, sizeof buf) <= 0) return 0;
  unsigned long size = 0, res = 0;
  if (sscanf(buf, "%lu %lu", &size, &res) != 2) return 0;
  return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}
