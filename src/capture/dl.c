/* SPDX-License-Identifier: MIT */
/*
 * dl.c - libleakguard.so and the dynamic loader: every interposition of it is here.
 * dlopen() and dlmopen(), so that loading a library cannot take its allocator calls
 * past the hooks; dlsym() and dlvsym(), so that looking an allocator function or a GPU
 * driver's entry point up by name cannot either (the GPU vendors answer for their
 * names through gpu/gpu.h).
 *
 * RTLD_DEEPBIND makes the loaded library look up symbols in its own dependencies
 * first: its free and realloc bind to glibc's, while the blocks it receives from the
 * program (or from glibc's own strdup, which reaches our malloc) carry our header, and
 * glibc aborts ("free(): invalid size"). As heaptrack does, the flag is dropped, with
 * one warning line per process. dlmopen(LM_ID_NEWLM) loads into a namespace of its
 * own, with its own copy of libc and its own heap, where no preloaded library exists:
 * its allocations are not recorded (said once), and cannot meet ours (a block freed
 * across namespaces is an error bare, too).
 *
 * Both hooks end in a tail call to the real function. dlopen() looks for a library
 * without a slash in the RUNPATH of its *caller*, found from its return address:
 * with a tail call that is still the program's address, not ours.
 *
 * Allocator functions looked up by name. dlsym(RTLD_NEXT, "free") in a library (the
 * shim pattern), dlsym on a dlopen("libc.so.6") handle, and the same with dlvsym, give
 * glibc's function, bypassing the binding that makes ours the program's free: it
 * would then meet a block with our header and abort. For the names we interpose
 * (lgi_alloc_own, lgi_mmap_own), a lookup whose answer is the very function we wrap
 * (what our own RTLD_NEXT lookup of the name gives) returns ours instead, which calls
 * that one. RTLD_NEXT is answered relative to the caller, so the dlsym and dlvsym
 * entries are assembly that keeps the caller's return address for glibc and asks
 * lgi_dl_next_alloc first: the answer is the wrapped function exactly when the caller
 * comes after us in load order (the order RTLD_NEXT searches the initial objects in)
 * and is not the wrapped function's own object; for a library dlopen'ed later, its
 * own dependencies are searched, which holds glibc as well. Our own lookups (the
 * caller is libleakguard) are never rewritten. RTLD_DEFAULT already finds ours.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture/gpu/gpu.h"
#include "capture/recorder.h"
#include "leakguard.h"

typedef void *(*dlopen_fn)(const char *, int);
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);

static dlopen_fn real_dlopen;
static dlmopen_fn real_dlmopen;
static atomic_int said_deepbind, said_newlm;

/* The file name for a message: its last 200 characters. */
static const char *short_name(const char *file) {
  if (!file) return "(the program)";
  size_t n = strlen(file);
  return n > 200 ? file + n - 200 : file;
}

static int drop_deepbind(const char *file, int mode) {
  if (!(mode & RTLD_DEEPBIND)) return mode;
  if (!atomic_exchange(&said_deepbind, 1))
    lgi_say("dlopen(\"", short_name(file),
            "\", RTLD_DEEPBIND): flag dropped, so that the library's malloc and free stay "
            "leakguard's (not reported again)");
  return mode & ~RTLD_DEEPBIND;
}

LG_API void *dlopen(const char *file, int mode) {
  if (LGI_UNLIKELY(!real_dlopen)) {
    real_dlopen = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
    if (!real_dlopen) return NULL;
  }
  mode = drop_deepbind(file, mode);
  return real_dlopen(file, mode); /* tail call: the caller's RUNPATH applies */
}

LG_API void *dlmopen(Lmid_t lmid, const char *file, int mode) {
  if (LGI_UNLIKELY(!real_dlmopen)) {
    real_dlmopen = (dlmopen_fn)dlsym(RTLD_NEXT, "dlmopen");
    if (!real_dlmopen) return NULL;
  }
  if (lmid == LM_ID_BASE) {
    mode = drop_deepbind(file, mode);
  } else if (lgi_g.enabled && !atomic_exchange(&said_newlm, 1)) {
    /* Another namespace: DEEPBIND is harmless there (we are not in it). */
    lgi_say("dlmopen(\"", short_name(file),
            "\") into another link-map namespace: that namespace has its own libc and heap, "
            "its allocations are not recorded (not reported again)");
  }
  return real_dlmopen(lmid, file, mode);
}

