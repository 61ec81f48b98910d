/* SPDX-License-Identifier: MIT */
/*
 * target.c - what `leakguard run` checks and prepares before it starts a program
 * (cli/target.h): where the command and the preload library are, whether the program
 * can be recorded at all, and the environment the recorder reads (core/region.h).
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/target.h"
#include "core/region.h"

int lg_find_command(const char *cmd, char *out, size_t n) {
  if (strchr(cmd, '/')) {
    if (access(cmd, F_OK) != 0) return -ENOENT;
    snprintf(out, n, "%s", cmd);
    return access(cmd, X_OK) == 0 ? 0 : -EACCES;
  }
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  int found_noexec = 0;
  while (*path) {
    const char *e = strchr(path, ':');
    size_t len = e ? (size_t)(e - path) : strlen(path);
    snprintf(out, n, "%.*s/%s", (int)len, len ? path : ".", cmd);
    struct stat st;
    if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(out, X_OK) == 0) return 0;
      found_noexec = 1;
    }
    path += len + (e ? 1 : 0);
    if (!e) break;
  }
  return found_noexec ? -EACCES : -ENOENT;
}

/* 1 static ELF, 0 dynamic or not ELF (scripts), -errno on read error. */
int lg_is_static_elf(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  Elf64_Ehdr eh;
  int r = 0;
  if (read(fd, &eh, sizeof eh) == (ssize_t)sizeof eh && !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
      eh.e_ident[EI_CLASS] == ELFCLASS64) {
    r = 1;
    for (int i = 0; i < eh.e_phnum; i++) {
      Elf64_Phdr ph;
      if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize)) != (ssize_t)sizeof ph) break;
      if (ph.p_type == PT_INTERP || ph.p_type == PT_DYNAMIC) {
        r = 0;
        break;
      }
    }
  }
  close(fd);
  return r;
}

/* Where the libraries are, relative to the directory of the running binary: first
 * LG_INSTALL_REL_LIBDIR, the libdir relative to the bindir as CMake installs them (../lib
 * for bin/ and lib/; ../lib/x86_64-linux-gnu for prefix /usr), which holds under any
 * --prefix or DESTDIR; then build/lib beside build/bin in the build tree, and the usual
 * other libdirs. */
static const char *const lib_rel[] = {LG_INSTALL_REL_LIBDIR, "../lib", "../lib/x86_64-linux-gnu", "../lib64"};

/* The directory of the running binary, or -ENOENT. */
static int self_dir(char *out, size_t n) {
  ssize_t k = readlink("/proc/self/exe", out, n - 1);
  if (k <= 0) return -ENOENT;
  out[k] = 0;
  char *slash = strrchr(out, '/');
  if (!slash) return -ENOENT;
  *slash = 0;
  return 0;
}

/* out = dir/rel/name if it is readable, canonical when realpath can make it so. */
static int found(char *out, size_t n, const char *dir, const char *rel, const char *name) {
  snprintf(out, n, "%s/%s/%s", dir, rel, name);
  if (access(out, R_OK) != 0) return 0;
  char *r = realpath(out, NULL);
  if (r) {
    snprintf(out, n, "%s", r);
    free(r);
  }
  return 1;
}

int lg_find_library(char *out, size_t n) {
  const char *env = getenv(LG_ENV_LIBRARY);
  if (env && *env) {
    snprintf(out, n, "%s", env);
    return access(out, R_OK) == 0 ? 0 : -ENOENT;
  }
  char self[PATH_MAX];
  if (self_dir(self, sizeof self) == 0) {
    for (size_t i = 0; i < sizeof lib_rel / sizeof *lib_rel; i++)
      if (found(out, n, self, lib_rel[i], "libleakguard.so")) return 0;
    if (found(out, n, self, ".", "libleakguard.so")) return 0;
  }
  if (found(out, n, LG_INSTALL_LIBDIR, ".", "libleakguard.so")) return 0;
  if (found(out, n, LG_BUILD_LIBDIR, ".", "libleakguard.so")) return 0;
  return -ENOENT;
}

