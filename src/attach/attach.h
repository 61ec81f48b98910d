/* SPDX-License-Identifier: MIT */
/*
 * attach.h - loading libleakguard-agent.so into a running process (docs/attach.md):
 * the attach layer's interface to the CLI. inject.c drives it; tracee.c holds the
 * target's threads under ptrace, safepoint.c judges where the agent may be loaded,
 * procfs.c reads what /proc and the ELF files say of the target.
 */
#ifndef LG_ATTACH_ATTACH_H
#define LG_ATTACH_ATTACH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/agent_abi.h"

typedef struct lgj_result {
  uintptr_t stats_addr;  /* the agent's lg_agent_stats_t in the target */
  double all_stopped_ms; /* every thread of the target stopped */
  double caller_ms;      /* the thread that loads the agent, from its stop to its release */
  int tries;             /* breakpoint rounds (a round is dropped while the loader is busy) */
  int idle;              /* loaded in a thread waiting in a system call (no malloc came) */
} lgj_result_t;

/* Checks that PID can be attached to (exists, not traced, not static, ptrace allowed):
 * 0, or -errno with a one-line reason in why. Nothing in the target is changed. */
int lgj_check(pid_t pid, char *why, size_t n);

/* The one-line reason ptrace of PID failed with errno e (EPERM: Yama's
 * kernel.yama.ptrace_scope, or another user's or a non-dumpable process): -e. */
int lgj_refused(pid_t pid, int e, char *why, size_t n);
/* The path the target pid loads agent from (placement.c): agent itself when the
 * target's mount namespace shows the same file and it runs as our user, else a copy in
 * its /tmp. 0 with out set, or -errno with why. */
int lgj_agent_in_target(pid_t pid, const char *agent, char *out, size_t n, char *why, size_t wn);

/* Stops PID at a safe point (a malloc or free entry, or in an idle target a thread
 * waiting in a blocking system call, with the loader consistent), loads
 * agent there and calls lg_agent_start(cfg), then lets it go. 0 or -errno with a
 * one-line reason in why. */
int lgj_inject(pid_t pid, const char *agent, const char *cfg, lgj_result_t *res, char *why, size_t n);

/* Reads the agent's figures from the target: 0, -EINVAL when the record there is not an
 * agent's, -EPROTO when it is another version's, or -errno. */
int lgj_read_stats(pid_t pid, uintptr_t addr, lg_agent_stats_t *out);

#endif