/* ------------------------------------------------------------------ allocator names */

typedef void *(*dlsym_real_fn)(void *, const char *);
typedef void *(*dlvsym_real_fn)(void *, const char *, const char *);
LGI_HIDDEN void *lgi_real_dlvsym_ptr; /* read by the assembly entry */
LGI_HIDDEN void *lgi_dlvsym_resolve(void);
LGI_HIDDEN void *lgi_dlvsym_handle(void *handle, const char *name, const char *version);

static void *own_fn(const char *name) {
  void *p = lgi_alloc_own(name);
  return p ? p : lgi_mmap_own(name);
}

/* What our own lookup of name finds after us: the function our hook wraps. Not a
 * sibling call: glibc takes RTLD_NEXT relative to its return address, which must be
 * ours. */
static __attribute__((noinline)) void *wrapped(const char *name, const char *version) {
  void *p = version ? ((dlvsym_real_fn)lgi_dlvsym_resolve())(RTLD_NEXT, name, version)
                    : ((dlsym_real_fn)lgi_dlsym_resolve())(RTLD_NEXT, name);
  __asm__ volatile("" ::: "memory");
  if (!p) (void)dlerror(); /* our failed lookup is not the program's error */
  return p;
}

typedef struct {
  struct link_map *self, *caller;
  int after;
} after_arg_t;

/* Under dl_iterate_phdr's lock (dlopen and dlclose change the list under it): does
 * the caller's object follow ours in our namespace's list? Once is enough. */
static int after_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  after_arg_t *a = arg;
  (void)info, (void)size;
  for (struct link_map *l = a->self->l_next; l; l = l->l_next)
    if (l == a->caller) {
      a->after = 1;
      break;
    }
  return 1;
}

void *lgi_dl_next_alloc(const char *name, const char *version, uintptr_t caller) {
  void *own = name ? own_fn(name) : NULL;
  if (!own) return NULL;
  static struct link_map *self;
  if (!self) self = lgi_map_of((const void *)lgi_dl_next_alloc);
  struct link_map *cm = lgi_map_of((const void *)caller);
  if (!self || !cm || cm == self) return NULL;
  void *w = wrapped(name, NULL);
  if (!w || (version && wrapped(name, version) != w)) return NULL;
  if (lgi_map_of(w) == cm) return NULL; /* e.g. libc's own lookup: what follows it */
  after_arg_t a = {self, cm, 0};
  dl_iterate_phdr(after_cb, &a);
  return a.after ? own : NULL;
}

void *lgi_dl_alloc_result(const char *name, void *r, uintptr_t caller) {
  void *own = r && name ? own_fn(name) : NULL;
  if (!own || r == own) return r;
  struct link_map *cm = lgi_map_of((const void *)caller);
  if (cm && cm == lgi_map_of((const void *)lgi_dl_alloc_result)) return r; /* our own lookup */
  return r == wrapped(name, NULL) ? own : r;
}

/* glibc's dlvsym, found without dlsym or dlvsym (both are ours; the real dlsym is found
 * with dlvsym, above): the dynamic symbol table of libc.so.6, through its GNU hash
 * table, for the default version of the name. */
