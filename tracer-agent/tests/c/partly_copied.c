/* A pinned block of which copies use one slice: 128 MiB from cudaHostAlloc, of which the
 * 16 MiB at 64 MiB is copied to the GPU 20 times, as a program that pins a whole dataset and
 * copies one batch of it does (through the CUDA stand-in, a test fixture, not CUDA).
 * Usage: partly_copied RUNTIME */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*fn)();

int main(int argc, char **argv) {
    if (argc < 2) return 1;
    void *rt = dlopen(argv[1], RTLD_NOW);
    if (!rt) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    fn host_alloc = (fn)dlsym(rt, "cudaHostAlloc"), cuda_malloc = (fn)dlsym(rt, "cudaMalloc"),
       cuda_memcpy = (fn)dlsym(rt, "cudaMemcpy");
    if (!host_alloc || !cuda_malloc || !cuda_memcpy) return 1;
    size_t size = (size_t)128 << 20, slice = (size_t)16 << 20, at = (size_t)64 << 20;
    char *dataset;
    void *device;
    if (host_alloc(&dataset, size, 0u) || cuda_malloc(&device, slice)) return 2;
    memset(dataset, 1, size);
    for (int i = 0; i < 20; i++)
        if (cuda_memcpy(device, dataset + at, slice, 1)) return 3;
    return 0;
}
