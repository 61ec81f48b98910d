/* SPDX-License-Identifier: MIT */
/*
 * classify_file.h - what `leakguard classify FILE` does, below the command line: the
 * memory curve of a CSV file (analysis/csv.h) classified (analysis/classify.h) and
 * printed, as text or JSON. The CLI (src/cli/cmd_classify.c) parses the options and
 * maps the result to an exit status; the classifier's evaluator and tests call this.
 *
 * Analysis layer; it allocates, so it is not part of the preload library.
 */
#ifndef LG_ANALYSIS_CLASSIFY_FILE_H
#define LG_ANALYSIS_CLASSIFY_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Classifies the series in path ("-" for stdin) and prints to out:
 *   text: the class name, then "  %-18s %.4f" with each class's probability;
 *   JSON: {"class":NAME,"probabilities":{NAME:P,...}} on one line, P rounded to 1e-4.
 * 0; -EINVAL bad input (why: "FILE:LINE: reason", or "FILE: reason"); -ENOMEM and
 * -EIO (writing out failed), why saying which. Nothing is printed on an error but a
 * failed write. */
int lga_classify_file(const char *path, uint64_t max_bytes, int json, FILE *out, char *why, size_t whylen);

#endif /* LG_ANALYSIS_CLASSIFY_FILE_H */
