/* mapped_capture: memory from cudaHostAlloc / cudaMallocHost is pinned, and programs rely on
 * it where only pinned memory will do. (1) A stream capture of copies from and to pinned
 * memory succeeds, and the instantiated graph, replayed after new data is written into the
 * pinned input, delivers it to the pinned output. (The CUDA stand-in refuses to capture copies
 * of pageable memory, error 900; CUDA 13 on an H100, driver 580, captured them.)
 * (2) cudaHostGetDevicePointer on such a block gives a device pointer that device-to-device
 * copies read and write. (3) cudaHostRegister of the program's own block succeeds and so does
 * its cudaHostUnregister; cudaHostGetFlags on a cudaMallocHost block succeeds. None of these
 * buffers is copied outside the graph and the device-pointer copies. (4) A capture of a copy
 * from malloc'd memory the program copies often: whatever CUDA answers for pageable memory
 * (the stand-in and CUDA before 13 refuse it, 900, and the capture ends invalidated, 901;
 * CUDA 13 captures it) is recorded, and the graph's data checked if there is one: the same
 * answers are expected with hotpin, which may have registered that memory. */
#ifndef _POSIX_C_SOURCE /* nvcc -x cu has set it already */
#define _POSIX_C_SOURCE 200112L
#endif
#include "cuda_decls.h"
#include "check.h"

#define SIZE (4 * MIB)
#define REPLAYS 5

/* A CUDA call whose success is what is being checked: counted, and its code kept. */
static int expect_success(struct tally *t, long step, const char *key, int rc) {
    tally_check(t, step, rc != 0);
    if (rc != 0) detail(key, "%d", rc);
    return rc == 0;
}

