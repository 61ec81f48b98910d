/* SPDX-License-Identifier: MIT */
/*
 * start.c - libleakguard-agent.so, the recorder of `leakguard attach` (docs/attach.md):
 * its start, its watcher thread and its detach (agent.h lists the other files).
 *
 * Loaded into a running process by the injector (attach/inject.c) with dlopen, then
 * started with lg_agent_start(config). It does not interpose symbols (the process is
 * already bound): it rewrites the GOT slots (R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT) of
 * the malloc family in every loaded object except ld.so, the vDSO and itself, so that
 * those calls reach the hooks below, which call the function the slot held.
 *
 * Blocks allocated before attach have no header, so nothing here uses one: a recorded
 * block lives in a side table (pointer -> site, epoch, size) in mmap'd pages, split
 * into stripes, each a small open-addressing table under its own spin lock (held for
 * a few probes, never across a call). A free or realloc of a pointer the table does
 * not know goes straight to the real function; in full mode (every allocation
 * recorded) its usable size is counted as "pre-attach bytes released".
 *
 * Order at start: region and hello (the collector knows us), patch every object with
 * recording off, then recording on: no recorded block can lose its free to a module
 * not yet patched. A watcher thread patches objects loaded later (dlopen is hooked
 * too, and the list is polled), and detaches when the collector's connection ends
 * (--duration, Ctrl-C, or the CLI killed): it restores every slot, stops recording
 * and leaves the library loaded as a pass-through (never dlclose'd). Recorded blocks
 * freed after detach go to the real free directly: they carry no header.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <dlfcn.h>
#include <link.h>

#include "capture/agent/agent.h"
#include "core/platform.h"
#include "leakguard.h"

__thread lgi_tls_t lgi_tls __attribute__((tls_model("initial-exec")));
lgi_global_t lgi_g = {.fd = -1, .conn = -1, .fork_fd = -1};
uintptr_t lgi_alloc_lo, lgi_alloc_hi;
lg_agent_stats_t lgag_stats = {.magic = LG_AGENT_MAGIC, .version = LG_AGENT_ABI_VERSION};

/* ------------------------------------------------------------------ detach, watcher */

static int cli_pidfd = -1;
static _Atomic int detach_once;
static _Atomic int watcher_running; /* from its creation to its last instruction of ours */

static void detach(const char *why) {
  if (atomic_exchange(&detach_once, 1)) return;
  __atomic_store_n(&lgag_stats.state, 2, __ATOMIC_SEQ_CST); /* first: a rescan waiting for the lock patches nothing */
  lgag_restore_all();
  atomic_store(&lgag_recording, 0);
  lgi_g.enabled = 0;
  if (why) lgi_say("detached: ", why, "");
}

