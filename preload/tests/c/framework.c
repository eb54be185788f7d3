/* framework: a program whose copies go through a framework that asks before it copies
 * (framework_module.c, loaded with dlopen as Python loads CuPy's module; the CUDA stand-in,
 * a test fixture, not CUDA). No hotpin code.
 *   framework MODULE: three malloc'd 8 MiB arrays (one call site) handed to the framework's
 *   copy to the device at each of 60 steps, each overwritten as soon as the framework returns
 *   (pageable memory may be), each step's device copy checked (its first and last 64 KiB).
 *   The program asks CUDA about each array too, and counts an answer of "pinned" as a
 *   mismatch: it allocated them with malloc. From step 30 a fourth 8 MiB array is copied to
 *   the device by the program itself 16 times a step, far more often than the three: under
 *   a budget that holds only three, it would displace one of them.
 * Prints one JSON line: checks, mismatches, details (the framework's direct, staged and
 * flipped answers). */
#include <dlfcn.h>

#include "transparency/check.h"

#define SIZE (8 * MIB)
#define EDGE (64 * 1024)
#define STEPS 60
#define ARRAYS 3
#define HOTTER 16

typedef int (*to_device_fn)(void *, const void *, size_t);
typedef void (*forget_fn)(const void *);
typedef int (*synchronize_fn)(void);
typedef void (*counts_fn)(long[4]);

static char *array(void) {
    char *p = (char *)malloc(SIZE);
    if (!p) exit(2);
    return p;
}

static char *other_array(void) {
    char *p = (char *)malloc(SIZE);
    if (!p) exit(2);
    return p;
}

/* The first and last EDGE bytes of `device` hold the data for (step, tag). */
static size_t device_wrong(const char *device, unsigned step, unsigned tag) {
    static uint64_t expect[EDGE / 8], got[EDGE / 8];
    size_t wrong = 0;
    size_t offsets[2] = {0, SIZE - EDGE};
    for (int k = 0; k < 2; k++) {
        CUDA_OK(cudaMemcpy(got, device + offsets[k], EDGE, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < EDGE / 8; i++) expect[i] = pattern_word(offsets[k] / 8 + i, step, tag);
        for (size_t i = 0; i < EDGE / 8; i++) wrong += got[i] != expect[i];
    }
    return wrong;
}

int main(int argc, char **argv) {
    program_name = "framework";
    if (argc < 2) return 2;
    void *module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!module) {
        fprintf(stderr, "framework: %s\n", dlerror());
        return 2;
    }
    to_device_fn to_device = (to_device_fn)dlsym(module, "framework_to_device");
    forget_fn forget = (forget_fn)dlsym(module, "framework_forget");
    synchronize_fn synchronize = (synchronize_fn)dlsym(module, "framework_synchronize");
    counts_fn counts = (counts_fn)dlsym(module, "framework_counts");
    if (!to_device || !forget || !synchronize || !counts) return 2;

    char *host[ARRAYS], *device[ARRAYS + 1];
    for (int i = 0; i < ARRAYS; i++) host[i] = array();
    for (int i = 0; i <= ARRAYS; i++) CUDA_OK(cudaMalloc((void **)&device[i], SIZE));
    char *busy = other_array();
    struct tally copies, answers, own;
    tally_init(&copies, "framework_copies");
    tally_init(&answers, "program_asked_pageable");
    tally_init(&own, "program_copies");

    for (unsigned step = 0; step < STEPS; step++) {
        for (int i = 0; i < ARRAYS; i++) {
            fill(host[i], SIZE, step, (unsigned)i);
            if (to_device(device[i], host[i], SIZE) != 0) cuda_failed("framework_to_device", -1);
            memset(host[i], 0xEE, SIZE); /* at once: pageable memory may be reused */
            struct cudaPointerAttributes attributes;
            memset(&attributes, 0, sizeof attributes);
            CUDA_OK(cudaPointerGetAttributes(&attributes, host[i]));
            tally_check(&answers, step, attributes.type == cudaMemoryTypeHost);
        }
        if (synchronize() != 0) cuda_failed("framework_synchronize", -1);
        for (int i = 0; i < ARRAYS; i++) tally_check(&copies, step, device_wrong(device[i], step, (unsigned)i));
        if (step >= STEPS / 2) {
            fill(busy, SIZE, step, 7);
            for (unsigned k = 0; k < HOTTER; k++) {
                CUDA_OK(cudaMemcpy(device[ARRAYS], busy, SIZE, cudaMemcpyHostToDevice));
            }
            tally_check(&own, step, device_wrong(device[ARRAYS], step, 7));
        }
    }
    long c[4];
    counts(c);
    for (int i = 0; i < ARRAYS; i++) {
        forget(host[i]);
        free(host[i]);
    }
    free(busy);
    tally_detail(&copies);
    tally_detail(&answers);
    tally_detail(&own);
    detail("framework", "{\"direct\": %ld, \"staged\": %ld, \"flipped\": %ld, \"failed\": %ld}",
           c[0], c[1], c[2], c[3]);
    if (c[2] || c[3]) mismatches++;
    CUDA_OK(cudaGetLastError());
    return report();
}
