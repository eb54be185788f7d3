// A long-lived loop: every step allocates fresh host buffers, copies them to the device and
// back, and frees them, as a program that makes a new host tensor per step does. A pinned
// buffer from cudaMallocHost and a pageable one from malloc (glibc's heap or a mapping) each
// step. For `tracer daemon --max-allocations`: the history folds the freed buffers and must
// still count every copy. Prints the ground truth as its last stdout line.
// Usage: steps [steps]   (default 20000)
#include "coverage.h"

static const size_t KiB = 1024;

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 20000;
    const size_t pinned_n = 64 * KiB, pageable_n = 256 * KiB;
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0));
    char *dev = NULL;
    CHECK(cudaMalloc((void **)&dev, pageable_n));
    for (int i = 0; i < steps; i++) {
        char *pinned = NULL;
        CHECK(cudaMallocHost((void **)&pinned, pinned_n));
        memset(pinned, i & 0xff, pinned_n);
        CHECK(cudaMemcpy(dev, pinned, pinned_n, cudaMemcpyHostToDevice));
        tally("step_pinned_h2d", DIR_H2D, pinned_n);
        CHECK(cudaMemcpy(pinned, dev, pinned_n, cudaMemcpyDeviceToHost));
        tally("step_pinned_d2h", DIR_D2H, pinned_n);
        CHECK(cudaFreeHost(pinned));

        char *pageable = (char *)malloc(pageable_n);
        if (pageable == NULL) { fprintf(stderr, "malloc failed\n"); return 1; }
        memset(pageable, i & 0xff, pageable_n);
        CHECK(cudaMemcpy(dev, pageable, pageable_n, cudaMemcpyHostToDevice));
        tally("step_pageable_h2d", DIR_H2D, pageable_n);
        CHECK(cudaMemcpy(pageable, dev, pageable_n, cudaMemcpyDeviceToHost));
        tally("step_pageable_d2h", DIR_D2H, pageable_n);
        free(pageable);
    }
    CHECK(cudaFree(dev));
    char extra[64];
    snprintf(extra, sizeof extra, "\"steps\": %d", steps);
    print_truth("steps", false, false, extra);
    return 0;
}
