// A plain nvcc program (cudart linked statically, nvcc's default) doing known copies.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

int main(int argc, char **argv) {
    const size_t n = 4 << 20;
    const int k = argc > 1 ? atoi(argv[1]) : 50;
    void *dev, *pinned;
    void *pageable = malloc(n);
    CHECK(cudaMalloc(&dev, n));
    CHECK(cudaMallocHost(&pinned, n));
    for (int i = 0; i < k; i++) {
        CHECK(cudaMemcpy(dev, pageable, n, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(pageable, dev, n, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, 0));
        CHECK(cudaMemcpyAsync(pinned, dev, n, cudaMemcpyDeviceToHost, 0));
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaFree(dev));
    free(pageable);
    printf("{\"h2d\": %d, \"d2h\": %d, \"bytes_per_copy\": %zu, \"pinned_transfers\": %d}\n",
           2 * k, 2 * k, n, 2 * k);
    return 0;
}
