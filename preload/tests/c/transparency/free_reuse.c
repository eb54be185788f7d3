/* free_reuse: an asynchronous copy from pageable memory to the device returns once the source
 * is staged, so the program may free the source at once, and whatever the allocator hands out
 * next (perhaps the same block) is the program's to write. Each step fills a fresh source,
 * starts the copy, frees the source, allocates the same size again and fills that at once,
 * then synchronises and checks the device. Variants: malloc/free, realloc to twice the size
 * (the moved or grown block written at once), posix_memalign/free. */
#ifndef _POSIX_C_SOURCE /* nvcc -x cu has set it already */
#define _POSIX_C_SOURCE 200112L
#endif
#include "cuda_decls.h"
#include "check.h"

#define SIZE (4 * MIB)
#define STEPS 8

enum { MALLOC_FREE, REALLOC_GROW, MEMALIGN_FREE, VARIANTS };
static const char *const names[VARIANTS] = {"malloc_free", "realloc_grow",
                                             "posix_memalign_free"};

static void *aligned(size_t size) {
    void *p = NULL;
    return posix_memalign(&p, 4096, size) == 0 ? p : NULL;
}

int main(void) {
    program_name = "free_reuse";
    cudaStream_t stream;
    void *device;
    CUDA_OK(cudaStreamCreate(&stream));
    CUDA_OK(cudaMalloc(&device, SIZE));
    char *check = (char *)malloc(SIZE);
    if (!check) return 2;
    long same_block = 0; /* how often the next allocation was the block just freed */

    struct tally tallies[VARIANTS];
    for (int v = 0; v < VARIANTS; v++) tally_init(&tallies[v], names[v]);
    for (int v = 0; v < VARIANTS; v++) {
        for (unsigned step = 0; step < STEPS; step++) {
            char *source = (char *)(v == MEMALIGN_FREE ? aligned(SIZE) : malloc(SIZE));
            if (!source) return 2;
            fill(source, SIZE, step, (unsigned)v);
            STALL(stream);
            CUDA_OK(cudaMemcpyAsync(device, source, SIZE, cudaMemcpyHostToDevice, stream));
            /* Allowed: the source is pageable, so the copy has taken what it needs. */
            char *next;
            size_t next_size = SIZE;
            if (v == REALLOC_GROW) {
                next_size = 2 * SIZE;
                next = (char *)realloc(source, next_size);
                if (!next) return 2;
            } else {
                uintptr_t old = (uintptr_t)source;
                free(source);
                next = (char *)(v == MEMALIGN_FREE ? aligned(SIZE) : malloc(SIZE));
                if (!next) return 2;
                same_block += (uintptr_t)next == old;
            }
            memset(next, 0xEE, next_size);
            CUDA_OK(cudaStreamSynchronize(stream));
            CUDA_OK(cudaMemcpy(check, device, SIZE, cudaMemcpyDeviceToHost));
            tally_check(&tallies[v], step, count_wrong(check, SIZE, step, (unsigned)v));
            free(next);
        }
        tally_detail(&tallies[v]);
    }
    detail("next_allocation_was_freed_block", "%ld", same_block);
    CUDA_OK(cudaStreamDestroy(stream));
    CUDA_OK(cudaFree(device));
    free(check);
    return report();
}
