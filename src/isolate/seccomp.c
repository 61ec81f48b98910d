/* SPDX-License-Identifier: MIT */
/* The seccomp filter of isolated children (docs/isolate.md has the list and why).
 *
 * Built with libseccomp in the parent, once per allow mask, and exported as a BPF
 * program: the child only calls prctl(PR_SET_SECCOMP) on it, which is async-signal-safe
 * (a fork of a multi-threaded caller must not allocate before it is isolated). Denied
 * calls trap (SIGSYS): the child's handler reports the call's number to the parent. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/filter.h>

#include "isolate/isolate.h"

#define NMASKS 16
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  struct sock_filter *prog;
  size_t len;
} cache[NMASKS];

static int add(scmp_filter_ctx ctx, int *err, const char *name, unsigned argc, const struct scmp_arg_cmp *args) {
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) return 0; /* not on this architecture (open, fork... exist on x86-64) */
  int rc = seccomp_rule_add_array(ctx, SCMP_ACT_TRAP, nr, argc, args);
  if (rc < 0 && !*err) *err = rc;
  return rc;
}
#define DENY(name) add(ctx, &err, name, 0, NULL)

/* Denies calls that open a file with any of the writing flags (flags is argument idx). */
static void deny_open_write(scmp_filter_ctx ctx, int *err, const char *name, unsigned idx) {
  static const unsigned flags[] = {O_WRONLY, O_RDWR, O_CREAT, O_TRUNC};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    struct scmp_arg_cmp c = {.arg = idx, .op = SCMP_CMP_MASKED_EQ, .datum_a = flags[i], .datum_b = flags[i]};
    add(ctx, err, name, 1, &c);
  }
}

static int build(unsigned allow, struct sock_filter **prog, size_t *len) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return -ENOMEM;
  int err = 0;
  /* Always: no debugging, signalling or reading other processes, no kernel state. */
  static const char *const always[] = {"ptrace",
                                       "process_vm_readv",
                                       "process_vm_writev",
                                       "tkill",
                                       "rt_sigqueueinfo",
                                       "rt_tgsigqueueinfo",
                                       "pidfd_send_signal",
                                       "pidfd_getfd",
                                       "mount",
                                       "umount2",
                                       "pivot_root",
                                       "chroot",
                                       "bpf",
                                       "perf_event_open",
                                       "kexec_load",
                                       "kexec_file_load",
                                       "init_module",
                                       "finit_module",
                                       "delete_module",
                                       "reboot",
                                       "swapon",
                                       "swapoff",
                                       "keyctl",
                                       "add_key",
                                       "request_key",
                                       "io_uring_setup",
                                       "move_mount",
                                       "open_tree",
                                       "fsopen",
                                       "fsmount"};
  for (size_t i = 0; i < sizeof always / sizeof always[0]; i++) DENY(always[i]);
  /* kill and tgkill: only this process (LGISO_SELF_PID, patched in the child). */
  struct scmp_arg_cmp self = {.arg = 0, .op = SCMP_CMP_NE, .datum_a = LGISO_SELF_PID};
  add(ctx, &err, "kill", 1, &self);
  add(ctx, &err, "tgkill", 1, &self);
  if (!(allow & LG_ALLOW_NET)) {
    static const char *const net[] = {"socket", "socketpair", "connect", "bind", "listen", "accept", "accept4"};
    for (size_t i = 0; i < sizeof net / sizeof net[0]; i++) DENY(net[i]);
  }
  if (!(allow & LG_ALLOW_WRITE)) {
    deny_open_write(ctx, &err, "open", 1);
    deny_open_write(ctx, &err, "openat", 2);
    static const char *const wr[] = {"creat",    "openat2",   "truncate",  "unlink",  "unlinkat", "rename",
                                     "renameat", "renameat2", "mkdir",     "mkdirat", "rmdir",    "link",
                                     "linkat",   "symlink",   "symlinkat", "chmod",   "fchmodat", "chown",
                                     "fchownat", "lchown",    "mknod",     "mknodat"};
    for (size_t i = 0; i < sizeof wr / sizeof wr[0]; i++) DENY(wr[i]);
  }
  if (!(allow & LG_ALLOW_EXEC)) {
    DENY("execve");
    DENY("execveat");
  }
  if (!(allow & LG_ALLOW_PROC)) {
    DENY("fork");
    DENY("vfork");
    DENY("unshare");
    DENY("setns");
    /* Threads stay possible: clone with CLONE_THREAD. clone3's flags are in memory
     * the filter cannot read: ENOSYS makes glibc fall back to clone. */
    struct scmp_arg_cmp nothread = {.arg = 0, .op = SCMP_CMP_MASKED_EQ, .datum_a = CLONE_THREAD, .datum_b = 0};
    add(ctx, &err, "clone", 1, &nothread);
    int nr = seccomp_syscall_resolve_name("clone3");
    if (nr != __NR_SCMP_ERROR) {
      int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0);
      if (rc < 0 && !err) err = rc;
    }
  }
  if (err) {
    seccomp_release(ctx);
    return err;
  }
  /* Export the BPF through a memfd. */
  int fd = memfd_create("lg-isolate-bpf", MFD_CLOEXEC);
  if (fd < 0) {
    err = -errno;
    seccomp_release(ctx);
    return err;
  }
  err = seccomp_export_bpf(ctx, fd);
  seccomp_release(ctx);
  off_t size = err < 0 ? -1 : lseek(fd, 0, SEEK_END);
  if (size <= 0 || size % (off_t)sizeof(struct sock_filter)) {
    close(fd);
    return err < 0 ? err : -EIO;
  }
  struct sock_filter *p = malloc((size_t)size);
  if (!p || pread(fd, p, (size_t)size, 0) != size) {
    free(p);
    close(fd);
    return -EIO;
  }
  close(fd);
  *prog = p;
  *len = (size_t)size / sizeof(struct sock_filter);
  return 0;
}

int lgiso_filter(unsigned allow, const struct sock_filter **prog, size_t *len) {
  if (allow >= NMASKS) return -EINVAL;
  int rc = 0;
  pthread_mutex_lock(&lock);
  if (!cache[allow].prog) rc = build(allow, &cache[allow].prog, &cache[allow].len);
  if (!rc) {
    *prog = cache[allow].prog;
    *len = cache[allow].len;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

void lgiso_syscall_name(int nr, char *buf, size_t size) {
  char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
  if (name) snprintf(buf, size, "%s", name);
  else snprintf(buf, size, "syscall-%d", nr);
  free(name);
}
