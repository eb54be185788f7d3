/* A CUDA program with no hotpin code in it, linked with the CUDA runtime as programs are (here
 * the CUDA stand-in, a test fixture, not CUDA). It allocates:
 *   - pinned (cudaHostAlloc): 1 hot buffer copied 20 times each way, 3 cold ones never copied,
 *     1 cold one with cudaHostAllocMapped (must stay pinned);
 *   - pageable (malloc): 1 hot buffer copied 20 times each way, 3 cold ones never copied;
 *   - 8 threads, each with a malloc'd 2 MiB buffer copied 10 times to the GPU;
 *   - a forked child with its own hot malloc'd buffer.
 * Prints its ground truth as JSON: copies and bytes per direction. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int cudaMalloc(void **p, size_t size);
int cudaHostAlloc(void **p, size_t size, unsigned flags);
int cudaFreeHost(void *p);
int cudaMemcpy(void *dst, const void *src, size_t count, int kind);

#define MIB (1024 * 1024)
#define H2D 1
#define D2H 2

static void *device;
static long h2d, d2h, h2d_bytes, d2h_bytes;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void copy(void *host, size_t size, int kind) {
    void *dst = kind == H2D ? device : host;
    const void *src = kind == H2D ? host : device;
    if (cudaMemcpy(dst, src, size, kind) != 0) exit(3);
    pthread_mutex_lock(&lock);
    if (kind == H2D) { h2d++; h2d_bytes += size; } else { d2h++; d2h_bytes += size; }
    pthread_mutex_unlock(&lock);
}

static void round_trips(void *host, size_t size, int n) {
    for (int i = 0; i < n; i++) { copy(host, size, H2D); copy(host, size, D2H); }
}

/* One call site for every thread's buffer. */
static void *worker(void *arg) {
    (void)arg;
    char *buffer = malloc(2 * MIB);
    memset(buffer, 1, 2 * MIB);
    for (int i = 0; i < 10; i++) copy(buffer, 2 * MIB, H2D);
    free(buffer);
    return NULL;
}

int main(void) {
    if (cudaMalloc(&device, 16 * MIB) != 0) return 2;
    void *hot_pinned, *cold_pinned[3], *mapped;
    if (cudaHostAlloc(&hot_pinned, 4 * MIB, 0) != 0) return 2;
    for (int i = 0; i < 3; i++)
        if (cudaHostAlloc(&cold_pinned[i], 4 * MIB, 0) != 0) return 2;
    if (cudaHostAlloc(&mapped, 4 * MIB, 2 /* cudaHostAllocMapped */) != 0) return 2;
    char *hot_pageable = malloc(8 * MIB);
    char *cold_pageable[3];
    for (int i = 0; i < 3; i++) {
        cold_pageable[i] = malloc(8 * MIB);
        memset(cold_pageable[i], 2, 8 * MIB);
    }
    memset(hot_pageable, 3, 8 * MIB);
    memset(hot_pinned, 4, 4 * MIB);
    round_trips(hot_pinned, 4 * MIB, 20);
    round_trips(hot_pageable, 8 * MIB, 20);

    pthread_t threads[8];
    for (int i = 0; i < 8; i++) pthread_create(&threads[i], NULL, worker, NULL);
    for (int i = 0; i < 8; i++) pthread_join(threads[i], NULL);

    pid_t child = fork();
    if (child == 0) {
        char *own = malloc(8 * MIB);
        memset(own, 5, 8 * MIB);
        round_trips(own, 8 * MIB, 5);
        free(own);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;

    free(hot_pageable);
    for (int i = 0; i < 3; i++) free(cold_pageable[i]);
    cudaFreeHost(hot_pinned);
    for (int i = 0; i < 3; i++) cudaFreeHost(cold_pinned[i]);
    cudaFreeHost(mapped);
    /* The parent's copies; the child made 5 round trips of 8 MiB besides. */
    printf("{\"h2d\": %ld, \"d2h\": %ld, \"h2d_bytes\": %ld, \"d2h_bytes\": %ld}\n", h2d, d2h,
           h2d_bytes, d2h_bytes);
    return 0;
}
