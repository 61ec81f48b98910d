/* SPDX-License-Identifier: MIT */
/*
 * blocks.c - block attribution for leakguard.explain(): a heap block or a Python object
 * -> the allocation site the recorder gave it (lg_site_of), refusing anything that is
 * not the start of a recorded block (static objects, unmapped header pages).
 */
#include "python/explain.h"
#include "core/blockhdr.h"
#include "core/platform.h"

#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

typedef struct {
  uintptr_t lo, hi;
} range_t;
static range_t *img;
static size_t nimg, capimg;

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  uintptr_t lo, hi;
  for (int i = 0; lg_image_segment(info, &i, &lo, &hi);) {
    if (nimg == capimg) {
      size_t nc = capimg ? capimg * 2 : 256;
      range_t *n = realloc(img, nc * sizeof *n);
      if (!n) return 1;
      img = n;
      capimg = nc;
    }
    img[nimg].lo = lo;
    img[nimg].hi = hi;
    nimg++;
  }
  return 0;
}

static int range_cmp(const void *a, const void *b) {
  const range_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void images_refresh(void) {
  nimg = 0;
  dl_iterate_phdr(phdr_cb, NULL);
  qsort(img, nimg, sizeof *img, range_cmp);
}

/* Inside a loaded ELF image (static objects: small ints, builtin types, ...). */
static int in_image(uintptr_t a) {
  if (!nimg) images_refresh();
  size_t lo = 0, hi = nimg;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (img[mid].hi <= a) lo = mid + 1;
    else if (img[mid].lo > a) hi = mid;
    else return 1;
  }
  return 0;
}

/* A recorded malloc block has the recorder's 16-byte header in front of it
 * (src/core/blockhdr.h); others (in sampled mode, most) have glibc's chunk header
 * there, without the mark bit. lg_site_of() checks the mark; we also check that the
 * rest looks like a header first, so that a pointer that is not a block start is
 * (almost always) refused instead of yielding a random site. */
uint32_t lgpy_block_site(const void *block, size_t min_size, size_t *block_size) {
  if (!lgpy.site_of || !block) return 0;
  uintptr_t a = (uintptr_t)block;
  if ((a & 15) || a < 4096 || in_image(a)) return 0;
  if (lgpy.block) { /* attached: exact addresses in the agent's side table, no header */
    uint32_t s = 0;
    uint64_t size = 0;
    if (lgpy.block(block, &s, &size) != 0 || s == 0 || size < min_size) return 0;
    if (block_size) *block_size = (size_t)size;
    return s;
  }
  uintptr_t h = a - LG_BLK_HDR;
  long pg = 4096;
  lg_blk_t hdr;
  if ((h & ~(uintptr_t)(pg - 1)) != (a & ~(uintptr_t)(pg - 1))) {
    /* A page-aligned block (a mapping's start: shared-memory tensors of DataLoader
     * workers, big allocations): the page before may be unmapped or PROT_NONE (a guard
     * page; mincore says it is there). Read it through the kernel, which fails instead
     * of faulting. */
    struct iovec local = {&hdr, sizeof hdr}, remote = {(void *)h, sizeof hdr};
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof hdr) return 0;
  } else {
    memcpy(&hdr, (const void *)h, sizeof hdr);
  }
  const uint64_t w = hdr.word;
  unsigned off = lg_blk_word_offlog2(w);
  uint64_t size = lg_blk_word_size(w);
  if (!lg_blk_marked(w) || (w & 6) || off < 4 || off > 20 || size < min_size) return 0; /* bit 0: LG_BLK_SAMPLED */
  uint32_t s = 0;
  if (lgpy.site_of(block, &s) != 0 || s == 0) return 0;
  if (block_size) *block_size = (size_t)size;
  return s;
}

/* pymalloc kept (wrapped): a Python object or buffer at block recorded by the
 * recorder's pymalloc wrapper, told from any other by its check word (lg_python_block),
 * or a block over pymalloc's 512 bytes, which is a malloc block (header as above). */
uint32_t lgpy_pyobj_site(const void *block, size_t min_size, size_t *block_size) {
  uintptr_t a = (uintptr_t)block;
  if (!lgpy.pyobj || !block || (a & 15) || a < 4096 || in_image(a)) return 0;
  uint32_t s = 0;
  uint64_t size = 0;
  if (lgpy.pyobj(block, &s, &size) == 0 && s && size >= min_size) {
    if (block_size) *block_size = (size_t)size;
    return s;
  }
  return min_size > 512 ? lgpy_block_site(block, min_size, block_size) : 0;
}

uint32_t lgpy_buffer_site(const void *buf, size_t cap) {
  if (!buf) return 0;
  if (lgpy.pymalloc_wrapped && cap <= 512) {
    uint32_t s = lgpy_pyobj_site(buf, 1, NULL);
    if (s || cap) return s; /* a buffer that fits pymalloc and is not headed: unrecorded */
  }
  if (!lgpy.pymalloc_is_malloc && !lgpy.block && !lgpy.pymalloc_wrapped) return 0;
  return lgpy_block_site(buf, 1, NULL);
}

uint32_t lgpy_object_site(PyObject *o, size_t *size) {
  /* With pymalloc, objects up to 512 bytes live in its arenas: only the side table of an
   * attached process (exact addresses) can be asked about any object safely. */
  if ((!lgpy.pymalloc_is_malloc && !lgpy.block && !lgpy.pymalloc_wrapped) || !o) return 0;
  size_t pre = lgpy_preheader(o);
  if (lgpy.pymalloc_wrapped) {
    /* an object over pymalloc's 512 bytes is a malloc block: its size says which */
    size_t need = pre + (size_t)Py_TYPE(o)->tp_basicsize;
    if (Py_TYPE(o)->tp_itemsize && !PyLong_Check(o)) { /* 3.12's ints keep no size in ob_size */
      Py_ssize_t n = Py_SIZE(o);
      need += (size_t)(n < 0 ? -n : n) * (size_t)Py_TYPE(o)->tp_itemsize;
    }
    const char *b = (const char *)o - pre;
    uint32_t s = lgpy_pyobj_site(b, pre + sizeof(PyObject), size);
    return s || need <= 512 ? s : lgpy_block_site(b, pre + sizeof(PyObject), size);
  }
  size_t minsz = pre + sizeof(PyObject);
  size_t bs = 0;
  uint32_t s = lgpy_block_site((const char *)o - pre, minsz, &bs);
  if (s && size) *size = bs;
  return s;
}
