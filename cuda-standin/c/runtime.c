/* CUDA runtime API stand-in (installed as libcudart.so.13). TEST FIXTURE, not CUDA: see
 * standin.h. Like the real runtime it loads libcuda.so.1 at first use and each call goes
 * through the driver function beneath it, so a tracer sees both layers; streams, events,
 * copies' synchronisation and capture are the driver's. A failing call sets the thread's
 * last error (cudaGetLastError). */
#define _GNU_SOURCE
#include "standin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>

typedef int cudaError_t;
typedef CUstream cudaStream_t;
typedef CUevent cudaEvent_t;
typedef CUgraph cudaGraph_t;
typedef CUgraphExec cudaGraphExec_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInsufficientDriver = 35,
       cudaErrorInvalidMemcpyDirection = 21, cudaErrorNotReady = 600 };

/* cudaStreamPerThread: what stream 0 means to a _ptsz entry point. */
#define PTSZ(s) ((s) ? (s) : CU_STREAM_PER_THREAD)

/* cudaMemLocation / CUmemLocation, passed by value: {type, id}. */
struct cuda_location { int type; int id; };

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
    CUresult (*copy_3d)(const CUDA_MEMCPY3D *);
    CUresult (*copy_3d_async)(const CUDA_MEMCPY3D *, CUstream);
    CUresult (*copy_batch)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, void *, size_t *, size_t, CUstream);
    CUresult (*ctx_sync)(void);
    CUresult (*stream_sync)(CUstream);
    CUresult (*alloc_pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
    CUresult (*alloc_managed)(CUdeviceptr *, size_t, unsigned int);
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
    CUresult (*alloc_from_pool)(CUdeviceptr *, size_t, void *, CUstream);
    CUresult (*free_async)(CUdeviceptr, CUstream);
    CUresult (*copy_peer)(CUdeviceptr, void *, CUdeviceptr, void *, size_t);
    CUresult (*copy_peer_async)(CUdeviceptr, void *, CUdeviceptr, void *, size_t, CUstream);
    CUresult (*prefetch)(CUdeviceptr, size_t, struct cuda_location, unsigned int, CUstream);
    CUresult (*stream_create)(CUstream *, unsigned int);
    CUresult (*stream_create_priority)(CUstream *, unsigned int, int);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*stream_query)(CUstream);
    CUresult (*stream_wait_event)(CUstream, CUevent, unsigned int);
    CUresult (*event_create)(CUevent *, unsigned int);
    CUresult (*event_destroy)(CUevent);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_sync)(CUevent);
    CUresult (*event_query)(CUevent);
    CUresult (*launch_host_func)(CUstream, CUhostFn, void *);
    CUresult (*begin_capture)(CUstream, int);
    CUresult (*end_capture)(CUstream, CUgraph *);
    CUresult (*is_capturing)(CUstream, int *);
    CUresult (*exchange_capture_mode)(int *);
    CUresult (*graph_instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*graph_launch)(CUgraphExec, CUstream);
    CUresult (*graph_exec_destroy)(CUgraphExec);
    CUresult (*graph_destroy)(CUgraph);
    CUresult (*pointer_attributes)(unsigned int, int *, void **, CUdeviceptr);
    CUresult (*host_get_flags)(unsigned int *, void *);
    CUresult (*host_get_device_pointer)(CUdeviceptr *, void *, unsigned int);
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
    LOAD(copy_3d, "cuMemcpy3D_v2") LOAD(copy_3d_async, "cuMemcpy3DAsync_v2")
    LOAD(copy_batch, "cuMemcpyBatchAsync_v2")
    LOAD(ctx_sync, "cuCtxSynchronize") LOAD(stream_sync, "cuStreamSynchronize")
    LOAD(alloc_pitch, "cuMemAllocPitch_v2") LOAD(alloc_managed, "cuMemAllocManaged")
    LOAD(alloc_async, "cuMemAllocAsync") LOAD(alloc_from_pool, "cuMemAllocFromPoolAsync")
    LOAD(free_async, "cuMemFreeAsync")
    LOAD(copy_peer, "cuMemcpyPeer") LOAD(copy_peer_async, "cuMemcpyPeerAsync")
    LOAD(prefetch, "cuMemPrefetchAsync_v2")
    LOAD(stream_create, "cuStreamCreate") LOAD(stream_create_priority, "cuStreamCreateWithPriority")
    LOAD(stream_destroy, "cuStreamDestroy_v2") LOAD(stream_query, "cuStreamQuery")
    LOAD(stream_wait_event, "cuStreamWaitEvent")
    LOAD(event_create, "cuEventCreate") LOAD(event_destroy, "cuEventDestroy_v2")
    LOAD(event_record, "cuEventRecord") LOAD(event_sync, "cuEventSynchronize")
    LOAD(event_query, "cuEventQuery") LOAD(launch_host_func, "cuLaunchHostFunc")
    LOAD(begin_capture, "cuStreamBeginCapture_v2") LOAD(end_capture, "cuStreamEndCapture")
    LOAD(is_capturing, "cuStreamIsCapturing")
    LOAD(exchange_capture_mode, "cuThreadExchangeStreamCaptureMode")
    LOAD(graph_instantiate, "cuGraphInstantiateWithFlags") LOAD(graph_launch, "cuGraphLaunch")
    LOAD(graph_exec_destroy, "cuGraphExecDestroy") LOAD(graph_destroy, "cuGraphDestroy")
    LOAD(pointer_attributes, "cuPointerGetAttributes") LOAD(host_get_flags, "cuMemHostGetFlags")
    LOAD(host_get_device_pointer, "cuMemHostGetDevicePointer_v2")
    drv.init(0);
    drv_loaded = 1;
}

