// Managed memory and a deliberate device leak. Set-up: two cudaMallocManaged buffers, a malloc'd
// host buffer, a cudaMalloc'd device buffer and a second cudaMalloc'd buffer that is never freed.
// Measured: the host writes each managed buffer, prefetches it to device 0
// (cudaMemPrefetchAsync, location {cudaMemLocationTypeDevice, 0}) and back to the host
// ({cudaMemLocationTypeHost, 0}); plus ordinary cudaMemcpy both ways between the host buffer and
// the device buffers (the leaked one included). Prefetches are counted apart from h2d/d2h.
// Without concurrent managed access the prefetches are left out ("prefetch_supported": false).
// Usage: managed [iterations]   (default 10)
#include "coverage.h"

static const size_t MiB = 1024 * 1024;

static cudaError_t prefetch(const void *p, size_t n, bool to_device, cudaStream_t s) {
#if CUDART_VERSION >= 13000
    cudaMemLocation loc;
    memset(&loc, 0, sizeof loc);
    loc.type = to_device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
    loc.id = 0;
    return cudaMemPrefetchAsync(p, n, loc, 0, s);
#else
    return cudaMemPrefetchAsync(p, n, to_device ? 0 : cudaCpuDeviceId, s);
#endif
}

int main(int argc, char **argv) {
    const int K = argc > 1 ? atoi(argv[1]) : 10;

    // ---- set-up: every allocation, no copies
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    int concurrent = 0;
    CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    const size_t managed_n[2] = {4 * MiB, 2 * MiB};
    char *managed[2] = {NULL, NULL};
    for (int b = 0; b < 2; b++) {
        CHECK(cudaMallocManaged((void **)&managed[b], managed_n[b], cudaMemAttachGlobal));
        memset(managed[b], b + 1, managed_n[b]);     // first touch on the host
    }
    const size_t host_n = 3 * MiB, dev_n = 3 * MiB, leak_n = 6 * MiB;
    char *host = (char *)malloc(host_n);
    if (host == NULL) { fprintf(stderr, "malloc failed\n"); return 1; }
    memset(host, 7, host_n);
    char *dev = NULL, *leak = NULL;
    CHECK(cudaMalloc((void **)&dev, dev_n));
    CHECK(cudaMalloc((void **)&leak, leak_n));       // never freed
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaDeviceSynchronize());

    hotpin_gate();

    // ---- measured phase
    unsigned long long sum = 0;
    for (int i = 0; i < K; i++) {
        if (concurrent) {
            for (int b = 0; b < 2; b++) {
                memset(managed[b], i, managed_n[b]);     // host writes
                CHECK(prefetch(managed[b], managed_n[b], true, s));
                tally("prefetch_managed_to_device", DIR_PF_DEVICE, managed_n[b]);
                CHECK(prefetch(managed[b], managed_n[b], false, s));
                tally("prefetch_managed_to_host", DIR_PF_HOST, managed_n[b]);
                CHECK(cudaStreamSynchronize(s));
                sum += (unsigned char)managed[b][managed_n[b] - 1];   // host reads
            }
        }
        CHECK(cudaMemcpy(dev, host, dev_n, cudaMemcpyHostToDevice));
        tally("memcpy_h2d", DIR_H2D, dev_n);
        CHECK(cudaMemcpy(host, dev, dev_n, cudaMemcpyDeviceToHost));
        tally("memcpy_d2h", DIR_D2H, dev_n);
        CHECK(cudaMemcpy(leak + 1 * MiB, host, 2 * MiB, cudaMemcpyHostToDevice));
        tally("memcpy_leaked_h2d", DIR_H2D, 2 * MiB);
        CHECK(cudaMemcpy(host, leak, 1 * MiB, cudaMemcpyDeviceToHost));
        tally("memcpy_leaked_d2h", DIR_D2H, 1 * MiB);
    }
    CHECK(cudaDeviceSynchronize());

    // ---- tear-down: everything but `leak`
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(dev));
    for (int b = 0; b < 2; b++) CHECK(cudaFree(managed[b]));
    free(host);

    char extra[256];
    snprintf(extra, sizeof extra,
             "\"device_leaked_bytes\": %zu, \"managed_bytes\": %zu, \"prefetch_supported\": %s, "
             "\"host_sum\": %llu",
             leak_n, managed_n[0] + managed_n[1], concurrent ? "true" : "false", sum);
    print_truth("managed", false, true, extra);
    return 0;
}
