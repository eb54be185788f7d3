/* 8 threads, each making N cudaMemcpy calls of 4 bytes through the CUDA stand-in (a test
 * fixture, not CUDA). Usage: threads RUNTIME DRIVER N. Prints the seconds the calls took. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*malloc_fn)(void **, size_t);
static memcpy_fn cuda_memcpy;
static long calls;
static void *device;

static void *work(void *arg) {
    char host[4] = {1, 2, 3, 4};
    (void)arg;
    for (long i = 0; i < calls; i++)
        if (cuda_memcpy(device, host, sizeof host, 1) != 0) exit(3);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) return 1;
    if (!dlopen(argv[2], RTLD_NOW)) return 1;
    void *rt = dlopen(argv[1], RTLD_NOW);
    if (!rt) return 1;
    cuda_memcpy = (memcpy_fn)dlsym(rt, "cudaMemcpy");
    malloc_fn cuda_malloc = (malloc_fn)dlsym(rt, "cudaMalloc");
    calls = atol(argv[3]);
    if (!cuda_memcpy || !cuda_malloc || cuda_malloc(&device, 4096) != 0) return 2;
    pthread_t threads[8];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int t = 0; t < 8; t++) pthread_create(&threads[t], NULL, work, NULL);
    for (int t = 0; t < 8; t++) pthread_join(threads[t], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
