/* CUDA driver API stand-in (installed as libcuda.so.1). TEST FIXTURE, not CUDA: see standin.h. */
#define _GNU_SOURCE
#include "standin.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Fault injection for tests, read once:
 *   HOTPIN_STANDIN_NO_DEVICE=1        every call fails with CUDA_ERROR_NO_DEVICE
 *   HOTPIN_STANDIN_FAIL_PIN_EVERY=N   every Nth pinning call (host alloc or register) fails
 *                                     with CUDA_ERROR_OUT_OF_MEMORY */
static int no_device = -1;
static long fail_pin_every;
static atomic_long pin_calls;

static void read_config(void) {
    if (no_device >= 0) return;
    const char *nd = getenv("HOTPIN_STANDIN_NO_DEVICE");
    const char *every = getenv("HOTPIN_STANDIN_FAIL_PIN_EVERY");
    fail_pin_every = every ? strtol(every, NULL, 10) : 0;
    no_device = nd && nd[0] == '1';
}

static CUresult check_device(void) {
    read_config();
    return no_device ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

static int pin_should_fail(void) {
    long n = atomic_fetch_add(&pin_calls, 1) + 1;
    return fail_pin_every > 0 && n % fail_pin_every == 0;
}

/* Registered host ranges, for cuMemHostRegister / cuMemHostUnregister. */
#define MAX_REGISTERED 4096
static struct { void *ptr; size_t size; } registered[MAX_REGISTERED];
static pthread_mutex_t registered_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* Pinned and device allocations remember their size in a header page before the block. */
static void *alloc_pages(size_t size, int lock) {
    size_t page = page_size();
    size_t total = page + ((size + page - 1) / page) * page;
    if (total < size) return NULL;
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    if (lock && mlock(base, total) != 0) {
        munmap(base, total);
        return NULL;
    }
    *(size_t *)base = total;
    return (char *)base + page;
}

static void free_pages(void *p) {
    char *base = (char *)p - page_size();
    munmap(base, *(size_t *)base);
}

EXPORT CUresult cuInit(unsigned int flags) {
    (void)flags;
    return check_device();
}

EXPORT CUresult cuDriverGetVersion(int *version) {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = check_device() == CUDA_SUCCESS ? 1 : 0;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    CUresult r = check_device();
    if (r) return r;
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    void *p = alloc_pages(bytesize, 0);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    CUresult r = check_device();
    if (r) return r;
    if (dptr) free_pages((void *)(uintptr_t)dptr);
    return CUDA_SUCCESS;
}

static CUresult host_alloc(void **pp, size_t bytesize) {
    CUresult r = check_device();
    if (r) return r;
    if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (pin_should_fail()) return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = alloc_pages(bytesize, 1);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *pp = p;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return host_alloc(pp, bytesize); }

EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) {
    (void)flags;
    return host_alloc(pp, bytesize);
}

