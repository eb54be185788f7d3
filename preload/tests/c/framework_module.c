/* framework_module: a framework's copy path, as CuPy's `cp.asarray` takes it (the CUDA
 * stand-in, a test fixture, not CUDA). No hotpin code. Built as a shared library; the test
 * installs it under a CuPy module's path (cupy_backends/cuda/api/runtime.cpython-...so) and
 * under another. Before each copy to the device it asks CUDA whether the host memory is
 * pinned: if so it queues the copy straight from that memory on its stream and returns (as
 * CuPy does for pinned memory); if not it first copies the memory on the CPU into a pinned
 * staging buffer of its own and copies that, as CuPy's pool does: a portable cudaHostAlloc
 * of the array's size, asked for at the first need and kept. It remembers each pointer it was told is pinned,
 * and counts an answer that changed to "pageable" while the program still holds the memory
 * (a framework may go on using memory as pinned once told it is). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transparency/cuda_decls.h"

#define MAX_TOLD 16

static const void *told[MAX_TOLD];
static long direct, staged, flipped, failed;
static void *staging;
static size_t staging_size;
static cudaStream_t stream;

static int is_pinned(const void *host) {
    struct cudaPointerAttributes attributes;
    memset(&attributes, 0, sizeof attributes);
    if (cudaPointerGetAttributes(&attributes, host) != cudaSuccess) return 0;
    return attributes.type == cudaMemoryTypeHost;
}

/* Copies `size` bytes at `host` to `device`, as the framework's asarray would. */
int framework_to_device(void *device, const void *host, size_t size) {
    if (!stream && cudaStreamCreate(&stream) != cudaSuccess) return ++failed, -1;
    int pinned = is_pinned(host);
    int slot = -1;
    for (int i = 0; i < MAX_TOLD; i++) {
        if (told[i] == host) slot = i;
    }
    if (slot >= 0 && !pinned) flipped++;
    if (slot < 0 && pinned) {
        for (int i = 0; i < MAX_TOLD; i++) {
            if (!told[i]) { told[i] = host; break; }
        }
    }
    if (pinned) {
        direct++;
        /* Queued on its stream, not waited for: pinned memory is the framework's to mind. */
        return cudaMemcpyAsync(device, host, size, cudaMemcpyHostToDevice, stream) == cudaSuccess
                   ? 0 : (++failed, -1);
    }
    staged++;
    /* Through its staging buffer, waited for before it is filled again. */
    if (cudaStreamSynchronize(stream) != cudaSuccess) return ++failed, -1;
    if (staging_size < size) {
        if (staging && cudaFreeHost(staging) != cudaSuccess) return ++failed, -1;
        if (cudaHostAlloc(&staging, size, cudaHostAllocPortable) != cudaSuccess)
            return ++failed, -1;
        staging_size = size;
        /* Its own pinned buffer, asked about as CuPy asks about a pool block a program
         * holds (cupyx.empty_pinned): pinned, whoever served the request. */
        if (!is_pinned(staging)) failed++;
    }
    memcpy(staging, host, size);
    return cudaMemcpyAsync(device, staging, size, cudaMemcpyHostToDevice, stream) == cudaSuccess
               ? 0 : (++failed, -1);
}

/* The program lets go of `host`: forgotten. */
void framework_forget(const void *host) {
    for (int i = 0; i < MAX_TOLD; i++) {
        if (told[i] == host) told[i] = NULL;
    }
}

/* Waits for its copies. */
int framework_synchronize(void) {
    return stream ? (int)cudaStreamSynchronize(stream) : 0;
}

/* direct, staged, flipped, failed. */
void framework_counts(long out[4]) {
    out[0] = direct, out[1] = staged, out[2] = flipped, out[3] = failed;
}
