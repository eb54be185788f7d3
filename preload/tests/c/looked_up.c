/* A CUDA program that looks its functions up itself, as CuPy does: dlopen + dlsym of the
 * runtime's cudaHostAlloc and of the driver's cuMemHostAlloc (here the CUDA stand-in, a test
 * fixture, not CUDA). Each API: 1 pinned buffer copied 20 times, 2 never copied; then each
 * device buffer is copied back and checked: through cudaMemcpy, and through the driver's
 * cuMemcpyDtoH taken from cuGetProcAddress (as the runtime and PyTorch take theirs). Then
 * synchronous 2D copies, looked up the same two ways: the runtime's cudaMemcpy2D by dlsym and
 * the driver's cuMemcpy2D from cuGetProcAddress, each 20 times from a malloc'd buffer of its
 * own, and each device buffer copied back and checked again.
 * Usage: looked_up RUNTIME DRIVER. Prints its copies and checks as JSON. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024 * 1024)
typedef int (*host_alloc_fn)(void **, size_t, unsigned);
typedef int (*free_fn)(void *);
typedef int (*malloc_fn)(void **, size_t);
typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*init_fn)(unsigned);
typedef int (*dalloc_fn)(unsigned long long *, size_t);
typedef int (*htod_fn)(unsigned long long, const void *, size_t);
typedef int (*dtoh_fn)(void *, unsigned long long, size_t);
typedef int (*proc_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*memcpy_2d_fn)(void *, size_t, const void *, size_t, size_t, size_t, int);
/* cuda.h's CUDA_MEMCPY2D. */
typedef struct {
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    unsigned long long srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    unsigned long long dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} memcpy_2d_t;
typedef int (*cu_memcpy_2d_fn)(const memcpy_2d_t *);

/* Brings both device buffers back into `back` (the runtime's through cudaMemcpy, the
 * driver's through the cuMemcpyDtoH taken from cuGetProcAddress) and compares each with what
 * was copied there, counting checks and mismatches: 0, or the exit code of the failing call. */
