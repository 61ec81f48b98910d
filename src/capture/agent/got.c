/* SPDX-License-Identifier: MIT */
/*
 * got.c - the agent's way in (agent.h): the process is already bound, so instead of
 * interposing symbols the agent rewrites the GOT slots (R_X86_64_JUMP_SLOT,
 * R_X86_64_GLOB_DAT) of lgag_names in every loaded object except ld.so, the vDSO and
 * itself, keeps each slot's old value, and puts them all back at detach.
 */
#include <elf.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <dlfcn.h>
#include <link.h>

#include "capture/agent/agent.h"

/* One patched slot: restored at detach. Pages from mmap. An object that dlclose
 * unmaps loses its slots (pruned at the next scan); one loaded again at the same
 * address is patched again (its fresh GOT does not hold our hooks). Until that scan,
 * the slots of the unloaded object stay here under the identity of the new one:
 * detach puts back only a slot that still holds its hook (hook). */
typedef struct slot {
  uintptr_t addr, orig, obj, hook;
  int relro;
} slot_t;
#define MAX_SLOTS 65536
static slot_t *slots;
static size_t nslots;
#define MAX_OBJS 8192
static uintptr_t *live_objs; /* objects loaded now (scan) */
static size_t nlive;
static pthread_mutex_t patch_mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t self_base, rtld_base;

static void write_slot(uintptr_t addr, uintptr_t val, int relro) {
  uintptr_t pg = addr & ~(uintptr_t)4095;
  if (relro) syscall(SYS_mprotect, pg, 4096, PROT_READ | PROT_WRITE);
  __atomic_store_n((uintptr_t *)addr, val, __ATOMIC_RELEASE);
  if (relro) syscall(SYS_mprotect, pg, 4096, PROT_READ);
}

static uintptr_t dyn_ptr(uintptr_t v, uintptr_t base) { return v < base ? v + base : v; }

static void patch_rela(uintptr_t obj, uintptr_t base, const ElfW(Rela) * r, size_t n, const ElfW(Sym) * sym,
                       const char *str, uintptr_t rlo, uintptr_t rhi) {
  for (size_t i = 0; i < n; i++) {
    unsigned type = ELF64_R_TYPE(r[i].r_info);
    if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
    const char *nm = str + sym[ELF64_R_SYM(r[i].r_info)].st_name;
    for (size_t k = 0; k < lgag_nnames; k++) {
      if (strcmp(nm, lgag_names[k].name) != 0) continue;
      uintptr_t addr = base + r[i].r_offset, cur = *(uintptr_t *)addr;
      if (cur == (uintptr_t)lgag_names[k].hook || !*lgag_names[k].real) break;
      int relro = addr >= rlo && addr < rhi;
      size_t j = 0;
      while (j < nslots && slots[j].addr != addr) j++;
      if (j == nslots) {
        if (nslots >= MAX_SLOTS) break;
        nslots++;
      }
      slots[j] = (slot_t){addr, cur, obj, (uintptr_t)lgag_names[k].hook, relro};
      /* a lazy slot not bound yet (it points into the object's PLT) is bound to the hook */
      write_slot(addr, (uintptr_t)lgag_names[k].hook, relro);
      __atomic_fetch_add(&lgag_stats.slots_patched, 1, __ATOMIC_SEQ_CST);
      break;
    }
  }
}

/* glibc >= 2.35: _dl_find_object knows an object once ld.so has relocated it and put
 * its RELRO pages read-only (dl_open_worker_begin updates it after both), and
 * dl_iterate_phdr lists it from the moment it is mapped. A slot written while ld.so
 * still relocates the object is lost, and a RELRO page put back to read-only under ld.so
 * crashes it in elf_machine_rela (seen: a target whose threads dlopen in a loop). Such
 * an object is left to a later scan. NULL on an older glibc: no such check. */
static int (*find_object)(void *, struct dl_find_object *);
static _Atomic int unready; /* objects the last scan left (still being loaded) */

/* The object's identity, dynamic section and RELRO range (the pages ld.so makes
 * read-only: its end rounded down); 0 when it is not to be patched (no dynamic
 * section, vDSO, ld.so, the agent). */
static uintptr_t obj_of(struct dl_phdr_info *info, const ElfW(Dyn) * *dynp, uintptr_t *rlo, uintptr_t *rhi) {
  uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn) *dyn = NULL;
  *rlo = *rhi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(base + info->dlpi_phdr[i].p_vaddr);
    if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
      /* as _dl_protect_relro rounds it: the last partial page stays writable (it
       * holds .data too), so a slot there must not make it read-only */
      *rlo = (base + info->dlpi_phdr[i].p_vaddr) & ~(uintptr_t)4095;
      *rhi = (base + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz) & ~(uintptr_t)4095;
    }
  }
  if (!dyn) return 0;
  const char *nm = info->dlpi_name ? info->dlpi_name : "";
  if (strstr(nm, "linux-vdso") || strstr(nm, "linux-gate")) return 0;
  if (base == self_base || (rtld_base && base == rtld_base)) return 0;
  *dynp = dyn;
  return base ^ (uintptr_t)dyn;
}

/* In dl_iterate_phdr's callback the object cannot be unmapped (dlclose removes it
 * from the list, under the lock the iteration holds, before it unmaps it). */
