/* SPDX-License-Identifier: MIT */
/* render.c - the table of formats (render.h). */
#include "output/render.h"

#include <stdio.h>
#include <string.h>

static const lgo_format_t FORMATS[] = {
    {"text", lgo_render_text, lgo_render_diff_text, 0, 0, 0, "the report"},
    {"json", lgo_render_json, lgo_render_diff_json, 0, 0, 0, "the JSON report"},
    {"folded", lgo_render_folded, NULL, 1, 0, 0, "the folded stacks"},
    {"pprof", lgo_render_pprof, NULL, 1, 0, 1, "the pprof profile"},
    {"html", lgo_render_html, NULL, 1, 0, 0, "the HTML page"},
    {"pool-profile", lgo_render_pool_profile, NULL, 0, 1, 0, "the pool profile"},
};

const lgo_format_t *lgo_format(const char *name) {
  for (size_t i = 0; name && i < sizeof FORMATS / sizeof *FORMATS; i++)
    if (!strcmp(FORMATS[i].name, name)) return &FORMATS[i];
  return NULL;
}

const char *lgo_format_names(void) {
  static char names[128]; /* from the table, once: every format a message lists */
  if (!names[0]) {
    size_t n = sizeof FORMATS / sizeof *FORMATS, len = 0;
    for (size_t i = 0; i < n; i++)
      len += (size_t)snprintf(names + len, sizeof names - len, "%s%s",
                              i == 0       ? ""
                              : i == n - 1 ? " or "
                                           : ", ",
                              FORMATS[i].name);
  }
  return names;
}

void lgo_format_options(const lgo_format_t *f, lgr_options_t *o) {
  o->recording = f->recording;
  o->generations = f->generations;
}