/* The stand-in's driver and runtime codes share numbers for every error they return. */
static int driver_ready(void) {
    pthread_once(&drv_once, load_driver);
    return drv_loaded;
}

/* The thread's last error: set by every failing call (cudaErrorNotReady is no failure). */
static __thread cudaError_t last_error;

static cudaError_t note(cudaError_t e) {
    if (e != cudaSuccess && e != cudaErrorNotReady) last_error = e;
    return e;
}

#define DRIVER(call) return note(driver_ready() ? (cudaError_t)(call) : cudaErrorInsufficientDriver)

/* Says to whoever looks (hotpin calibrate) that this runtime is the stand-in, not CUDA. */
__attribute__((visibility("default"))) const char hotpin_cuda_standin[] =
    "CUDA stand-in: a test fixture, not CUDA; its copies are memcpy and its timings mean nothing";

/* The real runtime holds locks of its own while it calls the driver, and the driver
 * functions it calls may be an interposer's (it takes them through cuGetProcAddress or
 * dlsym). The stand-in holds one runtime-wide lock across the driver calls that allocate,
 * free or register host memory and that queue asynchronous copies, so that an interposer
 * holding a lock of its own across a runtime call, while another thread inside the runtime
 * calls into it, deadlocks here as it can with CUDA. Recursive: a driver call may come back
 * into the runtime on the same thread. */
static pthread_mutex_t runtime_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

#define LOCKED_DRIVER(call) do { \
        pthread_mutex_lock(&runtime_lock); \
        cudaError_t locked_ = driver_ready() ? (cudaError_t)(call) : cudaErrorInsufficientDriver; \
        pthread_mutex_unlock(&runtime_lock); \
        return note(locked_); \
    } while (0)

#define P(x) ((CUdeviceptr)(uintptr_t)(x))

EXPORT cudaError_t cudaGetDeviceCount(int *count) { DRIVER(drv.device_count(count)); }
EXPORT cudaError_t cudaRuntimeGetVersion(int *v) { if (!v) return note(cudaErrorInvalidValue); *v = 13000; return cudaSuccess; }
EXPORT cudaError_t cudaDeviceSynchronize(void) { DRIVER(drv.ctx_sync()); }
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) { DRIVER(drv.stream_sync(s)); }
EXPORT const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return "operation not permitted when stream is capturing";
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return "operation failed due to a previous error during capture";
    default: return "stand-in error";
    }
}