EXPORT CUresult cuMemFreeHost(void *p) {
    CUresult r = check_device();
    if (r) return r;
    if (p) free_pages(p);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags) {
    (void)flags;
    CUresult r = check_device();
    if (r) return r;
    if (!p || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (pin_should_fail()) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&registered_lock);
    int free_slot = -1;
    for (int i = 0; i < MAX_REGISTERED; i++) {
        if (registered[i].ptr == p) {
            pthread_mutex_unlock(&registered_lock);
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
        if (!registered[i].ptr && free_slot < 0) free_slot = i;
    }
    if (free_slot < 0 || mlock(p, bytesize) != 0) {
        pthread_mutex_unlock(&registered_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    registered[free_slot].ptr = p;
    registered[free_slot].size = bytesize;
    pthread_mutex_unlock(&registered_lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostUnregister(void *p) {
    CUresult r = check_device();
    if (r) return r;
    pthread_mutex_lock(&registered_lock);
    for (int i = 0; i < MAX_REGISTERED; i++) {
        if (registered[i].ptr == p) {
            munlock(p, registered[i].size);
            registered[i].ptr = NULL;
            pthread_mutex_unlock(&registered_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&registered_lock);
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

static CUresult copy(void *dst, const void *src, size_t n) {
    CUresult r = check_device();
    if (r) return r;
    if ((!dst || !src) && n) return CUDA_ERROR_INVALID_VALUE;
    if (n) memmove(dst, src, n);
    return CUDA_SUCCESS;
}

#define D(p) ((void *)(uintptr_t)(p))

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return copy(D(dst), src, n); }
EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n) { return copy(D(dst), src, n); }
EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return copy(dst, D(src), n); }
EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return copy(dst, D(src), n); }
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) { (void)s; return copy(D(dst), src, n); }
EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s) { (void)s; return copy(D(dst), src, n); }
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) { (void)s; return copy(dst, D(src), n); }
EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s) { (void)s; return copy(dst, D(src), n); }
EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { (void)s; return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { (void)s; return copy(D(dst), D(src), n); }

static CUresult copy_2d(const CUDA_MEMCPY2D *c) {
    CUresult r = check_device();
    if (r) return r;
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    const char *src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? c->srcHost : D(c->srcDevice);
    char *dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? c->dstHost : D(c->dstDevice);
    if (c->WidthInBytes > c->srcPitch || c->WidthInBytes > c->dstPitch) return CUDA_ERROR_INVALID_VALUE;
    for (size_t row = 0; row < c->Height; row++)
        memmove(dst + (c->dstY + row) * c->dstPitch + c->dstXInBytes,
                src + (c->srcY + row) * c->srcPitch + c->srcXInBytes, c->WidthInBytes);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) { return copy_2d(c); }
EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c) { return copy_2d(c); }
EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c) { return copy_2d(c); }
EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *c) { return copy_2d(c); }
EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s) { (void)s; return copy_2d(c); }
EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream s) { (void)s; return copy_2d(c); }

/* A side of a copy: host memory, or "device" memory (host memory here), unified or not. */
static const char *side(CUmemorytype type, const void *host, CUdeviceptr device) {
    return type == CU_MEMORYTYPE_HOST ? host : D(device);
}

static CUresult copy_3d(const CUDA_MEMCPY3D *c) {
    CUresult r = check_device();
    if (r) return r;
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    const char *src = side(c->srcMemoryType, c->srcHost, c->srcDevice);
    char *dst = (char *)side(c->dstMemoryType, c->dstHost, c->dstDevice);
    if (c->WidthInBytes > c->srcPitch || c->WidthInBytes > c->dstPitch) return CUDA_ERROR_INVALID_VALUE;
    if (c->Height > c->srcHeight || c->Height > c->dstHeight) return CUDA_ERROR_INVALID_VALUE;
    for (size_t z = 0; z < c->Depth; z++)
        for (size_t row = 0; row < c->Height; row++)
            memmove(dst + ((c->dstZ + z) * c->dstHeight + c->dstY + row) * c->dstPitch + c->dstXInBytes,
                    src + ((c->srcZ + z) * c->srcHeight + c->srcY + row) * c->srcPitch + c->srcXInBytes,
                    c->WidthInBytes);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *c) { return copy_3d(c); }
EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *c) { return copy_3d(c); }
EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, CUstream s) { (void)s; return copy_3d(c); }
EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *c, CUstream s) { (void)s; return copy_3d(c); }

