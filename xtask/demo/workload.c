/* The demo's workload: an unmodified CUDA program (no hotpin code) with memory of every kind
 * hotpin must tell apart, checking every copy it makes. Built by `cargo xtask demo` against
 * the real CUDA runtime where there is a GPU, else against the CUDA stand-in (a test fixture,
 * not CUDA).
 *   hot:    4 malloc'd buffers of 8 MiB, each copied to the device and back every step;
 *   result: a fresh 8 MiB malloc'd buffer every step, copied into once, then freed;
 *   cold:   4 malloc'd buffers of 8 MiB, each copied to the device once;
 *   idle:   a 64 MiB malloc'd buffer filled on the CPU, never copied;
 *   small:  a 256 KiB buffer copied every step (below hotpin's 1 MiB floor);
 *   wasted: a 32 MiB cudaHostAlloc'd buffer filled on the CPU, never copied.
 * Usage: workload [steps] (default 40). Prints one JSON line: checks and mismatches (every
 * byte of every copy's destination), copies and bytes by direction, and `seconds`. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../preload/tests/c/transparency/cuda_decls.h"
#include "../../preload/tests/c/transparency/check.h"

#define HOT 4
#define COLD 4
#define BUFFER (8 * MIB)

static long h2d, d2h, h2d_bytes, d2h_bytes;

static void to_device(void *device, const void *host, size_t size, cudaStream_t stream) {
    CUDA_OK(cudaMemcpyAsync(device, host, size, cudaMemcpyHostToDevice, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    h2d++, h2d_bytes += (long)size;
}

static void to_host(void *host, const void *device, size_t size, cudaStream_t stream) {
    CUDA_OK(cudaMemcpyAsync(host, device, size, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    d2h++, d2h_bytes += (long)size;
}

int main(int argc, char **argv) {
    unsigned steps = argc > 1 ? (unsigned)atoi(argv[1]) : 40;
    program_name = "workload";
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    void *device;
    CUDA_OK(cudaMalloc(&device, BUFFER));
    struct timespec began, ended;
    clock_gettime(CLOCK_MONOTONIC, &began);
    struct tally t;
    tally_init(&t, "workload");
    char *hot[HOT], *cold[COLD];
    for (int i = 0; i < HOT; i++) hot[i] = malloc(BUFFER);
    for (int i = 0; i < COLD; i++) cold[i] = malloc(BUFFER);
    char *idle = malloc(64 * MIB), *small = malloc(256 * 1024), *back = malloc(BUFFER), *wasted;
    CUDA_OK(cudaHostAlloc((void **)&wasted, 32 * MIB, 0));
    memset(idle, 1, 64 * MIB);
    memset(wasted, 2, 32 * MIB);
    for (int i = 0; i < COLD; i++) {
        fill(cold[i], BUFFER, 0, 100 + (unsigned)i);
        to_device(device, cold[i], BUFFER, stream);
        to_host(back, device, BUFFER, stream);
        tally_check(&t, 0, count_wrong(back, BUFFER, 0, 100 + (unsigned)i));
    }
    for (unsigned step = 0; step < steps; step++) {
        for (int i = 0; i < HOT; i++) {
            fill(hot[i], BUFFER, step, (unsigned)i);
            to_device(device, hot[i], BUFFER, stream);
            memset(hot[i], 0, BUFFER);
            to_host(hot[i], device, BUFFER, stream);
            tally_check(&t, step, count_wrong(hot[i], BUFFER, step, (unsigned)i));
        }
        char *result = malloc(BUFFER);
        to_host(result, device, BUFFER, stream);
        tally_check(&t, step, count_wrong(result, BUFFER, step, HOT - 1));
        free(result);
        fill(small, 256 * 1024, step, 50);
        to_device(device, small, 256 * 1024, stream);
        to_host(back, device, 256 * 1024, stream);
        tally_check(&t, step, count_wrong(back, 256 * 1024, step, 50));
    }
    clock_gettime(CLOCK_MONOTONIC, &ended);
    tally_detail(&t);
    detail("steps", "%u", steps);
    detail("h2d", "%ld", h2d);
    detail("d2h", "%ld", d2h);
    detail("h2d_bytes", "%ld", h2d_bytes);
    detail("d2h_bytes", "%ld", d2h_bytes);
    detail("seconds", "%.4f",
           (double)(ended.tv_sec - began.tv_sec) + (double)(ended.tv_nsec - began.tv_nsec) / 1e9);
    int error = cudaGetLastError();
    detail("last_error", "%d", error);
    checks++;
    if (error != 0) mismatches++;
    for (int i = 0; i < HOT; i++) free(hot[i]);
    for (int i = 0; i < COLD; i++) free(cold[i]);
    free(idle), free(small), free(back);
    CUDA_OK(cudaFreeHost(wasted));
    CUDA_OK(cudaFree(device));
    return report();
}
