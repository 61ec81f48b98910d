/* SPDX-License-Identifier: MIT */
/* fake_c10_cuda.c - built as libc10_cuda.so (tests only): a library with the name of
 * PyTorch's CUDA allocator library, so that the report's "PyTorch CUDA" notice can be
 * tested without a CUDA build of PyTorch (the report recognises the module by name). */
int lgc_fake_c10_cuda(void);
int lgc_fake_c10_cuda(void) { return 10; }
