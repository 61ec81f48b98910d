/* SPDX-License-Identifier: MIT */
/*
 * lgcuda.h - the few CUDA driver API declarations the tests use (tests only).
 *
 * The CUDA tests run without a GPU and without the CUDA toolkit: the stand-in driver
 * (standin_cuda.c, built as libcuda.so.1) and the test programs declare what they use
 * here, with the values and layouts of cuda.h (driver API 13.0). Nothing else of
 * cuda.h is needed.
 */
#ifndef LG_TESTS_LGCUDA_H
#define LG_TESTS_LGCUDA_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUarray_st *CUarray;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUevent_st *CUevent;
typedef unsigned long long cuuint64_t;
typedef struct CUipcMemHandle_st {
  char reserved[64];
} CUipcMemHandle;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_FILE_NOT_FOUND 301
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_NOT_SUPPORTED 801

#define CU_GET_PROC_ADDRESS_DEFAULT 0ull
#define CU_GET_PROC_ADDRESS_LEGACY_STREAM 1ull
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2ull
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2

#define CU_MEMPOOL_ATTR_RELEASE_THRESHOLD 4
#define CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT 5
#define CU_MEMPOOL_ATTR_USED_MEM_CURRENT 7

#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_LOCATION_TYPE_HOST 2
#define CU_MEM_ATTACH_GLOBAL 1
#define CU_MEMHOSTALLOC_PORTABLE 1
#define CU_AD_FORMAT_FLOAT 0x20

typedef struct CUmemLocation_st {
  int type;
  int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
  int type;
  int requestedHandleTypes;
  CUmemLocation location;
  void *win32HandleMetaData;
  struct {
    unsigned char compressionType, gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemPoolProps_st {
  int allocType;
  int handleTypes;
  CUmemLocation location;
  void *win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;

typedef struct CUDA_ARRAY_DESCRIPTOR_st {
  size_t Width, Height;
  int Format;
  unsigned NumChannels;
} CUDA_ARRAY_DESCRIPTOR;

typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
  size_t Width, Height, Depth;
  int Format;
  unsigned NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR;

/* Entry points, by the names a program linked with -lcuda binds (cuda.h's macros). */
CUresult cuInit(unsigned flags);
CUresult cuDriverGetVersion(int *v);
CUresult cuDeviceGetCount(int *n);
CUresult cuDeviceGet(CUdevice *d, int ordinal);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d);
CUresult cuCtxCreate_v2(CUcontext *c, unsigned flags, CUdevice d);
CUresult cuCtxCreate_v3(CUcontext *c, void *params, int n, unsigned flags, CUdevice d);
CUresult cuCtxDestroy_v2(CUcontext c);
CUresult cuCtxGetCurrent(CUcontext *c);
CUresult cuCtxSetCurrent(CUcontext c);
CUresult cuCtxGetDevice(CUdevice *d);
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice d);
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n);
CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned esz);
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total);
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s);
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s);
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep);
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value);
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d);
CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t align, CUdeviceptr addr, unsigned long long flags);
CUresult cuMemAddressFree(CUdeviceptr p, size_t n);
CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *prop,
                     unsigned long long flags);
CUresult cuMemRelease(CUmemGenericAllocationHandle h);
CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long flags);
CUresult cuMemUnmap(CUdeviceptr p, size_t n);
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned flags);
CUresult cuMemAllocHost_v2(void **pp, size_t n);
CUresult cuMemHostAlloc(void **pp, size_t n, unsigned flags);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d);
CUresult cuArray3DCreate_v2(CUarray *a, const CUDA_ARRAY3D_DESCRIPTOR *d);
CUresult cuArrayDestroy(CUarray a);
CUresult cuStreamCreate(CUstream *s, unsigned flags);
CUresult cuStreamDestroy_v2(CUstream s);
CUresult cuStreamSynchronize(CUstream s);
CUresult cuCtxSynchronize(void);
CUresult cuModuleLoad(CUmodule *m, const char *path);
CUresult cuModuleGetFunction(CUfunction *fn, CUmodule m, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream s, void **params, void **extra);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags);
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags);
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, int *status);

/* The stand-in driver's own introspection (not CUDA). */
long standin_calls(const char *impl);          /* calls of one implementation, e.g. "cuMemAllocAsync_ptsz" */
long long standin_live_bytes(int dev);         /* device memory the stand-in holds for the process */
int standin_pending_frees(void);               /* cuMemFreeAsync frees enqueued, not yet done */
int standin_check_bindings(char *report, size_t n); /* see standin_procs.c */
void *standin_binding(const char *name);       /* what a caller of cuGetProcAddress holds now */

/* Function pointer types (cudaTypedefs.h style). */
typedef CUresult (*PFN_cuGetProcAddress_v12000)(const char *, void **, int, cuuint64_t, int *);
typedef CUresult (*PFN_cuGetProcAddress_v11030)(const char *, void **, int, cuuint64_t);
typedef CUresult (*PFN_cuMemAlloc_v3020)(CUdeviceptr *, size_t);
typedef CUresult (*PFN_cuMemFree_v3020)(CUdeviceptr);
typedef CUresult (*PFN_cuMemAllocAsync_v11020)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*PFN_cuMemFreeAsync_v11020)(CUdeviceptr, CUstream);
typedef CUresult (*PFN_cuMemAllocManaged_v6000)(CUdeviceptr *, size_t, unsigned);
typedef CUresult (*PFN_cuMemHostAlloc_v2020)(void **, size_t, unsigned);
typedef CUresult (*PFN_cuMemFreeHost_v2000)(void *);
typedef CUresult (*PFN_cuCtxCreate_v3020)(CUcontext *, unsigned, CUdevice);
typedef CUresult (*PFN_cuCtxCreate_v12050)(CUcontext *, void *, unsigned, CUdevice);
typedef CUresult (*PFN_cuCtxDestroy_v4000)(CUcontext);
typedef CUresult (*PFN_cuCtxSetCurrent_v4000)(CUcontext);
typedef CUresult (*PFN_cuInit_v2000)(unsigned);
typedef CUresult (*PFN_cuDevicePrimaryCtxRetain_v7000)(CUcontext *, CUdevice);
typedef CUresult (*PFN_cuDevicePrimaryCtxRelease_v11000)(CUdevice);
typedef CUresult (*PFN_cuMemCreate_v10020)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                           unsigned long long);
typedef CUresult (*PFN_cuMemRelease_v10020)(CUmemGenericAllocationHandle);
typedef CUresult (*PFN_cuMemMap_v10020)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*PFN_cuMemUnmap_v10020)(CUdeviceptr, size_t);
typedef CUresult (*PFN_cuMemAddressReserve_v10020)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);

#endif
