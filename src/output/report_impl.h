/* SPDX-License-Identifier: MIT */
/*
 * report_impl.h - what report.c (building) and report_print.c (printing) share, and
 * the numbers of the significance rule (docs/detection.md, "Minor growth").
 */
#ifndef LG_OUTPUT_REPORT_IMPL_H
#define LG_OUTPUT_REPORT_IMPL_H

#include "output/report.h"

/* Below this growth over the run a site is never a suspect (bytes). */
#define LGR_MIN_GROWTH_BYTES LGD_MIN_GROWTH_BYTES
/* Minor growth, either way:
 *  - tiny against the process: the growth is under LGR_MINOR_REL of the process's
 *    typical live memory (the median of its snapshots), at its rate the memory limit is
 *    more than LGR_MINOR_OOM_S away and the process would take more than
 *    LGR_MINOR_DOUBLING_S to double, and it is not steady (lgr_is_steady);
 *  - a handful of first uses: fewer than LGR_MINOR_BLOCKS blocks gained, together
 *    under LGR_FEW_BLOCKS_REL of the process's typical live memory. */
#define LGR_MINOR_REL 0.02
#define LGR_MINOR_OOM_S 86400.0
#define LGR_MINOR_DOUBLING_S 1200.0
#define LGR_MINOR_BLOCKS 8
#define LGR_FEW_BLOCKS_REL 0.25
/* A steady growth (not minor for being small): linear or accelerating, with a trend
 * this strong. */
#define LGR_STEADY_TAU 0.7
#define LGR_STEADY_P 1e-4

/* Frees what a site owns and zeroes it. */
void lgr_site_free(lgr_site_t *s);

#endif