/* A batch of copies (CUDA 12.8's form has failIdx before the stream, 13.0's _v2 not). */
static CUresult copy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count) {
    if (!dsts || !srcs || !sizes || !count) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUresult r = copy(D(dsts[i]), D(srcs[i]), sizes[i]);
        if (r) return r;
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t num_attrs, size_t *fail_idx, CUstream s) { (void)attrs; (void)attr_idxs; (void)num_attrs; (void)fail_idx; (void)s; return copy_batch(dsts, srcs, sizes, count); }
EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t num_attrs, size_t *fail_idx, CUstream s) { (void)attrs; (void)attr_idxs; (void)num_attrs; (void)fail_idx; (void)s; return copy_batch(dsts, srcs, sizes, count); }
EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t num_attrs, CUstream s) { (void)attrs; (void)attr_idxs; (void)num_attrs; (void)s; return copy_batch(dsts, srcs, sizes, count); }
EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, void *attrs, size_t *attr_idxs, size_t num_attrs, CUstream s) { (void)attrs; (void)attr_idxs; (void)num_attrs; (void)s; return copy_batch(dsts, srcs, sizes, count); }

EXPORT CUresult cuCtxSynchronize(void) { return check_device(); }
EXPORT CUresult cuStreamSynchronize(CUstream s) { (void)s; return check_device(); }

/* The rest of the memory API the tracer probes. Device memory is host pages, as above. */
static CUresult device_pages(CUdeviceptr *dptr, size_t bytes) {
    CUresult r = check_device();
    if (r) return r;
    if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    void *p = alloc_pages(bytes, 0);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Rows are padded to 512 bytes, as the real driver pads them to its pitch alignment. */
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int element) {
    (void)element;
    if (!pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t padded = (width + 511) & ~(size_t)511;
    CUresult r = device_pages(dptr, padded * height);
    if (r == CUDA_SUCCESS) *pitch = padded;
    return r;
}
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags) { (void)flags; return device_pages(dptr, bytes); }
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s) { (void)s; return device_pages(dptr, bytes); }
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream s) { (void)s; return device_pages(dptr, bytes); }
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, void *pool, CUstream s) { (void)pool; (void)s; return device_pages(dptr, bytes); }
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, void *pool, CUstream s) { (void)pool; (void)s; return device_pages(dptr, bytes); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { (void)s; return cuMemFree_v2(dptr); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { (void)s; return cuMemFree_v2(dptr); }

/* The virtual memory API: a reservation is address space no one may touch until mapped;
 * physical memory is a handle with a size; mapping makes the range readable and writable. */
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    (void)alignment; (void)flags;
    CUresult r = check_device();
    if (r) return r;
    if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap((void *)(uintptr_t)addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    CUresult r = check_device();
    if (r) return r;
    return munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
static atomic_ullong next_handle = 1;
EXPORT CUresult cuMemCreate(unsigned long long *handle, size_t size, const void *prop, unsigned long long flags) {
    (void)prop; (void)flags;
    CUresult r = check_device();
    if (r) return r;
    if (!handle || size == 0) return CUDA_ERROR_INVALID_VALUE;
    *handle = atomic_fetch_add(&next_handle, 1);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemRelease(unsigned long long handle) { (void)handle; return check_device(); }
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long handle, unsigned long long flags) {
    (void)offset; (void)handle; (void)flags;
    CUresult r = check_device();
    if (r) return r;
    return mprotect((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    CUresult r = check_device();
    if (r) return r;
    return mprotect((void *)(uintptr_t)ptr, size, PROT_NONE) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Device-to-device copies, peer ones included (one "device" here). */
EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n) { (void)dctx; (void)sctx; return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n) { (void)dctx; (void)sctx; return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n, CUstream s) { (void)dctx; (void)sctx; (void)s; return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, void *dctx, CUdeviceptr src, void *sctx, size_t n, CUstream s) { (void)dctx; (void)sctx; (void)s; return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { (void)s; return copy(D(dst), D(src), n); }
EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { (void)s; return copy(D(dst), D(src), n); }

/* Prefetch: `location` is a CUmemLocation {type, id} passed by value (CUDA 12.2+ / 13). */
typedef struct { int type; int id; } CUmemLocation;
EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s) { (void)p; (void)n; (void)loc; (void)flags; (void)s; return check_device(); }
EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s) { (void)p; (void)n; (void)loc; (void)flags; (void)s; return check_device(); }
