/* SPDX-License-Identifier: MIT */
/*
 * merge.h - several leakguard databases (the ranks and nodes of one job, each recorded
 * on its own) merged into one, for one report (`leakguard merge`, docs/schema.md).
 */
#ifndef LG_OUTPUT_MERGE_H
#define LG_OUTPUT_MERGE_H

#include <stddef.h>

#include "output/store.h"

/* Writes out (which must not exist) with the n databases in[] merged: their process
 * images renumbered, each with its host and rank and a `source` label. 0, or -errno
 * with why saying it in one line (nothing is left at out). An input given twice, out
 * among the inputs, and a database this leakguard cannot read are refused. */
int lgst_merge(const char *out, const char *const *in, int n, char *why, size_t whylen);

#endif
