/* threads: the h2d_reuse and d2h_read rules hold on every thread and stream at once. Eight
 * threads, each with its own stream, device buffer and malloc'd buffers of 2 MiB, each do 20
 * steps of: fill the source, cudaMemcpyAsync it to the device, overwrite the source at once
 * (it is pageable: the copy has staged it), synchronise and check the device; then put new
 * data on the device, cudaMemcpyAsync it into the pageable destination and read that at once
 * (the copy is complete). Mismatches are summed over the threads. */
#include <pthread.h>

#include "cuda_decls.h"
#include "check.h"

#define SIZE (2 * MIB)
#define THREADS 8
#define STEPS 20

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct tally h2d_total, d2h_total;

static void add(struct tally *total, const struct tally *t) {
    pthread_mutex_lock(&lock);
    total->checks += t->checks;
    total->mismatches += t->mismatches;
    total->wrong_words += t->wrong_words;
    if (t->first_bad_step >= 0 &&
        (total->first_bad_step < 0 || t->first_bad_step < total->first_bad_step))
        total->first_bad_step = t->first_bad_step;
    pthread_mutex_unlock(&lock);
}

/* The worker's own tally: checks and mismatches are added to the program's under the lock. */
static void count(struct tally *t, long step, size_t wrong) {
    t->checks++;
    if (wrong) {
        t->mismatches++;
        t->wrong_words += (long)wrong;
        if (t->first_bad_step < 0) t->first_bad_step = step;
    }
}

static void *worker(void *arg) {
    unsigned id = (unsigned)(uintptr_t)arg;
    cudaStream_t stream;
    void *device;
    CUDA_OK(cudaStreamCreate(&stream));
    CUDA_OK(cudaMalloc(&device, SIZE));
    char *source = (char *)malloc(SIZE);
    char *destination = (char *)malloc(SIZE);
    char *check = (char *)malloc(SIZE);
    if (!source || !destination || !check) exit(2);
    memset(destination, 0, SIZE);
    struct tally h2d, d2h;
    tally_init(&h2d, "h2d");
    tally_init(&d2h, "d2h");
    for (unsigned step = 0; step < STEPS; step++) {
        fill(source, SIZE, step, id * 2);
        STALL(stream);
        CUDA_OK(cudaMemcpyAsync(device, source, SIZE, cudaMemcpyHostToDevice, stream));
        memset(source, 0xEE, SIZE);
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(check, device, SIZE, cudaMemcpyDeviceToHost));
        count(&h2d, step, count_wrong(check, SIZE, step, id * 2));

        fill(check, SIZE, step, id * 2 + 1);
        CUDA_OK(cudaMemcpy(device, check, SIZE, cudaMemcpyHostToDevice));
        STALL(stream);
        CUDA_OK(cudaMemcpyAsync(destination, device, SIZE, cudaMemcpyDeviceToHost, stream));
        count(&d2h, step, count_wrong(destination, SIZE, step, id * 2 + 1));
        CUDA_OK(cudaStreamSynchronize(stream));
    }
    add(&h2d_total, &h2d);
    add(&d2h_total, &d2h);
    CUDA_OK(cudaStreamDestroy(stream));
    CUDA_OK(cudaFree(device));
    free(source);
    free(destination);
    free(check);
    return NULL;
}

int main(void) {
    program_name = "threads";
    tally_init(&h2d_total, "h2d_reuse");
    tally_init(&d2h_total, "d2h_read");
    pthread_t threads[THREADS];
    for (unsigned i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, worker, (void *)(uintptr_t)i) != 0) return 2;
    for (unsigned i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    checks = h2d_total.checks + d2h_total.checks;
    mismatches = h2d_total.mismatches + d2h_total.mismatches;
    tally_detail(&h2d_total);
    tally_detail(&d2h_total);
    detail("threads", "%d", THREADS);
    return report();
}