/* The directory with the `leakguard` Python module and its sitecustomize hook: build/python
 * in the build tree, LIBDIR/leakguard/python installed (found as the library is). */
int lg_find_python_dir(char *out, size_t n) {
  char self[PATH_MAX], rel[PATH_MAX];
  if (self_dir(self, sizeof self) == 0) {
    if (found(out, n, self, "../python", "sitecustomize.py")) goto dir;
    for (size_t i = 0; i < sizeof lib_rel / sizeof *lib_rel; i++) {
      snprintf(rel, sizeof rel, "%s/leakguard/python", lib_rel[i]);
      if (found(out, n, self, rel, "sitecustomize.py")) goto dir;
    }
  }
  if (found(out, n, LG_INSTALL_LIBDIR, "leakguard/python", "sitecustomize.py")) goto dir;
  return -ENOENT;
dir:
  *strrchr(out, '/') = 0;
  return 0;
}

/* Appends value to the list variable name (separated by sep), value first. */
static int prepend_env(const char *name, const char *value) {
  const char *old = getenv(name);
  size_t n = strlen(value) + (old ? strlen(old) : 0) + 2;
  char *v = malloc(n);
  if (!v) return -ENOMEM;
  snprintf(v, n, "%s%s%s", value, old && *old ? ":" : "", old ? old : "");
  int rc = setenv(name, v, 1);
  free(v);
  return rc ? -errno : 0;
}

int lg_target_env(const lg_target_env_t *e) {
  char num[32];
  if (prepend_env("LD_PRELOAD", e->library) != 0) return -ENOMEM;
  setenv(LG_ENV_SOCK, e->socket, 1);
  snprintf(num, sizeof num, "%" PRIu64, e->sample);
  setenv(LG_ENV_SAMPLE, num, 1);
  snprintf(num, sizeof num, "%" PRIu64, e->import_sample);
  setenv(LG_ENV_IMPORT_SAMPLE, num, 1);
  snprintf(num, sizeof num, "%ld", e->depth);
  setenv(LG_ENV_DEPTH, num, 1);
  setenv(LG_ENV_FOLLOW, e->follow ? "1" : "0", 1);
  snprintf(num, sizeof num, "%d", (int)getpid());
  setenv(LG_ENV_CLI_PID, num, 1);
  setenv(LG_ENV_MMAP, e->mmap ? "1" : "0", 1);
  char lazy[64] = "0";
  if (e->lazy_bytes && e->lazy_ms > 0) snprintf(lazy, sizeof lazy, "%" PRIu64 ",%ld", e->lazy_bytes, e->lazy_ms);
  setenv(LG_ENV_LAZY, lazy, 1);
  setenv(LG_ENV_FIRST, "1", 1); /* the started image's alone: it turns it to 0 */
  if (e->cuda_um) setenv(LG_ENV_CUDA_UM, "1", 1);
  setenv(LG_ENV_DIR, e->dir, 1);
  setenv(LG_ENV_STEPS, e->steps_off ? "off" : "auto", 1);
  if (e->explain_at_step) {
    snprintf(num, sizeof num, "%ld", e->explain_at_step);
    setenv(LG_ENV_EXPLAIN_AT_STEP, num, 1);
  }
  /* Python: the leakguard module has the recorder wrap CPython's pymalloc at its import
   * (capture/pymalloc.c), so PYTHONMALLOC is left as it is: PYTHONMALLOC=malloc alone
   * cost the interpreter a third more instructions. The module and its exit hook are
   * found first on the path. */
  char pydir[PATH_MAX];
  if (lg_find_python_dir(pydir, sizeof pydir) == 0 && prepend_env("PYTHONPATH", pydir) != 0) return -ENOMEM;
  return 0;
}