/* The last error a call on this thread failed with; cudaGetLastError also clears it. */
EXPORT cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size) { DRIVER(drv.mem_alloc((CUdeviceptr *)devPtr, size)); }
EXPORT cudaError_t cudaFree(void *devPtr) { DRIVER(drv.mem_free(P(devPtr))); }
EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size) { LOCKED_DRIVER(drv.alloc_host(ptr, size)); }
EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags) { LOCKED_DRIVER(drv.host_alloc(pHost, size, flags)); }
EXPORT cudaError_t cudaFreeHost(void *ptr) { LOCKED_DRIVER(drv.free_host(ptr)); }
EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) { LOCKED_DRIVER(drv.host_register(ptr, size, flags)); }
EXPORT cudaError_t cudaHostUnregister(void *ptr) { LOCKED_DRIVER(drv.host_unregister(ptr)); }

static cudaError_t memcpy_sync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    switch (kind) {
    case cudaMemcpyHostToDevice: DRIVER(drv.htod(P(dst), src, count));
    case cudaMemcpyDeviceToHost: DRIVER(drv.dtoh(dst, P(src), count));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDeviceToDevice:
    case cudaMemcpyDefault: DRIVER(drv.copy(P(dst), P(src), count));
    }
    return note(cudaErrorInvalidMemcpyDirection);
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t s) {
    switch (kind) {
    case cudaMemcpyHostToDevice: LOCKED_DRIVER(drv.htod_async(P(dst), src, count, s));
    case cudaMemcpyDeviceToHost: LOCKED_DRIVER(drv.dtoh_async(dst, P(src), count, s));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDeviceToDevice:
    case cudaMemcpyDefault: LOCKED_DRIVER(drv.copy_async(P(dst), P(src), count, s));
    }
    return note(cudaErrorInvalidMemcpyDirection);
}

EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) { return memcpy_sync(dst, src, count, kind); }
EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) { return memcpy_sync(dst, src, count, kind); }
EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t s) { return memcpy_async(dst, src, count, kind, s); }
EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t s) { return memcpy_async(dst, src, count, kind, PTSZ(s)); }

/* A side of a described copy: host or device by the kind, or unified (what the driver finds
 * at the address) for cudaMemcpyDefault. */
static CUmemorytype memory_type(int host, enum cudaMemcpyKind kind) {
    if (kind == cudaMemcpyDefault) return CU_MEMORYTYPE_UNIFIED;
    return host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
}

static CUDA_MEMCPY2D describe_2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                                 size_t width, size_t height, enum cudaMemcpyKind kind) {
    int src_host = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost;
    int dst_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost;
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = memory_type(src_host, kind);
    c.srcHost = src;
    c.srcDevice = P(src);
    c.srcPitch = spitch;
    c.dstMemoryType = memory_type(dst_host, kind);
    c.dstHost = dst;
    c.dstDevice = P(dst);
    c.dstPitch = dpitch;
    c.WidthInBytes = width;
    c.Height = height;
    return c;
}

static cudaError_t memcpy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                             size_t height, enum cudaMemcpyKind kind) {
    if (kind > cudaMemcpyDefault) return note(cudaErrorInvalidMemcpyDirection);
    CUDA_MEMCPY2D c = describe_2d(dst, dpitch, src, spitch, width, height, kind);
    DRIVER(drv.copy_2d(&c));
}

static cudaError_t memcpy_2d_async(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                   size_t height, enum cudaMemcpyKind kind, cudaStream_t s) {
    if (kind > cudaMemcpyDefault) return note(cudaErrorInvalidMemcpyDirection);
    CUDA_MEMCPY2D c = describe_2d(dst, dpitch, src, spitch, width, height, kind);
    DRIVER(drv.copy_2d_async(&c, s));
}

EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) { return memcpy_2d(dst, dpitch, src, spitch, width, height, kind); }
EXPORT cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) { return memcpy_2d(dst, dpitch, src, spitch, width, height, kind); }
EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) { return memcpy_2d_async(dst, dpitch, src, spitch, width, height, kind, s); }
EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) { return memcpy_2d_async(dst, dpitch, src, spitch, width, height, kind, PTSZ(s)); }

/* cudaMemcpy3DParms, laid out as in driver_types.h (the tracer reads it at these offsets). */
struct cuda_pos { size_t x, y, z; };
struct cuda_pitched_ptr { void *ptr; size_t pitch, xsize, ysize; };
struct cuda_extent { size_t width, height, depth; };
struct cuda_memcpy_3d_parms {
    void *srcArray;
    struct cuda_pos srcPos;
    struct cuda_pitched_ptr srcPtr;
    void *dstArray;
    struct cuda_pos dstPos;
    struct cuda_pitched_ptr dstPtr;
    struct cuda_extent extent;
    enum cudaMemcpyKind kind;
};
_Static_assert(__builtin_offsetof(struct cuda_memcpy_3d_parms, dstPtr) == 96, "cudaMemcpy3DParms layout");
_Static_assert(__builtin_offsetof(struct cuda_memcpy_3d_parms, kind) == 152, "cudaMemcpy3DParms layout");

/* Linear memory only (no arrays): the driver's CUDA_MEMCPY3D for the same copy. */
static CUDA_MEMCPY3D describe_3d(const struct cuda_memcpy_3d_parms *p) {
    int src_host = p->kind == cudaMemcpyHostToDevice || p->kind == cudaMemcpyHostToHost;
    int dst_host = p->kind == cudaMemcpyDeviceToHost || p->kind == cudaMemcpyHostToHost;
    CUDA_MEMCPY3D c = {0};
    c.srcMemoryType = memory_type(src_host, p->kind);
    c.srcHost = p->srcPtr.ptr;
    c.srcDevice = P(p->srcPtr.ptr);
    c.srcPitch = p->srcPtr.pitch;
    c.srcHeight = p->srcPtr.ysize;
    c.srcXInBytes = p->srcPos.x, c.srcY = p->srcPos.y, c.srcZ = p->srcPos.z;
    c.dstMemoryType = memory_type(dst_host, p->kind);
    c.dstHost = p->dstPtr.ptr;
    c.dstDevice = P(p->dstPtr.ptr);
    c.dstPitch = p->dstPtr.pitch;
    c.dstHeight = p->dstPtr.ysize;
    c.dstXInBytes = p->dstPos.x, c.dstY = p->dstPos.y, c.dstZ = p->dstPos.z;
    c.WidthInBytes = p->extent.width;
    c.Height = p->extent.height;
    c.Depth = p->extent.depth;
    return c;
}

static cudaError_t memcpy_3d(const struct cuda_memcpy_3d_parms *p) {
    if (!p) return note(cudaErrorInvalidValue);
    if (p->kind > cudaMemcpyDefault) return note(cudaErrorInvalidMemcpyDirection);
    CUDA_MEMCPY3D c = describe_3d(p);
    DRIVER(drv.copy_3d(&c));
}
static cudaError_t memcpy_3d_async(const struct cuda_memcpy_3d_parms *p, cudaStream_t s) {
    if (!p) return note(cudaErrorInvalidValue);
    if (p->kind > cudaMemcpyDefault) return note(cudaErrorInvalidMemcpyDirection);
    CUDA_MEMCPY3D c = describe_3d(p);
    DRIVER(drv.copy_3d_async(&c, s));
}
EXPORT cudaError_t cudaMemcpy3D(const struct cuda_memcpy_3d_parms *p) { return memcpy_3d(p); }
EXPORT cudaError_t cudaMemcpy3D_ptds(const struct cuda_memcpy_3d_parms *p) { return memcpy_3d(p); }
EXPORT cudaError_t cudaMemcpy3DAsync(const struct cuda_memcpy_3d_parms *p, cudaStream_t s) { return memcpy_3d_async(p, s); }
EXPORT cudaError_t cudaMemcpy3DAsync_ptsz(const struct cuda_memcpy_3d_parms *p, cudaStream_t s) { return memcpy_3d_async(p, PTSZ(s)); }

