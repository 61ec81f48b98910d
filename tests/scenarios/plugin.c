/* SPDX-License-Identifier: MIT */
/*
 * plugin.c - libscenplugin.so, a content-filter plugin that dlopen_late loads at
 * run time (it is not linked by anything).
 *
 * Ground truth: plugin_filter() compiles a rule for every request whose rule is
 * not the last one used and never frees the compiled rule (LEAK-SITE).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct compiled_rule {
  uint32_t id;
  uint32_t nstates;
  uint16_t states[];
};

int plugin_filter(const char *text, size_t len, unsigned rule);
unsigned long plugin_rules_compiled(void);

static __thread unsigned t_last_rule = ~0u;
static __thread const struct compiled_rule *t_last;
static unsigned long g_compiled;

int plugin_filter(const char *text, size_t len, unsigned rule) {
  if (rule != t_last_rule) {
    uint32_t nstates = 32 + (rule * 2654435761u) % 400;
    struct compiled_rule *cr = malloc(sizeof *cr + nstates * sizeof(uint16_t)); /* LEAK-SITE */
    cr->id = rule;
    cr->nstates = nstates;
    for (uint32_t i = 0; i < nstates; i++) cr->states[i] = (uint16_t)(i * 31 + rule);
    t_last = cr; /* the previous compiled rule is dropped on the floor */
    t_last_rule = rule;
    __atomic_add_fetch(&g_compiled, 1, __ATOMIC_RELAXED);
  }
  unsigned hits = 0;
  for (size_t i = 0; i < len; i++) hits += (unsigned char)text[i] == (t_last->states[i % t_last->nstates] & 0x7f);
  return hits > len / 64;
}

unsigned long plugin_rules_compiled(void) { return __atomic_load_n(&g_compiled, __ATOMIC_RELAXED); }