static int patch_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  (void)arg;
  const ElfW(Dyn) *dyn = NULL;
  uintptr_t rlo, rhi, base = info->dlpi_addr;
  uintptr_t obj = obj_of(info, &dyn, &rlo, &rhi);
  if (!obj) return 0;
  if (nlive < MAX_OBJS) live_objs[nlive++] = obj;
  struct dl_find_object fo;
  if (find_object && find_object((void *)dyn, &fo) != 0) {
    atomic_fetch_add(&unready, 1);
    return 0;
  }
  const ElfW(Sym) *sym = NULL;
  const char *str = NULL;
  const ElfW(Rela) *rela = NULL, *jmp = NULL;
  size_t relasz = 0, jmpsz = 0;
  for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
    switch (d->d_tag) {
    case DT_SYMTAB: sym = (const ElfW(Sym) *)dyn_ptr(d->d_un.d_ptr, base); break;
    case DT_STRTAB: str = (const char *)dyn_ptr(d->d_un.d_ptr, base); break;
    case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(d->d_un.d_ptr, base); break;
    case DT_RELASZ: relasz = d->d_un.d_val / sizeof(ElfW(Rela)); break;
    case DT_JMPREL: jmp = (const ElfW(Rela) *)dyn_ptr(d->d_un.d_ptr, base); break;
    case DT_PLTRELSZ: jmpsz = d->d_un.d_val / sizeof(ElfW(Rela)); break;
    default: break;
    }
  }
  if (!sym || !str) return 0;
  if (rela) patch_rela(obj, base, rela, relasz, sym, str, rlo, rhi);
  if (jmp) patch_rela(obj, base, jmp, jmpsz, sym, str, rlo, rhi);
  return 0;
}

static int is_live(uintptr_t obj) {
  for (size_t i = 0; i < nlive; i++)
    if (live_objs[i] == obj) return 1;
  return 0;
}

void lgag_rescan(void) {
  pthread_mutex_lock(&patch_mu);
  if (__atomic_load_n(&lgag_stats.state, __ATOMIC_SEQ_CST) <= 1) {
    nlive = 0;
    atomic_store(&unready, 0);
    dl_iterate_phdr(patch_cb, NULL);
    size_t k = 0; /* the slots of unloaded objects go */
    for (size_t i = 0; i < nslots; i++)
      if (is_live(slots[i].obj)) slots[k++] = slots[i];
    nslots = k;
  }
  pthread_mutex_unlock(&patch_mu);
  if (lgi_g.hdr) atomic_fetch_add(&lgi_g.hdr->module_gen, 1);
}

static int adds_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)info;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs)) *(unsigned long long *)arg = info->dlpi_adds;
  return 1;
}

/* Restores the slots of each object still loaded, inside the iteration (above). An
 * object ld.so is still loading (dlopen in another thread; _dl_find_object does not
 * know it yet) holds none of our hooks, but it may have the identity of one patched
 * before: dlclose'd since the last scan and loaded again at the same address (a target
 * whose threads dlopen in a loop). Writing its old slots put its RELRO page back to
 * read-only while ld.so was relocating the object, which then crashed in
 * elf_machine_rela (attach_loaders beside CPU hogs, the target killed by SIGSEGV
 * between two attaches). So such an object is left alone, and any other slot is put
 * back only while it still holds its hook. */
static int restore_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  (void)arg;
  const ElfW(Dyn) *dyn = NULL;
  uintptr_t rlo, rhi;
  uintptr_t obj = obj_of(info, &dyn, &rlo, &rhi);
  if (!obj) return 0;
  struct dl_find_object fo;
  if (find_object && find_object((void *)dyn, &fo) != 0) return 0;
  for (size_t i = nslots; i-- > 0;)
    if (slots[i].obj == obj && __atomic_load_n((uintptr_t *)slots[i].addr, __ATOMIC_ACQUIRE) == slots[i].hook) {
      write_slot(slots[i].addr, slots[i].orig, slots[i].relro);
      __atomic_fetch_add(&lgag_stats.slots_restored, 1, __ATOMIC_SEQ_CST);
    }
  return 0;
}

void lgag_restore_all(void) {
  pthread_mutex_lock(&patch_mu);
  dl_iterate_phdr(restore_cb, NULL);
  nslots = 0;
  pthread_mutex_unlock(&patch_mu);
}

int lgag_got_prepare(void *libc, uintptr_t self) {
  self_base = self;
  *(void **)&find_object = dlsym(libc, "_dl_find_object");
  Dl_info di;
  void *in_rtld = dlsym(RTLD_DEFAULT, "__tls_get_addr");
  if (in_rtld && dladdr(in_rtld, &di)) rtld_base = (uintptr_t)di.dli_fbase;
  if (!slots) slots = (slot_t *)lgi_pages_alloc(MAX_SLOTS * sizeof(slot_t));
  if (!live_objs) live_objs = (uintptr_t *)lgi_pages_alloc(MAX_OBJS * sizeof(uintptr_t));
  return slots && live_objs ? 0 : -1;
}

unsigned long long lgag_loaded_adds(void) {
  unsigned long long adds = 0;
  dl_iterate_phdr(adds_cb, &adds);
  return adds;
}

int lgag_unready(void) { return atomic_load(&unready); }

void lgag_got_atfork(void) { pthread_mutex_init(&patch_mu, NULL); }