/* CUDA 13's form (no failIdx), over the driver's batch as the real runtime does. */
static cudaError_t memcpy_batch(void **dsts, void **srcs, size_t *sizes, size_t count, void *attrs,
                                size_t *attr_idxs, size_t num_attrs, cudaStream_t s) {
    DRIVER(drv.copy_batch((CUdeviceptr *)dsts, (CUdeviceptr *)srcs, sizes, count, attrs, attr_idxs, num_attrs, s));
}
EXPORT cudaError_t cudaMemcpyBatchAsync(void **dsts, void **srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t num_attrs, cudaStream_t s) { return memcpy_batch(dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs, s); }
EXPORT cudaError_t cudaMemcpyBatchAsync_ptsz(void **dsts, void **srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t num_attrs, cudaStream_t s) { return memcpy_batch(dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs, PTSZ(s)); }

/* The rest of the memory API, each over its driver call. */
EXPORT cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height) { DRIVER(drv.alloc_pitch((CUdeviceptr *)devPtr, pitch, width, height, 4)); }
EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) { DRIVER(drv.alloc_managed((CUdeviceptr *)devPtr, size, flags)); }
EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t s) { DRIVER(drv.alloc_async((CUdeviceptr *)devPtr, size, s)); }
EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t s) { DRIVER(drv.alloc_async((CUdeviceptr *)devPtr, size, s)); }
EXPORT cudaError_t cudaMallocFromPoolAsync(void **devPtr, size_t size, void *pool, cudaStream_t s) { DRIVER(drv.alloc_from_pool((CUdeviceptr *)devPtr, size, pool, s)); }
EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **devPtr, size_t size, void *pool, cudaStream_t s) { DRIVER(drv.alloc_from_pool((CUdeviceptr *)devPtr, size, pool, s)); }
EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t s) { DRIVER(drv.free_async(P(devPtr), s)); }
EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t s) { DRIVER(drv.free_async(P(devPtr), s)); }
EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dd, const void *src, int sd, size_t n) { (void)dd; (void)sd; DRIVER(drv.copy_peer(P(dst), 0, P(src), 0, n)); }
EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n, cudaStream_t s) { (void)dd; (void)sd; DRIVER(drv.copy_peer_async(P(dst), 0, P(src), 0, n, s)); }

/* A symbol's host shadow stands for its device memory: here they are one. The async forms
 * are the async driver copies on their stream. */
static cudaError_t to_symbol(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind) {
    return memcpy_sync((char *)symbol + offset, src, n, kind);
}
static cudaError_t from_symbol(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind) {
    return memcpy_sync(dst, (const char *)symbol + offset, n, kind);
}
static cudaError_t to_symbol_async(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind, cudaStream_t s) {
    return memcpy_async((char *)symbol + offset, src, n, kind, s);
}
static cudaError_t from_symbol_async(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind, cudaStream_t s) {
    return memcpy_async(dst, (const char *)symbol + offset, n, kind, s);
}
EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind) { return to_symbol(symbol, src, n, offset, kind); }
EXPORT cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind) { return to_symbol(symbol, src, n, offset, kind); }
EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind, cudaStream_t s) { return to_symbol_async(symbol, src, n, offset, kind, s); }
EXPORT cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src, size_t n, size_t offset, enum cudaMemcpyKind kind, cudaStream_t s) { return to_symbol_async(symbol, src, n, offset, kind, PTSZ(s)); }
EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind) { return from_symbol(dst, symbol, n, offset, kind); }
EXPORT cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind) { return from_symbol(dst, symbol, n, offset, kind); }
EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind, cudaStream_t s) { return from_symbol_async(dst, symbol, n, offset, kind, s); }
EXPORT cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t n, size_t offset, enum cudaMemcpyKind kind, cudaStream_t s) { return from_symbol_async(dst, symbol, n, offset, kind, PTSZ(s)); }

