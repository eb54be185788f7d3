/* Calls every function in the tracer's registry once (each _ptds/_ptsz variant too), with a
 * distinct byte count for each copy, through the CUDA stand-in (a test fixture, not CUDA).
 * Usage: every_call RUNTIME DRIVER. Exits non-zero if a call that should succeed fails. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cudaMemLocation / CUmemLocation, passed by value. */
struct location { int type; int id; };
static const struct location to_device = {1, 0}, to_host = {2, 0};

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

/* cuda.h's CUDA_MEMCPY2D and CUDA_MEMCPY3D, and driver_types.h's cudaMemcpy3DParms. */
struct memcpy_2d {
    size_t src_x, src_y; int src_type; const void *src_host; unsigned long long src_device;
    void *src_array; size_t src_pitch;
    size_t dst_x, dst_y; int dst_type; void *dst_host; unsigned long long dst_device;
    void *dst_array; size_t dst_pitch;
    size_t width, height;
};
struct memcpy_3d {
    size_t src_x, src_y, src_z, src_lod; int src_type; const void *src_host;
    unsigned long long src_device; void *src_array, *reserved0; size_t src_pitch, src_height;
    size_t dst_x, dst_y, dst_z, dst_lod; int dst_type; void *dst_host;
    unsigned long long dst_device; void *dst_array, *reserved1; size_t dst_pitch, dst_height;
    size_t width, height, depth;
};
struct pitched { void *ptr; size_t pitch, xsize, ysize; };
struct parms_3d {
    void *src_array; size_t src_pos[3]; struct pitched src;
    void *dst_array; size_t dst_pos[3]; struct pitched dst;
    size_t extent[3]; int kind;
};
static void *d, *h;
static struct memcpy_2d c2;
static struct memcpy_3d c3;
static struct parms_3d p3;
enum { HOST = 1, DEVICE = 2, UNIFIED = 4, BIG_BATCH = 1100 };

/* Host h to device d (direction 1), back (2), or from h as unified memory to d (3). */
static struct memcpy_2d *desc_2d(int direction, size_t width, size_t height) {
    memset(&c2, 0, sizeof c2);
    int to_device = direction != 2;
    c2.src_type = direction == 3 ? UNIFIED : to_device ? HOST : DEVICE;
    c2.dst_type = to_device ? DEVICE : HOST;
    if (to_device) {
        c2.src_host = h, c2.src_device = direction == 3 ? (unsigned long long)h : 0;
        c2.dst_device = (unsigned long long)d;
    } else {
        c2.src_device = (unsigned long long)d, c2.dst_host = h;
    }
    c2.src_pitch = c2.dst_pitch = width;
    c2.width = width, c2.height = height;
    return &c2;
}

static struct memcpy_3d *desc_3d(int direction, size_t width, size_t height, size_t depth) {
    memset(&c3, 0, sizeof c3);
    int to_device = direction == 1;
    c3.src_type = to_device ? HOST : DEVICE;
    c3.dst_type = to_device ? DEVICE : HOST;
    if (to_device) c3.src_host = h, c3.dst_device = (unsigned long long)d;
    else c3.src_device = (unsigned long long)d, c3.dst_host = h;
    c3.src_pitch = c3.dst_pitch = width;
    c3.src_height = c3.dst_height = height;
    c3.width = width, c3.height = height, c3.depth = depth;
    return &c3;
}

static struct parms_3d *parms_3d(int kind, size_t width, size_t height, size_t depth) {
    memset(&p3, 0, sizeof p3);
    struct pitched host = {h, width, width, height}, device = {d, width, width, height};
    p3.src = kind == 1 ? host : device;
    p3.dst = kind == 1 ? device : host;
    p3.extent[0] = width, p3.extent[1] = height, p3.extent[2] = depth;
    p3.kind = kind;
    return &p3;
}

/* A batch of `count` copies of `first`, `first + 1`, ... bytes (all 1 byte when first is 1
 * and count is BIG_BATCH), to d from h (direction 1) or back (2; 0 for the big one: to d);
 * `fail_idx` for CUDA 12.8's form, which has failIdx before the stream. */
