/* SPDX-License-Identifier: MIT */
/*
 * cgpath.h - where a process's memory cgroup is, and which of its files hold the
 * values: the parsing of /proc/PID/cgroup and /proc/self/mountinfo, the value files
 * and the lookup of a keyed file's line, that the collector's reader (core/sysmem.c) and the
 * isolated calls (isolate/cgroup.c, built into libleakguard_isolate.so and every
 * Python module, which link no core library) share. Header-only, on text the caller
 * read: no allocation, no stdio. libcgroup would do this, but it is a daemon's
 * library with its own configuration files, for two lines of text.
 */
#ifndef LG_CORE_CGPATH_H
#define LG_CORE_CGPATH_H

#include <stdio.h>
#include <string.h>

/* Does the list (comma- or space-separated: a mount's options, a v1 hierarchy's
 * controllers) name word? */
static inline int lgsm_cg_has_word(const char *list, size_t len, const char *word) {
  size_t w = strlen(word);
  for (size_t i = 0; i < len;) {
    size_t j = i;
    while (j < len && list[j] != ',' && list[j] != ' ' && list[j] != '\n') j++;
    if (j - i == w && memcmp(list + i, word, w) == 0) return 1;
    i = j + 1;
  }
  return 0;
}

/* The path of the process in the v1 memory hierarchy (v 1) or in cgroup2 (v 2), from
 * the text of its /proc/PID/cgroup ("ID:CONTROLLERS:PATH" lines; cgroup2's is
 * "0::PATH"). 0 when found, -1 when not. */
static inline int lgsm_cg_path(const char *text, int v, char *out, size_t size) {
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    const char *c1 = memchr(line, ':', len);
    const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
    if (c2) {
      int match = v == 2 ? c2 == c1 + 1 && len >= 2 && line[0] == '0' && line[1] == ':'
                         : lgsm_cg_has_word(c1 + 1, (size_t)(c2 - c1 - 1), "memory");
      if (match) {
        snprintf(out, size, "%.*s", (int)(len - (size_t)(c2 + 1 - line)), c2 + 1);
        return 0;
      }
    }
    line = end ? end + 1 : NULL;
  }
  return -1;
}

/* From one line of /proc/self/mountinfo ("id parent maj:min root mountpoint options
 * [optional...] - fstype source superoptions"): its mount point and root when it
 * mounts the v1 memory hierarchy (v 1) or cgroup2 (v 2). 0 when it does. */
static inline int lgsm_cg_mount(const char *line, int v, char *mnt, size_t msize, char *root, size_t rsize) {
  const char *sep = strstr(line, " - ");
  if (!sep) return -1;
  char fstype[32], source[256], super[1024] = "";
  if (sscanf(sep + 3, "%31s %255s %1023s", fstype, source, super) < 2) return -1;
  if (v == 1 ? strcmp(fstype, "cgroup") != 0 || !lgsm_cg_has_word(super, strlen(super), "memory")
             : strcmp(fstype, "cgroup2") != 0)
    return -1;
  char r[4096], m[4096];
  if (sscanf(line, "%*s %*s %*s %4095s %4095s", r, m) != 2) return -1;
  snprintf(mnt, msize, "%s", m);
  snprintf(root, rsize, "%s", r);
  return 0;
}

/* Where the hierarchy v is mounted for this process (the first such line of
 * /proc/self/mountinfo): 0 when found. */
static inline int lgsm_cg_find_mount(int v, char *mnt, size_t msize, char *root, size_t rsize) {
  FILE *f = fopen("/proc/self/mountinfo", "re");
  if (!f) return -1;
  char line[4096];
  int ok = -1;
  while (ok < 0 && fgets(line, sizeof line, f)) ok = lgsm_cg_mount(line, v, mnt, msize, root, rsize);
  fclose(f);
  return ok;
}

/* The directory of a cgroup path under a mount: mnt + (path less the mount's root). A
 * path outside the mount's root is used as it is. 0, or -1 when out is too small. */
static inline int lgsm_cg_join(char *out, size_t size, const char *mnt, const char *root, const char *path) {
  size_t rl = strlen(root);
  if (strcmp(root, "/") == 0) rl = 0;
  else if (strncmp(path, root, rl) == 0 && (path[rl] == '/' || path[rl] == 0)) path += rl;
  else rl = 0;
  if (strcmp(path, "/") == 0) path = "";
  return snprintf(out, size, "%s%s", mnt, path) >= (int)size ? -1 : 0;
}

/* ------------------------------------------------------------------ the values */

/* The files of a memory cgroup's usage and limit, by version (v 2 or 1). */
#define LGSM_CG_USAGE(v) ((v) == 1 ? "memory.usage_in_bytes" : "memory.current")
#define LGSM_CG_LIMIT(v) ((v) == 1 ? "memory.limit_in_bytes" : "memory.max")
/* The keyed file whose "oom_kill" line counts the cgroup's OOM kills (v1: kernels
 * >= 4.13). */
#define LGSM_CG_OOM_EVENTS(v) ((v) == 1 ? "memory.oom_control" : "memory.events")

/* In the text of a keyed file ("key N" lines: memory.events, memory.stat,
 * memory.oom_control), where the line of key goes on after the key (at the blank
 * before its number, which strtoull skips), or NULL when no line has key. */
static inline const char *lgsm_cg_key(const char *text, const char *key) {
  size_t kl = strlen(key);
  for (const char *p = text; p && *p;) {
    if (!strncmp(p, key, kl) && (p[kl] == ' ' || p[kl] == '\t')) return p + kl;
    p = strchr(p, '\n');
    if (p) p++;
  }
  return NULL;
}

#endif
