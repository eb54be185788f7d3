/* Calls every function in the tracer's registry once (each _ptds/_ptsz variant too), with a
 * distinct byte count for each copy, through the CUDA stand-in (a test fixture, not CUDA).
 * Usage: every_call RUNTIME DRIVER. Exits non-zero if a call that should succeed fails. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*fn)();
static void *rt, *drv;
static fn get(void *lib, const char *name) {
    fn f = (fn)dlsym(lib, name);
    if (!f) { fprintf(stderr, "missing %s\n", name); exit(2); }
    return f;
}
#define R(name, ...) check(get(rt, name)(__VA_ARGS__), name)
#define D(name, ...) check(get(drv, name)(__VA_ARGS__), name)
static void check(int rc, const char *name) {
    if (rc != 0) { fprintf(stderr, "%s returned %d\n", name, rc); exit(3); }
}

int main(int argc, char **argv) {
    if (argc < 3) return 1;
    drv = dlopen(argv[2], RTLD_NOW);
    rt = dlopen(argv[1], RTLD_NOW);
    if (!rt || !drv) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    void *d, *h, *h2, *hh, *hh2;
    unsigned long long dd;
    void *reg = aligned_alloc(4096, 7 * 4096), *reg2 = aligned_alloc(4096, 4096);
    R("cudaMalloc", &d, (size_t)1 << 20);
    R("cudaMallocHost", &h, (size_t)3 * 4096);
    R("cudaHostAlloc", &h2, (size_t)5 * 4096, 0u);
    R("cudaHostRegister", reg, (size_t)7 * 4096, 0u);
    /* Runtime copies: host-to-device from h unless noted. */
    R("cudaMemcpy", d, h, (size_t)101, 1);
    R("cudaMemcpy_ptds", d, h, (size_t)102, 1);
    R("cudaMemcpyAsync", d, h, (size_t)103, 1, (void *)0);
    R("cudaMemcpyAsync_ptsz", d, h, (size_t)104, 1, (void *)0);
    R("cudaMemcpy2D", d, (size_t)64, h, (size_t)64, (size_t)10, (size_t)11, 1);        /* 110 */
    R("cudaMemcpy2D_ptds", h, (size_t)64, d, (size_t)64, (size_t)12, (size_t)10, 2);   /* 120 back */
    R("cudaMemcpy2DAsync", d, (size_t)64, h, (size_t)64, (size_t)13, (size_t)10, 1, (void *)0);  /* 130 */
    R("cudaMemcpy2DAsync_ptsz", h, (size_t)64, d, (size_t)64, (size_t)14, (size_t)10, 2, (void *)0); /* 140 back */
    /* Driver copies made directly, as cuBLAS or JAX do. */
    D("cuMemcpyHtoD_v2", d, h, (size_t)201);
    D("cuMemcpyHtoD_v2_ptds", d, h, (size_t)202);
    D("cuMemcpyDtoH_v2", h, d, (size_t)203);
    D("cuMemcpyDtoH_v2_ptds", h, d, (size_t)204);
    D("cuMemcpyHtoDAsync_v2", d, h, (size_t)205, (void *)0);
    D("cuMemcpyHtoDAsync_v2_ptsz", d, h, (size_t)206, (void *)0);
    D("cuMemcpyDtoHAsync_v2", h, d, (size_t)207, (void *)0);
    D("cuMemcpyDtoHAsync_v2_ptsz", h, d, (size_t)208, (void *)0);
    D("cuMemcpy", d, h, (size_t)209);                 /* unified: d is device, so to the GPU */
    D("cuMemcpy_ptds", h, d, (size_t)210);
    D("cuMemcpyAsync", d, h, (size_t)211, (void *)0);
    D("cuMemcpyAsync_ptsz", h, d, (size_t)212, (void *)0);
    /* Driver allocations. */
    D("cuMemAlloc_v2", &dd, (size_t)2048);
    D("cuMemAllocHost_v2", &hh, (size_t)4096);
    D("cuMemHostAlloc", &hh2, (size_t)8192, 0u);
    D("cuMemHostRegister_v2", reg2, (size_t)4096, 0u);
    D("cuMemHostUnregister", reg2);
    D("cuMemFreeHost", hh);
    D("cuMemFreeHost", hh2);
    D("cuMemFree_v2", dd);
    /* A failing call: an invalid copy direction (cudaErrorInvalidMemcpyDirection, 21). */
    if (get(rt, "cudaMemcpy")(d, h, (size_t)5, 99) != 21) return 4;
    R("cudaHostUnregister", reg);
    R("cudaFreeHost", h);
    R("cudaFreeHost", h2);
    R("cudaFree", d);
    return 0;
}
