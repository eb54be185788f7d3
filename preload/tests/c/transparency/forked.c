/* forked: a forked child of a CUDA program may not use CUDA, but its memory is its own, and
 * the parent's CUDA goes on as before. The parent does h2d_reuse and d2h_read steps (copies
 * from and to pageable memory, the source overwritten and the destination read at once), then
 * forks; the child, making no CUDA call, mallocs, fills, copies and frees large buffers and
 * checks its own data, exiting 0 or 1; the parent waits for it and does more steps. A child
 * that fails or dies counts as a mismatch. */
#ifndef _POSIX_C_SOURCE /* nvcc -x cu has set it already */
#define _POSIX_C_SOURCE 200112L
#endif
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_decls.h"
#include "check.h"

#define SIZE (4 * MIB)
#define STEPS 6

static cudaStream_t stream;
static void *device;
static char *source, *destination, *check;
static struct tally h2d, d2h, child;

static void parent_steps(unsigned first) {
    for (unsigned step = first; step < first + STEPS; step++) {
        fill(source, SIZE, step, 1);
        STALL(stream);
        CUDA_OK(cudaMemcpyAsync(device, source, SIZE, cudaMemcpyHostToDevice, stream));
        memset(source, 0xEE, SIZE);
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(check, device, SIZE, cudaMemcpyDeviceToHost));
        tally_check(&h2d, step, count_wrong(check, SIZE, step, 1));

        fill(check, SIZE, step, 2);
        CUDA_OK(cudaMemcpy(device, check, SIZE, cudaMemcpyHostToDevice));
        STALL(stream);
        CUDA_OK(cudaMemcpyAsync(destination, device, SIZE, cudaMemcpyDeviceToHost, stream));
        tally_check(&d2h, step, count_wrong(destination, SIZE, step, 2));
        CUDA_OK(cudaStreamSynchronize(stream));
    }
}

/* The child: no CUDA. Its own large blocks, filled, copied, freed and allocated again. */
static int child_work(void) {
    size_t wrong = 0;
    char *blocks[4];
    for (unsigned round = 0; round < 5; round++) {
        for (unsigned i = 0; i < 4; i++) {
            blocks[i] = (char *)malloc(SIZE);
            if (!blocks[i]) return 1;
            fill(blocks[i], SIZE, round, 10 + i);
        }
        /* The parent's buffers, as they were at fork, are the child's too. */
        memcpy(blocks[0], check, SIZE);
        wrong += count_wrong(blocks[0], SIZE, STEPS - 1, 2);
        for (unsigned i = 1; i < 4; i++) wrong += count_wrong(blocks[i], SIZE, round, 10 + i);
        for (unsigned i = 0; i < 4; i++) free(blocks[i]);
    }
    return wrong == 0 ? 0 : 1;
}

int main(void) {
    program_name = "forked";
    CUDA_OK(cudaStreamCreate(&stream));
    CUDA_OK(cudaMalloc(&device, SIZE));
    source = (char *)malloc(SIZE);
    destination = (char *)malloc(SIZE);
    check = (char *)malloc(SIZE);
    if (!source || !destination || !check) return 2;
    memset(destination, 0, SIZE);
    tally_init(&h2d, "h2d_reuse");
    tally_init(&d2h, "d2h_read");
    tally_init(&child, "child");

    parent_steps(0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) _exit(child_work());
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return 2;
    tally_check(&child, 0, !(WIFEXITED(status) && WEXITSTATUS(status) == 0));
    if (WIFEXITED(status))
        detail("child_exit_status", "%d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        detail("child_signal", "%d", WTERMSIG(status));
    parent_steps(STEPS);

    tally_detail(&h2d);
    tally_detail(&d2h);
    tally_detail(&child);
    CUDA_OK(cudaStreamDestroy(stream));
    CUDA_OK(cudaFree(device));
    free(source);
    free(destination);
    free(check);
    return report();
}
