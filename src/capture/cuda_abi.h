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

typedef int lgc_result_t;                /* CUresult */
typedef int lgc_device_t;                /* CUdevice */
typedef unsigned long long lgc_dptr_t;   /* CUdeviceptr (the _v2 ABI: 64 bits) */
typedef unsigned long long lgc_handle_t; /* CUmemGenericAllocationHandle */
typedef void *lgc_ctx_t;                 /* CUcontext */
typedef void *lgc_stream_t;              /* CUstream */
typedef void *lgc_pool_t;                /* CUmemoryPool */
typedef void *lgc_array_t;               /* CUarray */
/* CUipcMemHandle: 64 opaque bytes, passed by value (cuIpcOpenMemHandle). */
typedef struct lgc_ipc_handle {
  char reserved[64];
} lgc_ipc_handle_t;

enum {
  LGC_SUCCESS = 0,
  LGC_ERROR_INVALID_VALUE = 1,
  LGC_ERROR_OUT_OF_MEMORY = 2,
  LGC_ERROR_NOT_INITIALIZED = 3,
  LGC_ERROR_STUB_LIBRARY = 34, /* what NVIDIA's own stub libcuda answers */
  LGC_ERROR_INVALID_CONTEXT = 201,
  LGC_ERROR_NOT_FOUND = 500,
};

/* cuGetProcAddress flags (CUdriverProcAddress_flags). */
#define LGC_PROC_PER_THREAD_DEFAULT_STREAM 2ull

/* CUmemPool_attribute values read by the recorder (cuuint64_t results). */
enum { LGC_POOL_RESERVED_MEM_CURRENT = 5, LGC_POOL_USED_MEM_CURRENT = 7 };

/* CUmemLocationType */
enum { LGC_LOCATION_DEVICE = 1, LGC_LOCATION_HOST = 2 };

/* The leading fields of CUmemAllocationProp and CUmemPoolProps: both begin with two
 * enums and a CUmemLocation {type, id}. Only these are read. */
typedef struct lgc_alloc_prop_head {
  int type;
  int handle_types;
  int location_type;
  int location_id;
} lgc_alloc_prop_head_t;

/* CUDA_ARRAY_DESCRIPTOR_v2 and CUDA_ARRAY3D_DESCRIPTOR_v2. */
typedef struct lgc_array_desc {
  size_t width, height;
  int format;
  unsigned channels;
} lgc_array_desc_t;
typedef struct lgc_array3d_desc {
  size_t width, height, depth;
  int format;
  unsigned channels;
  unsigned flags;
} lgc_array3d_desc_t;

/* Bytes per channel of a CUarray_format; 0 for the packed and block-compressed
 * formats, which the recorder sizes as 4 bytes per element (an estimate). */
static inline unsigned lgc_format_bytes(int format) {
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
