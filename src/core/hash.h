/* SPDX-License-Identifier: MIT */
/*
 * hash.h - the multiplicative hashing constants the layers share: 2^64 / phi, and the
 * prime 0x9E3779B1 next to 2^32 / phi (Knuth's multiplicative method; phi the golden
 * ratio). A key multiplied by
 * an odd constant is a bijection, and the high bits of the product depend on every bit
 * of the key: the top bits are the table index (`(k * LG_HASH_GOLDEN64) >> (64 - bits)`).
 * Header only, for the preload library as for the collector.
 */
#ifndef LG_CORE_HASH_H
#define LG_CORE_HASH_H

#define LG_HASH_GOLDEN64 0x9E3779B97F4A7C15ull
#define LG_HASH_GOLDEN32 0x9E3779B1u

#endif
