/* SPDX-License-Identifier: MIT */
/* names.c - stable names of public enums, shared by the preload library and the CLI. */
#include "leakguard.h"

LG_API const char *lg_space_name(lg_space_t s) {
  static const char *const names[LG_SPACE_COUNT] = {"host", "mmap", "device", "managed", "pinned"};
  return (unsigned)s < LG_SPACE_COUNT ? names[s] : 0;
}
