/* cache_handoff: an asynchronous copy from pageable memory to the device returns once the
 * source is staged, so a program may free the source at once, and the next allocation of that
 * size (perhaps the same block) belongs to whoever gets it. Like a training loop's tensors:
 * every step, with the size changing from step to step, four source tensors are filled and
 * copied to four device slots on two streams; two are freed right after their copy and two
 * after all four are issued, and each free is followed by another tensor of the same size that
 * is filled at once. After synchronising, every device slot must hold its source's data and
 * every live tensor its own. */
#include "cuda_decls.h"
#include "check.h"

#define STEPS 16
#define SLOTS 4
#define MAX_SIZE (6 * MIB)

static const size_t sizes[] = {2 * MIB, 3 * MIB + 512 * 1024, 4 * MIB, 6 * MIB, 3 * MIB};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static char *tensor(size_t size) {
    char *p = (char *)malloc(size);
    if (!p) exit(2);
    return p;
}

int main(void) {
    program_name = "cache_handoff";
    cudaStream_t streams[2];
    void *slots[SLOTS];
    CUDA_OK(cudaStreamCreate(&streams[0]));
    CUDA_OK(cudaStreamCreate(&streams[1]));
    for (int j = 0; j < SLOTS; j++) CUDA_OK(cudaMalloc(&slots[j], MAX_SIZE));
    char *check = tensor(MAX_SIZE);
    struct tally device_data, live_tensors;
    tally_init(&device_data, "device_slots");
    tally_init(&live_tensors, "live_tensors");

    char *held = NULL; /* one tensor lives on into the next step */
    size_t held_size = 0;
    unsigned held_step = 0, held_tag = 0;
    for (unsigned step = 0; step < STEPS; step++) {
        size_t size = sizes[step % NSIZES];
        char *sources[SLOTS];
        char *others[SLOTS]; /* the tensors allocated after each free */
        STALL(streams[0]);
        STALL(streams[1]);
        for (int j = 0; j < SLOTS; j++) {
            sources[j] = tensor(size);
            fill(sources[j], size, step, (unsigned)j);
            CUDA_OK(cudaMemcpyAsync(slots[j], sources[j], size, cudaMemcpyHostToDevice,
                                    streams[j % 2]));
            others[j] = NULL;
            if (j % 2) {
                free(sources[j]);
                sources[j] = NULL;
                others[j] = tensor(size);
                fill(others[j], size, step, 100u + (unsigned)j);
            }
        }
        /* The tensor held from the last step goes too, and one of its size is made. */
        if (held) {
            tally_check(&live_tensors, step, count_wrong(held, held_size, held_step, held_tag));
            free(held);
            held = tensor(held_size);
            held_step = step;
            held_tag = 200;
            fill(held, held_size, held_step, held_tag);
        }
        for (int j = 0; j < SLOTS; j += 2) {
            free(sources[j]);
            others[j] = tensor(size);
            fill(others[j], size, step, 100u + (unsigned)j);
        }
        CUDA_OK(cudaStreamSynchronize(streams[0]));
        CUDA_OK(cudaStreamSynchronize(streams[1]));
        for (int j = 0; j < SLOTS; j++) {
            CUDA_OK(cudaMemcpy(check, slots[j], size, cudaMemcpyDeviceToHost));
            tally_check(&device_data, step, count_wrong(check, size, step, (unsigned)j));
        }
        for (int j = 0; j < SLOTS; j++)
            tally_check(&live_tensors, step, count_wrong(others[j], size, step, 100u + (unsigned)j));
        /* One of this step's tensors is held into the next; the rest are freed. */
        for (int j = 1; j < SLOTS; j++) free(others[j]);
        if (!held) {
            held = others[0];
            held_size = size;
            held_step = step;
            held_tag = 100;
        } else {
            free(others[0]);
        }
    }
    tally_check(&live_tensors, STEPS, count_wrong(held, held_size, held_step, held_tag));
    free(held);
    tally_detail(&device_data);
    tally_detail(&live_tensors);
    for (int j = 0; j < SLOTS; j++) CUDA_OK(cudaFree(slots[j]));
    CUDA_OK(cudaStreamDestroy(streams[0]));
    CUDA_OK(cudaStreamDestroy(streams[1]));
    free(check);
    return report();
}