static void *elf_lookup(const struct link_map *lm, const char *name) {
  const ElfW(Sym) *sym = NULL;
  const char *str = NULL;
  const uint32_t *gh = NULL;
  const ElfW(Half) *ver = NULL;
  for (const ElfW(Dyn) *d = lm->l_ld; d && d->d_tag != DT_NULL; d++) {
    uintptr_t p = d->d_un.d_ptr;
    if (p < lm->l_addr) p += lm->l_addr; /* not relocated in place (read-only) */
    if (d->d_tag == DT_SYMTAB) sym = (const ElfW(Sym) *)p;
    else if (d->d_tag == DT_STRTAB) str = (const char *)p;
    else if (d->d_tag == DT_GNU_HASH) gh = (const uint32_t *)p;
    else if (d->d_tag == DT_VERSYM) ver = (const ElfW(Half) *)p;
  }
  if (!sym || !str || !gh || !gh[0]) return NULL;
  uint32_t nb = gh[0], off = gh[1], nbloom = gh[2];
  const uint32_t *buckets = gh + 4 + nbloom * (sizeof(ElfW(Addr)) / 4), *chain = buckets + nb;
  uint32_t h = 5381;
  for (const unsigned char *c = (const unsigned char *)name; *c; c++) h = h * 33 + *c;
  uint32_t i = buckets[h % nb];
  if (i < off) return NULL;
  for (;; i++) {
    uint32_t h2 = chain[i - off];
    if ((h | 1) == (h2 | 1) && !strcmp(str + sym[i].st_name, name) && sym[i].st_shndx != SHN_UNDEF &&
        !(ver && (ver[i] & 0x8000)))
      return (void *)(lm->l_addr + sym[i].st_value);
    if (h2 & 1) return NULL;
  }
}

void *lgi_real_dlvsym_ptr;
__attribute__((used)) void *lgi_dlvsym_resolve(void) {
  void *p = __atomic_load_n(&lgi_real_dlvsym_ptr, __ATOMIC_ACQUIRE);
  if (LGI_LIKELY(p)) return p;
  /* libc.so.6: the object that holds dl_iterate_phdr, which we do not interpose; but
   * a program may (tests/torture/tt_forkunwind.c), and then that address is the
   * program's: the loaded objects in order, the first named libc.so.6. */
  struct link_map *libc = lgi_map_of((const void *)dl_iterate_phdr);
  p = libc ? elf_lookup(libc, "dlvsym") : NULL;
  for (struct link_map *lm = _r_debug.r_map; !p && lm; lm = lm->l_next) {
    const char *n = lm->l_name ? strrchr(lm->l_name, '/') : NULL;
    n = n ? n + 1 : lm->l_name;
    if (n && !strcmp(n, "libc.so.6")) p = elf_lookup(lm, "dlvsym");
  }
  Dl_info di;
  if (!p || !dladdr(p, &di) || !di.dli_sname || strcmp(di.dli_sname, "dlvsym") != 0) {
    static const char msg[] = "leakguard: cannot find the real dlvsym, aborting\n";
    (void)!write(2, msg, sizeof msg - 1);
    abort();
  }
  __atomic_store_n(&lgi_real_dlvsym_ptr, p, __ATOMIC_RELEASE);
  return p;
}

/* ------------------------------------------------------------------ dlsym */

LGI_HIDDEN void *lgi_dlsym_handle(void *handle, const char *name);

#if defined(__x86_64__)
/* dlsym(handle, name): RTLD_NEXT (-1) and RTLD_DEFAULT (0) depend on the caller's
 * object, so they jump to glibc with the caller's return address untouched (a C
 * wrapper could only call it, and glibc would resolve relative to libleakguard).
 * RTLD_DEFAULT lookups of a name a GPU vendor's hooks export (gpu/gpu.h), and every
 * lookup with an explicit handle (caller-independent), go to C. */
__asm__(".pushsection .text\n"
        ".globl dlsym\n"
        ".type dlsym,@function\n"
        ".p2align 4\n"
        "dlsym:\n"
        "  .cfi_startproc\n"
        "  cmpq $-1, %rdi\n"
        "  je lgi_dlsym_next\n" /* below: allocator names, else glibc */
        "  testq %rdi, %rdi\n"
        "  jne lgi_dlsym_handle\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  movq %rsi, %rdi\n"
        "  call lgi_gpu_export_name\n"
        "  addq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  testl %eax, %eax\n"
        "  jne lgi_gpu_dlsym_default\n"
        "2:\n"
        "  movq lgi_real_dlsym_ptr(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  je 3f\n"
        "  jmp *%rax\n"
        "3:\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  call lgi_dlsym_resolve\n"
        "  addq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  jmp *%rax\n"
        "  .cfi_endproc\n"
        ".size dlsym, .-dlsym\n"
        ".popsection\n");
