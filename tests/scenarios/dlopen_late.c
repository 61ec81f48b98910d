/* SPDX-License-Identifier: MIT */
/*
 * dlopen_late - a mail filter that starts without plugins, serves for a while,
 * then dlopen()s libscenplugin.so (from --plugin PATH, default: next to the
 * executable) and runs every message through plugin_filter(). The leak is in the
 * plugin (see plugin.c). With --unload-after S the plugin is dlclose()d S seconds
 * after it was loaded and the program keeps serving without it.
 *
 * Options: --seconds S (default 5), --load-after S (default 1), --unload-after S,
 *          --plugin PATH, --rate MSG_PER_S (default 6000), --seed N, --pidfile PATH
 */
#include "scen_common.h"

#include <libgen.h>

typedef int (*filter_fn)(const char *, size_t, unsigned);

static char *default_plugin_path(const char *argv0) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    snprintf(exe, sizeof exe, "%s", argv0);
  } else {
    exe[n] = 0;
  }
  char *path = malloc(4200);
  snprintf(path, 4200, "%s/libscenplugin.so", dirname(exe));
  return path;
}

int main(int argc, char **argv) {
  double seconds = scen_seconds(argc, argv, 5.0);
  double load_after = scen_opt_double(argc, argv, "--load-after", NULL, 1.0);
  double unload_after = scen_opt_double(argc, argv, "--unload-after", NULL, -1);
  double rate = scen_opt_double(argc, argv, "--rate", "SCEN_RATE", 6000);
  uint64_t rng = (uint64_t)scen_opt_long(argc, argv, "--seed", "SCEN_SEED", 1);
  const char *opt_plugin = scen_opt(argc, argv, "--plugin", NULL);
  char *plugin = opt_plugin ? strdup(opt_plugin) : default_plugin_path(argv[0]);
  scen_write_pidfile(argc, argv);
  scen_step_init();

  void *handle = NULL;
  filter_fn filter = NULL;
  double start = scen_now(), end = start + seconds, loaded_at = 0;
  unsigned long messages = 0, flagged = 0;
  struct scen_pacer pacer;
  scen_pacer_init(&pacer, rate);
  int was_loaded = 0;
  unsigned rule = 0;
  while (scen_now() < end) {
    double t = scen_now() - start;
    if (!was_loaded && t >= load_after) {
      handle = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        fprintf(stderr, "dlopen_late: %s\n", dlerror());
        return 1;
      }
      void *sym = dlsym(handle, "plugin_filter");
      memcpy(&filter, &sym, sizeof filter);
      loaded_at = t;
      was_loaded = 1;
      printf("dlopen_late: loaded %s at %.2fs\n", plugin, t);
      fflush(stdout);
    }
    if (handle && unload_after >= 0 && t >= loaded_at + unload_after) {
      dlclose(handle);
      handle = NULL;
      filter = NULL;
      printf("dlopen_late: unloaded at %.2fs\n", t);
      fflush(stdout);
    }
    size_t len = scen_logsize(&rng, 80, 20000);
    char *msg = malloc(len);
    memset(msg, ' ', len);
    for (size_t i = 0; i < len; i += 16) msg[i] = (char)scen_rand(&rng);
    char *hdrs = strdup("From: someone@example.org\r\nTo: you@example.org\r\n");
    if (filter) {
      if (scen_range(&rng, 0, 9) == 0) rule = (unsigned)scen_range(&rng, 0, 11);
      flagged += (unsigned long)filter(msg, len, rule);
    }
    free(hdrs);
    free(msg);
    messages++;
    scen_step();
    scen_pace(&pacer);
  }
  printf("dlopen_late: messages=%lu flagged=%lu\n", messages, flagged);
  if (handle) dlclose(handle);
  free(plugin);
  return 0;
}
