/* SPDX-License-Identifier: MIT */
/*
 * strmap.h - a string -> int map (open addressing, FNV-1a), for the collector and the
 * report, which group call stacks by their allocation site. Hand-written: a few dozen
 * lines, and glibc's hsearch_r cannot grow or free its keys.
 */
#ifndef LG_CORE_STRMAP_H
#define LG_CORE_STRMAP_H

#include <stddef.h>

typedef struct lgu_strmap {
  char **keys;
  int *vals;
  size_t cap, n;
} lgu_strmap_t;

/* The value of key; when absent, adds key (copied) with value val and sets *added.
 * Returns the value, or -1 when out of memory. */
int lgu_strmap_get_or_add(lgu_strmap_t *m, const char *key, int val, int *added);
/* The value of key, or -1 when absent. */
int lgu_strmap_find(const lgu_strmap_t *m, const char *key);
void lgu_strmap_free(lgu_strmap_t *m);

#endif
