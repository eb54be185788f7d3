/*
 * CUDA stand-in: a TEST FIXTURE, not CUDA. It exists so that the tracer's tests and the
 * no-GPU demo can run on machines without a GPU. It exports the runtime and driver entry
 * points the tracer probes with their real signatures and return codes; "device" memory is
 * host memory, pinned memory is page-aligned and mlocked.
 *
 * It models CUDA's synchronisation rules, so that a program that computes the right result
 * only because its "pageable" memory makes copies synchronous (and gives a wrong one once
 * that memory is secretly pinned) fails here too:
 *
 *  - Memory kinds. Every block from cuMemHostAlloc / cuMemAllocHost (pinned), range given to
 *    cuMemHostRegister (pinned, registered) and device allocation (cuMemAlloc, pitch,
 *    managed, async, from a pool, mapped virtual memory) is in one table. Any other host
 *    address is pageable. cuPointerGetAttribute(s), cuMemHostGetFlags and
 *    cuMemHostGetDevicePointer answer from it.
 *  - Streams. Each stream (the legacy default stream 0 / CU_STREAM_LEGACY, each thread's
 *    per-thread default stream CU_STREAM_PER_THREAD, and those from cuStreamCreate) runs its
 *    operations in order on its own worker thread, each no earlier than
 *    HOTPIN_STANDIN_ASYNC_DELAY_US microseconds (default 20000) after it was enqueued:
 *    unsynchronised races show every time. Whoever waits on a stream (stream, event or
 *    context synchronisation, a copy into pageable memory, a free) has its pending work run
 *    at once, so synchronised programs stay fast. The legacy stream's ops wait for the older
 *    ops of every blocking stream, and a blocking stream's ops for the legacy stream's older
 *    ones (streams created with CU_STREAM_NON_BLOCKING are exempt).
 *  - Async copies by the kind of their host side, as CUDA documents: pinned memory (or none,
 *    device to device) is copied later, by the worker; a pageable source is staged at call
 *    time (the caller may reuse it at once) and the staged copy enqueued; a pageable
 *    destination makes the copy synchronous (after the stream's earlier work). Synchronous
 *    copies wait for the legacy stream and every blocking stream, then copy at call time.
 *    With HOTPIN_STANDIN_PAGEABLE_GBPS=G, a copy with a pageable side spends at least its
 *    bytes / G GB/s in the call (a host whose pageable copies are slow).
 *  - Events (record, query, synchronize, stream wait), host functions (cuLaunchHostFunc,
 *    which tests use as kernels: device memory is host memory here), and linear stream
 *    capture into graphs: a pageable copy or a synchronisation on a capturing stream is
 *    refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and invalidates the capture.
 *  - A CUDA call made from a host function (which CUDA forbids) never waits. Work still
 *    pending when the process exits is dropped. A forked child starts no worker until it
 *    calls CUDA itself.
 */
#ifndef HOTPIN_CUDA_STANDIN_H
#define HOTPIN_CUDA_STANDIN_H

#include <stddef.h>

#define EXPORT __attribute__((visibility("default"), noinline))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef void (*CUhostFn)(void *user);

/* Stream handles with a meaning of their own, and cuStreamCreate's flag. */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
enum { CU_STREAM_NON_BLOCKING = 0x1 };

/* CUstreamCaptureStatus and CUstreamCaptureMode. */
enum { CU_STREAM_CAPTURE_STATUS_NONE = 0, CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
       CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2 };
enum { CU_STREAM_CAPTURE_MODE_GLOBAL = 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
       CU_STREAM_CAPTURE_MODE_RELAXED = 2 };

/* CUpointer_attribute: the ones the stand-in answers. */
enum {
    CU_POINTER_ATTRIBUTE_CONTEXT = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
    CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
    CU_POINTER_ATTRIBUTE_BUFFER_ID = 7,
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
    CU_POINTER_ATTRIBUTE_MAPPED = 13,
};

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
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
