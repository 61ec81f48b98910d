/* SPDX-License-Identifier: MIT */
/*
 * python.c - Python frames for allocations made while CPython 3.9 to 3.13 runs Python
 * code.
 *
 * Mechanism (chosen by measurement, see docs/python.md): read the interpreter's own
 * frame chain of the *allocating* thread. PyGILState_GetThisThreadState() is a
 * pthread_getspecific (no GIL, no allocation; NULL before Py_Initialize and after
 * finalization); from its thread state the innermost frame and the links to its
 * callers are read, which only this thread pushes and pops, so they are stable while it
 * sits in malloc (also when PyTorch released the GIL around an op). No frame objects
 * are created, no reference counts touched, nothing allocated: the public frame C-API
 * would do all three and can run a garbage collection inside malloc.
 *
 * The layouts differ per minor version (PyFrameObject chains up to 3.10,
 * _PyInterpreterFrame since 3.11, no _PyCFrame in 3.13, ...): src/capture/pylayout.h
 * holds one table entry per version, each number with the header and field it comes
 * from. The entry is chosen at run time from the loaded interpreter's version
 * (Py_Version from 3.11, Py_GetVersion() before), so nothing is built per version and
 * nothing includes Python.h. Any other version, and the free-threaded build, records
 * native frames only, with one line on stderr. Symbols are found with dlsym: nothing
 * links libpython.
 *
 * Every pointer read from the interpreter is checked before it is followed (non-NULL,
 * aligned, in the user half of the address space), and a code object or string must
 * have the interpreter's own type object (PyCode_Type, PyUnicode_Type); instruction
 * indices must lie inside their code object. A chain that fails a check (a frame
 * caught half pushed, e.g. by a signal handler that allocates) ends there. The walk is
 * bounded by `max` frames and LGI_PY_HOPS links. The reading itself is
 * src/capture/pyread.h's, shared with liblgpool's site profile.
 *
 * Each (code object, instruction) pair maps to a pyframe record (file, function name,
 * line from the interpreter's PyCode_Addr2Line, which only decodes the immutable line
 * table), interned in the shared region on first sight and cached per thread. The stack
 * of an allocation is then [Python frames innermost first..., native frames...].
 */
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture/pyread.h"
#include "capture/recorder.h"
#include "core/hash.h"
#include "core/platform.h"
#include "leakguard.h"

#define LGI_PY_HOPS 256 /* links followed at most (incomplete and shim frames included) */

static lgi_pyreader_t rd;                     /* the running interpreter's layout and symbols */
uintptr_t lgi_py_interp_lo, lgi_py_interp_hi; /* the module holding the interpreter loop */
int lgi_py_state;                             /* 0 unknown, 1 active, -1 off (recorder.h) */

/* Code objects' deaths, once pymalloc's free is wrapped (full mode, pymalloc.c): every
 * code object is freed through it (PyObject_Free; code objects are not tracked by the
 * collector, so the pointer freed is the object), and lgi_python_code_died moves the
 * generation on. The chain key then mixes the generation in once instead of each
 * link's code fingerprint (~100 instructions per recorded object; BENCHMARKS.md). */
