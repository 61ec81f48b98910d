/* SPDX-License-Identifier: MIT */
/*
 * tt_deepbind.c - RTLD_DEEPBIND (issue #17): the plugin (tt_plugin.c), opened with
 * RTLD_DEEPBIND, frees blocks from glibc's strdup in the program, and the program
 * frees the plugin's. Bare this exits 0; when leakguard kept the flag, glibc aborted
 * with "free(): invalid size". The plugin is opened by bare name: it is found only
 * through this program's RUNPATH, so the dlopen hook must keep the caller's identity
 * (a tail call). Then a planted leak.
 *   tt_deepbind dlopen|dlmopen
 *   tt_deepbind newlm     the plugin in a new link-map namespace (dlmopen LM_ID_NEWLM):
 *                         its own libc and heap, not recorded (said once), no crash
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tt.h"

/* A new namespace: blocks stay on its side (crossing heaps is an error bare too). */
static int newlm(void)
{
  void *h = dlmopen(LM_ID_NEWLM, "libtt_plugin.so", RTLD_NOW);
  if (!h) {
    fprintf(stderr, "dlmopen: %s\n", dlerror());
    return 1;
  }
  void (*pfree)(void *) = (void (*)(void *))dlsym(h, "tt_plugin_free");
  char *(*pstrdup)(const char *) = (char *(*)(const char *))dlsym(h, "tt_plugin_strdup");
  if (!pfree || !pstrdup)
    return 2;
  unsigned long sum = 0;
  for (int i = 0; i < 2000; i++) {
    char *b = pstrdup("allocated and freed in the other namespace");
    sum += strlen(b);
    pfree(b);
  }
  printf("newlm: %lu bytes copied inside the namespace\n", sum);
  tt_leak(2000, 32768);
  printf("newlm: leaked %zu blocks\n", tt_nkept);
  return 0;
}

int main(int argc, char **argv)
{
  if (argc > 1 && !strcmp(argv[1], "newlm"))
    return newlm();
  int use_dlmopen = argc > 1 && !strcmp(argv[1], "dlmopen");
  void *h = use_dlmopen ? dlmopen(LM_ID_BASE, "libtt_plugin.so", RTLD_NOW | RTLD_DEEPBIND)
                        : dlopen("libtt_plugin.so", RTLD_NOW | RTLD_DEEPBIND);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  void (*pfree)(void *) = (void (*)(void *))dlsym(h, "tt_plugin_free");
  char *(*pstrdup)(const char *) = (char *(*)(const char *))dlsym(h, "tt_plugin_strdup");
  void *(*prealloc)(void *, size_t) = (void *(*)(void *, size_t))dlsym(h, "tt_plugin_realloc");
  if (!pfree || !pstrdup || !prealloc)
    return 2;
  unsigned long sum = 0;
  for (int i = 0; i < 2000; i++) {
    char *a = strdup("allocated by the program, freed by the plugin");
    sum += strlen(a);
    pfree(a);
    char *b = pstrdup("allocated by the plugin, freed by the program");
    sum += strlen(b);
    free(b);
    char *c = malloc(16 + (size_t)i % 64);
    c = prealloc(c, 4096 + (size_t)i); /* the plugin's realloc of the program's block */
    memset(c, 1, 4096);
    c = realloc(c, 100);
    pfree(c);
  }
  printf("deepbind: %lu bytes copied, all freed across the boundary\n", sum);
  tt_leak(2000, 32768);
  printf("deepbind: leaked %zu blocks\n", tt_nkept);
  dlclose(h);
  return 0;
}
