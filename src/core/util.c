/* SPDX-License-Identifier: MIT */
/* util.c - errors, clocks, formatting and /proc, /sys readers for the collector. */
#include "core/util.h"

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
    case 'k': case 'K': mul = 1024.0; break;
    case 'm': case 'M': mul = 1024.0 * 1024; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
    case 'b': case 'B': break;
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

static uint64_t meminfo(const char *key) {
  char buf[8192];
  if (lgu_read_file("/proc/meminfo", buf, sizeof buf) <= 0) return 0;
  char *p = strstr(buf, key);
  if (!p) return 0;
  return strtoull(p + strlen(key), NULL, 10) * 1024ULL;
}

/* Path of our memory cgroup directory: v2 ("0::/path") or v1 memory controller. */
static int cgroup_dir(char *out, size_t n, int *v2) {
  char buf[4096];
  if (lgu_read_file("/proc/self/cgroup", buf, sizeof buf) <= 0) return -1;
  for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
    char *c1 = strchr(line, ':');
    if (!c1) continue;
    char *c2 = strchr(c1 + 1, ':');
    if (!c2) continue;
    *c2 = 0;
    const char *ctrl = c1 + 1, *path = c2 + 1;
    if (strstr(ctrl, "memory")) {
      snprintf(out, n, "/sys/fs/cgroup/memory%s", path);
      *v2 = 0;
      return 0;
    }
    if (!*ctrl) {
      snprintf(out, n, "/sys/fs/cgroup%s", path);
      char probe[4200];
      snprintf(probe, sizeof probe, "%s/memory.max", out);
      if (access(probe, R_OK) != 0) { /* hybrid: v2 under unified/ */
        snprintf(out, n, "/sys/fs/cgroup/unified%s", path);
      }
      *v2 = 1;
    }
  }
  return *v2 ? 0 : -1;
}

static uint64_t cgroup_value(const char *file_v2, const char *file_v1) {
  char dir[4096], path[4200], buf[128];
  int v2 = 0;
  if (cgroup_dir(dir, sizeof dir, &v2) != 0) return 0;
  snprintf(path, sizeof path, "%s/%s", dir, v2 ? file_v2 : file_v1);
  if (lgu_read_file(path, buf, sizeof buf) <= 0) return 0;
  if (strncmp(buf, "max", 3) == 0) return 0;
  uint64_t v = strtoull(buf, NULL, 10);
  if (v >= (1ULL << 60)) return 0; /* v1 "unlimited" is a huge number */
  return v;
}

int lgu_memory_cgroup(char *out, size_t n) {
  int v2 = 0;
  if (cgroup_dir(out, n, &v2) != 0) return -ENOENT;
  return cgroup_value("memory.max", "memory.limit_in_bytes") ? 0 : -ENOENT;
}

uint64_t lgu_memory_limit(const char **source) {
  uint64_t total = meminfo("MemTotal:");
  uint64_t cg = cgroup_value("memory.max", "memory.limit_in_bytes");
  if (cg && (cg < total || !total)) {
    if (source) *source = "cgroup";
    return cg;
  }
  if (source) *source = "physical";
  return total;
}

uint64_t lgu_memory_usage(void) {
  uint64_t total = meminfo("MemTotal:");
  uint64_t cg = cgroup_value("memory.max", "memory.limit_in_bytes");
  if (cg && cg < total) {
    uint64_t u = cgroup_value("memory.current", "memory.usage_in_bytes");
    if (u) return u;
  }
  uint64_t avail = meminfo("MemAvailable:");
  return total > avail ? total - avail : 0;
}

uint64_t lgu_rss_bytes(int pid) {
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/statm", pid);
  if (lgu_read_file(path, buf, sizeof buf) <= 0) return 0;
  unsigned long size = 0, res = 0;
  if (sscanf(buf, "%lu %lu", &size, &res) != 2) return 0;
  return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}
