/* SPDX-License-Identifier: MIT */
/* inject.h - loading libleakguard-agent.so into a running process (cli/inject.c,
 * docs/attach.md). */
#ifndef LG_CLI_INJECT_H
#define LG_CLI_INJECT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The agent's figures, read back from the target (src/capture/agent.c keeps the same
 * layout). */
typedef struct lg_agent_stats {
  uint64_t magic;
  uint64_t preattach_bytes_released;
  uint64_t preattach_blocks_released;
  uint64_t slots_patched;
  uint64_t slots_restored;
  uint64_t table_full;
  uint32_t state; /* 0 idle, 1 recording, 2 detached */
  uint32_t pad;
} lg_agent_stats_t;
#define LG_AGENT_MAGIC 0x544e454741474cULL

typedef struct lg_inject_result {
  uintptr_t stats_addr;  /* the agent's stats in the target */
  double all_stopped_ms; /* every thread of the target stopped */
  double caller_ms;      /* the thread that loads the agent, from its stop to its release */
  int tries;             /* breakpoint rounds (a round is dropped while the loader is busy) */
  int idle;              /* loaded in a thread waiting in a system call (no malloc came) */
} lg_inject_result_t;

/* Checks that PID can be attached to (exists, not traced, not static, ptrace allowed):
 * 0, or -errno with a one-line reason in why. Nothing in the target is changed. */
int lg_inject_check(pid_t pid, char *why, size_t n);

/* The one-line reason ptrace of PID failed with errno e (EPERM: Yama's
 * kernel.yama.ptrace_scope, or another user's or a non-dumpable process): -e. */
int lg_inject_refused(pid_t pid, int e, char *why, size_t n);

/* Stops PID at a safe point (a malloc or free entry, or in an idle target a thread
 * waiting in a blocking system call, with the loader consistent), loads
 * agent there and calls lg_agent_start(cfg), then lets it go. 0 or -errno with a
 * one-line reason in why. */
int lg_inject(pid_t pid, const char *agent, const char *cfg, lg_inject_result_t *res, char *why, size_t n);

/* inject_wait.c: whether a thread waiting in futex may load the agent (its call stack,
 * read with libunwind-ptrace, has no allocator or loader frame). */
typedef struct lgj_range {
  uintptr_t lo, hi;
} lgj_range_t;
typedef struct lgj_waitcheck {
  lgj_range_t *ld, *unsafe; /* ld.so's mappings; the libc functions no frame may be in */
  int nld, nunsafe;
  void *as; /* unw_addr_space_t */
} lgj_waitcheck_t;
/* Reads libc's symbols (libc_file: its path through /proc/PID/root, loaded at
 * libc_base) and the mappings of PID: 0 or -errno. */
int lgj_waitcheck_init(lgj_waitcheck_t *w, pid_t pid, const char *libc_file, uintptr_t libc_base);
void lgj_waitcheck_free(lgj_waitcheck_t *w);
/* tid ptrace-stopped: 1 when its wait may load the agent, 0 when not, -errno when its
 * stack cannot be read to the end (not safe either); why says which frame. */
int lgj_waiter_safe(const lgj_waitcheck_t *w, pid_t tid, char *why, size_t n);
/* tid ptrace-stopped at the entry of malloc or free (frame 0): 0 when one of its
 * callers lies in ld.so or in libc's allocator or loader entry points, else 1. The
 * loader allocates half way through dlopen and dlclose, under its recursive lock and
 * with _r_debug saying RT_CONSISTENT: a dlopen of ours nested there breaks ld.so's
 * state (seen: _dl_find_object_update crashed the target). A stack not readable to its
 * end counts as safe: the frames that matter, ld.so's and libc's, carry .eh_frame and
 * come first. */
int lgj_hit_safe(const lgj_waitcheck_t *w, pid_t tid, char *why, size_t n);
/* tid ptrace-stopped: its innermost max frames as "name+off < caller < ..." into out
 * (for the message of a call that did not return): 0 or -errno. */
int lgj_stack_describe(const lgj_waitcheck_t *w, pid_t tid, int max, char *out, size_t n);
/* Calls fn for each line of /proc/PID/maps (its range, file offset and path, "" for an
 * anonymous one) until fn returns non-zero: 0 (fn stopped with > 0, or the end), a
 * negative return of fn, or -errno. */
typedef int (*lgj_map_fn)(void *ctx, uintptr_t lo, uintptr_t hi, uint64_t off, const char *path);
int lgj_maps_each(pid_t pid, lgj_map_fn fn, void *ctx);
/* Calls fn for each defined symbol of the ELF file's .dynsym: 0 or -errno. */
typedef void (*lgj_sym_fn)(void *ctx, const char *name, uint64_t value, uint64_t size);
int lgj_elf_dynsyms(const char *path, lgj_sym_fn fn, void *ctx);

/* Reads the agent's figures from the target: 0 or -errno. */
int lg_agent_read_stats(pid_t pid, uintptr_t addr, lg_agent_stats_t *out);

#endif
