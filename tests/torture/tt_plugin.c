/* SPDX-License-Identifier: MIT */
/*
 * tt_plugin.c - the plugin of tt_deepbind, loaded with RTLD_DEEPBIND: its own
 * references (free, strdup) bind to glibc first. Reproduces heaptrack's manual test
 * (tests/manual/dlopen.cpp) with our own code: it frees a block that the program
 * allocated with glibc's strdup, and returns one it allocated itself.
 */
#include <stdlib.h>
#include <string.h>

void tt_plugin_free(void *p);
char *tt_plugin_strdup(const char *s);
void *tt_plugin_realloc(void *p, size_t n);

__attribute__((visibility("default"))) void tt_plugin_free(void *p)
{
  free(p);
}

__attribute__((visibility("default"))) char *tt_plugin_strdup(const char *s)
{
  return strdup(s);
}

__attribute__((visibility("default"))) void *tt_plugin_realloc(void *p, size_t n)
{
  return realloc(p, n);
}
