/* A training-like loop through hotpin's C ABI, with libhotpin.so loaded by dlopen after the
 * start, as Python's ctypes loads it: two buffers alive together and copied once (cold), one
 * copied ten times (hot), then a fresh batch buffer each of 12 steps, copied once and freed
 * (a recycled group). Prints hotpin's counters as JSON. The CUDA runtime is the stand-in
 * (a test fixture) named by HOTPIN_CUDART. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotpin.h"

#define MIB (1u << 20)

static void *need(void *lib, const char *name) {
    void *symbol = dlsym(lib, name);
    if (!symbol) {
        fprintf(stderr, "batches: %s: %s\n", name, dlerror());
        exit(2);
    }
    return symbol;
}

int main(void) {
    void *hotpin = dlopen(getenv("HOTPIN_LIB"), RTLD_NOW);
    void *cudart = dlopen(getenv("HOTPIN_CUDART"), RTLD_NOW);
    if (!hotpin || !cudart) {
        fprintf(stderr, "batches: %s\n", dlerror());
        return 2;
    }
    void *(*hp_malloc)(size_t) = need(hotpin, "hotpin_malloc");
    int (*hp_free)(void *) = need(hotpin, "hotpin_free");
    int (*hp_stats)(struct hotpin_stats *) = need(hotpin, "hotpin_stats");
    int (*cuda_malloc)(void **, size_t) = need(cudart, "cudaMalloc");
    int (*cuda_memcpy)(void *, const void *, size_t, int) = need(cudart, "cudaMemcpy");
    enum { TO_DEVICE = 1, TO_HOST = 2 };

    void *dev;
    if (cuda_malloc(&dev, 8 * MIB) != 0) return 3;
    void *cold[2] = {hp_malloc(MIB), hp_malloc(MIB)};
    void *hot = hp_malloc(2 * MIB);
    for (int i = 0; i < 2; i++) {
        memset(cold[i], i, MIB);
        cuda_memcpy(dev, cold[i], MIB, TO_DEVICE);
    }
    for (int i = 0; i < 5; i++) {
        cuda_memcpy(dev, hot, 2 * MIB, TO_DEVICE);
        cuda_memcpy(hot, dev, 2 * MIB, TO_HOST);
    }
    for (int step = 0; step < 12; step++) {
        void *batch = hp_malloc(4 * MIB);
        memset(batch, step, 4 * MIB);
        if (cuda_memcpy(dev, batch, 4 * MIB, TO_DEVICE) != 0) return 4;
        hp_free(batch);
    }
    hp_free(cold[0]);
    hp_free(cold[1]);
    hp_free(hot);

    struct hotpin_stats s;
    hp_stats(&s);
    printf("{\"pinned_allocations\": %llu, \"pageable_allocations\": %llu, "
           "\"cache_hits\": %llu, \"peak_pinned_bytes\": %llu}\n",
           (unsigned long long)s.pinned_allocations, (unsigned long long)s.pageable_allocations,
           (unsigned long long)s.cache_hits, (unsigned long long)s.peak_pinned_bytes);
    return 0;
}
