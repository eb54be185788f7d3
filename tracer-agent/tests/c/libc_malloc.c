/* libc's allocator under the tracer's --libc-malloc probes (floor 1 MiB in the test): four
 * allocations at or above the floor by different functions, one below it, a realloc that
 * grows one, a copy from each, and every block freed. CUDA is the stand-in (a test fixture)
 * named by HOTPIN_CUDART. Prints the addresses as JSON. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1ul << 20)

int main(void) {
    void *cudart = dlopen(getenv("HOTPIN_CUDART"), RTLD_NOW);
    if (!cudart) return 2;
    int (*cuda_malloc)(void **, size_t) = (int (*)(void **, size_t))dlsym(cudart, "cudaMalloc");
    int (*cuda_memcpy)(void *, const void *, size_t, int) =
        (int (*)(void *, const void *, size_t, int))dlsym(cudart, "cudaMemcpy");
    void *dev;
    if (!cuda_malloc || !cuda_memcpy || cuda_malloc(&dev, MIB) != 0) return 3;

    char *big = malloc(2 * MIB);
    char *zeroed = calloc(4, 512 * 1024);
    void *aligned = NULL;
    if (posix_memalign(&aligned, 4096, 3 * MIB) != 0) return 4;
    char *page_aligned = memalign(4096, MIB);
    char *small = malloc(100);
    if (!big || !zeroed || !page_aligned || !small) return 5;
    memset(small, 1, 100);
    char *grown = realloc(big, 4 * MIB);
    if (!grown) return 6;
    void *blocks[] = {grown, zeroed, aligned, page_aligned, small};
    for (int i = 0; i < 5; i++) cuda_memcpy(dev, blocks[i], 64, 1);
    printf("{\"big\": %lu, \"grown\": %lu, \"zeroed\": %lu, \"aligned\": %lu, "
           "\"page_aligned\": %lu, \"small\": %lu}\n",
           (unsigned long)big, (unsigned long)grown, (unsigned long)zeroed,
           (unsigned long)aligned, (unsigned long)page_aligned, (unsigned long)small);
    fflush(stdout);
    for (int i = 0; i < 5; i++) free(blocks[i]);
    return 0;
}