/* A CUDA array is a device buffer with rows of `width` bytes here; offsets are in bytes/rows. */
static cudaError_t to_array(void *array, size_t w, size_t h, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind) {
    return memcpy_2d((char *)array + h * width + w, width, src, spitch, width, height, kind);
}
static cudaError_t from_array(void *dst, size_t dpitch, const void *array, size_t w, size_t h, size_t width, size_t height, enum cudaMemcpyKind kind) {
    return memcpy_2d(dst, dpitch, (const char *)array + h * width + w, width, width, height, kind);
}
static cudaError_t to_array_async(void *array, size_t w, size_t h, const void *src, size_t spitch, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) {
    return memcpy_2d_async((char *)array + h * width + w, width, src, spitch, width, height, kind, s);
}
static cudaError_t from_array_async(void *dst, size_t dpitch, const void *array, size_t w, size_t h, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) {
    return memcpy_2d_async(dst, dpitch, (const char *)array + h * width + w, width, width, height, kind, s);
}
EXPORT cudaError_t cudaMemcpy2DToArray(void *a, size_t w, size_t h, const void *src, size_t sp, size_t width, size_t height, enum cudaMemcpyKind kind) { return to_array(a, w, h, src, sp, width, height, kind); }
EXPORT cudaError_t cudaMemcpy2DToArray_ptds(void *a, size_t w, size_t h, const void *src, size_t sp, size_t width, size_t height, enum cudaMemcpyKind kind) { return to_array(a, w, h, src, sp, width, height, kind); }
EXPORT cudaError_t cudaMemcpy2DToArrayAsync(void *a, size_t w, size_t h, const void *src, size_t sp, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) { return to_array_async(a, w, h, src, sp, width, height, kind, s); }
EXPORT cudaError_t cudaMemcpy2DToArrayAsync_ptsz(void *a, size_t w, size_t h, const void *src, size_t sp, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) { return to_array_async(a, w, h, src, sp, width, height, kind, PTSZ(s)); }
EXPORT cudaError_t cudaMemcpy2DFromArray(void *dst, size_t dp, const void *a, size_t w, size_t h, size_t width, size_t height, enum cudaMemcpyKind kind) { return from_array(dst, dp, a, w, h, width, height, kind); }
EXPORT cudaError_t cudaMemcpy2DFromArray_ptds(void *dst, size_t dp, const void *a, size_t w, size_t h, size_t width, size_t height, enum cudaMemcpyKind kind) { return from_array(dst, dp, a, w, h, width, height, kind); }
EXPORT cudaError_t cudaMemcpy2DFromArrayAsync(void *dst, size_t dp, const void *a, size_t w, size_t h, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) { return from_array_async(dst, dp, a, w, h, width, height, kind, s); }
EXPORT cudaError_t cudaMemcpy2DFromArrayAsync_ptsz(void *dst, size_t dp, const void *a, size_t w, size_t h, size_t width, size_t height, enum cudaMemcpyKind kind, cudaStream_t s) { return from_array_async(dst, dp, a, w, h, width, height, kind, PTSZ(s)); }

EXPORT cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, struct cuda_location loc, unsigned int flags, cudaStream_t s) { DRIVER(drv.prefetch(P(p), n, loc, flags, s)); }
EXPORT cudaError_t cudaMemPrefetchAsync_ptsz(const void *p, size_t n, struct cuda_location loc, unsigned int flags, cudaStream_t s) { DRIVER(drv.prefetch(P(p), n, loc, flags, PTSZ(s))); }

/* Streams, events and host functions, each over its driver call. A _ptsz entry point's
 * stream 0 is the thread's per-thread stream (cudaStreamPerThread). */
EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { DRIVER(drv.stream_create(s, 0)); }
EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) { DRIVER(drv.stream_create(s, flags)); }
EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority) { DRIVER(drv.stream_create_priority(s, flags, priority)); }
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) { DRIVER(drv.stream_destroy(s)); }
EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) { DRIVER(drv.stream_query(s)); }
EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) { DRIVER(drv.stream_query(PTSZ(s))); }
EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { DRIVER(drv.stream_sync(PTSZ(s))); }
EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) { DRIVER(drv.stream_wait_event(s, e, flags)); }
EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags) { DRIVER(drv.stream_wait_event(PTSZ(s), e, flags)); }
EXPORT cudaError_t cudaEventCreate(cudaEvent_t *e) { DRIVER(drv.event_create(e, 0)); }
EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) { DRIVER(drv.event_create(e, flags)); }
EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { DRIVER(drv.event_record(e, s)); }
EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) { DRIVER(drv.event_record(e, PTSZ(s))); }
EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) { DRIVER(drv.event_sync(e)); }
EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) { DRIVER(drv.event_query(e)); }
EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) { DRIVER(drv.event_destroy(e)); }
EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t s, CUhostFn fn, void *user) { DRIVER(drv.launch_host_func(s, fn, user)); }
EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, CUhostFn fn, void *user) { DRIVER(drv.launch_host_func(PTSZ(s), fn, user)); }

/* Stream capture and graphs (cudaStreamCaptureMode and cudaStreamCaptureStatus share the
 * driver's numbers). */
EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, int mode) { DRIVER(drv.begin_capture(s, mode)); }
EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, int mode) { DRIVER(drv.begin_capture(PTSZ(s), mode)); }
EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) { DRIVER(drv.end_capture(s, g)); }
EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g) { DRIVER(drv.end_capture(PTSZ(s), g)); }
EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, int *status) { DRIVER(drv.is_capturing(s, status)); }
EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, int *status) { DRIVER(drv.is_capturing(PTSZ(s), status)); }
EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(int *mode) { DRIVER(drv.exchange_capture_mode(mode)); }
/* CUDA 12's signature (flags, not an error node and a log). */
EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags) { DRIVER(drv.graph_instantiate(exec, g, flags)); }
EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long flags) { DRIVER(drv.graph_instantiate(exec, g, flags)); }
EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) { DRIVER(drv.graph_launch(exec, s)); }
EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t s) { DRIVER(drv.graph_launch(exec, PTSZ(s))); }
EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { DRIVER(drv.graph_exec_destroy(exec)); }
EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t g) { DRIVER(drv.graph_destroy(g)); }

/* Questions about pointers. cudaPointerAttributes: {type, device, devicePointer,
 * hostPointer}; type is cudaMemoryTypeUnregistered (0), Host (1), Device (2) or Managed (3). */
struct cuda_pointer_attributes { int type; int device; void *devicePointer; void *hostPointer; };

static cudaError_t pointer_attributes(struct cuda_pointer_attributes *a, const void *ptr) {
    if (!a) return note(cudaErrorInvalidValue);
    unsigned type = 0, managed = 0;
    int device = -2;
    void *device_pointer = NULL, *host_pointer = NULL;
    int attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                   CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                   CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *data[] = {&type, &device, &device_pointer, &host_pointer, &managed};
    if (!driver_ready()) return note(cudaErrorInsufficientDriver);
    cudaError_t e = note(drv.pointer_attributes(5, attrs, data, P(ptr)));
    if (e) return e;
    a->type = managed ? 3 : (int)type;
    a->device = device;
    a->devicePointer = device_pointer;
    /* CUDA 13 answers unregistered memory with the address itself as hostPointer (seen on
     * the H100: type 0, device -2, devicePointer NULL). */
    a->hostPointer = type == 0 && !managed ? (void *)ptr : host_pointer;
    return cudaSuccess;
}

EXPORT cudaError_t cudaPointerGetAttributes(struct cuda_pointer_attributes *a, const void *ptr) { return pointer_attributes(a, ptr); }
EXPORT cudaError_t cudaHostGetFlags(unsigned int *flags, void *host) { DRIVER(drv.host_get_flags(flags, host)); }
EXPORT cudaError_t cudaHostGetDevicePointer(void **device, void *host, unsigned int flags) { DRIVER(drv.host_get_device_pointer((CUdeviceptr *)device, host, flags)); }
