/* An allocation three calls deep, compiled with frame pointers: main -> outer -> inner ->
 * cudaMallocHost, so the tracer can walk the user stack past the call site. CUDA is the
 * stand-in (a test fixture) named by HOTPIN_CUDART. Prints the pointer as JSON. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static int (*malloc_host)(void **, size_t);

__attribute__((noinline)) void *inner(size_t size) {
    void *ptr = NULL;
    if (malloc_host(&ptr, size) != 0) exit(3);
    return ptr;
}

__attribute__((noinline)) void *outer(size_t size) {
    void *ptr = inner(size);
    __asm__ volatile("" ::: "memory"); /* keeps the call from becoming a tail call */
    return ptr;
}

int main(void) {
    void *cudart = dlopen(getenv("HOTPIN_CUDART"), RTLD_NOW);
    if (!cudart) return 2;
    malloc_host = (int (*)(void **, size_t))dlsym(cudart, "cudaMallocHost");
    if (!malloc_host) return 2;
    void *ptr = outer(1 << 20);
    printf("{\"ptr\": %lu}\n", (unsigned long)ptr);
    return 0;
}
