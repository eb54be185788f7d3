/* What the interposer adds to a libc allocation below its size floor: N malloc/free pairs of
 * SIZE bytes (default 64), timed. Run it with and without LD_PRELOAD=libhotpin_preload.so
 * (floor.sh does, interleaved); prints ns per pair. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20000000;
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 64;
    struct timespec a, b;
    volatile char sink = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        char *p = malloc(size);
        p[0] = (char)i;
        sink += p[0];
        free(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
    printf("%.2f\n", ns);
    return sink == 42 ? 1 : 0;
}
