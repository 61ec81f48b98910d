/* SPDX-License-Identifier: MIT */
/*
 * callers - many call chains that reach malloc through the same helpers at the same
 * depth, as C++ code reaches it through operator new (tests/integration/callers.py).
 *
 * 48 caller functions; caller i keeps ROUNDS blocks of size_of(i) bytes, and each
 * round also allocates and frees a block of its own, so the recorder's stack cache
 * sees the chains interleaved, round after round. Chains by caller:
 *   i % 3 == 0   caller_i -> one_level(i) -> malloc
 *   i % 3 == 1   caller_i -> two_level(i) -> one_level(i) -> malloc
 *   i % 3 == 2   caller_i -> three_level -> two_level -> one_level -> malloc
 * so that for every kind, all 16 callers share the return address into the allocator's
 * caller (one_level) and the stack pointer there, and for the deeper kinds the next one
 * or two return addresses too: only the frames further up tell them apart.
 *
 * At the end it prints, per caller, "caller_NN BYTES BLOCKS" (what it keeps live), and
 * exits without freeing them.
 *
 *   callers [--rounds R]      (default 200)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCALLERS 48

static int rounds = 200;
static void *volatile sink;

static size_t size_of(int i) { return 1000 + 16 * (size_t)i; }

static __attribute__((noinline)) void *one_level(size_t n) {
  void *p = malloc(n);
  if (!p) abort();
  memset(p, 1, 16);
  __asm__ volatile("" ::"r"(p) : "memory");
  return p;
}
static __attribute__((noinline)) void *two_level(size_t n) {
  void *p = one_level(n);
  __asm__ volatile("" ::"r"(p) : "memory");
  return p;
}
static __attribute__((noinline)) void *three_level(size_t n) {
  void *p = two_level(n);
  __asm__ volatile("" ::"r"(p) : "memory");
  return p;
}

static void **kept[NCALLERS];

/* caller_NN: keeps one block a round, allocates and frees another */
#define CALLER(n)                                                                                                      \
  static __attribute__((noinline)) void caller_##n(int r) {                                                            \
    void *(*alloc)(size_t) = n % 3 == 0 ? one_level : n % 3 == 1 ? two_level : three_level;                           \
    kept[n][r] = alloc(size_of(n));                                                                                    \
    void *tmp = alloc(size_of(n) + 8);                                                                                 \
    sink = tmp;                                                                                                        \
    free(tmp);                                                                                                         \
    __asm__ volatile("" ::: "memory");                                                                                 \
  }
CALLER(0)
CALLER(1)
CALLER(2)
CALLER(3)
CALLER(4)
CALLER(5)
CALLER(6)
CALLER(7)
CALLER(8)
CALLER(9)
CALLER(10)
CALLER(11)
CALLER(12)
CALLER(13)
CALLER(14)
CALLER(15)
CALLER(16)
CALLER(17)
CALLER(18)
CALLER(19)
CALLER(20)
CALLER(21)
CALLER(22)
CALLER(23)
CALLER(24)
CALLER(25)
CALLER(26)
CALLER(27)
CALLER(28)
CALLER(29)
CALLER(30)
CALLER(31)
CALLER(32)
CALLER(33)
CALLER(34)
CALLER(35)
CALLER(36)
CALLER(37)
CALLER(38)
CALLER(39)
CALLER(40)
CALLER(41)
CALLER(42)
CALLER(43)
CALLER(44)
CALLER(45)
CALLER(46)
CALLER(47)

static void (*const callers[NCALLERS])(int) = {
    caller_0,  caller_1,  caller_2,  caller_3,  caller_4,  caller_5,  caller_6,  caller_7,  caller_8,  caller_9,
    caller_10, caller_11, caller_12, caller_13, caller_14, caller_15, caller_16, caller_17, caller_18, caller_19,
    caller_20, caller_21, caller_22, caller_23, caller_24, caller_25, caller_26, caller_27, caller_28, caller_29,
    caller_30, caller_31, caller_32, caller_33, caller_34, caller_35, caller_36, caller_37, caller_38, caller_39,
    caller_40, caller_41, caller_42, caller_43, caller_44, caller_45, caller_46, caller_47};

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
  if (rounds < 1) {
    fprintf(stderr, "usage: callers [--rounds R>0]\n");
    return 2;
  }
  for (int i = 0; i < NCALLERS; i++)
    if (!(kept[i] = calloc((size_t)rounds, sizeof(void *)))) return 1;
  for (int r = 0; r < rounds; r++)
    for (int i = 0; i < NCALLERS; i++) callers[(i * 7 + r) % NCALLERS](r); /* a new order each round */
  for (int i = 0; i < NCALLERS; i++) printf("caller_%d %zu %d\n", i, size_of(i) * (size_t)rounds, rounds);
  fflush(stdout);
  return 0;
}
