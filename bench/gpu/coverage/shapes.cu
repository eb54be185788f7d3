// Copies of every shape the runtime and the driver offer, each a few times, with known sizes:
//   pitch2d     cudaMallocPitch + cudaMemcpy2D / cudaMemcpy2DAsync both ways (also cudaMemcpyDefault)
//   pitchlinear cudaMemcpyAsync(cudaMemcpyDefault) of the whole pitched block, both ways
//   3d          cudaMalloc3D + cudaMemcpy3D / cudaMemcpy3DAsync, host pitched ptr <-> device, both ways
//   symbol      a __device__ array: cudaMemcpyToSymbol / FromSymbol and their Async forms
//   array       cudaMallocArray + cudaMemcpy2DToArray / 2DFromArray and their Async forms
//   batch       cudaMemcpyBatchAsync: 4 host-to-device elements, 2 device-to-host elements
//   peer        cudaMemcpyPeer / PeerAsync on device 0 to itself, and a cudaMemcpy D2D (all d2d)
//   driver      cuMemcpy2D / cuMemcpy2DAsync / cuMemcpy3D / cuMemcpyHtoD / cuMemcpyDtoH (link -lcuda)
// A 2D copy moves width*height bytes, a 3D copy width*height*depth, and counts as one copy; a
// batch of N elements counts as N copies. SHAPES_SKIP=batch,driver (comma-separated section
// names) leaves sections out. All memory is allocated before the measured phase.
// Usage: shapes [iterations]   (default 5)
#include "coverage.h"
#include <cuda.h>

#define CHECK_CU(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *m_ = NULL; \
    cuGetErrorString(r_, &m_); \
    fprintf(stderr, "%s:%d: %s: %s (%d)\n", __FILE__, __LINE__, #x, m_ ? m_ : "?", (int)r_); \
    exit(1); } } while (0)

static const size_t KiB = 1024, MiB = 1024 * 1024;
static const size_t SYM_BYTES = 192 * KiB;
__device__ unsigned char g_sym[SYM_BYTES];

static bool wanted(const char *section) {
    const char *skip = getenv("SHAPES_SKIP");
    if (skip == NULL) return true;
    const size_t n = strlen(section);
    for (const char *p = skip; *p != '\0';) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, section, n) == 0) return false;
        if (e == NULL) break;
        p = e + 1;
    }
    return true;
}

static void *host_malloc(size_t n, int fill) {
    void *p = malloc(n);
    if (p == NULL) { fprintf(stderr, "malloc(%zu) failed\n", n); exit(1); }
    memset(p, fill, n);
    return p;
}

static void *host_pinned(size_t n, int fill) {
    void *p = NULL;
    CHECK(cudaMallocHost(&p, n));
    memset(p, fill, n);
    return p;
}

