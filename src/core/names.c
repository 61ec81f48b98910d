/* SPDX-License-Identifier: MIT */
/* names.c - stable names of public enums, shared by the preload library, the guard and
 * the CLI (compiled once, linked into both). */
#include "leakguard.h"

LG_API const char *lg_space_name(lg_space_t s) {
  static const char *const names[LG_SPACE_COUNT] = {"host", "mmap", "device", "managed", "pinned"};
  return (unsigned)s < LG_SPACE_COUNT ? names[s] : 0;
}

LG_API const char *lg_level_name(lg_level_t l) {
  static const char *const names[] = {"normal", "warn", "breaker", "emergency"};
  return (unsigned)l < sizeof names / sizeof *names ? names[l] : 0;
}
