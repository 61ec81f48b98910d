/* SPDX-License-Identifier: MIT */
/*
 * breaker_test.c - the in-process breaker API of libleakguard.so (include/leakguard.h):
 * tags and quotas (with and without the recorder), batch size and admission per level,
 * level subscribers and LRU eviction driven by a guard writing the shared region.
 *
 * Run bare ("standalone": no recorder; levels stay normal, tags use private counters)
 * or under `leakguard run` ("recorded"): then this program plays the guard itself by
 * mapping its own region from /proc/self/fd and writing guard_level / evict_request.
 * Prints "ok: ..." per check and exits non-zero on the first failure.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/region.h"
#include "leakguard.h"

#define CHECK(cond, ...)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
      fprintf(stderr, __VA_ARGS__);                                                       \
      fputc('\n', stderr);                                                                \
      exit(1);                                                                            \
    }                                                                                     \
    printf("ok: %s\n", #cond);                                                            \
  } while (0)

/* Keeps GCC from pairing and removing malloc/free of pointers it sees unused. */
static void *keep(void *p) {
  __asm__ volatile("" : : "g"(p) : "memory");
  return p;
}
#define malloc(n) keep(malloc(n))
#define calloc(n, m) keep(calloc(n, m))
#define realloc(p, n) keep(realloc(p, n))

static int quota_calls;
static int64_t quota_live;
static void on_quota(int tag, int64_t live, void *arg) {
  (void)tag;
  (void)arg;
  quota_calls++;
  quota_live = live;
  void *p = malloc(100); /* callbacks may allocate */
  free(p);
}

static void test_tags(void) {
  int id = lg_tag_push("request");
  CHECK(id >= 1, "push returned %d", id);
  char *a = malloc(1000);
  char *b = calloc(10, 100);
  lg_tag_stats_t st;
  CHECK(lg_tag_stats(id, &st) == 0 && st.live_bytes == 2000, "live %lld", (long long)st.live_bytes);
  lg_tag_pop();
  char *c = malloc(5000); /* outside the tag */
  CHECK(lg_tag_stats(id, &st) == 0 && st.live_bytes == 2000, "live %lld", (long long)st.live_bytes);
  free(a);
  CHECK(lg_tag_stats(id, &st) == 0 && st.live_bytes == 1000 && st.peak_bytes == 2000,
        "live %lld peak %lld", (long long)st.live_bytes, (long long)st.peak_bytes);
  b = realloc(b, 3000); /* realloc outside the tag moves the bytes out of it */
  CHECK(lg_tag_stats(id, &st) == 0 && st.live_bytes == 0, "live %lld", (long long)st.live_bytes);
  free(b);
  free(c);
  /* nesting: innermost wins */
  int outer = lg_tag_push("outer");
  int inner = lg_tag_push("inner");
  void *x = malloc(64);
  lg_tag_pop();
  void *y = malloc(32);
  lg_tag_pop();
  lg_tag_stats_t so, si;
  lg_tag_stats(outer, &so);
  lg_tag_stats(inner, &si);
  CHECK(so.live_bytes == 32 && si.live_bytes == 64, "outer %lld inner %lld", (long long)so.live_bytes,
        (long long)si.live_bytes);
  free(x);
  free(y);
  /* quota with a callback: fires once per crossing */
  CHECK(lg_tag_quota("q-cb", 10000, on_quota, NULL) == 0, "quota");
  int q = lg_tag_push("q-cb");
  void *blocks[4];
  for (int i = 0; i < 4; i++) blocks[i] = malloc(4000);
  CHECK(quota_calls == 1 && quota_live == 12000, "calls %d live %lld", quota_calls, (long long)quota_live);
  for (int i = 0; i < 4; i++) free(blocks[i]);
  blocks[0] = malloc(11000);
  CHECK(quota_calls == 2, "second crossing: calls %d", quota_calls);
  free(blocks[0]);
  lg_tag_pop();
  (void)q;
  /* quota without a callback: the allocation fails */
  CHECK(lg_tag_quota("q-fail", 8192, NULL, NULL) == 0, "quota");
  lg_tag_push("q-fail");
  void *ok = malloc(8000);
  errno = 0;
  void *no = malloc(1000);
  int e = errno;
  lg_tag_pop();
  CHECK(ok != NULL && no == NULL && e == ENOMEM, "ok %p no %p errno %d", ok, no, e);
  free(ok);
}

