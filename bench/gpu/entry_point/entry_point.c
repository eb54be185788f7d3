// The driver's pinned-memory functions taken through the runtime's
// cudaGetDriverEntryPointByVersion, as libraries do that call the driver without linking it.
// Eight 8 MiB pinned buffers: two copied to the GPU 20 times each (hot), six never (cold).
// Prints its own ground truth. Build: nvcc -cudart shared entry_point.c -lcuda -o entry_point
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>

typedef CUresult (*HostAlloc)(void **, size_t, unsigned int);
typedef CUresult (*FreeHost)(void *);

int main(void) {
    if (cudaFree(0) != cudaSuccess) return 1;
    void *alloc_fn = NULL, *free_fn = NULL;
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuMemHostAlloc", &alloc_fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess ||
        cudaGetDriverEntryPointByVersion("cuMemFreeHost", &free_fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess) {
        fprintf(stderr, "no entry points\n");
        return 1;
    }
    const size_t size = 8 << 20;
    void *host[8];
    for (int i = 0; i < 8; i++)
        if (((HostAlloc)alloc_fn)(&host[i], size, 0) != CUDA_SUCCESS) return 1;
    void *dev;
    cudaMalloc(&dev, size);
    long h2d = 0, h2d_bytes = 0;
    for (int round = 0; round < 20; round++)
        for (int i = 0; i < 2; i++) {
            cudaMemcpy(dev, host[i], size, cudaMemcpyHostToDevice);
            h2d++;
            h2d_bytes += size;
        }
    for (int i = 0; i < 8; i++) ((FreeHost)free_fn)(host[i]);
    cudaFree(dev);
    printf("{\"program\": \"entry_point\", \"pinned_allocs\": 8, \"h2d\": %ld, \"h2d_bytes\": %ld, "
           "\"d2h\": 0, \"d2h_bytes\": 0}\n", h2d, h2d_bytes);
    return 0;
}