int main(int argc, char **argv) {
    const int K = argc > 1 ? atoi(argv[1]) : 5;

    // ---- set-up: every allocation (and the module holding g_sym), no copies
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // 2D: 3000-byte rows (so that the pitch differs from the width), 256 rows
    const size_t W2 = 3000, H2 = 256, HP2 = 4096;
    char *d2 = NULL;
    size_t pitch2 = 0;
    CHECK(cudaMallocPitch((void **)&d2, &pitch2, W2, H2));
    const size_t hp2_n = (pitch2 > HP2 ? pitch2 : HP2) * H2;
    char *h2 = (char *)host_malloc(W2 * H2, 1);          // tight rows, pageable
    char *hp2 = (char *)host_pinned(hp2_n, 2);           // 4096-byte rows, pinned

    // 3D: 1000 x 64 x 16 bytes
    const size_t W3 = 1000, H3 = 64, D3 = 16, N3 = W3 * H3 * D3;
    cudaPitchedPtr p3;
    CHECK(cudaMalloc3D(&p3, make_cudaExtent(W3, H3, D3)));
    char *h3 = (char *)host_malloc(N3, 3);
    char *hp3 = (char *)host_pinned(N3, 4);

    // symbol
    void *sym_addr = NULL;
    CHECK(cudaGetSymbolAddress(&sym_addr, g_sym));     // loads the module now
    char *hs = (char *)host_malloc(SYM_BYTES, 5);
    char *hps = (char *)host_pinned(SYM_BYTES, 6);

    // CUDA array: 2048 x 128 unsigned chars
    const size_t AW = 2048, AH = 128;
    cudaChannelFormatDesc desc = cudaCreateChannelDesc<unsigned char>();
    cudaArray_t arr = NULL;
    CHECK(cudaMallocArray(&arr, &desc, AW, AH));
    char *ha = (char *)host_malloc(AW * AH, 7);
    char *hpa = (char *)host_pinned(AW * AH, 8);

    // batch: one pinned block and one device block, elements at offsets inside them
    const size_t BN = 4, bsz[BN] = {64 * KiB, 128 * KiB, 256 * KiB, 512 * KiB},
                 boff[BN] = {0, 64 * KiB, 192 * KiB, 448 * KiB};
    char *bat_h = (char *)host_pinned(1 * MiB, 9);
    char *bat_h2 = (char *)host_pinned(512 * KiB, 10);
    char *bat_d = NULL;
    CHECK(cudaMalloc((void **)&bat_d, 1 * MiB));

    // peer and D2D
    char *pa = NULL, *pb = NULL;
    CHECK(cudaMalloc((void **)&pa, 1 * MiB));
    CHECK(cudaMalloc((void **)&pb, 1 * MiB));

    // driver API: the runtime's primary context is current on this thread
    CHECK_CU(cuInit(0));
    CUcontext ctx = NULL;
    CHECK_CU(cuCtxGetCurrent(&ctx));
    if (ctx == NULL) {
        CUdevice dev0;
        CHECK_CU(cuDeviceGet(&dev0, 0));
        CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev0));
        CHECK_CU(cuCtxSetCurrent(ctx));
    }
    CHECK(cudaDeviceSynchronize());

    hotpin_gate();

    // ---- measured phase
    for (int i = 0; i < K; i++) {
        if (wanted("pitch2d")) {
            CHECK(cudaMemcpy2D(d2, pitch2, h2, W2, W2, H2, cudaMemcpyHostToDevice));
            tally("memcpy2d_h2d", DIR_H2D, W2 * H2);
            CHECK(cudaMemcpy2D(h2, W2, d2, pitch2, W2, H2, cudaMemcpyDeviceToHost));
            tally("memcpy2d_d2h", DIR_D2H, W2 * H2);
            CHECK(cudaMemcpy2D(d2, pitch2, h2, W2, W2, H2, cudaMemcpyDefault));
            tally("memcpy2d_default_h2d", DIR_H2D, W2 * H2);
            CHECK(cudaMemcpy2D(h2, W2, d2, pitch2, W2, H2, cudaMemcpyDefault));
            tally("memcpy2d_default_d2h", DIR_D2H, W2 * H2);
            CHECK(cudaMemcpy2DAsync(d2, pitch2, hp2, HP2, W2, H2, cudaMemcpyHostToDevice, s));
            tally("memcpy2dasync_h2d", DIR_H2D, W2 * H2);
            CHECK(cudaMemcpy2DAsync(hp2, HP2, d2, pitch2, W2, H2, cudaMemcpyDeviceToHost, s));
            tally("memcpy2dasync_d2h", DIR_D2H, W2 * H2);
            CHECK(cudaStreamSynchronize(s));
        }
        if (wanted("pitchlinear")) {
            CHECK(cudaMemcpyAsync(d2, hp2, pitch2 * H2, cudaMemcpyDefault, s));
            tally("memcpyasync_default_pitch_h2d", DIR_H2D, pitch2 * H2);
            CHECK(cudaMemcpyAsync(hp2, d2, pitch2 * H2, cudaMemcpyDefault, s));
            tally("memcpyasync_default_pitch_d2h", DIR_D2H, pitch2 * H2);
            CHECK(cudaStreamSynchronize(s));
        }
        if (wanted("3d")) {
            cudaMemcpy3DParms p;
            memset(&p, 0, sizeof p);
            p.srcPtr = make_cudaPitchedPtr(h3, W3, W3, H3);
            p.dstPtr = p3;
            p.extent = make_cudaExtent(W3, H3, D3);
            p.kind = cudaMemcpyHostToDevice;
            CHECK(cudaMemcpy3D(&p));
            tally("memcpy3d_h2d", DIR_H2D, N3);
            memset(&p, 0, sizeof p);
            p.srcPtr = p3;
            p.dstPtr = make_cudaPitchedPtr(h3, W3, W3, H3);
            p.extent = make_cudaExtent(W3, H3, D3);
            p.kind = cudaMemcpyDeviceToHost;
            CHECK(cudaMemcpy3D(&p));
            tally("memcpy3d_d2h", DIR_D2H, N3);
            memset(&p, 0, sizeof p);
            p.srcPtr = make_cudaPitchedPtr(hp3, W3, W3, H3);
            p.dstPtr = p3;
            p.extent = make_cudaExtent(W3, H3, D3);
            p.kind = cudaMemcpyHostToDevice;
            CHECK(cudaMemcpy3DAsync(&p, s));
            tally("memcpy3dasync_h2d", DIR_H2D, N3);
            memset(&p, 0, sizeof p);
            p.srcPtr = p3;
            p.dstPtr = make_cudaPitchedPtr(hp3, W3, W3, H3);
            p.extent = make_cudaExtent(W3, H3, D3);
            p.kind = cudaMemcpyDeviceToHost;
            CHECK(cudaMemcpy3DAsync(&p, s));
            tally("memcpy3dasync_d2h", DIR_D2H, N3);
            CHECK(cudaStreamSynchronize(s));
        }
        if (wanted("symbol")) {
            CHECK(cudaMemcpyToSymbol(g_sym, hs, SYM_BYTES));
            tally("memcpytosymbol_h2d", DIR_H2D, SYM_BYTES);
            CHECK(cudaMemcpyToSymbol(g_sym, hs, 64 * KiB, 64 * KiB, cudaMemcpyHostToDevice));
            tally("memcpytosymbol_offset_h2d", DIR_H2D, 64 * KiB);
            CHECK(cudaMemcpyFromSymbol(hs, g_sym, SYM_BYTES));
            tally("memcpyfromsymbol_d2h", DIR_D2H, SYM_BYTES);
            CHECK(cudaMemcpyToSymbolAsync(g_sym, hps, SYM_BYTES, 0, cudaMemcpyHostToDevice, s));
            tally("memcpytosymbolasync_h2d", DIR_H2D, SYM_BYTES);
            CHECK(cudaMemcpyFromSymbolAsync(hps, g_sym, SYM_BYTES, 0, cudaMemcpyDeviceToHost, s));
            tally("memcpyfromsymbolasync_d2h", DIR_D2H, SYM_BYTES);
            CHECK(cudaStreamSynchronize(s));
        }
        if (wanted("array")) {
            CHECK(cudaMemcpy2DToArray(arr, 0, 0, ha, AW, AW, AH, cudaMemcpyHostToDevice));
            tally("memcpy2dtoarray_h2d", DIR_H2D, AW * AH);
            CHECK(cudaMemcpy2DFromArray(ha, AW, arr, 0, 0, AW, AH, cudaMemcpyDeviceToHost));
            tally("memcpy2dfromarray_d2h", DIR_D2H, AW * AH);
            CHECK(cudaMemcpy2DToArrayAsync(arr, 0, 0, hpa, AW, AW, AH, cudaMemcpyHostToDevice, s));
            tally("memcpy2dtoarrayasync_h2d", DIR_H2D, AW * AH);
            CHECK(cudaMemcpy2DFromArrayAsync(hpa, AW, arr, 0, 0, AW, AH, cudaMemcpyDeviceToHost, s));
            tally("memcpy2dfromarrayasync_d2h", DIR_D2H, AW * AH);
            CHECK(cudaStreamSynchronize(s));
        }
#if CUDART_VERSION >= 12080
        if (wanted("batch")) {
            cudaMemcpyAttributes attr;
            memset(&attr, 0, sizeof attr);   // no location hints, no flags
            attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
            size_t attr_idx[1] = {0};
            // host to device: srcs in the pinned block, dsts in the device block
            void *dsts[BN];
            const void *srcs[BN];
            size_t sizes[BN];
            for (size_t e = 0; e < BN; e++) {
                dsts[e] = bat_d + boff[e];
                srcs[e] = bat_h + boff[e];
                sizes[e] = bsz[e];
            }
            // device to host: two 256 KiB elements
            void *dsts2[2] = {bat_h2, bat_h2 + 256 * KiB};
            const void *srcs2[2] = {bat_d, bat_d + 512 * KiB};
            size_t sizes2[2] = {256 * KiB, 256 * KiB};
#if CUDART_VERSION >= 13000
            CHECK(cudaMemcpyBatchAsync(dsts, srcs, sizes, BN, &attr, attr_idx, 1, s));
            CHECK(cudaMemcpyBatchAsync(dsts2, srcs2, sizes2, 2, &attr, attr_idx, 1, s));
#else
            size_t fail_idx = 0;
            CHECK(cudaMemcpyBatchAsync(dsts, (void **)srcs, sizes, BN, &attr, attr_idx, 1, &fail_idx, s));
            CHECK(cudaMemcpyBatchAsync(dsts2, (void **)srcs2, sizes2, 2, &attr, attr_idx, 1, &fail_idx, s));
#endif
            for (size_t e = 0; e < BN; e++) tally("memcpybatch_h2d", DIR_H2D, bsz[e]);
            for (size_t e = 0; e < 2; e++) tally("memcpybatch_d2h", DIR_D2H, sizes2[e]);
            CHECK(cudaStreamSynchronize(s));
        }
#endif
        if (wanted("peer")) {
            CHECK(cudaMemcpyPeer(pb, 0, pa, 0, 1 * MiB));
            tally("memcpypeer_d2d", DIR_D2D, 1 * MiB);
            CHECK(cudaMemcpyPeerAsync(pa, 0, pb, 0, 1 * MiB, s));
            tally("memcpypeerasync_d2d", DIR_D2D, 1 * MiB);
            CHECK(cudaStreamSynchronize(s));
            CHECK(cudaMemcpy(pb, pa, 512 * KiB, cudaMemcpyDeviceToDevice));
            tally("memcpy_d2d", DIR_D2D, 512 * KiB);
        }
        if (wanted("driver")) {
            CUDA_MEMCPY2D c;
            memset(&c, 0, sizeof c);
            c.srcMemoryType = CU_MEMORYTYPE_HOST;
            c.srcHost = h2;
            c.srcPitch = W2;
            c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            c.dstDevice = (CUdeviceptr)d2;
            c.dstPitch = pitch2;
            c.WidthInBytes = W2;
            c.Height = H2;
            CHECK_CU(cuMemcpy2D(&c));
            tally("cumemcpy2d_h2d", DIR_H2D, W2 * H2);
            memset(&c, 0, sizeof c);
            c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
            c.srcDevice = (CUdeviceptr)d2;
            c.srcPitch = pitch2;
            c.dstMemoryType = CU_MEMORYTYPE_HOST;
            c.dstHost = h2;
            c.dstPitch = W2;
            c.WidthInBytes = W2;
            c.Height = H2;
            CHECK_CU(cuMemcpy2D(&c));
            tally("cumemcpy2d_d2h", DIR_D2H, W2 * H2);
            memset(&c, 0, sizeof c);
            c.srcMemoryType = CU_MEMORYTYPE_HOST;
            c.srcHost = hp2;
            c.srcPitch = HP2;
            c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            c.dstDevice = (CUdeviceptr)d2;
            c.dstPitch = pitch2;
            c.WidthInBytes = W2;
            c.Height = H2;
            CHECK_CU(cuMemcpy2DAsync(&c, (CUstream)s));
            tally("cumemcpy2dasync_h2d", DIR_H2D, W2 * H2);
            memset(&c, 0, sizeof c);
            c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
            c.srcDevice = (CUdeviceptr)d2;
            c.srcPitch = pitch2;
            c.dstMemoryType = CU_MEMORYTYPE_HOST;
            c.dstHost = hp2;
            c.dstPitch = HP2;
            c.WidthInBytes = W2;
            c.Height = H2;
            CHECK_CU(cuMemcpy2DAsync(&c, (CUstream)s));
            tally("cumemcpy2dasync_d2h", DIR_D2H, W2 * H2);
            CHECK(cudaStreamSynchronize(s));

            CUDA_MEMCPY3D m;
            memset(&m, 0, sizeof m);
            m.srcMemoryType = CU_MEMORYTYPE_HOST;
            m.srcHost = h3;
            m.srcPitch = W3;
            m.srcHeight = H3;
            m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            m.dstDevice = (CUdeviceptr)p3.ptr;
            m.dstPitch = p3.pitch;
            m.dstHeight = H3;
            m.WidthInBytes = W3;
            m.Height = H3;
            m.Depth = D3;
            CHECK_CU(cuMemcpy3D(&m));
            tally("cumemcpy3d_h2d", DIR_H2D, N3);
            memset(&m, 0, sizeof m);
            m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
            m.srcDevice = (CUdeviceptr)p3.ptr;
            m.srcPitch = p3.pitch;
            m.srcHeight = H3;
            m.dstMemoryType = CU_MEMORYTYPE_HOST;
            m.dstHost = h3;
            m.dstPitch = W3;
            m.dstHeight = H3;
            m.WidthInBytes = W3;
            m.Height = H3;
            m.Depth = D3;
            CHECK_CU(cuMemcpy3D(&m));
            tally("cumemcpy3d_d2h", DIR_D2H, N3);

            CHECK_CU(cuMemcpyHtoD((CUdeviceptr)pa, h2, 512 * KiB));
            tally("cumemcpyhtod_h2d", DIR_H2D, 512 * KiB);
            CHECK_CU(cuMemcpyDtoH(h2, (CUdeviceptr)pa, 512 * KiB));
            tally("cumemcpydtoh_d2h", DIR_D2H, 512 * KiB);
        }
    }
    CHECK(cudaDeviceSynchronize());

    // ---- tear-down (not copies)
    CHECK(cudaFree(pb));
    CHECK(cudaFree(pa));
    CHECK(cudaFree(bat_d));
    CHECK(cudaFreeHost(bat_h2));
    CHECK(cudaFreeHost(bat_h));
    CHECK(cudaFreeHost(hpa));
    free(ha);
    CHECK(cudaFreeArray(arr));
    CHECK(cudaFreeHost(hps));
    free(hs);
    CHECK(cudaFreeHost(hp3));
    free(h3);
    CHECK(cudaFree(p3.ptr));
    CHECK(cudaFreeHost(hp2));
    free(h2);
    CHECK(cudaFree(d2));
    CHECK(cudaStreamDestroy(s));

    char extra[1024];
    snprintf(extra, sizeof extra,
             "\"pitch\": %zu, \"pitch3d\": %zu, \"skipped\": \"%s\", \"batch_built\": %s",
             pitch2, p3.pitch, getenv("SHAPES_SKIP") ? getenv("SHAPES_SKIP") : "",
             CUDART_VERSION >= 12080 ? "true" : "false");
    print_truth("shapes", true, false, extra);
    return 0;
}
