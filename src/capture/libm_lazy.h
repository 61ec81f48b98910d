/* SPDX-License-Identifier: MIT */
/*
 * libm_lazy.h - included first in the classifier's objects built for libleakguard.so
 * (CMakeLists.txt, lg_classify_preload): after <math.h>, its calls of libm go to
 * libm_lazy.c, which loads libm at lg_classify's first call.
 */
#ifndef LG_CAPTURE_LIBM_LAZY_H
#define LG_CAPTURE_LIBM_LAZY_H

#include <math.h>

__attribute__((visibility("hidden"))) double lgi_m_log10(double x);
__attribute__((visibility("hidden"))) double lgi_m_log1p(double x);
__attribute__((visibility("hidden"))) double lgi_m_log2(double x);
__attribute__((visibility("hidden"))) double lgi_m_sqrt(double x);
__attribute__((visibility("hidden"))) double lgi_m_exp(double x);
#define log10 lgi_m_log10
#define log1p lgi_m_log1p
#define log2 lgi_m_log2
#define sqrt lgi_m_sqrt
#define exp lgi_m_exp

#endif
