// The tracer's cost per traced copy: N four-byte copies host-to-device, either cudaMemcpy
// (sync) or cudaMemcpyAsync on a stream followed by a stream sync every 100 (async), timed
// inside the program. With "loop SECONDS" it keeps copying (sync) for that long, for attaching
// with --pid. Prints its own ground truth and, last, the wall clock at its exit.
// Build: nvcc -O2 -cudart shared copy_cost.cu -o copy_cost
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "sync";
    double n_arg = argc > 2 ? atof(argv[2]) : 40000;
    int *host, *dev;
    cudaMallocHost((void **)&host, 4);
    cudaMalloc((void **)&dev, 4);
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    long calls = 0;
    for (int i = 0; i < 100; i++) cudaMemcpy(dev, host, 4, cudaMemcpyHostToDevice);  // warm
    calls += 100;
    double start = now(CLOCK_MONOTONIC), seconds;
    long n = 0;
    if (strcmp(mode, "loop") == 0) {
        while (now(CLOCK_MONOTONIC) - start < n_arg) {
            cudaMemcpy(dev, host, 4, cudaMemcpyHostToDevice);
            n++;
        }
    } else if (strcmp(mode, "async") == 0) {
        for (n = 0; n < (long)n_arg; n++) {
            cudaMemcpyAsync(dev, host, 4, cudaMemcpyHostToDevice, stream);
            if (n % 100 == 99) cudaStreamSynchronize(stream);
        }
        cudaStreamSynchronize(stream);
    } else {
        for (n = 0; n < (long)n_arg; n++) cudaMemcpy(dev, host, 4, cudaMemcpyHostToDevice);
    }
    seconds = now(CLOCK_MONOTONIC) - start;
    calls += n;
    printf("{\"mode\": \"%s\", \"copies\": %ld, \"us_per_copy\": %.4f, \"h2d\": %ld, "
           "\"h2d_bytes\": %ld, \"d2h\": 0, \"d2h_bytes\": 0, \"exit_unix_s\": %.6f}\n",
           mode, n, seconds * 1e6 / n, calls, calls * 4, now(CLOCK_REALTIME));
    return 0;
}
