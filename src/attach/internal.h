/* SPDX-License-Identifier: MIT */
/* internal.h - what the attach layer's files share (attach.h is its interface). */
#ifndef LG_ATTACH_INTERNAL_H
#define LG_ATTACH_INTERNAL_H

#include <sys/user.h>

#include "attach/attach.h"

/* ------------------------------------------------------------------ procfs.c */

double lgj_now_ms(void);
/* The number after "key:" in /proc/PID/status: 0 or -errno. */
int lgj_status_field(pid_t pid, const char *key, long *out);
/* The load address and path of the first mapping whose file name ends in one of
 * suffixes (NULL-terminated): 0 or -errno. */
int lgj_find_map(pid_t pid, const char *const *suffixes, uintptr_t *base, char *path, size_t n);
/* st_value of the defined dynamic symbols names[i] in the ELF file path (0: absent). */
int lgj_elf_syms(const char *path, const char *const *names, uint64_t *vals, int nn);

/* ------------------------------------------------------------------ tracee.c */
typedef struct lgj_thr {
  pid_t tid;
  int stopped, sig, hit, gone;
} lgj_thr_t;

typedef struct lgj_inj {
  pid_t pid;
  lgj_thr_t *t;
  int n, cap;
  int memfd;
  uintptr_t bp[2];
  uint64_t orig[2];
  int bp_set;
  int mode;     /* 0: stopping everything (stops stay), 1: running (hits stay), 2: calling */
  pid_t caller; /* the thread running our calls (0: none) */
  int call_done;
  pid_t kids[64]; /* fork children auto-attached and not yet let go (lgj_detach_all waits for them) */
  int nkids;
  char *why;
  size_t whylen;
} lgj_inj_t;

/* Waits for events until cond(s) or the deadline: 0, or -ETIMEDOUT / -ESRCH. */
int lgj_pump(lgj_inj_t *s, int (*cond)(lgj_inj_t *), double deadline);
int lgj_any_hit(lgj_inj_t *s);
/* Seizes every thread; again until /proc/PID/task shows no new one: 0 or -errno. */
int lgj_seize_all(lgj_inj_t *s);
int lgj_stop_all(lgj_inj_t *s, double deadline);
/* Every stopped thread but except runs on (except 0: mode "running", else "calling"). */
void lgj_resume_all(lgj_inj_t *s, pid_t except);
/* Every thread runs run_ms without breakpoints, then all stop again: 0 or -ETIMEDOUT. */
int lgj_next_round(lgj_inj_t *s, int run_ms);
/* The int3 at malloc and free on or off: 0 or -errno. */
int lgj_set_bps(lgj_inj_t *s, int on);
/* Calls fn(a0, a1) in thread tid (stopped, registers saved in r0): 0 and *ret. */
int lgj_remote_call(lgj_inj_t *s, pid_t tid, const struct user_regs_struct *r0, uintptr_t sp, uintptr_t fn, uint64_t a0,
                    uint64_t a1, uint64_t *ret, double timeout_ms);
void lgj_read_str(lgj_inj_t *s, uintptr_t a, char *out, size_t n);
/* Every thread (and fork child not yet let go) detached. */
void lgj_detach_all(lgj_inj_t *s);

/* ------------------------------------------------------------------ safepoint.c */

/* safepoint.c: whether a stopped thread may load the agent (its call stack, read with
 * libunwind-ptrace, has no allocator or loader frame). */
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

/* With every thread stopped: one waiting in one of the safe system calls whose stack,
 * read to its end, has no loader, allocator or libc-lock frame, or 0. */
pid_t lgj_safe_waiter(lgj_inj_t *s, const lgj_waitcheck_t *w);
/* With every thread stopped: one waiting in a safe system call, or else one waiting in
 * futex whose stack passes (w NULL: the system calls alone), or 0. */
pid_t lgj_idle_caller(lgj_inj_t *s, const lgj_waitcheck_t *w);

#endif
