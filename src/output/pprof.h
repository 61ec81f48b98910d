/* SPDX-License-Identifier: MIT */
/*
 * pprof.h - the recording as a gzipped pprof profile (profile.proto), for Go's pprof,
 * Pyroscope, Parca, Grafana and speedscope (docs/json.md, "pprof").
 */
#ifndef LG_OUTPUT_PPROF_H
#define LG_OUTPUT_PPROF_H

#include <stdio.h>

#include "output/report.h"
#include "output/store.h"

/* Writes the profile of store to f; r is its built report (for the growth of the
 * leaking sites). 0, -ENOMEM, or -EIO (a damaged database, a failed write). */
int lgr_print_pprof(FILE *f, lgst_t *store, const lgr_report_t *r);

#endif
