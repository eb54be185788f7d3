/* d2h_read: an asynchronous copy from the device into pageable memory returns only once the
 * copy is complete, so the program may read the destination at once. Each step puts new data
 * on the device (synchronous cudaMemcpy), starts the copy into a malloc'd destination reused
 * across steps and checks the destination without synchronising. Variants: cudaMemcpyAsync
 * (D2H), cuMemcpyDtoHAsync_v2, cudaMemcpy2DAsync (D2H), cudaMemcpyAsync (cudaMemcpyDefault). */
#include "cuda_decls.h"
#include "check.h"

#define SIZE (4 * MIB)
#define STEPS 8
#define ROW (64 * 1024) /* cudaMemcpy2DAsync: rows of 64 KiB into pitches of 64 KiB + 4 KiB */

enum { PLAIN, DRIVER, TWO_D, DEFAULT_KIND, VARIANTS };
static const char *const names[VARIANTS] = {"cudaMemcpyAsync_D2H", "cuMemcpyDtoHAsync_v2",
                                             "cudaMemcpy2DAsync_D2H", "cudaMemcpyAsync_Default"};

int main(void) {
    program_name = "d2h_read";
    cudaStream_t stream;
    void *device;
    CUDA_OK(cudaStreamCreate(&stream));
    CUDA_OK(cudaMalloc(&device, SIZE));
    size_t rows = SIZE / ROW, pitch = ROW + 4096;
    char *staging = (char *)malloc(SIZE);          /* what goes onto the device */
    char *destination = (char *)malloc(rows * pitch); /* reused by every step */
    if (!staging || !destination) return 2;
    memset(destination, 0, rows * pitch);

    struct tally tallies[VARIANTS];
    for (int v = 0; v < VARIANTS; v++) tally_init(&tallies[v], names[v]);
    for (int v = 0; v < VARIANTS; v++) {
        for (unsigned step = 0; step < STEPS; step++) {
            fill(staging, SIZE, step, (unsigned)v);
            CUDA_OK(cudaMemcpy(device, staging, SIZE, cudaMemcpyHostToDevice));
            STALL(stream);
            switch (v) {
            case PLAIN:
                CUDA_OK(cudaMemcpyAsync(destination, device, SIZE, cudaMemcpyDeviceToHost,
                                        stream));
                break;
            case DRIVER:
                CUDA_OK(cuMemcpyDtoHAsync_v2(destination, (CUdeviceptr)(uintptr_t)device, SIZE,
                                             (CUstream)stream));
                break;
            case TWO_D:
                CUDA_OK(cudaMemcpy2DAsync(destination, pitch, device, ROW, ROW, rows,
                                          cudaMemcpyDeviceToHost, stream));
                break;
            default:
                CUDA_OK(cudaMemcpyAsync(destination, device, SIZE, cudaMemcpyDefault, stream));
                break;
            }
            /* Allowed at once: the destination is pageable, so the copy is complete. */
            size_t wrong = 0;
            if (v == TWO_D) {
                /* Row r of the device data is words [r*ROW/8, (r+1)*ROW/8) of the pattern. */
                for (size_t r = 0; r < rows; r++) {
                    const uint64_t *row = (const uint64_t *)(destination + r * pitch);
                    for (size_t i = 0; i < ROW / 8; i++)
                        wrong += row[i] != pattern_word(r * (ROW / 8) + i, step, (unsigned)v);
                }
            } else {
                wrong = count_wrong(destination, SIZE, step, (unsigned)v);
            }
            tally_check(&tallies[v], step, wrong);
            CUDA_OK(cudaStreamSynchronize(stream));
        }
        tally_detail(&tallies[v]);
    }
    CUDA_OK(cudaStreamDestroy(stream));
    CUDA_OK(cudaFree(device));
    free(staging);
    free(destination);
    return report();
}
