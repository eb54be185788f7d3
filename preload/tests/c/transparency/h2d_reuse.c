/* h2d_reuse: an asynchronous copy from pageable memory to the device returns once the source
 * is staged, so the program may overwrite the source at once. Each step fills a malloc'd
 * source, starts the copy, scribbles over the source, then synchronises and checks that the
 * device got the data as it was when the copy was issued. Variants: cudaMemcpyAsync (H2D),
 * cuMemcpyHtoDAsync_v2, cudaMemcpyAsync (cudaMemcpyDefault), cudaMemcpy2DAsync (H2D). */
#include "cuda_decls.h"
#include "check.h"

#define SIZE (4 * MIB)
#define STEPS 8
#define ROW (64 * 1024) /* cudaMemcpy2DAsync: rows of 64 KiB with pitches of 64 KiB + 4 KiB */

enum { PLAIN, DRIVER, DEFAULT_KIND, TWO_D, VARIANTS };
static const char *const names[VARIANTS] = {"cudaMemcpyAsync_H2D", "cuMemcpyHtoDAsync_v2",
                                             "cudaMemcpyAsync_Default", "cudaMemcpy2DAsync_H2D"};

int main(void) {
    program_name = "h2d_reuse";
    cudaStream_t stream;
    void *device;
    CUDA_OK(cudaStreamCreate(&stream));
    CUDA_OK(cudaMalloc(&device, SIZE));
    /* The 2D variant packs the source (pitch ROW + 4 KiB) into rows of ROW bytes: the source
     * buffer is big enough for either layout. */
    size_t rows = SIZE / ROW, pitch = ROW + 4096;
    char *source = (char *)malloc(rows * pitch);
    char *check = (char *)malloc(SIZE);
    if (!source || !check) return 2;

    struct tally tallies[VARIANTS];
    for (int v = 0; v < VARIANTS; v++) tally_init(&tallies[v], names[v]);
    for (int v = 0; v < VARIANTS; v++) {
        for (unsigned step = 0; step < STEPS; step++) {
            if (v == TWO_D) {
                for (size_t r = 0; r < rows; r++)
                    fill(source + r * pitch, ROW, step, (unsigned)(v * 1000 + r));
            } else {
                fill(source, SIZE, step, (unsigned)v);
            }
            STALL(stream);
            switch (v) {
            case PLAIN:
                CUDA_OK(cudaMemcpyAsync(device, source, SIZE, cudaMemcpyHostToDevice, stream));
                break;
            case DRIVER:
                CUDA_OK(cuMemcpyHtoDAsync_v2((CUdeviceptr)(uintptr_t)device, source, SIZE,
                                             (CUstream)stream));
                break;
            case DEFAULT_KIND:
                CUDA_OK(cudaMemcpyAsync(device, source, SIZE, cudaMemcpyDefault, stream));
                break;
            default:
                CUDA_OK(cudaMemcpy2DAsync(device, ROW, source, pitch, ROW, rows,
                                          cudaMemcpyHostToDevice, stream));
                break;
            }
            /* Allowed: the source is pageable, so the copy has taken what it needs. */
            memset(source, 0xEE, rows * pitch);
            CUDA_OK(cudaStreamSynchronize(stream));
            CUDA_OK(cudaMemcpy(check, device, SIZE, cudaMemcpyDeviceToHost));
            size_t wrong = 0;
            if (v == TWO_D) {
                for (size_t r = 0; r < rows; r++)
                    wrong += count_wrong(check + r * ROW, ROW, step, (unsigned)(v * 1000 + r));
            } else {
                wrong = count_wrong(check, SIZE, step, (unsigned)v);
            }
            tally_check(&tallies[v], step, wrong);
        }
        tally_detail(&tallies[v]);
    }
    CUDA_OK(cudaStreamDestroy(stream));
    CUDA_OK(cudaFree(device));
    free(source);
    free(check);
    return report();
}
