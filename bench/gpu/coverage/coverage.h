// Shared by the coverage programs (cudart_copies.cu, shapes.cu, managed.cu): error checks, the
// pause between set-up and the measured phase, and the tally of copies that becomes the ground
// truth printed as the last stdout line.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_), \
            cudaGetErrorName(e_)); \
    exit(1); } } while (0)

// Between set-up and the measured phase: when HOTPIN_GO names a file, say "READY <pid>" on
// stderr and wait (10 ms polls, at most 120 s) until that file exists.
static void hotpin_gate(void) {
    const char *go = getenv("HOTPIN_GO");
    if (go == NULL || *go == '\0') return;
    fprintf(stderr, "READY %d\n", (int)getpid());
    fflush(stderr);
    for (int i = 0; i < 12000; i++) {
        if (access(go, F_OK) == 0) return;
        usleep(10000);
    }
    fprintf(stderr, "gate: %s did not appear within 120 s\n", go);
    exit(3);
}

enum Dir { DIR_H2D, DIR_D2H, DIR_D2D, DIR_PF_DEVICE, DIR_PF_HOST };

struct Kind {
    const char *name;
    Dir dir;
    unsigned long long count, bytes;
};

static Kind g_kinds[64];
static int g_nkinds;

// Counts one operation of `name` (a copy, or a prefetch) moving `bytes`.
static void tally(const char *name, Dir dir, unsigned long long bytes) {
    int i = 0;
    while (i < g_nkinds && strcmp(g_kinds[i].name, name) != 0) i++;
    if (i == g_nkinds) {
        if (g_nkinds == 64) { fprintf(stderr, "tally: too many kinds\n"); exit(1); }
        g_kinds[i].name = name;
        g_kinds[i].dir = dir;
        g_nkinds++;
    }
    g_kinds[i].count++;
    g_kinds[i].bytes += bytes;
}

static void totals(Dir dir, unsigned long long *count, unsigned long long *bytes) {
    *count = *bytes = 0;
    for (int i = 0; i < g_nkinds; i++)
        if (g_kinds[i].dir == dir) { *count += g_kinds[i].count; *bytes += g_kinds[i].bytes; }
}

// The ground truth, one JSON line on stdout. `with_d2d` and `with_prefetch` add those keys
// (as zeros when nothing of that kind ran); `extra` is a JSON fragment ("\"k\": v, ...") or NULL.
static void print_truth(const char *program, bool with_d2d, bool with_prefetch, const char *extra) {
    unsigned long long c, b;
    printf("{\"program\": \"%s\"", program);
    totals(DIR_H2D, &c, &b);
    printf(", \"h2d\": %llu, \"h2d_bytes\": %llu", c, b);
    totals(DIR_D2H, &c, &b);
    printf(", \"d2h\": %llu, \"d2h_bytes\": %llu", c, b);
    if (with_d2d) {
        totals(DIR_D2D, &c, &b);
        printf(", \"d2d\": %llu, \"d2d_bytes\": %llu", c, b);
    }
    if (with_prefetch) {
        totals(DIR_PF_DEVICE, &c, &b);
        printf(", \"prefetch_to_device\": %llu, \"prefetch_to_device_bytes\": %llu", c, b);
        totals(DIR_PF_HOST, &c, &b);
        printf(", \"prefetch_to_host\": %llu, \"prefetch_to_host_bytes\": %llu", c, b);
    }
    if (extra != NULL && *extra != '\0') printf(", %s", extra);
    printf(", \"by_kind\": {");
    for (int i = 0; i < g_nkinds; i++)
        printf("%s\"%s\": %llu", i ? ", " : "", g_kinds[i].name, g_kinds[i].count);
    printf("}, \"by_kind_bytes\": {");
    for (int i = 0; i < g_nkinds; i++)
        printf("%s\"%s\": %llu", i ? ", " : "", g_kinds[i].name, g_kinds[i].bytes);
    printf("}, \"cudart_version\": %d}\n", CUDART_VERSION);
    fflush(stdout);
}