int main(void) {
    program_name = "mapped_capture";
    cudaStream_t stream;
    void *device, *device2;
    CUDA_OK(cudaStreamCreate(&stream));
    CUDA_OK(cudaMalloc(&device, SIZE));
    CUDA_OK(cudaMalloc(&device2, SIZE));
    char *check = (char *)malloc(SIZE);
    if (!check) return 2;

    /* (1) Capture, instantiate, replay. */
    struct tally capture, replays;
    tally_init(&capture, "capture_calls");
    tally_init(&replays, "graph_replays");
    void *in = NULL, *out = NULL;
    CUDA_OK(cudaHostAlloc(&in, SIZE, cudaHostAllocDefault));
    CUDA_OK(cudaMallocHost(&out, SIZE));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    int ok = expect_success(&capture, 0, "cudaStreamBeginCapture_rc",
                            (int)cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    if (ok) {
        /* Every call is made (and checked), as a program would; the capture ends either way. */
        int h2d = expect_success(&capture, 0, "capture_cudaMemcpyAsync_H2D_rc",
                                 (int)cudaMemcpyAsync(device, in, SIZE, cudaMemcpyHostToDevice,
                                                      stream));
        int d2h = expect_success(&capture, 0, "capture_cudaMemcpyAsync_D2H_rc",
                                 (int)cudaMemcpyAsync(out, device, SIZE, cudaMemcpyDeviceToHost,
                                                      stream));
        int end = expect_success(&capture, 0, "cudaStreamEndCapture_rc",
                                 (int)cudaStreamEndCapture(stream, &graph));
        ok = h2d && d2h && end && graph;
    }
    if (ok)
        ok = expect_success(&capture, 0, "cudaGraphInstantiate_rc",
                            (int)cudaGraphInstantiate(&exec, graph, 0));
    for (unsigned replay = 0; replay < REPLAYS; replay++) {
        if (!ok) {
            tally_check(&replays, replay, 1); /* no graph to replay */
            continue;
        }
        fill(in, SIZE, replay, 1);
        memset(out, 0, SIZE);
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        tally_check(&replays, replay, count_wrong(out, SIZE, replay, 1));
    }
    if (exec) CUDA_OK(cudaGraphExecDestroy(exec));
    if (graph) CUDA_OK(cudaGraphDestroy(graph));
    tally_detail(&capture);
    tally_detail(&replays);

    /* (2) The device pointer of a pinned block, read and written by device copies. */
    struct tally mapped;
    tally_init(&mapped, "device_pointer");
    void *block = NULL, *block_device = NULL;
    CUDA_OK(cudaHostAlloc(&block, SIZE, cudaHostAllocDefault));
    if (expect_success(&mapped, 0, "cudaHostGetDevicePointer_rc",
                       (int)cudaHostGetDevicePointer(&block_device, block, 0))) {
        detail("device_pointer_equals_host_pointer", "%d", block_device == block);
        fill(block, SIZE, 0, 2);
        CUDA_OK(cudaMemcpy(device2, block_device, SIZE, cudaMemcpyDeviceToDevice));
        CUDA_OK(cudaMemcpy(check, device2, SIZE, cudaMemcpyDeviceToHost));
        tally_check(&mapped, 0, count_wrong(check, SIZE, 0, 2));
        fill(check, SIZE, 1, 2);
        CUDA_OK(cudaMemcpy(device2, check, SIZE, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(block_device, device2, SIZE, cudaMemcpyDeviceToDevice));
        tally_check(&mapped, 1, count_wrong(block, SIZE, 1, 2));
    }
    tally_detail(&mapped);

    /* (3) The program's own registration, and the flags of a cudaMallocHost block. */
    struct tally registration;
    tally_init(&registration, "register_unregister_flags");
    void *own = NULL;
    if (posix_memalign(&own, 4096, SIZE) != 0) return 2;
    memset(own, 3, SIZE);
    if (expect_success(&registration, 0, "cudaHostRegister_rc",
                       (int)cudaHostRegister(own, SIZE, cudaHostRegisterDefault)))
        expect_success(&registration, 0, "cudaHostUnregister_rc", (int)cudaHostUnregister(own));
    free(own);
    unsigned flags = 77;
    if (expect_success(&registration, 0, "cudaHostGetFlags_rc", (int)cudaHostGetFlags(&flags, out)))
        detail("cudaHostGetFlags_flags", "%u", flags);
    tally_detail(&registration);

    /* (4) A capture of a copy from pageable memory that is copied often. */
    struct tally pageable;
    tally_init(&pageable, "pageable_capture");
    char *hot = (char *)malloc(SIZE);
    if (!hot) return 2;
    for (unsigned i = 0; i < 10; i++) {
        fill(hot, SIZE, i, 4);
        CUDA_OK(cudaMemcpy(device, hot, SIZE, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(check, device, SIZE, cudaMemcpyDeviceToHost));
        tally_check(&pageable, i, count_wrong(check, SIZE, i, 4));
    }
    cudaGraph_t hot_graph = NULL;
    cudaGraphExec_t hot_exec = NULL;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    int copy_rc = (int)cudaMemcpyAsync(device, hot, SIZE, cudaMemcpyHostToDevice, stream);
    int end_rc = (int)cudaStreamEndCapture(stream, &hot_graph);
    detail("pageable_capture_copy_rc", "%d", copy_rc);
    detail("pageable_capture_end_rc", "%d", end_rc);
    detail("pageable_capture_last_error", "%d", (int)cudaGetLastError());
    detail("pageable_capture_graph", "%d", hot_graph != NULL);
    if (end_rc == 0 && hot_graph) {
        CUDA_OK(cudaGraphInstantiate(&hot_exec, hot_graph, 0));
        fill(hot, SIZE, 11, 4);
        CUDA_OK(cudaGraphLaunch(hot_exec, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaMemcpy(check, device, SIZE, cudaMemcpyDeviceToHost));
        tally_check(&pageable, 11, count_wrong(check, SIZE, 11, 4));
        CUDA_OK(cudaGraphExecDestroy(hot_exec));
        CUDA_OK(cudaGraphDestroy(hot_graph));
    }
    tally_detail(&pageable);
    free(hot);

    CUDA_OK(cudaFreeHost(in));
    CUDA_OK(cudaFreeHost(out));
    CUDA_OK(cudaFreeHost(block));
    CUDA_OK(cudaFree(device));
    CUDA_OK(cudaFree(device2));
    CUDA_OK(cudaStreamDestroy(stream));
    free(check);
    return report();
}
