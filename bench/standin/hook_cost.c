/* hook_cost: what hotpin's hooks cost a program it cannot help, on the CUDA stand-in (a test
 * fixture, not CUDA: a copy is a memcpy, so what is measured is the CPU time around each call,
 * not a transfer). No hotpin code. One phase a run, timed on its own, every copy checked:
 *   copies N: N copies of 16 KiB to the device and back (cudaMemcpy), from 64 buffers of
 *           16 KiB (malloc'd, below hotpin's floor), as many small tensors copied one by one;
 *   allocs N: N malloc/free pairs of 2 MiB (above the floor), each block written and read
 *           once, never copied: a program that allocates much and copies nothing of it;
 *   large N: one malloc'd 64 MiB buffer whose first 16 KiB are copied N times there and back
 *           (a large block copied in small pieces: every copy touches a block hotpin tracks);
 *   beside N: as copies, but a 2 MiB block (above the floor, never copied) is malloc'd first
 *           and the heap serves every block (mallopt: no mmap under 64 MiB), so that the small
 *           buffers share its 2 MiB region: untracked memory next to tracked memory, as
 *           PyTorch's small CPU tensors are;
 *   scalar N: as copies, after a pinned request of 4 bytes (cudaHostAlloc, kept to the end),
 *           as PyTorch's `.item()` makes through its caching host allocator;
 *   async N: as copies, but each copy is cudaMemcpyAsync on the legacy stream and then
 *           cudaStreamSynchronize, as PyTorch's `.cuda()` and `.cpu()` of a pageable tensor
 *           make it;
 *   async_scalar N: as async, after a pinned request of 4 bytes (as scalar): the copies
 *           PyTorch makes after its first `.item()`;
 *   questions N: N cudaPointerGetAttributes of the 64 buffers in turn (each must answer
 *           unregistered host memory), as `tensor.is_pinned()` asks.
 * Prints one JSON line: the phase, its calls (to the CUDA runtime or the allocator), seconds,
 * checks, mismatches.
 * Usage: hook_cost PHASE N */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
cudaError_t cudaMalloc(void **ptr, size_t size);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, void *stream);
cudaError_t cudaStreamSynchronize(void *stream);
struct cudaPointerAttributes {
    int type; /* cudaMemoryTypeUnregistered = 0 */
    int device;
    void *devicePointer;
    void *hostPointer;
};
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define SMALL (16 << 10)
#define BUFFERS 64

int main(int argc, char **argv) {
    const char *phase = argc > 1 ? argv[1] : "copies";
    long n_max = argc > 2 ? atol(argv[2]) : 100000;
    long checks = 0, mismatches = 0, calls = 0;
    unsigned char *host[BUFFERS], *back, *dev, *large = NULL, *tracked = NULL;
    int beside = strcmp(phase, "beside") == 0, scalar = strcmp(phase, "scalar") == 0;
    int async_scalar = strcmp(phase, "async_scalar") == 0;
    int async = strcmp(phase, "async") == 0 || async_scalar;
    unsigned char *pinned_scalar = NULL;
    if (scalar || async_scalar) {
        if (cudaHostAlloc((void **)&pinned_scalar, 4, 0) != 0) return 5;
        pinned_scalar[0] = 9;
    }
    if (beside) {
        mallopt(M_MMAP_THRESHOLD, 64 << 20);
        tracked = malloc(2 << 20);
        if (!tracked) return 4;
        memset(tracked, 5, 2 << 20);
    }
    back = malloc(SMALL);
    if (cudaMalloc((void **)&dev, 64 << 20) != 0 || !back) return 2;
    for (int i = 0; i < BUFFERS; i++) {
        host[i] = malloc(SMALL);
        memset(host[i], i + 1, SMALL);
    }
    if (strcmp(phase, "large") == 0) {
        large = malloc(64 << 20);
        if (!large) return 4;
        memset(large, 7, 64 << 20);
    }
    double t0 = now();
    if (strcmp(phase, "copies") == 0 || beside || scalar) {
        for (long n = 0; n < n_max; n++) {
            int i = n % BUFFERS;
            if (cudaMemcpy(dev, host[i], SMALL, cudaMemcpyHostToDevice) != 0) return 3;
            if (cudaMemcpy(back, dev, SMALL, cudaMemcpyDeviceToHost) != 0) return 3;
            checks++;
            mismatches += back[0] != (unsigned char)(i + 1) || back[SMALL - 1] != (unsigned char)(i + 1);
        }
        calls = 2 * n_max;
    } else if (async) {
        for (long n = 0; n < n_max; n++) {
            int i = n % BUFFERS;
            if (cudaMemcpyAsync(dev, host[i], SMALL, cudaMemcpyHostToDevice, 0) != 0 || cudaStreamSynchronize(0) != 0) return 3;
            if (cudaMemcpyAsync(back, dev, SMALL, cudaMemcpyDeviceToHost, 0) != 0 || cudaStreamSynchronize(0) != 0) return 3;
            checks++;
            mismatches += back[0] != (unsigned char)(i + 1) || back[SMALL - 1] != (unsigned char)(i + 1);
        }
        calls = 2 * n_max;
    } else if (strcmp(phase, "questions") == 0) {
        for (long n = 0; n < n_max; n++) {
            struct cudaPointerAttributes a;
            memset(&a, 0xff, sizeof a);
            if (cudaPointerGetAttributes(&a, host[n % BUFFERS]) != 0) return 3;
            checks++;
            mismatches += a.type != 0;
        }
        calls = n_max;
    } else if (strcmp(phase, "allocs") == 0) {
        uint64_t sum = 0, expected = 0;
        for (long n = 0; n < n_max; n++) {
            unsigned char *block = malloc(2 << 20);
            if (!block) return 4;
            block[0] = (unsigned char)n;
            block[(2 << 20) - 1] = (unsigned char)(n >> 8);
            sum += block[0] + block[(2 << 20) - 1];
            free(block);
            expected += (unsigned char)n + (unsigned char)(n >> 8);
        }
        calls = 2 * n_max;
        checks = 1;
        mismatches = sum != expected;
    } else if (strcmp(phase, "large") == 0) {
        for (long n = 0; n < n_max; n++) {
            large[0] = (unsigned char)n;
            if (cudaMemcpy(dev, large, SMALL, cudaMemcpyHostToDevice) != 0) return 3;
            if (cudaMemcpy(back, dev, SMALL, cudaMemcpyDeviceToHost) != 0) return 3;
            checks++;
            mismatches += back[0] != (unsigned char)n || back[SMALL - 1] != 7;
        }
        calls = 2 * n_max;
    } else {
        fprintf(stderr, "hook_cost: no phase %s (copies, async, async_scalar, allocs, large, beside, scalar)\n", phase);
        return 2;
    }
    double t1 = now();
    if (tracked) mismatches += tracked[0] != 5 || tracked[(2 << 20) - 1] != 5;
    if (pinned_scalar) mismatches += pinned_scalar[0] != 9;
    printf("{\"phase\": \"%s\", \"calls\": %ld, \"seconds\": %.6f, \"checks\": %ld, \"mismatches\": %ld}\n",
           phase, calls, t1 - t0, checks, mismatches);
    return mismatches != 0;
}
