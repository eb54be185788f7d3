// Plain runtime-API copies between cudaMalloc memory and every kind of host memory: malloc'd
// (pageable), cudaMallocHost, cudaHostAlloc, and malloc'd memory pinned with cudaHostRegister;
// cudaMemcpy and cudaMemcpyAsync with explicit directions and with cudaMemcpyDefault, some of
// them at offsets inside the allocations. Built twice by run.sh: nvcc's default static cudart and
// -cudart shared. All memory is allocated before the measured phase (see coverage.h's gate).
// Usage: cudart_copies [iterations]   (default 10)
#include "coverage.h"

static const size_t KiB = 1024, MiB = 1024 * 1024;

int main(int argc, char **argv) {
    const int K = argc > 1 ? atoi(argv[1]) : 10;
    const char *name = argc > 2 ? argv[2] : "cudart_copies";

    // ---- set-up: every allocation, no copies
    const size_t dev_n = 8 * MiB, pageable_n = 4 * MiB, pinned_n = 2 * MiB, hostalloc_n = 1 * MiB,
                 registered_n = 3 * MiB;
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));                       // creates the context now, not in the measured phase
    char *dev = NULL, *pinned = NULL, *hostalloc = NULL;
    CHECK(cudaMalloc((void **)&dev, dev_n));
    char *pageable = (char *)malloc(pageable_n);
    if (pageable == NULL) { fprintf(stderr, "malloc failed\n"); return 1; }
    memset(pageable, 1, pageable_n);
    CHECK(cudaMallocHost((void **)&pinned, pinned_n));
    memset(pinned, 2, pinned_n);
    CHECK(cudaHostAlloc((void **)&hostalloc, hostalloc_n, cudaHostAllocPortable));
    memset(hostalloc, 3, hostalloc_n);
    char *registered = (char *)aligned_alloc(4096, registered_n);
    if (registered == NULL) { fprintf(stderr, "aligned_alloc failed\n"); return 1; }
    memset(registered, 4, registered_n);
    CHECK(cudaHostRegister(registered, registered_n, cudaHostRegisterDefault));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaDeviceSynchronize());

    hotpin_gate();

    // ---- measured phase
    for (int i = 0; i < K; i++) {
        // blocking copies, explicit directions
        CHECK(cudaMemcpy(dev, pageable, pageable_n, cudaMemcpyHostToDevice));
        tally("memcpy_pageable_h2d", DIR_H2D, pageable_n);
        CHECK(cudaMemcpy(pageable, dev, pageable_n, cudaMemcpyDeviceToHost));
        tally("memcpy_pageable_d2h", DIR_D2H, pageable_n);
        // interior pointers on both sides
        CHECK(cudaMemcpy(dev + 1 * MiB, pageable + 64 * KiB, 1 * MiB, cudaMemcpyHostToDevice));
        tally("memcpy_pageable_offset_h2d", DIR_H2D, 1 * MiB);
        CHECK(cudaMemcpy(pageable + 128 * KiB, dev + 2 * MiB, 1 * MiB, cudaMemcpyDeviceToHost));
        tally("memcpy_pageable_offset_d2h", DIR_D2H, 1 * MiB);
        CHECK(cudaMemcpy(dev, pinned, pinned_n, cudaMemcpyHostToDevice));
        tally("memcpy_pinned_h2d", DIR_H2D, pinned_n);
        CHECK(cudaMemcpy(pinned, dev, pinned_n, cudaMemcpyDeviceToHost));
        tally("memcpy_pinned_d2h", DIR_D2H, pinned_n);

        // asynchronous copies on a stream
        CHECK(cudaMemcpyAsync(dev, pinned, pinned_n, cudaMemcpyHostToDevice, s));
        tally("memcpyasync_pinned_h2d", DIR_H2D, pinned_n);
        CHECK(cudaMemcpyAsync(pinned, dev, pinned_n, cudaMemcpyDeviceToHost, s));
        tally("memcpyasync_pinned_d2h", DIR_D2H, pinned_n);
        CHECK(cudaMemcpyAsync(dev, registered, registered_n, cudaMemcpyHostToDevice, s));
        tally("memcpyasync_registered_h2d", DIR_H2D, registered_n);
        CHECK(cudaMemcpyAsync(registered, dev, registered_n, cudaMemcpyDeviceToHost, s));
        tally("memcpyasync_registered_d2h", DIR_D2H, registered_n);
        CHECK(cudaMemcpyAsync(dev, hostalloc, hostalloc_n, cudaMemcpyHostToDevice, s));
        tally("memcpyasync_hostalloc_h2d", DIR_H2D, hostalloc_n);
        CHECK(cudaMemcpyAsync(hostalloc, dev, hostalloc_n, cudaMemcpyDeviceToHost, s));
        tally("memcpyasync_hostalloc_d2h", DIR_D2H, hostalloc_n);
        CHECK(cudaMemcpyAsync(dev, pageable, 64 * KiB, cudaMemcpyHostToDevice, s));
        tally("memcpyasync_pageable_h2d", DIR_H2D, 64 * KiB);
        CHECK(cudaMemcpyAsync(pageable, dev, 64 * KiB, cudaMemcpyDeviceToHost, s));
        tally("memcpyasync_pageable_d2h", DIR_D2H, 64 * KiB);
        CHECK(cudaStreamSynchronize(s));

        // cudaMemcpyDefault: the direction comes from unified addressing
        CHECK(cudaMemcpy(dev, registered + 4096, 512 * KiB, cudaMemcpyDefault));
        tally("memcpy_default_registered_h2d", DIR_H2D, 512 * KiB);
        CHECK(cudaMemcpy(registered + 8192, dev, 512 * KiB, cudaMemcpyDefault));
        tally("memcpy_default_registered_d2h", DIR_D2H, 512 * KiB);
        CHECK(cudaMemcpy(dev, pageable, 256 * KiB, cudaMemcpyDefault));
        tally("memcpy_default_pageable_h2d", DIR_H2D, 256 * KiB);
        CHECK(cudaMemcpy(pageable, dev, 256 * KiB, cudaMemcpyDefault));
        tally("memcpy_default_pageable_d2h", DIR_D2H, 256 * KiB);
        CHECK(cudaMemcpyAsync(dev, pinned, pinned_n, cudaMemcpyDefault, s));
        tally("memcpyasync_default_pinned_h2d", DIR_H2D, pinned_n);
        CHECK(cudaMemcpyAsync(pinned, dev, pinned_n, cudaMemcpyDefault, s));
        tally("memcpyasync_default_pinned_d2h", DIR_D2H, pinned_n);
        CHECK(cudaStreamSynchronize(s));
    }
    CHECK(cudaDeviceSynchronize());

    // ---- tear-down (not copies)
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaHostUnregister(registered));
    free(registered);
    CHECK(cudaFreeHost(hostalloc));
    CHECK(cudaFreeHost(pinned));
    free(pageable);
    CHECK(cudaFree(dev));
    print_truth(name, false, false, NULL);
    return 0;
}
