/* SPDX-License-Identifier: MIT */
/*
 * cuda_abi.h - the few CUDA driver API types, constants and structure prefixes that
 * the recorder's CUDA hooks (cuda.c, cuda_mem.c, cuda_ctx.c) use, declared here so
 * that leakguard builds without the CUDA toolkit and never links libcuda (it is found
 * at run time, in the program). Values and layouts are those of cuda.h (driver API,
 * stable ABI: the versioned entry points, e.g. cuMemAlloc_v2, never change their
 * parameters).
 */
#ifndef LG_CAPTURE_CUDA_ABI_H
#define LG_CAPTURE_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int lgcu_result_t;                /* CUresult */
typedef int lgcu_device_t;                /* CUdevice */
typedef unsigned long long lgcu_dptr_t;   /* CUdeviceptr (the _v2 ABI: 64 bits) */
typedef unsigned long long lgcu_handle_t; /* CUmemGenericAllocationHandle */
typedef void *lgcu_ctx_t;                 /* CUcontext */
typedef void *lgcu_stream_t;              /* CUstream */
typedef void *lgcu_pool_t;                /* CUmemoryPool */
typedef void *lgcu_array_t;               /* CUarray */
/* CUipcMemHandle: 64 opaque bytes, passed by value (cuIpcOpenMemHandle). */
typedef struct lgcu_ipc_handle {
  char reserved[64];
} lgcu_ipc_handle_t;

enum {
  LGCU_SUCCESS = 0,
  LGCU_ERROR_INVALID_VALUE = 1,
  LGCU_ERROR_OUT_OF_MEMORY = 2,
  LGCU_ERROR_NOT_INITIALIZED = 3,
  LGCU_ERROR_STUB_LIBRARY = 34, /* what NVIDIA's own stub libcuda answers */
  LGCU_ERROR_INVALID_CONTEXT = 201,
  LGCU_ERROR_NOT_FOUND = 500,
};

/* cuGetProcAddress flags (CUdriverProcAddress_flags). */
#define LGCU_PROC_PER_THREAD_DEFAULT_STREAM 2ull

/* CUmemPool_attribute values read by the recorder (cuuint64_t results). */
enum { LGCU_POOL_RESERVED_MEM_CURRENT = 5, LGCU_POOL_USED_MEM_CURRENT = 7 };

/* CUmemLocationType */
enum { LGCU_LOCATION_DEVICE = 1, LGCU_LOCATION_HOST = 2 };

/* The leading fields of CUmemAllocationProp and CUmemPoolProps: both begin with two
 * enums and a CUmemLocation {type, id}. Only these are read. */
typedef struct lgcu_alloc_prop_head {
  int type;
  int handle_types;
  int location_type;
  int location_id;
} lgcu_alloc_prop_head_t;

/* CUDA_ARRAY_DESCRIPTOR_v2 and CUDA_ARRAY3D_DESCRIPTOR_v2. */
typedef struct lgcu_array_desc {
  size_t width, height;
  int format;
  unsigned channels;
} lgcu_array_desc_t;
typedef struct lgcu_array3d_desc {
  size_t width, height, depth;
  int format;
  unsigned channels;
  unsigned flags;
} lgcu_array3d_desc_t;

/* Bytes per channel of a CUarray_format; 0 for the packed and block-compressed
 * formats, which the recorder sizes as 4 bytes per element (an estimate). */
static inline unsigned lgcu_format_bytes(int format) {
  switch (format) {
  case 0x01:
  case 0x08:
  case 0xc0:
  case 0xc1:
  case 0xc2:
  case 0xc6:
  case 0xc7:
  case 0xc8: return 1;
  case 0x02:
  case 0x09:
  case 0x10:
  case 0xc3:
  case 0xc4:
  case 0xc5:
  case 0xc9:
  case 0xca:
  case 0xcb: return 2;
  case 0x03:
  case 0x0a:
  case 0x20: return 4;
  default: return 0;
  }
}

#endif