int lgi_py_code_gen_on;
uint64_t lgi_py_code_gen;
uintptr_t lgi_py_code_type;
void lgi_python_count_code_deaths(void) {
  lgi_python_detect();
  if (!lgi_python_active() || !rd.code_type) return;
  __atomic_store_n(&lgi_py_code_type, rd.code_type, __ATOMIC_RELAXED);
  __atomic_store_n(&lgi_py_code_gen_on, 1, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- detection */

/* One line on stderr, assembled without stdio: "leakguard: <a><3.N><b>\n"; at most
 * once per process, whichever thread gets here first. */
static void say(const char *a, unsigned major, unsigned minor, const char *b) {
  static int said;
  if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) return;
  char buf[256];
  size_t n = 0;
  const char *parts[2] = {a, b};
  for (int p = 0; p < 2; p++) {
    for (const char *s = parts[p]; *s && n < sizeof buf - 16; s++) buf[n++] = *s;
    if (p == 0 && major) {
      unsigned v[2] = {major, minor};
      for (int k = 0; k < 2; k++) {
        char d[10];
        int nd = 0;
        unsigned x = v[k];
        do d[nd++] = (char)('0' + x % 10);
        while ((x /= 10) && nd < 10);
        while (nd) buf[n++] = d[--nd];
        if (k == 0) buf[n++] = '.';
      }
    }
  }
  buf[n++] = '\n';
  (void)!write(2, buf, n);
}

void lgi_python_detect(void) {
  if (lgi_py_state != 0) return;
  unsigned major = 0, minor = 0;
  lgi_pyreader_t r;
  int k = lgi_pyreader_init(&r, &major, &minor);
  if (k == LGI_PYR_NONE) return; /* not a Python process (yet) */
  if (k == LGI_PYR_FREETHREADED) {
    say("leakguard: free-threaded CPython ", major, minor,
        "t: Python frames are not read (docs/python.md): recording native frames only");
    lgi_py_state = -1;
    return;
  }
  if (k != LGI_PYR_READY) {
    say(major ? "leakguard: CPython " : "leakguard: this CPython", major, minor,
        " is not supported for Python frames (3.9 to 3.13): recording native frames only");
    lgi_py_state = -1;
    return;
  }
  rd = r;
  lg_image_of_t q = {(uintptr_t)r.tstate_sym, 0, 0};
  if (dl_iterate_phdr(lg_image_of_cb, &q)) lgi_py_interp_lo = q.lo, lgi_py_interp_hi = q.hi;
  __atomic_store_n(&lgi_py_state, 1, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- reading */

static uint32_t str_intern(lg_region_hdr_t *h, const char *s) {
  size_t len = strlen(s) + 1;
  uint32_t at = atomic_load_explicit(&h->pystr_used, memory_order_relaxed);
  if (at + len > h->pystr_cap) return 0; /* offset 0 holds "" */
  memcpy(LG_PTR(h, h->pystr_off, char *) + at, s, len);
  atomic_store_explicit(&h->pystr_used, (uint32_t)(at + len), memory_order_release);
  return at;
}

/* A freed code object's address is soon reused by another one (a class body's code
 * object dies once the class exists), and so is the address of its file name string,
 * so pointers alone do not identify a function. The fingerprint paired with the code
 * address mixes the first line, the function name's address (names are interned: one
 * object per name) and the file name's length and last 8 bytes (paths differ at the
 * end). Only immutable contents: a string's hash field changes from -1 when first
 * computed, and the same frame would then be interned twice. Seven loads per frame,
 * about 2 ns more than addresses alone (bench/py_frames.py); reading the name's text
 * too cost 3 ns more. */
static inline uint64_t str_fp(const lgi_pylayout_t *l, uintptr_t o) {
  if (!lgi_py_ptr_ok(o)) return 0;
  uint32_t st = *(const uint32_t *)(o + l->str_state);
  intptr_t len = lgi_py_rd_ssize(o, LGI_PY_STR_LENGTH);
  unsigned kind = LGI_PY_STR_KIND(st);
  if (!(st & LGI_PY_STR_COMPACT) || (l->str_ready && !(st & l->str_ready)) || len <= 0 || len > (1 << 20) ||
      (kind != 1 && kind != 2 && kind != 4))
    return o; /* not a string python.c can read: its address is all there is */
  const unsigned char *d =
      (const unsigned char *)o + ((st & LGI_PY_STR_ASCII) ? l->str_ascii_data : l->str_compact_data);
  size_t nb = (size_t)len * kind;
  uint64_t w = 0;
  if (nb >= 8) __builtin_memcpy(&w, d + nb - 8, 8);
  else
    for (size_t k = 0; k < nb; k++) w = w << 8 | d[k];
  return (uint64_t)nb * LG_HASH_GOLDEN64 ^ w * 0xC2B2AE3D27D4EB4Full;
}

static inline uint64_t code_fp(const lgi_pylayout_t *l, uintptr_t co) {
  uint64_t fn = str_fp(l, lgi_py_rd_ptr(co, l->co_filename)), nm = lgi_py_rd_ptr(co, l->co_name);
  return fn ^ (nm << 29 | nm >> 35) ^ (uint64_t)(uint32_t)lgi_py_rd_int(co, l->co_firstlineno);
}

/* Process-wide index (code, fingerprint, line) -> pyframe id, in private pages;
 * guarded by the region lock (only taken on a per-thread cache miss). */
#define PIX_CAP (1u << 18)
typedef struct {
  uint64_t code, fp;
  int32_t line;
  uint32_t id;
} pix_t;
static pix_t *pix;
/* importlib's _call_with_frames_removed (code address and fingerprint), where a walk
 * stops: see lgi_python_frames. Set when its frame is first interned. */
static uint64_t import_code, import_fp;

static uint32_t pyframe_intern(uintptr_t co, uint64_t fp, int line) {
  lg_region_hdr_t *h = lgi_g.hdr;
  uint32_t id = 0;
  lgi_lock();
  if (!pix) pix = lgi_pages_alloc(sizeof(pix_t) * PIX_CAP);
  if (!pix) goto out;
  if (atomic_load(&h->pystr_used) == 0) atomic_store(&h->pystr_used, 1); /* "" at 0 */
  uint64_t key = (uint64_t)co;
  uint32_t i = (uint32_t)((key >> 4) * LG_HASH_GOLDEN32 ^ (uint32_t)line * 0x85EBCA6Bu) & (PIX_CAP - 1);
  for (uint32_t n = 0; n < PIX_CAP / 2; n++, i = (i + 1) & (PIX_CAP - 1)) {
    if (pix[i].code == key && pix[i].fp == fp && pix[i].line == line) {
      id = pix[i].id;
      goto out;
    }
    if (pix[i].code == 0) {
      uint32_t k = atomic_load_explicit(&h->npyframes, memory_order_relaxed);
      if (k == 0) k = 1; /* id 0: none */
      if (k >= h->pyframes_cap) goto out;
      char file[512], func[256];
      const lgi_pylayout_t *l = rd.lay;
      lgi_py_str_copy(&rd, lgi_py_rd_ptr(co, l->co_filename), file, sizeof file);
      lgi_py_str_copy(&rd, lgi_py_rd_ptr(co, l->co_qualname >= 0 ? (unsigned)l->co_qualname : l->co_name), func,
                      sizeof func);
      if (!strcmp(func, "_call_with_frames_removed") && !strcmp(file, "<frozen importlib._bootstrap>")) {
        __atomic_store_n(&import_fp, fp, __ATOMIC_RELAXED);
        __atomic_store_n(&import_code, key, __ATOMIC_RELEASE);
      }
      lg_pyframe_rec_t *r = LG_PTR(h, h->pyframes_off, lg_pyframe_rec_t *) + k;
      r->code = key;
      r->line = line;
      r->file = str_intern(h, file);
      r->func = str_intern(h, func);
      atomic_store_explicit(&h->npyframes, k + 1, memory_order_release);
      pix[i] = (pix_t){key, fp, line, k};
      id = k;
      goto out;
    }
  }
out:
  lgi_unlock();
  return id;
}

/* Per-thread cache: (code, fingerprint, instruction) -> pyframe id. */
#define PCACHE 4096
typedef struct {
  uint64_t code, fp, instr;
  uint32_t id;
} pcache_t;

void lgi_python_reset(void) {
  if (pix) memset(pix, 0, sizeof(pix_t) * PIX_CAP);
  __atomic_store_n(&import_code, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&import_fp, 0, __ATOMIC_RELAXED);
}

void lgi_python_cache_clear(lgi_tls_t *t) {
  if (t->pycache) memset(t->pycache, 0, sizeof(pcache_t) * PCACHE);
}

void lgi_python_thread_exit(lgi_tls_t *t) {
  lgi_pages_free(t->pycache, sizeof(pcache_t) * PCACHE);
  t->pycache = NULL;
}

/* The calling thread's Python chain as it stands, as one 64-bit key: each link's code
 * object, instruction (the line is the instruction's) and code fingerprint (code_fp:
 * in case a code object died and another took its address). The same reads as the
 * frame cache's key, and nothing more: no line table, no per-frame cache probe, no
 * interning, no lock, no hash of the resulting stack. Two chains with the same key give
 * the same lgi_python_frames result (which reads nothing else), so unwind.c keeps that
 * result per key: in a program that allocates at the same few lines again and again
 * (every Python program) the frame walk, its interning and the stack's hash are done
 * once per chain, not once per object (issue #32; BENCHMARKS.md, "The Python chain
 * cache"). 0 when the thread runs no Python code, the chain is longer than
 * LGI_PY_CHAIN_HOPS links before it reaches its outermost frame or importlib's
 * _call_with_frames_removed (where lgi_python_frames stops), or a link fails the cheap
 * checks: the caller then walks the long way, which decides. */
#define LGI_PY_CHAIN_HOPS 64
int lgi_python_chain_key(uint64_t *key) {
  if (!lgi_python_active()) return 0;
  const lgi_pylayout_t *l = rd.lay;
  uintptr_t f = lgi_py_innermost(&rd);
  if (!f) return 0;
  const uint64_t ic = __atomic_load_n(&import_code, __ATOMIC_ACQUIRE);
  const int interp = l->model == LGI_PYF_INTERP;
  /* Code deaths counted (lgi_python_code_died): the generation stands in for every
   * link's fingerprint, since a dead code object's address can only be taken again
   * after a death, which moves every key on. */
  const int by_gen = __atomic_load_n(&lgi_py_code_gen_on, __ATOMIC_ACQUIRE);
  uint64_t h = 0x243F6A8885A308D3ull;
  if (by_gen) h = (h ^ __atomic_load_n(&lgi_py_code_gen, __ATOMIC_ACQUIRE)) * 0x9FB21C651E98DF25ull;
  for (unsigned hops = 0;; hops++) {
    if (hops == LGI_PY_CHAIN_HOPS) return 0; /* longer than the walk */
    if (!lgi_py_ptr_ok(f)) return 0;
    uintptr_t c = lgi_py_rd_ptr(f, l->f_code);
    /* by generation, the code object is only hashed, never followed */
    if (!by_gen && !lgi_py_ptr_ok(c)) return 0;
    uint64_t ip = interp ? lgi_py_rd_ptr(f, l->f_instr) : (uint64_t)(uint32_t)lgi_py_rd_int(f, l->f_instr);
    /* each step a bijection of h: chains that differ in one word never collide */
    h = (h ^ c) * LG_HASH_GOLDEN64;
    h = (h ^ ip) * 0xC2B2AE3D27D4EB4Full;
    if (!by_gen) h = (h ^ code_fp(l, c)) * 0x165667B19E3779F9ull;
    if (c == ic) break;
    f = lgi_py_rd_ptr(f, l->f_back);
    if (!f) break;
  }
  *key = h ^ h >> 31;
  return 1;
}

/* 1 while the calling thread runs under an import: importlib's _call_with_frames_removed
 * is on its Python stack. Pointers only (no line, no interning, no lock): preload.c asks
 * at every allocation of a thread whose imports are sampled, to record in full again as
 * soon as the import is done. That code object is importlib's, alive for good: its
 * address alone names it. */
int lgi_python_under_import(void) {
  uint64_t ic = __atomic_load_n(&import_code, __ATOMIC_ACQUIRE);
  if (!ic || !lgi_python_active()) return 0;
  const lgi_pylayout_t *l = rd.lay;
  uintptr_t f = lgi_py_innermost(&rd);
  for (unsigned hops = 0; f && hops < LGI_PY_HOPS; hops++) {
    if (!lgi_py_ptr_ok(f)) return 0;
    if (lgi_py_rd_ptr(f, l->f_code) == ic) return 1;
    f = lgi_py_rd_ptr(f, l->f_back);
  }
  return 0;
}

/* The calling thread's Python frames, innermost first, at most max; *imported set when
 * the walk stopped at importlib's _call_with_frames_removed, the frame that runs a
 * module's body (or an extension's initialisation) during an import. The frames above
 * it are the chain of imports, which CPython itself leaves out of tracebacks: kept, it
 * made every line of every module body a new stack per chain of importers (`import
 * torch`: 12.6 million frames in 505 000 stacks; 3.5 million without). That frame
 * stays the outermost one, so the stack still reads as start-up (docs/detection.md). */
unsigned lgi_python_frames(lgi_tls_t *t, uint64_t *out, unsigned max, int *imported) {
  *imported = 0;
  if (!lgi_python_active()) return 0;
  const lgi_pylayout_t *l = rd.lay;
  uintptr_t f = lgi_py_innermost(&rd);
  if (!f) return 0;
  if (!t->pycache) {
    t->pycache = lgi_pages_alloc(sizeof(pcache_t) * PCACHE);
    if (!t->pycache) return 0;
  }
  pcache_t *pc = t->pycache;
  unsigned n = 0;
  for (unsigned hops = 0; f && n < max && hops < LGI_PY_HOPS; hops++) {
    if (!lgi_py_ptr_ok(f)) break;
    uintptr_t next = lgi_py_rd_ptr(f, l->f_back), co;
    uint64_t ikey;
    int addrq, r = lgi_py_frame_at(&rd, f, &co, &ikey, &addrq);
    f = next;
    if (r < 0) break;
    if (r == 0) continue;
    uint64_t key = (uint64_t)co, fp = code_fp(l, co);
    uint32_t slot = (uint32_t)((ikey >> 1) * LG_HASH_GOLDEN32 ^ (uint32_t)(key >> 4)) & (PCACHE - 1);
    uint32_t id;
    if (pc[slot].code == key && pc[slot].instr == ikey && pc[slot].fp == fp) {
      id = pc[slot].id;
    } else {
      id = pyframe_intern(co, fp, rd.addr2line((void *)co, addrq));
      if (!id) break;
      pc[slot].code = key;
      pc[slot].fp = fp;
      pc[slot].instr = ikey;
      pc[slot].id = id;
    }
    out[n++] = LG_PYFRAME_BIT | id;
    if (key == __atomic_load_n(&import_code, __ATOMIC_ACQUIRE) && fp == __atomic_load_n(&import_fp, __ATOMIC_RELAXED)) {
      *imported = LGI_PY_UNDER_IMPORT | (n == 1 ? LGI_PY_IMPORTLIB_C : 0); /* n 1: C code importlib called */
      break;
    }
  }
  return n;
}

/* ------------------------------------------------------------------ start-up only?
 * lg_python_startup_largest(k): 1 when the k stacks with Python frames that hold the
 * most live bytes (summed over the counter shards; all of them when fewer) are all
 * start-up: a frame of importlib's bootstrap on them, as on every stack cut at an
 * import (lgi_python_frames), and as the report judges it (lgr_is_import_frame,
 * docs/detection.md). 0 when one of them is not, when GPU memory is live, or when it
 * cannot tell (no import seen yet, no Python stack, no memory for the sums). Stacks
 * without a Python frame are passed over: no Python object points at what C code
 * allocated without a Python caller (the interpreter's own start-up, C threads).
 * For leakguard's Python module at exit (leakguardmodule.c): the holders of start-up
 * sites are never reported, so when the largest sites are all start-up, explaining
 * them at exit is work for nothing. Called with the GIL, outside any hook; reads
 * only, allocates with mmap. */
#define LARGEST_MAX 64

/* importlib's bootstrap, whose every function runs for imports only (and for the
 * interpreter's own start-up, _install). s lies in the string arena, which ends at end. */
static int is_import_file(const char *s, const char *end) {
  static const char a[] = "<frozen importlib._bootstrap>", b[] = "<frozen importlib._bootstrap_external>";
  size_t room = (size_t)(end - s);
  return (room >= sizeof a && !memcmp(s, a, sizeof a)) || (room >= sizeof b && !memcmp(s, b, sizeof b));
}

LG_API int lg_python_startup_largest(int k);
LG_API int lg_python_startup_largest(int k) {
  lg_region_hdr_t *h = lgi_g.hdr;
  if (!h || !__atomic_load_n(&import_code, __ATOMIC_ACQUIRE) || k <= 0 || k > LARGEST_MAX) return 0;
  uint32_t n = atomic_load_explicit(&h->nstacks, memory_order_acquire);
  if (n > h->stacks_cap) n = h->stacks_cap;
  if (n < 3) return 0;
  size_t bytes = (size_t)n * sizeof(int64_t);
  int64_t *live = lgi_pages_alloc(bytes);
  if (!live) return 0;
  const lg_shard_desc_t *sd = LG_PTR(h, h->shards_off, const lg_shard_desc_t *);
  uint32_t nshards = atomic_load_explicit(&h->nshards, memory_order_acquire);
  if (nshards > h->shards_cap) nshards = h->shards_cap;
  uint32_t nchunks = (n + LG_SITES_PER_CHUNK - 1) / LG_SITES_PER_CHUNK;
  for (uint32_t s = 0; s < nshards; s++)
    for (uint32_t c = 0; c < nchunks; c++) {
      const lg_site_ctr_t *ctr = lg_shard_chunk(h, &sd[s], c);
      for (uint32_t j = 0; ctr && j < LG_SITES_PER_CHUNK && c * LG_SITES_PER_CHUNK + j < n; j++)
        live[c * LG_SITES_PER_CHUNK + j] += __atomic_load_n(&ctr[j].live_bytes, __ATOMIC_RELAXED);
    }
  const lg_stack_rec_t *recs = LG_PTR(h, h->stacks_off, const lg_stack_rec_t *);
  const uint64_t *frames = LG_PTR(h, h->frames_off, const uint64_t *);
  /* the k largest Python stacks (ids 2..: id 1 is the overflow site), largest first */
  uint32_t top[LARGEST_MAX];
  int ntop = 0, gpu = 0;
  for (uint32_t id = 2; id < n && !gpu; id++) {
    const lg_stack_rec_t *r = &recs[id];
    if (live[id] <= 0) continue;
    if (r->space >= LG_SPACE_DEVICE) gpu = 1; /* GPU memory: its holders are tensors the walk finds */
    if (!r->depth || !(frames[r->frames] & LG_PYFRAME_BIT)) continue; /* Python frames come first */
    if (ntop == k && live[id] <= live[top[ntop - 1]]) continue;
    int at = ntop < k ? ntop++ : ntop - 1;
    while (at > 0 && live[top[at - 1]] < live[id]) {
      top[at] = top[at - 1];
      at--;
    }
    top[at] = id;
  }
  const lg_pyframe_rec_t *pyf = LG_PTR(h, h->pyframes_off, const lg_pyframe_rec_t *);
  uint32_t npy = atomic_load_explicit(&h->npyframes, memory_order_acquire);
  uint32_t used = atomic_load_explicit(&h->pystr_used, memory_order_acquire);
  const char *pystr = LG_PTR(h, h->pystr_off, const char *);
  int startup = !gpu && ntop > 0;
  for (int i = 0; i < ntop && startup; i++) {
    const lg_stack_rec_t *r = &recs[top[i]];
    int imp = 0;
    for (unsigned d = 0; d < r->depth && !imp; d++) {
      uint64_t w = frames[r->frames + d];
      if (!(w & LG_PYFRAME_BIT)) break;
      uint32_t pid = (uint32_t)(w & ~LG_PYFRAME_BIT);
      imp = pid < npy && pyf[pid].file < used && is_import_file(pystr + pyf[pid].file, pystr + used);
    }
    startup = imp;
  }
  lgi_pages_free(live, bytes);
  return startup;
}