static lg_region_hdr_t *own_region(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return NULL;
  struct dirent *de;
  lg_region_hdr_t *h = NULL;
  while ((de = readdir(d))) {
    char path[64], link[256];
    snprintf(path, sizeof path, "/proc/self/fd/%s", de->d_name);
    ssize_t k = readlink(path, link, sizeof link - 1);
    if (k <= 0) continue;
    link[k] = 0;
    if (!strstr(link, "memfd:leakguard-region")) continue;
    int fd = open(path, O_RDWR);
    if (fd < 0) continue;
    lg_region_hdr_t tmp;
    /* a forked child may still hold its parent's descriptor: only our own region */
    if (pread(fd, &tmp, sizeof tmp, 0) == (ssize_t)sizeof tmp && tmp.magic == LG_REGION_MAGIC &&
        tmp.pid == (int32_t)getpid())
      h = mmap(NULL, tmp.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (h == MAP_FAILED) h = NULL;
    if (h) break;
  }
  closedir(d);
  return h;
}

static int changes[8], nchanges;
static void on_level(lg_level_t o, lg_level_t n, void *arg) {
  (void)o;
  (void)arg;
  if (nchanges < 8) changes[nchanges++] = (int)n;
}
static size_t freed_a, freed_b;
static int evict_order[4], nevict;
static size_t evict_a(size_t want, void *arg) {
  (void)arg;
  evict_order[nevict++ & 3] = 1;
  size_t f = want < 1000 ? want : 1000;
  freed_a += f;
  return f;
}
static size_t evict_b(size_t want, void *arg) {
  (void)arg;
  evict_order[nevict++ & 3] = 2;
  size_t f = want < 5000 ? want : 5000;
  freed_b += f;
  return f;
}

static void sleep_ms(int ms) { usleep((useconds_t)ms * 1000); }

static void test_levels(int recorded) {
  CHECK(lg_level() == LG_LEVEL_NORMAL && lg_admit() == 1 && lg_batch_size(64) == 64, "normal");
  CHECK(!strcmp(lg_level_name(LG_LEVEL_BREAKER), "breaker"), "names");
  int a = lg_evict_register("cache-a", evict_a, NULL);
  int b = lg_evict_register("cache-b", evict_b, NULL);
  CHECK(a >= 0 && b >= 0, "register");
  lg_evict_touch(a); /* b is now the least recently used */
  size_t got = lg_evict(3000);
  CHECK(got == 3000 && evict_order[0] == 2 && nevict == 1, "LRU first: got %zu order %d n %d", got,
        evict_order[0], nevict);
  if (!recorded) return;
  lg_region_hdr_t *h = own_region();
  CHECK(h != NULL, "region of this process found");
  CHECK(lg_subscribe(on_level, NULL) >= 0, "subscribe");
  atomic_store(&h->guard_level, LG_LEVEL_WARN);
  CHECK(lg_level() == LG_LEVEL_WARN && lg_admit() == 1 && lg_batch_size(64) == 44, "warn: batch %zu",
        lg_batch_size(64));
  atomic_store(&h->guard_level, LG_LEVEL_BREAKER);
  CHECK(lg_admit() == 0 && lg_batch_size(64) == 32 && lg_batch_size(1) == 1, "breaker");
  sleep_ms(200);
  CHECK(nchanges >= 1 && changes[nchanges - 1] == LG_LEVEL_BREAKER, "subscriber saw breaker (%d changes)",
        nchanges);
  nevict = 0;
  freed_a = freed_b = 0;
  atomic_store(&h->evict_request, 2500);
  sleep_ms(200);
  CHECK(freed_a + freed_b == 2500 && atomic_load(&h->evict_request) == 0, "evict request served: %zu",
        freed_a + freed_b);
  freed_a = freed_b = 0;
  atomic_store(&h->guard_level, LG_LEVEL_EMERGENCY);
  sleep_ms(200);
  CHECK(changes[nchanges - 1] == LG_LEVEL_EMERGENCY && freed_a == 1000 && freed_b == 5000,
        "emergency: every cache asked (a %zu b %zu)", freed_a, freed_b);
  atomic_store(&h->guard_level, LG_LEVEL_NORMAL);
  sleep_ms(200);
  CHECK(changes[nchanges - 1] == LG_LEVEL_NORMAL && lg_admit() == 1, "back to normal");
}

/* Polls until the last level change a subscriber heard is want (the watcher polls every
 * 50 ms; a loaded machine may delay it): 1, or 0 after 10 s. */
static int heard(int want) {
  for (int i = 0; i < 1000; i++) {
    if (nchanges > 0 && changes[nchanges - 1] == want) return 1;
    sleep_ms(10);
  }
  return 0;
}

/* A forked worker (a DataLoader, a prefork server) keeps its parent's subscribers: the
 * watcher thread must run in the child too, on the child's own region. */
static void test_fork(void) {
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    lg_region_hdr_t *h = own_region();
    if (!h) _exit(2);
    nchanges = 0;
    atomic_store(&h->guard_level, LG_LEVEL_BREAKER);
    _exit(heard(LG_LEVEL_BREAKER) ? 0 : 3);
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "forked worker's subscriber heard its level change (child status %d: 2 no region, 3 not heard)",
        WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

int main(int argc, char **argv) {
  int recorded = argc > 1 && !strcmp(argv[1], "recorded");
  CHECK(lg_recording() == recorded, "lg_recording() == %d", recorded);
  test_tags();
  test_levels(recorded);
  if (recorded) test_fork();
  printf("breaker_test: all checks passed (%s)\n", recorded ? "recorded" : "standalone");
  return 0;
}