static void *watcher(void *arg) {
  (void)arg;
  lgi_tls.guard++; /* nothing this thread allocates is recorded */
  int unready_ticks = 0;
  unsigned long long seen_adds = lgag_loaded_adds();
  for (;;) {
    lgag_py_post(); /* a full pending-call queue: tried again at the next tick */
    struct pollfd q[2] = {{lgi_g.conn, POLLIN, 0}, {cli_pidfd, POLLIN, 0}};
    int conn_ok = lgi_fd_is(lgi_g.conn, lgi_g.conn_dev, lgi_g.conn_ino);
    if (!conn_ok) q[0].fd = -1;
    int r = poll(q, 2, 100);
    if (r > 0 && (q[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      char b;
      ssize_t got = recv(lgi_g.conn, &b, 1, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) break;
    }
    if (r > 0 && (q[1].revents & POLLIN)) break; /* the CLI is gone */
    if (!conn_ok && cli_pidfd < 0) break;
    unsigned long long now = lgag_loaded_adds();
    /* an object still being loaded is looked at again at the next ticks (5 s at most:
     * one _dl_find_object never knows, dlmopen's, costs no endless scans) */
    int again = lgag_unready() && unready_ticks < 50;
    if (now != seen_adds || again) {
      unready_ticks = now != seen_adds ? 0 : unready_ticks + 1;
      seen_adds = now;
      lgag_rescan();
    }
  }
  detach(NULL);          /* quietly: the target's stderr is not ours */
  lgag_py_post_unwrap(); /* CPython's allocators back */
  if (lgi_fd_is(lgi_g.conn, lgi_g.conn_dev, lgi_g.conn_ino)) syscall(SYS_close, lgi_g.conn);
  if (cli_pidfd >= 0) syscall(SYS_close, cli_pidfd);
  atomic_store(&watcher_running, 0); /* the next attach may start */
  return NULL;
}

/* fork while attached: the child records nothing. Its slots keep the hooks, which pass
 * every call through (its blocks carry no header, so nothing else is needed): putting
 * the slots back would need dl_iterate_phdr, whose lock another thread of the parent
 * may have held at the fork (glibc does not reset it in the child). */
static void atfork_child(void) {
  atomic_store(&watcher_running, 0); /* the child has no watcher thread */
  if (__atomic_load_n(&lgag_stats.state, __ATOMIC_SEQ_CST) != 1) return;
  atomic_store(&lgag_recording, 0);
  lgi_g.enabled = 0;
  __atomic_store_n(&lgag_stats.state, 2, __ATOMIC_SEQ_CST);
  atomic_store(&detach_once, 1);
  lgag_got_atfork();
  lgag_table_atfork();
  lgi_mm_lock_drop(); /* another thread may have held it at the fork */
}

/* ------------------------------------------------------------------ start */

static unsigned long long cfg_num(const char *cfg, const char *key, unsigned long long dflt) {
  const char *p = strstr(cfg, key);
  if (!p) return dflt;
  p += strlen(key);
  unsigned long long v = 0;
  int any = 0;
  for (; *p >= '0' && *p <= '9'; p++, any = 1) v = v * 10 + (unsigned)(*p - '0');
  return any ? v : dflt;
}

/* Copies the value of key (up to the line's end) into out; 0 when absent or too long. */
static int cfg_str(const char *cfg, const char *key, char *out, size_t n) {
  out[0] = 0;
  const char *p = strstr(cfg, key);
  if (!p) return 0;
  p += strlen(key);
  size_t k = strcspn(p, "\n");
  if (k == 0 || k >= n) return 0;
  memcpy(out, p, k);
  out[k] = 0;
  return 1;
}

static _Atomic int starting;

/* A new attach after a detach: the previous region's collector is gone. Its mapping is
 * left (a hook of the last session may still be finishing a record in it), the rest is
 * reset: figures, side table (its blocks may have been freed since, unseen), Python
 * frame ids, and every thread's per-region state (session). */
static void restart(void) {
  lgag_stats.preattach_bytes_released = 0;
  lgag_stats.preattach_blocks_released = 0;
  lgag_stats.slots_patched = 0;
  lgag_stats.slots_restored = 0;
  lgag_stats.table_full = 0;
  lgag_table_reset();
  if (lgi_g.fd >= 0) syscall(SYS_close, lgi_g.fd);
  lgi_g.fd = -1;
  lgi_g.hdr = NULL;
  lgi_python_reset();
  lgi_mm_reset();
  cli_pidfd = -1;
  lgag_py_reset();
  atomic_store(&detach_once, 0);
  atomic_fetch_add(&lgag_session, 1);
}

/* Called by the injector in the stopped thread, at the entry of malloc or free (no
 * allocator lock held by this thread). cfg: "sock=PATH\nsample=N\ndepth=N\ncli=PID\nmmap=0|1\n".
 * Returns the address of the stats block (core/agent_abi.h), or an error code below 4096
 * (1: bad config, 2: allocator not glibc's, 3: region, 4: collector not reachable,
 * 5: thread). */
LG_API uintptr_t lg_agent_start(const char *cfg);
LG_API uintptr_t lg_agent_start(const char *cfg) {
  lgi_tls.guard++;
  uintptr_t rc = 0;
  /* An attach right after another one ended: the last collector is gone, but its
   * watcher detaches at its next tick (100 ms) and then closes that session's socket
   * and pidfd, which must not be this session's. Wait for it to end, up to 1 s, before
   * calling this process recorded by another attach. */
  for (int i = 0; atomic_load(&watcher_running) && i < 100; i++) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  uint32_t was = __atomic_load_n(&lgag_stats.state, __ATOMIC_SEQ_CST);
  int idle = 0;
  if (atomic_load(&watcher_running)) was = 1;
  if (was == 1 || !atomic_compare_exchange_strong(&starting, &idle, 1)) {
    lgi_tls.guard--;
    return 6; /* recording already */
  }
  if (was == 2) { /* attached before: the library stayed as a pass-through; start over */
    restart();
    __atomic_store_n(&lgag_stats.state, 0, __ATOMIC_SEQ_CST);
  }
  const char *s = strstr(cfg, "sock=");
  if (!s) {
    rc = 1;
    goto out;
  }
  s += 5;
  size_t n = strcspn(s, "\n");
  if (n == 0 || n >= sizeof lgi_g.sock_path) {
    rc = 1;
    goto out;
  }
  memcpy(lgi_g.sock_path, s, n);
  lgi_g.sock_path[n] = 0;
  lgi_g.sample_bytes = cfg_num(cfg, "sample=", 0);
  unsigned long long depth = cfg_num(cfg, "depth=", LG_DEFAULT_DEPTH);
  if (depth < 1) depth = 1;
  if (depth > LG_MAX_DEPTH) depth = LG_MAX_DEPTH;
  lgi_g.depth = (uint32_t)depth;
  lgi_g.follow = 0;
  int cli = (int)cfg_num(cfg, "cli=", 0);
  static char py_dir[256], py_moddir[1024], self_path[1024];
  if (!cfg_str(cfg, "\ndir=", py_dir, sizeof py_dir)) py_dir[0] = 0;
  if (!cfg_str(cfg, "\npydir=", py_moddir, sizeof py_moddir)) py_moddir[0] = 0;

  /* the real functions: glibc's (another allocator in front of it is not supported) */
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) {
    rc = 2;
    goto out;
  }
  for (size_t k = 0; k < lgag_nnames; k++) *lgag_names[k].real = dlsym(libc, lgag_names[k].name);
  if (!lgag_real.malloc || !lgag_real.free || !lgag_real.calloc || !lgag_real.realloc || !lgag_real.usable ||
      !lgag_real.dlopen) {
    rc = 2;
    goto out;
  }
  Dl_info di;
  const ElfW(Sym) *sy = NULL;
  void *first = dlsym(RTLD_DEFAULT, "malloc");
  if (first && dladdr1(first, &di, (void **)&sy, RTLD_DL_SYMENT) && sy && sy->st_shndx != SHN_UNDEF &&
      first != (void *)lgag_real.malloc) {
    rc = 2;
    goto out;
  }
  uintptr_t self_base = 0;
  self_path[0] = 0;
  if (dladdr((void *)lg_agent_start, &di)) {
    self_base = (uintptr_t)di.dli_fbase;
    size_t k = di.dli_fname ? strlen(di.dli_fname) : 0;
    if (k && k < sizeof self_path) memcpy(self_path, di.dli_fname, k + 1);
  }
  struct link_map *lm = NULL;
  if (dladdr1((void *)lg_agent_start, &di, (void **)&lm, RTLD_DL_LINKMAP) && lm) self_base = lm->l_addr;
  lgag_py_setup(py_dir, py_moddir, self_path);
  if (lgag_got_prepare(libc, self_base) != 0 || lgag_table_init() != 0) {
    rc = 3;
    goto out;
  }
  lgi_unwind_init();
  lgi_python_detect();
  if (lgi_region_create(lgi_g.depth, lgi_g.sample_bytes, cfg_num(cfg, "mmap=", 1) ? LG_RF_MMAP : 0, 0) != 0) {
    rc = 3;
    goto out;
  }
  if (lgi_send_hello(LG_HELLO_START) < 0) {
    rc = 4;
    goto out;
  }
  if (cli > 0) cli_pidfd = (int)syscall(SYS_pidfd_open, cli, 0);
  static int once;
  if (!once) {
    once = 1;
    pthread_key_create(&lgag_thread_key, lgi_thread_exit);
    pthread_atfork(NULL, NULL, atfork_child);
  }
  lgi_g.enabled = 1;
  /* patch everything with recording off, then record */
  lgag_rescan();
  __atomic_store_n(&lgag_stats.state, 1, __ATOMIC_SEQ_CST);
  lgag_rescan(); /* objects loaded meanwhile */
  atomic_store(&lgag_recording, 1);
  pthread_t th;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  atomic_store(&watcher_running, 1);
  if (pthread_create(&th, &at, watcher, NULL) != 0) {
    atomic_store(&watcher_running, 0);
    detach("cannot start the watcher thread");
    rc = 5;
  }
  pthread_attr_destroy(&at);
  if (!rc) rc = (uintptr_t)&lgag_stats;
out:
  atomic_store(&starting, 0);
  lgi_tls.guard--;
  return rc;
}

/* For tests and gdb: detach now (what the watcher does when the collector ends). */
LG_API void lg_agent_detach(void);
LG_API void lg_agent_detach(void) { detach(NULL); }