#else
/* Elsewhere a sibling call (the compiler's, at -O2) keeps the caller for glibc. */
LG_API void *dlsym(void *handle, const char *name) {
  if (handle == RTLD_DEFAULT && lgi_gpu_export_name(name)) return lgi_gpu_dlsym_default(handle, name);
  if (handle != RTLD_DEFAULT && handle != RTLD_NEXT) return lgi_dlsym_handle(handle, name);
  void *own = handle == RTLD_NEXT ? lgi_dl_next_alloc(name, NULL, (uintptr_t)__builtin_return_address(0)) : NULL;
  if (own) return own;
  return ((dlsym_real_fn)lgi_dlsym_resolve())(handle, name);
}
#endif

/* dlsym with an explicit handle (caller-independent): glibc's answer, a GPU vendor's
 * wrapper for it, or our allocator function. */
__attribute__((used)) void *lgi_dlsym_handle(void *handle, const char *name) {
  void *r = ((dlsym_real_fn)lgi_dlsym_resolve())(handle, name);
  if (!r || !name) return r;
  void *g;
  if (lgi_gpu_dlsym_result(name, r, &g)) return g;
  return lgi_dl_alloc_result(name, r, (uintptr_t)__builtin_return_address(0));
}

/* dlvsym with an explicit handle (caller-independent): glibc's answer, or ours. */
__attribute__((used)) void *lgi_dlvsym_handle(void *handle, const char *name, const char *version) {
  void *r = ((dlvsym_real_fn)lgi_dlvsym_resolve())(handle, name, version);
  return lgi_dl_alloc_result(name, r, (uintptr_t)__builtin_return_address(0));
}

#if defined(__x86_64__)
/* The RTLD_NEXT branch of dlsym (its entry above jumps here, the caller's return
 * address on top) and all of dlvsym. lgi_dl_next_alloc decides; when it returns NULL
 * glibc answers, with the caller's return address untouched. */
__asm__(".pushsection .text\n"
        ".globl lgi_dlsym_next\n"
        ".hidden lgi_dlsym_next\n"
        ".type lgi_dlsym_next,@function\n"
        ".p2align 4\n"
        "lgi_dlsym_next:\n"
        "  .cfi_startproc\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  movq %rsi, %rdi\n"
        "  xorl %esi, %esi\n"
        "  movq 24(%rsp), %rdx\n"
        "  call lgi_dl_next_alloc\n"
        "  addq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  testq %rax, %rax\n"
        "  jne 1f\n"
        "  movq lgi_real_dlsym_ptr(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  jne 2f\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  call lgi_dlsym_resolve\n"
        "  addq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "2:\n"
        "  jmp *%rax\n"
        "1:\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size lgi_dlsym_next, .-lgi_dlsym_next\n"
        "\n"
        ".globl dlvsym\n"
        ".type dlvsym,@function\n"
        ".p2align 4\n"
        "dlvsym:\n"
        "  .cfi_startproc\n"
        "  cmpq $-1, %rdi\n"
        "  je 3f\n"
        "  testq %rdi, %rdi\n"
        "  je 4f\n"
        "  jmp lgi_dlvsym_handle\n"
        "3:\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rdx\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  movq %rsi, %rdi\n"
        "  movq %rdx, %rsi\n"
        "  movq 24(%rsp), %rdx\n"
        "  call lgi_dl_next_alloc\n"
        "  popq %rdx\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  testq %rax, %rax\n"
        "  jne 6f\n"
        "4:\n"
        "  movq lgi_real_dlvsym_ptr(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  jne 5f\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rdx\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  call lgi_dlvsym_resolve\n"
        "  popq %rdx\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "5:\n"
        "  jmp *%rax\n"
        "6:\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size dlvsym, .-dlvsym\n"
        ".popsection\n");
#else
/* Elsewhere a sibling call (the compiler's, at -O2) keeps the caller for glibc. */
LG_API void *dlvsym(void *handle, const char *name, const char *version) {
  if (handle != RTLD_DEFAULT && handle != RTLD_NEXT) return lgi_dlvsym_handle(handle, name, version);
  void *own = handle == RTLD_NEXT ? lgi_dl_next_alloc(name, version, (uintptr_t)__builtin_return_address(0)) : NULL;
  if (own) return own;
  return ((dlvsym_real_fn)lgi_dlvsym_resolve())(handle, name, version);
}
#endif
