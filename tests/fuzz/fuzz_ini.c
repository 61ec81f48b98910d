/* SPDX-License-Identifier: MIT */
/*
 * fuzz_ini.c - fuzz target: the guard's INI config (src/guard/config.c, parsed with
 * inih), as `leakguard guard --config` and `run --guard-config` load it; a config it
 * accepts then drives the level state machine (levels.c) over a rising curve, so that
 * accepted values that break the arithmetic are found too. See fuzz_main.h.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guard/guard_impl.h"

#include "fuzz_main.h"

int lg_fuzz_one(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 1;
  memcpy(text, data, size);
  text[size] = 0;
  lgg_config_t c;
  char why[512];
  lgg_config_defaults(&c);
  int rc = lgg_config_load_string(&c, text, "fuzz.ini", why, sizeof why);
  free(text);
  if (rc == 0) {
    lgg_levels_t s;
    lgg_levels_init(&s, 0);
    double limit = 1e9;
    for (int i = 0; i < 200; i++) {
      double t = i * (c.interval_s > 0 && c.interval_s < 1e6 ? c.interval_s : 0.1);
      double usage = limit * (0.3 + 0.8 * i / 200.0) + (i % 7) * 1e6;
      lgg_levels_step(&s, &c.lv, t, usage, limit, (i % 5) * 10.0 - 1);
    }
    char buf[32];
    for (int k = 0; k < LGG_NLEVELS; k++) (void)lgg_signal_name(c.act[k].signal, buf, sizeof buf);
  }
  lgg_config_free(&c);
  return rc != 0;
}
