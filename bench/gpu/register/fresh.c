/* What registering a block costs by how its pages came in (#43: a history's pins at birth
 * register untouched memory). For each size (MiB, argv) and ROUNDS rounds, times
 * cuMemHostRegister of a block that is:
 *   fresh     malloc'd, untouched: the registration faults in every page;
 *   written   malloc'd and memset first: the registration finds its pages in;
 *   populated malloc'd, then madvise(MADV_POPULATE_WRITE) (Linux 5.14) before registering;
 *   huge      2 MiB aligned mmap with MADV_HUGEPAGE, then MADV_POPULATE_WRITE;
 *   huge-fresh 2 MiB aligned mmap with MADV_HUGEPAGE, untouched.
 * The time of the memset or madvise is printed apart (prep_ms), and the register and
 * unregister (reg_ms, unreg_ms). One JSON line a measurement. Driver API through dlopen, so
 * it builds without CUDA's headers: `cc -O2 -o fresh fresh.c -ldl`. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

typedef int (*init_t)(unsigned);
typedef int (*dev_t_)(int *, int);
typedef int (*retain_t)(void **, int);
typedef int (*setcur_t)(void *);
typedef int (*reg_t)(void *, size_t, unsigned);
typedef int (*unreg_t)(void *);

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) { fprintf(stderr, "no libcuda.so.1: %s\n", dlerror()); return 2; }
    init_t init = (init_t)dlsym(cuda, "cuInit");
    dev_t_ get = (dev_t_)dlsym(cuda, "cuDeviceGet");
    retain_t retain = (retain_t)dlsym(cuda, "cuDevicePrimaryCtxRetain");
    setcur_t setcur = (setcur_t)dlsym(cuda, "cuCtxSetCurrent");
    reg_t reg = (reg_t)dlsym(cuda, "cuMemHostRegister_v2");
    unreg_t unreg = (unreg_t)dlsym(cuda, "cuMemHostUnregister");
    int dev; void *ctx;
    if (init(0) || get(&dev, 0) || retain(&ctx, dev) || setcur(ctx)) {
        fprintf(stderr, "no CUDA context\n"); return 2;
    }
    int rounds = getenv("ROUNDS") ? atoi(getenv("ROUNDS")) : 8;
    const char *kinds[] = {"fresh", "written", "populated", "huge", "huge-fresh"};
    for (int a = 1; a < argc; a++) {
        size_t size = (size_t)atol(argv[a]) << 20;
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < 5; k++) {
                char *p, *m = NULL;
                size_t span = size + (2 << 20);
                int mapped = k >= 3;
                if (mapped) {
                    m = mmap(NULL, span, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                    p = (char *)(((size_t)m + (2 << 20) - 1) & ~(size_t)((2 << 20) - 1));
                    madvise(p, size, MADV_HUGEPAGE);
                } else {
                    p = malloc(size);
                }
                double t0 = now_ms();
                int prep = 0;
                if (k == 1) memset(p, 1, size);
                if (k == 2 || k == 3) prep = madvise(p, size, MADV_POPULATE_WRITE);
                double t1 = now_ms();
                int rc = reg(p, size, 0);
                double t2 = now_ms();
                int rc2 = unreg(p);
                double t3 = now_ms();
                printf("{\"kind\":\"%s\",\"mib\":%zu,\"round\":%d,\"prep_ms\":%.3f,\"reg_ms\":%.3f,"
                       "\"unreg_ms\":%.3f,\"prep_rc\":%d,\"rc\":%d,\"rc2\":%d}\n",
                       kinds[k], size >> 20, r, t1 - t0, t2 - t1, t3 - t2, prep, rc, rc2);
                if (mapped) munmap(m, span); else free(p);
            }
    }
    return 0;
}
