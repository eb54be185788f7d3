/* Allocates everything it copies before a tracer attaches, then copies: a program traced with
 * `tracer --pid` after its set-up, through the CUDA stand-in (a test fixture, not CUDA).
 * Usage: pre_attach RUNTIME GOFILE. Prints READY once set up, waits for GOFILE to exist, then
 * makes 10 copies to the GPU from a large malloc block (its own mapping), 10 from a small one
 * (in the heap) and 5 back into the large one. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*fn)();

int main(int argc, char **argv) {
    if (argc < 3) return 1;
    void *rt = dlopen(argv[1], RTLD_NOW);
    if (!rt) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    fn cuda_malloc = (fn)dlsym(rt, "cudaMalloc"), cuda_memcpy = (fn)dlsym(rt, "cudaMemcpy");
    if (!cuda_malloc || !cuda_memcpy) return 1;
    size_t large = 8 << 20, small = 16 << 10;
    char *big = malloc(large), *little = malloc(small);
    void *device;
    if (!big || !little || cuda_malloc(&device, large)) return 2;
    memset(big, 1, large);
    memset(little, 2, small);
    printf("READY\n");
    fflush(stdout);
    for (int i = 0; i < 6000 && access(argv[2], F_OK) != 0; i++) usleep(10000);
    for (int i = 0; i < 10; i++)
        if (cuda_memcpy(device, big + i * 4096, (size_t)(1 << 20), 1)) return 3;
    for (int i = 0; i < 10; i++)
        if (cuda_memcpy(device, little, (size_t)4096, 1)) return 3;
    for (int i = 0; i < 5; i++)
        if (cuda_memcpy(big, device, (size_t)(1 << 20), 2)) return 3;
    return 0;
}
