/* SPDX-License-Identifier: MIT */
/*
 * agent_abi.h - what `leakguard attach` reads back from the agent it loaded
 * (docs/attach.md): the agent (capture/agent/) keeps this record in its data, returns
 * its address from lg_agent_start, and the CLI's injector (attach/) reads it through
 * /proc/PID/mem. The agent stays loaded after a detach, so a later attach may meet one
 * from another leakguard: the magic and the version say whose layout it is, and a
 * record of another version is not read (change the version with the layout; the
 * asserts below hold it, as region.h's do).
 */
#ifndef LG_CORE_AGENT_ABI_H
#define LG_CORE_AGENT_ABI_H

#include <stddef.h>
#include <stdint.h>

#define LG_AGENT_MAGIC 0x544e454741474cULL /* "LGAGENT" */
#define LG_AGENT_ABI_VERSION 2u            /* 1: the same fields, no version (pad 0) */

/* Fields the agent updates while it runs are changed with __atomic builtins (plain
 * types here: the CLI reads a copy). */
typedef struct lg_agent_stats {
  uint64_t magic;                     /* LG_AGENT_MAGIC */
  uint64_t preattach_bytes_released;  /* blocks from before the attach, freed since */
  uint64_t preattach_blocks_released; /* (full mode: their usable sizes) */
  uint64_t slots_patched;             /* GOT slots rewritten to the hooks */
  uint64_t slots_restored;            /* and put back at detach */
  uint64_t table_full;                /* recorded allocations dropped: side table full */
  uint32_t state;                     /* 0 idle, 1 recording, 2 detached */
  uint32_t version;                   /* LG_AGENT_ABI_VERSION */
} lg_agent_stats_t;

_Static_assert(LG_AGENT_ABI_VERSION == 2, "the layout asserts below are version 2's: check them for the new version");
_Static_assert(sizeof(lg_agent_stats_t) == 56, "lg_agent_stats_t layout");
_Static_assert(offsetof(lg_agent_stats_t, table_full) == 40, "lg_agent_stats_t layout");
_Static_assert(offsetof(lg_agent_stats_t, state) == 48, "lg_agent_stats_t layout");
_Static_assert(offsetof(lg_agent_stats_t, version) == 52, "lg_agent_stats_t layout");

#endif
