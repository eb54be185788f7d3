/*
 * CUDA stand-in: a TEST FIXTURE, not CUDA. It exists so that the tracer's tests and the
 * no-GPU demo can run on machines without a GPU. It exports the runtime and driver entry
 * points the tracer probes with their real signatures and return codes; "device" memory is
 * host memory, copies are memcpy, pinned memory is page-aligned and mlocked.
 */
#ifndef HOTPIN_CUDA_STANDIN_H
#define HOTPIN_CUDA_STANDIN_H

#include <stddef.h>

#define EXPORT __attribute__((visibility("default"), noinline))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
};

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4,
} CUmemorytype;

typedef struct CUDA_MEMCPY2D_st {
    size_t srcXInBytes, srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes;
    size_t Height;
} CUDA_MEMCPY2D;

/* The layout of cuda.h's CUDA_MEMCPY3D (the tracer reads its fields at these offsets). */
typedef struct CUDA_MEMCPY3D_st {
    size_t srcXInBytes, srcY, srcZ, srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    void *reserved0;
    size_t srcPitch, srcHeight;
    size_t dstXInBytes, dstY, dstZ, dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    void *reserved1;
    size_t dstPitch, dstHeight;
    size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

_Static_assert(__builtin_offsetof(CUDA_MEMCPY2D, dstMemoryType) == 72, "CUDA_MEMCPY2D layout");
_Static_assert(__builtin_offsetof(CUDA_MEMCPY2D, Height) == 120, "CUDA_MEMCPY2D layout");
_Static_assert(__builtin_offsetof(CUDA_MEMCPY3D, dstMemoryType) == 120, "CUDA_MEMCPY3D layout");
_Static_assert(__builtin_offsetof(CUDA_MEMCPY3D, Depth) == 192, "CUDA_MEMCPY3D layout");

#endif
