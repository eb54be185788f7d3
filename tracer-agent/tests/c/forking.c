/* A program that forks, for the daemon's tests, with the CUDA stand-in (a test fixture, not
 * CUDA): the parent copies N times host to device, a child it forks copies N times device to
 * host and exits, then the parent copies N times host to device again.
 * Usage: forking RUNTIME N. Prints its own counts as JSON. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*malloc_fn)(void **, size_t);

enum { BYTES = 4096, H2D = 1, D2H = 2 };

int main(int argc, char **argv) {
    if (argc < 3) return 1;
    int n = atoi(argv[2]);
    void *rt = dlopen(argv[1], RTLD_NOW);
    if (!rt) return 10;
    memcpy_fn copy = (memcpy_fn)dlsym(rt, "cudaMemcpy");
    malloc_fn alloc = (malloc_fn)dlsym(rt, "cudaMalloc");
    void *device = NULL;
    char *host = malloc(BYTES);
    if (!copy || !alloc || !host || alloc(&device, BYTES) != 0) return 11;
    for (int i = 0; i < n; i++)
        if (copy(device, host, BYTES, H2D) != 0) return 12;
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < n; i++)
            if (copy(host, device, BYTES, D2H) != 0) _exit(13);
        _exit(0);
    }
    int status;
    if (child < 0 || waitpid(child, &status, 0) < 0 || status != 0) return 2;
    for (int i = 0; i < n; i++)
        if (copy(device, host, BYTES, H2D) != 0) return 14;
    printf("{\"h2d\": %d, \"d2h\": %d, \"h2d_bytes\": %d, \"d2h_bytes\": %d}\n", 2 * n, n,
           2 * n * BYTES, n * BYTES);
    return 0;
}