enum which { D_, R_ };
static void batch(enum which lib, const char *name, int direction, size_t first, size_t count, int fail_idx) {
    static void *dsts[BIG_BATCH], *srcs[BIG_BATCH];
    static size_t sizes[BIG_BATCH];
    size_t attr_idx = 0, failed = 0;
    char attrs[64] = {0};
    for (size_t i = 0; i < count; i++) {
        size_t n = count == BIG_BATCH ? 1 : first + i;
        size_t at = 256 * i % 8192;
        dsts[i] = direction == 2 ? (char *)h + at : (char *)d + at;
        srcs[i] = direction == 2 ? (char *)d + at : (char *)h + at;
        sizes[i] = n;
    }
    int rc = fail_idx
        ? get(lib == D_ ? drv : rt, name)(dsts, srcs, sizes, count, attrs, &attr_idx, (size_t)1, &failed, (void *)0)
        : get(lib == D_ ? drv : rt, name)(dsts, srcs, sizes, count, attrs, &attr_idx, (size_t)1, (void *)0);
    check(rc, name);
}

int main(int argc, char **argv) {
    if (argc < 3) return 1;
    drv = dlopen(argv[2], RTLD_NOW);
    rt = dlopen(argv[1], RTLD_NOW);
    if (!rt || !drv) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    void *h2, *hh, *hh2;
    unsigned long long dd;
    void *reg = aligned_alloc(4096, 7 * 4096), *reg2 = aligned_alloc(4096, 4096);
    R("cudaMalloc", &d, (size_t)1 << 20);
    R("cudaMallocHost", &h, (size_t)3 * 4096);
    R("cudaHostAlloc", &h2, (size_t)5 * 4096, 0u);
    R("cudaHostRegister", reg, (size_t)7 * 4096, 0u);
    /* The rest of the memory API: device memory live at once with d (its sizes distinct). */
    void *pd, *m, *a[4];
    unsigned long long dp2, m2, b[4], va, handle;
    size_t pitch, pitch2;
    R("cudaMallocPitch", &pd, &pitch, (size_t)100, (size_t)3);          /* 512 x 3 */
    R("cudaMallocManaged", &m, (size_t)8192, 1u);
    R("cudaMallocAsync", &a[0], (size_t)3000, (void *)0);
    R("cudaMallocAsync_ptsz", &a[1], (size_t)3001, (void *)0);
    R("cudaMallocFromPoolAsync", &a[2], (size_t)3002, (void *)0, (void *)0);
    R("cudaMallocFromPoolAsync_ptsz", &a[3], (size_t)3003, (void *)0, (void *)0);
    D("cuMemAllocPitch_v2", &dp2, &pitch2, (size_t)600, (size_t)5, 4u); /* 1024 x 5 */
    D("cuMemAllocManaged", &m2, (size_t)12288, 1u);
    D("cuMemAllocAsync", &b[0], (size_t)3004, (void *)0);
    D("cuMemAllocAsync_ptsz", &b[1], (size_t)3005, (void *)0);
    D("cuMemAllocFromPoolAsync", &b[2], (size_t)3006, (void *)0, (void *)0);
    D("cuMemAllocFromPoolAsync_ptsz", &b[3], (size_t)3007, (void *)0, (void *)0);
    if (pitch != 512 || pitch2 != 1024) return 5;
    /* Virtual memory: 64 KiB mapped into a 1 MiB reservation. */
    D("cuMemAddressReserve", &va, (size_t)1 << 20, (size_t)0, 0ull, 0ull);
    D("cuMemCreate", &handle, (size_t)1 << 16, (void *)0, 0ull);
    D("cuMemMap", va, (size_t)1 << 16, (size_t)0, handle, 0ull);
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
    D("cuMemcpy", va + 4096, h, (size_t)213);    /* into mapped memory: to the GPU */
    /* Copies described by structures: the driver's CUDA_MEMCPY2D/3D (dst is device memory d,
     * the host side h), and the runtime's cudaMemcpy3DParms. */
    D("cuMemcpy2D_v2", desc_2d(1, 20, 11));              /* 220 */
    D("cuMemcpy2D_v2_ptds", desc_2d(2, 13, 17));         /* 221 back */
    D("cuMemcpy2DUnaligned_v2", desc_2d(1, 37, 6));      /* 222 */
    D("cuMemcpy2DUnaligned_v2_ptds", desc_2d(2, 223, 1)); /* 223 back */
    D("cuMemcpy2DAsync_v2", desc_2d(1, 8, 28), (void *)0);       /* 224 */
    D("cuMemcpy2DAsync_v2_ptsz", desc_2d(2, 5, 45), (void *)0);  /* 225 back */
    D("cuMemcpy2D_v2", desc_2d(3, 226, 1));              /* 226, host side unified */
    D("cuMemcpy3D_v2", desc_3d(1, 3, 4, 19));            /* 228 */
    D("cuMemcpy3D_v2_ptds", desc_3d(2, 229, 1, 1));      /* 229 back */
    D("cuMemcpy3DAsync_v2", desc_3d(1, 5, 2, 23), (void *)0);     /* 230 */
    D("cuMemcpy3DAsync_v2_ptsz", desc_3d(2, 7, 3, 11), (void *)0); /* 231 back */
    R("cudaMemcpy3D", parms_3d(1, 2, 4, 29));            /* 232 */
    R("cudaMemcpy3D_ptds", parms_3d(2, 233, 1, 1));      /* 233 back */
    R("cudaMemcpy3DAsync", parms_3d(1, 2, 3, 39), (void *)0);      /* 234 */
    R("cudaMemcpy3DAsync_ptsz", parms_3d(2, 5, 47, 1), (void *)0); /* 235 back */
    /* A null descriptor copies nothing: refused, and not a lost copy. */
    if (get(drv, "cuMemcpy2D_v2")((void *)0) == 0) return 6;
    /* Batches: each element a copy (the runtime's batch is the driver's _v2 underneath). */
    batch(D_, "cuMemcpyBatchAsync", 1, 241, 4, 1);         /* 241-244 */
    batch(D_, "cuMemcpyBatchAsync_ptsz", 2, 245, 2, 1);    /* 245-246 back */
    batch(D_, "cuMemcpyBatchAsync_v2", 1, 247, 1, 0);      /* 247 */
    batch(D_, "cuMemcpyBatchAsync_v2_ptsz", 2, 248, 1, 0); /* 248 back */
    batch(R_, "cudaMemcpyBatchAsync", 1, 249, 2, 0);       /* 249-250 */
    /* A batch longer than the tracer reads (1024): the rest are counted as lost. */
    batch(D_, "cuMemcpyBatchAsync_v2", 0, 1, BIG_BATCH, 0);
    /* Symbol copies (the symbol is d here) and copies to and from arrays (d again). */
    R("cudaMemcpyToSymbol", d, h, (size_t)121, (size_t)0, 1);
    R("cudaMemcpyToSymbol_ptds", d, h, (size_t)122, (size_t)0, 1);
    R("cudaMemcpyToSymbolAsync", d, h, (size_t)123, (size_t)0, 1, (void *)0);
    R("cudaMemcpyToSymbolAsync_ptsz", d, h, (size_t)124, (size_t)0, 1, (void *)0);
    R("cudaMemcpyFromSymbol", h, d, (size_t)125, (size_t)0, 2);
    R("cudaMemcpyFromSymbol_ptds", h, d, (size_t)126, (size_t)0, 2);
    R("cudaMemcpyFromSymbolAsync", h, d, (size_t)127, (size_t)0, 2, (void *)0);
    R("cudaMemcpyFromSymbolAsync_ptsz", h, d, (size_t)128, (size_t)0, 2, (void *)0);
    R("cudaMemcpy2DToArray", d, (size_t)0, (size_t)0, h, (size_t)64, (size_t)13, (size_t)11, 1);          /* 143 */
    R("cudaMemcpy2DToArray_ptds", d, (size_t)0, (size_t)0, h, (size_t)64, (size_t)12, (size_t)12, 1);     /* 144 */
    R("cudaMemcpy2DToArrayAsync", d, (size_t)0, (size_t)0, h, (size_t)64, (size_t)29, (size_t)5, 1, (void *)0);       /* 145 */
    R("cudaMemcpy2DToArrayAsync_ptsz", d, (size_t)0, (size_t)0, h, (size_t)64, (size_t)2, (size_t)73, 1, (void *)0);  /* 146 */
    R("cudaMemcpy2DFromArray", h, (size_t)64, d, (size_t)0, (size_t)0, (size_t)21, (size_t)7, 2);         /* 147 */
    R("cudaMemcpy2DFromArray_ptds", h, (size_t)64, d, (size_t)0, (size_t)0, (size_t)37, (size_t)4, 2);    /* 148 */
    R("cudaMemcpy2DFromArrayAsync", h, (size_t)64, d, (size_t)0, (size_t)0, (size_t)1, (size_t)149, 2, (void *)0);   /* 149 */
    R("cudaMemcpy2DFromArrayAsync_ptsz", h, (size_t)64, d, (size_t)0, (size_t)0, (size_t)15, (size_t)10, 2, (void *)0); /* 150 */
    /* Device to device, peer copies included: counted apart from transfers. */
    R("cudaMemcpyPeer", d, 0, pd, 0, (size_t)301);
    R("cudaMemcpyPeerAsync", d, 0, pd, 0, (size_t)302, (void *)0);
    D("cuMemcpyPeer", d, (void *)0, pd, (void *)0, (size_t)303);
    D("cuMemcpyPeer_ptds", d, (void *)0, pd, (void *)0, (size_t)304);
    D("cuMemcpyPeerAsync", d, (void *)0, pd, (void *)0, (size_t)305, (void *)0);
    D("cuMemcpyPeerAsync_ptsz", d, (void *)0, pd, (void *)0, (size_t)306, (void *)0);
    D("cuMemcpyDtoD_v2", d, pd, (size_t)307);
    D("cuMemcpyDtoD_v2_ptds", d, pd, (size_t)308);
    D("cuMemcpyDtoDAsync_v2", d, pd, (size_t)309, (void *)0);
    D("cuMemcpyDtoDAsync_v2_ptsz", d, pd, (size_t)310, (void *)0);
    /* Managed memory prefetched: to the device twice, to the host twice. */
    R("cudaMemPrefetchAsync", m, (size_t)4000, to_device, 0u, (void *)0);
    R("cudaMemPrefetchAsync_ptsz", m, (size_t)4001, to_host, 0u, (void *)0);
    D("cuMemPrefetchAsync_v2", m2, (size_t)4002, to_device, 0u, (void *)0);
    D("cuMemPrefetchAsync_v2_ptsz", m2, (size_t)4003, to_host, 0u, (void *)0);
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
    D("cuMemUnmap", va, (size_t)1 << 16);
    D("cuMemRelease", handle);
    D("cuMemAddressFree", va, (size_t)1 << 20);
    R("cudaFree", pd);
    R("cudaFree", m);
    R("cudaFreeAsync", a[0], (void *)0);
    R("cudaFreeAsync_ptsz", a[1], (void *)0);
    R("cudaFreeAsync", a[2], (void *)0);
    R("cudaFreeAsync", a[3], (void *)0);
    D("cuMemFree_v2", dp2);
    D("cuMemFree_v2", m2);
    D("cuMemFreeAsync", b[0], (void *)0);
    D("cuMemFreeAsync_ptsz", b[1], (void *)0);
    D("cuMemFreeAsync", b[2], (void *)0);
    D("cuMemFreeAsync", b[3], (void *)0);
    R("cudaHostUnregister", reg);
    R("cudaFreeHost", h);
    R("cudaFreeHost", h2);
    R("cudaFree", d);
    return 0;
}
