/* SPDX-License-Identifier: MIT */
/*
 * report_html.h - the report as one self-contained HTML page: leaks with their curves,
 * flame graphs of the peak and of growth, every allocation site, the processes
 * (docs/html.md).
 */
#ifndef LG_OUTPUT_REPORT_HTML_H
#define LG_OUTPUT_REPORT_HTML_H

#include <stdio.h>

#include "output/report.h"
#include "output/store.h"

/* Writes the page of store (r: its built report) to f. 0, -ENOMEM or -EIO. */
int lgr_print_html(FILE *f, lgst_t *store, const lgr_report_t *r, const lgr_options_t *o);

#endif
