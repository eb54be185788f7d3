/* What the interposer adds to an asynchronous copy (cuMemcpyHtoDAsync_v2) that touches no
 * block hotpin changed, while one block is promoted (so the interval index is looked up):
 * N calls, timed, against null_cuda.c's do-nothing driver (NOT CUDA). Also the same for a
 * copy from the promoted block (looked up, then waited for: the null driver's sync returns at
 * once). Run with and without LD_PRELOAD=libhotpin_preload.so HOTPIN_MODE=pin-all
 * (copy_hook.sh does, interleaved); prints ns per copy for both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cudaHostRegister(void *p, size_t n, unsigned flags);
int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, void *stream);

static double per_call(long n, const void *src) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++)
        if (cuMemcpyHtoDAsync_v2(0x1000, src, 4096, NULL) != 0) exit(2);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 5000000;
    /* 4 MiB: above the 1 MiB floor, so pin-all promotes it. */
    char *promoted = malloc(4 << 20);
    memset(promoted, 1, 4 << 20);
    /* Copied from: memory no one registered (a static buffer, not from malloc). */
    static char untouched[4096];
    double other = per_call(n, untouched);
    double hidden = per_call(n, promoted);
    printf("%.2f %.2f\n", other, hidden);
    free(promoted);
    return 0;
}
