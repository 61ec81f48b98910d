/* SPDX-License-Identifier: MIT */
/*
 * blockhdr.h - the 16-byte header libleakguard.so puts in front of the malloc blocks it
 * records (and of tagged blocks, and of every block when the allocator underneath is
 * not glibc's). Shared by the preload library (src/capture/preload.c), which writes and
 * frees it, and the Python explainer (src/python/explain.c), which reads it to map an
 * object to its allocation site.
 *
 *   p - 16: uint32 site word: bits 0..19 the site (0: not recorded; stack ids are
 *           below 2^20, region_writer.c), bits 20..31 the step count at its birth
 *           modulo 4096 (its age in steps, region.h stepmap_off); uint32 birth epoch
 *   p -  8: uint64 word: bit 3 LG_BLK_MARK, bits 4..9 log2 of the offset from the
 *           underlying allocator's pointer to p (>= 4), bits 10..19 lg_tag_push() tag,
 *           bits 20..63 requested size (so at most 16 TiB), bit 0 LG_BLK_SAMPLED (a
 *           full recording's block sampled under a Python import: it counts for its
 *           sampling weight, preload.c), bit 1 LG_BLK_PYOBJ, bit 2 zero.
 *   A Python object recorded through CPython's own allocator
 *   (LG_BLK_PYOBJ, capture/pymalloc.c) sits 32 bytes into its block, and the
 *   word at p - 24 holds lg_blk_pyobj_cookie(p, secret): such a block is told from a
 *   pymalloc object, whose p - 8 is any word at all (the end of the object before it),
 *   by that 64-bit check, not by the mark bit alone.
 *
 * Why the mark is bit 3: for a block that glibc's malloc returned, the word at p - 8 is
 * its chunk's size field. Chunk sizes are multiples of MALLOC_ALIGNMENT (16 on x86-64
 * and AArch64) and the low three bits are the flags PREV_INUSE, IS_MMAPPED and
 * NON_MAIN_ARENA, so bit 3 is always clear there. A block without a header (sampled
 * mode: almost every block) is therefore told apart by one load and one test, with no
 * side table and no lock, and costs no memory at all. When the next allocator is not
 * glibc's, the preload library heads every block instead (see preload.c).
 */
#ifndef LG_BLOCKHDR_H
#define LG_BLOCKHDR_H

#include <stddef.h>
#include <stdint.h>

#define LG_BLK_HDR 16u
#define LG_BLK_MARK 0x8u
#define LG_BLK_SAMPLED 0x1u
#define LG_BLK_PYOBJ 0x2u
#define LG_BLK_PYOBJ_OFFLOG2 5u
#define LG_BLK_OFF_SHIFT 4
#define LG_BLK_OFF_MASK (0x3fULL << LG_BLK_OFF_SHIFT)
#define LG_BLK_TAG_SHIFT 10
#define LG_BLK_TAG_MASK (0x3ffULL << LG_BLK_TAG_SHIFT)
#define LG_BLK_SIZE_SHIFT 20
#define LG_BLK_MAX_SIZE (((uint64_t)1 << (64 - LG_BLK_SIZE_SHIFT)) - 1)

#define LG_BLK_SITE_BITS 20
#define LG_BLK_SITE_MASK ((1u << LG_BLK_SITE_BITS) - 1)
#define LG_BLK_STEP_MOD (1u << (32 - LG_BLK_SITE_BITS)) /* 4096 */

typedef struct lg_blk {
  uint32_t site;
  uint32_t epoch;
  uint64_t word;
} lg_blk_t;

static inline uint64_t lg_blk_word(size_t size, unsigned offset_log2, unsigned tag) {
  return ((uint64_t)size << LG_BLK_SIZE_SHIFT) | ((uint64_t)tag << LG_BLK_TAG_SHIFT) |
         ((uint64_t)offset_log2 << LG_BLK_OFF_SHIFT) | LG_BLK_MARK;
}
/* The site word of a block recorded at site (non-zero) with `steps` steps marked. */
static inline uint32_t lg_blk_site_word(uint32_t site, uint64_t steps) {
  return site | (uint32_t)(steps % LG_BLK_STEP_MOD) << LG_BLK_SITE_BITS;
}
static inline uint32_t lg_blk_site(uint32_t w) { return w & LG_BLK_SITE_MASK; }
static inline uint32_t lg_blk_birth_step(uint32_t w) { return w >> LG_BLK_SITE_BITS; }
/* The age in steps of a block freed now that `steps` steps are marked, `first` being
 * the step count when its birth tick opened (the step map, region.h stepmap_off: at
 * most its birth step, so steps - first bounds the age from above) and bstep its birth
 * step modulo LG_BLK_STEP_MOD, or LG_BLK_NO_STEP when unknown. With the residue the age
 * is the largest value under the bound that has it: exact while fewer than 4096 steps
 * were marked in the birth tick before the birth. Without it, the bound. */
#define LG_BLK_NO_STEP UINT32_MAX
static inline uint32_t lg_step_age(uint32_t first, uint32_t steps, uint32_t bstep) {
  uint32_t bound = first <= steps ? steps - first : 0;
  if (bstep == LG_BLK_NO_STEP) return bound;
  uint32_t r = (steps - bstep) % LG_BLK_STEP_MOD;
  return bound >= r ? bound - (bound - r) % LG_BLK_STEP_MOD : bound;
}

static inline int lg_blk_marked(uint64_t w) { return (w & LG_BLK_MARK) != 0; }
/* The check word of a LG_BLK_PYOBJ block at p (SplitMix64's finalizer of p and the
 * process's secret). */
static inline uint64_t lg_blk_pyobj_cookie(uintptr_t p, uint64_t secret) {
  uint64_t z = (uint64_t)p ^ secret;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static inline size_t lg_blk_word_size(uint64_t w) { return (size_t)(w >> LG_BLK_SIZE_SHIFT); }
static inline unsigned lg_blk_word_offlog2(uint64_t w) { return (unsigned)((w & LG_BLK_OFF_MASK) >> LG_BLK_OFF_SHIFT); }
static inline unsigned lg_blk_word_tag(uint64_t w) { return (unsigned)((w & LG_BLK_TAG_MASK) >> LG_BLK_TAG_SHIFT); }

#endif