static int check_back(memcpy_fn cuda_memcpy, dtoh_fn cu_dtoh, char *back, void *device,
                      unsigned long long ddevice, const void *rt_want, const void *drv_want,
                      long *checks, long *mismatches) {
    if (cuda_memcpy(back, device, 4 * MIB, 2)) return 11;
    ++*checks;
    *mismatches += memcmp(back, rt_want, 4 * MIB) != 0;
    if (cu_dtoh(back, ddevice, 4 * MIB)) return 12;
    ++*checks;
    *mismatches += memcmp(back, drv_want, 4 * MIB) != 0;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return 1;
    void *rt = dlopen(argv[1], RTLD_NOW);
    void *drv = dlopen(argv[2], RTLD_NOW);
    if (!rt || !drv) return 1;
    host_alloc_fn cuda_host_alloc = (host_alloc_fn)dlsym(rt, "cudaHostAlloc");
    free_fn cuda_free_host = (free_fn)dlsym(rt, "cudaFreeHost");
    malloc_fn cuda_malloc = (malloc_fn)dlsym(rt, "cudaMalloc");
    memcpy_fn cuda_memcpy = (memcpy_fn)dlsym(rt, "cudaMemcpy");
    init_fn cu_init = (init_fn)dlsym(drv, "cuInit");
    host_alloc_fn cu_host_alloc = (host_alloc_fn)dlsym(drv, "cuMemHostAlloc");
    free_fn cu_free_host = (free_fn)dlsym(drv, "cuMemFreeHost");
    dalloc_fn cu_alloc = (dalloc_fn)dlsym(drv, "cuMemAlloc_v2");
    htod_fn cu_htod = (htod_fn)dlsym(drv, "cuMemcpyHtoD_v2");
    proc_fn cu_get_proc_address = (proc_fn)dlsym(drv, "cuGetProcAddress_v2");
    memcpy_2d_fn cuda_memcpy_2d = (memcpy_2d_fn)dlsym(rt, "cudaMemcpy2D");
    dtoh_fn cu_dtoh = NULL;
    cu_memcpy_2d_fn cu_memcpy_2d = NULL;
    if (!cu_get_proc_address ||
        cu_get_proc_address("cuMemcpyDtoH", (void **)&cu_dtoh, 13000, 0, NULL) != 0 ||
        cu_get_proc_address("cuMemcpy2D", (void **)&cu_memcpy_2d, 13000, 0, NULL) != 0)
        return 2;
    if (!cuda_host_alloc || !cuda_free_host || !cuda_malloc || !cuda_memcpy || !cu_init ||
        !cu_host_alloc || !cu_free_host || !cu_alloc || !cu_htod || !cu_dtoh ||
        !cuda_memcpy_2d || !cu_memcpy_2d)
        return 2;
    void *device;
    unsigned long long ddevice;
    if (cuda_malloc(&device, 4 * MIB) || cu_init(0) || cu_alloc(&ddevice, 4 * MIB)) return 3;
    void *rt_bufs[3], *drv_bufs[3];
    for (int i = 0; i < 3; i++)
        if (cuda_host_alloc(&rt_bufs[i], 4 * MIB, 0)) return 4;
    for (int i = 0; i < 3; i++)
        if (cu_host_alloc(&drv_bufs[i], 4 * MIB, 0)) return 5;
    memset(rt_bufs[0], 1, 4 * MIB);
    memset(drv_bufs[0], 2, 4 * MIB);
    long h2d = 0;
    for (int i = 0; i < 20; i++) {
        if (cuda_memcpy(device, rt_bufs[0], 4 * MIB, 1)) return 6;
        if (cu_htod(ddevice, drv_bufs[0], 4 * MIB)) return 7;
        h2d += 2;
    }
    /* What the device holds is what was copied, byte for byte. */
    long checks = 0, mismatches = 0;
    char *back = malloc(4 * MIB);
    if (!back) return 10;
    int rc = check_back(cuda_memcpy, cu_dtoh, back, device, ddevice, rt_bufs[0], drv_bufs[0],
                        &checks, &mismatches);
    if (rc) return rc;
    /* 2D: 4 rows of 1 MiB, pitch 1 MiB on both sides (the whole buffer). */
    char *rows_rt = malloc(4 * MIB), *rows_drv = malloc(4 * MIB);
    if (!rows_rt || !rows_drv) return 10;
    memset(rows_rt, 3, 4 * MIB);
    memset(rows_drv, 4, 4 * MIB);
    memcpy_2d_t c = {0};
    c.srcMemoryType = 1; /* CU_MEMORYTYPE_HOST */
    c.srcHost = rows_drv;
    c.srcPitch = MIB;
    c.dstMemoryType = 2; /* CU_MEMORYTYPE_DEVICE */
    c.dstDevice = ddevice;
    c.dstPitch = MIB;
    c.WidthInBytes = MIB;
    c.Height = 4;
    for (int i = 0; i < 20; i++) {
        if (cuda_memcpy_2d(device, MIB, rows_rt, MIB, MIB, 4, 1)) return 13;
        if (cu_memcpy_2d(&c)) return 14;
        h2d += 2;
    }
    rc = check_back(cuda_memcpy, cu_dtoh, back, device, ddevice, rows_rt, rows_drv, &checks,
                    &mismatches);
    if (rc) return rc;
    free(rows_rt);
    free(rows_drv);
    free(back);
    for (int i = 0; i < 3; i++) {
        if (cuda_free_host(rt_bufs[i])) return 8;
        if (cu_free_host(drv_bufs[i])) return 9;
    }
    printf("{\"h2d\": %ld, \"d2h\": 4, \"checks\": %ld, \"mismatches\": %ld}\n", h2d, checks,
           mismatches);
    return mismatches != 0;
}
