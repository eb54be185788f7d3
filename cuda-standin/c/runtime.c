/* CUDA runtime API stand-in (installed as libcudart.so.13). TEST FIXTURE, not CUDA: see
 * standin.h. Like the real runtime it loads libcuda.so.1 at first use and each call goes
 * through the driver function beneath it, so a tracer sees both layers. */
#define _GNU_SOURCE
#include "standin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

typedef int cudaError_t;
typedef CUstream cudaStream_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInsufficientDriver = 35,
       cudaErrorInvalidMemcpyDirection = 21 };

static struct {
    CUresult (*init)(unsigned int);
    CUresult (*device_count)(int *);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*alloc_host)(void **, size_t);
    CUresult (*host_alloc)(void **, size_t, unsigned int);
    CUresult (*free_host)(void *);
    CUresult (*host_register)(void *, size_t, unsigned int);
    CUresult (*host_unregister)(void *);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*htod_async)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*copy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*copy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*copy_2d)(const CUDA_MEMCPY2D *);
    CUresult (*copy_2d_async)(const CUDA_MEMCPY2D *, CUstream);
    CUresult (*ctx_sync)(void);
    CUresult (*stream_sync)(CUstream);
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int drv_loaded;

#define LOAD(field, name) if (!(*(void **)&drv.field = dlsym(lib, name))) return;

static void load_driver(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    LOAD(init, "cuInit") LOAD(device_count, "cuDeviceGetCount")
    LOAD(mem_alloc, "cuMemAlloc_v2") LOAD(mem_free, "cuMemFree_v2")
    LOAD(alloc_host, "cuMemAllocHost_v2") LOAD(host_alloc, "cuMemHostAlloc")
    LOAD(free_host, "cuMemFreeHost") LOAD(host_register, "cuMemHostRegister_v2")
    LOAD(host_unregister, "cuMemHostUnregister")
    LOAD(htod, "cuMemcpyHtoD_v2") LOAD(dtoh, "cuMemcpyDtoH_v2")
    LOAD(htod_async, "cuMemcpyHtoDAsync_v2") LOAD(dtoh_async, "cuMemcpyDtoHAsync_v2")
    LOAD(copy, "cuMemcpy") LOAD(copy_async, "cuMemcpyAsync")
    LOAD(copy_2d, "cuMemcpy2D_v2") LOAD(copy_2d_async, "cuMemcpy2DAsync_v2")
    LOAD(ctx_sync, "cuCtxSynchronize") LOAD(stream_sync, "cuStreamSynchronize")
    drv.init(0);
    drv_loaded = 1;
}

/* The stand-in's driver and runtime codes share numbers for every error they return. */
static int driver_ready(void) {
    pthread_once(&drv_once, load_driver);
    return drv_loaded;
}

#define DRIVER(call) return driver_ready() ? (cudaError_t)(call) : cudaErrorInsufficientDriver

#define P(x) ((CUdeviceptr)(uintptr_t)(x))

EXPORT cudaError_t cudaGetDeviceCount(int *count) { DRIVER(drv.device_count(count)); }
EXPORT cudaError_t cudaRuntimeGetVersion(int *v) { if (!v) return cudaErrorInvalidValue; *v = 13000; return cudaSuccess; }
EXPORT cudaError_t cudaDeviceSynchronize(void) { DRIVER(drv.ctx_sync()); }
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) { DRIVER(drv.stream_sync(s)); }
EXPORT const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "stand-in error"; }

EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) { DRIVER(drv.mem_alloc((CUdeviceptr *)devPtr, size)); }
EXPORT cudaError_t cudaFree(void *devPtr) { DRIVER(drv.mem_free(P(devPtr))); }
EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size) { DRIVER(drv.alloc_host(ptr, size)); }
EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) { DRIVER(drv.host_alloc(pHost, size, flags)); }
EXPORT cudaError_t cudaFreeHost(void *ptr) { DRIVER(drv.free_host(ptr)); }
EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) { DRIVER(drv.host_register(ptr, size, flags)); }
EXPORT cudaError_t cudaHostUnregister(void *ptr) { DRIVER(drv.host_unregister(ptr)); }

static cudaError_t memcpy_sync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    switch (kind) {
    case cudaMemcpyHostToDevice: DRIVER(drv.htod(P(dst), src, count));
    case cudaMemcpyDeviceToHost: DRIVER(drv.dtoh(dst, P(src), count));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDeviceToDevice:
    case cudaMemcpyDefault: DRIVER(drv.copy(P(dst), P(src), count));
    }
    return cudaErrorInvalidMemcpyDirection;
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t s) {
    switch (kind) {
    case cudaMemcpyHostToDevice: DRIVER(drv.htod_async(P(dst), src, count, s));
    case cudaMemcpyDeviceToHost: DRIVER(drv.dtoh_async(dst, P(src), count, s));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDeviceToDevice:
    case cudaMemcpyDefault: DRIVER(drv.copy_async(P(dst), P(src), count, s));
    }
    return cudaErrorInvalidMemcpyDirection;
}

EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) { return memcpy_sync(dst, src, count, kind); }
EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) { return memcpy_sync(dst, src, count, kind); }
EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t s) { return memcpy_async(dst, src, count, kind, s); }
EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t s) { return memcpy_async(dst, src, count, kind, s); }

static CUDA_MEMCPY2D describe_2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                                 size_t width, size_t height, enum cudaMemcpyKind kind) {
    int src_host = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost;
    int dst_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost;
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = src_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.srcHost = src;
    c.srcDevice = P(src);
    c.srcPitch = spitch;
    c.dstMemoryType = dst_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c.dstHost = dst;
    c.dstDevice = P(dst);
    c.dstPitch = dpitch;
    c.WidthInBytes = width;
    c.Height = height;
    return c;
}

static cudaError_t memcpy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                             size_t height, enum cudaMemcpyKind kind) {
    if (kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
    CUDA_MEMCPY2D c = describe_2d(dst, dpitch, src, spitch, width, height, kind);
    DRIVER(drv.copy_2d(&c));
}

static cudaError_t memcpy_2d_async(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                   size_t height, enum cudaMemcpyKind kind, cudaStream_t s) {
    if (kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
    CUDA_MEMCPY2D c = describe_2d(dst, dpitch, src, spitch, width, height, kind);
    DRIVER(drv.copy_2d_async(&c, s));
}

EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) { return memcpy_2d(dst, dpitch, src, spitch, width, height, kind); }
EXPORT cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) { return memcpy_2d(dst, dpitch, src, spitch, width, height, kind); }
EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) { return memcpy_2d_async(dst, dpitch, src, spitch, width, height, kind, s); }
EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) { return memcpy_2d_async(dst, dpitch, src, spitch, width, height, kind, s); }
