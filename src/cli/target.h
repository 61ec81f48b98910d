/* SPDX-License-Identifier: MIT */
/* target.h - finding, checking and preparing the program `leakguard run` starts. */
#ifndef LG_CLI_TARGET_H
#define LG_CLI_TARGET_H

#include <stddef.h>
#include <stdint.h>

/* The path of COMMAND as execvp would find it: 0, -ENOENT, or -EACCES (found, not
 * executable). */
int lg_find_command(const char *cmd, char *out, size_t n);
/* 1 for a statically linked ELF, 0 otherwise (dynamic, scripts), -errno. */
int lg_is_static_elf(const char *path);
/* libleakguard.so: LEAKGUARD_LIBRARY, next to the binary, or installed. 0 or -ENOENT. */
int lg_find_library(char *out, size_t n);
/* The directory of the leakguard Python module and its sitecustomize hook. */
int lg_find_python_dir(char *out, size_t n);

typedef struct lg_target_env {
  const char *library, *socket, *dir;
  uint64_t sample, import_sample;
  long depth, explain_at_step;
  int follow, mmap, cuda_um;
  int steps_off;       /* LG_ENV_STEPS=off */
  uint64_t lazy_bytes; /* LG_ENV_LAZY (0 or lazy_ms 0: "0", none) */
  long lazy_ms;
} lg_target_env_t;
/* Sets the environment the recorder reads in the program (core/region.h's LG_ENV_*),
 * LD_PRELOAD, and the Python variables. 0 or -ENOMEM. */
int lg_target_env(const lg_target_env_t *e);

#endif
